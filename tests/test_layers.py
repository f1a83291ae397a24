"""The layering of STYLE.md: a module imports only from layers below it."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "pmac"

# lowest first; modules not listed sit at the layer of the nearest listed prefix
LAYERS = [
    {"__init__", "units", "errors"},
    {"schema", "table", "mpi"},
    {"profile", "trace", "memsig"},
    {"signature", "counters", "fit", "capacity", "noise", "reuse", "simgrid", "otf2", "importers", "tracer", "memtrace",
     "shim", "vgtool", "rawtrace", "perf"},
    {"convolve", "replay", "network", "collectives", "topology", "overlap", "expand", "pollution", "interpreter",
     "phases"},
    # probe: measures, fits, calibrates (overlap; exchange by replay); pool: fits probes again;
    # state: the probe's kernels now against a profile's repetitions (pmac check)
    {"predict", "probe", "pool", "calibrate", "state"},
    {"sweep", "scaling", "cluster", "validate", "emulated"},
    {"report"},
    {"cli", "__main__"},
]


def layer_of(mod: str) -> int:
    head = mod.split(".")[0]
    for i, layer in enumerate(LAYERS):
        if head in layer or any(head.startswith(x + "_") for x in layer):
            return i
    return -1


def test_imports_go_downwards():
    bad = []
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG).with_suffix("")
        mod = ".".join(rel.parts)
        me = layer_of(mod)
        if me < 0:
            bad.append(f"{mod}: not assigned to a layer in tests/test_layers.py")
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module and node.module.startswith("pmac."):
                    targets.append(node.module[5:])
                elif node.level >= 1:
                    base = rel.parts[: len(rel.parts) - node.level]
                    targets.append(".".join(list(base) + ([node.module] if node.module else [])))
            elif isinstance(node, ast.Import):
                targets += [a.name[5:] for a in node.names if a.name.startswith("pmac.")]
            for t in targets:
                if not t:
                    continue
                lt = layer_of(t)
                if lt > me:
                    bad.append(f"{mod} (layer {me}) imports {t} (layer {lt})")
    assert not bad, "\n".join(bad)

"""Machine profiles from other tools' files: kerncraft machine files, STREAM output, OSU output.

Each importer returns a :class:`MachineProfile` with what the source holds and names what it
lacks (``provenance["lacks"]`` and the description): a kerncraft file has no network, an OSU
run has no node. ``pmac combine`` joins a node from one source with a network from another.

Units as the sources write them: kerncraft ``GB/s`` and ``kB`` are decimal; STREAM's ``MB/s``
is 1e6 B/s; OSU's latency is one-way in microseconds and its bandwidth ``MB/s`` is 1e6 B/s.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from .errors import InputError
from .fit_network import fit_link
from .profile import (BandwidthCurve, CacheLevel, ComputeModel, LinkModel, MachineProfile,
                      MemoryLevel, NetworkModel, NodeModel)
from .schema import provenance, sha256_file
from .units import parse_quantity

KERNCRAFT_LICENCE = ("kerncraft machine files are data from RRZE-HPC/kerncraft, licensed "
                     "AGPL-3.0; keep this note with any copy of the data derived from them")

#: kerncraft benchmark kernel -> pmac access kind (kernels without an equivalent are kept
#: in provenance only: daxpy, triad, update mix reads and writes differently)
KERNCRAFT_KINDS = {"load": "load_unit", "copy": "copy"}


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except (IsADirectoryError, UnicodeDecodeError):
        raise InputError("not a text file", path=path) from None


def _q(value, unit: str, path: Path, where: str) -> float:
    try:
        return parse_quantity(str(value).strip(), unit)
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}", path=path) from None


# ---------------------------------------------------------------- kerncraft

def _simd_bits(compiler_flags: str) -> int:
    f = compiler_flags.lower()
    m = re.search(r"sve-vector-bits=(\d+)", f)
    if m:
        return int(m.group(1))
    if "avx512" in f:
        return 512
    if "avx2" in f or "znver" in f or "avx" in f or "haswell" in f:
        return 256
    return 128


def import_kerncraft(path: str | Path, *, name: str) -> MachineProfile:
    """A profile (node only) from a kerncraft machine file."""
    path = Path(path)
    text = _read_text(path)
    try:
        # the safe loader, in C when PyYAML has it (kerncraft files run to thousands of lines)
        d = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {getattr(exc, 'problem', exc)}", path=path) from None
    if not isinstance(d, dict) or "memory hierarchy" not in d:
        raise InputError("not a kerncraft machine file (no 'memory hierarchy')", path=path)
    lacks: list[str] = ["network (kerncraft describes one node)", "random-access (gather) bandwidth",
                        "store-only bandwidth", "load-to-use latency per level",
                        "dependency and branch probes", "raw repetitions"]
    sockets = int(d.get("sockets") or 1)
    cores_per_socket = int(d.get("cores per socket") or 1)
    n_cores = sockets * cores_per_socket
    meas = (d.get("benchmarks") or {}).get("measurements") or {}

    def bandwidths(level: str) -> tuple[dict, dict, float | None]:
        per_tpc = meas.get(level) or {}
        m = per_tpc.get(1) or (per_tpc[min(per_tpc)] if per_tpc else None)
        if not m:
            return {}, {}, None
        one, allc = {}, {}
        for kernel, kind in KERNCRAFT_KINDS.items():
            vals = (m.get("results") or {}).get(kernel)
            if not vals:
                continue
            one[kind] = _q(vals[0], "bytes_per_s", path, f"{level} {kernel}")
            # measurements cover one socket (1..cores per socket); the node has `sockets` of them
            allc[kind] = _q(vals[-1], "bytes_per_s", path, f"{level} {kernel}") * sockets
        spc = m.get("size per core")
        ws = _q(spc[0], "bytes", path, f"{level} size per core") if spc else None
        return one, allc, ws

    caches = []
    curve_points = []
    memory = MemoryLevel()
    for lv in d["memory hierarchy"]:
        level = str(lv.get("level"))
        one, allc, ws = bandwidths(level)
        if ws is not None and "load_unit" in one:
            curve_points.append((ws, one["load_unit"]))
        if level == "MEM":
            memory = MemoryLevel(bandwidth_1core_bytes_per_s=one, bandwidth_allcores_bytes_per_s=allc)
            continue
        geo = lv.get("cache per group") or {}
        if geo.get("sets") and geo.get("ways") and geo.get("cl_size"):
            size = int(geo["sets"]) * int(geo["ways"]) * int(geo["cl_size"])
        elif lv.get("size per group"):
            size = int(_q(lv["size per group"], "bytes", path, f"{level} size per group"))
        else:
            raise InputError(f"cache level {level} has neither 'cache per group' geometry nor a size", path=path)
        caches.append(CacheLevel(
            name=level, size_bytes=size, line_bytes=int(geo.get("cl_size") or 64),
            ways=int(geo.get("ways") or 8), shared_by_cores=int(lv.get("cores per group") or 1),
            bandwidth_1core_bytes_per_s=one, bandwidth_allcores_bytes_per_s=allc,
            source=f"imported:{path.name}"))
    if not memory.bandwidth_1core_bytes_per_s:
        lacks.append("memory bandwidth")
    clock = _q(d["clock"], "hz", path, "clock") if d.get("clock") else None
    compute = None
    dp = (d.get("FLOPs per cycle") or {}).get("DP") or {}
    compilers = d.get("compiler") or []
    flags = " ".join(str(v) for _, v in (compilers.items() if isinstance(compilers, dict) else compilers))
    if clock and isinstance(dp.get("total"), (int, float)):
        bits = _simd_bits(flags)
        simd = float(dp["total"]) * clock
        compute = ComputeModel(isa=str(d.get("isa") or "unknown"), flop_per_s_simd=simd,
                               flop_per_s_scalar=simd / max(1, bits // 64), simd_width_bits=bits,
                               clock_hz=clock)
    else:
        lacks.insert(1, "compute rates (FLOPs per cycle not given)")
    xs = sorted(curve_points)
    curves = ()
    if len(xs) >= 2 and all(b[0] > a[0] for a, b in zip(xs, xs[1:])):
        curves = (BandwidthCurve(access="load_unit", n_cores=1, working_set_bytes=tuple(x for x, _ in xs),
                                 bandwidth_bytes_per_s=tuple(y for _, y in xs)),)
    cpu = str(d.get("model name") or d.get("model type") or path.stem)
    node = NodeModel(cpu_model=cpu, n_cores=n_cores, caches=tuple(caches), memory=memory,
                     compute=compute, bandwidth_curves=curves)
    desc = (f"{cpu}, imported from kerncraft machine file {path.name}. Lacks: {'; '.join(lacks)}. "
            f"{KERNCRAFT_LICENCE}.")
    prov = provenance(inputs={path.name: path}, importer="kerncraft", source_file=str(path),
                      licence=KERNCRAFT_LICENCE, lacks=lacks,
                      notes=["all-core bandwidth = one socket's full-socket measurement x sockets",
                             "scalar flop rate = SIMD rate / doubles per SIMD register (estimated)",
                             "copy counts bytes read and written, as kerncraft reports it"],
                      kerncraft_version=str(d.get("kerncraft version", "")))
    return MachineProfile(name=name, description=desc, node=node, provenance=prov)


# ---------------------------------------------------------------- STREAM

_STREAM_ROW = re.compile(r"^\s*(Copy|Scale|Add|Triad):\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)")


def parse_stream(path: str | Path) -> dict:
    """Best rates (B/s), array size and threads of a STREAM run's output."""
    path = Path(path)
    text = _read_text(path)
    rates = {}
    for line in text.splitlines():
        m = _STREAM_ROW.match(line)
        if m:
            rates[m.group(1).lower()] = float(m.group(2)) * 1e6
    if "copy" not in rates:
        raise InputError("no STREAM result table found (expected a 'Copy:' row with 'Best Rate MB/s')", path=path)
    m = re.search(r"Array size\s*=\s*(\d+)", text)
    m_el = re.search(r"Memory per array\s*=\s*([0-9.]+)\s*MiB", text)
    threads = re.search(r"Number of Threads (?:counted|requested)\s*=\s*(\d+)", text)
    return {"rates_bytes_per_s": rates, "array_elements": int(m.group(1)) if m else None,
            "array_bytes": float(m_el.group(1)) * 2**20 if m_el else None,
            "n_threads": int(threads.group(1)) if threads else 1}


def import_stream(path: str | Path, *, name: str, cpu_model: str = "unknown",
                  n_cores: int | None = None) -> MachineProfile:
    """A profile with main-memory copy bandwidth from STREAM output (nothing else)."""
    path = Path(path)
    s = parse_stream(path)
    n_threads = s["n_threads"]
    cores = n_cores or n_threads
    copy = {"copy": s["rates_bytes_per_s"]["copy"]}
    mem = (MemoryLevel(bandwidth_1core_bytes_per_s=copy) if n_threads == 1
           else MemoryLevel(bandwidth_allcores_bytes_per_s=copy))
    lacks = ["caches", "load/store/random bandwidths (STREAM copy only)", "memory latency",
             "compute rates", "network"]
    node = NodeModel(cpu_model=cpu_model, n_cores=cores, caches=(), memory=mem)
    desc = (f"memory bandwidth from STREAM output {path.name} ({n_threads} thread(s)). "
            f"Lacks: {'; '.join(lacks)}.")
    prov = provenance(inputs={path.name: path}, importer="stream", source_file=str(path), lacks=lacks,
                      stream=s, notes=["STREAM copy counts 16 bytes per element (read + write)"])
    return MachineProfile(name=name, description=desc, node=node, provenance=prov)


# ---------------------------------------------------------------- OSU micro-benchmarks

def parse_osu(path: str | Path) -> tuple[str, np.ndarray, np.ndarray]:
    """(metric header, sizes, values) of an osu_latency / osu_bw output."""
    path = Path(path)
    text = _read_text(path)
    header = ""
    sizes, vals = [], []
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if "Size" in s:
                header = s
            continue
        parts = s.split()
        try:
            sizes.append(float(parts[0]))
            vals.append(float(parts[1]))
        except (ValueError, IndexError):
            raise InputError(f"cannot read line {s!r} (expected 'SIZE VALUE')", path=path) from None
    if not sizes:
        raise InputError("no 'SIZE VALUE' rows found in OSU output", path=path)
    return header, np.array(sizes), np.array(vals)


def link_from_osu(lat_path: str | Path, bw_path: str | Path | None = None) -> LinkModel:
    header, sizes, lat_us = parse_osu(lat_path)
    if "latency" not in header.lower() and "us" not in header:
        raise InputError(f"not osu_latency output (header {header!r})", path=lat_path)
    stream_bw = None
    if bw_path is not None:
        bh, bsz, mbs = parse_osu(bw_path)
        if "bandwidth" not in bh.lower() and "mb/s" not in bh.lower():
            raise InputError(f"not osu_bw output (header {bh!r})", path=bw_path)
        stream_bw = float(np.max(mbs)) * 1e6
    return fit_link(sizes, lat_us * 1e-6, streaming_bandwidth_bytes_per_s=stream_bw)


def import_osu(lat_path: str | Path, bw_path: str | Path | None = None, *, name: str,
               placement: str = "inter_node", mpi_library: str = "") -> MachineProfile:
    """A profile with one point-to-point link from osu_latency (+ osu_bw) output."""
    if placement not in ("intra_node", "inter_node"):
        raise InputError(f"placement must be intra_node or inter_node, got {placement!r}")
    lat_path = Path(lat_path)
    link = link_from_osu(lat_path, bw_path)
    net = NetworkModel(**{placement: link}, mpi_library=mpi_library)
    other = "intra_node" if placement == "inter_node" else "inter_node"
    lacks = ["node", f"network.{other}", "send/receive overheads (ping-pong alone cannot split them)",
             "collectives"]
    if bw_path is None:
        lacks.append("streaming bandwidth")
    inputs = {lat_path.name: lat_path}
    if bw_path is not None:
        inputs[Path(bw_path).name] = Path(bw_path)
    desc = f"{placement} link from OSU output {', '.join(inputs)}. Lacks: {'; '.join(lacks)}."
    prov = provenance(inputs=inputs, importer="osu", lacks=lacks,
                      notes=["osu_latency reports one-way time (half the round trip)"])
    return MachineProfile(name=name, description=desc, network=net, provenance=prov)


__all__ = ["import_kerncraft", "import_stream", "import_osu", "parse_stream", "parse_osu",
           "link_from_osu", "KERNCRAFT_LICENCE", "sha256_file"]

"""pmac pool A.yaml B.yaml ... --name NAME [--statistic best|median] [--out-dir machines]: several
probes of one machine, their repetitions pooled and fitted again into one profile (pmac.pool)."""

from __future__ import annotations

import sys
from pathlib import Path

HELP = "pool several probes of one machine (or refit one) into a profile: every repetition, one statistic"


def add_arguments(p):
    p.add_argument("profiles", nargs="+", metavar="PROFILE.yaml",
                   help="probed profiles of one machine (same host, CPU and cores), each with its raw sidecar")
    p.add_argument("--name", required=True, help="the pooled profile's name: writes OUT_DIR/NAME.yaml and NAME.raw.npz")
    p.add_argument("--statistic", default="best",
                   help="each memory and compute point at the median of its fastest few repetitions (best: as pmac "
                        "probe), of all of them (median: the machine as it typically ran over the probes' span), or a "
                        "number q in (0, 1): the value a share q of them is at least as fast as (pmac.pool)")
    p.add_argument("--drop-apart", action="store_true",
                   help="leave out the probes whose figures stand more than 3x from the others' median (three "
                        "probes or more; they are named either way: pmac.pool.standing_apart)")
    p.add_argument("--out-dir", default="machines", help="directory for the profile (default: machines)")


def run(args) -> int:
    from ..errors import InputError
    from ..pool import describe, pool, pool_notes, slow_quantile_of
    from ..probe import write_pair
    from ..profile import check_machine_name
    from ..schema import ensure_folder

    slow_quantile_of(args.statistic)        # an unknown statistic fails before any file is read

    check_machine_name(args.name)
    out = Path(args.out_dir) / f"{args.name}.yaml"
    ensure_folder(out.parent, "output directory", try_write=True)
    if any(Path(p).resolve() == out.resolve() for p in args.profiles):
        raise InputError("the pooled profile would overwrite one of its inputs: choose another --name or --out-dir",
                         path=out)
    prof, raw = pool(args.profiles, name=args.name, statistic=args.statistic,
                     command="pmac " + " ".join(sys.argv[1:]), drop_apart=args.drop_apart)
    lost = _added_and_lost(out, prof)
    prof = write_pair(prof, raw, out)
    n = raw["compute"].groupby(["probe", "param"]).size()
    print(f"wrote {out} and {prof.raw_file}: {len(prof.provenance['pooled_from'])} probe(s) pooled, each point at "
          f"{describe(args.statistic)} "
          f"({int(n.min())}-{int(n.max())} repetitions a compute point)")
    node = prof.node
    print(f"  scalar {node.compute.scalar_rate / 1e9:.2f} Gflop/s, "
          f"SIMD {node.compute.flop_per_s_simd / 1e9:.2f}; "
          f"memory load bandwidth 1 core {node.memory.bandwidth_1core_bytes_per_s.get('load_unit', 0) / 1e9:.1f} GB/s"
          + (f"; overlap beta {prof.overlap.params.get('beta', float('nan')):.3f}" if prof.overlap else ""))
    for w in pool_notes(prof):
        print(f"  warning: {w}")
    from ..state import two_states_note

    if (states := two_states_note(raw["compute"])) is not None:      # the repetitions just written
        print(f"  note: {states}")
    for section, flag in lost:
        print(f"  note: the {out} this replaced had node.{section} (pmac probe {flag}), which none of the pooled "
              f"probes measured: the new profile has none; pmac probe {flag} {out} measures it again")
    return 0


#: the node sections a probe adds to an existing profile, and the flag that adds them
ADDED_SECTIONS = (("noise", "--add-noise"), ("alias", "--add-alias"))


def _added_and_lost(out: Path, prof) -> list[tuple[str, str]]:
    """(section, flag) of each section that ``out``, the profile about to be replaced, had and the
    pooled ``prof`` lacks: sections added by ``pmac probe --add-...`` to a profile, which its
    rounds' probes do not hold (machines/README.md). Nothing where ``out`` is absent or unreadable."""
    from ..errors import InputError
    from ..profile import load_profile

    try:
        old = load_profile(out) if out.exists() else None
    except InputError:
        return []
    if old is None or old.node is None:
        return []
    return [(s, flag) for s, flag in ADDED_SECTIONS
            if getattr(old.node, s) is not None and getattr(prof.node, s) is None]

"""pmac probe --name NAME [--quick] [--out-dir machines] [--rounds K [--gap S]] [--statistic S]:
measure this machine, write its profile (``--add-fetch FILE.yaml`` / ``--add-noise FILE.yaml`` /
``--add-alias FILE.yaml``: only the instruction-fetch, the noise or the 4 KiB-aliasing probe, into an
existing profile).

``--rounds K``: K probes in turn, kept in OUT_DIR/NAME.rounds/round-I/, pooled (pmac.pool) into
OUT_DIR/NAME.yaml at ``--statistic`` (default ``median`` then: the machine as it typically ran over
the rounds' span). On a shared machine one probe describes one moment: bench/accuracy's
interleaved runs on the development VM (docs/accuracy.md) predicted 9.2 % from the median of four probes
pooled against 10.2 % from the first of them alone, over eighteen runs."""

from __future__ import annotations

import sys

from .progress import ProgressBar

HELP = "probe this machine (memory, compute, network) and write machines/NAME.yaml"


def add_arguments(p):
    p.add_argument("--name", help="profile name: writes OUT_DIR/NAME.yaml and NAME.raw.npz")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repetitions (< 2 min on 2 cores)")
    p.add_argument("--out-dir", default="machines", help="directory for the profile (default: machines)")
    p.add_argument("--no-network", action="store_true", help="probe the node only (no MPI ping-pong)")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    p.add_argument("--pages", choices=("default", "huge"), default=None,
                   help="pages of the memory probe's buffers: 'default' what a plain allocation gets on this "
                        "system (4 KiB where transparent huge pages are 'madvise', as a C or Fortran program's "
                        "malloc'd arrays), 'huge' huge pages asked for (as numpy asks for its large arrays); "
                        "default: huge (pmac.probe.DEFAULT_PAGES)")
    p.add_argument("--add-fetch", metavar="FILE.yaml",
                   help="run only the instruction-fetch probe and write it into this existing profile of this "
                        "machine (node.fetch; a profile probed before that probe existed)")
    p.add_argument("--add-noise", metavar="FILE.yaml",
                   help="run only the noise probe (each core's speed over time) and write it into this existing "
                        "profile of this machine (node.noise, for pmac predict --noise)")
    p.add_argument("--add-alias", metavar="FILE.yaml",
                   help="run only the 4 KiB-aliasing probe (a load held back by a recent store at its 4 KiB "
                        "phase) and write it into this existing profile of this machine (node.alias; a profile "
                        "probed before that probe existed); with --rounds K --gap S: K passes S seconds apart, "
                        "pooled")
    p.add_argument("--noise-span", type=float, metavar="SECONDS",
                   help="with --add-noise: spread its chunks over this many seconds (default 60; --quick 10)")
    p.add_argument("--rounds", type=int, default=1, metavar="K",
                   help="probe K times in turn (kept in OUT_DIR/NAME.rounds/) and pool them into NAME.yaml: the "
                        "machine over the whole span rather than one moment (default 1)")
    p.add_argument("--gap", type=float, default=0.0, metavar="SECONDS",
                   help="with --rounds: wait this long between rounds (default 0)")
    p.add_argument("--statistic", default=None,
                   help="each memory and compute point at the median of its fastest few repetitions (best), of all "
                        "of them (median), or a share q in (0, 1) (pmac.pool); default: best for one probe, median "
                        "with --rounds")


def run(args) -> int:
    from ..errors import InputError
    from ..probe import DEFAULT_PAGES, add_alias, add_fetch, add_noise, run_probe

    adds = [o for o, v in (("--add-fetch", args.add_fetch), ("--add-noise", args.add_noise),
                           ("--add-alias", args.add_alias)) if v]
    if len(adds) > 1:
        raise InputError(f"one probe at a time: {' and '.join(adds)} given")
    if adds and args.statistic is not None:
        raise InputError(f"--statistic is for a new probe, not with {adds[0]}")
    if adds and adds != ["--add-alias"] and (args.rounds != 1 or args.gap):
        raise InputError(f"--rounds and --gap are for a new probe or --add-alias, not with {adds[0]}")
    if args.add_alias:
        prof = add_alias(args.add_alias, quick=args.quick, passes=args.rounds, gap_s=args.gap,
                         command="pmac " + " ".join(sys.argv[1:]))
        a = prof.node.alias
        print(f"wrote node.alias into {args.add_alias}: a 4 KiB-aliased load stalls, one core "
              + ", ".join(f"{lv} {s * 1e9:.3f} ns" for lv, s in zip(a.levels, a.stall_s))
              + (f"; {a.n_cores_all} cores " + ", ".join(f"{lv} {s * 1e9:.3f} ns" for lv, s in
                                                        zip(a.levels, a.stall_allcores_s)) if a.stall_allcores_s else ""))
        return 0
    if args.add_noise:
        prof = add_noise(args.add_noise, quick=args.quick, span_s=args.noise_span,
                         command="pmac " + " ".join(sys.argv[1:]))
        from ..noise import describe
        print(f"wrote node.noise into {args.add_noise}")
        print("\n".join("  " + x for x in describe(prof.node.noise)))
        return 0
    if args.add_fetch:
        prof = add_fetch(args.add_fetch, quick=args.quick, command="pmac " + " ".join(sys.argv[1:]))
        f = prof.node.fetch
        print(f"wrote node.fetch into {args.add_fetch}: L1i {f.l1i_size_bytes // 1024} KiB, "
              f"miss {f.miss_s * 1e9:.2f} ns (code in random order; in order {f.miss_sequential_s * 1e9:.2f} ns)")
        return 0
    if not args.name:
        raise InputError("pmac probe needs --name NAME (or --add-fetch / --add-noise / --add-alias FILE.yaml)")

    command = "pmac " + " ".join(sys.argv[1:])
    if args.rounds != 1 or args.statistic not in (None, "best"):
        prof = _rounds(args, command)
    else:
        bar = ProgressBar(f"probe {args.name}", enabled=True if args.progress else None)
        try:
            prof = run_probe(args.name, quick=args.quick, out_dir=args.out_dir, progress=bar,
                             network=not args.no_network, command=command, pages=args.pages or DEFAULT_PAGES)
        finally:
            bar.close()
    if prof is None:  # a non-root rank of an mpiexec job
        return 0
    warnings = prof.provenance.get("warnings", [])
    unstable = [w for w in warnings if "did not stabilise" in w]
    for w in [w for w in warnings if w not in unstable] + unstable[:5]:
        print(f"pmac probe: warning: {w}", file=sys.stderr)
    if len(unstable) > 5:
        print(f"pmac probe: warning: ... {len(unstable) - 5} more points did not stabilise "
              f"(all listed in provenance.warnings of the profile)", file=sys.stderr)
    node = prof.node
    print(f"wrote {args.out_dir}/{prof.name}.yaml and {prof.raw_file} "
          f"({prof.provenance.get('duration_s', 0):.0f} s)")
    if node is not None:
        levels = ", ".join(f"{c.name} {c.size_bytes // 1024} KiB" for c in node.caches)
        mem = node.memory.bandwidth_1core_bytes_per_s.get("load_unit")
        print(f"  {node.cpu_model}, {node.n_cores} cores; caches: {levels}; "
              f"memory load bandwidth 1 core {mem / 1e9:.1f} GB/s" if mem else "")
    lacking = prof.missing()
    if lacking:
        print(f"  profile lacks: {', '.join(lacking)}")
    from pathlib import Path

    from ..state import two_states_of

    if (states := two_states_of(prof, Path(args.out_dir) / f"{prof.name}.yaml")) is not None:
        print(f"  note: {states}")
    return 0


def _rounds(args, command: str):
    """``--rounds K``: K probes into OUT_DIR/NAME.rounds/round-I (``--gap`` seconds apart), pooled at
    ``--statistic`` (default median) into OUT_DIR/NAME.yaml; the pooled profile, or None on a
    non-root rank of an mpiexec job (every rank takes part in every round)."""
    import dataclasses
    import time
    from pathlib import Path

    from ..errors import InputError
    from ..pool import describe, pool, pool_notes, slow_quantile_of
    from ..probe import DEFAULT_PAGES, run_probe, write_pair
    from ..profile import check_machine_name
    from ..schema import ensure_folder

    if args.rounds < 1:
        raise InputError(f"--rounds must be 1 or more, not {args.rounds}")
    if not args.gap >= 0:
        raise InputError(f"--gap must be 0 or more seconds, not {args.gap}")
    statistic = args.statistic or "median"
    slow_quantile_of(statistic)         # an unknown statistic fails before any probing
    check_machine_name(args.name)
    out = Path(args.out_dir) / f"{args.name}.yaml"
    ensure_folder(out.parent, "output directory", try_write=True)
    where = Path(args.out_dir) / f"{args.name}.rounds"
    paths, root, t0 = [], True, time.monotonic()
    for i in range(1, args.rounds + 1):
        if i > 1 and args.gap:
            time.sleep(args.gap)
        bar = ProgressBar(f"probe {args.name} (round {i}/{args.rounds})", enabled=True if args.progress else None)
        try:
            prof = run_probe(args.name, quick=args.quick, out_dir=where / f"round-{i}", progress=bar,
                             network=not args.no_network, command=command, pages=args.pages or DEFAULT_PAGES)
        finally:
            bar.close()
        root = prof is not None
        paths.append(where / f"round-{i}" / f"{args.name}.yaml")
    if not root:
        return None
    prof, raw = pool(paths, name=args.name, statistic=statistic, command=command)
    prof = dataclasses.replace(prof, provenance={**prof.provenance, "duration_s": time.monotonic() - t0})
    prof = write_pair(prof, raw, out)
    print(f"pooled {len(paths)} round(s) from {where}/ at {describe(statistic)}")
    for w in pool_notes(prof):
        print(f"  warning: {w}")
    return prof

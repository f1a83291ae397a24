"""pmac probe --name NAME [--quick] [--out-dir machines]: measure this machine, write its profile
(``--add-fetch FILE.yaml`` / ``--add-noise FILE.yaml``: only the instruction-fetch or the noise
probe, into an existing profile)."""

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
    p.add_argument("--noise-span", type=float, metavar="SECONDS",
                   help="with --add-noise: spread its chunks over this many seconds (default 60; --quick 10)")


def run(args) -> int:
    from ..errors import InputError
    from ..probe import DEFAULT_PAGES, add_fetch, add_noise, run_probe

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
        raise InputError("pmac probe needs --name NAME (or --add-fetch / --add-noise FILE.yaml)")

    bar = ProgressBar(f"probe {args.name}", enabled=True if args.progress else None)
    try:
        prof = run_probe(args.name, quick=args.quick, out_dir=args.out_dir, progress=bar,
                         network=not args.no_network, command="pmac " + " ".join(sys.argv[1:]),
                         pages=args.pages or DEFAULT_PAGES)
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
    return 0

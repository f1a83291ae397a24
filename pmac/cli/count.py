"""pmac count -o COUNTERS.csv --scaling 1,2,4,8 [--events E1,E2] -- ./app args: hardware counters
of each rank with perf stat (pmac.perf), where the machine has them, as the counter CSV that
``pmac scale`` and ``pmac cluster`` take beside signatures.
"""

from __future__ import annotations

HELP = "hardware counters per rank (perf stat) at several process counts, as a CSV for pmac scale"


def add_arguments(p):
    p.add_argument("-o", "--output", required=True, metavar="COUNTERS.csv", help="the CSV to write (atomically)")
    p.add_argument("--scaling", required=True, metavar="P1,P2,...", help="process counts to run at")
    p.add_argument("--events", default=None, metavar="E1,E2,...",
                   help="perf events (default: instructions, cycles, cache-misses, branch-misses)")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS", help="per run (default 3600)")
    p.add_argument("argv", nargs="+", metavar="-- COMMAND", help="the program, without a launcher, after --")


def run(args) -> int:
    import pandas as pd

    from ..counters import PERF_EVENTS
    from ..errors import InputError
    from ..perf import count_run
    from ..schema import atomic_write_text
    from .trace import refuse_launcher, scaling_counts

    argv = [a for a in args.argv]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise InputError("no program to count: pmac count -o c.csv --scaling 1,2,4 -- ./app ARGS")
    refuse_launcher(argv, "pmac count launches the program itself: give it without the launcher")
    counts = scaling_counts(args.scaling)
    events = [e for e in (args.events.split(",") if args.events else PERF_EVENTS) if e]
    parts = []
    for n in counts:
        df = count_run(n, argv, events=events, timeout_s=args.timeout)
        got = sorted(df["metric"].unique())
        print(f"{n} ranks: {', '.join(got) or 'no event counted'}")
        parts.append(df)
    out = pd.concat(parts, ignore_index=True)[["n_ranks", "rank", "function", "metric", "value"]]
    atomic_write_text(args.output, out.to_csv(index=False, float_format="%.17g"))
    print(f"wrote {args.output}: {len(out)} rows; pmac scale SIGNATURES... {args.output} models them")
    return 0

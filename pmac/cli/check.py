"""pmac check PROFILE.yaml [--rounds N]: does this machine, now, run as its profile was probed?
(pmac.state: three of the probe's kernels on every CPU, and its loop on every CPU at once, against the
profile's raw repetitions)."""

from __future__ import annotations

HELP = "check whether this machine runs now as its profile was probed (a few seconds)"


def add_arguments(p):
    p.add_argument("profile", metavar="PROFILE.yaml", help="a profile probed on this machine, with its raw sidecar")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the check, each on every CPU (default: 3)")


def _cell(mid: float, lo: float, hi: float) -> str:
    """``median (lo-hi)`` in 19 columns; ``-`` for a kernel the profile lacks."""
    return f"{mid:6.2f} ({lo:.2f}-{hi:.2f})" if mid == mid else f"{'-':>19s}"


def run(args) -> int:
    from ..errors import InputError
    from ..profile import load_profile, load_raw, not_this_machine
    from ..state import STATE_COLUMNS, measure_state, profile_state, state_ratios, verdict

    if args.rounds < 1:
        raise InputError(f"--rounds must be at least 1, not {args.rounds}")
    prof = load_profile(args.profile)
    why = not_this_machine(prof)
    if why:
        raise InputError(f"{why}: the profile does not describe this machine (pmac check compares a profile "
                         "with the machine it was probed on)", path=args.profile)
    ref = profile_state(load_raw(prof, args.profile))
    if ref is None:
        raise InputError("no raw load-bandwidth or flop_scalar repetitions to compare with (imported or "
                         "combined profiles have none)", path=args.profile)
    rounds = [measure_state() for _ in range(args.rounds)]
    t = state_ratios(rounds, ref)
    print(f"{prof.name}: this machine now against its profile ({args.profile}; now / probed, median of "
          f"{args.rounds} round(s) and range)")
    print(f"  {'cpu':>4s} {'L2 load':>19s} {'scalar flop':>19s} {'loop work':>19s} {'loop, all busy':>19s}")
    for r in t.itertuples():
        cells = [_cell(getattr(r, k), getattr(r, f"{k}_lo"), getattr(r, f"{k}_hi")) for k in STATE_COLUMNS]
        print(f"  {r.cpu:4d} " + " ".join(cells))
    if t["loop"].isna().all():
        print("  (loop work: the profile has no repetitions of the branch kernel at probability 0)")
    if t["busy"].isna().all():
        print("  (loop, all busy: " + ("one CPU: nothing runs beside it" if len(t) < 2 else
                                       "the profile has no all-cores loop repetitions (all:branch, probed since "
                                       "29 Nov 2026)") + ")")
    else:
        print("  (loop, all busy: each CPU's loop with every CPU running it at once, against the probe's loop on "
              "every core at once, the slower core's)")
    print(f"  {verdict(t)}")
    return 0

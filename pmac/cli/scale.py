"""pmac scale SIGNATURE... [MACHINE.yaml] [COUNTERS.csv] [--metric M] [--at P,...]: scaling models.

One program's signatures traced at several process counts (``pmac trace --memory`` with ``mpiexec
-n 1, 2, 4, 8 ...``): each function's counters per run, a model function fitted to each
(pmac.scaling), and the functions ranked at process counts not run (Ding et al. 2018). The
counts come from the memory signatures (pmac.counters: the same on any machine); with a machine,
also its caches' misses and each function's predicted time on it; a CSV of counters measured
elsewhere joins them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import InputError

#: a function whose metric grows this much from the largest run to a target is listed as growing
GROWS = 1.1
#: a model whose leave-one-out SMAPE exceeds this many per cent is marked as a guess
TRUST_PCT = 10.0

HELP = "scaling models: counters per function at several process counts, fitted, extrapolated, ranked"


def add_inputs(p) -> None:
    """The arguments ``pmac scale`` and ``pmac cluster`` share."""
    p.add_argument("paths", nargs="+", metavar="SIGNATURE|MACHINE.yaml|COUNTERS.csv",
                   help="one program's signature folders at several process counts; optionally one machine "
                        "profile (its caches' misses, each function's predicted time) and CSV files of counters "
                        "measured elsewhere (columns n_ranks, function, metric, value[, rank])")
    p.add_argument("--no-startup", dest="startup", action="store_false",
                   help="leave out the program's start and end: the compute before MPI_Init returns (loading "
                        "shared libraries, reading input) and after MPI_Finalize")
    p.add_argument("--ranks-per-node", type=int, metavar="N",
                   help="with a machine: ranks placed block-wise per node (default: the node's core count)")


def add_arguments(p):
    add_inputs(p)
    p.add_argument("--metric", help="the metric to model and rank by (default: time_s with a machine, else "
                                    "instructions); --csv and --json hold every metric")
    p.add_argument("--at", default=None, metavar="P[,P...]",
                   help="process counts to extrapolate to (default: 8 times the largest run)")
    p.add_argument("--over-ranks", choices=("max", "mean", "sum"), default="max",
                   help="one figure per run from its ranks: the largest (default: the slowest rank sets the "
                        "time), the mean, or the sum")
    p.add_argument("--top", type=int, default=10, metavar="N", help="functions shown in the ranking (default 10)")
    p.add_argument("--min-share", type=float, default=0.01, metavar="F",
                   help="functions shown among the models: those with at least this share of the metric in the "
                        "largest run or at the largest --at (default 0.01)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the ranked functions' runs and models (log-log)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON: every (function, metric) model and the ranking")
    fmt.add_argument("--csv", action="store_true", help="print CSV: every (function, metric) model")


def load_inputs(args):
    """(signatures, profile or None, measured counters or None) from ``args.paths``."""
    from ..counters import read_counter_csv
    from ..profile import load_profile
    from ..signature import load_signature

    sigs, machines, csvs = [], [], []
    for s in args.paths:
        p = Path(s)
        if not p.exists():
            raise InputError("no such file or folder", path=p)
        if p.is_dir() or p.name == "signature.yaml":
            sigs.append(load_signature(p))
        elif p.suffix in (".yaml", ".yml"):
            machines.append(p)
        elif p.suffix == ".csv":
            csvs.append(read_counter_csv(p))
        else:
            raise InputError("neither a signature folder, a machine .yaml nor a counters .csv", path=p)
    if len(machines) > 1:
        raise InputError(f"one machine at a time ({', '.join(str(m) for m in machines)} given)")
    if not sigs and not csvs:
        raise InputError("no signatures or counter files given")
    import pandas as pd

    measured = pd.concat(csvs, ignore_index=True) if csvs else None
    return sigs, (load_profile(machines[0]) if machines else None), measured


def counts_line(profile, measured, status: tuple[bool, str], timed: bool = False) -> str:
    """Where the counts come from, and whether this machine could count hardware events."""
    src = ["instructions, loads, stores, bytes, flop, branches and fetches from the memory signatures "
           "(valgrind: the same on any machine)"]
    if profile is not None:
        src.append(f"cache misses of {profile.name}'s caches" + (" and its predicted times" if timed else ""))
    if measured is not None:
        src.append(f"{len(measured)} counter rows from CSV")
    hw = ("this machine counts hardware events too (" + status[1] + "; give them as a CSV)") if status[0] else \
        f"no hardware counters on this machine ({status[1]}): none are needed"
    return "counts: " + "; ".join(src) + "; " + hw


def _at(text: str | None, largest: int) -> list[int]:
    from .trace import scaling_counts

    return [8 * largest] if text is None else scaling_counts(text, "--at")


def _n(x: float) -> str:
    if x != x:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.3e}"


def run(args) -> int:
    from ..counters import MPI_PREFIX, hardware_counter_status
    from ..scaling import RUN, fit_models, rank_at, reduce_ranks, scaling_counters
    from .predict import _fmt_table

    sigs, profile, measured = load_inputs(args)
    counters, notes = scaling_counters(sigs, profile=profile, ranks_per_node=args.ranks_per_node, measured=measured,
                                       startup=args.startup)
    runs = sorted(int(n) for n in counters["n_ranks"].unique())
    at = _at(args.at, runs[-1])
    timed = (counters["metric"] == "time_s").any()
    metric = args.metric or ("time_s" if timed else "instructions")
    table = reduce_ranks(counters, args.over_ranks)
    models = fit_models(table, up_to=max(at))
    rankings = {p: rank_at(models, metric, p) for p in at}
    if args.plot:
        plot_scaling(models, metric, rankings[max(at)], runs, max(at), args.plot, top=args.top)
    flat = models.drop(columns=["model_obj"])
    if args.csv:
        flat.to_csv(sys.stdout, index=False, float_format="%.9g")
        return 0
    status = hardware_counter_status()  # perf stat, run only where the output says what it found
    if args.json:
        doc = {"runs": runs, "over_ranks": args.over_ranks, "metric": metric,
               "hardware_counters": {"available": status[0], "detail": status[1]},
               "models": json.loads(flat.to_json(orient="records", double_precision=15)),
               "ranking": {str(p): json.loads(r.to_json(orient="records", double_precision=15))
                           for p, r in rankings.items()},
               "notes": notes}
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 0
    names = ", ".join(f"{s.name} ({s.n_ranks})" for s in sorted(sigs, key=lambda s: s.n_ranks))
    print(f"scaling of {len(runs)} runs at {', '.join(map(str, runs))} ranks: {names}; per run the "
          f"{ {'max': 'largest rank', 'mean': 'mean over ranks', 'sum': 'sum over ranks'}[args.over_ranks]}'s counts")
    print(counts_line(profile, measured, status, timed))
    sel = models[(models["metric"] == metric) & ~models["function"].str.startswith(MPI_PREFIX)]
    mruns = [r for r in runs if sel[f"at_{r}"].notna().any()]  # the runs that have this metric
    runcols = [f"at_{r}" for r in mruns]
    top_at = rankings[max(at)]
    keep = set(sel.loc[sel[runcols[-1]] >= args.min_share * sel[runcols[-1]].sum(), "function"])
    keep |= set(top_at.loc[top_at["share_at"] >= args.min_share, "function"])
    shown = sel[sel["function"].isin(keep)].sort_values(runcols[-1], ascending=False, kind="stable")
    print(f"\nmodels of {metric} (functions with >= {100 * args.min_share:g} % of it in the largest run or at "
          f"{max(at)} ranks; {len(sel) - len(shown)} others; --csv or --json: every function and metric):")
    rows = [[r.function, *[_n(getattr(r, c)) for c in runcols], r.model, _n(r.smape_pct), _n(r.loo_smape_pct)]
            for r in shown.itertuples()]
    print(_fmt_table(rows, ["function", *[f"p={r}" for r in mruns], "model", "fit SMAPE %", "LOO SMAPE %"]))
    mpi = models[models["function"].str.startswith(MPI_PREFIX) & models["metric"].isin(["mpi_calls", "mpi_send_bytes"])]
    mpicols = [f"at_{r}" for r in runs]
    mpi = mpi[(mpi[mpicols] > 0).any(axis=1)]
    if len(mpi):
        print("\nMPI per rank (calls and bytes sent by operation):")
        rows = [[r.function, r.metric, *[_n(getattr(r, c)) for c in mpicols], r.model, _n(r.loo_smape_pct)]
                for r in mpi.itertuples()]
        print(_fmt_table(rows, ["operation", "metric", *[f"p={r}" for r in runs], "model", "LOO SMAPE %"]))
    for p, rk in rankings.items():
        far = p / mruns[-1]
        print(f"\nranked by {metric} at {p} ranks ({'extrapolated ' + format(far, '.3g') + 'x beyond' if far > 1 else 'within'}"
              f" the largest run, {mruns[-1]}):")
        rows = [[str(r.rank_at), r.function, _n(r.value_now), f"{100 * r.share_now:.1f} %", f"#{r.rank_now}",
                 _n(r.value_at) + ("" if r.loo_smape_pct <= TRUST_PCT else " ?"), f"{100 * r.share_at:.1f} %",
                 f"{r.growth_ratio:.3g}x", _n(r.loo_smape_pct)]
                for r in rk.head(args.top).itertuples()]
        print(_fmt_table(rows, ["#", "function", f"p={mruns[-1]}", "share", "rank", f"p={p}", "share", "growth",
                                "LOO SMAPE %"]))
        grows = rk[(rk["growth_ratio"] >= GROWS) & (rk["share_at"] >= args.min_share)]
        for label, sel in (("growing", grows[grows["loo_smape_pct"] <= TRUST_PCT]),
                           (f"growing by models that miss a left-out run by more than {TRUST_PCT:g} % (?)",
                            grows[~(grows["loo_smape_pct"] <= TRUST_PCT)])):
            if len(sel):
                print(f"  {label} ({GROWS:g}x or more from {mruns[-1]} to {p} ranks): " + "; ".join(
                    f"{r.function} #{r.rank_now} -> #{r.rank_at}, {r.growth_ratio:.3g}x ({r.model})"
                    for r in sel.head(args.top).itertuples()))
    run = models[(models["function"] == RUN) & (models["metric"] == "finish_s")]
    if len(run):
        r = run.iloc[0]
        print(f"\npredicted run time (the {args.over_ranks} over ranks of each rank's finish): "
              + ", ".join(f"p={n} {_n(getattr(r, f'at_{n}'))} s" for n in runs) + f"; model {r.model} s "
              f"(LOO SMAPE {_n(r.loo_smape_pct)} %): " + ", ".join(f"p={p} {_n(float(r.model_obj(p)))} s" for p in at))
    if models.attrs.get("skipped"):
        notes.append("not modelled, too few runs: " + "; ".join(models.attrs["skipped"]))
    shaky = models[~(models["loo_smape_pct"] <= TRUST_PCT) & models["function"].isin(keep)
                   & (models["metric"] == metric)]
    if len(shaky):
        notes.append(f"{len(shaky)} of the models shown predict a left-out run more than {TRUST_PCT:g} % off (LOO "
                     "SMAPE; marked ?): their extrapolations are guesses (a function that appears only at some "
                     "process counts follows no model function); more runs, or runs nearer the target, would tell")
    for n in notes:
        print(f"note: {n}")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def plot_scaling(models, metric: str, ranking, runs: list[int], p_max: int, path: str, *, top: int = 10) -> None:
    """The ``top`` functions at ``p_max``: their runs as points, their models as lines, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from .predict import save_png

    fig, ax = plt.subplots(figsize=(8, 5))
    p = np.geomspace(min(runs), max(p_max, max(runs)), 200)
    sel = models[models["metric"] == metric].set_index("function")
    for f in ranking["function"].head(top):
        row = sel.loc[f]
        y = [row[f"at_{r}"] for r in runs]
        line = ax.plot(p, np.maximum(row["model_obj"](p), 1e-300), label=f"{f}: {row['model']}")[0]
        ax.plot(runs, y, "o", color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("processes")
    ax.set_ylabel(metric)
    ax.axvline(max(runs), color="grey", linewidth=0.8, linestyle=":")
    ax.legend(fontsize=7)
    ax.set_title(f"{metric} per function: runs (points) and models (lines)", fontsize=9)
    save_png(fig, path)

"""pmac cluster SIGNATURE... [MACHINE.yaml] [COUNTERS.csv] [--by rank|function] [--min-corr R]:
which counters move together across a program's scaling runs (pmac.cluster, after Jagga and
Malakar 2021). Inputs as for ``pmac scale``.
"""

from __future__ import annotations

import json
import sys

from ..errors import InputError
from .scale import add_inputs, counts_line, load_inputs

HELP = "counter clustering: correlation of counters across scaling runs, and groups that move together"


def add_arguments(p):
    add_inputs(p)
    p.add_argument("--by", choices=("rank", "function"), default="rank",
                   help="observations: each rank of each run (default) or each function of each run")
    p.add_argument("--min-corr", type=float, default=0.9, metavar="R",
                   help="metrics in one group correlate by |r| >= R on average (default 0.9)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the correlation matrix, metrics in group order")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON: groups, correlation matrix, constant metrics")
    fmt.add_argument("--csv", action="store_true", help="print CSV: the correlation matrix")


def run(args) -> int:
    from ..cluster import cluster_metrics, correlate, observations
    from ..counters import hardware_counter_status
    from ..scaling import scaling_counters
    from .predict import _fmt_table

    sigs, profile, measured = load_inputs(args)
    counters, notes = scaling_counters(sigs, profile=profile, ranks_per_node=args.ranks_per_node, measured=measured,
                                       startup=args.startup)
    obs = observations(counters, args.by)
    corr, const = correlate(obs)
    groups = cluster_metrics(corr, args.min_corr)
    order = list(groups["metric"])
    corr = corr.loc[order, order]
    if args.plot:
        plot_correlation(corr, groups, args.plot)
    if args.json:
        doc = {"by": args.by, "observations": len(obs), "min_abs_corr": args.min_corr,
               "groups": json.loads(groups.to_json(orient="records", double_precision=15)),
               "correlation": json.loads(corr.to_json(orient="index", double_precision=15)),
               "constant": const, "notes": notes}
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 0
    if args.csv:
        corr.to_csv(sys.stdout, float_format="%.6g", index_label="metric")
        return 0
    runs = sorted(int(n) for n in counters["n_ranks"].unique())
    print(f"{len(obs)} observations (each {args.by} of the runs at {', '.join(map(str, runs))} ranks), "
          f"{len(corr)} metrics that vary, grouped where |r| >= {args.min_corr:g} on average")
    print(counts_line(profile, measured, hardware_counter_status(), (counters["metric"] == "time_s").any()))
    rows = []
    for c, g in groups.groupby("cluster", sort=True):
        rep = g[g["representative"]].iloc[0]
        others = [m for m in g["metric"] if m != rep.metric]
        inner = corr.loc[list(g["metric"]), list(g["metric"])].abs().to_numpy()
        rows.append([str(c), rep.metric, f"{inner.min():.3f}" if len(g) > 1 else "-", ", ".join(others) or "-"])
    print(_fmt_table(rows, ["group", "representative", "min |r|", "also in the group"]))
    if const:
        print(f"constant over the observations (no correlation): {', '.join(const)}")
    if len(corr) > 1:
        a = corr.abs().to_numpy().copy()
        for i in range(len(a)):
            a[i, i] = -1.0
        i, j = divmod(int(a.argmax()), len(a))
        lo_i, lo_j = divmod(int(abs(corr.to_numpy()).argmin()), len(a))
        print(f"closest pair: {corr.index[i]} and {corr.columns[j]} (r {corr.iloc[i, j]:+.4f}); most independent: "
              f"{corr.index[lo_i]} and {corr.columns[lo_j]} (r {corr.iloc[lo_i, lo_j]:+.4f})")
    if len(obs) < 2 * len(corr):
        notes.append(f"{len(obs)} observations for {len(corr)} metrics: correlations over so few points are "
                     "loose; more runs (or --by function) would firm them up")
    for n in notes:
        print(f"note: {n}")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def plot_correlation(corr, groups, path: str) -> None:
    """The correlation matrix as a heat map, metrics in group order, group edges drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .predict import save_png

    n = len(corr)
    if n == 0:
        raise InputError("no metric varies over the observations: nothing to draw")
    fig, ax = plt.subplots(figsize=(2.0 + 0.45 * n, 1.5 + 0.45 * n))
    im = ax.imshow(corr.to_numpy(), vmin=-1.0, vmax=1.0, cmap="RdBu_r")
    ax.set_xticks(range(n))
    ax.set_xticklabels(corr.columns, rotation=90, fontsize=7)
    ax.set_yticks(range(n))
    ax.set_yticklabels(corr.index, fontsize=7)
    edge = 0
    for _, g in groups.groupby("cluster", sort=True):
        ax.add_patch(plt.Rectangle((edge - 0.5, edge - 0.5), len(g), len(g), fill=False, linewidth=1.5))
        edge += len(g)
    fig.colorbar(im, ax=ax, label="Pearson r")
    ax.set_title("counters across the scaling runs, grouped", fontsize=9)
    save_png(fig, path)

"""pmac sweep [SIGNATURE...] [MACHINE...] [--vary KNOB=F1,F2 ...] [--set KNOB=V1,V2 ...] [--together]:
what a hardware change would buy.

Each machine is predicted as it is and with each knob scaled by each factor, or set to each value
(pmac.sweep: the knobs and what each scales). Without ``--vary`` or ``--set``: halve and double the
network's MPI latency (a small message's one-way time) and bandwidth, memory's bandwidth, the last
cache level's size and the flop rates. Paths as for ``pmac predict`` (no signature: the shipped
ones; no machine: the shipped ones).
"""

from __future__ import annotations

import json
import sys

from ..errors import InputError
from ..units import format_quantity

HELP = "what-if: predict with profile attributes scaled (latency, bandwidths, cache sizes, flop rates)"


def add_arguments(p):
    p.add_argument("paths", nargs="*", metavar="SIGNATURE|MACHINE",
                   help="signatures/NAME folders and machines/NAME.yaml files (default: all shipped)")
    p.add_argument("--vary", action="append", dest="changes", default=[], type=lambda t: ("vary", t),
                   metavar="KNOB[=F1,F2,...]",
                   help="scale KNOB by each factor (default factors 0.5,2), e.g. network.mpi_latency=0.5 or "
                        "L3.size=0.5,2,4; repeat for more knobs (--knobs lists a machine's)")
    p.add_argument("--set", action="append", dest="changes", type=lambda t: ("set", t), metavar="KNOB=V1[,V2,...]",
                   help="set KNOB's figure to each value, units allowed (network.inter.mpi_latency=1.5us, "
                        "L3.size=96MiB, memory.bandwidth=200GB/s, compute.flops=100Gflop/s; --knobs shows the "
                        "figures now)")
    p.add_argument("--together", action="store_true",
                   help="one copy per machine with every --vary / --set applied at once (one factor or value "
                        "each): a candidate machine that differs in several ways")
    p.add_argument("--knobs", action="store_true", help="list each machine's knobs and their figures, and stop")
    p.add_argument("--ranks-per-node", type=int, metavar="N",
                   help="ranks placed block-wise per node (default: the node's core count)")
    p.add_argument("--contention", action="store_true", help="model link contention on the profile's topology")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw each signature and machine's changes as bars (matplotlib): time against the "
                        "machine as it is, per knob and factor")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON instead of text")
    fmt.add_argument("--csv", action="store_true", help="print CSV (one row per signature, machine, knob, factor)")


def _t(seconds: float) -> str:
    return format_quantity(seconds, "s", digits=4)


def format_sweep(df) -> str:
    """One block per signature and machine: the profile's own prediction, then a row per copy."""
    from .predict import _fmt_table

    out = []
    for (sig, machine), g in df.groupby(["signature", "machine"], sort=False):
        base = g[g["knob"] == "base"].iloc[0]
        out.append(f"signature {sig} on {machine}: {_t(base.total_s)} (compute {_t(base.compute_s)}, "
                   f"communication {_t(base.comm_s)}, wait {_t(base.wait_s)})")
        rows = [[r.knob, "" if r.factor != r.factor else f"x{r.factor:.4g}",
                 format_quantity(r.value, r.unit, digits=4) if r.unit and r.value == r.value else "",
                 _t(r.total_s), f"{100 * (r.time_ratio - 1):+.1f} %",
                 f"{r.speedup_ratio:.3f}x", _t(r.compute_s), _t(r.comm_s), _t(r.wait_s)]
                for r in g[g["knob"] != "base"].itertuples()]
        header = ["knob", "factor", "figure", "time", "change", "speed-up", "compute", "comm", "wait"]
        out += ["  " + line for line in _fmt_table(rows, header).splitlines()]
    return "\n".join(out)


def run(args) -> int:
    import pandas as pd

    from ..profile import load_profile
    from ..signature import load_signature
    from ..sweep import FIGURE_UNITS, figure, knobs_of, parse_knob, sweep
    from .predict import classify, skipped_lines, usable_for

    # in the order given
    knobs = [parse_knob(text, set_values=kind == "set") for kind, text in args.changes] or None
    if args.together and knobs is None:
        raise InputError("--together needs knobs to apply (--vary KNOB=F or --set KNOB=V)")
    sig_paths, machine_paths = classify(args.paths)
    profiles = [load_profile(p) for p in machine_paths]
    if args.knobs:
        for prof in profiles:
            print(f"{prof.name}:")
            for k in knobs_of(prof):
                v = figure(prof, k)
                unit = FIGURE_UNITS[k.rpartition('.')[2]]
                print(f"  {k:28s} {format_quantity(v, unit, digits=4) if v is not None else '(its links differ)'}")
        return 0
    tables, notes, skipped = [], [], []
    for sp in sig_paths:
        sig = load_signature(sp)
        usable = [profiles[i] for i in usable_for(sig, profiles, skipped, ranks_per_node=args.ranks_per_node)]
        if usable:
            df, n = sweep(sig, usable, knobs, together=args.together, ranks_per_node=args.ranks_per_node,
                          contention=args.contention)
            tables.append(df)
            notes.append((sig.name, n))
    if not tables:
        raise InputError("no machine has the sections needed for the given signatures"
                         + ("".join(f"; {line}" for line in skipped_lines(skipped))))
    df = pd.concat(tables, ignore_index=True)
    if args.plot:
        plot_sweep(df, args.plot)
    if args.json:
        doc = {"sweep": json.loads(df.to_json(orient="records", double_precision=15)),
               "notes": [{"signature": s, "notes": n} for s, n in notes],
               "not_predicted": [{"signature": s, "machine": m, "lacking": lk} for s, m, lk in skipped]}
        json.dump(doc, sys.stdout, indent=1)
        print()
    elif args.csv:
        df.to_csv(sys.stdout, index=False, float_format="%.9g")
    else:
        print(format_sweep(df))
        for s, n in notes:
            for line in n:
                print(f"  note ({s}): {line}")
        if skipped:
            print("not predicted (the machine lacks what the prediction needs):")
            for line in skipped_lines(skipped):
                print(f"  {line}")
        if args.plot:
            print(f"wrote {args.plot}")
    return 0


def plot_sweep(df, path: str) -> None:
    """One panel per signature and machine: a bar per copy, its predicted time against the
    machine's own in per cent (left: faster), labelled with the knob and factor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .predict import save_png

    panels = [(key, g[g["knob"] != "base"]) for key, g in df.groupby(["signature", "machine"], sort=False)]
    heights = [max(len(g), 1) for _, g in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.0 + 0.3 * sum(heights) + 0.6 * len(panels)),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    for ax, ((sig, machine), g) in zip(axes[:, 0], panels):
        change = 100.0 * (g["time_ratio"].to_numpy() - 1.0)
        labels = [k if f != f else f"{k} x{f:.3g}" for k, f in zip(g["knob"], g["factor"])]
        y = range(len(g))
        ax.barh(list(y), change, color=["tab:green" if c < 0 else "tab:red" for c in change])
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_title(f"{sig} on {machine}: predicted time against the machine as it is", fontsize=9)
    axes[-1, 0].set_xlabel("change in predicted time (%)")
    save_png(fig, path)

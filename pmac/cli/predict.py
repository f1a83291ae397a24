"""pmac predict [SIGNATURE...] [MACHINE...]: predicted time-to-solution per machine.

With no paths: every shipped signature (signatures/*/) against every shipped machine
(machines/*.yaml) that has the sections the prediction needs; the others are listed with what
they lack. Paths are told apart by what they are: a folder (or its signature.yaml) is a
signature, another .yaml file a machine profile.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from ..errors import InputError, PmacError
from ..units import format_quantity

HELP = "predict the run time of signatures on machine profiles (compute / communication / wait)"


def add_arguments(p):
    p.add_argument("paths", nargs="*", metavar="SIGNATURE|MACHINE",
                   help="signatures/NAME folders and machines/NAME.yaml files (default: all shipped)")
    p.add_argument("--ranks-per-node", type=int, metavar="N",
                   help="ranks placed block-wise per node (default: the node's core count)")
    p.add_argument("--bursts", choices=("auto", "measured", "memory"), default="auto",
                   help="burst times from the memory signature (convolved) or as measured (default: auto = "
                        "memory when traced)")
    p.add_argument("--contention", action="store_true", help="model link contention on the profile's topology")
    p.add_argument("--measured-collectives", action="store_true",
                   help="price collectives from the profile's measured collective times where they cover "
                        "the operation, rank count, placement and size (else by algorithm)")
    p.add_argument("--no-collective-excess", action="store_true",
                   help="price collectives by their algorithm's messages alone, without what the profile's "
                        "2-rank collective probe cost beyond them (pmac.calibrate_collectives)")
    p.add_argument("--no-pollution", action="store_true",
                   help="do not charge a call for the caches its burst evicted (pmac.pollution: the profile's "
                        "links' pollution curves and the signature's reuse histograms)")
    p.add_argument("--no-interpreter", action="store_true",
                   help="price a Python program's calls as a C program's, without what the profile's interpreter "
                        "test measured a call from Python to cost beyond them (pmac.interpreter)")
    p.add_argument("--noise", type=int, default=0, metavar="K",
                   help="replay K draws of the profile's noise (each core's slowdown over time, the noise "
                        "probe) and report the median draw (pmac.noise; default 0: none)")
    p.add_argument("--capacity", choices=("nominal", "curve"), default="nominal",
                   help="cache levels at their nominal sizes (default), or each as a distribution of effective "
                        "capacities read off the profile's load curve (pmac.capacity: for a working set at a "
                        "level's edge; off by default, see there)")
    p.add_argument("--band", action="store_true",
                   help="also predict with every probe point of each machine at a fast and a slow quantile of its "
                        "repetitions (--band-at; pmac.predict_band): how far the machine's own run-to-run spread "
                        "moves the prediction")
    p.add_argument("--band-at", default="0.1,0.9", metavar="LO,HI",
                   help="the band's quantiles (default 0.1,0.9: the 10 %% and the 90 %% of each point's repetitions)")
    p.add_argument("--per-rank", action="store_true", help="also print each rank's split")
    p.add_argument("--critical-path", action="store_true", help="also print the critical path")
    p.add_argument("--calls", action="store_true",
                   help="also print, per MPI operation, its calls' time in the traced run against the replay's "
                        "(pmac.validate.call_costs: where the network model misprices this program's calls; "
                        "meaningful on a profile of the machine it was traced on, and with --bursts measured "
                        "the bursts are the traced ones too)")
    p.add_argument("--functions", action="store_true",
                   help="also print where each machine's predicted compute goes, function by function "
                        "(pmac.predict_functions; beside the traced run's burst times split the same way)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON (every table) instead of text")
    fmt.add_argument("--csv", action="store_true", help="print CSV (the summary; with --per-rank, "
                                                         "--critical-path, --calls or --functions that table) instead "
                                                         "of text")
    p.add_argument("--timeline", metavar="FILE.png", help="write a Gantt chart per rank (matplotlib)")


def _roots() -> list[Path]:
    repo = Path(__file__).resolve().parents[2]
    return [Path.cwd(), repo]


def _shipped(sub: str, pattern: str) -> list[Path]:
    for root in _roots():
        d = root / sub
        if d.is_dir():
            found = sorted(d.glob(pattern))
            if found:
                return found
    return []


def classify(paths: list[str]) -> tuple[list[Path], list[Path]]:
    sigs, machines = [], []
    for s in paths:
        p = Path(s)
        if not p.exists():
            raise InputError("no such file or folder", path=p)
        if p.is_dir() or p.name == "signature.yaml":
            sigs.append(p)
        elif p.suffix in (".yaml", ".yml"):
            machines.append(p)
        else:
            raise InputError("neither a signature folder nor a machine .yaml", path=p)
    if not sigs:
        sigs = [p.parent for p in _shipped("signatures", "*/signature.yaml")]
    if not machines:
        machines = _shipped("machines", "*.yaml")
    if not sigs:
        raise InputError("no signatures given and none shipped (signatures/*/signature.yaml)")
    if not machines:
        raise InputError("no machines given and none shipped (machines/*.yaml)")
    return sigs, machines


def _fmt_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def _t(seconds: float) -> str:
    return format_quantity(seconds, "s", digits=4)


def _pct(part: float, total: float) -> str:
    return f"{100.0 * part / total:5.1f}%" if total > 0 else "-"


def format_band(band, notes) -> str:
    """The band's lines: per machine its fast and slow end against the prediction."""
    lo, hi = float(band["fast_quantile"].iloc[0]), float(band["slow_quantile"].iloc[0])
    parts = []
    for r in band.itertuples():
        if r.fast_s != r.fast_s:   # NaN: no band
            continue
        parts.append(f"{r.machine} {_t(r.fast_s)} .. {_t(r.slow_s)} "
                     f"({100 * (r.fast_s / r.total_s - 1):+.1f} % / {100 * (r.slow_s / r.total_s - 1):+.1f} %)")
    out = [f"  band (every probe point at the {lo:g} and the {hi:g} quantile of its repetitions): "
           + ("; ".join(parts) if parts else "none")]
    out += [f"  band note: {n}" for n in group_notes(notes, list(band["machine"]))]
    return "\n".join(out)


def format_prediction(pred, *, per_rank: bool, critical_path: bool) -> str:
    out = [f"signature {pred.signature}"]
    rows = []
    for r in pred.summary.itertuples():
        rows.append([r.machine, _t(r.total_s), _t(r.compute_s), _t(r.comm_s), _t(r.wait_s),
                     f"{_pct(r.compute_s, r.total_s)} / {_pct(r.comm_s, r.total_s)} / {_pct(r.wait_s, r.total_s)}",
                     f"{r.n_ranks} on {r.n_nodes}", r.burst_source + ("" if r.independent else " (!)")])
    out.append(_fmt_table(rows, ["machine", "time", "compute", "comm", "wait", "compute/comm/wait",
                                 "ranks/nodes", "bursts"]))
    if per_rank:
        for m, g in pred.per_rank.groupby("machine", sort=False):
            out.append(f"\n  per rank on {m}:")
            rr = [[str(r.rank), str(r.node), _t(r.finish_s), _t(r.compute_s), _t(r.comm_s), _t(r.wait_s)]
                  for r in g.itertuples()]
            out.append(_indent(_fmt_table(rr, ["rank", "node", "finish", "compute", "comm", "wait"])))
    if critical_path:
        if len(pred.critical_path) == 0:
            out.append("\n  critical path: not reported by the replay")
        for m, g in pred.critical_path.groupby("machine", sort=False):
            out.append(f"\n  critical path on {m}: time it spends on each rank")
            rr = [[str(r.rank), _t(r.critical_s), f"{100 * r.critical_frac:5.1f}%"]
                  for r in g.itertuples() if r.critical_s > 0]
            out.append(_indent(_fmt_table(rr, ["rank", "on path", "share"])))
    for n in group_notes(pred.notes, list(pred.summary["machine"])):
        out.append(f"  note: {n}")
    return "\n".join(out)


#: a number with its unit as the notes print them (+703 us, 1.51 ms, 12 %, 3e-06 s)
_QUANTITY = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?: ?(?:[munpk]?s|[kMG]?B|%)(?![A-Za-z]))?")


def group_notes(notes, machines: list[str]) -> list[str]:
    """``notes`` with the ones that say the same of several machines (``"NAME: text"``) said once,
    where the first of them was: ``"a, b: text"``, or ``"every machine (N): text"`` when it holds
    for all N > 2 of ``machines``; notes that differ only in one quantity list it per machine
    (``"text before: a +1 ms, b +2 ms text after"``). Other notes are kept as they are, in order."""
    known = set(machines)
    order: list = []
    said: dict[str, list[tuple[str, str]]] = {}   # masked text -> [(machine, text)]
    for n in notes:
        name, sep, text = n.partition(": ")
        if not sep or name not in known:
            order.append(n)
            continue
        key = _QUANTITY.sub("\0", text)
        if key not in said:
            said[key] = []
            order.append((key,))
        said[key].append((name, text))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        key = item[0]
        rows = list(dict.fromkeys(said[key]))   # a note repeated word for word is said once
        texts = {t for _, t in rows}
        names = [m for m, _ in rows]
        if len(set(names)) < len(names):        # a machine with two such notes: each as it was
            out += [f"{m}: {t}" for m, t in rows]
        elif len(texts) == 1:
            out.append(f"{_names_or_every(names, len(known), 'machine')}: {texts.pop()}")
        elif key.count("\0") == 1:
            before, after = key.split("\0")
            values = ", ".join(f"{m} {_QUANTITY.search(t).group(0)}" for m, t in rows)
            out.append(f"{before}{values}{after}")
        else:
            out += [f"{m}: {t}" for m, t in rows]
    return out


def call_tables(sig, pred) -> list[tuple[str, object]]:
    """(machine, pmac.validate.call_costs table) per machine of ``pred`` (its timeline), every call
    of the trace but MPI_Init / MPI_Finalize; an InputError naming the signature when it carries no
    traced call times."""
    from ..validate import call_costs

    ev = sig.events
    if not ((ev["t_end_s"] - ev["t_start_s"]) > 0).any():
        raise InputError(f"signature {sig.name}: its events carry no traced call times, nothing to compare "
                         "--calls with")
    return [(m, call_costs(ev, g, region="all")) for m, g in pred.timeline.groupby("machine", sort=False)]


def format_calls(tables) -> str:
    out = []
    for m, t in tables:
        out.append(f"\n  calls on {m} against the traced run (per call; diff: replayed minus traced, per rank, "
                   "share of the traced span):")
        rr = [[r.op, str(r.calls), _t(r.traced_us * 1e-6), _t(r.replayed_us * 1e-6), _t(r.traced_median_us * 1e-6),
               _t(r.replayed_median_us * 1e-6), f"{r.diff_pct:+.1f}%"] for r in t.itertuples()]
        out.append(_indent(_fmt_table(rr, ["op", "calls", "traced", "replayed", "traced med", "replayed med",
                                           "diff"])))
    return "\n".join(out)


#: functions shown per machine in text (all of them in --csv and --json)
TOP_FUNCTIONS = 12


def function_table(sig, profiles, args):
    """pmac.predict_functions.function_times for ``--functions``; an InputError when the bursts are
    not convolved from a memory signature."""
    from ..predict import resolve_burst_source
    from ..predict_functions import function_times

    if resolve_burst_source(sig, args.bursts) != "memory":
        raise InputError(f"signature {sig.name}: --functions prices the memory signature's bursts, and this "
                         "prediction replays the traced burst times (pmac trace --memory, or --bursts memory)")
    return function_times(sig, profiles, ranks_per_node=args.ranks_per_node, capacity=args.capacity)


def format_functions(table) -> str:
    out = []
    for m, g in table.groupby("machine", sort=False):
        out.append(f"\n  functions on {m} (compute summed over the ranks; traced: the traced run's bursts split "
                   "as predicted; diff: predicted against traced):")
        rr = [[r.function[:40], r.object[:24], str(r.bursts), _t(r.time_s), f"{100 * r.share:5.1f}%", r.bound,
               _t(r.traced_s), "-" if r.diff_pct != r.diff_pct else f"{r.diff_pct:+.1f}%"]
              for r in g.head(TOP_FUNCTIONS).itertuples()]
        if len(g) > TOP_FUNCTIONS:
            rest = g.iloc[TOP_FUNCTIONS:]
            rr.append([f"({len(rest)} more)", "", str(rest["bursts"].sum()), _t(rest["time_s"].sum()),
                       f"{100 * rest['share'].sum():5.1f}%", "", _t(rest["traced_s"].sum()), ""])
        out.append(_indent(_fmt_table(rr, ["function", "object", "bursts", "time", "share", "bound", "traced",
                                           "diff"])))
    return "\n".join(out)


def _indent(text: str) -> str:
    return "\n".join("    " + x for x in text.splitlines())


def plot_timeline(preds, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(p.signature, m, g) for p in preds for m, g in p.timeline.groupby("machine", sort=False)]
    if not panels:
        raise InputError("the replay reported no timeline to draw", path=path)
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + 0.5 * sum(
        g["rank"].nunique() for _, _, g in panels)), squeeze=False)
    for ax, (sig, m, g) in zip(axes[:, 0], panels):
        for rank, gr in g.groupby("rank"):
            comp = list(zip(gr["burst_start_s"], gr["start_s"] - gr["burst_start_s"]))
            mpi = list(zip(gr["start_s"], gr["end_s"] - gr["start_s"]))
            ax.broken_barh(comp, (rank - 0.4, 0.8), facecolors="tab:blue", linewidth=0)
            ax.broken_barh(mpi, (rank - 0.4, 0.8), facecolors="tab:red", linewidth=0)
        ax.set_title(f"{sig} on {m}  (blue: compute, red: MPI)", fontsize=9)
        ax.set_ylabel("rank")
        ax.set_yticks(sorted(g["rank"].unique()))
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("time (s)")
    save_png(fig, path)


def save_png(fig, path: str) -> None:
    """Write a matplotlib figure as PNG, atomically (never a half-written file), and close it."""
    from io import BytesIO

    import matplotlib.pyplot as plt

    from ..schema import atomic_write_bytes

    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def usable_for(sig, profiles, skipped: list, **need) -> list[int]:
    """Indices of the profiles that have the sections ``sig``'s prediction needs
    (pmac.predict.needed_sections with ``need``); the others are appended to ``skipped`` as
    ``(signature, machine, what it lacks)``."""
    from ..predict import needed_sections

    used = []
    for i, prof in enumerate(profiles):
        try:
            lacking = needed_sections(prof, sig, **need)
        except PmacError as exc:
            lacking = [str(exc)]
        if lacking:
            skipped.append((sig.name, prof.name, lacking))
        else:
            used.append(i)
    return used


def run(args) -> int:
    from ..predict import predict
    from ..predict_band import band_profiles, parse_band, predict_band
    from ..profile import load_profile
    from ..signature import load_signature

    sig_paths, machine_paths = classify(args.paths)
    band = parse_band(args.band_at) if args.band else None
    profiles = [load_profile(p) for p in machine_paths]
    # the band's refitted profiles: once per profile, whichever signatures use it
    if band:
        pairs_all, why_all = band_profiles(profiles, machine_paths, band)
        # band_profiles' notes are those of the profiles without a pair, in order
        why_of = dict(zip((i for i, pr in enumerate(pairs_all) if pr is None), why_all))
    options = dict(ranks_per_node=args.ranks_per_node, burst_source=args.bursts, contention=args.contention,
                   measured_collectives=args.measured_collectives, collective_excess=not args.no_collective_excess,
                   pollution=not args.no_pollution, noise=args.noise, capacity=args.capacity,
                   interpreter=not args.no_interpreter)
    preds, skipped, calls, funcs, bands = [], [], [], [], []
    for sp in sig_paths:
        sig = load_signature(sp)
        used = usable_for(sig, profiles, skipped, burst_source=args.bursts, ranks_per_node=args.ranks_per_node)
        usable = [profiles[i] for i in used]
        if usable:
            preds.append(predict(sig, usable, timeline=bool(args.timeline) or args.calls, **options))
            if args.calls:
                calls.append(call_tables(sig, preds[-1]))
            if args.functions:
                funcs.append(function_table(sig, usable, args))
            if band:
                pairs = [pairs_all[i] for i in used]
                why = [why_of[i] for i in used if i in why_of]
                bands.append(predict_band(sig, usable, [machine_paths[i] for i in used], band=band,
                                          totals=list(preds[-1].summary["total_s"]), ends=(pairs, why),
                                          **options))
    if args.json:
        doc = {"predictions": [{"signature": p.signature, "summary": _records(p.summary),
                                "per_rank": _records(p.per_rank), "critical_path": _records(p.critical_path),
                                "notes": list(p.notes)} for p in preds],
               **({"calls": [{"signature": p.signature, "machine": m, "rows": _records(t)}
                             for p, tables in zip(preds, calls) for m, t in tables]} if args.calls else {}),
               **({"functions": [{"signature": p.signature, "rows": _records(t)}
                                 for p, t in zip(preds, funcs)]} if args.functions else {}),
               **({"band": [{"signature": p.signature, "rows": _records(t), "notes": list(n)}
                            for p, (t, n) in zip(preds, bands)]} if band else {}),
               "not_predicted": [{"signature": s, "machine": m, "lacking": lk} for s, m, lk in skipped]}
        json.dump(doc, sys.stdout, indent=1)
        print()
    elif args.csv:
        import pandas as pd

        if args.calls:   # one table per signature and machine
            frames = [t.assign(machine=m)[["machine", *t.columns]] for tables in calls for m, t in tables]
            names = [p.signature for p, tables in zip(preds, calls) for _ in tables]
        elif args.functions:
            frames, names = funcs, [p.signature for p in preds]
        else:
            frames = [p.per_rank if args.per_rank else p.critical_path if args.critical_path else p.summary
                      for p in preds]
            if band and not (args.per_rank or args.critical_path):   # the summary with its band's ends
                frames = [f.assign(band_fast_s=b["fast_s"].to_numpy(), band_slow_s=b["slow_s"].to_numpy())
                          for f, (b, _) in zip(frames, bands)]
            names = [p.signature for p in preds]
        if frames:
            df = pd.concat(frames, ignore_index=True)
            if args.per_rank or args.critical_path or args.calls or args.functions:
                df.insert(0, "signature", [s for s, f in zip(names, frames) for _ in range(len(f))])
            df.to_csv(sys.stdout, index=False, float_format="%.9g")
    else:
        for k, p in enumerate(preds):
            print(format_prediction(p, per_rank=args.per_rank, critical_path=args.critical_path))
            if band:
                print(format_band(*bands[k]))
            if args.calls:
                print(format_calls(calls[k]))
            if args.functions:
                print(format_functions(funcs[k]))
            print()
        if any(not r.independent for p in preds for r in p.summary.itertuples()):
            print("(!) burst times as measured on the traced machine: not a prediction for other machines")
        if skipped:
            print("not predicted (the machine lacks what the prediction needs):")
            for line in skipped_lines(skipped):
                print(f"  {line}")
    if args.timeline:
        plot_timeline(preds, args.timeline)
        if not args.json and not args.csv:
            print(f"wrote {args.timeline}")
    if not preds:
        raise InputError("no machine has the sections needed for the given signatures "
                         "(see 'not predicted' above)")
    return 0


def skipped_lines(skipped) -> list[str]:
    """``(signature, machine, lacks)`` triples as lines, a machine that lacks the same for several
    signatures on one line (``m for a, b: lacks x``; ``m for every signature (N)`` when it is
    all N > 2 of them), in the order of their first."""
    sigs = list(dict.fromkeys(s for s, _, _ in skipped))
    groups: dict[tuple[str, str], list[str]] = {}
    for s, m, lk in skipped:
        groups.setdefault((m, ", ".join(lk)), []).append(s)
    out = []
    for (m, lacks), names in groups.items():
        names = list(dict.fromkeys(names))
        out.append(f"{m} for {_names_or_every(names, len(sigs), 'signature')}: lacks {lacks}")
    return out


def _names_or_every(names: list[str], n_all: int, noun: str) -> str:
    """``"a, b"``, or ``"every NOUN (N)"`` when ``names`` are all N > 2 of them."""
    return f"every {noun} ({len(names)})" if len(names) == n_all > 2 else ", ".join(names)


def _records(df) -> list[dict]:
    return json.loads(df.to_json(orient="records", double_precision=15))

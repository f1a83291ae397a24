"""pmac export FORMAT SIGNATURE -o DIR: write a signature in another tool's trace format.

``pmac export simgrid signatures/NAME -o DIR`` writes SimGrid time-independent traces (one file per
rank and the index ``DIR/traces.txt``) for ``smpirun -np N -platform P.xml -replay DIR/traces.txt``.
"""

from __future__ import annotations

HELP = "write a signature as SimGrid time-independent traces (for smpirun -replay)"

#: format name -> (help, function(args) -> int)
FORMATS = {
    "simgrid": "SimGrid time-independent traces: DIR/rank<R>.txt and the index DIR/traces.txt",
}


def add_arguments(p):
    p.add_argument("format", choices=sorted(FORMATS), help="; ".join(f"{k}: {v}" for k, v in FORMATS.items()))
    p.add_argument("signature", help="signatures/NAME (a folder with signature.yaml)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write")
    p.add_argument("--flop-per-s", metavar="RATE", default=None,
                   help="write bursts as 'compute' of burst_s x RATE flops (e.g. '1 Gflop/s') instead of "
                        "'sleep burst_s' (the default, exact whatever the platform's host speed)")
    p.add_argument("--relative-index", action="store_true",
                   help="index paths relative to DIR's parent (run smpirun from there) instead of absolute")


def run(args) -> int:
    from pathlib import Path

    from ..errors import InputError
    from ..signature import load_signature
    from ..simgrid import write_simgrid
    from ..units import parse_quantity

    if not Path(args.signature).exists():
        raise InputError("no such signature folder", path=args.signature)
    sig = load_signature(args.signature)
    rate = parse_quantity(args.flop_per_s, "flop_per_s") if args.flop_per_s else None
    res = write_simgrid(sig, args.output, flop_per_s=rate, absolute_index=not args.relative_index)
    print(f"wrote {res.n_actions} actions for {sig.n_ranks} ranks: {res.index_file}")
    if res.skipped:
        what = ", ".join(f"{k} x{v}" for k, v in sorted(res.skipped.items()))
        print(f"skipped (no SimGrid equivalent): {what}")
    print(f"replay: smpirun -np {sig.n_ranks} -platform PLATFORM.xml -replay {res.index_file}")
    return 0

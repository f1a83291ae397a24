"""pmac import FORMAT ...: bring another tool's files into pmac (signatures or machine profiles).

Each format is one entry of :data:`FORMATS`: ``name -> (help, add_arguments(p), run(args) -> int)``;
``pmac import NAME --help`` shows its arguments. Add a format with one entry.
"""

from __future__ import annotations

from pathlib import Path

HELP = "import traces (SimGrid, OTF2) as signatures, or machine descriptions as profiles"


def _sig_out_args(p):
    p.add_argument("-o", "--output", required=True, metavar="signatures/NAME", help="signature folder to write")
    p.add_argument("--name", help="signature name (default: the output folder's name)")


def _save_sig(sig, args) -> int:
    import dataclasses

    from ..signature import save_signature

    out = Path(args.output)
    sig = dataclasses.replace(sig, header=dataclasses.replace(sig.header, name=args.name or out.name))
    save_signature(sig, out)
    n_calls = len(sig.events)
    print(f"wrote {out}: {sig.n_ranks} ranks, {n_calls} MPI calls"
          + (f", memory tables {', '.join(sig.memory)}" if sig.memory else ""))
    return 0


def _simgrid_args(p):
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="one trace with every rank's actions, per-rank files, or an index file listing them")
    p.add_argument("--ranks", type=int, default=None, help="number of ranks (default: highest rank seen + 1)")
    _sig_out_args(p)


def _simgrid_run(args) -> int:
    from ..simgrid import read_simgrid

    return _save_sig(read_simgrid(args.files, n_ranks=args.ranks), args)


def _otf2_args(p):
    p.add_argument("archive", help="the archive's anchor file (traces.otf2) or its folder")
    _sig_out_args(p)


def _otf2_run(args) -> int:
    from ..otf2 import read_otf2

    return _save_sig(read_otf2(args.archive), args)


#: format name -> (help, add_arguments, run)
FORMATS = {
    "simgrid": ("SimGrid time-independent MPI traces (smpirun -replay input) -> signature", _simgrid_args,
                _simgrid_run),
    "otf2": ("OTF2 archive (Score-P, ...) -> signature", _otf2_args, _otf2_run),
}


def add_arguments(p):
    sub = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    for name, (help_, add, run_) in FORMATS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        add(sp)
        sp.set_defaults(_format_run=run_)


def run(args) -> int:
    return int(args._format_run(args) or 0)

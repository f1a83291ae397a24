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


def _profile_out_args(p):
    p.add_argument("--name", required=True, help="machine name")
    p.add_argument("-o", "--output", metavar="machines/NAME.yaml", help="profile to write (default machines/NAME.yaml)")


def _save_profile(prof, args) -> int:
    from ..profile import save_profile

    out = Path(args.output or f"machines/{args.name}.yaml")
    save_profile(prof, out)
    lacks = prof.provenance.get("lacks", [])
    print(f"wrote {out}" + (f"; lacks: {'; '.join(lacks)}" if lacks else ""))
    return 0


def _kerncraft_args(p):
    p.add_argument("file", help="kerncraft machine file (.yml)")
    _profile_out_args(p)


def _kerncraft_run(args) -> int:
    from ..importers import import_kerncraft

    return _save_profile(import_kerncraft(args.file, name=args.name), args)


def _stream_args(p):
    p.add_argument("file", help="text output of a STREAM run")
    p.add_argument("--cpu-model", default="unknown", help="CPU model to record")
    p.add_argument("--cores", type=int, default=None, help="cores of the node (default: STREAM's thread count)")
    _profile_out_args(p)


def _stream_run(args) -> int:
    from ..importers import import_stream

    return _save_profile(import_stream(args.file, name=args.name, cpu_model=args.cpu_model,
                                       n_cores=args.cores), args)


def _osu_args(p):
    p.add_argument("latency_file", metavar="LATFILE", help="osu_latency output")
    p.add_argument("bandwidth_file", metavar="BWFILE", nargs="?", help="osu_bw output (optional)")
    p.add_argument("--placement", choices=("inter_node", "intra_node"), default="inter_node",
                   help="where the two ranks ran (default inter_node)")
    p.add_argument("--mpi-library", default="", help="MPI library and version to record")
    _profile_out_args(p)


def _osu_run(args) -> int:
    from ..importers import import_osu

    return _save_profile(import_osu(args.latency_file, args.bandwidth_file, name=args.name,
                                    placement=args.placement, mpi_library=args.mpi_library), args)


#: format name -> (help, add_arguments, run)
FORMATS = {
    "kerncraft": ("kerncraft machine file -> machine profile (node only)", _kerncraft_args, _kerncraft_run),
    "stream": ("STREAM output -> machine profile (memory bandwidth only)", _stream_args, _stream_run),
    "osu": ("osu_latency [+ osu_bw] output -> machine profile (one network link)", _osu_args, _osu_run),
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

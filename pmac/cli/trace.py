"""pmac trace -o signatures/NAME [--param k=v ...] [--memory [--ranks 0]] -- mpiexec -n 4 ./app args
pmac trace -o runs/NAME --scaling 1,2,4,8 [--memory] -- ./app args

Runs the command with the PMPI shim preloaded (built for the MPI the program loads, cached) and
writes the signature's MPI event tables; ``--memory`` also takes a memory signature. With
``--scaling``, the command is the program alone: it is launched at each process count with the
project's MPI (pmac.mpi.launch_command: the flags that MPI needs, as root too) into
``NAME-nP``, the series ``pmac scale`` and ``pmac cluster`` take.
"""

from __future__ import annotations

HELP = "record an MPI program's calls (PMPI shim) into signatures/NAME"


def add_arguments(p):
    p.add_argument("-o", "--output", required=True, metavar="signatures/NAME", help="signature folder to write")
    p.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="application parameter to store in the signature (repeatable), e.g. --param n=512")
    p.add_argument("--description", default="", help="one line saying what was traced")
    p.add_argument("--memory", action="store_true", help="also record the memory signature (valgrind)")
    p.add_argument("--ranks", default=None, metavar="LIST",
                   help="with --memory: world ranks to trace memory of, e.g. 0 or 0,2 (default: all)")
    p.add_argument("--no-mpi", action="store_true", help="with --memory: skip the MPI trace")
    p.add_argument("--keep-raw", action="store_true", help="keep the per-rank raw files in NAME/raw/")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="kill the program after this")
    p.add_argument("--scaling", default=None, metavar="P1,P2,...",
                   help="trace the program (COMMAND without mpiexec) at each process count into NAME-nP, "
                        "launched with the project's mpiexec: a series for pmac scale")
    p.add_argument("argv", nargs="+", metavar="-- COMMAND", help="the MPI command line, after --")


def _params(items):
    from ..errors import InputError

    out = {}
    for it in items:
        if "=" not in it:
            raise InputError(f"--param {it!r}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                continue
        out[k.strip()] = v
    return out


def _check_output(out) -> None:
    """Before running anything: the signature folder must be creatable where it is asked for
    (its parent is made if missing and must take new entries)."""
    from ..errors import InputError
    from ..schema import ensure_folder

    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder: the signature is a folder (give a new name)", path=out)
    ensure_folder(out.parent, "folder the signature goes in", try_write=True)


def run(args) -> int:
    import sys
    from pathlib import Path

    from ..errors import InputError
    from .progress import ProgressBar

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise InputError("no command to trace: pmac trace -o signatures/NAME -- mpiexec -n 4 ./app")
    if args.no_mpi and not args.memory:
        raise InputError("--no-mpi leaves nothing to record: add --memory")
    if args.ranks and not args.memory:
        raise InputError("--ranks selects the ranks of a memory trace: add --memory")
    out = Path(args.output)
    if args.scaling is not None:
        return _run_scaling(args, argv, out)
    _check_output(out)
    params = _params(args.param)
    status = 0
    if not args.no_mpi:
        from ..trace import op_name
        from ..tracer import trace_mpi

        with ProgressBar("trace") as bar:
            res = trace_mpi(argv, out, parameters=params, description=args.description, keep_raw=args.keep_raw,
                            timeout_s=args.timeout, progress=bar)
        ev = res.signature.events
        print(f"{out}: {res.signature.n_ranks} ranks, {len(ev)} MPI calls, "
              f"{int(ev['send_bytes'].sum())} bytes sent, traced run {res.wall_s:.2f} s ({res.shim.libmpi})")
        counts = ev["op"].value_counts()
        print("  " + ", ".join(f"{op_name(o)} {n}" for o, n in sorted(counts.items(), key=lambda x: -x[1])[:12]))
        for w in res.warnings:
            print(f"pmac trace: warning: {w}", file=sys.stderr)
        if res.returncode != 0:
            print(f"pmac trace: warning: the program exited with code {res.returncode}; "
                  f"the signature holds what it recorded", file=sys.stderr)
            status = 1
    if args.memory:
        try:
            from ..memtrace import trace_memory
        except ModuleNotFoundError as exc:
            if exc.name != "pmac.memtrace":
                raise
            print("pmac trace: memory tracing not available in this build", file=sys.stderr)
            return 2
        ranks = None
        if args.ranks:
            try:
                ranks = tuple(int(x) for x in args.ranks.split(","))
            except ValueError:
                raise InputError(f"--ranks {args.ranks!r}: expected world ranks like 0 or 0,2") from None
        with ProgressBar("memory") as bar:
            trace_memory(argv, out, ranks=ranks, progress=bar)
        print(f"{out}: memory signature written")
    return status


def _run_scaling(args, argv: list[str], out) -> int:
    """``--scaling``: one trace per process count into ``OUT-nP``, in the order given."""
    import argparse

    from ..mpi import launch_command

    counts = scaling_counts(args.scaling)
    refuse_launcher(argv, "--scaling launches the program itself: give it without the launcher "
                          "(pmac trace -o runs/NAME --scaling 1,2,4 -- ./app ARGS)")
    status = 0
    for n in counts:
        sub = argparse.Namespace(**{**vars(args), "scaling": None, "output": f"{out}-n{n}",
                                    "argv": launch_command(n, argv)})
        status = max(status, run(sub))
    print(f"traced at {', '.join(map(str, counts))} ranks: {', '.join(f'{out}-n{n}' for n in counts)}"
          + (f"; pmac scale {out}-n* fits their counts" if args.memory else
             "; add --memory for the per-function counts pmac scale fits"))
    return status


def scaling_counts(text: str, option: str = "--scaling") -> list[int]:
    """``--scaling 1,2,4,8`` (or another ``option``'s, as ``pmac scale --at``): distinct process
    counts >= 1, in the order given; a one-line InputError naming the option otherwise."""
    from ..errors import InputError

    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option} {text!r}: expected process counts like 1,2,4,8") from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise InputError(f"{option} {text!r}: expected distinct process counts >= 1")
    return counts


def refuse_launcher(argv: list[str], message: str) -> None:
    """An InputError with ``message`` where the command starts with a launcher (mpiexec, mpirun, srun)."""
    from pathlib import Path

    from ..errors import InputError

    if Path(argv[0]).name.startswith(("mpiexec", "mpirun", "srun")):
        raise InputError(message)

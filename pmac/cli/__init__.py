"""The ``pmac`` command: one entry point, one small module per subcommand.

Each module in :data:`COMMANDS` defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported lazily so ``pmac show`` does not pay for numba.
Errors of the :class:`PmacError` family become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__
from ..errors import PmacError

#: subcommand name -> module under pmac.cli
COMMANDS = {
    "probe": "probe",
    "show": "show",
    "trace": "trace",
    "predict": "predict",
    "import": "importer",
    "combine": "combine",
    "pool": "pool",
    "export": "export",
    "check": "check",
    "sweep": "sweep",
    "scale": "scale",
    "cluster": "cluster",
    "count": "count",
}


def _load(name: str):
    return importlib.import_module(f"pmac.cli.{COMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pmac", description="Predict MPI application run time on other machines.")
    parser.add_argument("--version", action="version", version=f"pmac {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = _load(name) if (only is None or only == name) else None
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("pmac.cli."):
                continue  # subcommand not present in this build
            raise
        if mod is None:
            sub.add_parser(name, help="(see pmac %s --help)" % name, add_help=False)
            continue
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0 if not argv else 2
    try:
        return int(args._run(args) or 0)
    except PmacError as exc:
        print(f"pmac {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pmac {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

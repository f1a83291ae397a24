"""pmac show PATH: print a machine profile or a signature readably (``--plot FILE.png``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError

HELP = "print a machine profile (machines/NAME.yaml) or a signature (signatures/NAME) readably"


def add_arguments(p):
    p.add_argument("path", help="machines/NAME.yaml or signatures/NAME")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the curves (profile) or the communication heat map (signature)")


def run(args) -> int:
    path = Path(args.path)
    if not path.exists():
        raise InputError("no such file or folder", path=path)
    if path.is_dir() or path.name == "signature.yaml":
        from ..signature import load_signature

        sig = load_signature(path)
        from ..report_signature import format_signature, plot_signature

        print(format_signature(sig))
        if args.plot:
            plot_signature(sig, args.plot)
            print(f"wrote {args.plot}")
        return 0
    from ..profile import load_profile

    prof = load_profile(path)
    from ..report_profile import format_profile, plot_profile

    print(format_profile(prof))
    from ..state import two_states_of

    if (states := two_states_of(prof, path)) is not None:
        print(f"note: {states}")
    if args.plot:
        plot_profile(prof, args.plot)
        print(f"wrote {args.plot}")
    return 0

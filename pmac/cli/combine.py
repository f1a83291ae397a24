"""pmac combine: one complete profile from the node of one profile and the network of another."""

from __future__ import annotations

from pathlib import Path

HELP = "combine a node description and a network description into one machine profile"


def add_arguments(p):
    p.add_argument("--node", required=True, metavar="A.yaml", help="profile whose node section is used")
    p.add_argument("--network", required=True, metavar="B.yaml", help="profile whose network section is used")
    p.add_argument("--name", required=True, help="name of the combined machine")
    p.add_argument("--n-nodes", type=int, default=None, help="nodes in the machine (default: that of --node)")
    p.add_argument("-o", "--output", metavar="machines/NAME.yaml", help="default machines/NAME.yaml")


def run(args) -> int:
    import dataclasses

    from ..profile import combine, load_profile, save_profile
    from ..schema import provenance

    node = load_profile(args.node)
    net = load_profile(args.network)
    prof = combine(node, net, name=args.name)
    extra = {"n_nodes": args.n_nodes} if args.n_nodes else {}
    prov = provenance(inputs={"node": args.node, "network": args.network}, **prof.provenance)
    prof = dataclasses.replace(prof, provenance=prov, raw_file=None, raw_sha256=None, **extra)
    out = Path(args.output or f"machines/{args.name}.yaml")
    save_profile(prof, out)
    lacking = prof.missing()
    print(f"wrote {out}" + (f"; still lacks: {', '.join(lacking)}" if lacking else "; complete"))
    return 0

"""Readable summaries of a signature: ``pmac show signatures/NAME`` (``--plot`` draws the byte matrix).

- :func:`op_table`: calls, bytes sent/received and time inside the calls, per operation;
- :func:`rank_table`: per rank, calls, compute time (sum of ``burst_s``), time inside MPI calls,
  flops from the memory signature when present;
- :func:`communication_matrix`: point-to-point bytes from rank i to rank j, counted where they are
  sent (every send-type call and the send half of Sendrecv; persistent sends count at each Start);
- :func:`communication_graph`: that matrix as a networkx DiGraph (edge attributes ``bytes`` and
  ``messages``) plus the per-peer bytes of vector and neighbourhood collectives (``coll_bytes``)
  and of one-sided calls (``rma_bytes``: puts/accumulates origin -> target, gets target -> origin);
- :func:`format_signature` puts these together as text, :func:`plot_signature` draws a heat map.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .signature import Signature
from .trace import SEND_OPS, Op, op_name
from .units import format_quantity

#: ops whose send_bytes go point-to-point to ``dest``
_P2P_SEND = frozenset(SEND_OPS - {Op.SEND_INIT}) | {Op.SENDRECV, Op.SENDRECV_REPLACE}


def _alias_line(sig) -> str | None:
    """'4 KiB aliasing: ...' for a memory signature that counts it (schema 9): the share of the
    loads that alias a recent store, and the functions with most of them."""
    b = sig.memory.get("bursts")
    if b is None or "alias_loads" not in b.columns or not len(b) or (b["alias_loads"] < 0).any():
        return None
    loads, alias = int(b["loads"].sum()), int(b["alias_loads"].sum())
    if loads <= 0:
        return None
    line = (f"  4 KiB aliasing: {alias / loads:.1%} of the loads share their low 12 address bits with a "
            "recent store on another page (pmac_vg, sampled)")
    f = sig.memory.get("functions")
    if alias and f is not None and len(f):
        top = f.groupby("function")[["alias_loads", "loads"]].sum()     # over the ranks
        top = top[top["alias_loads"] > 0].sort_values("alias_loads", ascending=False).head(3)
        line += "; most in " + ", ".join(f"{fn} ({r.alias_loads / max(r.loads, 1):.0%} of its loads)"
                                        for fn, r in top.iterrows())
    return line


def op_table(sig: Signature) -> pd.DataFrame:
    """One row per operation present: ``op``, ``n_calls``, ``send_bytes``, ``recv_bytes``, ``time_s``."""
    ev = sig.events
    if not len(ev):
        return pd.DataFrame({"op": [], "n_calls": [], "send_bytes": [], "recv_bytes": [], "time_s": []})
    t = ev["t_end_s"] - ev["t_start_s"]
    g = pd.DataFrame({"op": ev["op"], "send_bytes": ev["send_bytes"], "recv_bytes": ev["recv_bytes"],
                      "time_s": t}).groupby("op", sort=True)
    out = pd.DataFrame({
        "n_calls": g.size(),
        "send_bytes": g["send_bytes"].sum(),
        "recv_bytes": g["recv_bytes"].sum(),
        "time_s": g["time_s"].sum(),
    }).reset_index()
    out["op"] = [op_name(o) for o in out["op"]]
    return out


def rank_table(sig: Signature) -> pd.DataFrame:
    """Per rank: ``n_calls``, ``compute_s``, ``mpi_s``, ``mpi_frac``; ``flop`` and ``mem_bytes``
    (loaded + stored, from the memory signature's bursts; NaN without one)."""
    ev = sig.events
    ranks = np.arange(sig.n_ranks)
    n_calls = np.bincount(ev["rank"], minlength=sig.n_ranks)[: sig.n_ranks]
    compute = np.bincount(ev["rank"], weights=ev["burst_s"], minlength=sig.n_ranks)[: sig.n_ranks]
    mpi = np.bincount(ev["rank"], weights=ev["t_end_s"] - ev["t_start_s"], minlength=sig.n_ranks)[: sig.n_ranks]
    total = compute + mpi
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(total > 0, mpi / total, np.nan)
    flop = np.full(sig.n_ranks, np.nan)
    mem_bytes = np.full(sig.n_ranks, np.nan)
    b = sig.memory.get("bursts")
    if b is not None and len(b):
        flop = np.bincount(b["rank"], weights=b["flop"], minlength=sig.n_ranks)[: sig.n_ranks].astype(float)
        mem_bytes = np.bincount(b["rank"], weights=(b["load_bytes"] + b["store_bytes"]).astype(float),
                                minlength=sig.n_ranks)[: sig.n_ranks].astype(float)
    return pd.DataFrame({"rank": ranks, "n_calls": n_calls, "compute_s": compute, "mpi_s": mpi,
                         "mpi_frac": frac, "flop": flop, "mem_bytes": mem_bytes})


def communication_matrix(sig: Signature) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, messages): n_ranks x n_ranks, [i, j] = point-to-point from rank i to rank j."""
    n = sig.n_ranks
    ev = sig.events
    ops = ev["op"].to_numpy()
    mask = np.isin(ops, [int(o) for o in _P2P_SEND]) & (ev["dest"].to_numpy() >= 0)
    # persistent sends: bytes move at each Start of the request
    starts = _persistent_sends(sig)
    src = np.concatenate([ev["rank"].to_numpy()[mask], starts[0]]).astype(np.int64)
    dst = np.concatenate([ev["dest"].to_numpy()[mask], starts[1]]).astype(np.int64)
    nb = np.concatenate([ev["send_bytes"].to_numpy()[mask], starts[2]]).astype(np.float64)
    ok = (dst < n) & (src < n)
    bytes_m = np.zeros((n, n))
    msgs = np.zeros((n, n), dtype=np.int64)
    np.add.at(bytes_m, (src[ok], dst[ok]), nb[ok])
    np.add.at(msgs, (src[ok], dst[ok]), 1)
    return bytes_m, msgs


def _persistent_sends(sig: Signature):
    ev = sig.events
    inits = ev[(ev["op"] == Op.SEND_INIT) & (ev["dest"] >= 0)]
    if not len(inits):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    info = {(int(r), int(q)): (int(d), int(b)) for r, q, d, b in
            zip(inits["rank"], inits["request"], inits["dest"], inits["send_bytes"])}
    src, dst, nb = [], [], []
    st = ev[ev["op"].isin([Op.START, Op.STARTALL])]
    rq = sig.requests
    for r, off, k, req in zip(st["rank"], st["req_offset"], st["n_requests"], st["request"]):
        ids = rq["request"].to_numpy()[off:off + k] if k > 0 and off >= 0 else [req]
        for q in ids:
            hit = info.get((int(r), int(q)))
            if hit:
                src.append(int(r))
                dst.append(hit[0])
                nb.append(hit[1])
    return np.array(src, np.int64), np.array(dst, np.int64), np.array(nb, float)


def communication_graph(sig: Signature):
    """networkx DiGraph: a node per rank; an edge i->j with ``bytes``/``messages`` of point-to-point
    traffic, ``coll_bytes`` sent to j by vector and neighbourhood collectives (from the vcounts
    table) and ``rma_bytes`` moved from i to j by one-sided calls (:func:`rma_bytes`)."""
    import networkx as nx

    bytes_m, msgs = communication_matrix(sig)
    g = nx.DiGraph()
    g.add_nodes_from(range(sig.n_ranks))
    for i, j in zip(*np.nonzero(msgs)):
        g.add_edge(int(i), int(j), bytes=float(bytes_m[i, j]), messages=int(msgs[i, j]), coll_bytes=0.0,
                   rma_bytes=0.0)
    vc = sig.vcounts
    if len(vc):
        sub = vc[(vc["peer"] != vc["rank"]) & (vc["peer"] >= 0) & (vc["send_bytes"] > 0)]
        agg = sub.groupby(["rank", "peer"])["send_bytes"].sum()
        for (i, j), b in agg.items():
            _edge(g, int(i), int(j))["coll_bytes"] += float(b)
    for (i, j), b in rma_bytes(sig).items():
        _edge(g, i, j)["rma_bytes"] += b
    return g


def _edge(g, i: int, j: int) -> dict:
    if not g.has_edge(i, j):
        g.add_edge(i, j, bytes=0.0, messages=0, coll_bytes=0.0, rma_bytes=0.0)
    return g[i][j]


def rma_bytes(sig: Signature) -> dict[tuple[int, int], float]:
    """Bytes moved by one-sided calls, (from, to) -> bytes: puts and accumulates carry
    ``send_bytes`` from the origin to the target (``dest``), gets and the fetching accumulates
    ``recv_bytes`` from the target (``source``) back to the origin."""
    ev = sig.events
    rma = ev[ev["op"].isin([int(Op.PUT), int(Op.GET), int(Op.ACCUMULATE)])]
    out: dict[tuple[int, int], float] = {}
    for a, b, col in (("rank", "dest", "send_bytes"), ("source", "rank", "recv_bytes")):
        part = rma[(rma[a] >= 0) & (rma[b] >= 0) & (rma[col] > 0) & (rma[a] != rma[b])]
        for (i, j), x in part.groupby([a, b])[col].sum().items():
            out[(int(i), int(j))] = out.get((int(i), int(j)), 0.0) + float(x)
    return out


def _fmt_bytes(x: float) -> str:
    return format_quantity(float(x), "bytes")


def _fmt_s(x: float) -> str:
    return format_quantity(float(x), "s")


def format_signature(sig: Signature) -> str:
    h = sig.header
    lines = [f"signature {h.name}: {h.n_ranks} rank{'s' if h.n_ranks != 1 else ''}, "
             f"{len(sig.events)} MPI calls, source {h.source_format}, bursts {h.burst_source}"]
    if h.description:
        lines.append(f"  {h.description}")
    if h.command:
        lines.append(f"  command: {h.command}")
    if h.parameters:
        lines.append("  parameters: " + ", ".join(f"{k}={v}" for k, v in h.parameters.items()))
    if h.mpi_library:
        lines.append(f"  MPI library: {h.mpi_library}")
    if h.rank_hosts:
        hosts = pd.Series(h.rank_hosts).value_counts()
        lines.append("  hosts: " + ", ".join(f"{k} ({v} rank{'s' if v != 1 else ''})" for k, v in hosts.items()))
    if h.traced_wall_s is not None:
        lines.append(f"  traced wall time: {_fmt_s(h.traced_wall_s)} (includes tracing overhead)")
    own = h.provenance.get("tracer_own_s") if isinstance(h.provenance, dict) else None
    if own:
        lines.append(f"  tracer's own time between calls, left out of the bursts: up to {_fmt_s(max(own))} a rank "
                     "(its memory samples and buffer flushes)")
    mem = ", ".join(f"{k} {len(v)} rows" for k, v in sig.memory.items())
    lines.append(f"  memory signature: {mem if mem else 'none'}")
    alias = _alias_line(sig)
    if alias:
        lines.append(alias)

    lines.append("")
    lines.append("operations:")
    ot = op_table(sig)
    w = max([len("op")] + [len(o) for o in ot["op"]])
    lines.append(f"  {'op':<{w}}  {'calls':>8}  {'sent':>10}  {'received':>10}  {'time in call':>12}")
    for r in ot.itertuples(index=False):
        lines.append(f"  {r.op:<{w}}  {r.n_calls:>8}  {_fmt_bytes(r.send_bytes):>10}  "
                     f"{_fmt_bytes(r.recv_bytes):>10}  {_fmt_s(r.time_s):>12}")
    lines.append(f"  {'total':<{w}}  {int(ot['n_calls'].sum()):>8}  {_fmt_bytes(ot['send_bytes'].sum()):>10}  "
                 f"{_fmt_bytes(ot['recv_bytes'].sum()):>10}  {_fmt_s(ot['time_s'].sum()):>12}")

    lines.append("")
    lines.append("ranks (compute = sum of bursts between calls; MPI = time inside calls):")
    rt = rank_table(sig)
    has_flop = bool(np.isfinite(rt["flop"]).any())
    head = f"  {'rank':>5}  {'calls':>8}  {'compute':>10}  {'MPI':>10}  {'MPI %':>6}"
    has_mem = has_flop and bool((rt["mem_bytes"] > 0).any())
    lines.append(head + (f"  {'flop':>10}" if has_flop else "") + (f"  {'memory':>10}" if has_mem else ""))
    for r in rt.itertuples(index=False):
        pct = "-" if not np.isfinite(r.mpi_frac) else f"{100 * r.mpi_frac:.1f}"
        row = f"  {r.rank:>5}  {r.n_calls:>8}  {_fmt_s(r.compute_s):>10}  {_fmt_s(r.mpi_s):>10}  {pct:>6}"
        if has_flop:
            row += f"  {r.flop:>10.4g}"
        if has_mem:
            row += f"  {_fmt_bytes(r.mem_bytes):>10}"
        lines.append(row)

    lines.append("")
    g = communication_graph(sig)
    bytes_m, msgs = communication_matrix(sig)
    total = bytes_m.sum()
    lines.append(f"communication graph (point-to-point): {g.number_of_nodes()} ranks, "
                 f"{int((msgs > 0).sum())} directed pairs, {int(msgs.sum())} messages, {_fmt_bytes(total)}")
    if msgs.sum():
        outdeg = (msgs > 0).sum(axis=1)
        lines.append(f"  peers per rank: min {outdeg.min()}, mean {outdeg.mean():.2f}, max {outdeg.max()}")
        sym = np.allclose(bytes_m, bytes_m.T)
        lines.append(f"  byte matrix {'symmetric' if sym else 'not symmetric'}; "
                     f"mean message {_fmt_bytes(total / msgs.sum())}")
        order = np.argsort(bytes_m, axis=None)[::-1]
        top = [np.unravel_index(k, bytes_m.shape) for k in order[:5] if bytes_m.flat[k] > 0]
        lines.append("  heaviest: " + ", ".join(f"{i}->{j} {_fmt_bytes(bytes_m[i, j])} ({msgs[i, j]} msgs)"
                                                for i, j in top))
    coll = sum(d.get("coll_bytes", 0.0) for _, _, d in g.edges(data=True))
    if coll:
        lines.append(f"  vector and neighbourhood collectives move {_fmt_bytes(coll)} between distinct ranks")
    rma = sum(d.get("rma_bytes", 0.0) for _, _, d in g.edges(data=True))
    if rma:
        n_rma = int(sig.events["op"].isin([int(Op.PUT), int(Op.GET), int(Op.ACCUMULATE)]).sum())
        lines.append(f"  one-sided calls ({n_rma} put/get/accumulate) move {_fmt_bytes(rma)} between distinct ranks")
    if sig.n_ranks <= 16 and msgs.sum():
        lines.append("  bytes sent (row = from, column = to):")
        lines.append("  " + " " * 6 + "".join(f"{j:>10}" for j in range(sig.n_ranks)))
        for i in range(sig.n_ranks):
            lines.append(f"  {i:>6}" + "".join(f"{(_fmt_bytes(v) if v else '.'):>10}" for v in bytes_m[i]))
    return "\n".join(lines)


def plot_signature(sig: Signature, path) -> None:
    """Heat map of the point-to-point byte matrix (log colour scale), written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.ticker import MaxNLocator

    from .schema import atomic_write_bytes
    import io

    bytes_m, _ = communication_matrix(sig)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    data = np.ma.masked_less_equal(bytes_m, 0)
    if data.count():
        lo, hi = float(data.min()), float(data.max())
        norm = LogNorm(vmin=lo, vmax=hi) if hi > lo else Normalize(vmin=0.0, vmax=hi)
        im = ax.imshow(data, cmap="viridis", norm=norm, origin="upper")
        fig.colorbar(im, ax=ax, label="bytes sent")
    else:
        ax.imshow(np.zeros_like(bytes_m), cmap="Greys", vmin=0, vmax=1)
        ax.text(0.5, 0.5, "no point-to-point traffic", transform=ax.transAxes, ha="center")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("to rank")
    ax.set_ylabel("from rank")
    ax.set_title(f"{sig.name}: point-to-point bytes")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())

"""Event-driven replay of every rank's MPI events on a network model.

Input (plain arrays and dataclasses, never files): the ``events`` table of a signature
(pmac.trace.EVENTS, a DataFrame or a mapping of columns), the compute time before each call
``burst_s`` (aligned with the rows of ``events``; default the table's own ``burst_s``), a
placement (``node[rank]``), a :class:`~pmac.profile.NetworkModel`, and :class:`ReplayOptions`.
The ``requests`` table is needed for waits/tests, ``comms`` for collectives on communicators
other than MPI_COMM_WORLD. Output: :class:`ReplayResult`.

Semantics (see pmac.collectives for the message and collective models):

- Each rank runs its calls in ``seq`` order. A call starts when the previous call ended plus
  the burst before it (``start = end_prev + burst_s``); the first call starts at ``burst_s``.
- Point-to-point matching: the k-th send from ``a`` to ``b`` on communicator ``c`` with tag
  ``t`` matches the k-th receive posted by ``b`` for source ``a``, ``c``, ``t`` (MPI's
  non-overtaking rule). A receive's source is the trace's ``source`` column, which the tracer
  fills from the status for MPI_ANY_SOURCE; a receive still marked ANY_SOURCE is an error. A
  negative receive tag (MPI_ANY_TAG) makes the tags of that (comm, source, destination) pair
  ignored. Matching is done once, before the run, in one pass with hash tables (O(n)); the
  replay then finds a partner in O(1). The message size is the sender's ``send_bytes``.
  Peers equal to NONE (MPI_PROC_NULL) make that half of the call a no-op.
- Blocking sends end when the sender is done (eager: ``start + o_s``; rendezvous: data
  arrived); receives when the receive is done. Sendrecv ends when both halves are done.
  Ssend/Issend are always rendezvous, Bsend/Ibsend always eager.
- Isend costs ``o_s`` (the call); Irecv costs nothing; their requests complete when the send
  or receive half would have. Wait/Waitall/Waitany/Waitsome end at the latest completion among
  the requests the trace says the call completed (``requests.completed``; all for Wait and
  Waitall); a Test* that completed a request behaves as a wait on it, one that did not costs
  nothing. Non-blocking collectives cost nothing at the call; their request completes when the
  collective would have ended for that rank.
- A collective (the k-th collective call on a communicator of each member is one instance)
  starts for each member at its own start time; each member's end comes from the collective's
  algorithm priced with the message model (pmac.collectives), or, with
  ``options.measured_collectives``, from the network's measured CollectiveCost table when an
  entry has the same operation, member count and placement kind (intra_node when all members
  share a node) and the size lies within the measured sizes (linear interpolation): then every
  member ends at ``max(start of all members) + time_s``. A call whose probe rows cost less than
  its algorithm's messages (a negative ``CollectiveCost.excess_s``: MPICH's shared-memory
  collectives at MPI_THREAD_SINGLE do not send them) is priced from the table wherever the table
  covers it, and elsewhere by algorithm plus the negative excess (pmac.collectives.add_excess).
- Persistent requests: an ``MPI_Start`` behaves as the Isend / Irecv its request was created
  for (the latest ``*_INIT`` of that handle on the rank before the Start: peer, tag, size and
  communicator come from there); the Wait on the handle completes it as for an Isend / Irecv.
  An ``MPI_Startall`` is the Starts of the requests it names (its ``requests`` rows), in that
  order, at one instant; its timeline row spans them all. A Start whose handle has no earlier
  ``*_INIT`` on its rank takes no time (pmac.predict names such calls).
- Other calls (init, finalize, probes, communicator calls, ``*_INIT``, OTHER) take no time.
- Per rank: ``compute_s`` = sum of bursts; for each call the part before the last partner it
  waits on posted its side (message peer, or the last member to reach a collective) is
  ``wait_s``, the rest of the call's duration is ``comm_s``. ``compute_s + comm_s + wait_s ==
  finish_s`` exactly (up to rounding).
- Contention (``options.contention`` with ``options.topology``): inter-node messages take
  routes on the topology and queue for busy links (pmac.collectives). Ranks are then simulated
  in global simulated-time order (a heap), so links are reserved in time order; without
  contention each rank runs as far as it can before blocking (results do not depend on order).
- Shaped links (``LinkModel.shaper_*``, the inter-node link): every node's egress is a token
  bucket (pmac.collectives.transfer); a message leaves once the sender's bucket holds its bytes,
  first come first served, so ranks are simulated in time order as with contention.
  ``options.route_timing``: the inter-node wire time is the route's own latency and bottleneck
  bandwidth (as in a SimGrid platform) instead of the LinkModel's segments.
- A trace that cannot finish (a receive with no matching send, a rendezvous send never
  received, a cycle of blocking calls, a collective some member never joins) raises
  :class:`~pmac.errors.ReplayError` naming each blocked rank, its call (op, seq) and what it
  waits for.

Several machines: :class:`Replayer` prepares a trace once and replays it on each machine (its
network, placement, bursts and options), redoing only the per-call link constants; results equal
:func:`replay`'s, which is a one-machine Replayer.

Memory: two records per event (32 bytes with 32-bit indices, pmac.replay_core.event_dtypes), one
index per request row, with ``options.critical_path`` (default) one partner index per event, with
``options.timeline`` one end time per event; the bursts are read from the caller's column; no
per-event Python objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numba import njit

from . import collectives as C
from . import replay_core as core
from . import replay_passes as passes
from .errors import InputError, ReplayError
from .profile import LinkModel, NetworkModel
from .replay_core import (B_EVENT, B_INST, B_NEVER, K_COLL, K_ICOLL, K_IRECV, K_ISEND, K_LOCAL, K_RECV,
                          K_SEND, K_SENDRECV, K_WAIT, P_UNMATCHED)
from .topology import Topology, routes
from .trace import NONE, Op, op_name


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    #: queue flows on shared links of ``topology`` (needs a topology)
    contention: bool = False
    #: the topology for contention / route timing; placement node i runs on host i
    topology: Topology | None = None
    #: inter-node wire time from the route's links instead of the LinkModel segments
    route_timing: bool = False
    #: price collectives from the network's measured CollectiveCost table when it has them
    measured_collectives: bool = False
    #: add to a collective priced by algorithm what the probe's 2-rank call cost beyond the
    #: algorithm's messages (``CollectiveCost.excess_s``, pmac.calibrate_collectives)
    collective_excess: bool = True
    #: eager data leaves at the send (True) or once the receive is posted too (False, SimGrid)
    eager_buffered: bool = True
    #: rendezvous pays a request-to-send / clear-to-send round trip
    rendezvous_handshake: bool = True
    #: keep every call's start and end time
    timeline: bool = False
    #: walk the critical path (``ReplayResult.critical_rank_s``); off, the core skips its record
    #: of the partner each call waited for (4 bytes an event, written for every call)
    critical_path: bool = True

    def __post_init__(self):
        if (self.contention or self.route_timing) and self.topology is None:
            raise ValueError("contention and route_timing need a topology")


@dataclass(frozen=True, kw_only=True, eq=False)
class ReplayResult:
    """Per-rank arrays (index = world rank), seconds.

    ``finish_s[r]`` is when rank r's last call ended; ``compute_s + comm_s + wait_s ==
    finish_s``. With ``options.timeline``: ``event_rank``, ``event_seq``, ``event_op``,
    ``start_s``, ``end_s`` per call, sorted by (rank, seq). ``critical_rank_s[r]`` is the time the
    critical path (walked back from the last rank to finish, jumping to the partner a call waited
    for) spends on rank r; it sums to the makespan (None with ``options.critical_path`` off).
    """

    n_ranks: int
    n_events: int
    finish_s: np.ndarray
    compute_s: np.ndarray
    comm_s: np.ndarray
    wait_s: np.ndarray
    critical_rank_s: np.ndarray | None
    event_rank: np.ndarray | None = None
    event_seq: np.ndarray | None = None
    event_op: np.ndarray | None = None
    start_s: np.ndarray | None = None
    end_s: np.ndarray | None = None
    n_collectives: int = 0
    n_messages: int = 0
    #: bytes of point-to-point sends posted by each rank, and bytes each rank received
    #: through matched messages (conservation: equal sums when every message matched)
    sent_bytes: np.ndarray | None = None
    received_bytes: np.ndarray | None = None
    options: ReplayOptions = field(default_factory=ReplayOptions)

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max()) if self.n_ranks else 0.0


# ------------------------------------------------------------------ network packing

def _link_arrays(link: LinkModel):
    if link.segments:
        lo = [s.min_bytes for s in link.segments]
        lat = [s.latency_s for s in link.segments]
        bw = [s.bandwidth_bytes_per_s for s in link.segments]
        lo[0] = 0.0
    else:
        lo, lat, bw = [0.0], [link.latency_s], [link.bandwidth_bytes_per_s]
    return lo, lat, bw


def pack_network(network: NetworkModel, placement: np.ndarray, options: ReplayOptions):
    """The numba ``net`` tuple (see pmac.collectives) for this network and placement."""
    intra = network.intra_node or network.inter_node
    inter = network.inter_node or network.intra_node
    if intra is None:
        raise InputError("the network model has neither intra_node nor inter_node links")
    parts = [_link_arrays(intra), _link_arrays(inter)]
    s = max(len(p[0]) for p in parts)
    seg_lo = np.full((2, s), np.inf)
    seg_lat = np.zeros((2, s))
    seg_bw = np.ones((2, s))
    nseg = np.zeros(2, np.int64)
    for k, (lo, lat, bw) in enumerate(parts):
        n = len(lo)
        seg_lo[k, :n], seg_lat[k, :n], seg_bw[k, :n], nseg[k] = lo, lat, bw, n
    o_s = np.array([intra.send_overhead_s, inter.send_overhead_s])
    o_r = np.array([intra.recv_overhead_s, inter.recv_overhead_s])
    eager = np.array([float(intra.eager_threshold_bytes), float(inter.eager_threshold_bytes)])
    flags = np.array([int(options.eager_buffered), int(options.rendezvous_handshake),
                      int(options.contention), int(options.route_timing)], np.int64)
    n_nodes = int(placement.max()) + 1 if placement.size else 1
    if intra.shaped and intra is network.intra_node:
        raise InputError("the intra_node link has a shaper: pmac shapes only inter-node egress")
    shaper = ((inter.shaper_rate_bytes_per_s, inter.shaper_burst_bytes, inter.shaper_header_bytes or 0.0)
              if inter.shaped else None)
    xchg = (intra.exchange_excess_s, inter.exchange_excess_s)
    if options.topology is not None:
        topo = options.topology
        if n_nodes > topo.n_hosts:
            raise InputError(f"placement uses {n_nodes} nodes but topology {topo.name} has {topo.n_hosts} hosts")
        rt = routes(topo)
        net = C.pack(o_s, o_r, eager, seg_lo, seg_lat, seg_bw, nseg, flags, np.arange(n_nodes), rt.n_hosts,
                     rt.route_off, rt.route_links, rt.link_inv_bw, rt.route_lat_s, rt.route_inv_bw, shaper, xchg)
    else:
        net = C.pack(o_s, o_r, eager, seg_lo, seg_lat, seg_bw, nseg, flags, np.zeros(n_nodes), 0,
                     np.zeros(1), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), shaper, xchg)
    return net


# ------------------------------------------------------------------ preparation (vectorised)

_KIND = np.full(256, K_LOCAL, np.int8)
for _o in (Op.SEND, Op.SSEND, Op.BSEND, Op.RSEND):
    _KIND[_o] = K_SEND
for _o in (Op.RECV, Op.MRECV):
    _KIND[_o] = K_RECV
for _o in (Op.SENDRECV, Op.SENDRECV_REPLACE):
    _KIND[_o] = K_SENDRECV
for _o in (Op.ISEND, Op.ISSEND, Op.IBSEND, Op.IRSEND):
    _KIND[_o] = K_ISEND
for _o in (Op.IRECV, Op.IMRECV):
    _KIND[_o] = K_IRECV
for _o in (Op.WAIT, Op.WAITALL, Op.WAITANY, Op.WAITSOME, Op.TEST, Op.TESTALL, Op.TESTANY, Op.TESTSOME):
    _KIND[_o] = K_WAIT
for _o in Op:
    if 60 <= _o < 80:
        _KIND[_o] = K_COLL
    elif 80 <= _o < 100:
        _KIND[_o] = K_ICOLL
#: op codes the core treats as collectives
_COLLECTIVE_OPS = np.flatnonzero((_KIND == K_COLL) | (_KIND == K_ICOLL))
#: op codes whose receive tag can be MPI_ANY_TAG in the core (a Recv_init's passes to its Starts)
_RECEIVE_OPS = np.append(np.flatnonzero((_KIND == K_RECV) | (_KIND == K_SENDRECV) | (_KIND == K_IRECV)), Op.RECV_INIT)
_MODE = np.zeros(256, np.int8)
for _o in (Op.SSEND, Op.ISSEND):
    _MODE[_o] = 1
for _o in (Op.BSEND, Op.IBSEND):
    _MODE[_o] = 2

#: collective name (CollectiveCost.op) -> the op code the replay prices
COLLECTIVE_CODES = {"barrier": int(Op.BARRIER), "bcast": int(Op.BCAST), "reduce": int(Op.REDUCE),
                    "allreduce": int(Op.ALLREDUCE), "allgather": int(Op.ALLGATHER), "alltoall": int(Op.ALLTOALL),
                    "gather": int(Op.GATHER), "scatter": int(Op.SCATTER)}


def _pow2_at_least(x: int) -> int:
    return 1 << max(int(x) - 1, 1).bit_length()


def _col(events, name, dtype):
    return np.ascontiguousarray(np.asarray(events[name]), dtype=dtype)


def collective_bytes(op: np.ndarray, send_bytes: np.ndarray, recv_bytes: np.ndarray,
                     n_members: np.ndarray) -> np.ndarray:
    """The size ``m`` a collective algorithm is priced with, from one member's byte columns
    (pmac.trace conventions): bcast max(send, recv); reduce/allreduce/scan send; gather/allgather
    send (one block); scatter recv (one block); alltoall send / P (one block); reduce_scatter
    recv (one block); v-variants: mean block (send / P for alltoallv, send for allgatherv)."""
    op = np.asarray(op)
    s = send_bytes.astype(np.float64)
    r = recv_bytes.astype(np.float64)
    p = np.maximum(n_members, 1).astype(np.float64)
    m = s.copy()
    base = np.where(op >= 80, op - 20, op)
    m = np.where(base == Op.BCAST, np.maximum(s, r), m)
    m = np.where(np.isin(base, (Op.SCATTER, Op.SCATTERV, Op.REDUCE_SCATTER, Op.REDUCE_SCATTER_BLOCK)), r, m)
    m = np.where(base == Op.SCATTERV, r, m)
    m = np.where(np.isin(base, (Op.ALLTOALL, Op.ALLTOALLV, Op.ALLTOALLW)), s / p, m)
    m = np.where(base == Op.BARRIER, 0.0, m)
    return m


def _ordinals(keys: list[np.ndarray], order_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort rows by (keys..., order_key); return (sort order, ordinal of each row within its key)."""
    order = np.lexsort([order_key] + keys[::-1])
    n = order.size
    if n == 0:
        return order, np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for k in keys:
        ks = k[order]
        change[1:] |= ks[1:] != ks[:-1]
    start = np.where(change, np.arange(n), 0)
    np.maximum.accumulate(start, out=start)
    ordinal_sorted = np.arange(n) - start
    ordinal = np.empty(n, np.int64)
    ordinal[order] = ordinal_sorted
    return order, ordinal


@dataclass
class _Prepared:
    n_ranks: int
    rank: np.ndarray
    seq: np.ndarray
    op: np.ndarray
    rank_off: np.ndarray
    kind: np.ndarray
    burst: np.ndarray
    #: send_bytes and dest of the events (the caller's columns where their dtypes fit)
    sbytes: np.ndarray
    dest: np.ndarray
    #: eager / inter-node bits of sends and receives, a send's uncontended wire time (a view of
    #: the records' ``arrival`` field, which holds it until the send's arrival is computed;
    #: pmac.replay_passes.prepare_events)
    sflag: np.ndarray
    wire: np.ndarray
    #: the packed network (pmac.collectives), its contention state fresh
    nf: np.ndarray
    ni: np.ndarray
    #: per send its matched receive, per receive its matched send (P_NULL, P_UNMATCHED); a
    #: collective call's psend is its instance
    psend: np.ndarray
    precv: np.ndarray
    wreq_off: np.ndarray
    wreq_ev: np.ndarray
    inst_off: np.ndarray
    inst_ev: np.ndarray
    inst_op: np.ndarray
    inst_root: np.ndarray
    inst_bytes: np.ndarray
    inst_table_s: np.ndarray
    inst_extra_s: np.ndarray
    node_of_rank: np.ndarray
    n_messages: int
    #: the per-event records (pmac.replay_core.event_dtypes) the per-event arrays above are views
    #: of; also post_t and arrival for the core
    rec: np.ndarray
    #: per rank: sum of bursts, bytes sent, bytes received through matched messages
    totals: np.ndarray
    #: the receives' source column (named in deadlock messages)
    source: np.ndarray
    #: ``relink(prepared, burst_s, placement, network, options)``: the same trace prepared for
    #: another machine without matching it again (:class:`Replayer`)
    relink: Callable
    #: with Startall calls expanded into one row per request: the first row of each original event
    first_of: np.ndarray | None = None


_PERSISTENT_FIELDS = ("comm", "dest", "source", "send_tag", "recv_tag", "send_bytes", "recv_bytes")


def _starts_as_nonblocking(rank: np.ndarray, cols: dict) -> None:
    """Rewrite each MPI_Start (in ``cols``, rows ordered by rank then seq) as the Isend / Irecv of
    the latest Send_init / Recv_init of its handle earlier on the same rank (vectorised)."""
    op, req = cols["op"], cols["request"]
    is_init = np.isin(op, (Op.SEND_INIT, Op.RECV_INIT)) & (req != NONE)
    is_start = (op == Op.START) & (req != NONE)
    if not (is_start.any() and is_init.any()):
        return
    cand = np.flatnonzero(is_init | is_start)
    c = cand[np.lexsort((cand, req[cand], rank[cand]))]        # by rank, handle, then call order
    new_grp = np.ones(c.size, bool)
    new_grp[1:] = (rank[c][1:] != rank[c][:-1]) | (req[c][1:] != req[c][:-1])
    grp_first = np.maximum.accumulate(np.where(new_grp, np.arange(c.size), 0))
    last_init = np.maximum.accumulate(np.where(is_init[c], np.arange(c.size), -1))
    use = is_start[c] & (last_init >= grp_first)
    s_ev, i_ev = c[use], c[last_init[use]]
    for name in _PERSISTENT_FIELDS + ("op",):
        cols[name] = cols[name].copy()       # never write into the caller's table
    for name in _PERSISTENT_FIELDS:
        cols[name][s_ev] = cols[name][i_ev]
    cols["op"][s_ev] = np.where(cols["op"][i_ev] == Op.SEND_INIT, int(Op.ISEND), int(Op.IRECV))


def _startall_as_starts(rank, seq, burst, cols, requests):
    """Expand each MPI_Startall into one MPI_Start row per request it names (its requests rows, in
    order; the first row keeps the burst, the others follow at once). Returns the new rank, seq and
    burst, rewrites ``cols`` (``display_op`` keeps STARTALL for messages) and the first row of each
    original event."""
    op = cols["op"]
    is_all = op == Op.STARTALL
    cnt = np.where(is_all, np.maximum(cols["n_requests"], 1), 1).astype(np.int64)
    first_of = np.cumsum(cnt) - cnt
    src = np.repeat(np.arange(op.size), cnt)
    within = np.arange(src.size) - first_of[src]
    cols.update({k: v[src] for k, v in cols.items()})
    sub = is_all[src] & (cols["n_requests"] > 0)
    cols["display_op"] = cols["op"].copy()
    cols["op"][is_all[src]] = Op.START
    if sub.any():
        if requests is None:
            raise InputError("events have MPI_Startall calls but no requests table was given")
        handles = _col(requests, "request", np.int64)
        rows = cols["req_offset"][sub] + within[sub]
        if rows.min() < 0 or rows.max() >= handles.size:
            e = int(src[sub][(rows < 0) | (rows >= handles.size)][0])
            raise InputError(f"rank {int(rank[e])} STARTALL (seq {int(seq[e])}): req_offset/n_requests point "
                             "outside the requests table")
        cols["request"][sub] = handles[rows]
    cols["req_offset"][is_all[src]] = NONE
    cols["n_requests"][is_all[src]] = 0

    def burst_of(b):
        return np.where(within == 0, b[src], 0.0)

    return rank[src], seq[src], burst_of(burst), first_of, burst_of


def _burst_column(events, burst_s, n: int) -> np.ndarray:
    burst = np.ascontiguousarray(events["burst_s"] if burst_s is None else burst_s, dtype=np.float64)  # read only
    if burst.shape != (n,):
        raise InputError(f"burst_s has {burst.size} values for {n} events")
    return burst


def _node_of_rank(placement, n_ranks: int) -> np.ndarray:
    if placement is None:
        return np.zeros(n_ranks, np.int64)
    node_of_rank = np.array(placement, dtype=np.int64, copy=True)
    if node_of_rank.shape != (n_ranks,) or (n_ranks and node_of_rank.min() < 0):
        raise InputError(f"placement must give a node >= 0 for each of the {n_ranks} ranks")
    return node_of_rank


def _prepare(events, burst_s, placement, network, options, requests, comms, n_ranks, caps=None) -> _Prepared:
    """The core's arrays; ``caps``: the first sizes of the preparation's hash tables (tests).
    ``relink`` of the result prepares the same trace for another machine (:class:`Replayer`)."""
    rank = _col(events, "rank", np.int32)
    seq = _col(events, "seq", np.int64)
    n = n_input = rank.size
    burst = _burst_column(events, burst_s, n)
    burst_steps = []  # the caller's burst column -> the prepared rows
    cols = {}
    for name, dt in (("op", np.int16), ("comm", np.int32), ("dest", np.int32), ("source", np.int32),
                     ("send_tag", np.int32), ("recv_tag", np.int32), ("send_bytes", np.int64),
                     ("recv_bytes", np.int64), ("root", np.int32), ("request", np.int64),
                     ("req_offset", np.int64), ("n_requests", np.int32)):
        cols[name] = _col(events, name, dt)
    order = None
    if n > 1 and not passes.sorted_by_rank_seq(rank, seq):
        order = np.lexsort((seq, rank))
        rank, seq, burst = rank[order], seq[order], burst[order]
        burst_steps.append(lambda b: b[order])
        cols = {k: v[order] for k, v in cols.items()}
    if n and rank[0] < 0:
        raise InputError("events: negative rank")
    if n_ranks is None:
        n_ranks = int(rank[-1]) + 1 if n else 0
    elif n and rank[-1] >= n_ranks:
        raise InputError(f"events name rank {int(rank[-1])} but n_ranks is {n_ranks}")
    node_of_rank = _node_of_rank(placement, n_ranks)
    op_count, any_tag_count = passes.op_histogram(cols["op"], cols["recv_tag"])
    first_of = None
    if op_count[Op.STARTALL]:
        rank, seq, burst, first_of, burst_of = _startall_as_starts(rank, seq, burst, cols, requests)
        burst_steps.append(burst_of)
        n = rank.size
    if op_count[Op.START] or op_count[Op.STARTALL]:
        _starts_as_nonblocking(rank, cols)
    # rows are sorted by rank; the needles in rank's dtype (int64 ones made numpy convert all of rank)
    rank_off = np.searchsorted(rank, np.arange(n_ranks + 1, dtype=rank.dtype)).astype(np.int64)
    op = cols["op"]
    dest, source, comm = cols["dest"], cols["source"], cols["comm"]
    sbytes = cols["send_bytes"]
    nf, ni = pack_network(network, node_of_rank if n_ranks else np.zeros(1, np.int64), options)
    display_op = cols.pop("display_op", op)

    def where_str(e):
        return f"rank {int(rank[e])} {op_name(display_op[e])} (seq {int(seq[e])})"

    # ---- one pass: kinds, link constants, matching, waits' requests, per-rank totals
    if requests is None:
        req_cols = (np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int8))
    else:
        req_cols = (_col(requests, "rank", np.int32), _col(requests, "request", np.int64),
                    _col(requests, "completed", np.int8))
    narrow = max(n, req_cols[0].size) < core.NARROW_LIMIT
    rec_dt, pair_dt = core.event_dtypes(narrow)
    rec = np.empty(n + 1, rec_dt)  # +1: sentinel event that never posts (missing collective member)
    pairs = np.empty(n, pair_dt)
    kind, sflag, wire = rec["kind"][:n], rec["sflag"][:n], rec["arrival"][:n]
    psend, precv = pairs["psend"], pairs["precv"]
    wreq_off = rec["wreq_off"]
    wreq_buf = np.empty(req_cols[0].size, np.int32 if narrow else np.int64)  # numpy's: huge pages
    coll = np.empty(int(op_count[_COLLECTIVE_OPS].sum()), np.int64)
    totals = np.empty((3, n_ranks))

    def run_pass(burst_in, node, nf, ni, tot, cap_m, cap_w, link_only=False):
        return passes.prepare_events(
            cols["op"], rank, dest, source, comm, cols["send_tag"], cols["recv_tag"], sbytes, burst_in, cols["request"],
            cols["req_offset"], cols["n_requests"], *req_cols, requests is not None,
            bool(any_tag_count[_RECEIVE_OPS].any()) and not link_only, n_ranks, _KIND, _MODE,
            node, nf, ni, kind, sflag, wire, rec["post_t"], rec["arrival"], psend, precv, wreq_off,
            wreq_buf, coll, tot[0], tot[1], tot[2], cap_m, cap_w, link_only)

    def check(err, e):
        if err == passes.E_BURST:
            raise InputError("burst_s must be finite and >= 0")
        if err == passes.E_RANK:
            raise InputError(f"events: rank {int(rank[e])} outside 0..{n_ranks - 1}")
        if err in (passes.E_DEST, passes.E_SOURCE):
            what, arr = ("destination", dest) if err == passes.E_DEST else ("source", source)
            raise ReplayError(f"{where_str(e)}: {what} {int(arr[e])} is not a rank of this trace")
        if err == passes.E_ANY_SOURCE:
            raise ReplayError(f"{where_str(e)}: receive from MPI_ANY_SOURCE without the status source; "
                              "cannot match it")
        if err == passes.E_NO_REQUESTS:
            raise InputError("events have wait/test calls but no requests table was given")
        if err == passes.E_REQ_ROWS:
            raise InputError(f"{where_str(e)}: req_offset/n_requests point outside the requests table")
        if err == passes.E_REQ_RANK:
            raise InputError(f"{where_str(e)}: its requests rows belong to another rank")
        if err:
            raise InputError(f"events: a preparation table outgrew its limit at {where_str(e)} (error {err})")

    n_messages, n_wreq, n_coll, err, e = passes.with_retry(
        lambda cap_m, cap_w: run_pass(burst, node_of_rank, nf, ni, totals, cap_m, cap_w),
        *(caps or (_pow2_at_least(8 * n_ranks + 64), 256)))
    check(err, e)
    wreq_ev = wreq_buf[:n_wreq]
    coll = coll[:n_coll]
    op = display_op

    # ---- collective instances: the k-th collective on a communicator of each member
    inst_off = np.zeros(1, np.int64)
    inst_ev = np.zeros(0, np.int64)
    inst_op = np.zeros(0, np.int64)
    inst_root = np.zeros(0, np.int64)
    inst_bytes = np.zeros(0)
    inst_table = inst_extra = np.zeros(0)
    if coll.size:
        if comms is None:
            from .trace import world_comm_table

            comms = world_comm_table(n_ranks)
        c_comm = _col(comms, "comm", np.int64)
        c_local = _col(comms, "local_rank", np.int64)
        c_world = _col(comms, "world_rank", np.int64)
        size_of = {}
        local_map = {}
        for cid in np.unique(c_comm):
            msk = c_comm == cid
            size_of[int(cid)] = int(msk.sum())
            local_map[int(cid)] = (c_world[msk], c_local[msk])
        cc = comm[coll].astype(np.int64)
        unknown = np.setdiff1d(np.unique(cc), np.array(list(size_of), np.int64))
        if unknown.size:
            e = int(coll[np.isin(cc, unknown)][0])
            raise ReplayError(f"{where_str(e)}: communicator {int(comm[e])} is not in the comms table")
        _, c_ord = _ordinals([cc, rank[coll].astype(np.int64)], coll)
        ikey = cc * (n + 1) + c_ord
        uniq, inst_idx = np.unique(ikey, return_inverse=True)
        n_inst = uniq.size
        psend[coll] = inst_idx  # a collective call's psend is its instance
        i_comm = uniq // (n + 1)
        i_size = np.array([size_of[int(c)] for c in i_comm], np.int64)
        inst_off = np.zeros(n_inst + 1, np.int64)
        inst_off[1:] = np.cumsum(i_size)
        inst_ev = np.full(int(inst_off[-1]), -1, np.int64)
        local = np.full(coll.size, -1, np.int64)
        root_local = np.full(coll.size, 0, np.int64)
        root_w = cols["root"][coll].astype(np.int64)
        for cid, (worlds, locals_) in local_map.items():
            msk = cc == cid
            if not msk.any():
                continue
            lut = np.full(n_ranks, -1, np.int64)
            good = worlds < n_ranks
            lut[worlds[good]] = locals_[good]
            local[msk] = lut[rank[coll][msk]]
            rw = root_w[msk]
            root_local[msk] = np.where(rw >= 0, lut[np.clip(rw, 0, n_ranks - 1)], 0)
        if np.any(local < 0):
            e = int(coll[local < 0][0])
            raise ReplayError(f"{where_str(e)}: rank is not a member of communicator {int(comm[e])}")
        slot = inst_off[inst_idx] + local
        if np.any(local >= i_size[inst_idx]):
            e = int(coll[local >= i_size[inst_idx]][0])
            raise ReplayError(f"{where_str(e)}: local rank outside communicator {int(comm[e])}")
        inst_ev[slot] = coll
        # all members must call the same operation
        base_op = np.where(op[coll] >= 80, op[coll] - 20, op[coll]).astype(np.int64)
        first_op = np.full(n_inst, -1, np.int64)
        first_op[inst_idx[::-1]] = base_op[::-1]
        bad = base_op != first_op[inst_idx]
        if bad.any():
            e = int(coll[bad][0])
            i = inst_idx[bad][0]
            other = int(inst_ev[inst_off[i]:inst_off[i + 1]][0])
            raise ReplayError(f"collective mismatch on communicator {int(comm[e])}: {where_str(e)} "
                              f"but {where_str(other)}")
        inst_op = first_op
        m = collective_bytes(op[coll], cols["send_bytes"][coll], cols["recv_bytes"][coll], i_size[inst_idx])
        inst_bytes = np.zeros(n_inst)
        np.maximum.at(inst_bytes, inst_idx, m)
        inst_root = np.zeros(n_inst, np.int64)
        inst_root[inst_idx] = root_local
        inst_table, inst_extra = _collective_tables(network, options, inst_op, i_size, inst_bytes, inst_ev,
                                                    inst_off, rank, node_of_rank)
        if np.any(inst_ev < 0):
            # a member never made this call: leave the slot to the deadlock report
            inst_ev = np.where(inst_ev < 0, n, inst_ev)  # sentinel (never posted)
    i_members = np.diff(inst_off)

    def relink(base: _Prepared, burst_s2, placement2, network2, options2) -> _Prepared:
        b = _burst_column(events, burst_s2, n_input)
        for step in burst_steps:
            b = step(b)
        node2 = _node_of_rank(placement2, n_ranks)
        nf2, ni2 = pack_network(network2, node2 if n_ranks else np.zeros(1, np.int64), options2)
        tot2 = np.empty((3, n_ranks))
        check(*run_pass(b, node2, nf2, ni2, tot2, 2, 2, link_only=True)[3:])
        tot2[2] = totals[2]   # bytes received through matched messages: the matching is kept
        table2, extra2 = _collective_tables(network2, options2, inst_op, i_members, inst_bytes, inst_ev, inst_off,
                                            rank, node2)
        return dataclasses.replace(base, burst=b, nf=nf2, ni=ni2, node_of_rank=node2, totals=tot2, inst_table_s=table2,
                                   inst_extra_s=extra2)

    # relink takes the prepared trace as an argument: a closure over it would make a reference
    # cycle, and the records (~36 bytes an event) would wait for the cyclic garbage collector
    return _Prepared(n_ranks=n_ranks, rank=rank, seq=seq, op=op, rank_off=rank_off, kind=kind,
                     burst=burst, sbytes=sbytes, dest=dest, sflag=sflag, wire=wire, nf=nf, ni=ni,
                     psend=psend, precv=precv, wreq_off=wreq_off, wreq_ev=np.ascontiguousarray(wreq_ev),
                     inst_off=inst_off, inst_ev=inst_ev, inst_op=inst_op,
                     inst_root=inst_root, inst_bytes=inst_bytes, inst_table_s=inst_table, inst_extra_s=inst_extra,
                     node_of_rank=node_of_rank, n_messages=n_messages, rec=rec, totals=totals,
                     source=source, relink=relink, first_of=first_of)


def _same_node(inst_off, inst_ev, rank, node_of_rank) -> np.ndarray:
    """Per collective instance: do all members share the first member's node."""
    n_inst = inst_off.size - 1
    ev_node = node_of_rank[rank[np.clip(inst_ev, 0, rank.size - 1)]]
    same = np.ones(n_inst, bool)
    seg = np.repeat(np.arange(n_inst), np.diff(inst_off))
    np.logical_and.at(same, seg, ev_node == ev_node[inst_off[:-1]][seg])
    return same


def _collective_tables(network, options, inst_op, i_size, inst_bytes, inst_ev, inst_off, rank, node_of_rank):
    """(measured time or NaN, excess) per collective instance for ``network`` and ``options``."""
    table = np.full(inst_op.size, np.nan)
    extra = np.zeros(inst_op.size)
    if not inst_op.size or not network.collectives or not (options.measured_collectives or options.collective_excess):
        return table, extra
    same = _same_node(inst_off, inst_ev, rank, node_of_rank)
    measured = _measured(network, inst_op, i_size, inst_bytes, same)
    if options.measured_collectives:
        table = measured
    if options.collective_excess:
        excess = _excess(network, inst_op, inst_bytes, same)
        # cheaper than its messages: the library does not send them (shared-memory collectives)
        table = np.where(np.isnan(table) & (excess < 0.0), measured, table)
        extra = np.where(np.isnan(table), excess, 0.0)
    return table, extra


def priced_bytes(c) -> float:
    """The size a probe row's call (a ``CollectiveCost``) is priced with: its ``msg_bytes`` is the
    send buffer, so an alltoall row's block is msg_bytes / n_ranks (:func:`collective_bytes`)."""
    one = np.array([c.msg_bytes])
    return float(collective_bytes(np.array([COLLECTIVE_CODES[c.op]]), one, one, np.array([c.n_ranks]))[0])


def _curves(network, value) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """The network's collective rows with a ``value(row)`` (not None) as curves over the priced
    size: ``{(op code, n_ranks, intra_node): (sizes ascending, values)}``."""
    groups: dict[tuple, list] = {}
    for c in network.collectives:
        v = value(c)
        if v is not None:
            key = (COLLECTIVE_CODES[c.op], c.n_ranks, c.placement == "intra_node")
            groups.setdefault(key, []).append((priced_bytes(c), v))
    out = {}
    for key, pts in groups.items():
        pts.sort()
        out[key] = (np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float))
    return out


def _excess(network, inst_op, inst_bytes, same_node) -> np.ndarray:
    """The calibrated excess of each instance (pmac.calibrate_collectives: 2-rank rows, linear in
    the priced size between the probe's sizes, the end values outside), 0 where none."""
    out = np.zeros(inst_op.size)
    for (code, nr, intra), (xs, ys) in _curves(network, lambda c: c.excess_s).items():
        sel = (inst_op == code) & (same_node == intra)
        if nr == 2 and sel.any():
            out[sel] = np.interp(inst_bytes[sel], xs, ys)
    return out


def _measured(network, inst_op, i_size, inst_bytes, same_node):
    """The measured time of each instance whose op, size of communicator, placement and priced
    size (between the probe's sizes, linear) the network's table covers; NaN elsewhere."""
    out = np.full(inst_op.size, np.nan)
    for (code, nr, intra), (xs, ys) in _curves(network, lambda c: c.time_s).items():
        sel = (inst_op == code) & (i_size == nr) & (same_node == intra)
        if not sel.any():
            continue
        m = inst_bytes[sel]
        inside = (m >= xs[0]) & (m <= xs[-1])
        cur = out[sel]
        cur[inside] = np.interp(m, xs, ys)[inside]
        out[sel] = cur
    return out


# ------------------------------------------------------------------ public entry point

class Replayer:
    """One trace replayed on several machines: the first :meth:`replay` prepares it (matching,
    waits, collective instances), later ones only redo what depends on the machine (link
    constants, placement, bursts, measured collective times). :func:`pmac.predict.predict` uses
    one per signature. Results equal :func:`replay`'s."""

    def __init__(self, events, *, requests=None, comms=None, n_ranks: int | None = None):
        self.events, self.requests, self.comms, self.n_ranks = events, requests, comms, n_ranks
        self._prep: _Prepared | None = None

    def replay(self, burst_s=None, placement=None, network: NetworkModel | None = None,
               options: ReplayOptions | None = None, *,
               progress: Callable[[float, str], None] | None = None) -> ReplayResult:
        if network is None:
            raise InputError("replay needs a NetworkModel")
        options = options or ReplayOptions()
        if progress:
            progress(0.0, "matching messages")
        if self._prep is None:
            self._prep = _prepare(self.events, burst_s, placement, network, options, self.requests, self.comms,
                                  self.n_ranks)
            prep = self._prep
        else:
            prep = self._prep.relink(self._prep, burst_s, placement, network, options)
        return _run(prep, options, progress)


def replay(events, burst_s=None, placement=None, network: NetworkModel | None = None,
           options: ReplayOptions | None = None, *, requests=None, comms=None, n_ranks: int | None = None,
           progress: Callable[[float, str], None] | None = None) -> ReplayResult:
    """Replay ``events`` (pmac.trace.EVENTS columns) and return per-rank times (see module doc)."""
    return Replayer(events, requests=requests, comms=comms, n_ranks=n_ranks).replay(
        burst_s, placement, network, options, progress=progress)


def _run(prep: _Prepared, options: ReplayOptions, progress) -> ReplayResult:
    n = prep.kind.size
    post_t = prep.rec["post_t"]   # NaN until posted (pmac.replay_passes.prepare_events)
    arrival = prep.rec["arrival"]
    cause = np.empty(n if options.critical_path else 0, prep.wreq_off.dtype)
    end_t = np.full(n + 1 if options.timeline else 1, np.nan)
    p = prep.n_ranks
    comm_out = np.zeros(p)
    wait_out = np.zeros(p)
    clock = np.zeros(p)
    ptr = np.zeros(p, np.int64)
    bk = np.zeros(p, np.int64)
    bw = np.zeros(p, np.int64)
    if progress:
        progress(0.1, "replaying")
    ok = core.run(prep.nf, prep.ni, prep.rank_off, prep.kind, prep.sflag, prep.wire, prep.sbytes, prep.dest,
                  prep.node_of_rank, prep.rank, prep.burst, prep.psend, prep.precv, prep.wreq_off, prep.wreq_ev,
                  prep.inst_off, prep.inst_ev, prep.inst_op, prep.inst_root, prep.inst_bytes,
                  prep.inst_table_s, prep.inst_extra_s, bool(options.contention) or bool(prep.ni[C.NI_SHAPED]),
                  bool(options.timeline), post_t, end_t, arrival,
                  cause, comm_out, wait_out, clock, ptr, bk, bw)
    if not ok:
        raise ReplayError(_deadlock_message(prep, ptr, bk, bw))
    compute, sent, received = prep.totals
    finish = clock.copy()
    crit = _critical(prep, post_t, cause, finish) if options.critical_path else None
    first = prep.first_of
    res = dict(n_ranks=p, n_events=n if first is None else first.size, finish_s=finish, compute_s=compute,
               comm_s=comm_out, wait_s=wait_out,
               critical_rank_s=crit, n_collectives=int(prep.inst_off.size - 1), n_messages=prep.n_messages,
               options=options, sent_bytes=sent, received_bytes=received)
    if options.timeline:
        if first is None:
            res.update(event_rank=prep.rank, event_seq=prep.seq, event_op=prep.op, start_s=post_t[:n].copy(),
                       end_s=end_t[:n].copy())
        else:  # Startall rows expanded: the call starts with its first request and ends with its last
            last = np.append(first[1:], n) - 1
            res.update(event_rank=prep.rank[first], event_seq=prep.seq[first], event_op=prep.op[first],
                       start_s=post_t[first], end_s=end_t[last])
    if progress:
        progress(1.0, "done")
    return ReplayResult(**res)


def replay_signature(sig, burst_s=None, placement=None, network: NetworkModel | None = None,
                     options: ReplayOptions | None = None, **kw) -> ReplayResult:
    """:func:`replay` on a loaded :class:`~pmac.signature.Signature` (its tables, in memory)."""
    return replay(sig.events, burst_s, placement, network, options, requests=sig.requests, comms=sig.comms,
                  n_ranks=sig.n_ranks, **kw)


@njit(cache=True)
def _critical_walk(rank_off, ev_rank, post_t, cause, finish, out):
    """Walk back from the last rank to finish: along a rank until a call that waited for a
    partner event c, then jump to c's rank at c's start. Charges each stretch to its rank."""
    p = rank_off.shape[0] - 1
    r = 0
    for q in range(p):
        if finish[q] > finish[r]:
            r = q
    t_hi = finish[r]
    e = rank_off[r + 1] - 1
    while True:
        first = rank_off[r]
        while e >= first and cause[e] < 0:
            e -= 1
        if e < first:
            out[r] += t_hi
            return
        c = cause[e]
        tc = post_t[c]
        if tc > t_hi:
            tc = t_hi
        out[r] += t_hi - tc
        t_hi = tc
        r = ev_rank[c]
        e = c - 1


def _critical(prep, post_t, cause, finish):
    out = np.zeros(prep.n_ranks)
    if prep.n_ranks and prep.kind.size:
        _critical_walk(prep.rank_off, prep.rank, post_t, cause, finish, out)
    return out


def _deadlock_message(prep, ptr, bk, bw) -> str:
    stuck = [r for r in range(prep.n_ranks) if ptr[r] < prep.rank_off[r + 1]]
    parts = []
    for r in stuck[:8]:
        e = int(ptr[r])
        what = f"rank {r} in {op_name(prep.op[e])} (seq {int(prep.seq[e])})"
        kind, w = int(bk[r]), int(bw[r])
        if kind == B_EVENT and 0 <= w < prep.rank.size:
            what += f" waiting for rank {int(prep.rank[w])} {op_name(prep.op[w])} (seq {int(prep.seq[w])})"
        elif kind == B_NEVER and 0 <= w < prep.rank.size:
            k = prep.kind[w]
            if k in (K_RECV, K_IRECV) or (k == K_SENDRECV and prep.precv[w] == P_UNMATCHED):
                what += f": no matching send from rank {int(prep.source[w])}"
            else:
                what += f": no matching receive on rank {int(prep.dest[w])}"
            if w != e:
                what += f" (request of {op_name(prep.op[w])} seq {int(prep.seq[w])})"
        elif kind == B_INST:
            lo, hi = prep.inst_off[w], prep.inst_off[w + 1]
            members = prep.inst_ev[lo:hi]
            absent = int((members >= prep.rank.size).sum())
            what += f" waiting for {absent} member(s) of the collective" if absent else \
                " waiting for the collective"
        parts.append(what)
    more = f" (+{len(stuck) - 8} more)" if len(stuck) > 8 else ""
    return f"deadlock: {len(stuck)} rank(s) blocked: " + "; ".join(parts) + more

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
  ignored. Matching is done once, before the run, by sorting (O(n log n), vectorised); the
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
  member ends at ``max(start of all members) + time_s``.
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
  ``options.route_timing``: the inter-node wire time is the route's own latency and bottleneck
  bandwidth (as in a SimGrid platform) instead of the LinkModel's segments.
- A trace that cannot finish (a receive with no matching send, a rendezvous send never
  received, a cycle of blocking calls, a collective some member never joins) raises
  :class:`~pmac.errors.ReplayError` naming each blocked rank, its call (op, seq) and what it
  waits for.

Memory: a few arrays of one number per event; no per-event Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
from numba import njit

from . import collectives as C
from .errors import InputError, ReplayError
from .profile import LinkModel, NetworkModel
from .topology import Topology, routes
from .trace import ANY_SOURCE, COMPLETION_OPS, NONE, Op, op_name

# event kinds in the core
K_LOCAL, K_SEND, K_RECV, K_SENDRECV, K_ISEND, K_IRECV, K_WAIT, K_COLL, K_ICOLL = range(9)
# what a blocked rank waits for
B_NONE, B_EVENT, B_INST, B_NEVER = 0, 1, 2, 3
# partner codes
P_NULL, P_UNMATCHED = -1, -2


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
    #: eager data leaves at the send (True) or once the receive is posted too (False, SimGrid)
    eager_buffered: bool = True
    #: rendezvous pays a request-to-send / clear-to-send round trip
    rendezvous_handshake: bool = True
    #: keep every call's start and end time
    timeline: bool = False

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
    for) spends on rank r; it sums to the makespan.
    """

    n_ranks: int
    n_events: int
    finish_s: np.ndarray
    compute_s: np.ndarray
    comm_s: np.ndarray
    wait_s: np.ndarray
    critical_rank_s: np.ndarray
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
    if options.topology is not None:
        topo = options.topology
        if n_nodes > topo.n_hosts:
            raise InputError(f"placement uses {n_nodes} nodes but topology {topo.name} has {topo.n_hosts} hosts")
        rt = routes(topo)
        net = C.pack(o_s, o_r, eager, seg_lo, seg_lat, seg_bw, nseg, flags, np.arange(n_nodes), rt.n_hosts,
                     rt.route_off, rt.route_links, rt.link_inv_bw, rt.route_lat_s, rt.route_inv_bw)
    else:
        net = C.pack(o_s, o_r, eager, seg_lo, seg_lat, seg_bw, nseg, flags, np.zeros(n_nodes), 0,
                     np.zeros(1), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))
    return net


# ------------------------------------------------------------------ the core

@njit(cache=True)
def _wake(bk, bw, q, kind_, what, heap_keys, heap_vals, hn, stack, sn, ordered, post_t, ptr):
    if bk[q] == kind_ and bw[q] == what:
        bk[q] = B_NONE
        if ordered:
            _heap_push(heap_keys, heap_vals, hn, post_t[ptr[q]], q)
        else:
            stack[sn[0]] = q
            sn[0] += 1


@njit(cache=True)
def _heap_push(keys, vals, hn, key, val):
    i = hn[0]
    hn[0] += 1
    keys[i] = key
    vals[i] = val
    while i > 0:
        p = (i - 1) >> 1
        if keys[p] < keys[i] or (keys[p] == keys[i] and vals[p] <= vals[i]):
            break
        keys[p], keys[i] = keys[i], keys[p]
        vals[p], vals[i] = vals[i], vals[p]
        i = p


@njit(cache=True)
def _heap_pop(keys, vals, hn):
    top = vals[0]
    hn[0] -= 1
    n = hn[0]
    keys[0] = keys[n]
    vals[0] = vals[n]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        b = a + 1
        c = a
        if b < n and (keys[b] < keys[a] or (keys[b] == keys[a] and vals[b] < vals[a])):
            c = b
        if keys[i] < keys[c] or (keys[i] == keys[c] and vals[i] <= vals[c]):
            break
        keys[c], keys[i] = keys[i], keys[c]
        vals[c], vals[i] = vals[i], vals[c]
        i = c
    return top


@njit(cache=True)
def _run(lk, o_r2, rank_off, kind, mode, burst, sbytes, ev_rank, node_of_rank, snode, rnode, psend, precv,
         wreq_off, wreq_ev, inst_of, inst_off, inst_ev, inst_op, inst_root, inst_bytes, inst_table_s,
         ordered, want_tl, post_t, end_t, arrival, done_t, cause, comm_out, wait_out, clock, ptr, bk, bw):
    n_ranks = rank_off.shape[0] - 1
    n_inst = inst_off.shape[0] - 1
    inst_count = np.zeros(n_inst, np.int64)
    inst_maxarr = np.full(n_inst, -np.inf)
    inst_last = np.full(n_inst, -1, np.int64)
    net, flags, o_s2, eager2, wire, w0 = lk
    buffered = flags[0]
    heap_keys = np.empty(n_ranks + 1)
    heap_vals = np.empty(n_ranks + 1, np.int64)
    hn = np.zeros(1, np.int64)
    stack = np.empty(n_ranks + 1, np.int64)
    sn = np.zeros(1, np.int64)
    for r in range(n_ranks - 1, -1, -1):
        ptr[r] = rank_off[r]
        clock[r] = 0.0
        if rank_off[r] < rank_off[r + 1]:
            if ordered:
                _heap_push(heap_keys, heap_vals, hn, burst[rank_off[r]], r)
            else:
                stack[sn[0]] = r
                sn[0] += 1
    tbuf = np.empty(n_ranks)
    nbuf = np.empty(n_ranks, np.int64)
    while True:
        if ordered:
            if hn[0] == 0:
                break
            r = _heap_pop(heap_keys, heap_vals, hn)
        else:
            if sn[0] == 0:
                break
            sn[0] -= 1
            r = stack[sn[0]]
        end_r = rank_off[r + 1]
        while ptr[r] < end_r:
            e = ptr[r]
            k = kind[e]
            if np.isnan(post_t[e]):
                t0 = clock[r] + burst[e]
                post_t[e] = t0
                # ---- posting side effects
                if (k == K_SEND or k == K_SENDRECV or k == K_ISEND) and snode[e] >= 0 and buffered != 0:
                    link = 0 if node_of_rank[r] == snode[e] else 1
                    if _eager(eager2[link], sbytes[e], mode[e]):
                        arrival[e] = _arrival(lk, e, node_of_rank[r], snode[e], sbytes[e], mode[e], t0, t0)
                if k == K_COLL or k == K_ICOLL:
                    i = inst_of[e]
                    inst_count[i] += 1
                    if t0 >= inst_maxarr[i]:
                        inst_maxarr[i] = t0
                        inst_last[i] = e
                    if inst_count[i] == inst_off[i + 1] - inst_off[i]:
                        n = inst_off[i + 1] - inst_off[i]
                        tt = tbuf[:n]
                        nn = nbuf[:n]
                        for j in range(n):
                            x = inst_ev[inst_off[i] + j]
                            tt[j] = post_t[x]
                            nn[j] = node_of_rank[ev_rank[x]]
                        if not np.isnan(inst_table_s[i]):
                            for j in range(n):
                                tt[j] = inst_maxarr[i] + inst_table_s[i]
                        else:
                            C.collective_exit(net, inst_op[i], nn, tt, inst_root[i], inst_bytes[i])
                        for j in range(n):
                            x = inst_ev[inst_off[i] + j]
                            done_t[x] = tt[j]
                            q = ev_rank[x]
                            if q != r:
                                _wake(bk, bw, q, B_INST, i, heap_keys, heap_vals, hn, stack, sn, ordered, post_t, ptr)
                # wake partners waiting for this post
                y = psend[e]
                if y >= 0 and (k == K_SEND or k == K_SENDRECV or k == K_ISEND):
                    _wake(bk, bw, ev_rank[y], B_EVENT, e, heap_keys, heap_vals, hn, stack, sn, ordered, post_t, ptr)
                y = precv[e]
                if y >= 0 and (k == K_RECV or k == K_SENDRECV or k == K_IRECV):
                    _wake(bk, bw, ev_rank[y], B_EVENT, e, heap_keys, heap_vals, hn, stack, sn, ordered, post_t, ptr)
            t0 = post_t[e]
            end = t0
            ref = t0  # latest partner post this call waited for
            cz = -1   # the partner event that determined the end (critical path)
            blocked = False
            if k == K_SEND or k == K_SENDRECV or k == K_ISEND:
                if snode[e] >= 0:
                    link = 0 if node_of_rank[r] == snode[e] else 1
                    if k == K_ISEND:
                        end = t0 + o_s2[link]
                    else:
                        d, w = _send_done(lk, e, r, link, post_t, arrival, psend, mode, sbytes,
                                          node_of_rank, snode)
                        if w == -1:
                            end = max(end, d)
                            p = psend[e]
                            if p >= 0 and not _eager(eager2[link], sbytes[e], mode[e]) and post_t[p] > ref:
                                ref = post_t[p]
                                cz = p
                        else:
                            blocked = True
                            bk[r] = B_NEVER if w == -2 else B_EVENT
                            bw[r] = e if w == -2 else w
            if not blocked and (k == K_RECV or k == K_SENDRECV):
                s = precv[e]
                if s != P_NULL:
                    if s == P_UNMATCHED:
                        blocked = True
                        bk[r] = B_NEVER
                        bw[r] = e
                    elif np.isnan(post_t[s]):
                        blocked = True
                        bk[r] = B_EVENT
                        bw[r] = s
                    else:
                        d = _recv_done(lk, o_r2, e, s, post_t, arrival, mode, sbytes, node_of_rank, ev_rank, rnode)
                        if d > end:
                            end = d
                        if post_t[s] > ref:
                            ref = post_t[s]
                            cz = s
            if k == K_WAIT:
                for j in range(wreq_off[e], wreq_off[e + 1]):
                    x = wreq_ev[j]
                    kx = kind[x]
                    if kx == K_ISEND:
                        if snode[x] < 0:
                            continue
                        link = 0 if node_of_rank[r] == snode[x] else 1
                        d, w = _send_done(lk, x, r, link, post_t, arrival, psend, mode, sbytes,
                                          node_of_rank, snode)
                        if w != -1:
                            blocked = True
                            bk[r] = B_NEVER if w == -2 else B_EVENT
                            bw[r] = x if w == -2 else w
                            break
                        if d > end:
                            end = d
                        p = psend[x]
                        if p >= 0 and not _eager(eager2[link], sbytes[x], mode[x]) and post_t[p] > ref:
                            ref = post_t[p]
                            cz = p
                    elif kx == K_IRECV:
                        s = precv[x]
                        if s == P_NULL:
                            continue
                        if s == P_UNMATCHED:
                            blocked = True
                            bk[r] = B_NEVER
                            bw[r] = x
                            break
                        if np.isnan(post_t[s]):
                            blocked = True
                            bk[r] = B_EVENT
                            bw[r] = s
                            break
                        d = _recv_done(lk, o_r2, x, s, post_t, arrival, mode, sbytes, node_of_rank, ev_rank, rnode)
                        if d > end:
                            end = d
                        if post_t[s] > ref:
                            ref = post_t[s]
                            cz = s
                    elif kx == K_ICOLL:
                        i = inst_of[x]
                        if np.isnan(done_t[x]):
                            blocked = True
                            bk[r] = B_INST
                            bw[r] = i
                            break
                        if done_t[x] > end:
                            end = done_t[x]
                        if inst_maxarr[i] > ref:
                            ref = inst_maxarr[i]
                            cz = inst_last[i]
            elif k == K_COLL:
                i = inst_of[e]
                if np.isnan(done_t[e]):
                    blocked = True
                    bk[r] = B_INST
                    bw[r] = i
                else:
                    end = done_t[e]
                    ref = inst_maxarr[i]
                    cz = inst_last[i]
            if blocked:
                break
            bk[r] = B_NONE
            dur = end - t0
            wt = ref - t0
            if wt < 0.0:
                wt = 0.0
            if wt > dur:
                wt = dur
            wait_out[r] += wt
            comm_out[r] += dur - wt
            if cz >= 0 and ev_rank[cz] == r:
                cz = -1
            cause[e] = cz if wt > 0.0 else -1
            if want_tl:
                end_t[e] = end
            clock[r] = end
            ptr[r] = e + 1
            if ordered:
                if e + 1 < end_r:
                    _heap_push(heap_keys, heap_vals, hn, end + burst[e + 1], r)
                break
    done = True
    for r in range(n_ranks):
        if ptr[r] < rank_off[r + 1]:
            done = False
    return done


@njit(cache=True, inline="always")
def _eager(threshold, m, mode):
    """mode 0 standard, 1 synchronous (always rendezvous), 2 buffered (always eager)."""
    if mode == 1:
        return False
    if mode == 2:
        return True
    return m <= threshold


@njit(cache=True)
def _arrival(lk, s, src_node, dst_node, m, mode, ts, tr):
    """pmac.collectives.arrival_s for send event ``s`` with its precomputed wire times (the same
    arithmetic); under contention inter-node transfers go through collectives.transfer."""
    net, flags, o_s2, eager2, wire, w0 = lk
    link = 0 if src_node == dst_node else 1
    if _eager(eager2[link], m, mode):
        ready = ts + o_s2[link]
        if flags[0] == 0 and tr > ready:
            ready = tr
    elif flags[1] != 0:
        l0 = w0[s]
        ready = max(ts + o_s2[link] + l0, tr) + l0
    else:
        ready = max(ts + o_s2[link], tr)
    if link == 1 and flags[2] != 0:
        return C.transfer(net, src_node, dst_node, m, ready)
    return ready + wire[s]


@njit(cache=True)
def _send_done(lk, e, r, link, post_t, arrival, psend, mode, sbytes, node_of_rank, snode):
    """(done time, -1) or (nan, event waited for) or (nan, -2) when it can never complete."""
    if _eager(lk[3][link], sbytes[e], mode[e]):
        return post_t[e] + lk[2][link], -1
    p = psend[e]
    if p < 0:
        return np.nan, -2
    if np.isnan(post_t[p]):
        return np.nan, p
    if np.isnan(arrival[e]):
        arrival[e] = _arrival(lk, e, node_of_rank[r], snode[e], sbytes[e], mode[e], post_t[e], post_t[p])
    return arrival[e], -1


@njit(cache=True)
def _recv_done(lk, o_r2, e, s, post_t, arrival, mode, sbytes, node_of_rank, ev_rank, rnode):
    src = rnode[e]
    dst = node_of_rank[ev_rank[e]]
    if np.isnan(arrival[s]):
        arrival[s] = _arrival(lk, s, src, dst, sbytes[s], mode[s], post_t[s], post_t[e])
    link = 0 if src == dst else 1
    return max(post_t[e], arrival[s]) + o_r2[link]


@njit(cache=True)
def _wire_times(net, kind, rank, node_of_rank, snode, sbytes, wire, w0):
    """Uncontended wire time of every send's message, and of an empty message on its path."""
    last_m = np.full(2, -1.0)
    last_w = np.zeros(2)
    zero_w = np.zeros(2)
    for k in range(2):
        zero_w[k] = C.wire_s(net, k, 0.0)
    per_route = net[1][C.NI_ROUTE_TIMING] != 0
    for e in range(kind.shape[0]):
        d = snode[e]
        if d < 0 or not _is_send(kind[e]):
            continue
        src = node_of_rank[rank[e]]
        link = 0 if src == d else 1
        m = sbytes[e]
        if per_route and link == 1:
            wire[e] = C.wire_nodes(net, src, d, m)
            w0[e] = C.wire_nodes(net, src, d, 0.0)
            continue
        if m != last_m[link]:
            last_m[link] = m
            last_w[link] = C.wire_s(net, link, m)
        wire[e] = last_w[link]
        w0[e] = zero_w[link]


# ------------------------------------------------------------------ preparation (numba passes)
# A growable open-addressing hash table of (a, b) int64 key pairs -> dense ids 0, 1, ... in order
# of first insertion: arrays (ta, tb, tv), tv[slot] = id or -1.

@njit(cache=True)
def _ht_new(cap):
    return np.empty(cap, np.int64), np.empty(cap, np.int64), np.full(cap, -1, np.int64)


@njit(cache=True)
def _ht_slot(ta, tb, tv, a, b):
    mask = tv.shape[0] - 1
    h = a * -7046029254386353131 + b * 1442695040888963407
    h = (h ^ (h >> 31)) & mask
    while tv[h] >= 0 and (ta[h] != a or tb[h] != b):
        h = (h + 1) & mask
    return h


@njit(cache=True)
def _ht_id(tabs, a, b, n_keys):
    """(id of key (a, b), inserting it as id n_keys when new; the tables, grown when half full)."""
    ta, tb, tv = tabs
    h = _ht_slot(ta, tb, tv, a, b)
    if tv[h] >= 0:
        return tv[h], tabs
    ta[h], tb[h], tv[h] = a, b, n_keys
    if 2 * (n_keys + 1) > tv.shape[0]:
        na, nb, nv = _ht_new(2 * tv.shape[0])
        for s in range(tv.shape[0]):
            if tv[s] >= 0:
                g = _ht_slot(na, nb, nv, ta[s], tb[s])
                na[g], nb[g], nv[g] = ta[s], tb[s], tv[s]
        tabs = (na, nb, nv)
    return n_keys, tabs


@njit(cache=True)
def _ht_get(tabs, a, b):
    ta, tb, tv = tabs
    return tv[_ht_slot(ta, tb, tv, a, b)]


@njit(cache=True, inline="always")
def _is_send(k):
    return k == K_SEND or k == K_SENDRECV or k == K_ISEND


@njit(cache=True, inline="always")
def _is_recv(k):
    return k == K_RECV or k == K_SENDRECV or k == K_IRECV


@njit(cache=True)
def _scan(op, rank, dest, source, burst, n_ranks, kind_lut, mode_lut, node_of_rank, kind, mode, snode, rnode):
    """Kinds, modes and peer nodes of every event; (error code, event) of the first bad one:
    1 destination or 2 source not a rank, 3 receive still MPI_ANY_SOURCE, 4 bad burst, 5 rank out
    of range."""
    for e in range(op.shape[0]):
        if not (burst[e] >= 0.0 and burst[e] < np.inf):
            return 4, e
        if rank[e] < 0 or rank[e] >= n_ranks:
            return 5, e
        o = op[e] & 0xFF
        k = kind_lut[o]
        kind[e] = k
        mode[e] = mode_lut[o]
        snode[e] = -1
        rnode[e] = -1
        if _is_send(k):
            d = dest[e]
            if d >= n_ranks or d < NONE:
                return 1, e
            if d >= 0:
                snode[e] = node_of_rank[d]
        if _is_recv(k):
            s = source[e]
            if s == ANY_SOURCE:
                return 3, e
            if s >= n_ranks or s < NONE:
                return 2, e
            if s >= 0:
                rnode[e] = node_of_rank[s]
    return 0, -1


@njit(cache=True)
def _match(kind, rank, dest, source, comm, send_tag, recv_tag, psend, precv):
    """Point-to-point matching: the k-th send of (comm, source, dest, tag) to the k-th receive of
    the same key, in event order (MPI's non-overtaking rule); a (comm, source, dest) pair with a
    MPI_ANY_TAG receive ignores tags. Fills psend / precv (partner event, P_NULL, P_UNMATCHED) and
    returns the number of matched messages. O(n) with hash tables, no sort."""
    n = kind.shape[0]
    wild = _ht_new(64)
    n_wild = 0
    for e in range(n):
        if _is_recv(kind[e]) and source[e] >= 0 and recv_tag[e] < 0:
            key, wild = _ht_id(wild, (np.int64(comm[e]) << 32) | source[e], rank[e], n_wild)
            if key == n_wild:
                n_wild += 1
    keys = _ht_new(1024)
    n_keys = 0
    s_key = np.full(n, -1, np.int64)
    r_key = np.full(n, -1, np.int64)
    cnt = np.zeros(1024, np.int64)  # per key: receives seen, then sends seen
    for e in range(n):
        k = kind[e]
        psend[e] = P_UNMATCHED
        precv[e] = P_UNMATCHED
        for side in range(2):
            if side == 0:
                if not _is_send(k):
                    continue
                if dest[e] < 0:
                    psend[e] = P_NULL
                    continue
                src, dst, tag = np.int64(rank[e]), np.int64(dest[e]), np.int64(send_tag[e])
            else:
                if not _is_recv(k):
                    continue
                if source[e] < 0:
                    precv[e] = P_NULL
                    continue
                src, dst, tag = np.int64(source[e]), np.int64(rank[e]), np.int64(recv_tag[e])
            a = np.int64(comm[e]) << 32
            if n_wild and _ht_get(wild, a | src, dst) >= 0:
                tag = 0
            key, keys = _ht_id(keys, a | (tag & 0xFFFFFFFF), (src << 32) | dst, n_keys)
            if key == n_keys:
                n_keys += 1
                if n_keys > cnt.shape[0]:
                    c2 = np.zeros(2 * cnt.shape[0], np.int64)
                    c2[:cnt.shape[0]] = cnt
                    cnt = c2
            if side == 0:
                s_key[e] = key
            else:
                r_key[e] = key
                cnt[key] += 1
    # receives of each key in event order: slots rslot[roff[key] ...]
    roff = np.zeros(n_keys + 1, np.int64)
    for i in range(n_keys):
        roff[i + 1] = roff[i] + cnt[i]
    rslot = np.empty(roff[n_keys], np.int64)
    for i in range(n_keys):
        cnt[i] = 0
    for e in range(n):
        key = r_key[e]
        if key >= 0:
            rslot[roff[key] + cnt[key]] = e
            cnt[key] += 1
    for i in range(n_keys):
        cnt[i] = 0
    n_msg = 0
    for e in range(n):
        key = s_key[e]
        if key >= 0:
            j = cnt[key]
            cnt[key] += 1
            if j < roff[key + 1] - roff[key]:
                x = rslot[roff[key] + j]
                psend[e] = x
                precv[x] = e
                n_msg += 1
    return n_msg


@njit(cache=True)
def _resolve_waits(kind, op, rank, request, req_offset, n_requests, req_rank, req_handle, req_done, wreq_off):
    """For each completion call, the events that created the requests it completes (all for
    Wait/Waitall, the completed ones for the others): the latest Isend/Irecv/I-collective with the
    same handle earlier on the same rank, in event order. Fills wreq_off (CSR) and returns
    (wreq_ev, error code, event): 1 rows outside the requests table, 2 rows of another rank."""
    n = kind.shape[0]
    n_rows = req_rank.shape[0]
    out = np.empty(n_rows, np.int64)
    m = 0
    tabs = _ht_new(1024)
    n_keys = 0
    creator = np.empty(1024, np.int64)
    wreq_off[0] = 0
    for e in range(n):
        k = kind[e]
        if (k == K_ISEND or k == K_IRECV or k == K_ICOLL) and request[e] != NONE:
            key, tabs = _ht_id(tabs, np.int64(rank[e]), request[e], n_keys)
            if key == n_keys:
                n_keys += 1
                if n_keys > creator.shape[0]:
                    c2 = np.empty(2 * creator.shape[0], np.int64)
                    c2[:creator.shape[0]] = creator
                    creator = c2
            creator[key] = e
        elif k == K_WAIT and n_requests[e] > 0:
            lo = req_offset[e]
            hi = lo + n_requests[e]
            if lo < 0 or hi > n_rows:
                return out[:0], 1, e
            all_done = op[e] == 50 or op[e] == 51  # Wait, Waitall
            first = m
            for row in range(lo, hi):
                if req_rank[row] != rank[e]:
                    return out[:0], 2, e
                if not all_done and req_done[row] != 1:
                    continue
                key = _ht_get(tabs, np.int64(rank[e]), req_handle[row])
                if key < 0:
                    continue
                c = creator[key]
                j = m  # insertion sort by creator (stable)
                while j > first and out[j - 1] > c:
                    out[j] = out[j - 1]
                    j -= 1
                out[j] = c
                m += 1
        wreq_off[e + 1] = m
    return out[:m], 0, -1


@njit(cache=True)
def _bytes_moved(kind, rank, snode, sbytes, precv, n_ranks):
    """Bytes of point-to-point sends posted per rank and bytes received through matched messages."""
    sent = np.zeros(n_ranks)
    got = np.zeros(n_ranks)
    for e in range(kind.shape[0]):
        if _is_send(kind[e]) and snode[e] >= 0:
            sent[rank[e]] += sbytes[e]
        s = precv[e]
        if s >= 0:
            got[rank[e]] += sbytes[s]
    return sent, got


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
_MODE = np.zeros(256, np.int8)
for _o in (Op.SSEND, Op.ISSEND):
    _MODE[_o] = 1
for _o in (Op.BSEND, Op.IBSEND):
    _MODE[_o] = 2

_MEASURED_NAME = {Op.BARRIER: "barrier", Op.BCAST: "bcast", Op.REDUCE: "reduce", Op.ALLREDUCE: "allreduce",
                  Op.ALLGATHER: "allgather", Op.ALLTOALL: "alltoall", Op.GATHER: "gather", Op.SCATTER: "scatter"}


def _col(events, name, dtype):
    return np.ascontiguousarray(np.asarray(events[name]), dtype=dtype)


def collective_bytes(op: np.ndarray, send_bytes: np.ndarray, recv_bytes: np.ndarray, n_members: np.ndarray) -> np.ndarray:
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
    mode: np.ndarray
    burst: np.ndarray
    sbytes: np.ndarray
    snode: np.ndarray
    rnode: np.ndarray
    psend: np.ndarray
    precv: np.ndarray
    wreq_off: np.ndarray
    wreq_ev: np.ndarray
    inst_of: np.ndarray
    inst_off: np.ndarray
    inst_ev: np.ndarray
    inst_op: np.ndarray
    inst_root: np.ndarray
    inst_bytes: np.ndarray
    inst_table_s: np.ndarray
    node_of_rank: np.ndarray
    n_messages: int
    #: with Startall calls expanded into one row per request: the first row of each original event
    first_of: np.ndarray | None = None
    extra: dict = field(default_factory=dict)


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


@njit(cache=True)
def _sorted_by_rank_seq(rank, seq):
    for e in range(1, rank.shape[0]):
        if rank[e] < rank[e - 1] or (rank[e] == rank[e - 1] and seq[e] <= seq[e - 1]):
            return False
    return True


@njit(cache=True)
def _op_histogram(op):
    out = np.zeros(256, np.int64)
    for e in range(op.shape[0]):
        out[op[e] & 0xFF] += 1
    return out


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
    new_burst = np.where(within == 0, burst[src], 0.0)
    return rank[src], seq[src], new_burst, first_of


def _prepare(events, burst_s, placement, network, options, requests, comms, n_ranks) -> _Prepared:
    rank = _col(events, "rank", np.int32)
    seq = _col(events, "seq", np.int64)
    n = rank.size
    # a fresh writable copy: numba compiles read-only arrays (pandas copy-on-write) separately
    burst = np.array(events["burst_s"] if burst_s is None else burst_s, dtype=np.float64, copy=True)
    if burst.shape != (n,):
        raise InputError(f"burst_s has {burst.size} values for {n} events")
    cols = {}
    for name, dt in (("op", np.int16), ("comm", np.int32), ("dest", np.int32), ("source", np.int32),
                     ("send_tag", np.int32), ("recv_tag", np.int32), ("send_bytes", np.int64),
                     ("recv_bytes", np.int64), ("root", np.int32), ("request", np.int64),
                     ("req_offset", np.int64), ("n_requests", np.int32)):
        cols[name] = _col(events, name, dt)
    order = None
    if n > 1 and not _sorted_by_rank_seq(rank, seq):
        order = np.lexsort((seq, rank))
        rank, seq, burst = rank[order], seq[order], burst[order]
        cols = {k: v[order] for k, v in cols.items()}
    if n and rank[0] < 0:
        raise InputError("events: negative rank")
    if n_ranks is None:
        n_ranks = int(rank[-1]) + 1 if n else 0
    elif n and rank[-1] >= n_ranks:
        raise InputError(f"events name rank {int(rank[-1])} but n_ranks is {n_ranks}")
    if placement is None:
        node_of_rank = np.zeros(n_ranks, np.int64)
    else:
        node_of_rank = np.array(placement, dtype=np.int64, copy=True)
        if node_of_rank.shape != (n_ranks,) or (n_ranks and node_of_rank.min() < 0):
            raise InputError(f"placement must give a node >= 0 for each of the {n_ranks} ranks")
    op_count = _op_histogram(cols["op"])
    first_of = None
    if op_count[Op.STARTALL]:
        rank, seq, burst, first_of = _startall_as_starts(rank, seq, burst, cols, requests)
        n = rank.size
    if op_count[Op.START] or op_count[Op.STARTALL]:
        _starts_as_nonblocking(rank, cols)
    rank_off = np.zeros(n_ranks + 1, np.int64)
    rank_off[1:] = np.cumsum(np.bincount(rank, minlength=n_ranks))
    op = cols["op"]
    dest, source, comm = cols["dest"], cols["source"], cols["comm"]
    kind = np.empty(n, np.int8)
    mode = np.empty(n, np.int8)
    snode = np.empty(n, np.int64)
    rnode = np.empty(n, np.int64)
    display_op = cols.pop("display_op", op)

    def where_str(e):
        return f"rank {int(rank[e])} {op_name(display_op[e])} (seq {int(seq[e])})"

    err, e = _scan(op, rank, dest, source, burst, n_ranks, _KIND, _MODE, node_of_rank, kind, mode, snode, rnode)
    if err == 4:
        raise InputError("burst_s must be finite and >= 0")
    if err in (1, 2):
        what, arr = ("destination", dest) if err == 1 else ("source", source)
        raise ReplayError(f"{where_str(e)}: {what} {int(arr[e])} is not a rank of this trace")
    if err == 3:
        raise ReplayError(f"{where_str(e)}: receive from MPI_ANY_SOURCE without the status source; "
                          "cannot match it")
    # ---- point-to-point matching (hash tables, O(n))
    psend = np.empty(n, np.int64)
    precv = np.empty(n, np.int64)
    n_messages = int(_match(kind, rank, dest, source, comm, cols["send_tag"], cols["recv_tag"], psend, precv))

    # ---- requests of completion calls -> the events that created them
    wreq_off = np.zeros(n + 1, np.int64)
    wreq_ev = np.zeros(0, np.int64)
    if any(op_count[o] for o in COMPLETION_OPS):
        if requests is None:
            if np.any((kind == K_WAIT) & (cols["n_requests"] > 0)):
                raise InputError("events have wait/test calls but no requests table was given")
        else:
            wreq_ev, err, e = _resolve_waits(kind, op, rank, cols["request"], cols["req_offset"],
                                             cols["n_requests"], _col(requests, "rank", np.int32),
                                             _col(requests, "request", np.int64),
                                             _col(requests, "completed", np.int8), wreq_off)
            if err == 1:
                raise InputError(f"{where_str(e)}: req_offset/n_requests point outside the requests table")
            if err == 2:
                raise InputError(f"{where_str(e)}: its requests rows belong to another rank")
    op = display_op

    # ---- collective instances: the k-th collective on a communicator of each member
    coll = np.flatnonzero((kind == K_COLL) | (kind == K_ICOLL))
    inst_of = np.full(n, -1, np.int64)
    inst_off = np.zeros(1, np.int64)
    inst_ev = np.zeros(0, np.int64)
    inst_op = np.zeros(0, np.int64)
    inst_root = np.zeros(0, np.int64)
    inst_bytes = np.zeros(0)
    inst_table = np.zeros(0)
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
        inst_of[coll] = inst_idx
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
        inst_table = np.full(n_inst, np.nan)
        if options.measured_collectives and network.collectives:
            inst_table = _measured(network, inst_op, i_size, inst_bytes, inst_ev, inst_off, rank, node_of_rank)
        if np.any(inst_ev < 0):
            # a member never made this call: leave the slot to the deadlock report
            missing = np.flatnonzero(inst_ev < 0)
            inst_ev = np.where(inst_ev < 0, n, inst_ev)  # sentinel (never posted)
            del missing
    return _Prepared(n_ranks=n_ranks, rank=rank, seq=seq, op=op, rank_off=rank_off, kind=kind, mode=mode,
                     burst=burst, sbytes=cols["send_bytes"].astype(np.float64), snode=snode, rnode=rnode,
                     psend=psend, precv=precv, wreq_off=wreq_off, wreq_ev=np.ascontiguousarray(wreq_ev),
                     inst_of=inst_of, inst_off=inst_off, inst_ev=inst_ev, inst_op=inst_op,
                     inst_root=inst_root, inst_bytes=inst_bytes, inst_table_s=inst_table,
                     node_of_rank=node_of_rank, n_messages=n_messages, first_of=first_of,
                     extra={"order": order, "dest": dest, "source": source, "comm": comm})


def _measured(network, inst_op, i_size, inst_bytes, inst_ev, inst_off, rank, node_of_rank):
    out = np.full(inst_op.size, np.nan)
    first = inst_ev[inst_off[:-1]]
    # intra_node when all members share the first member's node
    ev_node = node_of_rank[rank[np.clip(inst_ev, 0, rank.size - 1)]]
    same = np.ones(inst_op.size, bool)
    seg = np.repeat(np.arange(inst_op.size), np.diff(inst_off))
    diff = ev_node != ev_node[inst_off[:-1]][seg]
    np.logical_and.at(same, seg, ~diff)
    placement = np.where(same, "intra_node", "inter_node")
    del first
    groups: dict[tuple, list] = {}
    for c in network.collectives:
        groups.setdefault((c.op, c.n_ranks, c.placement), []).append((c.msg_bytes, c.time_s))
    for (name, nr, pl), pts in groups.items():
        codes = [o for o, nm in _MEASURED_NAME.items() if nm == name]
        sel = np.isin(inst_op, codes) & (i_size == nr) & (placement == pl)
        if not sel.any():
            continue
        pts.sort()
        xs = np.array([p[0] for p in pts], float)
        ys = np.array([p[1] for p in pts], float)
        m = inst_bytes[sel]
        inside = (m >= xs[0]) & (m <= xs[-1])
        vals = np.interp(m, xs, ys)
        cur = out[sel]
        cur[inside] = vals[inside]
        out[sel] = cur
    return out


# ------------------------------------------------------------------ public entry point

def replay(events, burst_s=None, placement=None, network: NetworkModel | None = None,
           options: ReplayOptions | None = None, *, requests=None, comms=None, n_ranks: int | None = None,
           progress: Callable[[float, str], None] | None = None) -> ReplayResult:
    """Replay ``events`` (pmac.trace.EVENTS columns) and return per-rank times (see module doc)."""
    if network is None:
        raise InputError("replay needs a NetworkModel")
    options = options or ReplayOptions()
    if progress:
        progress(0.0, "matching messages")
    prep = _prepare(events, burst_s, placement, network, options, requests, comms, n_ranks)
    net = pack_network(network, prep.node_of_rank if prep.n_ranks else np.zeros(1, np.int64), options)
    n = prep.kind.size
    post_t = np.full(n + 1, np.nan)  # +1: sentinel event that never posts (missing collective member)
    arrival = np.full(n + 1, np.nan)
    done_t = np.full(n + 1, np.nan)
    cause = np.full(n + 1, -1, np.int64)
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
    ev_rank = np.concatenate([prep.rank.astype(np.int64), [-1]])
    wire = np.zeros(n)
    w0 = np.zeros(n)
    _wire_times(net, prep.kind, prep.rank, prep.node_of_rank, prep.snode, prep.sbytes, wire, w0)
    nf, ni = net
    flags = ni[C.NI_BUFFERED:C.NI_CONTENTION + 1].copy()
    lk = (net, flags, nf[C.NF_O_S:C.NF_O_S + 2].copy(), nf[C.NF_EAGER:C.NF_EAGER + 2].copy(), wire, w0)
    ok = _run(lk, nf[C.NF_O_R:C.NF_O_R + 2].copy(), prep.rank_off, prep.kind, prep.mode, prep.burst, prep.sbytes, ev_rank, prep.node_of_rank,
              prep.snode, prep.rnode, prep.psend, prep.precv, prep.wreq_off, prep.wreq_ev, prep.inst_of,
              prep.inst_off, prep.inst_ev, prep.inst_op, prep.inst_root, prep.inst_bytes, prep.inst_table_s,
              bool(options.contention), bool(options.timeline), post_t, end_t, arrival, done_t, cause,
              comm_out, wait_out, clock, ptr, bk, bw)
    if not ok:
        raise ReplayError(_deadlock_message(prep, ptr, bk, bw))
    compute = np.bincount(prep.rank, weights=prep.burst, minlength=p) if n else np.zeros(p)
    finish = clock.copy()
    crit = _critical(prep, post_t, cause, finish)
    sent, received = _bytes_moved(prep.kind, prep.rank, prep.snode, prep.sbytes, prep.precv, p)
    first = prep.first_of
    res = dict(n_ranks=p, n_events=n if first is None else first.size, finish_s=finish, compute_s=compute, comm_s=comm_out, wait_s=wait_out,
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
        _critical_walk(prep.rank_off, prep.rank.astype(np.int64), post_t, cause, finish, out)
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
                what += f": no matching send from rank {int(prep.extra['source'][w])}"
            else:
                what += f": no matching receive on rank {int(prep.extra['dest'][w])}"
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

"""The point-to-point message model of the replay and the collective algorithms built on it.

Everything here is numba over plain arrays. A *net* is the pair ``(nf, ni)`` made by
:func:`pmac.replay.pack_network`: one float64 array (overheads, eager thresholds, link segments,
link bandwidths, the links' busy-until state for contention, route latencies) and one int64 array
(flags, segment counts, node -> host, routes as CSR), laid out as the ``NF_*`` / ``NI_*``
constants below say. Two arrays, not a tuple of many: numba passes every array of a tuple
argument by value on each call, which cost ~0.5 us per message. Link 0 is intra-node, link 1
inter-node.

Message model (LogGP-style; times in seconds; ``W(m)`` = the link's segmented wire time
``latency + m / bandwidth``, without overheads). A sender posts at ``ts``, the receiver at ``tr``:

- eager (``m <= eager_threshold_bytes``, or a buffered send; never a synchronous send):
  the sender is done at ``ts + o_s``. The data leaves at ``ts + o_s`` (``eager_buffered``, the
  default: the library pushes it at once) or at ``max(ts + o_s, tr)`` (SimGrid's default, where a
  transfer starts once both sides are posted), and arrives ``W(m)`` later at ``a``. The receive
  is done at ``max(tr, a) + o_r``.
- rendezvous (larger, or synchronous): with ``rendezvous_handshake`` (default) the
  request-to-send reaches the receiver at ``ts + o_s + W(0)``, the clear-to-send leaves at
  ``max(ts + o_s + W(0), tr)`` and reaches the sender ``W(0)`` later; the data then takes
  ``W(m)``. Without the handshake the data leaves at ``max(ts + o_s, tr)``. The sender is done
  when the data has arrived (``a``), the receiver at ``a + o_r``.

Exchanges: when two ranks send each other at once (a Sendrecv whose destination is its source,
a pairwise round of a collective) and each posts within ``o_s`` of the other, each receive ends
the link's ``exchange_excess_s`` later (:func:`crossing`).

Contention (optional, inter-node messages on a topology): a transfer ready at ``t`` starts when
every link on its route is free, ``start = max(t, free_at(link) for link in route)``, arrives at
``start + W(m)`` and holds each link for ``m / bandwidth(link)``: concurrent flows on a link are
served one after the other (first come, first served in simulated-time order), so two flows on
one link take twice as long as one. With no flow in the way the time is exactly the
uncontended ``W(m)``.

Collectives (MPICH's default choices, MPICH 4 ``MPIR_*_intra_auto``; ``m`` = bytes per rank as
the trace records them, see :func:`pmac.replay.collective_bytes`): every message of the
algorithm is priced with the message model between the members' actual nodes, each member
starting at its own arrival time. Barrier: dissemination. Bcast: binomial tree below 12288
bytes or under 8 ranks, else binomial scatter + ring allgather. Reduce: binomial tree.
Allreduce (MPICH 4/5's selection): recursive doubling up to 8 bytes or while the count (of
8-byte elements) is below the largest power of two of the ranks, Rabenseifner
(recursive-halving reduce-scatter + recursive-doubling allgather) otherwise, both folding the
ranks beyond the largest power of two first. Allgather: recursive doubling (power-of-two ranks,
total < 80 KiB), Bruck (total < 512 KiB), ring. Alltoall: Bruck (<= 256 bytes per block, >= 8 ranks), pairwise exchange otherwise.
Gather / scatter: binomial tree carrying whole subtrees. Reduce_scatter: pairwise exchange.
Scan / exscan: recursive doubling. Vector variants use the mean per-peer size. Reduction
arithmetic is not priced here, and the tracer counts it in no burst (it runs inside the call):
what a probed call cost beyond its messages, the arithmetic, the library's own path and the
choice of another algorithm included, is the machine's collective excess
(pmac.calibrate_collectives), which the replay adds on top.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numba import njit

# collective kinds used by the core (Op values of the blocking collectives)
BARRIER, BCAST, REDUCE, ALLREDUCE, GATHER, GATHERV, SCATTER, SCATTERV = 60, 61, 62, 63, 64, 65, 66, 67
ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW = 68, 69, 70, 71, 72
REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN, EXSCAN = 73, 74, 75, 76

BCAST_SHORT_BYTES = 12288
BCAST_MIN_PROCS = 8
#: MPICH 4/5 (its built-in collective selection, ``MPIR_Allreduce``): recursive doubling up to
#: this many bytes, or while count < the largest power of two of the ranks; count assumes 8-byte
#: elements (the trace keeps bytes). The per-rank probe tables of MPICH 5.0.2 show the switch:
#: a 2-rank allreduce of 64 B took 1.4-1.9x one of 8 B on every profile in machines/.
ALLREDUCE_SHORT_BYTES = 8
ALLREDUCE_ELEMENT_BYTES = 8
ALLGATHER_SHORT_BYTES = 81920
ALLGATHER_LONG_BYTES = 524288
ALLTOALL_SHORT_BYTES = 256
ALLTOALL_MIN_PROCS = 8

# ni (int64) layout: flags, segment counts, sizes, then offsets (into ni or nf) of the variable parts
(NI_BUFFERED, NI_HANDSHAKE, NI_CONTENTION, NI_ROUTE_TIMING, NI_NSEG0, NI_NSEG1, NI_S, NI_N_HOSTS,
 NI_NODE_HOST, NI_ROUTE_OFF, NI_ROUTE_LINKS, NI_LINK_INV_BW, NI_LINK_FREE, NI_ROUTE_LAT, NI_ROUTE_INV_BW,
 NI_SHAPED, NI_NODE_TOKENS, NI_NODE_LAST, NI_HEADER) = range(19)
# nf (float64) layout: per link kind (0 intra, 1 inter) send/recv overhead and eager threshold,
# the inter-node shaper (seconds per byte of its rate, bucket bytes, header bytes per message),
# per link kind the exchange excess (LinkModel.exchange_excess_s), then the segment tables
# (lo, latency, bandwidth; S columns per link kind) from NF_SEG
NF_O_S, NF_O_R, NF_EAGER, NF_SHAPE_INV_RATE, NF_SHAPE_BURST, NF_SHAPE_HEADER, NF_XCHG, NF_SEG = 0, 2, 4, 6, 7, 8, 9, 11

#: modules whose numba code reads the layout above as compile-time constants
LAYOUT_READERS = ("replay_core", "replay_passes", "replay")


def drop_stale_caches() -> int:
    """Remove the numba caches of :data:`LAYOUT_READERS` older than this file; returns how many.

    numba keys a cached function on its own file's timestamp only, so a layout constant changed
    here left replay_passes running machine code with the old offsets (seen: a 0-byte message
    priced at another segment's latency) until that file changed too. Called at import.
    """
    here = Path(__file__)
    cache = here.parent / "__pycache__"
    if os.environ.get("NUMBA_CACHE_DIR") or not cache.is_dir():
        return 0
    stamp = here.stat().st_mtime
    n = 0
    for mod in LAYOUT_READERS:
        for f in cache.glob(f"{mod}.*.nb[ic]"):
            try:
                if f.stat().st_mtime < stamp:
                    f.unlink()
                    n += 1
            except OSError:  # another process removed it, or a read-only install
                pass
    return n


drop_stale_caches()


def pack(o_s, o_r, eager, seg_lo, seg_lat, seg_bw, nseg, flags, node_host, n_hosts,
         route_off, route_links, link_inv_bw, route_lat, route_inv_bw, shaper=None, xchg=(0.0, 0.0)):
    """The ``(nf, ni)`` net of the given parts (per-link-kind pairs; [2, S] segment tables).

    ``shaper``: ``(rate_bytes_per_s, burst_bytes, header_bytes)`` of every node's inter-node
    egress, or None. Each node's bucket starts full. ``xchg``: the exchange excess per link
    kind (see :func:`crossing`)."""
    s = seg_lo.shape[1]
    n_nodes = len(node_host)
    head = np.zeros(NI_HEADER, np.int64)
    head[NI_BUFFERED:NI_ROUTE_TIMING + 1] = flags
    head[NI_NSEG0], head[NI_NSEG1] = nseg
    head[NI_S], head[NI_N_HOSTS] = s, n_hosts
    head[NI_SHAPED] = int(shaper is not None)
    rate, burst, header = shaper if shaper is not None else (np.inf, 0.0, 0.0)
    ni_parts = [head, np.asarray(node_host, np.int64), np.asarray(route_off, np.int64),
                np.asarray(route_links, np.int64)]
    off = np.cumsum([0] + [a.size for a in ni_parts])
    head[NI_NODE_HOST], head[NI_ROUTE_OFF], head[NI_ROUTE_LINKS] = off[1], off[2], off[3]
    nf_parts = [np.asarray(o_s, float), np.asarray(o_r, float), np.asarray(eager, float),
                np.array([1.0 / rate, burst, header]), np.asarray(xchg, float),
                seg_lo.ravel(), seg_lat.ravel(), seg_bw.ravel(), np.asarray(link_inv_bw, float),
                np.zeros(len(link_inv_bw)), np.asarray(route_lat, float), np.asarray(route_inv_bw, float),
                np.full(n_nodes, float(burst)), np.zeros(n_nodes)]
    foff = np.cumsum([0] + [a.size for a in nf_parts])
    (head[NI_LINK_INV_BW], head[NI_LINK_FREE], head[NI_ROUTE_LAT], head[NI_ROUTE_INV_BW], head[NI_NODE_TOKENS],
     head[NI_NODE_LAST]) = foff[8:14]
    return np.concatenate(nf_parts), np.concatenate(ni_parts)


@njit(cache=True, inline="always")
def link_of(net, src_node, dst_node):
    return 0 if src_node == dst_node else 1


@njit(cache=True, inline="always")
def o_send(net, link):
    return net[0][NF_O_S + link]


@njit(cache=True, inline="always")
def o_recv(net, link):
    return net[0][NF_O_R + link]


@njit(cache=True, inline="always")
def crossing(excess, o_s, t_a, t_b):
    """Extra receive time of each of two messages that two ranks send each other at ``t_a`` and
    ``t_b`` (an exchange) on a link with exchange excess ``excess`` and send overhead ``o_s``:
    the excess when each side posts its send before the other's send overhead is over, else 0.
    Scalars only: the replay's core calls it per Sendrecv (pmac.replay_core).

    Why (measured on TCP, ``LinkModel.exchange_excess_s``): a message that reaches a rank while
    that rank is inside its own send on the same connection is processed only when the send
    returns (the kernel defers it to the socket's backlog), on the receiver's CPU; an exchange
    of 8 bytes over TCP took 1.3-1.8 one-way ping-pong times, in shared memory 1.1-1.4."""
    if excess != 0.0 and t_a <= t_b + o_s and t_b <= t_a + o_s:
        return excess
    return 0.0


@njit(cache=True, inline="always")
def link_crossing(net, src_node, dst_node, t_a, t_b):
    """:func:`crossing` on the link between two nodes."""
    link = link_of(net, src_node, dst_node)
    return crossing(net[0][NF_XCHG + link], o_send(net, link), t_a, t_b)


@njit(cache=True, inline="always")
def wire_s(net, link, m):
    """Uncontended one-way wire time of ``m`` bytes on link kind ``link``."""
    nf, ni = net
    n = ni[NI_NSEG0 + link]
    s = ni[NI_S]
    lo = NF_SEG + link * s
    k = 0
    while k + 1 < n and nf[lo + k + 1] <= m:
        k += 1
    return nf[lo + 2 * s + k] + m / nf[lo + 4 * s + k]


@njit(cache=True, inline="always")
def is_eager(net, link, m, mode):
    """mode 0 standard, 1 synchronous (always rendezvous), 2 buffered (always eager)."""
    if mode == 1:
        return False
    if mode == 2:
        return True
    return m <= net[0][NF_EAGER + link]


@njit(cache=True, inline="always")
def wire_nodes(net, src_node, dst_node, m):
    """Uncontended wire time between two nodes: the link kind's segments, or with route timing
    (inter-node) the route's summed latency plus m over its bottleneck bandwidth."""
    nf, ni = net
    link = link_of(net, src_node, dst_node)
    if link == 1 and ni[NI_ROUTE_TIMING] != 0:
        k = ni[ni[NI_NODE_HOST] + src_node] * ni[NI_N_HOSTS] + ni[ni[NI_NODE_HOST] + dst_node]
        return nf[ni[NI_ROUTE_LAT] + k] + m * nf[ni[NI_ROUTE_INV_BW] + k]
    return wire_s(net, link, m)


@njit(cache=True)
def transfer(net, src_node, dst_node, m, ready):
    """Arrival time of ``m`` bytes that may leave at ``ready`` (takes tokens from the sender's
    shaper and reserves links under contention)."""
    nf, ni = net
    w = wire_nodes(net, src_node, dst_node, m)
    if src_node == dst_node:
        return ready + w
    if ni[NI_SHAPED] != 0:
        # the sender's bucket, first come first served: tokens accrue since its last departure
        kt = ni[NI_NODE_TOKENS] + src_node
        kl = ni[NI_NODE_LAST] + src_node
        t0 = max(ready, nf[kl])
        burst = nf[NF_SHAPE_BURST]
        tok = min(burst, nf[kt] + (t0 - nf[kl]) / nf[NF_SHAPE_INV_RATE])
        need = m + nf[NF_SHAPE_HEADER]
        if need <= tok:
            dep = t0
            tok -= need
        else:
            dep = t0 + (need - tok) * nf[NF_SHAPE_INV_RATE]
            tok = 0.0
        nf[kt] = tok
        nf[kl] = dep
        # the last byte leaves at dep and still crosses the line; never faster than the line
        shaped = dep - t0 + wire_nodes(net, src_node, dst_node, 0.0)
        if shaped > w:
            w = shaped
        ready = t0
    if ni[NI_CONTENTION] != 0:
        hs = ni[ni[NI_NODE_HOST] + src_node]
        hd = ni[ni[NI_NODE_HOST] + dst_node]
        if hs != hd:
            k = ni[NI_ROUTE_OFF] + hs * ni[NI_N_HOSTS] + hd
            links = ni[NI_ROUTE_LINKS]
            free = ni[NI_LINK_FREE]
            inv = ni[NI_LINK_INV_BW]
            start = ready
            for j in range(ni[k], ni[k + 1]):
                f = nf[free + ni[links + j]]
                if f > start:
                    start = f
            for j in range(ni[k], ni[k + 1]):
                x = ni[links + j]
                nf[free + x] = start + m * nf[inv + x]
            return start + w
    return ready + w


@njit(cache=True, inline="always")
def rendezvous_ready(net, src_node, dst_node, ts, tr):
    """Time the data of a rendezvous message may leave."""
    os_ = o_send(net, link_of(net, src_node, dst_node))
    if net[1][NI_HANDSHAKE] != 0:
        l0 = wire_nodes(net, src_node, dst_node, 0.0)
        return max(ts + os_ + l0, tr) + l0
    return max(ts + os_, tr)


@njit(cache=True)
def arrival_s(net, src_node, dst_node, m, mode, ts, tr):
    """Arrival of a message posted by the sender at ``ts`` and the receiver at ``tr``."""
    link = link_of(net, src_node, dst_node)
    if is_eager(net, link, m, mode):
        ready = ts + o_send(net, link)
        if net[1][NI_BUFFERED] == 0 and tr > ready:
            ready = tr
        return transfer(net, src_node, dst_node, m, ready)
    return transfer(net, src_node, dst_node, m, rendezvous_ready(net, src_node, dst_node, ts, tr))


@njit(cache=True)
def message(net, src_node, dst_node, m, ts, tr):
    """(sender done, receiver done) of one standard-mode message inside a collective."""
    link = link_of(net, src_node, dst_node)
    a = arrival_s(net, src_node, dst_node, m, 0, ts, tr)
    rd = max(tr, a) + o_recv(net, link)
    if is_eager(net, link, m, 0):
        return ts + o_send(net, link), rd
    return a, rd


# ------------------------------------------------------------------ building blocks
# Each works on member clocks ``t`` (local rank order) in place; ``node`` maps local rank -> node;
# ``ts`` / ``tr`` are scratch arrays of the member count.

@njit(cache=True)
def _exchange_round(net, node, t, dst_off, m, ts, tr):
    """Every member i sends m bytes to (i + dst_off) % P and receives from (i - dst_off) % P."""
    p = t.shape[0]
    pair = (2 * dst_off) % p == 0   # d sends back to i: every message is half of an exchange
    for i in range(p):
        d = (i + dst_off) % p
        sd, rd = message(net, node[i], node[d], m, t[i], t[d])
        ts[i] = sd
        tr[d] = rd
        if pair and d != i:
            tr[d] += link_crossing(net, node[i], node[d], t[i], t[d])
    for i in range(p):
        t[i] = max(ts[i], tr[i])


@njit(cache=True)
def _xor_round(net, node, t, mask, m, nt):
    """Members i and i ^ mask exchange m bytes (both directions); each ends when both halves are.
    Each message is priced once: a stateful link (shaper, contention) must not see it twice."""
    p = t.shape[0]
    for i in range(p):
        q = i ^ mask
        if q < i:
            continue
        sd_i, rd_q = message(net, node[i], node[q], m, t[i], t[q])
        sd_q, rd_i = message(net, node[q], node[i], m, t[q], t[i])
        x = link_crossing(net, node[i], node[q], t[i], t[q])
        rd_i += x
        rd_q += x
        nt[i] = max(sd_i, rd_i)
        nt[q] = max(sd_q, rd_q)
    t[:] = nt


@njit(cache=True, inline="always")
def _pof2(p):
    """The largest power of two not above ``p``."""
    q = 1
    while q * 2 <= p:
        q *= 2
    return q


@njit(cache=True)
def _rd_allreduce(net, node, t, m, rabenseifner):
    p = t.shape[0]
    pof2 = _pof2(p)
    rem = p - pof2
    # fold: even i < 2 rem sends its data to i + 1
    for i in range(0, 2 * rem, 2):
        t[i], t[i + 1] = message(net, node[i], node[i + 1], m, t[i], t[i + 1])
    # real rank of new rank r
    real = np.empty(pof2, np.int64)
    for r in range(pof2):
        real[r] = 2 * r + 1 if r < rem else r + rem
    vt = t[real]
    vnode = node[real]
    nt = np.empty(pof2)
    size = m
    if rabenseifner:  # reduce-scatter by recursive halving, then allgather by recursive doubling
        mask = 1
        while mask < pof2:
            size = size / 2.0
            _xor_round(net, vnode, vt, mask, size, nt)
            mask <<= 1
        mask = pof2 >> 1
        while mask > 0:
            _xor_round(net, vnode, vt, mask, size, nt)
            size = size * 2.0
            mask >>= 1
    else:
        mask = 1
        while mask < pof2:
            _xor_round(net, vnode, vt, mask, size, nt)
            mask <<= 1
    t[real] = vt
    # unfold: odd i < 2 rem sends the result back to i - 1
    for i in range(1, 2 * rem, 2):
        t[i], t[i - 1] = message(net, node[i], node[i - 1], m, t[i], t[i - 1])


@njit(cache=True)
def _subtree_bytes(m, mask, c, p):
    """Bytes a binomial-tree edge to child c (at distance mask) carries when it moves whole subtrees."""
    return m * (mask if c + mask <= p else p - c)


@njit(cache=True)
def bcast_tree(net, node, t, root, m, subtree):
    p = t.shape[0]
    post = np.empty(p)
    post[0] = t[root]
    for vr in range(p):
        r = (vr + root) % p
        tcur = post[vr]
        mask = 1
        while mask < p:
            if vr & mask:
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:
            c = vr + mask
            if c < p:
                cr = (c + root) % p
                size = _subtree_bytes(m, mask, c, p) if subtree else m
                tcur, post[c] = message(net, node[r], node[cr], size, tcur, t[cr])
            mask >>= 1
        post[vr] = tcur
    for vr in range(p):
        t[(vr + root) % p] = post[vr]


@njit(cache=True)
def reduce_tree(net, node, t, root, m, subtree):
    """Binomial reduce (subtree=False) or gather (subtree=True: a child sends its subtree)."""
    p = t.shape[0]
    sendpost = np.empty(p)
    done = np.empty(p)
    for vr in range(p - 1, -1, -1):
        r = (vr + root) % p
        tcur = t[r]
        mask = 1
        while mask < p:
            if vr & mask:
                break
            c = vr | mask
            if c < p:
                size = _subtree_bytes(m, mask, c, p) if subtree else m
                done[c], tcur = message(net, node[(c + root) % p], node[r], size, sendpost[c], tcur)
            mask <<= 1
        sendpost[vr] = tcur
        if vr == 0:
            done[0] = tcur
    for vr in range(p):
        t[(vr + root) % p] = done[vr]


@njit(cache=True)
def shift_rounds(net, node, t, offsets, sizes):
    """Exchange rounds: in round k every member sends sizes[k] bytes to (i + offsets[k]) % P and
    receives from (i - offsets[k]) % P. Dissemination, ring, pairwise exchange and Bruck are this
    with their offsets and sizes."""
    p = t.shape[0]
    ts = np.empty(p)
    tr = np.empty(p)
    for k in range(offsets.shape[0]):
        _exchange_round(net, node, t, offsets[k], sizes[k], ts, tr)


@njit(cache=True)
def _doubling(p):
    """1, 2, 4, ... below p."""
    n = 0
    mask = 1
    while mask < p:
        n += 1
        mask <<= 1
    out = np.empty(n, np.int64)
    for k in range(n):
        out[k] = 1 << k
    return out


@njit(cache=True)
def dissemination(net, node, t, m):
    p = t.shape[0]
    off = _doubling(p)
    shift_rounds(net, node, t, off, np.full(off.shape[0], m))


@njit(cache=True)
def ring(net, node, t, m, rounds):
    shift_rounds(net, node, t, np.ones(rounds, np.int64), np.full(rounds, m))


@njit(cache=True)
def pairwise(net, node, t, m):
    """Round k = 1..P-1: send to (i + k) % P, receive from (i - k) % P (MPICH's pairwise)."""
    p = t.shape[0]
    shift_rounds(net, node, t, np.arange(1, p), np.full(p - 1, m))


@njit(cache=True)
def rd_allgather(net, node, t, m):
    """Recursive doubling (power-of-two P): round k exchanges m * 2^k with i ^ 2^k."""
    p = t.shape[0]
    nt = np.empty(p)
    mask = 1
    while mask < p:
        _xor_round(net, node, t, mask, m * mask, nt)
        mask <<= 1


@njit(cache=True)
def bruck(net, node, t, m, alltoall):
    """Bruck: round k sends to (i - 2^k) and receives from (i + 2^k); allgather blocks double,
    alltoall sends the blocks whose index has bit k set (about P/2 blocks)."""
    p = t.shape[0]
    masks = _doubling(p)
    sizes = np.empty(masks.shape[0])
    for k in range(masks.shape[0]):
        mask = masks[k]
        if alltoall:
            nb = 0
            for b in range(p):
                if b & mask:
                    nb += 1
            sizes[k] = m * nb
        else:
            sizes[k] = m * (mask if 2 * mask <= p else p - mask)
    shift_rounds(net, node, t, p - masks, sizes)


@njit(cache=True)
def scan_rd(net, node, t, m):
    """Recursive doubling scan: i sends to i + 2^k (if any) and receives from i - 2^k (if any)."""
    p = t.shape[0]
    sd_t = np.empty(p)
    rd_t = np.empty(p)
    mask = 1
    while mask < p:
        sd_t[:] = t
        rd_t[:] = t
        for i in range(p - mask):
            sd_t[i], rd_t[i + mask] = message(net, node[i], node[i + mask], m, t[i], t[i + mask])
        for i in range(p):
            t[i] = max(sd_t[i], rd_t[i])
        mask <<= 1


@njit(cache=True)
def add_excess(op, t, post_t, ev, off, root, last, x):
    """Add a call's excess ``x`` to each member's exit ``t[j]`` (member ``j`` posted at
    ``post_t[ev[off + j]]``; ``last``: the latest post). A negative excess (the library's call costs
    less than its algorithm's messages: MPICH's shared-memory collectives at MPI_THREAD_SINGLE)
    never lets a member leave before what it needs was posted: its own call; the root's for a
    one-to-many call (bcast, scatter); every member's for the root of a many-to-one call (reduce,
    gather) and for every member of the others (all-to-all kinds, barrier; scans, conservatively)."""
    for j in range(t.shape[0]):
        v = t[j] + x
        if x < 0.0:
            lo = post_t[ev[off + j]]
            if op == BCAST or op == SCATTER or op == SCATTERV:
                lo = max(lo, post_t[ev[off + root]])
            elif op == REDUCE or op == GATHER or op == GATHERV:
                if j == root:
                    lo = last
            else:
                lo = last
            v = max(v, lo)
        t[j] = v


@njit(cache=True)
def collective_exit(net, op, node, t, root, m):
    """Advance member clocks ``t`` (arrival times, local rank order) to each member's exit time."""
    p = t.shape[0]
    if p <= 1:
        return
    if op == BCAST:
        if m < BCAST_SHORT_BYTES or p < BCAST_MIN_PROCS:
            bcast_tree(net, node, t, root, m, False)
        else:
            bcast_tree(net, node, t, root, m / p, True)
            ring(net, node, t, m / p, p - 1)
    elif op == REDUCE:
        reduce_tree(net, node, t, root, m, False)
    elif op == ALLREDUCE:
        _rd_allreduce(net, node, t, m, m > ALLREDUCE_SHORT_BYTES and m >= ALLREDUCE_ELEMENT_BYTES * _pof2(p))
    elif op == GATHER or op == GATHERV:
        reduce_tree(net, node, t, root, m, True)
    elif op == SCATTER or op == SCATTERV:
        bcast_tree(net, node, t, root, m, True)
    elif op == ALLGATHER or op == ALLGATHERV:
        total = m * p
        if total < ALLGATHER_SHORT_BYTES and (p & (p - 1)) == 0:
            rd_allgather(net, node, t, m)
        elif total < ALLGATHER_LONG_BYTES:
            bruck(net, node, t, m, False)
        else:
            ring(net, node, t, m, p - 1)
    elif op == ALLTOALL or op == ALLTOALLV or op == ALLTOALLW:
        if m <= ALLTOALL_SHORT_BYTES and p >= ALLTOALL_MIN_PROCS:
            bruck(net, node, t, m, True)
        else:
            pairwise(net, node, t, m)
    elif op == REDUCE_SCATTER or op == REDUCE_SCATTER_BLOCK:
        pairwise(net, node, t, m)
    elif op == SCAN or op == EXSCAN:
        scan_rd(net, node, t, m)
    else:  # barrier, and any collective without an algorithm here: dissemination of empty messages
        dissemination(net, node, t, 0.0)

"""The point-to-point message model of the replay and the collective algorithms built on it.

Everything here is numba over plain arrays. A *net* is the tuple made by
:func:`pmac.replay.pack_network` (link segments, overheads, eager thresholds, flags, and the
topology's routes and link state for contention). Link 0 is intra-node, link 1 inter-node.

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
Allreduce: recursive doubling up to 2048 bytes, Rabenseifner (recursive-halving reduce-scatter
+ recursive-doubling allgather) above, both folding the ranks beyond the largest power of two
first. Allgather: recursive doubling (power-of-two ranks, total < 80 KiB), Bruck (total < 512
KiB), ring. Alltoall: Bruck (<= 256 bytes per block, >= 8 ranks), pairwise exchange otherwise.
Gather / scatter: binomial tree carrying whole subtrees. Reduce_scatter: pairwise exchange.
Scan / exscan: recursive doubling. Vector variants use the mean per-peer size. Reduction
arithmetic is not priced here (it belongs to the compute burst after the call).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# collective kinds used by the core (Op values of the blocking collectives)
BARRIER, BCAST, REDUCE, ALLREDUCE, GATHER, GATHERV, SCATTER, SCATTERV = 60, 61, 62, 63, 64, 65, 66, 67
ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW = 68, 69, 70, 71, 72
REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN, EXSCAN = 73, 74, 75, 76

BCAST_SHORT_BYTES = 12288
BCAST_MIN_PROCS = 8
ALLREDUCE_SHORT_BYTES = 2048
ALLGATHER_SHORT_BYTES = 81920
ALLGATHER_LONG_BYTES = 524288
ALLTOALL_SHORT_BYTES = 256
ALLTOALL_MIN_PROCS = 8

# net tuple indices
(SEG_LO, SEG_LAT, SEG_BW, NSEG, O_S, O_R, EAGER, FLAGS, NODE_HOST, N_HOSTS, ROUTE_OFF, ROUTE_LINKS, LINK_FREE,
 LINK_INV_BW, ROUTE_LAT, ROUTE_INV_BW) = range(16)
F_BUFFERED, F_HANDSHAKE, F_CONTENTION, F_ROUTE_TIMING = 0, 1, 2, 3


@njit(cache=True, inline="always")
def link_of(net, src_node, dst_node):
    return 0 if src_node == dst_node else 1


@njit(cache=True)
def wire_s(net, link, m):
    """Uncontended one-way wire time of ``m`` bytes on link kind ``link``."""
    n = net[NSEG][link]
    lo = net[SEG_LO]
    k = 0
    while k + 1 < n and lo[link, k + 1] <= m:
        k += 1
    return net[SEG_LAT][link, k] + m / net[SEG_BW][link, k]


@njit(cache=True)
def is_eager(net, link, m, mode):
    """mode 0 standard, 1 synchronous (always rendezvous), 2 buffered (always eager)."""
    if mode == 1:
        return False
    if mode == 2:
        return True
    return m <= net[EAGER][link]


@njit(cache=True)
def wire_nodes(net, src_node, dst_node, m):
    """Uncontended wire time between two nodes: the link kind's segments, or with route timing
    (inter-node) the route's summed latency plus m over its bottleneck bandwidth."""
    link = link_of(net, src_node, dst_node)
    if link == 1 and net[FLAGS][F_ROUTE_TIMING] != 0:
        nh = net[N_HOSTS][0]
        k = net[NODE_HOST][src_node] * nh + net[NODE_HOST][dst_node]
        return net[ROUTE_LAT][k] + m * net[ROUTE_INV_BW][k]
    return wire_s(net, link, m)


@njit(cache=True)
def transfer(net, src_node, dst_node, m, ready):
    """Arrival time of ``m`` bytes that may leave at ``ready`` (reserves links under contention)."""
    link = link_of(net, src_node, dst_node)
    w = wire_nodes(net, src_node, dst_node, m)
    if link == 1 and net[FLAGS][F_CONTENTION] != 0:
        nh = net[N_HOSTS][0]
        hs = net[NODE_HOST][src_node]
        hd = net[NODE_HOST][dst_node]
        if hs != hd:
            k = hs * nh + hd
            off = net[ROUTE_OFF]
            links = net[ROUTE_LINKS]
            free = net[LINK_FREE]
            inv = net[LINK_INV_BW]
            start = ready
            for j in range(off[k], off[k + 1]):
                f = free[links[j]]
                if f > start:
                    start = f
            for j in range(off[k], off[k + 1]):
                free[links[j]] = start + m * inv[links[j]]
            return start + w
    return ready + w


@njit(cache=True)
def rendezvous_ready(net, src_node, dst_node, ts, tr):
    """Time the data of a rendezvous message may leave."""
    os_ = net[O_S][link_of(net, src_node, dst_node)]
    if net[FLAGS][F_HANDSHAKE] != 0:
        l0 = wire_nodes(net, src_node, dst_node, 0.0)
        return max(ts + os_ + l0, tr) + l0
    return max(ts + os_, tr)


@njit(cache=True)
def arrival_s(net, src_node, dst_node, m, mode, ts, tr):
    """Arrival of a message posted by the sender at ``ts`` and the receiver at ``tr``."""
    link = link_of(net, src_node, dst_node)
    if is_eager(net, link, m, mode):
        ready = ts + net[O_S][link]
        if net[FLAGS][F_BUFFERED] == 0 and tr > ready:
            ready = tr
        return transfer(net, src_node, dst_node, m, ready)
    return transfer(net, src_node, dst_node, m, rendezvous_ready(net, src_node, dst_node, ts, tr))


@njit(cache=True)
def message(net, src_node, dst_node, m, ts, tr):
    """(sender done, receiver done) of one standard-mode message inside a collective."""
    link = link_of(net, src_node, dst_node)
    a = arrival_s(net, src_node, dst_node, m, 0, ts, tr)
    rd = max(tr, a) + net[O_R][link]
    if is_eager(net, link, m, 0):
        return ts + net[O_S][link], rd
    return a, rd


# ------------------------------------------------------------------ building blocks
# Each works on member clocks ``t`` (local rank order) in place; ``node`` maps local rank -> node.

@njit(cache=True)
def _exchange_round(net, node, t, dst_off, m, tmp_s, tmp_r):
    """Every member i sends m bytes to (i + dst_off) % P and receives from (i - dst_off) % P."""
    p = t.shape[0]
    for i in range(p):
        d = (i + dst_off) % p
        sd, rd = message(net, node[i], node[d], m, t[i], t[d])
        tmp_s[i] = sd
        tmp_r[d] = rd
    for i in range(p):
        t[i] = max(tmp_s[i], tmp_r[i])


@njit(cache=True)
def _rd_allreduce(net, node, t, m, rabenseifner):
    p = t.shape[0]
    pof2 = 1
    while pof2 * 2 <= p:
        pof2 *= 2
    rem = p - pof2
    # fold: even i < 2 rem sends its data to i + 1
    for i in range(0, 2 * rem, 2):
        sd, rd = message(net, node[i], node[i + 1], m, t[i], t[i + 1])
        t[i] = sd
        t[i + 1] = rd
    # real rank of new rank r
    real = np.empty(pof2, np.int64)
    for r in range(pof2):
        real[r] = 2 * r + 1 if r < rem else r + rem
    vt = np.empty(pof2)
    for r in range(pof2):
        vt[r] = t[real[r]]
    vnode = np.empty(pof2, np.int64)
    for r in range(pof2):
        vnode[r] = node[real[r]]
    nt = np.empty(pof2)
    if not rabenseifner:
        mask = 1
        while mask < pof2:
            for r in range(pof2):
                q = r ^ mask
                sd, _ = message(net, vnode[r], vnode[q], m, vt[r], vt[q])
                _, rd = message(net, vnode[q], vnode[r], m, vt[q], vt[r])
                nt[r] = max(sd, rd)
            vt[:] = nt
            mask <<= 1
    else:
        size = m
        mask = 1
        while mask < pof2:  # reduce-scatter, recursive halving
            size = size / 2.0
            for r in range(pof2):
                q = r ^ mask
                sd, _ = message(net, vnode[r], vnode[q], size, vt[r], vt[q])
                _, rd = message(net, vnode[q], vnode[r], size, vt[q], vt[r])
                nt[r] = max(sd, rd)
            vt[:] = nt
            mask <<= 1
        mask = pof2 >> 1
        while mask > 0:  # allgather, recursive doubling (sizes grow back)
            for r in range(pof2):
                q = r ^ mask
                sd, _ = message(net, vnode[r], vnode[q], size, vt[r], vt[q])
                _, rd = message(net, vnode[q], vnode[r], size, vt[q], vt[r])
                nt[r] = max(sd, rd)
            vt[:] = nt
            size = size * 2.0
            mask >>= 1
    for r in range(pof2):
        t[real[r]] = vt[r]
    # unfold: odd i < 2 rem sends the result back to i - 1
    for i in range(1, 2 * rem, 2):
        sd, rd = message(net, node[i], node[i - 1], m, t[i], t[i - 1])
        t[i] = sd
        t[i - 1] = rd


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
                size = m
                if subtree:
                    size = m * (mask if c + mask <= p else p - c)
                sd, rd = message(net, node[r], node[cr], size, tcur, t[cr])
                tcur = sd
                post[c] = rd
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
                size = m
                if subtree:
                    size = m * (mask if c + mask <= p else p - c)
                sd, rd = message(net, node[(c + root) % p], node[r], size, sendpost[c], tcur)
                done[c] = sd
                tcur = rd
            mask <<= 1
        sendpost[vr] = tcur
        if vr == 0:
            done[0] = tcur
    for vr in range(p):
        t[(vr + root) % p] = done[vr]


@njit(cache=True)
def dissemination(net, node, t, m):
    p = t.shape[0]
    tmp_s = np.empty(p)
    tmp_r = np.empty(p)
    mask = 1
    while mask < p:
        _exchange_round(net, node, t, mask, m, tmp_s, tmp_r)
        mask <<= 1


@njit(cache=True)
def ring(net, node, t, m, rounds):
    p = t.shape[0]
    tmp_s = np.empty(p)
    tmp_r = np.empty(p)
    for _ in range(rounds):
        _exchange_round(net, node, t, 1, m, tmp_s, tmp_r)


@njit(cache=True)
def pairwise(net, node, t, m):
    """Round k = 1..P-1: send to (i + k) % P, receive from (i - k) % P (MPICH's pairwise)."""
    p = t.shape[0]
    tmp_s = np.empty(p)
    tmp_r = np.empty(p)
    for k in range(1, p):
        _exchange_round(net, node, t, k, m, tmp_s, tmp_r)


@njit(cache=True)
def rd_allgather(net, node, t, m):
    """Recursive doubling (power-of-two P): round k exchanges m * 2^k with i ^ 2^k."""
    p = t.shape[0]
    nt = np.empty(p)
    mask = 1
    while mask < p:
        for i in range(p):
            q = i ^ mask
            sd, _ = message(net, node[i], node[q], m * mask, t[i], t[q])
            _, rd = message(net, node[q], node[i], m * mask, t[q], t[i])
            nt[i] = max(sd, rd)
        t[:] = nt
        mask <<= 1


@njit(cache=True)
def bruck(net, node, t, m, alltoall):
    """Bruck: round k sends to (i - 2^k) and receives from (i + 2^k); allgather blocks double,
    alltoall sends the blocks whose index has bit k set (about P/2 blocks)."""
    p = t.shape[0]
    tmp_s = np.empty(p)
    tmp_r = np.empty(p)
    mask = 1
    while mask < p:
        if alltoall:
            nb = 0
            for b in range(p):
                if b & mask:
                    nb += 1
            size = m * nb
        else:
            size = m * (mask if 2 * mask <= p else p - mask)
        _exchange_round(net, node, t, p - mask, size, tmp_s, tmp_r)
        mask <<= 1


@njit(cache=True)
def scan_rd(net, node, t, m):
    """Recursive doubling scan: i sends to i + 2^k (if any) and receives from i - 2^k (if any)."""
    p = t.shape[0]
    sd_t = np.empty(p)
    rd_t = np.empty(p)
    mask = 1
    while mask < p:
        for i in range(p):
            sd_t[i] = t[i]
            rd_t[i] = t[i]
        for i in range(p):
            d = i + mask
            if d < p:
                sd, rd = message(net, node[i], node[d], m, t[i], t[d])
                sd_t[i] = sd
                rd_t[d] = rd
        for i in range(p):
            t[i] = max(sd_t[i], rd_t[i])
        mask <<= 1


@njit(cache=True)
def collective_exit(net, op, node, t, root, m):
    """Advance member clocks ``t`` (arrival times, local rank order) to each member's exit time."""
    p = t.shape[0]
    if p <= 1:
        return
    if op == BARRIER:
        dissemination(net, node, t, 0.0)
    elif op == BCAST:
        if m < BCAST_SHORT_BYTES or p < BCAST_MIN_PROCS:
            bcast_tree(net, node, t, root, m, False)
        else:
            bcast_tree(net, node, t, root, m / p, True)
            ring(net, node, t, m / p, p - 1)
    elif op == REDUCE:
        reduce_tree(net, node, t, root, m, False)
    elif op == ALLREDUCE:
        _rd_allreduce(net, node, t, m, m > ALLREDUCE_SHORT_BYTES)
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
    else:  # unknown collective: priced as a barrier
        dissemination(net, node, t, 0.0)

"""The replay's preparation passes (numba, one pass each over the events, O(n)).

:func:`scan` checks peers and bursts and computes what the core needs of every call (kind, the
link a message takes, eager or rendezvous, the link's overheads, the message's uncontended wire
time); :func:`match` pairs sends with receives; :func:`resolve_waits` finds the calls that created
the requests a wait/test completes; :func:`per_rank_totals` sums bursts and bytes (the conservation check).

Hash tables are open addressing, written in place in each loop, and of a fixed size inside a
pass: a pass whose table fills up returns ``OVERFLOW`` and is run again with twice the slots
(:func:`with_retry`). Measured on bench/replay's trace: a table the loop may replace (grown in a
rare branch) made a lookup ~5x slower (numba keeps the arrays' references and data pointers
live across iterations), and a helper taking the table arrays costs ~50 ns a call
(:mod:`pmac.replay_core`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import collectives as C
from .replay_core import (F_EAGER, F_INTER, F_RINTER, K_ICOLL, K_IRECV, K_ISEND, K_RECV, K_SEND, K_SENDRECV,
                          K_WAIT, P_NULL, P_UNMATCHED)

NONE = -1
ANY_SOURCE = -2
_H1 = -7046029254386353131
_H2 = 1442695040888963407
#: error code of a pass whose table filled up
OVERFLOW = 9


@njit(cache=True, inline="always")
def _hash(a, b, mask):
    h = a * _H1 + b * _H2
    return (h ^ (h >> 31)) & mask


def with_retry(run_pass, cap: int, limit: int = 1 << 34):
    """``run_pass(cap)`` -> (result..., error code, event), again with twice the table slots while
    it returns OVERFLOW."""
    while True:
        out = run_pass(cap)
        if out[-2] != OVERFLOW or cap >= limit:
            return out
        cap *= 2


@njit(cache=True, inline="always")
def _is_send(k):
    return k == K_SEND or k == K_SENDRECV or k == K_ISEND


@njit(cache=True, inline="always")
def _is_recv(k):
    return k == K_RECV or k == K_SENDRECV or k == K_IRECV


@njit(cache=True)
def sorted_by_rank_seq(rank, seq):
    for e in range(1, rank.shape[0]):
        if rank[e] < rank[e - 1] or (rank[e] == rank[e - 1] and seq[e] <= seq[e - 1]):
            return False
    return True


@njit(cache=True)
def op_histogram(op):
    out = np.zeros(256, np.int64)
    for e in range(op.shape[0]):
        out[op[e] & 0xFF] += 1
    return out


@njit(cache=True)
def scan(op, rank, dest, source, burst, sbytes, n_ranks, kind_lut, mode_lut, node_of_rank, nf, ni,
         kind, sflag, wire):
    """Kinds and per-call link constants of every event; (error code, event) of the first bad
    one: 1 destination or 2 source not a rank, 3 receive still MPI_ANY_SOURCE, 4 bad burst,
    5 rank out of range.

    ``sflag`` bits (pmac.replay_core): a send that is eager, a send to another node, a receive
    from another node. ``wire``: a send's uncontended wire time (pmac.collectives.wire_nodes);
    only sends with a destination get one."""
    eag0, eag1 = nf[C.NF_EAGER], nf[C.NF_EAGER + 1]
    s_cols = ni[C.NI_S]
    per_route = ni[C.NI_ROUTE_TIMING] != 0
    host0 = ni[C.NI_NODE_HOST]
    n_hosts = ni[C.NI_N_HOSTS]
    r_lat = ni[C.NI_ROUTE_LAT]
    r_inv = ni[C.NI_ROUTE_INV_BW]
    # wire time of the last size seen per link kind (traces repeat sizes)
    last_m = np.full(2, -1.0)
    last_w = np.zeros(2)
    for e in range(op.shape[0]):
        if not (burst[e] >= 0.0 and burst[e] < np.inf):
            return 4, e
        r = rank[e]
        if r < 0 or r >= n_ranks:
            return 5, e
        o = op[e] & 0xFF
        k = kind_lut[o]
        kind[e] = k
        flag = 0
        if _is_send(k):
            d = dest[e]
            if d >= n_ranks or d < NONE:
                return 1, e
            if d >= 0:
                src_n = node_of_rank[r]
                dst_n = node_of_rank[d]
                link = 0 if src_n == dst_n else 1
                m = sbytes[e]
                mode = mode_lut[o]
                thr = eag0 if link == 0 else eag1
                eager = mode == 2 or (mode == 0 and m <= thr)
                flag = (F_EAGER if eager else 0) | (F_INTER if link == 1 else 0)
                if per_route and link == 1:
                    q = ni[host0 + src_n] * n_hosts + ni[host0 + dst_n]
                    wire[e] = nf[r_lat + q] + m * nf[r_inv + q]
                else:
                    if m != last_m[link]:
                        lo = C.NF_SEG + link * s_cols
                        n_seg = ni[C.NI_NSEG0 + link]
                        j = 0
                        while j + 1 < n_seg and nf[lo + j + 1] <= m:
                            j += 1
                        last_m[link] = m
                        last_w[link] = nf[lo + 2 * s_cols + j] + m / nf[lo + 4 * s_cols + j]
                    wire[e] = last_w[link]
        if _is_recv(k):
            s = source[e]
            if s == ANY_SOURCE:
                return 3, e
            if s >= n_ranks or s < NONE:
                return 2, e
            if s >= 0 and node_of_rank[s] != node_of_rank[r]:
                flag |= F_RINTER
        sflag[e] = flag
    return 0, -1


@njit(cache=True)
def match(kind, rank, dest, source, comm, send_tag, recv_tag, psend, precv, cap):
    """Point-to-point matching: the k-th send of (comm, source, dest, tag) to the k-th receive of
    the same key, in event order (MPI's non-overtaking rule); a (comm, source, dest) pair with a
    MPI_ANY_TAG receive ignores tags. Fills psend / precv (partner event, P_NULL, P_UNMATCHED);
    returns (messages matched, error code, event): OVERFLOW when more than ``cap / 2`` keys.

    One pass: per key a FIFO of the side that is ahead (sends or receives not yet matched),
    linked through the partner arrays themselves (a pending entry holds ``-(next + 10)``, the
    tail P_UNMATCHED)."""
    n = kind.shape[0]
    mask = cap - 1
    # (comm, source, dest) pairs with an ANY_TAG receive
    wa = np.empty(cap, np.int64)
    wb = np.empty(cap, np.int64)
    wv = np.zeros(cap, np.bool_)
    n_wild = 0
    for e in range(n):
        k = kind[e]
        if (k == K_RECV or k == K_SENDRECV or k == K_IRECV) and source[e] >= 0 and recv_tag[e] < 0:
            a = (np.int64(comm[e]) << 32) | np.int64(source[e])
            b = np.int64(rank[e])
            h = _hash(a, b, mask)
            while wv[h] and (wa[h] != a or wb[h] != b):
                h = (h + 1) & mask
            if not wv[h]:
                wa[h] = a
                wb[h] = b
                wv[h] = True
                n_wild += 1
                if 2 * n_wild > cap:
                    return 0, OVERFLOW, e
    ta = np.empty(cap, np.int64)
    tb = np.empty(cap, np.int64)
    used = np.zeros(cap, np.bool_)
    n_keys = 0
    # per key (its slot): head and tail of the pending FIFO, and which side is pending
    head = np.empty(cap, np.int64)
    tail = np.empty(cap, np.int64)
    side = np.zeros(cap, np.int8)   # 0 nothing pending, 1 sends pending, 2 receives pending
    n_msg = 0
    for e in range(n):
        k = kind[e]
        psend[e] = P_UNMATCHED    # entries of earlier events only are linked below
        precv[e] = P_UNMATCHED
        for half in range(2):
            if half == 0:
                if not (k == K_SEND or k == K_SENDRECV or k == K_ISEND):
                    continue
                if dest[e] < 0:
                    psend[e] = P_NULL
                    continue
                src = np.int64(rank[e])
                dst = np.int64(dest[e])
                tag = np.int64(send_tag[e])
            else:
                if not (k == K_RECV or k == K_SENDRECV or k == K_IRECV):
                    continue
                if source[e] < 0:
                    precv[e] = P_NULL
                    continue
                src = np.int64(source[e])
                dst = np.int64(rank[e])
                tag = np.int64(recv_tag[e])
            c = np.int64(comm[e]) << 32
            if n_wild:
                a = c | src
                h = _hash(a, dst, mask)
                while wv[h] and (wa[h] != a or wb[h] != dst):
                    h = (h + 1) & mask
                if wv[h]:
                    tag = 0
            a = c | (tag & 0xFFFFFFFF)
            b = (src << 32) | dst
            h = _hash(a, b, mask)
            while used[h] and (ta[h] != a or tb[h] != b):
                h = (h + 1) & mask
            if not used[h]:
                ta[h] = a
                tb[h] = b
                used[h] = True
                n_keys += 1
                if 2 * n_keys > cap:
                    return 0, OVERFLOW, e
            me = 1 if half == 0 else 2
            if side[h] == 3 - me:
                # the other side is ahead: match its oldest pending entry
                x = head[h]
                nxt = precv[x] if half == 0 else psend[x]
                if nxt == P_UNMATCHED:
                    side[h] = 0
                else:
                    head[h] = -nxt - 10
                if half == 0:
                    psend[e] = x
                    precv[x] = e
                else:
                    precv[e] = x
                    psend[x] = e
                n_msg += 1
            else:
                if half == 0:
                    psend[e] = P_UNMATCHED
                else:
                    precv[e] = P_UNMATCHED
                if side[h] == 0:
                    side[h] = me
                    head[h] = e
                else:
                    t = tail[h]
                    if half == 0:
                        psend[t] = -e - 10
                    else:
                        precv[t] = -e - 10
                tail[h] = e
    # entries still pending are unmatched
    for e in range(n):
        if psend[e] <= -10:
            psend[e] = P_UNMATCHED
        if precv[e] <= -10:
            precv[e] = P_UNMATCHED
    return n_msg, 0, -1


@njit(cache=True)
def resolve_waits(kind, op, rank, request, req_offset, n_requests, req_rank, req_handle, req_done, wreq_off, out,
                  cap):
    """For each completion call, the events that created the requests it completes (all for
    Wait/Waitall, the completed ones for the others): the latest Isend/Irecv/I-collective with the
    same handle earlier on the same rank, in event order, sorted by event. Fills wreq_off (CSR)
    and returns (wreq_ev, error code, event): 1 rows outside the requests table, 2 rows of another
    rank, OVERFLOW a rank with more than ``cap / 2`` live handles. Events must be ordered by rank:
    the handle table is per rank (a slot belongs to the rank in ``owner``).

    ``wreq_ev`` is a view of ``out`` (room for every requests row), which the caller allocates:
    numpy asks the kernel for huge pages, numba does not, and faulting bench/replay's 72 MB in
    4 KB pages cost ~40 ms of the pass's ~130."""
    n = kind.shape[0]
    n_rows = req_rank.shape[0]
    m = 0
    mask = cap - 1
    th = np.empty(cap, np.int64)
    tc = np.empty(cap, np.int64)
    owner = np.full(cap, -1, np.int64)
    n_live = 0
    cur_rank = -1
    wreq_off[0] = 0
    for e in range(n):
        k = kind[e]
        r = np.int64(rank[e])
        if r != cur_rank:
            cur_rank = r
            n_live = 0
        if (k == K_ISEND or k == K_IRECV or k == K_ICOLL) and request[e] != NONE:
            hd = request[e]
            h = _hash(hd, r, mask)
            while owner[h] == r and th[h] != hd:
                h = (h + 1) & mask
            if owner[h] != r:
                owner[h] = r
                th[h] = hd
                n_live += 1
                if 2 * n_live > cap:
                    return out[:0], OVERFLOW, e
            tc[h] = e
        elif k == K_WAIT and n_requests[e] > 0:
            lo = req_offset[e]
            hi = lo + n_requests[e]
            if lo < 0 or hi > n_rows:
                return out[:0], 1, e
            all_done = op[e] == 50 or op[e] == 51  # Wait, Waitall
            first = m
            for row in range(lo, hi):
                if req_rank[row] != r:
                    return out[:0], 2, e
                if not all_done and req_done[row] != 1:
                    continue
                hd = req_handle[row]
                h = _hash(hd, r, mask)
                while owner[h] == r and th[h] != hd:
                    h = (h + 1) & mask
                if owner[h] != r:
                    continue
                c = tc[h]
                j = m  # insertion sort by creator (stable)
                while j > first and out[j - 1] > c:
                    out[j] = out[j - 1]
                    j -= 1
                out[j] = c
                m += 1
        wreq_off[e + 1] = m
    return out[:m], 0, -1


@njit(cache=True)
def per_rank_totals(kind, rank, dest, sbytes, precv, burst, n_ranks):
    """Per rank: the sum of its bursts, the bytes of the point-to-point sends it posted, and the
    bytes it received through matched messages."""
    compute = np.zeros(n_ranks)
    sent = np.zeros(n_ranks)
    got = np.zeros(n_ranks)
    for e in range(kind.shape[0]):
        r = rank[e]
        compute[r] += burst[e]
        if _is_send(kind[e]) and dest[e] >= 0:
            sent[r] += sbytes[e]
        s = precv[e]
        if s >= 0:
            got[r] += sbytes[s]
    return compute, sent, got

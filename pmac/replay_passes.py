"""The replay's preparation passes (numba, one pass each over the events, O(n)).

:func:`scan` checks peers and bursts and computes what the core needs of every call (kind, the
link a message takes, eager or rendezvous, the link's overheads, the message's uncontended wire
time); :func:`match` pairs sends with receives; :func:`resolve_waits` finds the calls that created
the requests a wait/test completes; :func:`bytes_moved` sums bytes for the conservation check.

Hash tables are open addressing over int64 key pairs, written in place in each loop (no helper
taking the table arrays: numba's reference counting on array arguments costs ~50 ns a call,
see :mod:`pmac.replay_core`), grown by doubling in a rare branch.
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


@njit(cache=True, inline="always")
def _hash(a, b, mask):
    h = a * _H1 + b * _H2
    return (h ^ (h >> 31)) & mask


@njit(cache=True)
def _rehash(ta, tb, tv):
    """The table with twice the slots (same ids)."""
    cap = 2 * tv.shape[0]
    na = np.empty(cap, np.int64)
    nb = np.empty(cap, np.int64)
    nv = np.full(cap, -1, np.int64)
    mask = cap - 1
    for s in range(tv.shape[0]):
        if tv[s] >= 0:
            h = _hash(ta[s], tb[s], mask)
            while nv[h] >= 0:
                h = (h + 1) & mask
            na[h] = ta[s]
            nb[h] = tb[s]
            nv[h] = tv[s]
    return na, nb, nv


@njit(cache=True)
def _grown(a, n):
    out = np.empty(max(2 * a.shape[0], n), a.dtype)
    out[:a.shape[0]] = a
    return out


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
def match(kind, rank, dest, source, comm, send_tag, recv_tag, psend, precv):
    """Point-to-point matching: the k-th send of (comm, source, dest, tag) to the k-th receive of
    the same key, in event order (MPI's non-overtaking rule); a (comm, source, dest) pair with a
    MPI_ANY_TAG receive ignores tags. Fills psend / precv (partner event, P_NULL, P_UNMATCHED) and
    returns the number of matched messages.

    One pass: per key a FIFO of the side that is ahead (sends or receives not yet matched),
    linked through the partner arrays themselves (a pending entry holds ``-(next + 10)``, the
    tail P_UNMATCHED)."""
    n = kind.shape[0]
    # (comm, source, dest) pairs with an ANY_TAG receive
    wa = np.empty(64, np.int64)
    wb = np.empty(64, np.int64)
    wv = np.full(64, -1, np.int64)
    n_wild = 0
    for e in range(n):
        k = kind[e]
        if (k == K_RECV or k == K_SENDRECV or k == K_IRECV) and source[e] >= 0 and recv_tag[e] < 0:
            a = (np.int64(comm[e]) << 32) | np.int64(source[e])
            b = np.int64(rank[e])
            mask = wv.shape[0] - 1
            h = _hash(a, b, mask)
            while wv[h] >= 0 and (wa[h] != a or wb[h] != b):
                h = (h + 1) & mask
            if wv[h] < 0:
                wa[h] = a
                wb[h] = b
                wv[h] = n_wild
                n_wild += 1
                if 2 * n_wild > wv.shape[0]:
                    wa, wb, wv = _rehash(wa, wb, wv)
    ta = np.empty(1024, np.int64)
    tb = np.empty(1024, np.int64)
    tv = np.full(1024, -1, np.int64)
    n_keys = 0
    head = np.empty(512, np.int64)
    tail = np.empty(512, np.int64)
    side = np.empty(512, np.int8)   # 0 nothing pending, 1 sends pending, 2 receives pending
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
                mask = wv.shape[0] - 1
                h = _hash(a, dst, mask)
                while wv[h] >= 0 and (wa[h] != a or wb[h] != dst):
                    h = (h + 1) & mask
                if wv[h] >= 0:
                    tag = 0
            a = c | (tag & 0xFFFFFFFF)
            b = (src << 32) | dst
            mask = tv.shape[0] - 1
            h = _hash(a, b, mask)
            while tv[h] >= 0 and (ta[h] != a or tb[h] != b):
                h = (h + 1) & mask
            if tv[h] >= 0:
                key = tv[h]
            else:
                key = n_keys
                ta[h] = a
                tb[h] = b
                tv[h] = key
                n_keys += 1
                if key >= side.shape[0]:
                    head = _grown(head, key + 1)
                    tail = _grown(tail, key + 1)
                    side = _grown(side, key + 1)
                side[key] = 0
                if 2 * n_keys > tv.shape[0]:
                    ta, tb, tv = _rehash(ta, tb, tv)
            me = 1 if half == 0 else 2
            if side[key] == 3 - me:
                # the other side is ahead: match its oldest pending entry
                x = head[key]
                nxt = precv[x] if half == 0 else psend[x]
                if nxt == P_UNMATCHED:
                    side[key] = 0
                else:
                    head[key] = -nxt - 10
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
                if side[key] == 0:
                    side[key] = me
                    head[key] = e
                else:
                    t = tail[key]
                    if half == 0:
                        psend[t] = -e - 10
                    else:
                        precv[t] = -e - 10
                tail[key] = e
    # entries still pending are unmatched
    for e in range(n):
        if psend[e] <= -10:
            psend[e] = P_UNMATCHED
        if precv[e] <= -10:
            precv[e] = P_UNMATCHED
    return n_msg


@njit(cache=True)
def resolve_waits(kind, op, rank, request, req_offset, n_requests, req_rank, req_handle, req_done, wreq_off):
    """For each completion call, the events that created the requests it completes (all for
    Wait/Waitall, the completed ones for the others): the latest Isend/Irecv/I-collective with the
    same handle earlier on the same rank, in event order, sorted by event. Fills wreq_off (CSR)
    and returns (wreq_ev, error code, event): 1 rows outside the requests table, 2 rows of another
    rank. Events must be ordered by rank: the handle table is per rank (a slot belongs to the rank
    in ``owner``)."""
    n = kind.shape[0]
    n_rows = req_rank.shape[0]
    out = np.empty(n_rows, np.int64)
    m = 0
    th = np.empty(256, np.int64)
    tc = np.empty(256, np.int64)
    owner = np.full(256, -1, np.int64)
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
            mask = owner.shape[0] - 1
            h = _hash(hd, r, mask)
            while owner[h] == r and th[h] != hd:
                h = (h + 1) & mask
            if owner[h] != r:
                owner[h] = r
                th[h] = hd
                n_live += 1
            tc[h] = e
            if 2 * n_live > owner.shape[0]:
                # grow: keep this rank's entries
                cap = 2 * owner.shape[0]
                nh = np.empty(cap, np.int64)
                nc = np.empty(cap, np.int64)
                no = np.full(cap, -1, np.int64)
                for s in range(owner.shape[0]):
                    if owner[s] == r:
                        g = _hash(th[s], r, cap - 1)
                        while no[g] == r:
                            g = (g + 1) & (cap - 1)
                        no[g] = r
                        nh[g] = th[s]
                        nc[g] = tc[s]
                th, tc, owner = nh, nc, no
        elif k == K_WAIT and n_requests[e] > 0:
            lo = req_offset[e]
            hi = lo + n_requests[e]
            if lo < 0 or hi > n_rows:
                return out[:0], 1, e
            all_done = op[e] == 50 or op[e] == 51  # Wait, Waitall
            first = m
            mask = owner.shape[0] - 1
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
def bytes_moved(kind, rank, dest, sbytes, precv, n_ranks):
    """Bytes of point-to-point sends posted per rank and bytes received through matched messages."""
    sent = np.zeros(n_ranks)
    got = np.zeros(n_ranks)
    for e in range(kind.shape[0]):
        if _is_send(kind[e]) and dest[e] >= 0:
            sent[rank[e]] += sbytes[e]
        s = precv[e]
        if s >= 0:
            got[rank[e]] += sbytes[s]
    return sent, got

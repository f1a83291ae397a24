"""The replay's preparation (numba, O(n)): :func:`prepare_events`, one pass over the events.

It checks peers and bursts, computes what the core needs of every call (kind, the link a message
takes, eager or rendezvous, the message's uncontended wire time), pairs sends with receives, finds
the calls that created the requests a wait/test completes, lists the collective calls and sums
bursts and bytes per rank (the conservation check). One pass rather than one per task: its
outputs are fields of per-event records (pmac.replay_core.event_dtypes), and every pass over
them streams the whole record.

Hash tables are open addressing, written in place in the loop, and of a fixed size inside a pass: a
pass whose table fills up returns ``OVERFLOW_MATCH`` or ``OVERFLOW_HANDLES`` and is run again with
twice the slots of that table (:func:`with_retry`). Measured on bench/replay's trace: a table the
loop may replace (grown in a rare branch) made a lookup ~5x slower (numba keeps the arrays'
references and data pointers live across iterations), and a helper taking the table arrays costs
~50 ns a call (:mod:`pmac.replay_core`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import collectives as C
from .replay_core import (F_EAGER, F_INTER, F_RINTER, K_COLL, K_ICOLL, K_IRECV, K_ISEND, K_RECV, K_SEND, K_SENDRECV,
                          K_WAIT, P_NULL, P_UNMATCHED)

NONE = -1
ANY_SOURCE = -2
_H1 = -7046029254386353131
_H2 = 1442695040888963407


@njit(cache=True, inline="always")
def _hash(a, b, mask):
    h = a * _H1 + b * _H2
    return (h ^ (h >> 31)) & mask


def with_retry(run_pass, cap_m: int, cap_w: int, limit: int = 1 << 34):
    """``run_pass(cap_m, cap_w)`` -> (result..., error code, event), again with twice the slots of
    the table that filled up while it returns OVERFLOW_MATCH or OVERFLOW_HANDLES."""
    while True:
        out = run_pass(cap_m, cap_w)
        if out[-2] == OVERFLOW_MATCH and cap_m < limit:
            cap_m *= 2
        elif out[-2] == OVERFLOW_HANDLES and cap_w < limit:
            cap_w *= 2
        else:
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
def op_histogram(op, recv_tag):
    """Calls per op code (row 0), and calls with a negative receive tag (MPI_ANY_TAG) per op
    code (row 1)."""
    out = np.zeros((2, 256), np.int64)
    for e in range(op.shape[0]):
        o = op[e] & 0xFF
        out[0, o] += 1
        if recv_tag[e] < 0:
            out[1, o] += 1
    return out


#: error codes of :func:`prepare_events` (the event is returned beside it)
E_DEST, E_SOURCE, E_ANY_SOURCE, E_BURST, E_RANK, E_REQ_ROWS, E_REQ_RANK, E_NO_REQUESTS = 1, 2, 3, 4, 5, 6, 7, 8
#: a table filled up: the matching table (and the ANY_TAG pairs), the per-rank request handles
OVERFLOW_MATCH, OVERFLOW_HANDLES = 9, 10


@njit(cache=True)
def prepare_events(op, rank, dest, source, comm, send_tag, recv_tag, sbytes, burst_in, request, req_offset,
                   n_requests, req_rank, req_handle, req_done, have_requests, any_tag, n_ranks, kind_lut,
                   mode_lut, node_of_rank, nf, ni, kind, sflag, wire, post_t, arrival, psend, precv, wreq_off,
                   wreq_out, coll_out, compute, sent, got, cap_m, cap_w, link_only=False):
    """Everything the core needs of every event, in one pass over the events (ordered by rank,
    then seq); returns (messages matched, request rows resolved, collective calls, error code,
    event). The outputs from ``kind`` to ``wreq_off`` are fields of the per-event records
    (pmac.replay_core.event_dtypes): one pass writes each record once.

    - Checks: peers and ranks in range (E_DEST, E_SOURCE, E_RANK), receives not still
      MPI_ANY_SOURCE (E_ANY_SOURCE), bursts finite and >= 0 (E_BURST).
    - Per call: its core ``kind``; ``sflag`` bits (pmac.replay_core): a send that is eager, a send
      to another node, a receive from another node; ``post_t`` and ``arrival`` NaN (not yet
      simulated), then ``wire``, a send's uncontended wire time (pmac.collectives.wire_nodes),
      set only for sends with a destination (pmac.replay passes the records' ``arrival`` field as
      ``wire``: it holds the wire time until the core computes the arrival). The core reads the
      bursts from ``burst_in`` itself.
    - Matching: the k-th send of (comm, source, dest, tag) to the k-th receive of the same key, in
      event order (MPI's non-overtaking rule); a (comm, source, dest) pair with an MPI_ANY_TAG
      receive ignores tags (``any_tag``: some receive has a negative tag). ``psend`` / ``precv``:
      partner event, P_NULL, P_UNMATCHED. Per key a
      FIFO of the side that is ahead, linked through the partner fields themselves (a pending
      entry holds ``-(next + 10)``, the tail P_UNMATCHED). OVERFLOW_MATCH: more than ``cap_m / 2``
      keys.
    - Waits: for each completion call, the events that created the requests it completes (all
      for Wait/Waitall, the completed ones for the others): the latest Isend/Irecv/I-collective
      with the same handle earlier on the same rank, sorted by event, into ``wreq_out`` (room for
      every requests row; numpy's, for huge pages), offsets in ``wreq_off`` (CSR, n + 1).
      E_REQ_ROWS: rows outside the requests table, E_REQ_RANK: rows of another rank,
      E_NO_REQUESTS: a wait names requests but no table was given, OVERFLOW_HANDLES: a rank
      with more than ``cap_w / 2`` live handles (the handle table is per rank: a slot belongs to
      the rank in ``owner``).
    - ``coll_out``: the collective calls, in event order.
    - Per rank: ``compute`` the sum of its bursts, ``sent`` the bytes of the point-to-point sends
      it posted, ``got`` the bytes it received through matched messages (the conservation check).

    ``link_only``: the events were prepared before (for another machine); only the checks, the
    per-call link constants, the NaN state and ``compute`` / ``sent`` are written
    again (``got`` is left at 0; matching, waits and the collective list are kept).
    """
    n = op.shape[0]
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
    for r in range(n_ranks):
        compute[r] = 0.0
        sent[r] = 0.0
        got[r] = 0.0
    mask = cap_m - 1
    # (comm, source, dest) pairs with an ANY_TAG receive
    wa = np.empty(cap_m, np.int64)
    wb = np.empty(cap_m, np.int64)
    wv = np.zeros(cap_m, np.bool_)
    n_wild = 0
    for e in range(n if any_tag else 0):
        k = kind_lut[op[e] & 0xFF]
        if _is_recv(k) and source[e] >= 0 and recv_tag[e] < 0:
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
                if 2 * n_wild > cap_m:
                    return 0, 0, 0, OVERFLOW_MATCH, e
    # per key (its slot): the key (a, b; b = -1 for a free slot), head and tail of the pending
    # FIFO side by side (one line per probe), and which side is pending
    tab = np.empty((cap_m, 4), np.int64)
    for h in range(cap_m):
        tab[h, 1] = -1
    n_keys = 0
    side = np.zeros(cap_m, np.int8)   # 0 nothing pending, 1 sends pending, 2 receives pending
    n_msg = 0
    # request handles of the current rank
    wmask = cap_w - 1
    th = np.empty(cap_w, np.int64)
    tc = np.empty(cap_w, np.int64)
    owner = np.full(cap_w, -1, np.int64)
    n_live = 0
    cur_rank = -1
    n_rows = req_rank.shape[0]
    m = 0
    if not link_only:
        wreq_off[0] = 0
    nc = 0
    acc_c = 0.0
    acc_s = 0.0
    for e in range(n):
        bt = burst_in[e]
        if not (bt >= 0.0 and bt < np.inf):
            return 0, 0, 0, E_BURST, e
        r = rank[e]
        if r < 0 or r >= n_ranks:
            return 0, 0, 0, E_RANK, e
        o = op[e] & 0xFF
        k = kind_lut[o]
        kind[e] = k
        post_t[e] = np.nan
        arrival[e] = np.nan
        if not link_only:
            psend[e] = P_UNMATCHED    # entries of earlier events only are linked below
            precv[e] = P_UNMATCHED
        if r != cur_rank:
            if cur_rank >= 0:
                compute[cur_rank] += acc_c
                sent[cur_rank] += acc_s
            acc_c = 0.0
            acc_s = 0.0
            cur_rank = r
            n_live = 0
        acc_c += bt
        # ---- per-call link constants
        flag = 0
        if _is_send(k):
            d = dest[e]
            if d >= n_ranks or d < NONE:
                return 0, 0, 0, E_DEST, e
            if d >= 0:
                src_n = node_of_rank[r]
                dst_n = node_of_rank[d]
                link = 0 if src_n == dst_n else 1
                mb = sbytes[e]
                acc_s += mb
                mode = mode_lut[o]
                thr = eag0 if link == 0 else eag1
                eager = mode == 2 or (mode == 0 and mb <= thr)
                flag = (F_EAGER if eager else 0) | (F_INTER if link == 1 else 0)
                if per_route and link == 1:
                    q = ni[host0 + src_n] * n_hosts + ni[host0 + dst_n]
                    wire[e] = nf[r_lat + q] + mb * nf[r_inv + q]
                else:
                    if mb != last_m[link]:
                        lo = C.NF_SEG + link * s_cols
                        n_seg = ni[C.NI_NSEG0 + link]
                        j = 0
                        while j + 1 < n_seg and nf[lo + j + 1] <= mb:
                            j += 1
                        last_m[link] = mb
                        last_w[link] = nf[lo + 2 * s_cols + j] + mb / nf[lo + 4 * s_cols + j]
                    wire[e] = last_w[link]
        if _is_recv(k):
            s = source[e]
            if s == ANY_SOURCE:
                return 0, 0, 0, E_ANY_SOURCE, e
            if s >= n_ranks or s < NONE:
                return 0, 0, 0, E_SOURCE, e
            if s >= 0 and node_of_rank[s] != node_of_rank[r]:
                flag |= F_RINTER
        sflag[e] = flag
        if link_only:
            continue
        # ---- matching
        for half in range(2):
            if half == 0:
                if not _is_send(k):
                    continue
                if dest[e] < 0:
                    psend[e] = P_NULL
                    continue
                src = np.int64(r)
                dst = np.int64(dest[e])
                tag = np.int64(send_tag[e])
            else:
                if not _is_recv(k):
                    continue
                if source[e] < 0:
                    precv[e] = P_NULL
                    continue
                src = np.int64(source[e])
                dst = np.int64(r)
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
            while tab[h, 1] != -1 and (tab[h, 0] != a or tab[h, 1] != b):
                h = (h + 1) & mask
            if tab[h, 1] == -1:
                tab[h, 0] = a
                tab[h, 1] = b
                n_keys += 1
                if 2 * n_keys > cap_m:
                    return 0, 0, 0, OVERFLOW_MATCH, e
            me = 1 if half == 0 else 2
            if side[h] == 3 - me:
                # the other side is ahead: match its oldest pending entry
                x = tab[h, 2]
                nxt = precv[x] if half == 0 else psend[x]
                if nxt == P_UNMATCHED:
                    side[h] = 0
                else:
                    tab[h, 2] = -nxt - 10
                if half == 0:
                    psend[e] = x
                    precv[x] = e
                    got[dst] += sbytes[e]
                else:
                    precv[e] = x
                    psend[x] = e
                    got[dst] += sbytes[x]
                n_msg += 1
            else:
                if side[h] == 0:
                    side[h] = me
                    tab[h, 2] = e
                else:
                    t = tab[h, 3]
                    if half == 0:
                        psend[t] = -e - 10
                    else:
                        precv[t] = -e - 10
                tab[h, 3] = e
        if k == K_COLL or k == K_ICOLL:
            coll_out[nc] = e
            nc += 1
        # ---- requests: handles created, and the creators of the requests a wait completes
        if (k == K_ISEND or k == K_IRECV or k == K_ICOLL) and request[e] != NONE:
            hd = request[e]
            h = _hash(hd, r, wmask)
            while owner[h] == r and th[h] != hd:
                h = (h + 1) & wmask
            if owner[h] != r:
                owner[h] = r
                th[h] = hd
                n_live += 1
                if 2 * n_live > cap_w:
                    return 0, 0, 0, OVERFLOW_HANDLES, e
            tc[h] = e
        elif k == K_WAIT and n_requests[e] > 0:
            if not have_requests:
                return 0, 0, 0, E_NO_REQUESTS, e
            lo = req_offset[e]
            hi = lo + n_requests[e]
            if lo < 0 or hi > n_rows:
                return 0, 0, 0, E_REQ_ROWS, e
            all_done = op[e] == 50 or op[e] == 51  # Wait, Waitall
            first = m
            for row in range(lo, hi):
                if req_rank[row] != r:
                    return 0, 0, 0, E_REQ_RANK, e
                if not all_done and req_done[row] != 1:
                    continue
                hd = req_handle[row]
                h = _hash(hd, r, wmask)
                while owner[h] == r and th[h] != hd:
                    h = (h + 1) & wmask
                if owner[h] != r:
                    continue
                cr = tc[h]
                j = m  # insertion sort by creator (stable)
                while j > first and wreq_out[j - 1] > cr:
                    wreq_out[j] = wreq_out[j - 1]
                    j -= 1
                wreq_out[j] = cr
                m += 1
        wreq_off[e + 1] = m
    if cur_rank >= 0:
        compute[cur_rank] += acc_c
        sent[cur_rank] += acc_s
    # the sentinel record (a collective member that never posts)
    post_t[n] = np.nan
    arrival[n] = np.nan
    # entries still pending are unmatched: walk each key's FIFO
    for h in range(cap_m):
        if side[h] != 0:
            x = tab[h, 2]
            while True:
                if side[h] == 1:
                    v = psend[x]
                    psend[x] = P_UNMATCHED
                else:
                    v = precv[x]
                    precv[x] = P_UNMATCHED
                if v == P_UNMATCHED:
                    break
                x = -v - 10
    return n_msg, m, nc, 0, -1

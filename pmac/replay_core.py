"""The event loop of the replay (numba): every rank's calls in order, on prepared arrays.

:mod:`pmac.replay` prepares the arrays (matching, wait resolution, per-send link constants) and
documents the semantics; this module only runs them. Its speed comes from four rules, each
measured (``bench/replay``):

- The per-event arrays are fields of two records (:func:`event_dtypes`), so that a rank's turn
  reads a few consecutive records rather than one scattered line of each of ten arrays.
- No call with array arguments on the per-event path. numba passes every array argument with
  reference-count updates (atomic operations): a helper taking eight arrays costs ~50 ns a call
  even with ``inline="always"``, the same body written in place ~1.5 ns. The helpers here take
  scalars; the wake-up and the heap push are written where they are used. Only collectives (once
  per instance) and transfers on stateful links (shaped, contended) call into
  :mod:`pmac.collectives` with the net arrays.
- Per-send constants come precomputed: eager or not, the link kind, the send/receive overheads
  of the link, the uncontended wire time of the message and of an empty message.
- A wait blocked on its j-th request resumes at j: the requests before it are complete and
  their contributions (latest end, latest partner post) are kept per rank.

Event kinds (``kind``), what a blocked rank waits for (``bk``) and partner codes are the
constants below; :mod:`pmac.replay` uses the same ones.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import collectives as C

#: events below this count (and request rows) use 32-bit event indices (pmac.replay._prepare)
NARROW_LIMIT = (1 << 31) - 64


def event_dtypes(narrow: bool = True):
    """The two per-event records the core runs on (views of their fields): the event's own fields
    side by side, and its partners (psend, precv) side by side; event indices 32-bit when
    ``narrow``. pmac.replay_passes.prepare_events fills both.

    Why records: a rank's turn then touches a few consecutive records instead of one scattered
    line in each of ten arrays. Measured on bench/replay's 1,024-rank trace (the same loop on
    strided views): core loop 7.5-8.3 M events/s on separate arrays, 14.3-15.0 with all fields in
    one record. The partners live in a record of their own because the matching pass follows
    pending sends and receives back through them: inside the 72-byte record its working set grew
    ninefold and the pass took 0.6 s instead of 0.13. The bursts stay in the caller's column (a
    rank reads it in order) and the critical path's partner per call in an array of its own,
    written only when asked (pmac.replay.ReplayOptions.critical_path): a 32-byte record instead of
    48. bench/replay's first call (its memory not yet touched), three runs alternating with the
    48-byte version on the dev VM: 1.22-1.31 s -> 1.04-1.13 s; the repeated call and the core loop
    did not move. A send's wire time is needed only until its arrival is computed, so it is kept in
    the ``arrival`` field until then (the F_ARRIVED bit of ``sflag`` says which it holds): a 24-byte
    record instead of 32. bench/replay, two runs alternating with the 32-byte version: first call
    0.98-0.99 s -> 0.90 s, the repeated call 0.88-0.90 s both."""
    ix = np.int32 if narrow else np.int64
    rec = np.dtype([("post_t", np.float64), ("arrival", np.float64), ("wreq_off", ix), ("kind", np.int8),
                    ("sflag", np.int8)], align=True)
    pair = np.dtype([("psend", ix), ("precv", ix)], align=True)
    return rec, pair


# event kinds in the core
K_LOCAL, K_SEND, K_RECV, K_SENDRECV, K_ISEND, K_IRECV, K_WAIT, K_COLL, K_ICOLL = range(9)
# what a blocked rank waits for
B_NONE, B_EVENT, B_INST, B_NEVER = 0, 1, 2, 3
# partner codes
P_NULL, P_UNMATCHED = -1, -2
# bits of sflag: the send is eager; the send goes to another node; the receive comes from another node;
# the send's arrival is known (until then its ``arrival`` field holds its uncontended wire time)
F_EAGER, F_INTER, F_RINTER, F_ARRIVED = 1, 2, 4, 8


@njit(cache=True)
def heap_push(keys, vals, hn, key, val):
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
def heap_pop(keys, vals, hn):
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


@njit(cache=True, inline="always")
def _plain_ready(flag, ts, tr, buffered, o_s):
    """When the data of a message posted at ``ts`` (its receive at ``tr``) may leave: eager, or
    rendezvous without the handshake (pmac.collectives)."""
    ready = ts + o_s
    if (buffered == 0 or not (flag & F_EAGER)) and tr > ready:
        ready = tr
    return ready


@njit(cache=True)
def _arrive_stateful(nf, ni, s, node_of_rank, rank, dest, sbytes, ready):
    """Arrival of send ``s``'s data leaving at ``ready`` through stateful links (a shaper, a
    contended topology)."""
    return C.transfer((nf, ni), node_of_rank[rank[s]], node_of_rank[dest[s]], float(sbytes[s]), ready)


@njit(cache=True)
def _arrival(nf, ni, s, flag, ts, tr, buffered, handshake, stateful, per_route, o_s0, o_s1, l0_0, l0_1,
             host0, n_hosts, r_lat, wire, node_of_rank, rank, dest, sbytes):
    """Arrival of send ``s``'s data (posted at ``ts``, its receive at ``tr``): eager, or
    rendezvous with or without the handshake (pmac.collectives); once per message, so its array
    arguments are affordable."""
    inter = (flag & F_INTER) != 0
    o_s = o_s1 if inter else o_s0
    if (flag & F_EAGER) or handshake == 0:
        ready = _plain_ready(flag, ts, tr, buffered, o_s)
    else:
        l0 = l0_1 if inter else l0_0
        if per_route and inter:
            l0 = nf[r_lat + ni[host0 + node_of_rank[rank[s]]] * n_hosts + ni[host0 + node_of_rank[dest[s]]]]
        ready = max(ts + o_s + l0, tr) + l0
    if stateful and inter:
        return _arrive_stateful(nf, ni, s, node_of_rank, rank, dest, sbytes, ready)
    return ready + wire[s]


@njit(cache=True)
def _collective_done(nf, ni, i, inst_off, inst_ev, inst_op, inst_root, inst_bytes, inst_table_s, inst_extra_s,
                     inst_maxarr, post_t, node_of_rank, rank, tbuf, nbuf, arrival):
    """Every member of collective instance ``i`` has posted: their exit times into ``arrival``
    (from the measured table when it has the instance, else the algorithm, pmac.collectives,
    plus the call's excess over it, pmac.calibrate_collectives)."""
    n = inst_off[i + 1] - inst_off[i]
    tt = tbuf[:n]
    nn = nbuf[:n]
    for j in range(n):
        x = inst_ev[inst_off[i] + j]
        tt[j] = post_t[x]
        nn[j] = node_of_rank[rank[x]]
    if not np.isnan(inst_table_s[i]):
        for j in range(n):
            tt[j] = inst_maxarr[i] + inst_table_s[i]
    else:
        C.collective_exit((nf, ni), inst_op[i], nn, tt, inst_root[i], inst_bytes[i])
        if inst_extra_s[i] != 0.0:
            C.add_excess(inst_op[i], tt, post_t, inst_ev, inst_off[i], inst_root[i], inst_maxarr[i],
                         inst_extra_s[i])
    for j in range(n):
        arrival[inst_ev[inst_off[i] + j]] = tt[j]


@njit(cache=True)
def run(nf, ni, rank_off, kind, sflag, wire, sbytes, dest, node_of_rank, rank, burst, psend, precv, wreq_off,
        wreq_ev, inst_off, inst_ev, inst_op, inst_root, inst_bytes, inst_table_s, inst_extra_s, ordered,
        want_tl, post_t, end_t, arrival, cause, comm_out, wait_out, clock, ptr, bk, bw):
    """Replay until every rank is done or blocked; returns True when all finished.

    ``psend[c]`` of a collective call c is its instance; ``arrival[s]`` is when send s's data
    arrives, ``arrival[c]`` when collective call c ends."""
    n_ranks = rank_off.shape[0] - 1
    n_inst = inst_off.shape[0] - 1
    buffered = ni[C.NI_BUFFERED]
    handshake = ni[C.NI_HANDSHAKE]
    # messages that go through pmac.collectives.transfer (stateful links) rather than wire[]
    stateful = ni[C.NI_CONTENTION] != 0 or ni[C.NI_SHAPED] != 0
    per_route = ni[C.NI_ROUTE_TIMING] != 0
    xc = nf[C.NF_XCHG] != 0.0 or nf[C.NF_XCHG + 1] != 0.0
    o_s0, o_s1 = nf[C.NF_O_S], nf[C.NF_O_S + 1]
    o_r0, o_r1 = nf[C.NF_O_R], nf[C.NF_O_R + 1]
    # wire time of an empty message per link kind (first segment's latency), or per route
    s_cols = ni[C.NI_S]
    l0_0 = nf[C.NF_SEG + 2 * s_cols]
    l0_1 = nf[C.NF_SEG + 2 * s_cols + s_cols]
    host0 = ni[C.NI_NODE_HOST]
    n_hosts = ni[C.NI_N_HOSTS]
    r_lat = ni[C.NI_ROUTE_LAT]
    inst_count = np.zeros(n_inst, np.int64)
    inst_maxarr = np.full(n_inst, -np.inf)
    inst_last = np.full(n_inst, -1, np.int64)
    heap_keys = np.empty(n_ranks + 1)
    heap_vals = np.empty(n_ranks + 1, np.int64)
    hn = np.zeros(1, np.int64)
    stack = np.empty(n_ranks + 1, np.int64)
    sn = 0
    # a call blocked on one of its pieces (a request of a wait, the receive half of a sendrecv)
    # resumes there: position, latest end, latest partner post and the partner event, so far
    wpos = np.full(n_ranks, -1, np.int64)
    wend = np.zeros(n_ranks)
    wref = np.zeros(n_ranks)
    wcz = np.zeros(n_ranks, np.int64)
    for r in range(n_ranks - 1, -1, -1):
        ptr[r] = rank_off[r]
        clock[r] = 0.0
        if rank_off[r] < rank_off[r + 1]:
            if ordered:
                heap_push(heap_keys, heap_vals, hn, burst[rank_off[r]], r)
            else:
                stack[sn] = r
                sn += 1
    tbuf = np.empty(n_ranks)
    nbuf = np.empty(n_ranks, np.int64)
    while True:
        if ordered:
            if hn[0] == 0:
                break
            r = heap_pop(heap_keys, heap_vals, hn)
        else:
            if sn == 0:
                break
            sn -= 1
            r = stack[sn]
        end_r = rank_off[r + 1]
        while ptr[r] < end_r:
            e = ptr[r]
            k = kind[e]
            is_send = k == K_SEND or k == K_SENDRECV or k == K_ISEND
            is_recv = k == K_RECV or k == K_SENDRECV or k == K_IRECV
            if np.isnan(post_t[e]):
                # ---- first visit: the call is posted
                t0 = clock[r] + burst[e]
                post_t[e] = t0
                wpos[r] = -1
                if is_send and psend[e] != P_NULL and buffered != 0 and (sflag[e] & F_EAGER):
                    ready = t0 + (o_s1 if sflag[e] & F_INTER else o_s0)
                    if stateful and (sflag[e] & F_INTER):
                        arrival[e] = _arrive_stateful(nf, ni, e, node_of_rank, rank, dest, sbytes, ready)
                    else:
                        arrival[e] = ready + wire[e]
                    sflag[e] |= F_ARRIVED
                if k == K_COLL or k == K_ICOLL:
                    i = psend[e]
                    inst_count[i] += 1
                    if t0 >= inst_maxarr[i]:
                        inst_maxarr[i] = t0
                        inst_last[i] = e
                    if inst_count[i] == inst_off[i + 1] - inst_off[i]:
                        _collective_done(nf, ni, i, inst_off, inst_ev, inst_op, inst_root, inst_bytes, inst_table_s,
                                         inst_extra_s, inst_maxarr, post_t, node_of_rank, rank, tbuf, nbuf, arrival)
                        for j in range(inst_off[i], inst_off[i + 1]):
                            x = inst_ev[j]
                            q = rank[x]
                            if q != r and bk[q] == B_INST and bw[q] == i:
                                bk[q] = B_NONE
                                if ordered:
                                    heap_push(heap_keys, heap_vals, hn, post_t[ptr[q]], q)
                                else:
                                    stack[sn] = q
                                    sn += 1
                # wake the partner if it waits for this post
                y = psend[e] if is_send else -1
                for side in range(2):
                    if y >= 0:
                        q = rank[y]
                        if bk[q] == B_EVENT and bw[q] == e:
                            bk[q] = B_NONE
                            if ordered:
                                heap_push(heap_keys, heap_vals, hn, post_t[ptr[q]], q)
                            else:
                                stack[sn] = q
                                sn += 1
                    y = precv[e] if is_recv and side == 0 else -1
            t0 = post_t[e]
            end = t0
            ref = t0  # latest partner post this call waited for
            cz = -1   # the partner event that determined it (critical path)
            blocked = False
            # the pieces this call completes: a wait's requests (wreq_ev[lo:hi]), or the call's own
            # halves (0 send, 1 receive) for blocking point-to-point
            is_wait = k == K_WAIT
            lo = 0
            hi = 0
            if is_wait:
                lo = wreq_off[e]
                hi = wreq_off[e + 1]
            elif k == K_SEND:
                hi = 1
            elif k == K_RECV:
                lo = 1
                hi = 2
            elif k == K_SENDRECV:
                hi = 2
            elif k == K_ISEND:
                if psend[e] != P_NULL:
                    end = t0 + (o_s1 if sflag[e] & F_INTER else o_s0)
            elif k == K_COLL:
                i = psend[e]
                if np.isnan(arrival[e]):
                    blocked = True
                    bk[r] = B_INST
                    bw[r] = i
                else:
                    end = arrival[e]
                    ref = inst_maxarr[i]
                    cz = inst_last[i]
            j = lo
            if wpos[r] >= 0:
                j = wpos[r]
                end = wend[r]
                ref = wref[r]
                cz = wcz[r]
            while j < hi:
                if is_wait:
                    x = wreq_ev[j]
                    kx = kind[x]
                    half = 0 if kx == K_ISEND else (1 if kx == K_IRECV else (2 if kx == K_ICOLL else 3))
                else:
                    x = e
                    half = j
                if half <= 1:       # ---- a send (0) or a receive (1) is done
                    q = psend[x] if half == 0 else precv[x]   # the partner
                    if q == P_NULL:
                        j += 1
                        continue
                    if half == 0 and (sflag[x] & F_EAGER):
                        d = post_t[x] + (o_s1 if sflag[x] & F_INTER else o_s0)
                    else:
                        if q == P_UNMATCHED:
                            blocked = True
                            bk[r] = B_NEVER
                            bw[r] = x
                            break
                        if np.isnan(post_t[q]):
                            blocked = True
                            bk[r] = B_EVENT
                            bw[r] = q
                            break
                        s = x if half == 0 else q             # the send, and its receive's post
                        tr = post_t[q] if half == 0 else post_t[x]
                        fs = sflag[s]
                        if not (fs & F_ARRIVED):
                            if stateful or per_route or (handshake != 0 and not (fs & F_EAGER)):
                                arrival[s] = _arrival(nf, ni, s, fs, post_t[s], tr, buffered, handshake,
                                                      stateful, per_route, o_s0, o_s1, l0_0, l0_1, host0,
                                                      n_hosts, r_lat, wire, node_of_rank, rank, dest, sbytes)
                            else:   # the common case without a call taking arrays
                                arrival[s] = _plain_ready(fs, post_t[s], tr, buffered,
                                                          o_s1 if fs & F_INTER else o_s0) + wire[s]
                            sflag[s] = fs | F_ARRIVED
                        if half == 0:
                            d = arrival[s]
                        else:
                            d = max(tr, arrival[s]) + (o_r1 if sflag[x] & F_RINTER else o_r0)
                            if k == K_SENDRECV and xc and kind[q] == K_SENDRECV and dest[q] == r \
                                    and dest[e] == rank[q]:
                                # the two halves of an exchange
                                lk = 1 if sflag[x] & F_RINTER else 0
                                d += C.crossing(nf[C.NF_XCHG + lk], o_s1 if lk else o_s0, post_t[e], post_t[q])
                        if post_t[q] > ref:
                            ref = post_t[q]
                            cz = q
                    if d > end:
                        end = d
                elif half == 2:     # ---- a non-blocking collective is done
                    i = psend[x]
                    if np.isnan(arrival[x]):
                        blocked = True
                        bk[r] = B_INST
                        bw[r] = i
                        break
                    if arrival[x] > end:
                        end = arrival[x]
                    if inst_maxarr[i] > ref:
                        ref = inst_maxarr[i]
                        cz = inst_last[i]
                j += 1
            if blocked:
                if hi > lo:
                    wpos[r] = j
                    wend[r] = end
                    wref[r] = ref
                    wcz[r] = cz
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
            if cz >= 0 and rank[cz] == r:
                cz = -1
            if cause.shape[0]:   # the partner it waited for (critical path), when asked
                cause[e] = cz if wt > 0.0 else -1
            if want_tl:
                end_t[e] = end
            clock[r] = end
            ptr[r] = e + 1
            if ordered:
                if e + 1 < end_r:
                    heap_push(heap_keys, heap_vals, hn, end + burst[e + 1], r)
                break
    for r in range(n_ranks):
        if ptr[r] < rank_off[r + 1]:
            return False
    return True

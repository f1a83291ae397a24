"""pmac.replay: closed forms (exact to 1e-9 relative), protocols, conservation, monotonicity,
deadlock reports, contention, topologies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from pmac.errors import InputError, ReplayError
from pmac.profile import CollectiveCost, LinkSegment, NetworkModel
from pmac.replay import ReplayOptions, replay
from pmac.topology import dragonfly, fat_tree, from_simgrid, routes, star, torus
from pmac.trace import Op

from trace_synth import B, L, OR, OS, Trace, link, net1

REL = 1e-9


def approx(x):
    return pytest.approx(x, rel=REL, abs=1e-18)


def check_split(res):
    np.testing.assert_allclose(res.compute_s + res.comm_s + res.wait_s, res.finish_s, rtol=1e-12, atol=1e-18)
    assert res.critical_rank_s.sum() == approx(res.makespan_s)


# ------------------------------------------------------------------ closed forms

@pytest.mark.parametrize("m", [0, 1000, 65536])
def test_pingpong_eager(m):
    n = 5
    t = Trace(2)
    for _ in range(n):
        t.add(0, Op.SEND, dest=1, send_bytes=m)
        t.add(0, Op.RECV, source=1, recv_bytes=m)
        t.add(1, Op.RECV, source=0, recv_bytes=m)
        t.add(1, Op.SEND, dest=0, send_bytes=m)
    res = t.run()
    assert res.finish_s[0] == approx(2 * n * (OS + L + m / B + OR))
    # rank 1 ends with an eager send: o_s after its last receive
    assert res.finish_s[1] == approx((2 * n - 1) * (OS + L + m / B + OR) + OS)
    check_split(res)


def test_pingpong_rendezvous_and_segments():
    """Above the eager threshold each one-way trip pays the RTS/CTS round trip (2 W(0))."""
    n, m = 3, 200_000
    segs = (LinkSegment(min_bytes=0, max_bytes=4096, latency_s=1e-6, bandwidth_bytes_per_s=2e9),
            LinkSegment(min_bytes=4096, max_bytes=1e12, latency_s=3e-6, bandwidth_bytes_per_s=1e9))
    t = Trace(2)
    for _ in range(n):
        t.add(0, Op.SEND, dest=1, send_bytes=m)
        t.add(0, Op.RECV, source=1, recv_bytes=m)
        t.add(1, Op.RECV, source=0, recv_bytes=m)
        t.add(1, Op.SEND, dest=0, send_bytes=m)
    net = net1(segments=segs)
    w0, wm = 1e-6, 3e-6 + m / 1e9
    res = t.run(net)
    assert res.finish_s[0] == approx(2 * n * (OS + 2 * w0 + wm + OR))
    res = t.run(net, rendezvous_handshake=False)
    assert res.finish_s[0] == approx(2 * n * (OS + wm + OR))


def test_eager_vs_rendezvous_late_receiver():
    """A late receiver: an eager sender leaves after o_s; a rendezvous sender waits for it."""
    x, m = 1e-3, 1000
    for eager, expect0 in ((65536, OS), (100, x + L + L + m / B)):
        t = Trace(2)
        t.add(0, Op.SEND, dest=1, send_bytes=m)
        t.add(1, Op.RECV, source=0, recv_bytes=m, burst_s=x)
        res = t.run(net1(eager=eager))
        assert res.finish_s[0] == approx(expect0)
        arrival = OS + L + m / B if eager > m else expect0
        assert res.finish_s[1] == approx(max(x, arrival) + OR)
        check_split(res)
    # rendezvous: the sender's time past the receiver's post is communication, before it waiting
    assert res.wait_s[0] == approx(x)
    # Ssend is rendezvous whatever the size; Bsend eager whatever the size
    t = Trace(2)
    t.add(0, Op.SSEND, dest=1, send_bytes=10)
    t.add(1, Op.RECV, source=0, recv_bytes=10, burst_s=x)
    assert t.run().finish_s[0] == approx(x + L + L + 10 / B)
    t = Trace(2)
    t.add(0, Op.BSEND, dest=1, send_bytes=10**6)
    t.add(1, Op.RECV, source=0, recv_bytes=10**6, burst_s=x)
    assert t.run().finish_s[0] == approx(OS)


def test_eager_not_buffered_starts_at_receive():
    """SimGrid's default: even small data moves only once the receive is posted."""
    x, m = 1e-3, 1000
    t = Trace(2)
    t.add(0, Op.SEND, dest=1, send_bytes=m)
    t.add(1, Op.RECV, source=0, recv_bytes=m, burst_s=x)
    res = t.run(eager_buffered=False)
    assert res.finish_s[1] == approx(x + L + m / B + OR)


def test_ring_shift_homogeneous_and_mixed_placement():
    p, k, m = 6, 4, 4096
    t = Trace(p)
    for _ in range(k):
        for r in range(p):
            t.add(r, Op.SENDRECV, dest=(r + 1) % p, source=(r - 1) % p, send_bytes=m, recv_bytes=m)
    res = t.run()
    np.testing.assert_allclose(res.finish_s, k * (OS + L + m / B + OR), rtol=REL)
    check_split(res)
    # one round on two nodes: 0,1,2 | 3,4,5; intra and inter links differ
    intra = link(lat=0.5e-6, bw=5e9, os_=1e-7, or_=1e-7)
    inter = link(lat=2e-6, bw=1e9, os_=4e-7, or_=5e-7)
    t = Trace(p)
    for r in range(p):
        t.add(r, Op.SENDRECV, dest=(r + 1) % p, source=(r - 1) % p, send_bytes=m, recv_bytes=m)
    place = np.array([0, 0, 0, 1, 1, 1])
    res = t.run(NetworkModel(intra_node=intra, inter_node=inter), place)
    for r in range(p):
        src = (r - 1) % p
        lk = intra if place[src] == place[r] else inter
        recv_done = lk.send_overhead_s + lk.latency_s + m / lk.bandwidth_bytes_per_s + lk.recv_overhead_s
        sk = intra if place[(r + 1) % p] == place[r] else inter
        assert res.finish_s[r] == approx(max(sk.send_overhead_s, recv_done)), r


def test_nonblocking_halo_waitall():
    """Irecv/Isend/Waitall ring in both directions, one step: each rank ends at o_s*2 + W + o_r
    (its second isend posts at o_s; the message from the neighbour's second isend arrives at
    2 o_s + W)."""
    p, m = 4, 2048
    t = Trace(p)
    for r in range(p):
        a = t.irecv(r, (r - 1) % p, m, tag=1)
        b = t.irecv(r, (r + 1) % p, m, tag=2)
        c = t.isend(r, (r + 1) % p, m, tag=1)
        d = t.isend(r, (r - 1) % p, m, tag=2)
        t.waitall(r, [a, b, c, d])
    res = t.run()
    np.testing.assert_allclose(res.finish_s, 2 * OS + L + m / B + OR, rtol=REL)
    check_split(res)


def test_waitany_and_tests_use_completed_flags():
    """Only requests the trace says completed count; an unsuccessful test costs nothing."""
    x, m = 1e-3, 100
    t = Trace(3)
    a = t.irecv(0, 1, m)
    b = t.irecv(0, 2, m)
    t.waitall(0, [a, b], op=Op.TESTSOME, completed=[0, 0])     # nothing yet
    t.waitall(0, [a, b], op=Op.WAITANY, completed=[1, 0])      # the fast one
    t.waitall(0, [b], op=Op.WAIT)
    t.add(1, Op.SEND, dest=0, send_bytes=m)
    t.add(2, Op.SEND, dest=0, send_bytes=m, burst_s=x)
    t.timeline = True
    res = replay(t.events(), None, None, net1(), ReplayOptions(timeline=True), requests=t.requests(), n_ranks=3)
    ends = res.end_s[res.event_rank == 0]
    assert ends[2] == approx(0.0)
    assert ends[3] == approx(OS + L + m / B + OR)
    assert ends[4] == approx(x + OS + L + m / B + OR)
    assert list(res.event_seq[res.event_rank == 0]) == [0, 1, 2, 3, 4]


def test_any_source_matches_status_source_and_tags_in_order():
    """Receives match in posting order per (source, tag); a wildcard tag matches in send order."""
    t = Trace(3)
    t.add(1, Op.SEND, dest=0, send_bytes=10, send_tag=5)
    t.add(1, Op.SEND, dest=0, send_bytes=20, send_tag=6, burst_s=1e-3)
    t.add(0, Op.RECV, source=1, recv_bytes=20, recv_tag=6)  # the later message (tag 6)
    t.add(0, Op.RECV, source=1, recv_bytes=10, recv_tag=5)
    t.add(2, Op.SEND, dest=0, send_bytes=30, send_tag=0)
    t.add(0, Op.RECV, source=2, recv_bytes=30, recv_tag=-1)  # MPI_ANY_TAG
    res = t.run()
    w = lambda m: L + m / B  # noqa: E731
    r0 = OS + 1e-3 + OS + w(20) + OR      # waits for tag 6, sent 1 ms after the first send
    r1 = max(r0, OS + w(10)) + OR          # tag 5 arrived long ago
    r2 = max(r1, OS + w(30)) + OR
    assert res.finish_s[0] == approx(r2)
    assert res.n_messages == 3
    t = Trace(2)
    t.add(0, Op.RECV, source=-2, recv_bytes=8)
    t.add(1, Op.SEND, dest=0, send_bytes=8)
    with pytest.raises(ReplayError, match=r"rank 0 RECV \(seq 0\): receive from MPI_ANY_SOURCE"):
        t.run()


def test_bad_calls_are_named_in_one_line():
    """The preparation pass stops at the first bad call and the error names it (rank, op, seq)."""
    def err(build, run_kw=None):
        t = Trace(2)
        build(t)
        with pytest.raises((ReplayError, InputError)) as e:
            replay(t.events(), None, None, net1(), ReplayOptions(), n_ranks=2,
                   **(run_kw if run_kw is not None else {"requests": t.requests()}))
        assert "\n" not in str(e.value)
        return str(e.value)

    def bad_dest(t):
        t.add(0, Op.SEND, dest=1, send_bytes=8)
        t.add(0, Op.SEND, dest=5, send_bytes=8)
    assert err(bad_dest) == "rank 0 SEND (seq 1): destination 5 is not a rank of this trace"

    def bad_source(t):
        t.add(1, Op.IRECV, source=-7, recv_bytes=8, request=1)
    assert err(bad_source) == "rank 1 IRECV (seq 0): source -7 is not a rank of this trace"

    def bad_burst(t):
        t.add(0, Op.BARRIER, burst_s=-1e-6)
    assert err(bad_burst) == "burst_s must be finite and >= 0"

    def wait(t):
        h = t.irecv(1, 0, 8)
        t.add(0, Op.SEND, dest=1, send_bytes=8)
        t.waitall(1, [h])
    assert err(wait, {}) == "events have wait/test calls but no requests table was given"

    def rows_outside(t):
        wait(t)
        t.rows[-1]["req_offset"] = 3
    assert err(rows_outside) == "rank 1 WAITALL (seq 1): req_offset/n_requests point outside the requests table"

    def rows_of_rank0(t):
        wait(t)
        t.reqs[-1]["rank"] = 0
    assert err(rows_of_rank0) == "rank 1 WAITALL (seq 1): its requests rows belong to another rank"


def binomial_bcast_expected(p, root, m, os_=OS, or_=OR, w=None):
    w = L + m / B if w is None else w
    done = {0: 0.0}
    out = {}
    for vr in range(p):
        tcur = done[vr]
        mask = 1
        while mask < p and not vr & mask:
            mask <<= 1
        mask >>= 1
        while mask > 0:
            c = vr + mask
            if c < p:
                done[c] = tcur + os_ + w + or_
                tcur += os_
            mask >>= 1
        out[(vr + root) % p] = tcur
    return np.array([out[r] for r in range(p)])


@pytest.mark.parametrize("p,root", [(8, 0), (8, 3), (5, 2), (2, 1)])
def test_binomial_broadcast(p, root):
    m = 1024
    t = Trace(p)
    t.coll(Op.BCAST, m, root=root)
    res = t.run()
    np.testing.assert_allclose(res.finish_s, binomial_bcast_expected(p, root, m), rtol=REL)
    # pure latency: the deepest leaf is max popcount(1..P-1) hops away (log2 P for a power of two)
    res = t.run(net1(os_=0, or_=0))
    depth = max(bin(v).count("1") for v in range(1, p))
    assert res.makespan_s == approx(depth * (L + m / B))
    check_split(res)


def test_allreduce_recursive_doubling_and_rabenseifner():
    c = OS + L + OR
    # MPICH 4/5: recursive doubling up to 8 B or while count (8-byte elements) < pof2
    for m in (8, 24):
        t = Trace(4)
        t.coll(Op.ALLREDUCE, m)
        np.testing.assert_allclose(t.run().finish_s, 2 * (c + m / B), rtol=REL)
    # 64 B on 4 ranks (count 8 >= 4): Rabenseifner, exchanges of 32, 16, 16, 32 B
    t = Trace(4)
    t.coll(Op.ALLREDUCE, 64)
    np.testing.assert_allclose(t.run().finish_s, 4 * c + 96 / B, rtol=REL)
    # 3 ranks: fold rank 0 into 1, exchange 1<->2, unfold back to 0
    t = Trace(3)
    t.coll(Op.ALLREDUCE, 8)
    res = t.run()
    w = L + 8 / B
    t1 = OS + w + OR                       # rank 1 after the fold
    t1b = max(t1 + OS, max(t1, OS + w) + OR)   # rank 1 after the exchange with rank 2 (posted at 0)
    t2 = max(OS, max(0.0, t1 + OS + w) + OR)
    expect = [t1b + OS + w + OR, t1b + OS, t2]
    np.testing.assert_allclose(res.finish_s, expect, rtol=REL)
    # large: Rabenseifner, all rendezvous (threshold 100 bytes): 4 exchange rounds of m/2, m/4, m/4, m/2
    m = 1 << 20
    t = Trace(4)
    t.coll(Op.ALLREDUCE, m)
    res = t.run(net1(eager=100))
    np.testing.assert_allclose(res.finish_s, 4 * (OS + 3 * L + OR) + 1.5 * m / B, rtol=REL)


def test_barrier_dissemination_and_measured_collectives():
    p = 5
    t = Trace(p)
    t.coll(Op.BARRIER, burst=[0, 0, 0, 0, 1e-3])
    res = t.run()
    # 3 rounds; the late rank 4 reaches everyone within the rounds
    assert res.makespan_s > 1e-3 + (OS + L + OR)
    assert res.makespan_s <= 1e-3 + 3 * (OS + L + OR) * (1 + REL)
    coll = (CollectiveCost(op="barrier", msg_bytes=0, n_ranks=5, time_s=7e-6),
            CollectiveCost(op="allreduce", msg_bytes=8, n_ranks=5, time_s=1e-5),
            CollectiveCost(op="allreduce", msg_bytes=1024, n_ranks=5, time_s=3e-5))
    net = dataclasses.replace(net1(), collectives=coll)
    res = t.run(net, measured_collectives=True)
    np.testing.assert_allclose(res.finish_s, 1e-3 + 7e-6, rtol=REL)
    assert res.wait_s[0] == approx(1e-3)
    t = Trace(p)
    t.coll(Op.ALLREDUCE, 516)
    res = t.run(net, measured_collectives=True)
    np.testing.assert_allclose(res.finish_s, 2e-5, rtol=REL)   # linear between 8 and 1024 bytes
    t = Trace(p)
    t.coll(Op.ALLREDUCE, 4096)   # outside the measured sizes: the algorithm prices it
    assert t.run(net, measured_collectives=True).makespan_s == approx(t.run(net).makespan_s)


def test_collectives_all_ops_run_and_are_symmetric_in_time():
    """Every collective runs; a larger message never makes it faster."""
    p = 6
    for op in (Op.BARRIER, Op.BCAST, Op.REDUCE, Op.ALLREDUCE, Op.GATHER, Op.SCATTER, Op.ALLGATHER, Op.ALLTOALL,
               Op.REDUCE_SCATTER, Op.SCAN, Op.EXSCAN, Op.ALLGATHERV, Op.ALLTOALLV, Op.GATHERV, Op.SCATTERV):
        prev = 0.0
        for m in (8, 4096, 1 << 20):
            t = Trace(p)
            t.coll(op, m, root=0)
            res = t.run()
            check_split(res)
            assert res.makespan_s >= prev * (1 - REL), (op, m)
            prev = res.makespan_s


def test_nonblocking_collective_overlaps_compute():
    p, x = 4, 1e-3
    t = Trace(p)
    for r in range(p):
        t.add(r, Op.IALLREDUCE, send_bytes=64, recv_bytes=64, request=1)
        t.waitall(r, [1], op=Op.WAIT, burst_s=x)
    res = t.run()
    np.testing.assert_allclose(res.finish_s, x, rtol=REL)   # the allreduce hid behind the compute
    np.testing.assert_allclose(res.compute_s, x)


def test_subcommunicator_collective():
    p = 4
    t = Trace(p)
    comms = pd.DataFrame({"comm": [0, 0, 0, 0, 1, 1], "local_rank": [0, 1, 2, 3, 0, 1],
                          "world_rank": [0, 1, 2, 3, 3, 1]})
    for r in (1, 3):
        t.add(r, Op.BCAST, comm=1, root=3, send_bytes=100 if r == 3 else 0, recv_bytes=0 if r == 3 else 100)
    res = replay(t.events(), None, None, net1(), requests=t.requests(), comms=comms, n_ranks=p)
    assert res.finish_s[1] == approx(OS + L + 100 / B + OR)
    assert res.finish_s[3] == approx(OS)
    assert res.finish_s[0] == 0.0


# ------------------------------------------------------------------ properties

def random_trace(rng, p, n_steps):
    t = Trace(p)
    for _ in range(n_steps):
        kind = rng.integers(0, 4)
        burst = rng.uniform(0, 1e-5, p)
        if kind == 0:   # random permutation exchange with isend/irecv
            perm = rng.permutation(p)
            m = int(rng.choice([8, 1000, 100_000]))
            for r in range(p):
                a = t.irecv(r, int(np.flatnonzero(perm == r)[0]), m, burst_s=burst[r])
                b = t.isend(r, int(perm[r]), m)
                t.waitall(r, [a, b])
        elif kind == 1:
            sh = int(rng.integers(1, p))
            m = int(rng.choice([16, 70_000]))
            for r in range(p):
                t.add(r, Op.SENDRECV, dest=(r + sh) % p, source=(r - sh) % p, send_bytes=m, recv_bytes=m,
                      burst_s=burst[r])
        elif kind == 2:
            t.coll(int(rng.choice([Op.ALLREDUCE, Op.BCAST, Op.ALLTOALL, Op.BARRIER])), int(rng.choice([8, 50_000])),
                   root=int(rng.integers(0, p)), burst=burst)
        else:   # pairs with blocking send/recv in safe order
            for r in range(0, p - 1, 2):
                m = int(rng.choice([8, 200_000]))
                t.add(r, Op.SEND, dest=r + 1, send_bytes=m, burst_s=burst[r])
                t.add(r + 1, Op.RECV, source=r, recv_bytes=m, burst_s=burst[r + 1])
    return t


def test_conservation_and_monotonicity_random_traces():
    rng = np.random.default_rng(7)
    fast = NetworkModel(intra_node=link(lat=0.5e-6, bw=8e9), inter_node=link(lat=2e-6, bw=2e9))
    slower = [NetworkModel(intra_node=link(lat=0.5e-6, bw=8e9), inter_node=link(lat=4e-6, bw=2e9)),
              NetworkModel(intra_node=link(lat=0.5e-6, bw=4e9), inter_node=link(lat=2e-6, bw=1e9)),
              NetworkModel(intra_node=link(lat=0.5e-6, bw=8e9, os_=1e-6), inter_node=link(lat=2e-6, bw=2e9,
                                                                                          or_=2e-6))]
    for trial in range(12):
        p = int(rng.integers(2, 9))
        t = random_trace(rng, p, 6)
        place = np.arange(p) // 2
        res = t.run(fast, place)
        check_split(res)
        ev = t.events()
        sent = ev.send_bytes[ev.op.isin([Op.ISEND, Op.SEND, Op.SENDRECV])].sum()
        recv = ev.recv_bytes[ev.op.isin([Op.IRECV, Op.RECV, Op.SENDRECV])].sum()
        assert res.sent_bytes.sum() == sent == recv == res.received_bytes.sum()
        assert res.n_messages == int(ev.op.isin([Op.ISEND, Op.SEND, Op.SENDRECV]).sum())
        for slow in slower:
            rs = t.run(slow, place)
            assert np.all(rs.finish_s >= res.finish_s * (1 - 1e-12)), trial
        # the order of processing does not change an uncontended replay
        topo = star(p, bandwidth_bytes_per_s=1e30)
        rc = t.run(fast, np.arange(p), contention=True, topology=topo)
        rn = t.run(fast, np.arange(p))
        np.testing.assert_allclose(rc.finish_s, rn.finish_s, rtol=1e-12)


# ------------------------------------------------------------------ shaped links (token buckets)

def shaped_net(rate, burst, header=None, **kw):
    inter = link(shaper_rate_bytes_per_s=rate, shaper_burst_bytes=burst, shaper_header_bytes=header, **kw)
    return NetworkModel(intra_node=link(), inter_node=inter)


def test_shaper_stream_leaves_at_the_rate_after_the_bucket():
    """K eager messages posted at once (o_s = 0): the bucket passes b bytes at once, the rest at
    the rate r, so the last one leaves at (K m - b) / r and arrives L later."""
    k, m, r, b = 10, 10_000, 1e6, 25_000
    t = Trace(2)
    hs = [t.isend(0, 1, m) for _ in range(k)]
    t.waitall(0, hs)
    hr = [t.irecv(1, 0, m) for _ in range(k)]
    t.waitall(1, hr)
    res = t.run(shaped_net(r, b, os_=0.0), np.arange(2))
    assert res.finish_s[1] == approx((k * m - b) / r + L + OR)
    # unshaped, the same stream is k times the line time at most
    free = t.run(net1(os_=0.0), np.arange(2))
    assert free.finish_s[1] == approx(L + m / B + OR)
    # within one node the shaper does not apply (the intra-node link keeps o_s = OS per isend)
    assert t.run(shaped_net(r, b, os_=0.0), np.zeros(2, np.int64)).finish_s[1] == approx(k * OS + L + m / B + OR)


def _pingpong_trace(n, m, gap_s=0.0):
    t = Trace(2)
    for _ in range(n):
        t.add(0, Op.SEND, dest=1, send_bytes=m, burst_s=gap_s)
        t.add(0, Op.RECV, source=1, recv_bytes=m)
        t.add(1, Op.RECV, source=0, recv_bytes=m)
        t.add(1, Op.SEND, dest=0, send_bytes=m)
    return t


def _bucket_pingpong(n, m, r, b, gap_s=0.0):
    """Reference: the ping-pong above, step by step, with one token bucket per sender."""
    buckets = [[b, 0.0], [b, 0.0]]  # tokens, last departure

    def arrive(q, ready):
        tok, last = buckets[q]
        t0 = max(ready, last)
        tok = min(b, tok + (t0 - last) * r)
        dep = t0 if m <= tok else t0 + (m - tok) / r
        buckets[q] = [tok - m if m <= tok else 0.0, dep]
        return t0 + max(L + m / B, dep - t0 + L)

    c0 = c1 = 0.0
    for _ in range(n):
        c0 += gap_s
        a = arrive(0, c0 + OS)
        c0 += OS
        c1 = max(c1, a) + OR
        a = arrive(1, c1 + OS)
        c1 += OS
        c0 = max(c0, a) + OR
    return c0, c1


def test_shaper_pingpong_settles_at_half_the_rate():
    """A ping-pong never idles: each side's bucket refills only while the other side sends, so
    in the steady state each round trip takes m / r (one-way m / 2r, as measured through a tc
    tbf), whatever the latency, once the bucket is drained."""
    n, m, r, b = 200, 20_000, 1e6, 30_000
    t = _pingpong_trace(n, m)
    net = shaped_net(r, b)
    res = t.run(net, np.arange(2))
    ref0, ref1 = _bucket_pingpong(n, m, r, b)
    assert res.finish_s[0] == approx(ref0)
    assert res.finish_s[1] == approx(ref1)
    tail = _pingpong_trace(n + 10, m).run(net, np.arange(2)).finish_s[0] - res.finish_s[0]
    assert tail == approx(10 * m / r)
    check_split(res)


@pytest.mark.parametrize("header", [None, 80.0])
@pytest.mark.parametrize("m", [0, 100, 5_000, 20_000, 59_000, 61_000, 200_000])
def test_shaper_pingpong_closed_form_is_the_replays_steady_state(m, header):
    """LinkModel.pingpong_one_way_s (what pmac show plots against the probe's curve) equals the
    replay's steady state: max(line, n / 2r, W(0) + o + (n - b) / r), n = m + header tokens."""
    r, b = 1e6, 30_000
    net = shaped_net(r, b, header)
    n = 2000  # 100 B messages drain the 30 kB bucket by ~97 B a round trip: 309 round trips
    steady = (_pingpong_trace(n + 100, m).run(net, np.arange(2)).finish_s[0]
              - _pingpong_trace(n, m).run(net, np.arange(2)).finish_s[0]) / 200
    assert float(net.inter_node.pingpong_one_way_s(m)) == approx(steady)
    hs = 2 * L if m > 65536 else 0.0   # rendezvous: request-to-send / clear-to-send
    assert float(net.intra_node.pingpong_one_way_s(m)) == approx(OS + L + m / B + OR + hs)
    free = _pingpong_trace(3, m).run(net1(), np.arange(2)).finish_s[0] / 6
    assert float(net1().inter_node.pingpong_one_way_s(m)) == approx(free)


def test_shaper_header_tokens_make_empty_messages_cost():
    """Each message also takes its header tokens: K empty messages posted at once (o_s = 0)
    leave the bucket empty after b / H of them; the last leaves at (K H - b) / r."""
    k, h, r, b = 100, 80.0, 1e6, 2_000
    t = Trace(2)
    hs = [t.isend(0, 1, 0) for _ in range(k)]
    t.waitall(0, hs)
    hr = [t.irecv(1, 0, 0) for _ in range(k)]
    t.waitall(1, hr)
    res = t.run(shaped_net(r, b, h, os_=0.0), np.arange(2))
    assert res.finish_s[1] == approx((k * h - b) / r + L + OR)


def test_shaper_sporadic_messages_pass_at_line_speed():
    """Between messages longer than b / r of compute: the bucket is full again each time, so the
    ping-pong costs exactly the unshaped closed form plus the compute."""
    n, m, r, b = 20, 20_000, 1e6, 30_000
    gap = 2 * b / r
    t = _pingpong_trace(n, m, gap_s=gap)
    res = t.run(shaped_net(r, b), np.arange(2))
    assert res.finish_s[0] == approx(n * (gap + 2 * (OS + L + m / B + OR)))
    assert res.finish_s[0] == approx(_bucket_pingpong(n, m, r, b, gap_s=gap)[0])


def test_shaper_charges_each_message_of_a_collective_once():
    """A two-rank allgather (recursive doubling) is one exchange: each rank's m bytes leave its
    bucket once (the pair was once priced from both ends, draining the buckets twice)."""
    m, r, b = 20_000, 1e6, 5_000
    t = Trace(2)
    t.coll(Op.ALLGATHER, m)
    res = t.run(shaped_net(r, b), np.arange(2))
    np.testing.assert_allclose(res.finish_s, OS + (m - b) / r + L + OR, rtol=REL)


def test_shaper_monotone_in_rate_and_bucket():
    rng = np.random.default_rng(11)
    for trial in range(6):
        p = int(rng.integers(2, 7))
        t = random_trace(rng, p, 6)
        place = np.arange(p) % 2
        base = t.run(shaped_net(2e7, 50_000), place)
        check_split(base)
        assert np.all(t.run(net1(), place).finish_s <= base.finish_s * (1 + 1e-12)), trial
        for slower in (shaped_net(1e7, 50_000), shaped_net(2e7, 10_000)):
            assert np.all(t.run(slower, place).finish_s >= base.finish_s * (1 - 1e-12)), trial


def test_shaper_fields_round_trip_and_intra_node_shaper_refused(tmp_path):
    from pmac.profile import MachineProfile, load_profile, save_profile

    prof = MachineProfile(name="shaped", network=shaped_net(2.5e6, 5000.0))
    save_profile(prof, tmp_path / "shaped.yaml")
    back = load_profile(tmp_path / "shaped.yaml")
    assert back.network.inter_node.shaper_rate_bytes_per_s == 2.5e6
    assert back.network.inter_node.shaper_burst_bytes == 5000.0
    assert back.network.inter_node.shaped and not back.network.intra_node.shaped
    with pytest.raises(ValueError, match="go together"):
        link(shaper_rate_bytes_per_s=1e6)
    bad = NetworkModel(intra_node=link(shaper_rate_bytes_per_s=1e6, shaper_burst_bytes=0.0), inter_node=link())
    with pytest.raises(InputError, match="intra_node link has a shaper"):
        _pingpong_trace(2, 10).run(bad, np.arange(2))


# ------------------------------------------------------------------ deadlocks

def test_deadlock_names_ranks_and_calls():
    t = Trace(2)
    t.add(0, Op.RECV, source=1, recv_bytes=8)
    t.add(0, Op.SEND, dest=1, send_bytes=8)
    t.add(1, Op.RECV, source=0, recv_bytes=8)
    t.add(1, Op.SEND, dest=0, send_bytes=8)
    with pytest.raises(ReplayError) as ei:
        t.run()
    assert str(ei.value) == ("deadlock: 2 rank(s) blocked: rank 0 in RECV (seq 0) waiting for rank 1 SEND (seq 1); "
                             "rank 1 in RECV (seq 0) waiting for rank 0 SEND (seq 1)")
    # large messages both sending first: rendezvous deadlock (eager would pass)
    t = Trace(2)
    for r in (0, 1):
        t.add(r, Op.SEND, dest=1 - r, send_bytes=10**6)
        t.add(r, Op.RECV, source=1 - r, recv_bytes=10**6)
    with pytest.raises(ReplayError, match=r"rank 0 in SEND \(seq 0\) waiting for rank 1 RECV \(seq 1\)"):
        t.run()
    assert t.run(net1(eager=10**7)).makespan_s > 0
    # a receive nobody sends to, and a collective one rank skips
    t = Trace(3)
    t.add(0, Op.RECV, source=2, recv_bytes=8)
    t.add(1, Op.BARRIER)
    t.add(2, Op.BARRIER)
    with pytest.raises(ReplayError) as ei:
        t.run()
    msg = str(ei.value)
    assert "rank 0 in RECV (seq 0): no matching send from rank 2" in msg
    assert "rank 1 in BARRIER (seq 0) waiting for 1 member(s) of the collective" in msg


def test_collective_mismatch():
    t = Trace(2)
    t.add(0, Op.BCAST, root=0, send_bytes=8)
    t.add(1, Op.REDUCE, root=0, send_bytes=8)
    with pytest.raises(ReplayError, match="collective mismatch on communicator 0"):
        t.run()


# ------------------------------------------------------------------ contention and topologies

def test_two_flows_on_one_link_take_longer():
    m = 10**6
    hb = 1e9   # host link bandwidth (the shared link into host 2)
    topo = star(3, bandwidth_bytes_per_s=hb, latency_s=0.0)

    def trace(senders):
        t = Trace(3)
        hs = [t.irecv(2, s, m) for s in senders]
        t.waitall(2, hs)
        for s in senders:
            t.add(s, Op.SEND, dest=2, send_bytes=m)
        return t

    net = net1(eager=10**7)
    one = trace([0]).run(net, np.arange(3), contention=True, topology=topo)
    assert one.finish_s[2] == approx(OS + L + m / B + OR)   # alone: the uncontended time
    two = trace([0, 1]).run(net, np.arange(3), contention=True, topology=topo)
    assert two.finish_s[2] == approx(OS + m / hb + L + m / B + OR)   # the second waits for the first
    free = trace([0, 1]).run(net, np.arange(3))
    assert free.finish_s[2] == approx(OS + L + m / B + OR)
    # the same two flows into different hosts do not interfere
    t = Trace(4)
    t.add(0, Op.SEND, dest=2, send_bytes=m)
    t.add(1, Op.SEND, dest=3, send_bytes=m)
    t.add(2, Op.RECV, source=0, recv_bytes=m)
    t.add(3, Op.RECV, source=1, recv_bytes=m)
    res = t.run(net, np.arange(4), contention=True, topology=star(4, bandwidth_bytes_per_s=hb))
    np.testing.assert_allclose(res.finish_s[2:], OS + L + m / B + OR, rtol=REL)


def test_route_timing_uses_route_latency_and_bottleneck():
    topo = star(2, bandwidth_bytes_per_s=1e8, latency_s=5e-6)
    t = Trace(2)
    t.add(0, Op.SEND, dest=1, send_bytes=1000)
    t.add(1, Op.RECV, source=0, recv_bytes=1000)
    res = t.run(net1(), np.arange(2), route_timing=True, topology=topo)
    assert res.finish_s[1] == approx(OS + 2 * 5e-6 + 1000 / 1e8 + OR)


def test_topology_generators():
    ft = fat_tree(64, hosts_per_leaf=16, n_spines=4, bandwidth_bytes_per_s=1e10)
    rt = routes(ft)
    hops = np.diff(rt.route_off).reshape(64, 64)
    assert hops[0, 1] == 2 and hops[0, 16] == 4 and hops[0, 0] == 0
    tor = torus((4, 4), bandwidth_bytes_per_s=1e10)
    hops = np.diff(routes(tor).route_off).reshape(16, 16)
    assert hops.max() == 2 + 4   # host links + at most 2 hops per dimension
    df = dragonfly(3, 2, 2, bandwidth_bytes_per_s=1e10)
    assert df.n_hosts == 12
    assert np.diff(routes(df).route_off).max() <= 2 + 3


@pytest.mark.requires("shared")
def test_simgrid_platforms_import(shared_dir):
    plat = shared_dir / "data/simgrid/examples/platforms"
    small = from_simgrid(plat / "small_platform.xml")
    assert small.hosts[:3] == ("Tremblay", "Jupiter", "Fafard") and small.n_hosts == 7
    rt = routes(small)
    k = 0 * 7 + 1  # Tremblay -> Jupiter: links 9 (7.20975MBps, 1.461517ms)
    assert rt.route_lat_s[k] == approx(1.461517e-3)
    assert 1 / rt.route_inv_bw[k] == approx(7.20975e6)
    ft = from_simgrid(plat / "cluster_fat_tree.xml")
    assert ft.n_hosts == 16 and ft.hosts[0] == "node-0.simgrid.org"
    tor = from_simgrid(plat / "cluster_torus.xml")
    assert tor.n_hosts == 12


def test_startall_replays_as_the_isend_irecv_of_its_requests():
    """Send_init/Recv_init once, then Startall over both + Waitall per iteration: the same times as
    Irecv + Isend + Waitall; the timeline keeps one row per call of the trace."""
    m = 70000  # above the eager threshold of net1(): the rendezvous needs the receive posted

    def build(persistent):
        t = Trace(2)
        if persistent:
            for r in (0, 1):
                t.add(r, Op.SEND_INIT, dest=1 - r, send_bytes=m, send_tag=3, request=1)
                t.add(r, Op.RECV_INIT, source=1 - r, recv_bytes=m, recv_tag=3, request=2)
        for it in range(4):
            for r in (0, 1):
                b = 1e-6 * (r + 1) * (it + 1)
                if persistent:
                    t.waitall(r, [2, 1], op=Op.STARTALL, burst_s=b)
                else:
                    t.add(r, Op.IRECV, source=1 - r, recv_bytes=m, recv_tag=3, request=2, burst_s=b)
                    t.add(r, Op.ISEND, dest=1 - r, send_bytes=m, send_tag=3, request=1)
                t.waitall(r, [2, 1])
        return t

    ref = build(False).run()
    t = build(True)
    res = replay(t.events(), None, None, net1(), ReplayOptions(timeline=True), requests=t.requests(), n_ranks=2)
    assert res.n_messages == ref.n_messages == 8
    assert res.makespan_s == approx(ref.makespan_s) and res.makespan_s > 4 * m / B
    np.testing.assert_allclose(res.finish_s, ref.finish_s, rtol=REL)
    np.testing.assert_allclose(res.wait_s, ref.wait_s, rtol=REL)
    check_split(res)
    assert res.n_events == len(t.events()) == 2 * (2 + 4 * 2)
    sa = res.event_op == Op.STARTALL
    assert sa.sum() == 8 and np.all(res.end_s[sa] >= res.start_s[sa])
    assert list(res.event_seq[res.event_rank == 0]) == list(range(10))


def test_a_persistent_any_tag_receive_matches_sends_of_any_tag():
    """A Recv_init with MPI_ANY_TAG passes the wildcard to its Starts (the trace's only negative
    receive tag): they match sends of other tags, as an Irecv with MPI_ANY_TAG does."""
    def build(persistent):
        t = Trace(2)
        if persistent:
            t.add(1, Op.RECV_INIT, source=0, recv_bytes=64, recv_tag=-1, request=2)
        for it in range(3):
            t.add(0, Op.SEND, dest=1, send_bytes=64, send_tag=it + 5, burst_s=1e-6)
            if persistent:
                t.add(1, Op.START, request=2)
            else:
                t.add(1, Op.IRECV, source=0, recv_bytes=64, recv_tag=-1, request=2)
            t.waitall(1, [2], op=Op.WAIT)
        return t

    ref = build(False).run()
    t = build(True)
    res = replay(t.events(), None, None, net1(), ReplayOptions(), requests=t.requests(), n_ranks=2)
    assert res.n_messages == ref.n_messages == 3
    np.testing.assert_allclose(res.finish_s, ref.finish_s, rtol=REL)
    assert res.finish_s[1] == approx(3 * (1e-6 + OS) + L + 64 / B + OR)  # the third eager send


def test_persistent_requests_replay_as_their_isend_irecv():
    """Send_init/Recv_init once, then Start + Wait per iteration: the same times as Isend/Irecv +
    Wait with those parameters; the caller's table is left as it was."""
    def build(persistent):
        t = Trace(2)
        m = 4096
        if persistent:
            for r in (0, 1):
                t.add(r, Op.SEND_INIT, dest=1 - r, send_bytes=m, send_tag=7, request=1)
                t.add(r, Op.RECV_INIT, source=1 - r, recv_bytes=m, recv_tag=7, request=2)
        for it in range(3):
            for r in (0, 1):
                if persistent:
                    t.add(r, Op.START, request=2, burst_s=1e-6 * (r + 1))
                    t.add(r, Op.START, request=1)
                    t.waitall(r, [2, 1])
                else:
                    t.add(r, Op.IRECV, source=1 - r, recv_bytes=m, recv_tag=7, request=2, burst_s=1e-6 * (r + 1))
                    t.add(r, Op.ISEND, dest=1 - r, send_bytes=m, send_tag=7, request=1)
                    t.waitall(r, [2, 1])
        return t

    ref = build(False).run()
    t = build(True)
    ev = t.events()
    before = ev.copy()
    res = replay(ev, None, None, net1(), ReplayOptions(), requests=t.requests(), n_ranks=2)
    assert res.makespan_s == approx(ref.makespan_s) and res.makespan_s > 3 * (L + 4096 / B)
    np.testing.assert_allclose(res.finish_s, ref.finish_s, rtol=REL)
    np.testing.assert_allclose(res.comm_s, ref.comm_s, rtol=REL)
    assert ev.equals(before)
    check_split(res)


def test_preparation_tables_that_fill_up_are_retried_with_the_same_result(monkeypatch):
    """The preparation pass uses fixed-size hash tables (matching, request handles) and reports
    which one filled up; with_retry doubles that one: starting from 2 slots each gives the same
    partners, waits and totals as the default sizes."""
    from pmac import replay as RP
    from pmac import replay_passes as P

    rng = np.random.default_rng(3)
    t = random_trace(rng, 7, 12)
    ev, rq = t.events(), t.requests()
    codes = []
    real = P.prepare_events

    def spy(*a):
        out = real(*a)
        codes.append(out[-2])
        return out

    monkeypatch.setattr(P, "prepare_events", spy)
    small = RP._prepare(ev, None, None, net1(), ReplayOptions(), rq, None, 7, caps=(2, 2))
    assert P.OVERFLOW_MATCH in codes and P.OVERFLOW_HANDLES in codes and codes[-1] == 0
    codes.clear()
    big = RP._prepare(ev, None, None, net1(), ReplayOptions(), rq, None, 7)
    assert codes == [0]
    assert small.n_messages == big.n_messages > 0 and small.wreq_ev.size == big.wreq_ev.size > 0
    for name in ("psend", "precv", "wreq_off", "wreq_ev", "totals", "kind", "sflag"):
        np.testing.assert_array_equal(getattr(small, name), getattr(big, name))


def test_matching_pairs_the_kth_send_and_receive_of_each_key_and_leaves_the_rest_unmatched():
    """The preparation's matching against a reference written here (a list per (comm, source,
    dest, tag) key): many entries pending on a key at once, keys interleaved, both sides ahead in
    turn, sendrecv halves, two communicators, and leftovers on either side (P_UNMATCHED)."""
    from collections import defaultdict

    from pmac import replay as RP
    from pmac.replay_core import P_UNMATCHED

    rng = np.random.default_rng(11)
    p = 5
    t = Trace(p)
    for _ in range(900):
        r = int(rng.integers(0, p))
        peer = int((r + rng.integers(1, p)) % p)
        tag, comm, what = int(rng.integers(0, 3)), int(rng.integers(0, 2)), int(rng.integers(0, 5))
        if what == 0:
            t.isend(r, peer, 8, tag=tag, comm=comm)
        elif what == 1:
            t.irecv(r, peer, 8, tag=tag, comm=comm)
        elif what == 2:
            t.add(r, Op.SEND, dest=peer, send_bytes=8, send_tag=tag, comm=comm)
        elif what == 3:
            t.add(r, Op.RECV, source=peer, recv_bytes=8, recv_tag=tag, comm=comm)
        else:
            src = int((r + rng.integers(1, p)) % p)
            t.add(r, Op.SENDRECV, dest=peer, source=src, send_bytes=8, recv_bytes=8, send_tag=tag,
                  recv_tag=int(rng.integers(0, 3)), comm=comm)
    ev = t.events().sort_values(["rank", "seq"], ignore_index=True)
    prep = RP._prepare(ev, None, None, net1(), ReplayOptions(), t.requests(), None, p)
    sends, recvs = defaultdict(list), defaultdict(list)
    for e, row in enumerate(ev.itertuples()):
        if row.op in (Op.ISEND, Op.SEND, Op.SENDRECV):
            sends[(row.comm, row.rank, row.dest, row.send_tag)].append(e)
        if row.op in (Op.IRECV, Op.RECV, Op.SENDRECV):
            recvs[(row.comm, row.source, row.rank, row.recv_tag)].append(e)
    want_s, want_r = np.full(len(ev), -99), np.full(len(ev), -99)
    n_pairs = n_left = 0
    for key in set(sends) | set(recvs):
        a, b = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(a), len(b))):
            if k < len(a):
                want_s[a[k]] = b[k] if k < len(b) else P_UNMATCHED
            if k < len(b):
                want_r[b[k]] = a[k] if k < len(a) else P_UNMATCHED
        n_pairs += min(len(a), len(b))
        n_left += abs(len(a) - len(b))
    assert n_pairs > 300 and n_left > 50 and prep.n_messages == n_pairs
    has_s, has_r = want_s != -99, want_r != -99
    np.testing.assert_array_equal(prep.psend[has_s], want_s[has_s])
    np.testing.assert_array_equal(prep.precv[has_r], want_r[has_r])


def test_wide_event_indices_give_the_same_replay(monkeypatch):
    """Traces of 2**31 events or more index events with 64 bits (pmac.replay_core.event_dtypes);
    forced on a small trace, every result equals the 32-bit one."""
    from pmac import replay as RP
    from pmac import replay_core

    rng = np.random.default_rng(5)
    t = random_trace(rng, 6, 15)
    ev, rq = t.events(), t.requests()
    opts = ReplayOptions(timeline=True)
    narrow = replay(ev, None, None, net1(), opts, requests=rq, n_ranks=6)
    assert RP._prepare(ev, None, None, net1(), opts, rq, None, 6).psend.dtype == np.int32
    monkeypatch.setattr(replay_core, "NARROW_LIMIT", 0)
    assert RP._prepare(ev, None, None, net1(), opts, rq, None, 6).psend.dtype == np.int64
    wide = replay(ev, None, None, net1(), opts, requests=rq, n_ranks=6)
    assert wide.n_messages == narrow.n_messages > 0
    for name in ("finish_s", "compute_s", "comm_s", "wait_s", "critical_rank_s", "start_s", "end_s",
                 "sent_bytes", "received_bytes"):
        np.testing.assert_array_equal(getattr(wide, name), getattr(narrow, name))


def test_without_the_critical_path_the_replay_is_the_same():
    """ReplayOptions(critical_path=False) (bench/replay's speed runs) skips the record of what each
    call waited for: every time per rank and per call equals the default replay's, and
    critical_rank_s is None rather than zeros that would read as a path."""
    rng = np.random.default_rng(7)
    t = random_trace(rng, 5, 12)
    ev, rq = t.events(), t.requests()
    burst = rng.uniform(0, 2e-5, len(ev))
    full = replay(ev, burst, None, net1(), ReplayOptions(timeline=True), requests=rq, n_ranks=5)
    lean = replay(ev, burst, None, net1(), ReplayOptions(timeline=True, critical_path=False), requests=rq,
                  n_ranks=5)
    assert lean.critical_rank_s is None
    assert full.critical_rank_s.sum() == approx(full.makespan_s) and full.wait_s.sum() > 0
    for name in ("finish_s", "compute_s", "comm_s", "wait_s", "start_s", "end_s", "sent_bytes", "received_bytes"):
        np.testing.assert_array_equal(getattr(lean, name), getattr(full, name), err_msg=name)
    np.testing.assert_allclose(lean.compute_s, np.bincount(ev["rank"], weights=burst, minlength=5), rtol=1e-12)


def test_a_replayer_prepares_once_and_replays_each_machine_as_replay_does():
    """pmac.replay.Replayer (pmac.predict: one per signature, every machine) matches the trace once
    and redoes only what depends on the machine: rows out of order, Startall rows expanded,
    machines with other links, placements, bursts and options, and back to the first machine,
    all give replay()'s numbers exactly."""
    from pmac.profile import CollectiveCost
    from pmac.replay import Replayer

    rng = np.random.default_rng(11)
    t = random_trace(rng, 6, 15)
    for r in range(6):   # persistent requests too (the burst of a Startall row moves with it)
        t.add(r, Op.SEND_INIT, dest=(r + 1) % 6, send_bytes=100, send_tag=99, request=101)
        t.add(r, Op.RECV_INIT, source=(r - 1) % 6, recv_bytes=100, recv_tag=99, request=102)
        t.waitall(r, [102, 101], op=Op.STARTALL, burst_s=1e-6 * r)
        t.waitall(r, [102, 101])
    ev = t.events().sample(frac=1.0, random_state=1).reset_index(drop=True)  # rows out of order
    rq = t.requests()
    net_b = NetworkModel(intra_node=link(lat=3e-7, bw=8e9, eager=4096), inter_node=link(lat=4e-6, bw=2e8),
                         collectives=(CollectiveCost(op="allreduce", n_ranks=6, placement="inter_node",
                                                     msg_bytes=8, time_s=5e-5),
                                      CollectiveCost(op="allreduce", n_ranks=6, placement="inter_node",
                                                     msg_bytes=1e6, time_s=5e-3)))
    # 2-rank probe rows with a calibrated excess (pmac.calibrate_collectives) for every op and size
    # random_trace calls, within one node and between two
    net_c = dataclasses.replace(net1(), collectives=tuple(
        CollectiveCost(op=op, n_ranks=2, placement=pl, msg_bytes=m, time_s=1e-5, excess_s=x * (1 + (m > 8)))
        for op in ("allreduce", "bcast", "alltoall", "barrier") for m in (8, 50_000)
        for pl, x in (("intra_node", 1e-6), ("inter_node", 4e-6))))
    machines = [
        (None, None, net1(), ReplayOptions(timeline=True)),
        (rng.uniform(0, 1e-4, len(ev)), np.array([0, 0, 0, 1, 1, 1]), net_b,
         ReplayOptions(timeline=True, measured_collectives=True, eager_buffered=False)),
        (None, np.array([0, 0, 0, 1, 1, 1]), net_c, ReplayOptions(timeline=True)),
    ]
    rp = Replayer(ev, requests=rq, n_ranks=6)
    got = [rp.replay(*m) for m in machines + machines[:1]]
    want = [replay(ev, *m, requests=rq, n_ranks=6) for m in machines + machines[:1]]
    assert got[0].makespan_s != got[1].makespan_s
    no_excess = replay(ev, *machines[2][:3], ReplayOptions(timeline=True, collective_excess=False), requests=rq,
                       n_ranks=6)
    assert got[2].makespan_s > no_excess.makespan_s
    for g, w in zip(got, want):
        assert g.n_messages == w.n_messages > 0 and g.n_events == w.n_events == len(ev)
        for name in ("finish_s", "compute_s", "comm_s", "wait_s", "critical_rank_s", "start_s", "end_s",
                     "sent_bytes", "received_bytes"):
            np.testing.assert_array_equal(getattr(g, name), getattr(w, name), err_msg=name)
    with pytest.raises(InputError, match="burst_s must be finite"):
        rp.replay(np.full(len(ev), -1.0), None, net1())
    with pytest.raises(InputError, match="placement must give a node"):
        rp.replay(None, np.zeros(3), net1())


def test_the_prepared_trace_is_freed_when_replay_returns(monkeypatch):
    """The records (~36 bytes an event) go with the call, by reference counting: no reference
    cycle leaves them to the cyclic garbage collector (a relink closure over the prepared trace
    once made one)."""
    import gc
    import weakref

    from pmac import replay as RP

    t = random_trace(np.random.default_rng(1), 4, 5)
    seen = []
    real = RP._prepare

    def spy(*a, **k):
        p = real(*a, **k)
        seen.append(weakref.ref(p))
        return p

    monkeypatch.setattr(RP, "_prepare", spy)
    gc.collect()
    gc.disable()
    try:
        replay(t.events(), None, None, net1(), ReplayOptions(), requests=t.requests(), n_ranks=4)
        assert len(seen) == 1 and seen[0]() is None
    finally:
        gc.enable()


def test_stale_numba_caches_of_layout_readers_are_dropped():
    """numba does not see a layout constant of pmac.collectives change in the modules that read
    it: their caches older than collectives.py go at import (drop_stale_caches)."""
    import os
    from pathlib import Path

    from pmac import collectives as C

    if os.environ.get("NUMBA_CACHE_DIR"):
        pytest.skip("numba caches elsewhere (NUMBA_CACHE_DIR)")
    cache = Path(C.__file__).parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    stamp = Path(C.__file__).stat().st_mtime
    old = cache / "replay_passes.pmac_test_stale-1.py3.nbi"
    new = cache / "replay_core.pmac_test_fresh-1.py3.nbi"
    other = cache / "reuse.pmac_test_other-1.py3.nbi"
    try:
        for f, t in ((old, stamp - 100), (new, stamp + 100), (other, stamp - 100)):
            f.write_bytes(b"")
            os.utime(f, (t, t))
        assert C.drop_stale_caches() >= 1
        assert not old.exists() and new.exists() and other.exists()
    finally:
        for f in (old, new, other):
            f.unlink(missing_ok=True)


def test_exchange_excess_only_where_two_ranks_send_each_other_at_once():
    """LinkModel.exchange_excess_s (pmac.collectives.crossing): each half of an exchange (a
    Sendrecv with one peer, a 2-rank allreduce or barrier round) receives X later; a ring shift
    (other peers), a ping-pong and an exchange whose sides post more than o_s apart do not."""
    x = 5e-6
    c = OS + L + 8 / B + OR
    net = net1(exchange_excess_s=x)

    def sendrecv_pair(burst1=0.0):
        t = Trace(2)
        for r in range(2):
            t.add(r, Op.SENDRECV, dest=1 - r, source=1 - r, send_bytes=8, recv_bytes=8,
                  burst_s=burst1 if r == 1 else 0.0)
        return t

    np.testing.assert_allclose(sendrecv_pair().run(net).finish_s, c + x, rtol=REL)
    np.testing.assert_allclose(sendrecv_pair().run(net1()).finish_s, c, rtol=REL)
    # rank 1 posts 1 ms late: rank 0 waits in its receive, rank 1 finds the data there
    late = sendrecv_pair(1e-3).run(net).finish_s
    np.testing.assert_allclose(late, [1e-3 + c, 1e-3 + max(OS, OR)], rtol=REL)
    for op, m in ((Op.ALLREDUCE, 8), (Op.BARRIER, 0)):
        t = Trace(2)
        t.coll(op, m)
        np.testing.assert_allclose(t.run(net).finish_s, OS + L + m / B + OR + x, rtol=REL)
    t = Trace(3)
    for r in range(3):
        t.add(r, Op.SENDRECV, dest=(r + 1) % 3, source=(r - 1) % 3, send_bytes=8, recv_bytes=8)
    np.testing.assert_allclose(t.run(net).finish_s, c, rtol=REL)
    t = Trace(2)
    t.add(0, Op.SEND, dest=1, send_bytes=8)
    t.add(1, Op.RECV, source=0, recv_bytes=8)
    t.add(1, Op.SEND, dest=0, send_bytes=8)
    t.add(0, Op.RECV, source=1, recv_bytes=8)
    assert t.run(net).makespan_s == approx(2 * c)
    # per link kind: an intra-node exchange takes the intra-node excess only
    net2 = NetworkModel(intra_node=link(), inter_node=link(exchange_excess_s=x))
    np.testing.assert_allclose(sendrecv_pair().run(net2, placement=np.array([0, 0])).finish_s, c, rtol=REL)
    np.testing.assert_allclose(sendrecv_pair().run(net2, placement=np.array([0, 1])).finish_s, c + x, rtol=REL)

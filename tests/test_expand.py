"""pmac.expand: neighbourhood collectives replayed as their messages, persistent collectives'
starts as the non-blocking collectives they run. Checked row by row on hand-built tables, and
by replaying traces of tests/data programs against the same exchanges written by hand
(Irecv/Isend/Waitall, Iallreduce/Ibcast/Iallgatherv): the replayed times must agree."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pmac.expand import ID_BASE, SHADOW_COMM, collapse_timeline, expand_for_replay, unreplayed_note
from pmac.trace import EVENTS, NONE, REQUESTS, VCOUNTS, Op

DATA = Path(__file__).parent / "data"


def _tables():
    """2 ranks: a neighbourhood alltoall (one real neighbour, one MPI_PROC_NULL slot), a
    non-blocking neighbourhood allgather and its Wait, a persistent allreduce started by a
    Startall and by a Start."""
    ev, rq, vc = [], [], []

    def add(r, seq, op, **kw):
        row = dict(rank=r, seq=seq, op=int(op), t_start_s=0.0, t_end_s=0.0, burst_s=0.0, comm=0, dest=NONE,
                   source=NONE, send_tag=NONE, recv_tag=NONE, send_bytes=0, recv_bytes=0, root=NONE, request=NONE,
                   req_offset=NONE, n_requests=0, new_comm=NONE)
        names = kw.pop("names", None)
        row.update(kw)
        if names is not None:
            row["req_offset"], row["n_requests"] = len(rq), len(names)
            rq.extend((r, q, done, NONE, 0) for q, done in names)
        ev.append(row)

    for r in range(2):
        o = 1 - r
        add(r, 0, Op.INIT)
        add(r, 1, Op.NEIGHBOR_ALLTOALL, send_bytes=100, recv_bytes=100)
        vc += [(r, 1, o, 100, NONE), (r, 1, NONE, 100, NONE), (r, 1, o, NONE, 100), (r, 1, NONE, NONE, 100)]
        add(r, 2, Op.INEIGHBOR_ALLGATHER, send_bytes=8, recv_bytes=8, request=2)
        vc += [(r, 2, o, 8, NONE), (r, 2, o, NONE, 8)]
        add(r, 3, Op.WAIT, names=[(2, 1)])
        add(r, 4, Op.COLL_INIT, send_tag=int(Op.IALLREDUCE), send_bytes=32, recv_bytes=32, request=4)
        add(r, 5, Op.STARTALL, names=[(4, 0)])
        add(r, 6, Op.WAITALL, names=[(4, 1)])
        add(r, 7, Op.START, request=4, names=[(4, 0)])
        add(r, 8, Op.WAIT, names=[(4, 1)])
        add(r, 9, Op.FINALIZE)
    return (EVENTS.coerce(pd.DataFrame(ev)), REQUESTS.coerce(pd.DataFrame(rq, columns=list(REQUESTS.names))),
            VCOUNTS.coerce(pd.DataFrame(vc, columns=list(VCOUNTS.names))))


def test_rows_by_hand():
    ev, rq, vc = _tables()
    ex = expand_for_replay(ev, rq, vc)
    assert (ex.n_neighbor_calls, ex.n_collective_starts) == (4, 4) and ex.changed
    e = ex.events
    assert len(e) == 2 * 13
    for r in range(2):
        o = 1 - r
        mine = e[e["rank"] == r]
        got = [(int(s), Op(int(op)).name) for s, op in zip(mine["seq"], mine["op"])]
        assert got == [(0, "INIT"), (1, "IRECV"), (1, "ISEND"), (1, "WAITALL"), (2, "IRECV"), (2, "ISEND"),
                       (3, "WAIT"), (4, "COLL_INIT"), (5, "IALLREDUCE"), (6, "WAITALL"), (7, "IALLREDUCE"),
                       (8, "WAIT"), (9, "FINALIZE")]
        m = mine.reset_index(drop=True)
        ids1, ids2 = [ID_BASE + (1 << 20), ID_BASE + (1 << 20) + 1], [ID_BASE + (2 << 20), ID_BASE + (2 << 20) + 1]
        # the messages, on the shadow communicator, tag 0; MPI_PROC_NULL slots move nothing
        assert (m.loc[1, "source"], m.loc[1, "recv_bytes"], m.loc[1, "recv_tag"], m.loc[1, "request"]) == (o, 100, 0, ids1[0])
        assert (m.loc[2, "dest"], m.loc[2, "send_bytes"], m.loc[2, "send_tag"], m.loc[2, "request"]) == (o, 100, 0, ids1[1])
        assert set(m.loc[[1, 2, 4, 5], "comm"]) == {SHADOW_COMM}
        named = lambda i: rq_rows(ex.requests, m.loc[i])  # noqa: E731
        assert named(3) == [(r, ids1[0], 1, o, 100), (r, ids1[1], 1, NONE, 0)]
        assert named(6) == [(r, ids2[0], 1, o, 8), (r, ids2[1], 1, NONE, 0)]  # the Wait on the Ineighbor
        # starts of the persistent allreduce: the init's bytes and request; the waits name it unchanged
        for i in (8, 10):
            assert (m.loc[i, "send_bytes"], m.loc[i, "recv_bytes"], m.loc[i, "request"], m.loc[i, "n_requests"]) == (32, 32, 4, 0)
        assert named(9) == [(r, 4, 1, NONE, 0)]
    # rows -> the calls they come from; only the first row of a call keeps its burst
    assert ex.source_row[:13].tolist() == [0, 1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9]
    assert ex.first[:13].tolist() == [True, True, False, False, True, False, True, True, True, True, True, True, True]
    # the input's requests rows stay, the new ones are appended
    assert ex.requests.iloc[: len(rq)].equals(rq)


def rq_rows(requests, event):
    lo, k = int(event["req_offset"]), int(event["n_requests"])
    return [tuple(int(x) for x in t) for t in requests.iloc[lo: lo + k].itertuples(index=False)]


def test_nothing_to_expand_returns_the_tables_as_given():
    ev, rq, vc = _tables()
    plain = ev[~ev["op"].isin([int(o) for o in (Op.NEIGHBOR_ALLTOALL, Op.INEIGHBOR_ALLGATHER, Op.COLL_INIT)])]
    ex = expand_for_replay(plain, rq, vc)
    assert not ex.changed and ex.events is plain and ex.requests is rq and ex.notes == ()
    assert ex.source_row.tolist() == list(range(len(plain)))


def test_replay_equals_the_exchange_written_by_hand():
    """The expanded tables replay exactly as Irecv/Isend/Waitall and Iallreduce written out."""
    from pmac.replay import replay

    from synth import two_level_profile

    ev, rq, vc = _tables()
    ex = expand_for_replay(ev, rq, vc)
    burst = np.where(ex.first, np.where(ev["rank"].to_numpy() == 0, 3e-6, 1e-6)[ex.source_row], 0.0)
    net = two_level_profile().network
    a = replay(ex.events, burst, np.array([0, 1]), net, requests=ex.requests, n_ranks=2)
    # by hand: the same calls as separate events with their own request ids, a real world comm
    hand = ex.events.copy()
    hand["comm"] = np.where(hand["comm"] >= SHADOW_COMM, 0, hand["comm"])
    hand["send_tag"] = np.where(hand["op"] == Op.ISEND, 77, hand["send_tag"])
    hand["recv_tag"] = np.where(hand["op"] == Op.IRECV, 77, hand["recv_tag"])
    b = replay(hand, burst, np.array([0, 1]), net, requests=ex.requests, n_ranks=2)
    assert np.allclose(a.finish_s, b.finish_s, rtol=1e-12) and a.finish_s.min() > 0
    # and the neighbourhood alltoall alone costs what one 100-byte exchange costs
    one = ex.events[ex.events["seq"] <= 1]
    t1 = replay(one, np.zeros(len(one)), np.array([0, 1]), net, requests=ex.requests, n_ranks=2)
    lat, bw = net.inter_node.latency_s, net.inter_node.bandwidth_bytes_per_s
    assert t1.finish_s.max() >= lat + 100 / bw


def test_unreplayed_note_and_timeline():
    ev, rq, vc = _tables()
    rma = ev.copy()
    rma.loc[rma["op"] == Op.WAIT, "op"] = int(Op.WIN_FENCE)
    rma.loc[rma["op"] == Op.FINALIZE, "op"] = int(Op.PUT)
    assert unreplayed_note(rma) == ("10 call(s) take no time in the replay (NEIGHBOR_ALLTOALL 2, INEIGHBOR_ALLGATHER 2, "
                                    "PUT 2, WIN_FENCE 4): their communication and synchronisation are not modelled")
    assert unreplayed_note(expand_for_replay(ev, rq, vc).events) is None
    ex = expand_for_replay(ev, rq, vc)
    tl = pd.DataFrame({"rank": ex.events["rank"], "seq": ex.events["seq"], "op": ex.events["op"],
                       "start_s": np.arange(len(ex.events), dtype=float), "end_s": np.arange(len(ex.events)) + 0.5})
    c = collapse_timeline(tl, ev)
    assert len(c) == len(ev) and list(c.columns) == list(tl.columns)
    row = c[(c["rank"] == 0) & (c["seq"] == 1)].iloc[0]
    assert (row["op"], row["start_s"], row["end_s"]) == (Op.NEIGHBOR_ALLTOALL, 1.0, 3.5)


# ------------------------------------------------------------------ traced programs

@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from pmac.mpi import find_mpi
    from pmac.tracer import trace_mpi

    d = tmp_path_factory.mktemp("expand")
    mp = pytest.MonkeyPatch()
    mp.setenv("PMAC_CACHE_DIR", str(d / "cache"))
    mpi = find_mpi()
    out = {}
    for prog, mode in (("neighbors", "p2p"), ("persistent_coll", "nb")):
        exe = d / f"{prog}.exe"
        subprocess.run([mpi.mpicc, "-O1", "-o", str(exe), str(DATA / f"tracer_{prog}.c")], check=True)
        for arg in ((), (mode,)):
            res = trace_mpi([mpi.mpiexec, "-n", "4", str(exe), *arg], d / f"{prog}{'-' + arg[0] if arg else ''}",
                            timeout_s=120)
            assert res.returncode == 0 and res.raw.unmatched == ()
            out[(prog, bool(arg))] = res.signature
    yield out
    mp.undo()


def _replay_expanded(sig, network):
    from pmac.replay import replay

    ex = expand_for_replay(sig.events, sig.requests, sig.vcounts)
    ev = sig.events
    # the same bursts in both programs: an imbalance before the first call after MPI_Init
    burst = np.where(ev["seq"].to_numpy() == 1, 2e-5 * (ev["rank"].to_numpy() + 1), 0.0)
    burst = np.where(ex.first, burst[ex.source_row], 0.0)
    return ex, replay(ex.events, burst, np.array([0, 0, 1, 1]), network, requests=ex.requests, comms=sig.comms,
                      n_ranks=sig.n_ranks)


@pytest.mark.requires("mpi")
@pytest.mark.parametrize("prog", ["neighbors", "persistent_coll"])
def test_traced_program_replays_like_its_hand_written_twin(traced, prog):
    """tracer_neighbors.c p2p / tracer_persistent_coll.c nb make the same exchanges by hand."""
    from synth import two_level_profile

    net = two_level_profile(latency_s=2e-6, net_bw=5e8).network
    ex, a = _replay_expanded(traced[(prog, False)], net)
    hx, b = _replay_expanded(traced[(prog, True)], net)
    if prog == "neighbors":
        assert ex.n_neighbor_calls == 4 * 7 and hx.n_neighbor_calls == 4 * 2  # the Ineighbor calls stay in both
    else:
        assert ex.n_collective_starts == 4 * 10 and hx.n_collective_starts == 0
    assert a.finish_s.min() > 4e-5  # the messages and collectives are priced
    assert np.allclose(a.finish_s, b.finish_s, rtol=1e-9, atol=0)
    assert np.allclose(a.comm_s, b.comm_s, rtol=1e-9, atol=1e-15) and np.allclose(a.wait_s, b.wait_s, rtol=1e-9,
                                                                                   atol=1e-15)


@pytest.mark.requires("mpi")
def test_predict_says_what_it_expanded_and_keeps_one_timeline_row_per_call(traced):
    from pmac.predict import predict

    from synth import two_level_profile

    sig = traced[("neighbors", False)]
    p = predict(sig, [two_level_profile()], ranks_per_node=2, timeline=True)
    assert "28 neighbourhood collective call(s) replayed as their point-to-point messages " \
           "(an Irecv per in-neighbour, an Isend per out-neighbour)" in p.notes
    assert not any("take no time" in x for x in p.notes)
    assert len(p.timeline) == len(sig.events)
    assert p.timeline.groupby("rank")["op"].apply(list)[0][3] == "NEIGHBOR_ALLTOALL"
    sig = traced[("persistent_coll", False)]
    p = predict(sig, [two_level_profile()], ranks_per_node=2)
    assert "40 start(s) of MPI-4 persistent collectives replayed as the non-blocking collective each starts" in p.notes
    assert not any("MPI_Start/Startall" in x for x in p.notes)  # none left unreplayed


def test_predict_names_the_calls_it_cannot_price():
    from pmac.predict import predict
    from pmac.signature import SignatureHeader, make_signature

    from synth import two_level_profile

    ev, rq, vc = _tables()
    ev = ev.copy()
    ev.loc[ev["op"] == Op.FINALIZE, ["op", "dest", "send_bytes"]] = [int(Op.PUT), 0, 64]
    sig = make_signature(SignatureHeader(name="rma", n_ranks=2, source_format="synthetic"), ev, requests=rq,
                         vcounts=vc)
    p = predict(sig, [two_level_profile()], ranks_per_node=1)
    assert "2 call(s) take no time in the replay (PUT 2): their communication and synchronisation are not " \
           "modelled" in p.notes
    assert p.summary["total_s"].iloc[0] > 0


@pytest.mark.parametrize("blocking, nonblocking", [(Op.ALLTOALLW, Op.IALLTOALLW),
                                                   (Op.REDUCE_SCATTER_BLOCK, Op.IREDUCE_SCATTER_BLOCK)])
def test_new_nonblocking_values_are_priced_like_their_blocking_forms(blocking, nonblocking):
    """Op values 92 and 94 sit in the replay's non-blocking-collective range (base op = value - 20):
    a call followed at once by its Wait costs what the blocking call costs, and not nothing."""
    from pmac.replay import replay

    from synth import two_level_profile

    n = 4
    net = two_level_profile(latency_s=3e-6, net_bw=2e8).network

    def run(op, wait):
        rows, rq = [], []
        for r in range(n):
            base = dict(rank=r, t_start_s=0.0, t_end_s=0.0, comm=0, dest=NONE, source=NONE, send_tag=NONE,
                        recv_tag=NONE, root=NONE, request=NONE, req_offset=NONE, n_requests=0, new_comm=NONE)
            rows.append(base | dict(seq=0, op=int(Op.INIT), burst_s=0.0, send_bytes=0, recv_bytes=0))
            rows.append(base | dict(seq=1, op=int(op), burst_s=1e-5 * r, send_bytes=4096 * n, recv_bytes=4096,
                                    request=1 if wait else NONE))
            if wait:
                rows.append(base | dict(seq=2, op=int(Op.WAIT), burst_s=0.0, send_bytes=0, recv_bytes=0,
                                        req_offset=len(rq), n_requests=1))
                rq.append((r, 1, 1, NONE, 0))
        res = replay(EVENTS.coerce(pd.DataFrame(rows)), None, np.arange(n), net,
                     requests=REQUESTS.coerce(pd.DataFrame(rq, columns=list(REQUESTS.names))), n_ranks=n)
        return res.finish_s

    a, b = run(blocking, False), run(nonblocking, True)
    assert a.min() > 3e-5 + 4096 / 2e8 and np.allclose(a, b, rtol=1e-12)

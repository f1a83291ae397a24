"""pmac.pollution: a call after a burst that evicted the caches pays the link's measured curve."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from pmac.convolve import burst_arrays
from pmac.errors import InputError
from pmac.calibrate_pollution import add_to_profile, main
from pmac.fit_network import fit_pollution
from pmac.pollution import INTER, INTRA, NO_LINK, burst_fill, event_excess, event_links, level_costs
from pmac.predict import predict
from pmac.profile import RAW_TABLES, CacheLevel, LinkModel, load_profile, save_profile
from pmac.table import save_tables
from pmac.trace import NONE, Op

from synth import memory_tables, pingpong_signature, two_level_profile

US = 1e-6
CURVE = dict(pollution_bytes=(65536.0, 2097152.0), pollution_excess_s=(1 * US, 3 * US))


def rows(placement="intra_node", data=None):
    """Probe rows: data = {bytes: [(swept, paused) per repetition]}."""
    out = []
    for w, reps in data.items():
        for r, (a, b) in enumerate(reps):
            out.append((placement, "pollution", w, r, a))
            out.append((placement, "pollution_pause", w, r, b))
    return pd.DataFrame(out, columns=["placement", "test", "msg_bytes", "rep", "time_s"])


def test_fit_is_the_median_paired_difference_clipped_and_non_decreasing():
    # 16 KiB: differences 1, 3, 2 us -> 2; 64 KiB: -1, -2, 0 -> 0, but 16 KiB already cost 2 -> 2;
    # 256 KiB: 5, 4, 9 -> 5. The pause of each repetition is paired with its own sweep.
    d = {16384: [(11 * US, 10 * US), (23 * US, 20 * US), (12 * US, 10 * US)],
         65536: [(9 * US, 10 * US), (8 * US, 10 * US), (10 * US, 10 * US)],
         262144: [(15 * US, 10 * US), (24 * US, 20 * US), (19 * US, 10 * US)]}
    w, e = fit_pollution(rows(data=d))
    assert w == (16384.0, 65536.0, 262144.0)
    assert e == pytest.approx((2 * US, 2 * US, 5 * US), rel=1e-9)
    assert fit_pollution(rows(data={})) == ((), ())
    # other tests' rows and size 0 are not part of the curve
    other = pd.concat([rows(data=d), rows(data={0: [(5 * US, 1 * US)]})]).assign(
        test=lambda x: x.test.where(x.msg_bytes > 0, "pollution"))
    assert fit_pollution(other)[0] == w


def test_level_costs_take_the_curve_at_twice_each_cache():
    link = LinkModel(latency_s=1e-6, bandwidth_bytes_per_s=1e9, eager_threshold_bytes=1024,
                     pollution_bytes=(65536.0, 1048576.0, 67108864.0),
                     pollution_excess_s=(1 * US, 3 * US, 10 * US))
    caches = [CacheLevel(name=n, size_bytes=s, line_bytes=64) for n, s in
              (("L1", 32768), ("L2", 524288), ("L3", 33554432))]
    # e(64 KiB) = 1, e(1 MiB) = 3, e(64 MiB) = 10: each level adds its step
    assert level_costs(link, caches) == pytest.approx([1 * US, 2 * US, 7 * US], rel=1e-12)
    # an 8 KiB level: e(16 KiB) on the line from (0, 0) to (64 KiB, 1 us) = 0.25 us
    small = [CacheLevel(name="L0", size_bytes=8192, line_bytes=64)]
    assert level_costs(link, small) == pytest.approx([0.25 * US], rel=1e-12)
    # past the last point the curve stays at its last value
    huge = [CacheLevel(name="L4", size_bytes=1 << 30, line_bytes=64)]
    assert level_costs(link, huge) == pytest.approx([10 * US], rel=1e-12)
    assert not level_costs(dataclasses.replace(link, pollution_bytes=(), pollution_excess_s=()), caches).any()
    assert not level_costs(None, caches).any()


def _one_burst_memory(n_loads=1000, distance=-1, n_stores=0):
    """Rank 0 and 1, bursts seq 1..3, each n_loads loads at one reuse distance (-1: first touch)."""
    bursts, hists = [], []
    for r in (0, 1):
        for s in (1, 2, 3):
            bursts.append(dict(rank=r, seq=s, loads=n_loads, load_bytes=8 * n_loads, stores=n_stores,
                               store_bytes=8 * n_stores))
            hists.append(dict(rank=r, seq=s, access=0, counts={distance: n_loads}))
            if n_stores:
                hists.append(dict(rank=r, seq=s, access=1, counts={distance: n_stores}))
    return memory_tables(bursts, hists)


def test_burst_fill_is_the_misses_over_the_level_size():
    caches = two_level_profile().node.caches  # L1 32 KiB, L2 1 MiB, 64-byte lines
    # 1000 first-touch loads: 64,000 bytes into each level
    fill = burst_fill(burst_arrays(_one_burst_memory()), caches)
    assert fill.shape == (2, 6)
    assert fill[0] == pytest.approx(1.0)
    assert fill[1] == pytest.approx(64000 / 1048576, rel=1e-6)
    # 200 loads and 100 stores at distance 1000 lines: they hit the 16384-line L2, miss the 512-line L1
    fill = burst_fill(burst_arrays(_one_burst_memory(n_loads=200, n_stores=100, distance=1000)), caches)
    assert fill[0] == pytest.approx(300 * 64 / 32768, rel=1e-6)
    assert fill[1] == pytest.approx(0.0, abs=1e-9)
    # a burst with no sampled access (address sampling: it touched few lines) borrows its rank's
    # histogram for the convolver but evicts nothing here, whatever its access count
    mem = _one_burst_memory()
    mem["reuse"] = mem["reuse"][~((mem["reuse"]["rank"] == 0) & (mem["reuse"]["seq"] == 2))]
    ba = burst_arrays(mem)
    assert ba.n_borrowed_hist == 1 and ba.unsampled[0, 0].tolist() == [False, True, False, False, False, False]
    fill = burst_fill(ba, caches)
    assert fill[:, 1].tolist() == [0.0, 0.0] and fill[0, 0] == pytest.approx(1.0)
    # loads sampled, stores never (no store histogram anywhere, nothing to borrow): the stores
    # count nothing, the loads what they moved
    mem = _one_burst_memory(n_loads=1000, n_stores=5000)
    mem["reuse"] = mem["reuse"][mem["reuse"]["access"] == 0]
    ba = burst_arrays(mem)
    assert ba.unsampled[0, 1].all() and not ba.unsampled[0, 0].any()
    assert burst_fill(ba, caches)[1] == pytest.approx(64000 / 1048576, rel=1e-6)


def test_event_links_follow_the_peer_and_the_communicator():
    # 4 ranks on 2 nodes (0, 0, 1, 1); comm 1 = {0, 1} (one node), comm 2 = {1, 2} (two nodes)
    node = np.array([0, 0, 1, 1])
    ev = pd.DataFrame([
        dict(rank=0, seq=1, op=int(Op.SEND), dest=2, source=NONE, comm=0),        # other node
        dict(rank=0, seq=2, op=int(Op.IRECV), dest=NONE, source=1, comm=0),       # same node
        dict(rank=0, seq=3, op=int(Op.WAITALL), dest=NONE, source=NONE, comm=0),  # no peer
        dict(rank=0, seq=4, op=int(Op.ALLREDUCE), dest=NONE, source=NONE, comm=0),
        dict(rank=0, seq=5, op=int(Op.BCAST), dest=NONE, source=NONE, comm=1),
        dict(rank=1, seq=1, op=int(Op.ALLREDUCE), dest=NONE, source=NONE, comm=2),
        dict(rank=1, seq=2, op=int(Op.SENDRECV), dest=0, source=3, comm=0),       # its send's peer
        dict(rank=1, seq=3, op=int(Op.SEND), dest=NONE, source=NONE, comm=0),     # MPI_PROC_NULL
        dict(rank=1, seq=4, op=int(Op.FINALIZE), dest=NONE, source=NONE, comm=0),
    ])
    comms = pd.DataFrame(dict(comm=[0, 0, 0, 0, 1, 1, 2, 2], local_rank=[0, 1, 2, 3, 0, 1, 0, 1],
                              world_rank=[0, 1, 2, 3, 0, 1, 1, 2]))
    got = event_links(ev, node, comms).tolist()
    assert got == [INTER, INTRA, NO_LINK, INTER, INTRA, INTER, INTRA, NO_LINK, NO_LINK]
    # one node: every talking call is intra
    assert set(event_links(ev, np.zeros(4, int), comms).tolist()) == {INTRA, NO_LINK}
    # no comms table: every collective is on the world
    world = ev[ev.comm == 0]
    assert event_links(world, node, None)[world.op == int(Op.ALLREDUCE)].tolist() == [INTER]
    assert event_links(world, np.zeros(4, int), None)[world.op == int(Op.ALLREDUCE)].tolist() == [INTRA]


def test_event_excess_charges_each_call_its_bursts_fill_on_its_link():
    prof = two_level_profile()
    intra = dataclasses.replace(prof.network.intra_node, **CURVE)
    inter = dataclasses.replace(intra, pollution_excess_s=(2 * US, 6 * US))
    sig = pingpong_signature(n_iter=1, memory=_one_burst_memory())
    ba = burst_arrays(sig.memory)
    x_one = 1 * US + 2 * US * 64000 / 1048576   # a1 = e(64 KiB) = 1, a2 = e(2 MiB) - 1 = 2; fills 1 and 0.061
    # ranks on one node: SEND and RECV pay x_one, INIT and FINALIZE nothing
    x = event_excess(sig.events, ba, prof.node.caches, intra, inter, np.array([0, 0]), sig.comms)
    talk = sig.events.op.isin([int(Op.SEND), int(Op.RECV)]).to_numpy()
    assert x[talk] == pytest.approx(x_one, rel=1e-6) and not x[~talk].any()
    # on two nodes the inter link's curve (twice the cost)
    x2 = event_excess(sig.events, ba, prof.node.caches, intra, inter, np.array([0, 1]), sig.comms)
    assert x2[talk] == pytest.approx(2 * x_one, rel=1e-6)
    # a rank without a memory trace takes a traced rank's bursts (as predict's convolved bursts)
    one_rank = {k: v[v["rank"] == 0] for k, v in sig.memory.items()}
    x3 = event_excess(sig.events, burst_arrays(one_rank), prof.node.caches, intra, inter, np.array([0, 0]), sig.comms)
    assert x3 == pytest.approx(x, rel=1e-9)


def test_predict_adds_the_excess_to_each_call_and_counts_it_as_communication():
    """Ping-pong, one round: rank 0 SEND then RECV, rank 1 RECV then SEND, each after a burst
    that evicts L1 and 6.1 % of L2. Both sends leave x later and each receive was posted in time:
    the run ends 2x later, each rank's communication grows by 2x (two calls), compute does not."""
    base = two_level_profile()
    net = dataclasses.replace(base.network, intra_node=dataclasses.replace(base.network.intra_node, **CURVE))
    prof = dataclasses.replace(base, network=net)
    sig = pingpong_signature(n_iter=1, memory=_one_burst_memory())
    x = 1 * US + 2 * US * 64000 / 1048576
    on = predict(sig, [prof], ranks_per_node=2, burst_source="measured")
    off = predict(sig, [prof], ranks_per_node=2, burst_source="measured", pollution=False)
    a, b = on.summary.iloc[0], off.summary.iloc[0]
    assert a.total_s - b.total_s == pytest.approx(2 * x, rel=1e-6)
    assert a.comm_s - b.comm_s == pytest.approx(2 * x, rel=1e-6)
    assert a.compute_s == pytest.approx(b.compute_s, rel=1e-12) and a.wait_s == pytest.approx(b.wait_s, abs=1e-15)
    # the profile without a curve, or pollution off, predicts the same as before
    plain = predict(sig, [base], ranks_per_node=2, burst_source="measured").summary.iloc[0]
    assert plain.total_s == pytest.approx(b.total_s, rel=1e-12)
    # no memory signature: nothing added, and the note says so
    bare = predict(pingpong_signature(n_iter=1), [prof], ranks_per_node=2, burst_source="measured")
    assert bare.summary.iloc[0].total_s == pytest.approx(b.total_s, rel=1e-12)
    assert any("pmac.pollution" in n for n in bare.notes)
    # the note says how much communication the pollution added (2x a rank: 2.24 us)
    assert any(n.startswith("synth: calls after bursts that evicted the caches: +2.24 us") for n in on.notes)
    assert not any("pmac.pollution" in n for n in off.notes)


def test_link_checks_its_curve():
    kw = dict(latency_s=1e-6, bandwidth_bytes_per_s=1e9, eager_threshold_bytes=1024)
    with pytest.raises(ValueError, match="differ in length"):
        LinkModel(**kw, pollution_bytes=(1.0, 2.0), pollution_excess_s=(0.0,))
    with pytest.raises(ValueError, match="positive and ascending"):
        LinkModel(**kw, pollution_bytes=(2.0, 1.0), pollution_excess_s=(0.0, 1e-6))
    with pytest.raises(ValueError, match="non-decreasing"):
        LinkModel(**kw, pollution_bytes=(1.0, 2.0), pollution_excess_s=(2e-6, 1e-6))


def _record(path, placement, data):
    pp = RAW_TABLES["pingpong"].coerce(rows(placement, data))
    save_tables(path, {"pingpong": pp}, {"pingpong": RAW_TABLES["pingpong"]})
    with np.load(path) as z:
        arrays = dict(z)
    arrays["meta/json"] = np.array(json.dumps({"pollution_only": True}))
    np.savez(path, **arrays)


def test_add_to_profile_sets_the_curves_and_keeps_the_rows(tmp_path, capsys):
    base = two_level_profile()
    prof = dataclasses.replace(base, raw_file="m.raw.npz")
    old = RAW_TABLES["pingpong"].coerce(pd.concat([
        rows("intra_node", {65536: [(9 * US, 1 * US)]}),   # an old pollution row: replaced
        pd.DataFrame([("intra_node", "pingpong", 8, 0, 2 * US)], columns=["placement", "test", "msg_bytes", "rep",
                                                                            "time_s"])]))
    save_tables(tmp_path / "m.raw.npz", {"pingpong": old}, {"pingpong": RAW_TABLES["pingpong"]})
    from pmac.schema import sha256_file

    prof = dataclasses.replace(prof, raw_sha256=sha256_file(tmp_path / "m.raw.npz"))
    save_profile(prof, tmp_path / "m.yaml")
    _record(tmp_path / "intra.npz", "intra_node", {65536: [(3 * US, 1 * US), (4 * US, 1 * US), (2 * US, 1 * US)]})
    _record(tmp_path / "inter.npz", "inter_node", {65536: [(5 * US, 1 * US)]})
    assert main([str(tmp_path / "m.yaml"), "--record", str(tmp_path / "intra.npz"),
                 "--record", str(tmp_path / "inter.npz")]) == 0
    assert "intra_node: 64 KiB +2.00 us" in capsys.readouterr().out
    back = load_profile(tmp_path / "m.yaml")
    assert back.network.intra_node.pollution_excess_s == pytest.approx((2 * US,))
    assert back.network.inter_node.pollution_excess_s == pytest.approx((4 * US,))
    assert back.network.intra_node.latency_s == base.network.intra_node.latency_s
    from pmac.profile import load_raw

    pp = load_raw(back, tmp_path / "m.yaml")["pingpong"]  # checks the new sha256 too
    assert len(pp[pp.test == "pingpong"]) == 1
    assert sorted(pp[(pp.test == "pollution") & (pp.placement == "intra_node")].time_s) == \
        pytest.approx([2 * US, 3 * US, 4 * US])
    # a record without pollution rows: one line naming it; the profile is left as it was
    before = (tmp_path / "m.yaml").read_text()
    save_tables(tmp_path / "none.npz", {"pingpong": old[old.test == "pingpong"]}, {"pingpong": RAW_TABLES["pingpong"]})
    with pytest.raises(InputError, match="none.npz.*no pollution rows"):
        add_to_profile(tmp_path / "m.yaml", [tmp_path / "none.npz"])
    assert main([str(tmp_path / "m.yaml"), "--record", str(tmp_path / "none.npz")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no pollution rows" in err
    assert (tmp_path / "m.yaml").read_text() == before
    # a placement the profile has no link for
    save_profile(dataclasses.replace(prof, network=dataclasses.replace(prof.network, inter_node=None)),
                 tmp_path / "m.yaml")
    with pytest.raises(InputError, match="no inter_node link"):
        add_to_profile(tmp_path / "m.yaml", [tmp_path / "inter.npz"])

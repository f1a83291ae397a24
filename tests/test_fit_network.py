"""The network fit recovers known parameters from synthetic ping-pong and collective curves."""

import numpy as np
import pandas as pd
import pytest

from pmac.fit_network import (corrected_pingpong, fit_collectives, fit_link, fit_network,
                              fit_segments)
from pmac.profile import RAW_TABLES

SIZES = np.array([0] + [2**k for k in range(0, 25)], dtype=np.float64)  # 0 B .. 16 MiB


def two_regime(m, *, lat1=1.0e-6, bw1=4e9, lat2=5.0e-6, bw2=10e9, thr=65536):
    m = np.asarray(m, dtype=np.float64)
    return np.where(m < thr, lat1 + m / bw1, lat2 + m / bw2)


def test_two_segments_recovered_exactly():
    t = two_regime(SIZES)
    fit = fit_segments(SIZES, t)
    assert fit.breaks_bytes == (65536.0,)
    assert fit.eager_threshold_bytes == 65536
    assert fit.latency_s == pytest.approx((1.0e-6, 5.0e-6), rel=1e-6)
    assert fit.bandwidth_bytes_per_s == pytest.approx((4e9, 10e9), rel=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)


def test_noisy_curve_within_tolerance():
    rng = np.random.default_rng(7)
    t = two_regime(SIZES, thr=16384) * (1 + rng.normal(0, 0.01, SIZES.size))
    link = fit_link(SIZES, t, send_overhead_s=0.2e-6, recv_overhead_s=0.3e-6)
    assert link.eager_threshold_bytes == 16384
    # overheads are split off the wire latency: 1.0 us - 0.5 us
    assert link.latency_s == pytest.approx(0.5e-6, rel=0.08)
    assert link.bandwidth_bytes_per_s == pytest.approx(10e9, rel=0.03)
    assert link.segments[0].bandwidth_bytes_per_s == pytest.approx(4e9, rel=0.1)
    assert link.fit_r2 > 0.99
    # transfer time + overheads reproduces the measured curve
    pred = link.transfer_time_s(SIZES) + 0.5e-6
    assert np.max(np.abs(pred / t - 1)) < 0.05


def test_single_regime_has_no_threshold_jump():
    t = 2e-6 + SIZES / 5e9
    link = fit_link(SIZES, t)
    assert len(link.segments) == 1
    assert link.eager_threshold_bytes == int(SIZES[-1])  # no jump: everything eager
    assert link.latency_s == pytest.approx(2e-6, rel=1e-6)
    assert link.bandwidth_bytes_per_s == pytest.approx(5e9, rel=1e-6)


def test_three_regimes():
    # cache-resident copy, then a slower memory-bound regime, then rendezvous at 256 KiB
    m = SIZES
    t = np.where(m < 4096, 0.5e-6 + m / 2e9,
                 np.where(m < 262144, 0.5e-6 + 4096 / 2e9 - 4096 / 8e9 + m / 8e9, 8e-6 + m / 6e9))
    fit = fit_segments(m, t)
    # the kink is continuous, so 4096 fits either side; the step at 256 KiB is exact
    assert fit.breaks_bytes[0] in (4096.0, 8192.0) and fit.breaks_bytes[1] == 262144.0
    assert fit.eager_threshold_bytes == 262144  # the continuous break is not a threshold
    assert fit.bandwidth_bytes_per_s == pytest.approx((2e9, 8e9, 6e9), rel=1e-6)
    assert fit.latency_s[2] == pytest.approx(8e-6, rel=1e-6)


def raw_tables():
    rows = []
    rng = np.random.default_rng(1)
    for rep in range(5):
        for m in SIZES:
            t = float(two_regime(m)) * (1 + 0.005 * rng.standard_normal())
            rows.append(("intra_node", "pingpong", int(m), rep, t + 0.4e-6))  # + Python per-call cost
        rows.append(("intra_node", "pycall", 0, rep, 0.4e-6))
        rows.append(("intra_node", "send_overhead", 8, rep, 0.2e-6 + 0.2e-6))  # + half a pycall
        rows.append(("intra_node", "recv_overhead", 8, rep, 0.1e-6 + 0.2e-6))
        for m in (65536, 1 << 20, 4 << 20):
            rows.append(("intra_node", "stream", m, rep, m / 12e9))
    pp = pd.DataFrame(rows, columns=["placement", "test", "msg_bytes", "rep", "time_s"])
    crow = []
    for rep in range(3):
        for nr in (1, 2):
            for mb in (8, 1024):
                base = 0.3e-6 if nr == 1 else 0.3e-6 + 2e-6 + mb / 1e9
                crow.append(("intra_node", "allreduce", mb, nr, rep, base * (1 + 0.01 * rep)))
    coll = pd.DataFrame(crow, columns=["placement", "op", "msg_bytes", "n_ranks", "rep", "time_s"])
    return {"pingpong": RAW_TABLES["pingpong"].coerce(pp), "collective": RAW_TABLES["collective"].coerce(coll)}


def test_fit_network_from_raw_tables():
    tables = raw_tables()
    corr = corrected_pingpong(tables["pingpong"], "intra_node")
    assert (corr.time_s - corr.time_corrected_s).to_numpy() == pytest.approx(0.4e-6)
    net = fit_network(tables, mpi_library="MPICH test")
    assert net.inter_node is None and net.mpi_library == "MPICH test"
    link = net.intra_node
    assert link.send_overhead_s == pytest.approx(0.2e-6, rel=1e-6)
    assert link.recv_overhead_s == pytest.approx(0.1e-6, rel=1e-6)
    assert link.eager_threshold_bytes == 65536
    assert link.latency_s == pytest.approx(1.0e-6 - 0.3e-6, rel=0.05)
    assert link.bandwidth_bytes_per_s == pytest.approx(10e9, rel=0.02)
    assert link.streaming_bandwidth_bytes_per_s == pytest.approx(12e9, rel=1e-6)
    colls = {(c.op, c.msg_bytes, c.n_ranks): c for c in net.collectives}
    assert set(colls) == {("allreduce", 8, 2), ("allreduce", 1024, 2)}
    # the one-rank floor (0.3 us, smallest size) is subtracted
    # lower quartile of factors 1, 1.01, 1.02 is 1.005; the one-rank floor (smallest size) is subtracted
    assert colls[("allreduce", 8, 2)].time_s == pytest.approx((0.3e-6 + 2e-6 + 8e-9 - 0.3e-6) * 1.005, rel=1e-6)
    assert colls[("allreduce", 1024, 2)].spread_frac == pytest.approx(0.02 / 1.01, rel=1e-3)


def test_compiled_collectives_keep_their_rows_whole():
    """collective_loop 'compiled' (probes/network.compiled_collectives: no interpreter in the loop):
    a row is what the call costs, and the one-rank rows are not taken off; 'mpi4py' (the default,
    every probe before 28 Nov 2026) takes them off. The model records which."""
    tables = raw_tables()
    net = fit_network(tables, collective_loop="compiled")
    assert net.collective_loop == "compiled" and fit_network(tables).collective_loop == "mpi4py"
    colls = {(c.op, c.msg_bytes, c.n_ranks): c.time_s for c in net.collectives}
    # lower quartile of factors 1, 1.01, 1.02 is 1.005, nothing subtracted
    assert colls[("allreduce", 8, 2)] == pytest.approx((0.3e-6 + 2e-6 + 8e-9) * 1.005, rel=1e-9)
    assert colls[("allreduce", 1024, 2)] == pytest.approx((0.3e-6 + 2e-6 + 1024e-9) * 1.005, rel=1e-9)
    mpi4py = {(c.op, c.msg_bytes, c.n_ranks): c.time_s for c in fit_collectives(tables["collective"])}
    assert colls[("allreduce", 8, 2)] - mpi4py[("allreduce", 8, 2)] == pytest.approx(0.3e-6 * 1.005, rel=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="positive"):
        fit_segments([1, 2, 3], [1e-6, 0.0, 1e-6])
    with pytest.raises(ValueError, match="two message sizes"):
        fit_segments([1], [1e-6])
    assert fit_collectives(pd.DataFrame()) == ()


def shaped_tables(rate=2.5e6, bucket=5000.0, line_bw=1e9, lat=10e-6, o_s=3e-6, o_r=2e-6, header=None):
    """Raw tables of an inter-node link behind a token bucket, as the probe would record them:
    the ping-pong from pmac's own replay in its steady state, stream and burst from the closed
    forms (stream: m / rate per message; burst after silence: line time within the bucket,
    (m - bucket) / rate beyond it, plus a 1-byte acknowledgement)."""
    from synth import pingpong_signature

    from pmac.profile import LinkModel, NetworkModel
    from pmac.replay import replay_signature

    inter = LinkModel(latency_s=lat, bandwidth_bytes_per_s=line_bw, eager_threshold_bytes=1 << 30,
                      send_overhead_s=o_s, recv_overhead_s=o_r, shaper_rate_bytes_per_s=rate,
                      shaper_burst_bytes=bucket, shaper_header_bytes=header)
    net = NetworkModel(intra_node=inter.__class__(latency_s=1e-7, bandwidth_bytes_per_s=1e10,
                                                  eager_threshold_bytes=1 << 30), inter_node=inter)

    def pingpong(m, n):
        return replay_signature(pingpong_signature(n_iter=n, msg_bytes=m, burst_s=0.0), None, np.arange(2),
                                net).finish_s[0]

    rows = []
    sizes = [0] + [2**k for k in range(4, 21)]
    for m in sizes:
        one_way = (pingpong(m, 300) - pingpong(m, 200)) / 200   # steady: the bucket has drained
        rows.append(("inter_node", "pingpong", m, 0, one_way))
    for m in (1024, 4096, 16384, 65536):
        rows.append(("inter_node", "stream", m, 0, m / rate))
    ack = o_s + lat + o_r
    for m in [0] + [4**k for k in range(2, 10)]:
        wire = lat + m / line_bw if m <= bucket else lat + (m - bucket) / rate
        rows.append(("inter_node", "burst", m, 0, o_s + wire + o_r + ack))
    rows += [("inter_node", "send_overhead", 8, 0, o_s), ("inter_node", "recv_overhead", 8, 0, o_r)]
    pp = pd.DataFrame(rows, columns=["placement", "test", "msg_bytes", "rep", "time_s"])
    return {"pingpong": RAW_TABLES["pingpong"].coerce(pp)}


def test_shaper_recovered_from_pingpong_stream_and_burst():
    link = fit_network(shaped_tables()).inter_node
    assert link.shaped
    assert link.shaper_rate_bytes_per_s == pytest.approx(2.5e6, rel=1e-9)
    # the largest ping-pong sizes start each turn with a full bucket: b exactly
    assert link.shaper_burst_bytes == pytest.approx(5000.0, rel=1e-6)
    assert link.bandwidth_bytes_per_s == pytest.approx(1e9, rel=1e-6)   # the burst slope
    assert link.latency_s == pytest.approx(10e-6, rel=1e-6)
    assert [s.bandwidth_bytes_per_s for s in link.segments] == [link.bandwidth_bytes_per_s]
    assert not link.shaper_header_bytes  # the fast line refills an empty message's tokens: H unseen


def test_shaper_header_tokens_recovered():
    """200 B of header tokens a message drain even empty ping-pongs (one-way H / 2r = 40 us over a
    15 us line): the fit reads H off the 0-byte point; the bucket comes out within the line
    time's worth of tokens (b + H/2 - r (W(0) + o))."""
    link = fit_network(shaped_tables(header=200.0)).inter_node
    assert link.shaper_header_bytes == pytest.approx(200.0, rel=1e-6)
    assert link.shaper_burst_bytes == pytest.approx(5000.0 + 100.0 - 2.5e6 * 15e-6, rel=1e-6)
    assert link.shaper_rate_bytes_per_s == pytest.approx(2.5e6, rel=1e-9)


def test_unshaped_link_has_no_shaper():
    tables = shaped_tables()
    pp = tables["pingpong"]
    # the same link without burst credit: the stream is never slower per message than the ping-pong
    st = pp.test == "stream"
    pp.loc[st, "time_s"] = pp[st].msg_bytes / 1e9
    assert not fit_network({"pingpong": pp}).inter_node.shaped
    # nor is an intra-node link ever taken as shaped
    pp = tables["pingpong"].assign(placement="intra_node")
    assert not fit_network({"pingpong": pp}).intra_node.shaped


def test_overheads_beyond_the_one_way_time_scale_down_together():
    """o_s + o_r measured above the smallest one-way time (a receive delayed on a busy machine) are
    scaled down to it keeping their ratio: o_r is not zeroed whenever o_s alone reaches it."""
    from pmac.fit_network import QUANTILE

    tables = raw_tables()
    pp = tables["pingpong"].copy()
    pp.loc[pp.test == "recv_overhead", "time_s"] = 1.5e-6 + 0.2e-6      # o_r 1.5 us after half a pycall
    corr = corrected_pingpong(pp, "intra_node")
    t_small = corr[corr.msg_bytes > 0].groupby("msg_bytes").time_corrected_s.quantile(QUANTILE).iloc[0]
    assert 0.2e-6 + 1.5e-6 > t_small
    link = fit_network({**tables, "pingpong": pp}, mpi_library="MPICH test").intra_node
    assert link.send_overhead_s == pytest.approx(0.2e-6 * t_small / 1.7e-6, rel=1e-6)
    assert link.recv_overhead_s == pytest.approx(1.5e-6 * t_small / 1.7e-6, rel=1e-6)


def interpreter_rows(reps=((1.0, 0.6, 0.25, 2.0, 0.2, 1.0), (1.2, 0.6, 0.3, 2.4, 0.3, 1.1), (1.1, 0.7, 0.2, 1.9, 0.2, 1.2)),
                     placement="intra_node"):
    """The network probe's interpreter test rows (probes/network._interpreter_calls), us per call a
    repetition: py_allreduce 2 ranks, its own part (1 rank), c_allreduce, py_sendrecv, own, c_sendrecv."""
    rows = []
    for r, (pa, oa, ca, ps, os_, cs) in enumerate(reps):
        rows += [(placement, "py_allreduce", 8, 2, r, pa * 1e-6), (placement, "py_allreduce", 8, 1, r, oa * 1e-6),
                 (placement, "c_allreduce", 8, 2, r, ca * 1e-6), (placement, "py_sendrecv", 8, 2, r, ps * 1e-6),
                 (placement, "py_sendrecv", 8, 1, r, os_ * 1e-6), (placement, "c_sendrecv", 8, 2, r, cs * 1e-6)]
    return pd.DataFrame(rows, columns=["placement", "op", "msg_bytes", "n_ranks", "rep", "time_s"])


def test_interpreter_figures_by_hand():
    """pmac.fit_network.fit_interpreter: per repetition py - own part - compiled, the median over
    repetitions, at least 0; the test's rows never become collective rows; with two placements (an
    emulated cluster's tables concatenated) the intra-node pair's; none without the rows."""
    from pmac.fit_network import fit_interpreter

    got = fit_interpreter(interpreter_rows())
    # allreduce: 1.0-0.6-0.25 = 0.15, 1.2-0.6-0.3 = 0.3, 1.1-0.7-0.2 = 0.2 -> median 0.2 us
    # sendrecv: 2.0-0.2-1.0 = 0.8, 2.4-0.3-1.1 = 1.0, 1.9-0.2-1.2 = 0.5 -> median 0.8 us
    assert got["allreduce"] == pytest.approx(0.2e-6, rel=1e-9) and got["sendrecv"] == pytest.approx(0.8e-6, rel=1e-9)
    dearer_c = interpreter_rows(((1.0, 0.6, 0.5, 2.0, 0.2, 1.0),) * 3)
    assert fit_interpreter(dearer_c)["allreduce"] == 0.0           # -0.1 us: a call costs no less from Python
    inter = interpreter_rows(((9.0, 0.6, 0.25, 9.0, 0.2, 1.0),) * 3, placement="inter_node")
    both = fit_interpreter(pd.concat([inter, interpreter_rows()], ignore_index=True))
    assert both == got
    assert fit_interpreter(inter)["allreduce"] == pytest.approx(8.15e-6, rel=1e-9)
    tables = raw_tables()
    assert fit_interpreter(tables["collective"]) == {} and fit_interpreter(None) == {}
    net = fit_network(tables, collective_loop="compiled")
    assert net.interpreter_collective_s is None and net.interpreter_p2p_s is None
    tables["collective"] = pd.concat([tables["collective"], interpreter_rows()], ignore_index=True)
    with_test = fit_network(tables, collective_loop="compiled")
    assert with_test.collectives == net.collectives
    assert with_test.interpreter_collective_s == pytest.approx(0.2e-6, rel=1e-9)
    assert with_test.interpreter_p2p_s == pytest.approx(0.8e-6, rel=1e-9)

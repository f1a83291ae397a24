"""The exchange excess fitted from the network probe's exchange rows (pmac.calibrate_exchange)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from pmac.calibrate_exchange import calibrate_network, exchange_excess_s, replayed_exchange_s
from pmac.profile import RAW_TABLES, LinkModel, NetworkModel

LINK = LinkModel(latency_s=4e-6, bandwidth_bytes_per_s=1e9, eager_threshold_bytes=65536,
                 send_overhead_s=3e-6, recv_overhead_s=2e-6)


def rows(placement, times, pycall=None):
    out = [(placement, "exchange", m, rep, t) for m, t in times.items() for rep in range(3)]
    if pycall is not None:
        out += [(placement, "pycall", 0, rep, pycall) for rep in range(3)]
    return RAW_TABLES["pingpong"].coerce(pd.DataFrame(out, columns=["placement", "test", "msg_bytes", "rep",
                                                                    "time_s"]))


def test_replayed_exchange_closed_forms():
    # unshaped: both messages in flight at once, each o_s + W(m) + o_r
    for m in (0, 8, 512):
        assert replayed_exchange_s(LINK, "inter_node", m) == pytest.approx(9e-6 + m / 1e9, rel=1e-9)
    # shaped: no idle turn refills the buckets, each node sends (m + H) per exchange at the rate
    shaped = dataclasses.replace(LINK, shaper_rate_bytes_per_s=2.5e6, shaper_burst_bytes=5000.0,
                                 shaper_header_bytes=75.0)
    for m in (8, 512):
        assert replayed_exchange_s(shaped, "inter_node", m) == pytest.approx((m + 75.0) / 2.5e6, rel=1e-9)


def test_excess_recovered_and_interpreter_cost_removed():
    x, py = 6e-6, 3e-6
    times = {m: 9e-6 + m / 1e9 + x + py / 2 for m in (0, 8, 64, 512)}
    got, table = exchange_excess_s(LINK, rows("inter_node", times, pycall=py), "inter_node")
    assert got == pytest.approx(x, rel=1e-6)
    assert list(table.msg_bytes) == [0, 8, 64, 512]
    # an exchange faster than the model (a full-duplex path) gives no negative excess
    fast = {m: 8e-6 for m in (0, 8)}
    assert exchange_excess_s(LINK, rows("inter_node", fast), "inter_node")[0] == 0.0


def test_calibrate_network_sets_each_measured_link():
    pp = pd.concat([rows("inter_node", {m: 9e-6 + m / 1e9 + 4e-6 for m in (0, 64)}),
                    rows("intra_node", {m: 9e-6 + m / 1e9 + 1e-6 for m in (0, 64)})])
    net = calibrate_network(NetworkModel(intra_node=LINK, inter_node=LINK), pp)
    assert net.inter_node.exchange_excess_s == pytest.approx(4e-6, rel=1e-6)
    assert net.intra_node.exchange_excess_s == pytest.approx(1e-6, rel=1e-6)
    # a record from an older probe (no exchange rows) leaves the links as they were
    old = pp[pp.test != "exchange"]
    assert calibrate_network(NetworkModel(intra_node=LINK, inter_node=LINK), old).inter_node == LINK

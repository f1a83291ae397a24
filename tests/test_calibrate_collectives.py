"""pmac.calibrate_collectives: what a collective call cost beyond its algorithm's messages,
from the probe's 2-rank rows, and how the replay adds it (hand-computed on a plain link)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pmac.calibrate_collectives import calibrate_collectives, excess_table
from pmac.profile import SCHEMA_VERSION, CollectiveCost, NetworkModel
from pmac.trace import Op

from trace_synth import B, L, OR, OS, Trace, link

# a 2-rank allreduce between two nodes (eager, no exchange excess): 8 B is one exchange of
# recursive doubling (each rank posts, its message arrives OS + L + m/B later, the receive ends
# OR after that); larger is Rabenseifner, two exchanges of m/2 (MPICH's choice, pmac.collectives)
PRICE = {8: OS + L + 8 / B + OR}
PRICE.update({m: 2 * (OS + L + m / 2 / B + OR) for m in (36, 64)})


def row(op, m, t, n=2, placement="inter_node", **kw):
    return CollectiveCost(op=op, msg_bytes=m, n_ranks=n, time_s=t, placement=placement, **kw)


def net_with(*rows):
    return NetworkModel(intra_node=link(), inter_node=link(), collectives=tuple(rows))


def test_excess_is_the_measured_call_less_the_replayed_algorithm():
    rows = (row("allreduce", 8, PRICE[8] + 5e-6), row("allreduce", 64, PRICE[64] + 9e-6),
            row("allreduce", 8, 0.5 * PRICE[8], placement="intra_node"),     # cheaper than priced
            row("alltoall", 16, PRICE[8] + 2e-6),                            # 16 B buffer = 8 B blocks
            row("allreduce", 8, 1e-3, n=4))                                  # not a 2-rank row
    t = excess_table(net_with(*rows))
    got = {(r.name, r.placement, r.msg_bytes): r for r in t.itertuples()}
    assert len(got) == 4
    assert got[("allreduce", "inter_node", 8)].replayed_s == pytest.approx(PRICE[8], rel=1e-9)
    assert got[("allreduce", "inter_node", 8)].excess_s == pytest.approx(5e-6, rel=1e-6)
    assert got[("allreduce", "inter_node", 64)].excess_s == pytest.approx(9e-6, rel=1e-6)
    assert got[("allreduce", "intra_node", 8)].excess_s == pytest.approx(-0.5 * PRICE[8], rel=1e-6)
    assert got[("alltoall", "inter_node", 16)].priced_bytes == 8
    assert got[("alltoall", "inter_node", 16)].excess_s == pytest.approx(2e-6, rel=1e-6)
    cal = calibrate_collectives(net_with(*rows)).collectives
    assert [c.excess_s for c in cal] == [pytest.approx(5e-6, rel=1e-6), pytest.approx(9e-6, rel=1e-6),
                                         pytest.approx(-0.5 * PRICE[8], rel=1e-6),
                                         pytest.approx(2e-6, rel=1e-6), None]
    assert [dataclasses.replace(c, excess_s=None) for c in cal] == list(rows)


def test_replay_adds_the_excess_once_per_call_at_any_size():
    net = calibrate_collectives(net_with(row("allreduce", 8, PRICE[8] + 5e-6),
                                         row("allreduce", 64, PRICE[64] + 9e-6)))
    x8 = net.collectives[0].excess_s
    two_nodes = np.array([0, 1])
    t = Trace(2)
    for _ in range(10):
        t.coll(Op.ALLREDUCE, 8)
    assert t.run(net, two_nodes).makespan_s == pytest.approx(10 * (PRICE[8] + x8), rel=1e-9)
    assert t.run(net, two_nodes, collective_excess=False).makespan_s == pytest.approx(10 * PRICE[8], rel=1e-9)
    # between the probe's sizes: linear in the priced size (36 B: half way from 8 to 64)
    t = Trace(2)
    t.coll(Op.ALLREDUCE, 36)
    want = PRICE[36] + 0.5 * (x8 + net.collectives[1].excess_s)
    assert t.run(net, two_nodes).makespan_s == pytest.approx(want, rel=1e-9)
    # four ranks on four nodes: two rounds of recursive doubling, the excess once
    t = Trace(4)
    t.coll(Op.ALLREDUCE, 8)
    assert t.run(net, np.arange(4)).makespan_s == pytest.approx(2 * PRICE[8] + x8, rel=1e-9)
    # both ranks on one node: the intra_node rows apply, and there are none
    t = Trace(2)
    t.coll(Op.ALLREDUCE, 8)
    assert t.run(net, np.array([0, 0])).makespan_s == pytest.approx(PRICE[8], rel=1e-9)
    # other ops have no row: priced by algorithm alone
    t = Trace(2)
    t.coll(Op.BARRIER)
    assert t.run(net, two_nodes).makespan_s == pytest.approx(t.run(net, two_nodes, collective_excess=False)
                                                             .makespan_s, rel=1e-12)


def test_measured_table_instances_take_the_table_and_no_excess():
    net = calibrate_collectives(net_with(row("allreduce", 8, PRICE[8] + 5e-6),
                                         row("allreduce", 8, 4e-5, n=4)))
    x8 = net.collectives[0].excess_s
    t = Trace(4)
    t.coll(Op.ALLREDUCE, 8)
    assert t.run(net, np.arange(4), measured_collectives=True).makespan_s == pytest.approx(4e-5, rel=1e-9)
    t = Trace(2)   # a 2-rank call: the 2-rank row's time, which is the price plus the excess
    t.coll(Op.ALLREDUCE, 8)
    assert t.run(net, np.array([0, 1]), measured_collectives=True).makespan_s == pytest.approx(PRICE[8] + x8,
                                                                                             rel=1e-6)


def test_calibrate_network_sets_the_excess_after_the_exchange_excess():
    """pmac.probe_network fits through calibrate_network: collective rows come out calibrated,
    against a price that includes the link's exchange excess."""
    from pmac.calibrate_exchange import calibrate_network

    xl = dataclasses.replace(link(), exchange_excess_s=2e-6)
    net = NetworkModel(intra_node=xl, inter_node=xl, collectives=(row("allreduce", 8, PRICE[8] + 5e-6),))
    got = calibrate_network(net, None).collectives[0].excess_s
    assert got == pytest.approx(3e-6, rel=1e-6)   # the exchange of recursive doubling pays 2 us of it


def test_the_module_recalibrates_profiles_in_place(tmp_path, capsys):
    from pmac.calibrate_collectives import main
    from pmac.profile import load_profile, save_profile
    from synth import small_profile

    p = small_profile()
    p = dataclasses.replace(p, network=net_with(row("allreduce", 8, PRICE[8] + 5e-6)))
    save_profile(p, tmp_path / "m.yaml")
    assert main([str(tmp_path / "m.yaml")]) == 0
    back = load_profile(tmp_path / "m.yaml")
    assert back.network.collectives[0].excess_s == pytest.approx(5e-6, rel=1e-6)
    assert "pmac.calibrate_collectives" in back.provenance["collective_excess"]
    assert "allreduce" in capsys.readouterr().out
    (tmp_path / "bad.yaml").write_text("kind: pmac.machine\nschema_version: 5\nname: [unclosed\n")
    assert main([str(tmp_path / "bad.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.yaml" in err and "malformed YAML" in err


def test_a_probe_rows_alltoall_size_is_its_send_buffer():
    """The probe records an alltoall by its whole send buffer (16 B at 2 ranks = 8 B blocks), the
    trace likewise (pmac.replay.collective_bytes prices one block): a measured row applies to the
    call of the same buffer (it once compared the row's buffer with the call's block)."""
    net = net_with(row("alltoall", 16, 7e-6), row("alltoall", 64, 9e-6))
    t = Trace(2)
    t.coll(Op.ALLTOALL, 16)
    assert t.run(net, np.array([0, 1]), measured_collectives=True).makespan_s == pytest.approx(7e-6, rel=1e-9)
    t = Trace(2)
    t.coll(Op.ALLTOALL, 40)
    assert t.run(net, np.array([0, 1]), measured_collectives=True).makespan_s == pytest.approx(8e-6, rel=1e-9)


def test_bcast_loop_is_replayed_with_the_roots_the_probe_used(tmp_path):
    """NetworkModel.bcast_root: with root 0 every call ('fixed', probes before 27 Nov 2026) the
    root runs ahead and the loop's steady state is the other rank's receive overhead a call; with
    the root moving every call ('rotating', probes/network.collective_call) each call waits for the
    previous one's message: OS + L + m/B + OR. The excess is the measured call less that. A
    version-11 profile (no field) reads as 'fixed'; an unknown mode is refused."""
    from pmac.profile import load_profile, save_profile

    from test_schema import small_profile

    measured = 2e-6
    for mode, price in (("fixed", OR), ("rotating", OS + L + 8 / B + OR)):
        net = dataclasses.replace(net_with(row("bcast", 8, measured)), bcast_root=mode)
        t = excess_table(net)
        assert t.replayed_s.iloc[0] == pytest.approx(price, rel=1e-9)
        assert calibrate_collectives(net).collectives[0].excess_s == pytest.approx(measured - price, rel=1e-9)
    with pytest.raises(ValueError, match="network.bcast_root must be one of fixed, rotating, not 'sideways'"):
        NetworkModel(intra_node=link(), bcast_root="sideways")
    prof = small_profile()
    path = tmp_path / "p.yaml"
    save_profile(dataclasses.replace(prof, network=dataclasses.replace(prof.network, bcast_root="rotating")), path)
    text = path.read_text()
    assert "bcast_root: rotating" in text and f"schema_version: {SCHEMA_VERSION}" in text
    assert load_profile(path).network.bcast_root == "rotating"
    path.write_text(text.replace("  bcast_root: rotating\n", "").replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 11"))
    assert load_profile(path).network.bcast_root == "fixed"


def test_collective_loop_is_kept_in_the_profile(tmp_path):
    """NetworkModel.collective_loop (schema 13): 'compiled' round-trips; a version-12 profile (no
    field) reads as 'mpi4py'; an unknown loop is refused by name; pmac show says which."""
    from pmac.profile import load_profile, save_profile
    from pmac.report_profile import format_profile

    from test_schema import small_profile

    with pytest.raises(ValueError, match="network.collective_loop must be one of mpi4py, compiled, not 'fortran'"):
        NetworkModel(intra_node=link(), collective_loop="fortran")
    prof = small_profile()
    net = dataclasses.replace(prof.network, collective_loop="compiled", collectives=(row("allreduce", 8, 1e-6),))
    path = tmp_path / "p.yaml"
    save_profile(dataclasses.replace(prof, network=net), path)
    text = path.read_text()
    assert "collective_loop: compiled" in text and f"schema_version: {SCHEMA_VERSION}" in text
    back = load_profile(path)
    assert back.network.collective_loop == "compiled"
    assert "collectives (time per call; timed in compiled loops)" in format_profile(back)
    path.write_text(text.replace("  collective_loop: compiled\n", "").replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 12"))
    assert load_profile(path).network.collective_loop == "mpi4py"


def test_interpreter_figures_are_kept_in_the_profile(tmp_path):
    """NetworkModel.interpreter_collective_s / interpreter_p2p_s (schema 14): round-trip, pmac show
    prints them, a version-13 profile (no fields) reads None, a negative or NaN figure is refused by
    name."""
    from pmac.profile import load_profile, save_profile
    from pmac.report_profile import format_profile

    from test_schema import small_profile

    for bad in (-1e-7, float("nan")):
        with pytest.raises(ValueError, match="network.interpreter_p2p_s must be a finite number >= 0 seconds"):
            NetworkModel(intra_node=link(), interpreter_p2p_s=bad)
    prof = small_profile()
    net = dataclasses.replace(prof.network, interpreter_collective_s=1.25e-7, interpreter_p2p_s=6.5e-7)
    path = tmp_path / "p.yaml"
    save_profile(dataclasses.replace(prof, network=net), path)
    text = path.read_text()
    assert "interpreter_p2p_s: 6.5e-07" in text and f"schema_version: {SCHEMA_VERSION}" in text
    back = load_profile(path)
    assert (back.network.interpreter_collective_s, back.network.interpreter_p2p_s) == (1.25e-7, 6.5e-7)
    assert ("a call from a Python interpreter, beyond the same call compiled: collective 125 ns, point-to-point "
            "650 ns") in format_profile(back)
    old = "".join(ln for ln in text.splitlines(keepends=True) if "interpreter_" not in ln)
    path.write_text(old.replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 13"))
    back = load_profile(path)
    assert back.network.interpreter_collective_s is None and back.network.interpreter_p2p_s is None
    assert "Python interpreter" not in format_profile(back)

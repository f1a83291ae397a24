"""The MPI thread level: a profile's network per level, the one a prediction takes, and
collectives cheaper than their messages (MPICH's shared-memory collectives at MPI_THREAD_SINGLE)
priced from the probe's table. Hand-computed on trace_synth's plain link."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import pmac.predict as pp
from pmac.calibrate_collectives import calibrate_collectives
from pmac.collectives import ALLREDUCE, BCAST, REDUCE, add_excess
from pmac.errors import InputError
from pmac.mpi import thread_level_class
from pmac.profile import CollectiveCost, MachineProfile, NetworkModel, load_profile, save_profile
from pmac.schema import dump_yaml, read_yaml
from pmac.signature import SignatureHeader, load_signature, make_signature, save_signature
from pmac.trace import Op

from synth import two_level_profile
from trace_synth import B, L, OR, OS, Trace, link

#: a 2-rank 8 B allreduce by recursive doubling: one exchange (trace_synth's link, no crossing)
PRICE8 = OS + L + 8 / B + OR
SHM_S = 0.5e-6      # the probe's row at single: cheaper than the messages
LOCKED_S = 3.0e-6   # at multiple: dearer


def network(level: str, t8: float) -> NetworkModel:
    row = CollectiveCost(op="allreduce", msg_bytes=8, n_ranks=2, time_s=t8, placement="intra_node")
    return calibrate_collectives(NetworkModel(intra_node=link(), inter_node=link(), collectives=(row,),
                                              thread_level=level))


def profile(name="m", *, variants=True, main="single") -> MachineProfile:
    nets = {"single": network("single", SHM_S), "multiple": network("multiple", LOCKED_S)}
    other = "multiple" if main == "single" else "single"
    return dataclasses.replace(two_level_profile(name), network=nets[main],
                               network_variants=(nets[other],) if variants else ())


def allreduces(n_calls=10, level="single", burst1=0.0):
    t = Trace(2)
    for k in range(n_calls):
        t.coll(Op.ALLREDUCE, 8, burst=[0.0, burst1 if k == 0 else 0.0])
    header = SignatureHeader(name="ar", n_ranks=2, source_format="synthetic", mpi_thread_level=level)
    return make_signature(header, t.events())


def test_thread_level_classes():
    assert [thread_level_class(x) for x in ("single", "funneled", "serialized", "multiple", "", "bogus")] == \
        ["single", "single", "single", "multiple", "", ""]


def test_the_calibrated_excess_is_negative_where_the_call_is_cheaper_than_its_messages():
    assert network("single", SHM_S).collectives[0].excess_s == pytest.approx(SHM_S - PRICE8, rel=1e-9)
    assert network("multiple", LOCKED_S).collectives[0].excess_s == pytest.approx(LOCKED_S - PRICE8, rel=1e-9)


@pytest.mark.parametrize("level, per_call", [("single", SHM_S), ("funneled", SHM_S), ("multiple", LOCKED_S),
                                             ("", SHM_S)])
def test_prediction_takes_the_network_of_the_applications_level(level, per_call):
    pred = pp.predict(allreduces(level=level), [profile()], burst_source="measured")
    assert pred.summary.total_s.iloc[0] == pytest.approx(10 * per_call, rel=1e-9)
    assert not [n for n in pred.notes if "thread" in n.lower() or "MPI_THREAD" in n]


def test_a_profile_without_the_level_prices_with_its_own_and_says_so():
    only_multiple = profile("old", variants=False, main="multiple")
    pred = pp.predict(allreduces(level="single"), [only_multiple], burst_source="measured")
    assert pred.summary.total_s.iloc[0] == pytest.approx(10 * LOCKED_S, rel=1e-9)
    assert any(n.startswith("machine 'old' has no network measured at MPI_THREAD_SINGLE") for n in pred.notes)
    # a profile that does not say its level (version 6 and older): no note
    unknown = dataclasses.replace(only_multiple, network=dataclasses.replace(only_multiple.network, thread_level=""))
    pred = pp.predict(allreduces(level="single"), [unknown], burst_source="measured")
    assert not [n for n in pred.notes if "MPI_THREAD" in n]


def test_a_cheap_call_ends_its_time_after_the_last_member_arrives():
    """Priced from the table: both members leave SHM_S after the later one posted (rank 1 is 3 us
    late), not the algorithm's exchange after each one's own post."""
    pred = pp.predict(allreduces(n_calls=1, burst1=3e-6), [profile()], burst_source="measured", timeline=True)
    tl = pred.timeline
    assert tl[tl.op == "ALLREDUCE"].end_s.to_numpy() == pytest.approx([3e-6 + SHM_S] * 2, rel=1e-9)


def test_beyond_the_table_a_negative_excess_is_added_to_the_algorithm():
    """Four ranks on one node (the probe had two): recursive doubling's two exchanges plus the
    2-rank row's negative excess."""
    t = Trace(4)
    t.coll(Op.ALLREDUCE, 8)
    got = t.run(network("single", SHM_S), np.zeros(4, np.int64)).makespan_s
    assert got == pytest.approx(2 * PRICE8 + (SHM_S - PRICE8), rel=1e-9)


def test_a_negative_excess_never_lets_a_member_leave_before_what_it_needs():
    post = np.array([1.0, 4.0])
    ev = np.array([0, 1])
    t = np.array([5.0, 6.0])
    add_excess(ALLREDUCE, t, post, ev, 0, 0, 4.0, -3.0)
    assert list(t) == [4.0, 4.0]                 # both need the later member's contribution
    t = np.array([1.5, 6.0])
    add_excess(BCAST, t, post, ev, 0, 0, 4.0, -3.0)
    assert list(t) == [1.0, 4.0]                 # the root only its own post; the leaf its own too
    t = np.array([2.0, 6.0])
    add_excess(REDUCE, t, post, ev, 0, 1, 4.0, -5.0)
    assert list(t) == [1.0, 4.0]                 # the root (member 1) waits for every member
    t = np.array([2.0, 6.0])
    add_excess(ALLREDUCE, t, post, ev, 0, 0, 4.0, 0.5)
    assert list(t) == [2.5, 6.5]                 # a positive excess is simply added


def test_network_for_picks_by_class_and_keeps_the_topology():
    topo = {"kind": "star"}
    p = profile()
    p = dataclasses.replace(p, network=dataclasses.replace(p.network, topology=topo))
    net, note = p.network_for("serialized")
    assert net is p.network and note is None
    net, note = p.network_for("multiple")
    assert net.thread_level == "multiple" and net.topology == topo and note is None
    assert p.network_for("")[0] is p.network


def test_levels_must_be_distinct_and_known():
    p = profile()
    with pytest.raises(ValueError, match="distinct thread levels"):
        dataclasses.replace(p, network_variants=(network("funneled", SHM_S),))
    with pytest.raises(ValueError, match="distinct thread levels"):
        dataclasses.replace(p, network_variants=(network("", SHM_S),))
    with pytest.raises(ValueError, match="network.thread_level must be one of"):
        network("threaded", SHM_S)
    with pytest.raises(ValueError, match="mpi_thread_level must be one of"):
        SignatureHeader(name="x", n_ranks=1, source_format="synthetic", mpi_thread_level="many")


def test_profile_and_signature_round_trip_and_older_files_load(tmp_path):
    p = profile()
    save_profile(p, tmp_path / "m.yaml")
    assert load_profile(tmp_path / "m.yaml") == p
    body = read_yaml(tmp_path / "m.yaml")
    assert body["network"]["thread_level"] == "single"
    assert [v["thread_level"] for v in body["network_variants"]] == ["multiple"]
    # a version-6 file: neither field
    del body["network"]["thread_level"], body["network_variants"]
    (tmp_path / "v6.yaml").write_text(dump_yaml(dict(body, schema_version=6)))
    old = load_profile(tmp_path / "v6.yaml")
    assert old.network.thread_level == "" and old.network_variants == ()
    body["network"]["thread_level"] = "lots"
    (tmp_path / "bad.yaml").write_text(dump_yaml(dict(body, schema_version=7)))
    with pytest.raises(InputError, match="thread_level must be one of"):
        load_profile(tmp_path / "bad.yaml")

    sig = allreduces(level="multiple")
    save_signature(sig, tmp_path / "sig")
    assert load_signature(tmp_path / "sig").header.mpi_thread_level == "multiple"
    y = tmp_path / "sig" / "signature.yaml"
    y.write_text(y.read_text().replace("schema_version: 5", "schema_version: 4")
                 .replace("mpi_thread_level: multiple\n", ""))
    assert load_signature(tmp_path / "sig").header.mpi_thread_level == ""

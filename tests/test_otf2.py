"""OTF2 import: an archive written here with the otf2 wheel's writer, read back into exact tables."""

from __future__ import annotations

import numpy as np
import pytest

from pmac.errors import InputError
from pmac.signature import load_signature, save_signature
from pmac.trace import ANY_SOURCE, NONE, Op

import otf2  # noqa: E402  (a dependency: pyproject.toml)
from pmac.otf2 import op_from_region, read_otf2  # noqa: E402

US = 1_000_000  # timer ticks per second: times below are microseconds


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Three ranks. A sub-communicator 'sub' = world ranks (2, 0) tests rank translation."""
    from otf2.enums import CollectiveOp, GroupType, Paradigm, RegionRole

    root = tmp_path_factory.mktemp("otf2") / "arch"
    with otf2.writer.open(str(root), timer_resolution=US) as trace:
        d = trace.definitions
        machine = d.system_tree_node("machine")
        nodes = [d.system_tree_node(h, parent=machine) for h in ("hostA", "hostA", "hostB")]
        lgs = [d.location_group(f"MPI Rank {r}", system_tree_parent=nodes[r]) for r in range(3)]
        locs = [d.location("Master thread", group=lg) for lg in lgs]
        d.group("MPI_COMM_WORLD", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group("world", group_type=GroupType.COMM_GROUP,
                                                        paradigm=Paradigm.MPI, members=[0, 1, 2]))
        sub = d.comm("sub", group=d.group("sub", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
                                          members=[2, 0]), parent=world)

        def region(name):
            return d.region(name, region_role=RegionRole.FUNCTION, paradigm=Paradigm.MPI)

        R = {n: region(n) for n in ("MPI_Init", "MPI_Isend", "MPI_Irecv", "MPI_Waitall", "MPI_Send_c", "MPI_Recv",
                                    "MPI_Bcast", "MPI_Allreduce", "MPI_Finalize", "MPI_Test", "MPI_Comm_rank")}
        main = d.region("main")
        work = d.region("work")
        w = [trace.event_writer_from_location(loc) for loc in locs]

        def call(wr, name, t0, t1, inner=()):
            wr.enter(t0, R[name])
            for ev in inner:
                ev()
            wr.leave(t1, R[name])

        UNDEF = 0xFFFFFFFF
        # rank 0
        a = w[0]
        a.enter(0, main)
        call(a, "MPI_Init", 2, 4)
        a.enter(5, work); a.leave(9, work)  # user code between calls is compute
        call(a, "MPI_Isend", 10, 11, [lambda: a.mpi_isend(10, 1, world, 7, 800, 1)])
        call(a, "MPI_Irecv", 12, 13, [lambda: a.mpi_irecv_request(12, 2)])
        call(a, "MPI_Waitall", 20, 25, [lambda: a.mpi_isend_complete(21, 1),
                                        lambda: a.mpi_irecv(24, 1, world, 8, 400, 2)])
        call(a, "MPI_Send_c", 30, 31, [lambda: a.mpi_send(30, 0, sub, 3, 16)])
        call(a, "MPI_Bcast", 35, 38, [lambda: a.mpi_collective_begin(35),
                                      lambda: a.mpi_collective_end(38, CollectiveOp.BCAST, sub, 0, 0, 32)])
        call(a, "MPI_Allreduce", 40, 45, [lambda: a.mpi_collective_begin(40),
                                          lambda: a.mpi_collective_end(45, CollectiveOp.ALLREDUCE, world, UNDEF, 8, 8)])
        call(a, "MPI_Finalize", 50, 52)
        a.leave(60, main)
        # rank 1
        b = w[1]
        b.enter(0, main)
        call(b, "MPI_Init", 1, 3)
        call(b, "MPI_Comm_rank", 4, 4)
        call(b, "MPI_Irecv", 5, 6, [lambda: b.mpi_irecv_request(5, 5)])
        call(b, "MPI_Isend", 6, 7, [lambda: b.mpi_isend(6, 0, world, 8, 400, 6)])
        call(b, "MPI_Test", 8, 8, [lambda: b.mpi_request_test(8, 5)])
        call(b, "MPI_Waitall", 9, 22, [lambda: b.mpi_irecv(15, 0, world, 7, 800, 5),
                                       lambda: b.mpi_isend_complete(16, 6)])
        call(b, "MPI_Allreduce", 40, 45, [lambda: b.mpi_collective_begin(40),
                                          lambda: b.mpi_collective_end(45, CollectiveOp.ALLREDUCE, world, UNDEF, 8, 8)])
        call(b, "MPI_Finalize", 50, 51)
        b.leave(60, main)
        # rank 2
        c = w[2]
        c.enter(0, main)
        call(c, "MPI_Init", 3, 4)
        call(c, "MPI_Recv", 29, 33, [lambda: c.mpi_recv(33, 1, sub, 3, 16)])
        call(c, "MPI_Bcast", 34, 36, [lambda: c.mpi_collective_begin(34),
                                      lambda: c.mpi_collective_end(36, CollectiveOp.BCAST, sub, 0, 32, 0)])
        call(c, "MPI_Allreduce", 40, 45, [lambda: c.mpi_collective_begin(40),
                                          lambda: c.mpi_collective_end(45, CollectiveOp.ALLREDUCE, world, UNDEF, 8, 8)])
        call(c, "MPI_Finalize", 50, 50)
        c.leave(60, main)
    return root


def _rank(sig, r):
    return sig.events[sig.events["rank"] == r].reset_index(drop=True)


def test_ops_and_counts(archive):
    sig = read_otf2(archive / "traces.otf2")
    assert sig.n_ranks == 3 and sig.header.source_format == "otf2"
    assert [Op(o).name for o in _rank(sig, 0)["op"]] == [
        "INIT", "ISEND", "IRECV", "WAITALL", "SEND", "BCAST", "ALLREDUCE", "FINALIZE"]
    assert [Op(o).name for o in _rank(sig, 1)["op"]] == [
        "INIT", "OTHER", "IRECV", "ISEND", "TEST", "WAITALL", "ALLREDUCE", "FINALIZE"]
    assert [Op(o).name for o in _rank(sig, 2)["op"]] == ["INIT", "RECV", "BCAST", "ALLREDUCE", "FINALIZE"]
    assert sig.header.rank_hosts == ("hostA", "hostA", "hostB")


def test_times_and_bursts_in_seconds(archive):
    r0 = _rank(read_otf2(archive), 0)  # the folder works too
    assert r0["t_start_s"].tolist() == pytest.approx([2e-6, 10e-6, 12e-6, 20e-6, 30e-6, 35e-6, 40e-6, 50e-6])
    assert r0["t_end_s"].tolist() == pytest.approx([4e-6, 11e-6, 13e-6, 25e-6, 31e-6, 38e-6, 45e-6, 52e-6])
    # first burst from the rank's first event (t=0); the 'work' region is compute, not a call
    assert r0["burst_s"].tolist() == pytest.approx([2e-6, 6e-6, 1e-6, 7e-6, 5e-6, 4e-6, 2e-6, 5e-6])


def test_point_to_point_and_requests(archive):
    sig = read_otf2(archive)
    r0, r1, r2 = (_rank(sig, r) for r in range(3))
    isend = r0.iloc[1]
    assert (isend["dest"], isend["send_tag"], isend["send_bytes"], isend["request"]) == (1, 7, 800, 1)
    irecv = r0.iloc[2]  # filled when the wait completed it
    assert (irecv["source"], irecv["recv_tag"], irecv["recv_bytes"], irecv["request"]) == (1, 8, 400, 2)
    wa = r0.iloc[3]
    rq = sig.requests.iloc[int(wa["req_offset"]): int(wa["req_offset"] + wa["n_requests"])]
    assert rq[["rank", "request", "completed", "source", "recv_bytes"]].values.tolist() == [
        [0, 1, 1, NONE, 0], [0, 2, 1, 1, 400]]
    test = r1.iloc[4]
    rq = sig.requests.iloc[int(test["req_offset"])]
    assert (rq["rank"], rq["request"], rq["completed"]) == (1, 5, 0)
    wa1 = r1.iloc[5]
    rq = sig.requests.iloc[int(wa1["req_offset"]): int(wa1["req_offset"] + wa1["n_requests"])]
    assert rq[["request", "completed", "source", "recv_bytes"]].values.tolist() == [[5, 1, 0, 800], [6, 1, NONE, 0]]
    # sub-communicator (2, 0): rank 0 sends to local 0 = world 2; rank 2 receives from local 1 = world 0
    send, recv = r0.iloc[4], r2.iloc[1]
    assert (send["comm"], send["dest"], send["send_tag"], send["send_bytes"]) == (1, 2, 3, 16)
    assert (recv["comm"], recv["source"], recv["recv_tag"], recv["recv_bytes"]) == (1, 0, 3, 16)
    # every send has its receive
    ev = sig.events
    s = ev[ev["op"].isin([Op.SEND, Op.ISEND])]
    r = ev[ev["op"].isin([Op.RECV, Op.IRECV])]
    assert sorted(zip(s["rank"], s["dest"], s["send_tag"], s["send_bytes"])) == \
        sorted(zip(r["source"], r["rank"], r["recv_tag"], r["recv_bytes"]))
    assert not (ev["source"] == ANY_SOURCE).any()


def test_collectives_and_communicators(archive):
    sig = read_otf2(archive)
    ev = sig.events
    bc = ev[ev["op"] == Op.BCAST].set_index("rank")
    assert bc.loc[0, "root"] == 2 and bc.loc[2, "root"] == 2  # local root 0 of (2, 0) is world 2
    assert (bc.loc[2, "send_bytes"], bc.loc[0, "recv_bytes"]) == (32, 32)
    ar = ev[ev["op"] == Op.ALLREDUCE]
    assert ar["root"].tolist() == [NONE] * 3 and ar["send_bytes"].tolist() == [8] * 3
    assert sig.comms.values.tolist() == [[0, 0, 0], [0, 1, 1], [0, 2, 2], [1, 0, 2], [1, 1, 0]]


def test_saved_and_loaded(archive, tmp_path):
    sig = read_otf2(archive, name="otf2demo")
    loaded = load_signature(save_signature(sig, tmp_path / "s"))
    assert loaded.header.name == "otf2demo"
    assert np.array_equal(loaded.events.to_numpy(), sig.events.to_numpy())


def test_region_names():
    assert op_from_region("MPI_Sendrecv_replace") == Op.SENDRECV_REPLACE
    assert op_from_region("MPI_Allreduce_c") == Op.ALLREDUCE
    assert op_from_region("MPI_Init_thread") == Op.INIT
    assert op_from_region("MPI_Reduce_scatter_block") == Op.REDUCE_SCATTER_BLOCK
    assert op_from_region("MPI_Wtime") == Op.OTHER


def test_errors(tmp_path):
    with pytest.raises(InputError, match="no .otf2 anchor file in this folder"):
        read_otf2(tmp_path)
    bad = tmp_path / "x.otf2"
    bad.write_text("not an archive")
    with pytest.raises(InputError, match="not a readable OTF2 archive"):
        read_otf2(bad)


def test_cli_import(archive, tmp_path, capsys):
    from pmac.cli import main

    out = tmp_path / "signatures" / "demo"
    assert main(["import", "otf2", str(archive / "traces.otf2"), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}: 3 ranks, 21 MPI calls"
    assert load_signature(out).header.name == "demo"

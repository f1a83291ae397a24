"""The PMPI tracer on the calls beyond point-to-point and classic collectives: neighbourhood
collectives on cartesian, graph and distributed-graph topologies, intercommunicators, one-sided
communication, MPI-4 persistent collectives, and the same through mpi4py's large-count entry
points. Each test program (tests/data/tracer_*.c) says what it does; every count, peer and byte
below is worked out by hand from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pmac.trace import NONE, Op

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.requires("mpi")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Shim built once into a private cache; the C test programs compiled."""
    from pmac.mpi import find_mpi
    from pmac.shim_build import build_shim, detect_libmpi

    d = tmp_path_factory.mktemp("calls")
    mp = pytest.MonkeyPatch()
    mp.setenv("PMAC_CACHE_DIR", str(d / "cache"))
    mpi = find_mpi()
    progs = {}
    for name in ("neighbors", "intercomm", "rma", "persistent_coll"):
        exe = d / f"tracer_{name}"
        subprocess.run([mpi.mpicc, "-O1", "-o", str(exe), str(DATA / f"tracer_{name}.c")], check=True)
        progs[name] = str(exe)
    shim = build_shim(detect_libmpi(progs["rma"]))
    yield {"dir": d, "mpi": mpi, "progs": progs, "shim": shim}
    mp.undo()


def trace(env, n, argv, name):
    from pmac.tracer import trace_mpi

    res = trace_mpi([env["mpi"].mpiexec, "-n", str(n), *argv], env["dir"] / name, timeout_s=120)
    assert res.returncode == 0
    assert res.raw.unmatched == () and res.raw.warnings == ()
    return res


def calls(ev, rank):
    e = ev[ev["rank"] == rank]
    return {Op(o).name: int(c) for o, c in e["op"].value_counts().items()}


def rows(sig, rank, seq):
    """vcounts rows of one call as (peer, send_bytes, recv_bytes)."""
    v = sig.vcounts
    v = v[(v["rank"] == rank) & (v["seq"] == seq)]
    return list(zip(v["peer"].tolist(), v["send_bytes"].tolist(), v["recv_bytes"].tolist()))


def slots(out_peers, out_bytes, in_peers, in_bytes):
    """A neighbourhood collective's rows: out-neighbours (recv_bytes NONE), then in-neighbours."""
    return [(p, b, NONE) for p, b in zip(out_peers, out_bytes)] + [(p, NONE, b) for p, b in zip(in_peers, in_bytes)]


def completed_requests(sig, event):
    rq = sig.requests.iloc[int(event["req_offset"]): int(event["req_offset"]) + int(event["n_requests"])]
    assert (rq["rank"] == event["rank"]).all()
    return list(zip(rq["request"].tolist(), rq["completed"].tolist()))


def members(sig):
    return {int(c): g.sort_values("local_rank")["world_rank"].tolist() for c, g in sig.comms.groupby("comm")}


def test_neighbourhood_collectives_on_three_topologies(env):
    n = 4
    res = trace(env, n, [env["progs"]["neighbors"]], "neighbors")
    sig = res.signature
    ev = sig.events
    comm_of = {}
    for r in range(n):
        assert calls(ev, r) == {"INIT": 1, "COMM_SPLIT": 1, "CART_CREATE": 1, "NEIGHBOR_ALLTOALL": 3,
                                "NEIGHBOR_ALLGATHER": 2, "INEIGHBOR_ALLTOALL": 1, "INEIGHBOR_ALLGATHER": 1,
                                "WAIT": 2, "GRAPH_CREATE": 2, "COMM_FREE": 4, "BARRIER": 1, "FINALIZE": 1}
        e = ev[ev["rank"] == r].set_index("seq")
        assert [Op(int(o)).name for o in e["op"].iloc[2:14]] == [
            "CART_CREATE", "NEIGHBOR_ALLTOALL", "NEIGHBOR_ALLGATHER", "NEIGHBOR_ALLTOALL", "INEIGHBOR_ALLTOALL",
            "WAIT", "GRAPH_CREATE", "NEIGHBOR_ALLGATHER", "NEIGHBOR_ALLTOALL", "GRAPH_CREATE",
            "INEIGHBOR_ALLGATHER", "WAIT"]
        # 1-D non-periodic grid on the reversed world: local l = 3 - r, neighbours [l-1, l+1]
        # = world [r+1, r-1], MPI_PROC_NULL (NONE) past the ends
        l = n - 1 - r
        nb = [r + 1 if l > 0 else NONE, r - 1 if l < n - 1 else NONE]
        real = [p >= 0 for p in nb]
        want = {3: slots(nb, [24, 24], nb, [24, 24]), 4: slots(nb, [8, 8], nb, [8, 8]),
                5: slots(nb, [4 * (l + 1), 4 * (l + 2)], nb, [4 * (l + 1), 4 * (l + 2)]),
                6: slots(nb, [8, 8], nb, [8, 8])}
        # distributed graph: out to r+1, r+2, in from r-1, r-2 (mod 4); allgatherv sends r+1 ints,
        # receives src+1 ints from each source; alltoallw: 1 int to r+1, 2 doubles to r+2
        out, inn = [(r + 1) % n, (r + 2) % n], [(r - 1) % n, (r - 2) % n]
        want[9] = slots(out, [4 * (r + 1)] * 2, inn, [4 * (s + 1) for s in inn])
        want[10] = slots(out, [4, 16], inn, [4, 16])
        ring = [(r + 1) % n, (r - 1) % n]  # graph: node r's edges as given
        want[12] = slots(ring, [4, 4], ring, [4, 4])
        for seq, w in want.items():
            assert rows(sig, r, seq) == w, (r, seq)
            sb = sum(b for p, b, x in w if x == NONE and p >= 0)
            rb = sum(b for p, x, b in w if x == NONE and p >= 0)
            assert (e.loc[seq, "send_bytes"], e.loc[seq, "recv_bytes"]) == (sb, rb), (r, seq)
        assert e.loc[3, "send_bytes"] == 24 * sum(real)
        # the non-blocking ones create a request that the next Wait completes
        for seq in (6, 12):
            assert e.loc[seq, "request"] == seq
            assert completed_requests(sig, e.loc[seq + 1].to_dict() | {"rank": r}) == [(seq, 1)]
        comm_of[r] = (e.loc[3, "comm"], e.loc[9, "comm"], e.loc[12, "comm"])
        assert e.loc[2, "new_comm"] == comm_of[r][0] and e.loc[8, "new_comm"] == comm_of[r][1]
        assert e.loc[11, "new_comm"] == comm_of[r][2]
    assert len(set(comm_of.values())) == 1  # one id per communicator on every rank
    cart, dg, ring_c = comm_of[0]
    m = members(sig)
    assert m[cart] == [3, 2, 1, 0] and m[dg] == m[ring_c] == [0, 1, 2, 3] and len({cart, dg, ring_c}) == 3


def test_intercommunicators_translate_to_the_remote_group(env):
    n = 4
    sig = trace(env, n, [env["progs"]["intercomm"]], "intercomm").signature
    ev = sig.events
    m = members(sig)
    ids = set()
    for r in range(n):
        assert calls(ev, r) == {"INIT": 1, "COMM_SPLIT": 1, "INTERCOMM_CREATE": 1, "SEND": 1, "RECV": 1,
                                "COMM_DUP": 1, "IRECV": 1, "ISEND": 1, "WAITALL": 1, "INTERCOMM_MERGE": 1,
                                "BCAST": 1, "COMM_FREE": 4, "BARRIER": 1, "FINALIZE": 1}
        e = ev[ev["rank"] == r].set_index("seq")
        half, inter = int(e.loc[1, "new_comm"]), int(e.loc[2, "new_comm"])
        dup, merged = int(e.loc[5, "new_comm"]), int(e.loc[9, "new_comm"])
        assert m[half] == ([0, 2] if r % 2 == 0 else [1, 3]) and e.loc[2, "comm"] == half
        ids.add((inter, dup, merged))
        # the same remote rank l: world 2l+1 for the evens, 2l for the odds
        partner = r + 1 if r % 2 == 0 else r - 1
        send = e[e["op"] == Op.SEND].iloc[0]
        recv = e[e["op"] == Op.RECV].iloc[0]
        assert (send["dest"], send["comm"], send["send_bytes"]) == (partner, inter, 400 if r % 2 == 0 else 200)
        assert (recv["source"], recv["comm"], recv["recv_bytes"]) == (partner, inter, 200 if r % 2 == 0 else 400)
        # on the duplicate: the other member of the remote group
        other = (partner + 2) % n
        assert (e.loc[6, "source"], e.loc[7, "dest"], e.loc[6, "comm"], e.loc[7, "comm"]) == (other, other, dup, dup)
        # merged with the evens low: [0, 2, 1, 3]; local root 2 is world rank 1
        assert (e.loc[10, "comm"], e.loc[10, "root"]) == (merged, 1)
        assert (e.loc[10, "send_bytes"], e.loc[10, "recv_bytes"]) == ((40, 0) if r == 1 else (0, 40))
    assert len(ids) == 1  # both sides of an intercommunicator agree on its id
    inter, dup, merged = ids.pop()
    # an intercommunicator's rows: both groups, the one holding world rank 0 first
    assert m[inter] == m[dup] == m[merged] == [0, 2, 1, 3] and len({inter, dup, merged}) == 3


def test_one_sided_targets_and_bytes(env):
    from pmac.report_signature import format_signature, rma_bytes

    n = 4
    sig = trace(env, n, [env["progs"]["rma"]], "rma").signature
    ev = sig.events
    want_pairs: dict[tuple[int, int], int] = {}

    def add(i, j, b):
        if i != j:
            want_pairs[(i, j)] = want_pairs.get((i, j), 0) + b

    for r in range(n):
        assert calls(ev, r) == {"INIT": 1, "COMM_SPLIT": 1, "WIN_CREATE": 2, "WIN_FENCE": 2, "PUT": 2, "GET": 2,
                                "WIN_LOCK": 2, "ACCUMULATE": 4, "WIN_SYNC": 2, "WIN_UNLOCK": 2, "WIN_FREE": 2,
                                "WAITALL": 1, "COMM_FREE": 1, "BARRIER": 1, "FINALIZE": 1}
        e = ev[ev["rank"] == r].set_index("seq")
        rev = int(e.loc[1, "new_comm"])
        # window 1 on the reversed world: local target t is world rank 3 - t
        put_t, get_t = n - 1 - (n - 1 - r + 1) % n, n - 1 - (n - 1 - r + n - 1) % n
        assert (put_t, get_t) == ((r - 1) % n, (r + 1) % n)
        cols = ["op", "comm", "dest", "source", "send_bytes", "recv_bytes"]
        got = [tuple(int(x) for x in e.loc[s, cols]) for s in range(2, 15)]
        assert got == [
            (Op.WIN_CREATE, rev, NONE, NONE, 0, 0), (Op.WIN_FENCE, rev, NONE, NONE, 0, 0),
            (Op.PUT, rev, put_t, NONE, 80, 0), (Op.GET, rev, NONE, get_t, 0, 40),
            (Op.WIN_FENCE, rev, NONE, NONE, 0, 0), (Op.WIN_LOCK, rev, 3, NONE, 0, 0),
            (Op.ACCUMULATE, rev, 3, NONE, 24, 0), (Op.ACCUMULATE, rev, 3, 3, 16, 16),  # get_accumulate
            (Op.ACCUMULATE, rev, 3, 3, 8, 8), (Op.ACCUMULATE, rev, 3, 3, 16, 8),  # fetch_and_op, compare_and_swap
            (Op.WIN_SYNC, rev, 3, NONE, 0, 0), (Op.WIN_UNLOCK, rev, 3, NONE, 0, 0),
            (Op.WIN_FREE, rev, NONE, NONE, 0, 0)]
        # window 2 on the world: request-based put/get, completed by one Waitall
        got = [tuple(int(x) for x in e.loc[s, cols + ["request"]]) for s in range(15, 23)]
        assert got == [
            (Op.WIN_CREATE, 0, NONE, NONE, 0, 0, NONE), (Op.WIN_LOCK, 0, NONE, NONE, 0, 0, NONE),
            (Op.PUT, 0, (r + 1) % n, NONE, 48, 0, 17), (Op.GET, 0, NONE, (r - 1) % n, 0, 56, 18),
            (Op.WAITALL, NONE, NONE, NONE, 0, 0, NONE), (Op.WIN_SYNC, 0, NONE, NONE, 0, 0, NONE),
            (Op.WIN_UNLOCK, 0, NONE, NONE, 0, 0, NONE), (Op.WIN_FREE, 0, NONE, NONE, 0, 0, NONE)]
        assert completed_requests(sig, e.loc[19].to_dict() | {"rank": r}) == [(17, 1), (18, 1)]
        add(r, put_t, 80), add(get_t, r, 40), add(r, 3, 24 + 16 + 8 + 16), add(3, r, 16 + 8 + 8)
        add(r, (r + 1) % n, 48), add((r - 1) % n, r, 56)
    assert members(sig)[int(ev[ev["rank"] == 0].iloc[1]["new_comm"])] == [3, 2, 1, 0]
    assert rma_bytes(sig) == {k: float(v) for k, v in want_pairs.items()}
    text = format_signature(sig)  # pmac show counts them
    assert "one-sided calls (32 put/get/accumulate) move 1.16 KiB between distinct ranks" in text
    assert sum(want_pairs.values()) == 1184
    assert any(ln.split()[:2] == ["ACCUMULATE", "16"] for ln in text.splitlines())


@pytest.mark.parametrize("n", [1, 2, 4])
def test_persistent_collectives(env, n):
    sig = trace(env, n, [env["progs"]["persistent_coll"]], f"pcoll{n}").signature
    ev = sig.events
    root = n - 1
    for r in range(n):
        assert calls(ev, r) == {"INIT": 1, "COLL_INIT": 3, "STARTALL": 3, "WAITALL": 3, "START": 1, "WAIT": 1,
                                "REQUEST_FREE": 3, "BARRIER": 1, "FINALIZE": 1}
        e = ev[ev["rank"] == r].set_index("seq")
        cols = ["op", "send_tag", "root", "send_bytes", "recv_bytes", "request"]
        got = [tuple(int(x) for x in e.loc[s, cols]) for s in (1, 2, 3)]
        total = 4 * n * (n + 1) // 2
        assert got == [(Op.COLL_INIT, Op.IALLREDUCE, NONE, 32, 32, 1),
                       (Op.COLL_INIT, Op.IBCAST, root, 40 if r == root else 0, 0 if r == root else 40, 2),
                       (Op.COLL_INIT, Op.IALLGATHERV, NONE, 4 * (r + 1), total, 3)]
        assert rows(sig, r, 3) == [(p, 4 * (r + 1), 4 * (p + 1)) for p in range(n)]
        for s in (4, 6, 8):  # each Startall names the three requests, the Waitall completes them
            assert e.loc[s, "op"] == Op.STARTALL and e.loc[s + 1, "op"] == Op.WAITALL
            assert completed_requests(sig, e.loc[s].to_dict() | {"rank": r}) == [(1, 0), (2, 0), (3, 0)]
            assert completed_requests(sig, e.loc[s + 1].to_dict() | {"rank": r}) == [(1, 1), (2, 1), (3, 1)]
        assert e.loc[10, "request"] == 1 and completed_requests(sig, e.loc[11].to_dict() | {"rank": r}) == [(1, 1)]
        assert sorted(e[e["op"] == Op.REQUEST_FREE]["request"]) == [1, 2, 3]


def test_mpi4py_large_count_entry_points(env):
    """mpi4py on MPICH 5 reaches these calls through MPI_*_c: 8 per rank here."""
    res = trace(env, 2, [sys.executable, str(DATA / "tracer_mpi4py_calls.py")], "py_calls")
    sig = res.signature
    ev = sig.events
    assert res.raw.stats["n_large_count_calls"] == 2 * 8
    for r in range(2):
        assert calls(ev, r) == {"INIT": 1, "CART_CREATE": 1, "NEIGHBOR_ALLTOALL": 1, "INEIGHBOR_ALLGATHER": 1,
                                "WAIT": 5, "WIN_CREATE": 1, "WIN_FENCE": 2, "PUT": 1, "GET": 1, "WIN_FREE": 1,
                                "COLL_INIT": 1, "START": 2, "REQUEST_FREE": 1, "IREDUCE_SCATTER_BLOCK": 1,
                                "IALLTOALLW": 1, "COMM_FREE": 1, "FINALIZE": 1}
        e = ev[ev["rank"] == r].set_index("seq")
        o = 1 - r  # periodic 1-D grid of 2: both neighbours are the other rank
        assert rows(sig, r, 2) == slots([o, o], [24, 24], [o, o], [24, 24])
        assert rows(sig, r, 3) == slots([o, o], [16, 16], [o, o], [16, 16])
        assert (e.loc[7, "op"], e.loc[7, "dest"], e.loc[7, "send_bytes"]) == (Op.PUT, o, 40)
        assert (e.loc[8, "op"], e.loc[8, "source"], e.loc[8, "recv_bytes"]) == (Op.GET, o, 16)
        init = e.loc[11]
        assert (init["op"], init["send_tag"], init["send_bytes"], init["request"]) == (Op.COLL_INIT, Op.IALLREDUCE, 24, 11)
        assert list(e[e["op"] == Op.START]["request"]) == [11, 11]
        rsb, a2aw = e.loc[17], e.loc[19]  # 2 ranks: sends 4 doubles, gets 2; sends p+1 doubles to p, gets r+1
        assert (rsb["op"], rsb["send_bytes"], rsb["recv_bytes"], rsb["request"]) == (Op.IREDUCE_SCATTER_BLOCK, 32, 16, 17)
        assert (a2aw["op"], a2aw["send_bytes"], a2aw["recv_bytes"], a2aw["request"]) == (Op.IALLTOALLW, 24, 16 * (r + 1), 19)
        assert rows(sig, r, 19) == [(0, 8, 8 * (r + 1)), (1, 16, 8 * (r + 1))]
        assert completed_requests(sig, e.loc[20].to_dict() | {"rank": r}) == [(19, 1)]


def test_every_new_op_is_wrapped_in_both_count_variants():
    from pmac import shim_gen

    names = set(shim_gen.wrapped_names())
    for fam in ("Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
                "Neighbor_alltoallw"):
        for pre in ("MPI_", "MPI_I"):
            name = pre + (fam if pre == "MPI_" else fam[0].lower() + fam[1:])
            assert {name, name + "_c"} <= names
        assert {f"MPI_{fam}_init", f"MPI_{fam}_init_c"} <= names
    for name in ("MPI_Allreduce_init", "MPI_Bcast_init", "MPI_Alltoallw_init", "MPI_Reduce_scatter_block_init",
                 "MPI_Put", "MPI_Rget_accumulate", "MPI_Win_allocate_shared", "MPI_Ialltoallw",
                 "MPI_Ireduce_scatter_block"):
        assert {name, name + "_c"} <= names
    assert {"MPI_Barrier_init", "MPI_Fetch_and_op", "MPI_Compare_and_swap", "MPI_Win_fence", "MPI_Intercomm_create",
            "MPI_Intercomm_merge", "MPI_Dist_graph_create_adjacent", "MPI_Graph_create"} <= names
    fortran = set(shim_gen.fortran_names())
    assert {"mpi_neighbor_alltoallv_", "mpi_put_", "mpi_win_fence_", "mpi_intercomm_merge_"} <= fortran
    assert "mpi_allreduce_init_" not in fortran  # MPI-4 only: not in Open MPI 4's Fortran layer
    src = shim_gen.generate()
    assert "ompi_send_f(" in src and 'alias("mpi_send_")' in src  # use mpi_f08 in Open MPI
    assert len(shim_gen.wrapped_names()) == len(names)  # no name twice


def test_every_wrapper_is_an_entry_point_of_the_mpi_library(env):
    """Against MPICH 5 (MPI 4.1): each wrapped name is exported by the library and by the shim,
    so a misspelt row cannot silently wrap nothing."""
    from pmac import shim_gen

    def exported(lib):
        out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout
        return {ln.split()[-1] for ln in out.splitlines() if ln.split()[-2:-1] in (["T"], ["W"])}

    names = set(shim_gen.wrapped_names())
    assert names - exported(env["shim"].libmpi) == set()
    assert names - exported(env["shim"].library) == set()


@pytest.mark.requires("mpi", "gfortran")
def test_fortran_2008_binding_open_mpi(env):
    """`use mpi_f08`: Open MPI's MPI_Send_f08 calls ompi_send_f, not mpi_send_ nor MPI_Send; the shim
    wraps that name too (same arguments as mpif.h), so each call is recorded exactly once."""
    import shutil

    from pmac.mpi import find_mpi, launch_command
    from pmac.tracer import trace_mpi

    fc, run = shutil.which("mpifort.openmpi"), shutil.which("mpiexec.openmpi")
    if not (fc and run):
        pytest.skip("system Open MPI + gfortran not installed (apt-get install libopenmpi-dev openmpi-bin gfortran)")
    exe = env["dir"] / "tracer_f08"
    subprocess.run([fc, "-O1", "-o", str(exe), str(DATA / "tracer_f08.f90")], check=True)
    n = 4
    res = trace_mpi(launch_command(n, [str(exe)], mpi=find_mpi(run)), env["dir"] / "f08", timeout_s=120)
    assert res.returncode == 0 and res.raw.unmatched == () and res.raw.warnings == ()
    assert "mpifh" in res.shim.fortran_library
    sig = res.signature
    ev = sig.events
    for r in range(n):
        want = {"INIT": 1, "IRECV": 1, "ISEND": 1, "WAITALL": 1, "ALLREDUCE": 1, "COMM_SPLIT": 1, "BCAST": 1,
                "COMM_FREE": 1, "BARRIER": 1, "FINALIZE": 1}
        if r == 0:
            want["SEND"] = 1
        if r == n - 1:
            want["RECV"] = 1
        assert calls(ev, r) == want
        e = ev[ev["rank"] == r].set_index("seq")
        assert (e.loc[1, "op"], e.loc[1, "source"], e.loc[1, "recv_bytes"]) == (Op.IRECV, (r - 1) % n, 800)
        assert (e.loc[2, "op"], e.loc[2, "dest"], e.loc[2, "send_bytes"]) == (Op.ISEND, (r + 1) % n, 800)
        assert completed_requests(sig, e.loc[3].to_dict() | {"rank": r}) == [(1, 1), (2, 1)]
        bc = e[e["op"] == Op.BCAST].iloc[0]  # colour r % 2, key n - r: local 0 is the highest world rank
        assert (bc["root"], bc["send_bytes"] + bc["recv_bytes"]) == (2 + r % 2, 16)
    recv = ev[ev["op"] == Op.RECV].iloc[0]  # MPI_ANY_SOURCE / MPI_ANY_TAG: from the type(MPI_Status)
    assert (recv["source"], recv["recv_tag"], recv["recv_bytes"]) == (0, 9, 40)

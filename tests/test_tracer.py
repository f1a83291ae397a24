"""The PMPI tracer: shim build, exact event counts and bytes, mpi4py (_c and matched probes),
persistent requests, waits matched to requests, communicator translation, crashes, truncation,
statically linked programs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pmac.errors import InputError, TruncatedError
from pmac.rawtrace import HEADER_BYTES, RECORD_BYTES, read_raw_dir, read_raw_file
from pmac.trace import Op

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.requires("mpi")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Shim built once into a private cache; the C test program compiled."""
    from pmac.mpi import find_mpi
    from pmac.shim_build import build_shim, detect_libmpi

    d = tmp_path_factory.mktemp("tracer")
    mp = pytest.MonkeyPatch()
    mp.setenv("PMAC_CACHE_DIR", str(d / "cache"))
    mpi = find_mpi()
    app = d / "tracer_app"
    subprocess.run([mpi.mpicc, "-O1", "-o", str(app), str(DATA / "tracer_app.c")], check=True)
    shim = build_shim(detect_libmpi(str(app)))
    yield {"dir": d, "mpi": mpi, "app": str(app), "shim": shim}
    mp.undo()


def _trace(env, n, args, name, timeout_s=60, **kw):
    from pmac.tracer import trace_mpi

    argv = [env["mpi"].mpiexec, "-n", str(n), *args]
    return trace_mpi(argv, env["dir"] / name, timeout_s=timeout_s, **kw)


def pd_concat_requests(rq, calls):
    """The request rows named by these completion calls."""
    import pandas as pd

    return pd.concat([rq.iloc[int(c["req_offset"]): int(c["req_offset"]) + int(c["n_requests"])]
                      for _, c in calls.iterrows()])


def _counts(ev, rank):
    e = ev[ev["rank"] == rank]
    return {Op(o).name: int(c) for o, c in e["op"].value_counts().items()}


def test_shim_is_cached_and_wraps_classic_and_large_count(env):
    from pmac.shim_build import build_shim

    again = build_shim(env["shim"].libmpi)
    assert again.library == env["shim"].library  # cache hit, no rebuild
    out = subprocess.run(["nm", "-D", "--defined-only", env["shim"].library], capture_output=True, text=True).stdout
    syms = {ln.split()[-1] for ln in out.splitlines() if " T " in ln}
    for name in ("MPI_Send", "MPI_Send_c", "MPI_Mprobe", "MPI_Mrecv", "MPI_Mrecv_c", "MPI_Sendrecv_replace_c",
                 "MPI_Send_init", "MPI_Startall", "MPI_Ialltoallv_c", "MPI_Waitsome", "MPI_Comm_split",
                 "MPI_Init_thread", "MPI_Finalize"):
        assert name in syms
    assert not any(s.startswith("pmac_") for s in syms)  # runtime stays private


@pytest.mark.parametrize("n", [1, 2, 4])
def test_c_program_exact_counts_and_bytes(env, n):
    iters, nbytes = 3, 1000
    res = _trace(env, n, [env["app"], str(iters), str(nbytes)], f"c{n}")
    assert res.returncode == 0
    assert res.raw.unmatched == () and res.raw.warnings == ()
    # the valgrind client requests (memory-tracer contract) are compiled in where the header exists
    assert res.raw.has_valgrind == Path("/usr/include/valgrind/valgrind.h").exists()
    ev = res.signature.events
    for r in range(n):
        expect = {"INIT": 1, "SEND_INIT": 1, "RECV_INIT": 1, "IRECV": iters, "ISEND": iters, "WAITALL": 2 * iters,
                  "SENDRECV": iters, "ALLREDUCE": iters, "STARTALL": iters, "REQUEST_FREE": 2, "COMM_SPLIT": 1,
                  "BCAST": 1, "GATHERV": 1, "COMM_FREE": 1, "BARRIER": 1, "FINALIZE": 1}
        if r == 0 and n > 1:
            expect["SEND"] = n - 1
        elif r > 0:
            expect["RECV"] = 1
        assert _counts(ev, r) == expect
        e = ev[ev["rank"] == r]
        assert list(e["seq"]) == list(range(len(e)))
        assert (e["burst_s"] >= 0).all() and (e["t_end_s"] >= e["t_start_s"]).all()
    # bytes, by hand: ring 3x (isend + sendrecv) + persistent send (once, at init) + allreduce 4 doubles
    # + rank 0's 100-int sends + bcast of 10 ints at the root of each half + gatherv (rank+1) ints
    expect_send = n * (nbytes + 2 * iters * nbytes + iters * 32) + (n - 1) * 400 + min(n, 2) * 40 \
        + 4 * n * (n + 1) // 2
    assert int(ev["send_bytes"].sum()) == expect_send
    recv = ev[ev["op"] == Op.RECV]
    assert list(recv["source"]) == [0] * (n - 1) and list(recv["recv_bytes"]) == [400] * (n - 1)
    assert list(recv["recv_tag"]) == [5] * (n - 1)
    gv = res.signature.vcounts
    assert list(gv["peer"]) == list(range(n)) and list(gv["recv_bytes"]) == [4 * (p + 1) for p in range(n)]
    assert (gv["rank"] == 0).all()
    # the signature written to disk reads back identically
    from pmac.signature import load_signature

    back = load_signature(res.path)
    assert back.header.source_format == "pmpi" and back.header.n_ranks == n
    assert back.header.mpi_thread_level == "single"   # MPI_Init (MPICH's default level)
    assert back.events.equals(ev) and back.requests.equals(res.signature.requests)


def test_waits_match_requests_and_persistent(env):
    res = _trace(env, 2, [env["app"], "2", "64"], "req")
    ev, rq = res.signature.events, res.signature.requests
    for r in range(2):
        e = ev[ev["rank"] == r].set_index("seq")
        left = (r - 1) % 2
        send_init = int(e.index[e["op"] == Op.SEND_INIT][0])
        recv_init = int(e.index[e["op"] == Op.RECV_INIT][0])
        for seq in e.index[e["op"] == Op.WAITALL]:
            row = e.loc[seq]
            reqs = rq.iloc[int(row["req_offset"]): int(row["req_offset"]) + int(row["n_requests"])]
            assert (reqs["rank"] == r).all() and (reqs["completed"] == 1).all() and len(reqs) == 2
            prev = e.loc[seq - 1]
            if prev["op"] == Op.STARTALL:  # persistent: the wait names the Send_init/Recv_init requests
                assert list(reqs["request"]) == [send_init, recv_init]
            else:  # irecv (seq-3), isend (seq-2)
                assert list(reqs["request"]) == [seq - 2, seq - 1]
                assert e.loc[seq - 2, "op"] == Op.IRECV and e.loc[seq - 2, "request"] == seq - 2
            is_recv = reqs["request"].isin([recv_init, seq - 2]).to_numpy()
            assert is_recv.sum() == 1
            recv_req, send_req = reqs[is_recv].iloc[0], reqs[~is_recv].iloc[0]
            assert recv_req["source"] == left and recv_req["recv_bytes"] == 64
            assert send_req["source"] == -1  # a send request's status has no source
        frees = e[e["op"] == Op.REQUEST_FREE]
        assert sorted(frees["request"]) == [send_init, recv_init]


def test_comm_split_translated_to_world_ranks(env):
    res = _trace(env, 4, [env["app"], "1", "8"], "split")
    sig = res.signature
    ev, comms = sig.events, sig.comms
    split = ev[ev["op"] == Op.COMM_SPLIT].set_index("rank")["new_comm"]
    # colour = rank % 2, key = size - rank: local order reverses the world order
    assert split[0] == split[2] and split[1] == split[3] and split[0] != split[1]
    members = {c: list(g.sort_values("local_rank")["world_rank"]) for c, g in comms.groupby("comm")}
    assert members[0] == [0, 1, 2, 3]
    assert members[int(split[0])] == [2, 0] and members[int(split[1])] == [3, 1]
    bc = ev[ev["op"] == Op.BCAST].set_index("rank")
    assert list(bc["root"]) == [2, 3, 2, 3]  # local root 0 -> world rank
    assert list(bc["comm"]) == [split[0], split[1], split[0], split[1]]
    assert list(bc["send_bytes"]) == [0, 0, 40, 40] and list(bc["recv_bytes"]) == [40, 40, 0, 0]
    free = ev[ev["op"] == Op.COMM_FREE].set_index("rank")["comm"]
    assert list(free) == list(split)


def test_mpi4py_large_count_and_matched_probes(env):
    from pmac.shim_build import detect_libmpi

    py = sys.executable
    assert detect_libmpi(py) == env["shim"].libmpi  # found from the process's loaded objects
    res = _trace(env, 2, [py, str(DATA / "tracer_mpi4py.py")], "py")
    assert res.returncode == 0 and res.raw.unmatched == ()
    # mpi4py on MPI 4+ enters through MPI_*_c: without those wrappers this would be 0
    assert res.raw.stats["n_large_count_calls"] > 0
    assert res.signature.header.mpi_thread_level == "multiple"   # mpi4py's default MPI_Init_thread
    ev = res.signature.events
    for r in range(2):
        c = _counts(ev, r)
        assert c == {"INIT": 1, "SEND": 1, "MPROBE": 1, "MRECV": 1, "IRECV": 2, "ISEND": 2, "WAITALL": 3,
                     "WAITANY": 1, "WAITSOME": 1, "ALLGATHERV": 1, "REDUCE_SCATTER": 1,
                     "SENDRECV": 1, "SEND_INIT": 1, "RECV_INIT": 1, "STARTALL": 2, "REQUEST_FREE": 2,
                     "ALLREDUCE": 1, "COMM_SPLIT": 1, "BCAST": 1, "COMM_FREE": 1, "BARRIER": 1, "FINALIZE": 1}
        e = ev[ev["rank"] == r]
        mrecv = e[e["op"] == Op.MRECV].iloc[0]
        assert mrecv["source"] == 1 - r and mrecv["recv_tag"] == 1 and mrecv["comm"] == 0
        assert mrecv["recv_bytes"] == e[e["op"] == Op.SEND].iloc[0]["send_bytes"] > 0
        assert int(e[e["op"] == Op.ISEND]["send_bytes"].iloc[0]) == 800
        assert int(e[e["op"] == Op.ALLREDUCE]["recv_bytes"].iloc[0]) == 800
        # the clock (TSC calibrated against CLOCK_MONOTONIC, or CLOCK_MONOTONIC) measures a 50 ms sleep
        assert 0.05 <= float(e[e["op"] == Op.BARRIER]["burst_s"].iloc[0]) < 0.09
        assert 0 < e.iloc[0]["t_start_s"] < e.iloc[0]["t_end_s"]  # MPI_Init is timed
        # vector collectives (pmac.trace conventions): allgatherv sends its block, receives all blocks;
        # reduce_scatter sends the whole vector, receives its block; per-peer counts in vcounts
        agv = e[e["op"] == Op.ALLGATHERV].iloc[0]
        assert (agv["send_bytes"], agv["recv_bytes"]) == (8 * (r + 1), 8 * 3)
        rsc = e[e["op"] == Op.REDUCE_SCATTER].iloc[0]
        assert (rsc["send_bytes"], rsc["recv_bytes"]) == (8 * 3, 8 * (r + 1))
        vc = res.signature.vcounts
        v = vc[(vc["rank"] == r) & (vc["seq"] == agv["seq"])]
        assert list(v["peer"]) == [0, 1] and list(v["send_bytes"]) == [8 * (r + 1)] * 2 and list(v["recv_bytes"]) == [8, 16]
        v = vc[(vc["rank"] == r) & (vc["seq"] == rsc["seq"])]
        assert list(v["send_bytes"]) == [8, 16] and list(v["recv_bytes"]) == [8 * (r + 1)] * 2
        # Waitany completes one of the two, Waitsome the other (the first is MPI_REQUEST_NULL by then)
        rq = res.signature.requests
        irecv2, isend2 = e[e["op"] == Op.IRECV]["seq"].iloc[1], e[e["op"] == Op.ISEND]["seq"].iloc[1]
        wany, wsome = e[e["op"] == Op.WAITANY].iloc[0], e[e["op"] == Op.WAITSOME].iloc[0]
        ra = rq.iloc[int(wany["req_offset"]): int(wany["req_offset"]) + 2]
        rs = rq.iloc[int(wsome["req_offset"]): int(wsome["req_offset"]) + 2]
        assert list(ra["request"]) == [irecv2, isend2] and ra["completed"].sum() == 1
        done_first = int(ra["request"][ra["completed"] == 1].iloc[0])
        assert list(rs["completed"]) == ([0, 1] if done_first == irecv2 else [1, 0])
        assert int(rs[rs["completed"] == 1]["request"].iloc[0]) != done_first
        both = rq.iloc[list(ra.index) + list(rs.index)]
        got = both[(both["request"] == irecv2) & (both["completed"] == 1)].iloc[0]
        assert (got["source"], got["recv_bytes"]) == (1 - r, 800)


@pytest.mark.parametrize("crash", [1, 2], ids=["abort", "sigterm"])
def test_killed_program_still_loads(env, crash):
    from pmac.signature import load_signature

    res = _trace(env, 1, [env["app"], "2", "16", str(crash)], f"crash{crash}")
    assert res.returncode != 0
    sig = load_signature(res.path)
    c = _counts(sig.events, 0)
    assert c == {"INIT": 1, "SEND_INIT": 1, "RECV_INIT": 1, "IRECV": 2, "ISEND": 2, "WAITALL": 4, "SENDRECV": 2,
                 "ALLREDUCE": 2, "STARTALL": 2, "REQUEST_FREE": 2}


def test_truncated_raw_file_is_reported(env, tmp_path):
    res = _trace(env, 2, [env["app"], "1", "8"], "raw", keep_raw=True)
    raw = tmp_path / "raw"
    raw.mkdir()
    f0, f1 = sorted((res.path / "raw").glob("rank-*.pmr"))
    data = f1.read_bytes()
    n = (len(data) - HEADER_BYTES) // RECORD_BYTES
    (raw / f0.name).write_bytes(f0.read_bytes())
    (raw / f1.name).write_bytes(data[: HEADER_BYTES + (n - 3) * RECORD_BYTES + 40])  # cut inside a record
    rr = read_raw_file(raw / f1.name)
    assert rr.truncated_bytes == 40 and len(rr.records) == n - 3
    t = read_raw_dir(raw)
    assert t.truncated_ranks == (1,)
    assert any("truncated inside a record (40 trailing bytes" in w and f1.name in w for w in t.warnings)
    full = res.signature.events
    assert len(t.events[t.events["rank"] == 1]) < len(full[full["rank"] == 1])
    (raw / f1.name).write_bytes(data[:100])
    with pytest.raises(TruncatedError, match="shorter than the 128-byte header"):
        read_raw_file(raw / f1.name)
    (raw / f1.name).write_bytes(b"X" * 300)
    with pytest.raises(InputError, match="bad magic"):
        read_raw_file(raw / f1.name)


def test_statically_linked_program_refused(env, tmp_path, capsys):
    from pmac.cli import main

    src = tmp_path / "s.c"
    src.write_text("int main(void) { return 0; }\n")
    exe = tmp_path / "static_prog"
    r = subprocess.run(["cc", "-static", "-o", str(exe), str(src)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("no static libc to build the test program")
    rc = main(["trace", "-o", str(tmp_path / "sig"), "--", env["mpi"].mpiexec, "-n", "1", str(exe)])
    err = capsys.readouterr().err
    assert rc == 2 and "statically linked" in err and str(exe) in err and len(err.strip().splitlines()) == 1


def test_output_path_that_is_a_file_is_refused_before_running(env, tmp_path, capsys):
    from pmac.cli import main

    f = tmp_path / "taken"
    f.write_text("x")
    rc = main(["trace", "-o", str(f), "--", env["mpi"].mpiexec, "-n", "1", env["app"]])
    err = capsys.readouterr().err
    assert rc == 2 and "exists and is not a folder" in err and str(f) in err and len(err.strip().splitlines()) == 1
    assert f.read_text() == "x"


def test_cli_trace_end_to_end(env, capsys):
    from pmac.cli import main

    out = env["dir"] / "cli_sig"
    rc = main(["trace", "-o", str(out), "--param", "iters=2", "--", env["mpi"].mpiexec, "-n", "2", env["app"], "2", "32"])
    text = capsys.readouterr().out
    assert rc == 0 and "2 ranks" in text and "WAITALL 8" in text
    from pmac.signature import load_signature

    sig = load_signature(out)
    assert sig.header.parameters == {"iters": 2} and sig.header.rank_hosts and sig.header.mpi_library
    assert len(sig.events) == 2 * 25 + 2  # 25 calls per rank at 2 iterations, plus rank 0 send + rank 1 receive


def test_unmatched_send_reported(env, tmp_path):
    """Edit rank 1's raw receive to another tag: the reader reports both streams."""
    from pmac.rawtrace import RECORD_DTYPE

    res = _trace(env, 2, [env["app"], "1", "8"], "unmatched", keep_raw=True)
    assert res.raw.unmatched == ()
    f0, f1 = sorted((res.path / "raw").glob("rank-*.pmr"))
    data = bytearray(f1.read_bytes())
    recs = np.frombuffer(data, RECORD_DTYPE, offset=HEADER_BYTES)
    i = int(np.flatnonzero((recs["type"] == 1) & (recs["op"] == int(Op.RECV)))[0])
    rec = recs[i].copy()
    rec["recv_tag"] = 6
    data[HEADER_BYTES + i * RECORD_BYTES: HEADER_BYTES + (i + 1) * RECORD_BYTES] = rec.tobytes()
    (tmp_path / f0.name).write_bytes(f0.read_bytes())
    (tmp_path / f1.name).write_bytes(bytes(data))
    t = read_raw_dir(tmp_path)
    assert t.unmatched == ("comm 0 0->1 tag 5: 1 send(s), 0 receive(s)", "comm 0 0->1 tag 6: 0 send(s), 1 receive(s)")
    assert any("2 unmatched send/receive stream(s)" in w for w in t.warnings)
    rec["recv_tag"], rec["recv_bytes"] = 5, 396  # right stream, wrong size
    data[HEADER_BYTES + i * RECORD_BYTES: HEADER_BYTES + (i + 1) * RECORD_BYTES] = rec.tobytes()
    (tmp_path / f1.name).write_bytes(bytes(data))
    assert read_raw_dir(tmp_path).unmatched == ("comm 0 0->1 tag 5: message 0 sends 400 bytes, its receive gets 396",)


def test_memory_flag_without_memtrace(env, capsys, monkeypatch):
    """A build without pmac.memtrace says so (simulated: the module made unimportable)."""
    from pmac.cli import main

    monkeypatch.setitem(sys.modules, "pmac.memtrace", None)
    rc = main(["trace", "-o", str(env["dir"] / "mem"), "--memory", "--no-mpi", "--", env["app"]])
    assert rc == 2 and "memory tracing not available in this build" in capsys.readouterr().err


def _openmpi_tools():
    import shutil

    fc, run = shutil.which("mpifort.openmpi"), shutil.which("mpiexec.openmpi")
    return (fc, run) if fc and run and shutil.which("gfortran") else None


@pytest.mark.requires("gfortran")
@pytest.mark.parametrize("n", [2, 4])
def test_fortran_open_mpi(env, n):
    """Open MPI's Fortran layer calls PMPI_* directly: the shim wraps mpi_*_ with handle conversion."""
    from pmac.mpi import find_mpi, launch_command
    from pmac.shim_build import shim_for
    from pmac.tracer import trace_mpi

    tools = _openmpi_tools()
    if tools is None:
        pytest.skip("system Open MPI + gfortran not installed (apt-get install libopenmpi-dev openmpi-bin gfortran)")
    fc, run = tools
    exe = env["dir"] / "tracer_fortran"
    if not exe.exists():  # built once per session
        subprocess.run([fc, "-O1", "-o", str(exe), str(DATA / "tracer_fortran.f90")], check=True)
    argv = launch_command(n, [str(exe)], mpi=find_mpi(run))
    shim = shim_for(argv)
    assert "libmpi.so" in Path(shim.libmpi).name and "mpifh" in shim.fortran_library
    res = trace_mpi(argv, env["dir"] / f"fortran{n}", timeout_s=120)
    assert res.returncode == 0 and res.raw.unmatched == ()
    ev = res.signature.events
    for r in range(n):
        expect = {"INIT": 1, "IRECV": 3, "ISEND": 3, "WAITALL": 2, "WAITANY": 1, "WAITSOME": 1, "SENDRECV": 1,
                  "ALLREDUCE": 1, "ALLGATHER": 1,
                  "COMM_SPLIT": 1,
                  "BCAST": 1, "COMM_FREE": 1, "BARRIER": 1, "FINALIZE": 1}
        if r == 0:
            expect["SEND"] = 1
        if r == n - 1:
            expect["RECV"] = 1
        assert _counts(ev, r) == expect  # each call once: no double count through the C wrappers
    assert res.signature.header.mpi_thread_level == "single"   # Fortran MPI_Init, through the C wrapper
    recv = ev[ev["op"] == Op.RECV].iloc[0]  # MPI_ANY_SOURCE, MPI_STATUS_IGNORE: the shim's own status
    assert (recv["source"], recv["recv_tag"], recv["recv_bytes"]) == (0, 9, 40)
    assert int(ev[ev["op"] == Op.ISEND]["send_bytes"].sum()) == 3 * n * 800
    rq = res.signature.requests
    for r in range(n):  # Waitany + Waitsome complete the third irecv/isend pair exactly once each
        e = ev[ev["rank"] == r]
        irecv3, isend3 = e[e["op"] == Op.IRECV]["seq"].iloc[2], e[e["op"] == Op.ISEND]["seq"].iloc[2]
        rows = pd_concat_requests(rq, e[e["op"].isin([Op.WAITANY, Op.WAITSOME])])
        done = rows[rows["completed"] == 1]
        assert sorted(done["request"]) == [irecv3, isend3]
        got = done[done["request"] == irecv3].iloc[0]
        assert (got["source"], got["recv_bytes"]) == ((r - 1) % n, 800)
    waits = ev[ev["op"] == Op.WAITALL]
    assert (pd_concat_requests(rq, waits)["completed"] == 1).all()
    ag = ev[ev["op"] == Op.ALLGATHER]  # Fortran MPI_IN_PLACE recognised: own block = 2 doubles
    assert list(ag["send_bytes"]) == [16] * n and list(ag["recv_bytes"]) == [16 * n] * n
    bc = ev[ev["op"] == Op.BCAST].sort_values("rank")
    expect_root = [max(q for q in range(n) if q % 2 == r % 2) for r in range(n)]  # key = n - rank
    assert list(bc["root"]) == expect_root


def test_find_program_and_wrapper_script(env, tmp_path):
    from pmac.shim_build import detect_libmpi, find_program

    wrap = tmp_path / "run.sh"
    wrap.write_text(f'#!/bin/sh\nexec {env["app"]} "$@"\n')
    wrap.chmod(0o755)
    argv = [env["mpi"].mpiexec, "-n", "2", "-genv", "X", "1", str(wrap), "3"]
    assert find_program(argv) == str(wrap)
    assert find_program([env["app"], "1"]) == env["app"]
    # a script is not ELF: the project's MPI is assumed, the same library the C program loads
    assert detect_libmpi(str(wrap)) == detect_libmpi(env["app"]) == env["shim"].libmpi
    with pytest.raises(InputError, match="cannot find the program to trace"):
        find_program([env["mpi"].mpiexec, "-n", "2"])


def test_every_op_has_a_wrapper():
    from pmac import shim_gen

    assert {w.op for w in shim_gen.WRAPPERS} == set(Op)
    names = shim_gen.wrapped_names()
    assert len(names) == len(set(names)) and "MPI_Allreduce_c" in names and "MPI_Ibarrier" in names
    assert "mpi_send_" in shim_gen.fortran_names() and "mpi_mprobe_" not in shim_gen.fortran_names()
    src = shim_gen.generate()
    assert "VG_USERREQ_TOOL_BASE('P','M') + 0, seq" in src  # the memory-tracer contract heads the source


def test_timeout_stops_the_ranks_and_keeps_their_records(env, tmp_path):
    """A hanging program: the timeout sends SIGTERM to the whole process group; records survive."""
    src = tmp_path / "hang.c"
    src.write_text("#include <mpi.h>\n#include <unistd.h>\nint main(int c, char **v) { MPI_Init(&c, &v); "
                   "MPI_Barrier(MPI_COMM_WORLD); for (;;) pause(); }\n")
    exe = tmp_path / "hang"
    subprocess.run([env["mpi"].mpicc, "-o", str(exe), str(src)], check=True)
    res = _trace(env, 2, [str(exe)], "hang", timeout_s=3)
    assert res.returncode != 0
    ev = res.signature.events
    assert [Op(o).name for o in ev[ev["rank"] == 0]["op"]] == ["INIT", "BARRIER"]
    assert sorted(ev["rank"].unique()) == [0, 1]


def test_sigterm_in_every_thread_at_once_writes_the_records_once(env, tmp_path):
    """A stopped job's rank gets SIGTERM twice (pmac, then Hydra's forward) and an MPICH rank has two
    threads: both handlers ran at once and wrote the buffer twice or cut each other short (CI saw
    INIT, BARRIER, INIT, BARRIER). Here each thread of each rank gets SIGTERM back to back."""
    import ctypes
    import signal
    import time

    from pmac.mpi import _running, _stat_fields, mpi_env
    from pmac.tracer import preload_env, shim_for

    src = tmp_path / "calls.c"
    src.write_text("#include <mpi.h>\n#include <stdio.h>\n#include <unistd.h>\nint main(int c, char **v) { "
                   "MPI_Init(&c, &v); for (int i = 0; i < 6000; i++) MPI_Barrier(MPI_COMM_WORLD); "
                   "FILE *f = fopen(v[1], \"a\"); fprintf(f, \"%d\\n\", (int)getpid()); fclose(f); "
                   "for (;;) pause(); }\n")
    exe, pids_file = tmp_path / "calls", tmp_path / "pids"
    subprocess.run([env["mpi"].mpicc, "-o", str(exe), str(src)], check=True)
    tgkill = ctypes.CDLL(None, use_errno=True).syscall  # SYS_tgkill is 234 on x86-64
    if os.uname().machine != "x86_64":
        pytest.skip("the tgkill syscall number here is x86-64's")
    base = mpi_env(None)
    for attempt in range(10):  # the old race showed in one try in three to ten
        raw = tmp_path / f"raw{attempt}"
        raw.mkdir()
        pids_file.write_text("")
        argv = [env["mpi"].mpiexec, "-n", "2", str(exe), str(pids_file)]
        proc = subprocess.Popen(argv, env=preload_env(shim_for(argv, base), raw, base), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while len(pids_file.read_text().split()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        pids = [int(x) for x in pids_file.read_text().split()]
        threads = {pid: [int(t) for t in os.listdir(f"/proc/{pid}/task")] for pid in pids}
        # the launchers held still first, as pmac.mpi.stop_job does: Hydra SIGKILLs the other ranks
        # when one dies, which would cut a slow write short whatever the shim does (seen in CI)
        launchers = {proc.pid} | {int(_stat_fields(str(pid))[1]) for pid in pids}
        for pid in launchers:
            os.kill(pid, signal.SIGSTOP)
        for pid, tids in threads.items():
            for tid in tids:
                tgkill(234, pid, tid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while any(map(_running, pids)) and time.monotonic() < deadline:
            time.sleep(0.01)
        for pid in launchers:
            os.kill(pid, signal.SIGCONT)
        proc.wait(timeout=60)
        ev = read_raw_dir(raw).events
        for r in (0, 1):
            ops = ev["op"].to_numpy()[ev["rank"].to_numpy() == r]
            assert len(ops) == 6001 and (ops[1:] == Op.BARRIER).all() and ops[0] == Op.INIT, (attempt, r, len(ops))


@pytest.mark.parametrize("args, msg", [
    (["--no-mpi"], "--no-mpi leaves nothing to record"),
    (["--ranks", "0"], "--ranks selects the ranks of a memory trace"),
    (["--param", "nokv"], "--param 'nokv': expected KEY=VALUE"),
])
def test_cli_argument_errors(tmp_path, capsys, args, msg):
    from pmac.cli import main

    rc = main(["trace", "-o", str(tmp_path / "s"), *args, "--", "true"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("pmac trace: error: ") and msg in err and len(err.strip().splitlines()) == 1


def test_cli_output_that_cannot_be_written_fails_before_running(tmp_path, capsys):
    """The signature folder is checked before the program runs (a folder that could not be
    created used to end the trace in a FileNotFoundError traceback from tempfile)."""
    from pmac.cli import main

    afile = tmp_path / "afile"
    afile.write_text("")
    marker = tmp_path / "ran"
    cmd = ["--", "touch", str(marker)]
    cases = [(afile / "sig", f"{afile}: exists and is not a folder (needed as the folder the signature goes in)"),
             (afile, f"{afile}: exists and is not a folder: the signature is a folder (give a new name)"),
             (Path("/proc/pmac-sig"), "/proc: cannot write into the folder the signature goes in: No such file or "
                                      "directory")]
    for out, msg in cases:
        for extra in ([], ["--memory", "--no-mpi"]):
            assert main(["trace", "-o", str(out), *extra, *cmd]) == 2
            assert capsys.readouterr().err.strip().splitlines() == [f"pmac trace: error: {msg}"]
    assert not marker.exists()   # the program never ran
    # a missing parent is made, and the trial folder does not stay
    from pmac.cli.trace import _check_output

    _check_output(tmp_path / "new" / "deeper" / "s")
    assert (tmp_path / "new" / "deeper").is_dir() and list((tmp_path / "new" / "deeper").iterdir()) == []


def test_stack_overflow_segfault_still_flushes(env, tmp_path):
    """SIGSEGV from a stack overflow: the handler runs on the shim's alternate stack."""
    src = tmp_path / "so.c"
    src.write_text("#include <mpi.h>\nstatic int deep(int n) { volatile char b[4096]; b[0] = (char)n; "
                   "return deep(n + 1) + b[0]; }\nint main(int c, char **v) { MPI_Init(&c, &v); "
                   "MPI_Barrier(MPI_COMM_WORLD); return deep(0); }\n")
    exe = tmp_path / "so"
    subprocess.run([env["mpi"].mpicc, "-O0", "-o", str(exe), str(src)], check=True)
    res = _trace(env, 1, [str(exe)], "stackoverflow")
    assert res.returncode != 0
    assert [Op(o).name for o in res.signature.events["op"]] == ["INIT", "BARRIER"]


def test_stopping_a_run_waits_for_the_whole_process_group(tmp_path):
    """A launcher that exits at once on SIGTERM while a rank still writes its records: the
    timeout returns only once the rank is done (the records are read right after)."""
    import subprocess

    from pmac.mpi import stop_job

    out = tmp_path / "records"
    rank = f'trap "sleep 0.5; echo written > {out}; exit 0" TERM; while :; do sleep 0.05; done'
    proc = subprocess.Popen(["sh", "-c", f"trap 'exit 0' TERM; sh -c '{rank}' & while :; do sleep 0.05; done"],
                            start_new_session=True)
    import time

    time.sleep(0.3)   # both shells have set their traps
    stop_job(proc)
    assert proc.returncode == 0
    assert out.read_text() == "written\n"


def test_stopping_a_run_waits_for_ranks_in_sessions_of_their_own(tmp_path):
    """MPICH's Hydra starts each rank in a session of its own, outside the launcher's process
    group: the stop signals it too (it is found by parentage) and waits until it has written."""
    import subprocess
    import sys
    import time

    from pmac.mpi import stop_job

    out = tmp_path / "records"
    ready = tmp_path / "ready"
    rank = ("import os, signal, time\n"
            "os.setsid()\n"
            "def term(*a):\n"
            f"    time.sleep(0.5); open({str(out)!r}, 'w').write('written'); os._exit(0)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            f"open({str(ready)!r}, 'w').close()\n"
            "t_end = time.monotonic() + 30   # not for ever, should the stop miss it\n"
            "while time.monotonic() < t_end: time.sleep(0.05)\n")
    src = tmp_path / "rank.py"
    src.write_text(rank)
    proc = subprocess.Popen(["sh", "-c", f"trap 'exit 0' TERM; {sys.executable} {src} & while :; do sleep 0.05; done"],
                            start_new_session=True)
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists()
    stop_job(proc)
    assert proc.returncode == 0
    assert out.read_text() == "written"


_PAGES_APP = r"""
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    size_t n = (size_t)64 << 20;
    char *a = NULL;
    if (argc > 1) {   /* huge pages asked for, as numpy does for its arrays */
        if (posix_memalign((void **)&a, (size_t)2 << 20, n)) return 1;
        madvise(a, n, MADV_HUGEPAGE);
    } else {
        a = malloc(n);
    }
    memset(a, 1, n);
    double x = a[12345], y;
    for (int i = 0; i < 20; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    free(a);          /* gone before MPI_Finalize: the samples during the loop keep it */
    MPI_Finalize();
    return 0;
}
"""


def test_the_traced_programs_pages_are_recorded_and_predict_names_a_mismatch(env, tmp_path):
    """The shim samples each rank's anonymous memory and its huge pages (type-7 records); the
    signature keeps the largest sample of each rank; predict notes a profile probed on other pages."""
    import dataclasses

    from pmac.predict import pages_note
    from pmac.signature import huge_page_fraction
    from probes.memory import thp_setting
    from synth import two_level_profile

    src = tmp_path / "pages.c"
    src.write_text(_PAGES_APP)
    exe = tmp_path / "pages"
    subprocess.run([env["mpi"].mpicc, "-O1", "-o", str(exe), str(src)], check=True)
    thp = thp_setting()
    fracs, sigs = {}, {}
    for mode, args in (("plain", []), ("huge", ["huge"])):
        res = _trace(env, 2, [str(exe), *args], f"pages-{mode}")
        assert res.returncode == 0
        mp = res.signature.header.provenance["memory_pages"]
        # each rank saw its 64 MiB array (and MPI's own memory beside it)
        assert all(a >= 64 << 20 and 0 <= h <= a for a, h in zip(mp["anonymous_bytes"], mp["anon_huge_bytes"]))
        fracs[mode], sigs[mode] = huge_page_fraction(res.signature.header), res.signature
        # saved and loaded with the signature
        from pmac.signature import load_signature
        assert huge_page_fraction(load_signature(env["dir"] / f"pages-{mode}").header) == fracs[mode]
    if thp == "madvise":
        assert fracs["plain"] < 0.25 and fracs["huge"] > 0.5, fracs
    elif thp == "never":
        assert fracs["plain"] == fracs["huge"] == 0.0
    prof = two_level_profile()
    in_effect = {"default": "4 KiB pages: huge pages not asked for (transparent huge pages: madvise)",
                 "huge": "huge pages, asked for (transparent huge pages: madvise)"}
    for mode, sig in sigs.items():
        for pmode, words in in_effect.items():
            p = dataclasses.replace(prof, provenance=dict(prof.provenance, pages={"mode": pmode, "in_effect": words}))
            agree = (fracs[mode] >= 0.5) == (pmode == "huge")
            assert pages_note(sig, p) == (None if agree else (
                f"synth: memory probed on {words}, the traced program had {100 * fracs[mode]:.0f} % of its "
                "anonymous memory on huge pages: working sets beyond the L2 are priced for other pages than it "
                f"ran on (pmac probe --pages {'default' if pmode == 'huge' else 'huge'} probes them as it ran)"))
            if thp == "madvise":   # the plain program on 4 KiB pages, the other on huge ones
                assert agree == ((mode == "plain") == (pmode == "default"))
        assert pages_note(sig, prof) is None          # the profile does not say its pages


def test_the_tracers_own_time_is_left_out_of_the_bursts(env, tmp_path):
    """The shim's reads of smaps_rollup (type 7) and its buffer flushes (type 8) run between two
    calls on the program's time; they record when they began and ended, and the reader takes that
    out of the next call's burst (pmac.rawtrace.tracer_own_s; before, a Python rank's first read,
    4-5 ms, sat in its first timed burst). A type-7 record of an older shim (no end) counts
    nothing."""
    from pmac.rawtrace import RECORD_DTYPE, T_EVENT, T_PAGES, T_SELF

    # ~12 records an iteration: 1000 iterations fill the 8192-record buffer once
    res = _trace(env, 2, [env["app"], "1000", "8"], "own", keep_raw=True)
    assert res.returncode == 0
    ev = res.signature.events
    own_total = res.signature.header.provenance["tracer_own_s"]
    for f in sorted((res.path / "raw").glob("rank-*.pmr")):
        rr = read_raw_file(f)
        rec = rr.records
        kinds = {int(t) for t in rec["type"][(rec["type"] == T_PAGES) | (rec["type"] == T_SELF)]}
        assert kinds == {T_PAGES, T_SELF}, kinds
        own = rec[np.isin(rec["type"], [T_PAGES, T_SELF])]
        assert (own["t_end_ns"] >= own["t_start_ns"]).all() and (own["t_start_ns"] > 0).all()
        evr = rec[rec["type"] == T_EVENT]
        e = ev[ev["rank"] == rr.rank].reset_index(drop=True)
        tick = rr.ns_per_tick * 1e-9
        total = 0.0
        for o in own:
            # the call after it, and the gap it sits in
            k = int(np.searchsorted(evr["t_start_ns"], o["t_start_ns"]))
            if k == len(evr):   # MPI_Finalize's sample, after the last call: no burst follows
                continue
            assert evr["t_end_ns"][k - 1] <= o["t_start_ns"] and o["t_end_ns"] <= evr["t_start_ns"][k]
            gap = (int(evr["t_start_ns"][k]) - int(evr["t_end_ns"][k - 1])) * tick
            inside = own[(own["t_start_ns"] >= evr["t_end_ns"][k - 1]) & (own["t_start_ns"] <= evr["t_start_ns"][k])]
            d = float((inside["t_end_ns"] - inside["t_start_ns"]).sum()) * tick
            assert e["burst_s"][k] == pytest.approx(gap - d, rel=1e-9, abs=1e-12)
            total += float(o["t_end_ns"] - o["t_start_ns"]) * tick
        assert own_total[rr.rank] == pytest.approx(total, rel=1e-6, abs=1e-9)
        assert total > 0.0
    # an older shim's pages record (no end): its read stays in the burst
    f0, f1 = sorted((res.path / "raw").glob("rank-*.pmr"))
    data = bytearray(f0.read_bytes())
    recs = np.frombuffer(data, RECORD_DTYPE, offset=HEADER_BYTES).copy()
    i = int(np.flatnonzero(recs["type"] == T_PAGES)[0])
    dur = int(recs["t_end_ns"][i] - recs["t_start_ns"][i])
    recs["t_end_ns"][i] = 0
    data[HEADER_BYTES:HEADER_BYTES + recs.nbytes] = recs.tobytes()
    (tmp_path / f0.name).write_bytes(bytes(data))
    (tmp_path / f1.name).write_bytes(f1.read_bytes())
    old = read_raw_dir(tmp_path)
    k = int(np.searchsorted(recs["t_start_ns"][recs["type"] == T_EVENT], recs["t_start_ns"][i]))
    r0_new = ev[ev["rank"] == 0].reset_index(drop=True)
    r0_old = old.events[old.events["rank"] == 0].reset_index(drop=True)
    tick = read_raw_file(f0).ns_per_tick * 1e-9
    assert r0_old["burst_s"][k] == pytest.approx(r0_new["burst_s"][k] + dur * tick, rel=1e-9, abs=1e-12)
    assert (r0_old["burst_s"].drop(k) == r0_new["burst_s"].drop(k)).all()

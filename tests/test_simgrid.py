"""SimGrid time-independent traces: import (counts by hand from the shared example files), export,
round trip, errors."""

from __future__ import annotations

import re
import shutil
import subprocess

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pmac.errors import InputError
from pmac.signature import load_signature, save_signature
from pmac.simgrid import read_simgrid, simgrid_lines, write_simgrid
from pmac.trace import Op

REPLAY = "data/simgrid/examples/smpi/replay"

# Counted by hand from the files: (n_ranks, {op: calls over all ranks}, sent bytes, received bytes, flops)
EXPECTED = {
    "actions_allgatherv.txt": (4, {"INIT": 4, "ALLGATHERV": 4, "FINALIZE": 4},
                               # datatype 0 = double: 3 ranks send 275427, one 204020; each receives all
                               (3 * 275427 + 204020) * 8, 4 * (3 * 275427 + 204020) * 8, 0.0),
    "actions_allreduce.txt": (3, {"INIT": 3, "ALLREDUCE": 3, "FINALIZE": 3}, 3 * 50000, 3 * 50000,
                              3 * 5e8 + 3 * 5e8),
    "actions_alltoall.txt": (3, {"INIT": 3, "ALLTOALL": 3, "FINALIZE": 3}, 3 * 3 * 500, 3 * 3 * 500, 0.0),
    "actions_alltoallv.txt": (3, {"INIT": 3, "ALLTOALLV": 3, "FINALIZE": 3},
                              (1 + 40 + 30) + (80 + 1 + 40) + (100 + 30 + 1),
                              (1 + 80 + 100) + (40 + 1 + 30) + (30 + 40 + 1), 0.0),
    "actions_barrier.txt": (3, {"INIT": 3, "SEND": 1, "RECV": 1, "BARRIER": 3, "FINALIZE": 3}, 10**7, 10**7,
                            98095000 + 2 * 76296000),
    "actions_bcast.txt": (3, {"INIT": 3, "BCAST": 6, "REDUCE": 3, "FINALIZE": 3},
                          # 2 bcasts (root 0 sends 5e4 bytes) + reduce (every rank sends 5e4)
                          2 * 50000 + 3 * 50000, 2 * 2 * 50000 + 50000,
                          2 * (5e8 + 2e8 + 5e8) + 3 * 5e8),
    "actions_bcast_reduce_datatypes.txt": (3, {"INIT": 3, "BCAST": 6, "REDUCE": 3, "FINALIZE": 3},
                                           # init 1: doubles; bcast double root 1, bcast short root 0,
                                           # reduce long root 0
                                           400000 + 100000 + 3 * 400000, 2 * 400000 + 2 * 100000 + 400000,
                                           2 * (5e8 + 2e8 + 5e8) + 3 * 5e8),
    "actions_gather.txt": (4, {"INIT": 4, "GATHER": 4, "FINALIZE": 4}, 4 * 68 * 8, 4 * 68 * 8, 0.0),
    "actions_reducescatter.txt": (4, {"INIT": 4, "REDUCE_SCATTER": 4, "FINALIZE": 4},
                                  4 * (3 * 275427 + 204020) * 8, (3 * 275427 + 204020) * 8,
                                  11349173 + 12396024 + 12501522 + 12403123),
    "actions_waitall.txt": (3, {"INIT": 3, "IRECV": 3, "ISEND": 3, "WAITALL": 3, "FINALIZE": 3},
                            2000 + 3000 + 3000, 2000 + 3000 + 3000, 0.0),
    "actions_with_isend.txt": (3, {"INIT": 3, "SEND": 2, "RECV": 1, "IRECV": 2, "ISEND": 1, "TEST": 2,
                                   "WAIT": 2, "FINALIZE": 3}, 3 * 10**6, 3 * 10**6,
                               2e9 + 1e9 + 2e9 + 2.5e8 + 2.5e8 + 5e8),
}


def _counts(sig) -> dict[str, int]:
    return {Op(int(o)).name: int(c) for o, c in sig.events["op"].value_counts().items()}


def _flops(sig) -> float:
    b = sig.memory.get("bursts")
    return 0.0 if b is None else float(b["flop"].sum())


@pytest.mark.parametrize("fname", sorted(EXPECTED))
def test_shared_examples_import_with_hand_counted_events(shared_dir, fname):
    sig = read_simgrid(shared_dir / REPLAY / fname)
    n, counts, sent, received, flop = EXPECTED[fname]
    assert sig.n_ranks == n
    assert _counts(sig) == counts
    assert int(sig.events["send_bytes"].sum()) == sent
    assert int(sig.events["recv_bytes"].sum()) == received
    assert _flops(sig) == pytest.approx(flop, rel=1e-12)
    assert sig.header.source_format == "simgrid"
    assert sig.header.burst_source == ("memory" if flop else "measured")
    # every rank's seq runs 0..k-1 and the clock never goes backwards
    for _, g in sig.events.groupby("rank"):
        assert g["seq"].tolist() == list(range(len(g)))
        assert (np.diff(g["t_start_s"].to_numpy()) >= 0).all()


def test_split_traces_index_and_files_agree(shared_dir):
    d = shared_dir / REPLAY
    via_files = read_simgrid([d / "actions0.txt", d / "actions1.txt"])
    via_index = read_simgrid(d / "split_traces") if (d / "split_traces").exists() else via_files
    for sig in (via_files, via_index):
        assert sig.n_ranks == 2
        assert _counts(sig) == {"INIT": 2, "SEND": 2, "RECV": 2, "ISEND": 1, "IRECV": 1, "WAIT": 1, "FINALIZE": 2}
    pd.testing.assert_frame_equal(via_files.events, via_index.events)
    ev = via_files.events
    r1 = ev[ev["rank"] == 1].reset_index(drop=True)
    # 1 recv 0 0 1e6 / compute 1e9 / isend 0 1 1e6 / irecv 0 2 1e6 / wait 0 1 2
    assert r1["op"].tolist() == [Op.INIT, Op.RECV, Op.ISEND, Op.IRECV, Op.WAIT, Op.FINALIZE]
    b = via_files.memory["bursts"]
    assert b[["rank", "seq", "flop"]].values.tolist() == [[1, 2, 1e9]]  # compute ends at the isend (seq 2)
    wait = r1.iloc[4]
    req = via_files.requests.iloc[int(wait["req_offset"])]
    assert (req["rank"], req["request"], req["completed"], req["source"], req["recv_bytes"]) == \
        (1, r1.iloc[3]["request"], 1, 0, 10**6)


def test_every_point_to_point_send_has_its_receive(shared_dir):
    d = shared_dir / REPLAY
    for files in (["actions_with_isend.txt"], ["actions_waitall.txt"], ["actions0.txt", "actions1.txt"],
                  ["actions_barrier.txt"]):
        ev = read_simgrid([d / f for f in files]).events
        sends = ev[ev["op"].isin([Op.SEND, Op.ISEND])]
        recvs = ev[ev["op"].isin([Op.RECV, Op.IRECV])]
        s = sorted(zip(sends["rank"], sends["dest"], sends["send_tag"], sends["send_bytes"]))
        r = sorted(zip(recvs["source"], recvs["rank"], recvs["recv_tag"], recvs["recv_bytes"]))
        assert s == r, files


def test_test_names_without_completing_and_wait_completes(shared_dir):
    sig = read_simgrid(shared_dir / REPLAY / "actions_with_isend.txt")
    ev, rq = sig.events, sig.requests
    for op, done in ((Op.TEST, 0), (Op.WAIT, 1)):
        rows = ev[ev["op"] == op]
        assert (rows["n_requests"] == 1).all()
        assert rq.iloc[rows["req_offset"].to_numpy()]["completed"].tolist() == [done, done]


def test_vcounts_of_alltoallv(shared_dir):
    sig = read_simgrid(shared_dir / REPLAY / "actions_alltoallv.txt")
    vc = sig.vcounts
    m_send = np.zeros((3, 3), int)
    m_recv = np.zeros((3, 3), int)
    for r, p, s, rcv in zip(vc["rank"], vc["peer"], vc["send_bytes"], vc["recv_bytes"]):
        m_send[r, p] = s
        m_recv[r, p] = rcv
    assert m_send.tolist() == [[1, 40, 30], [80, 1, 40], [100, 30, 1]]
    # what rank r receives from p is what p sends to r
    assert (m_recv == m_send.T).all()


def _roundtrip_equal(a, b):
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.vcounts, b.vcounts)
    assert set(a.memory) == set(b.memory)
    for k in a.memory:
        pd.testing.assert_frame_equal(a.memory[k], b.memory[k])


@pytest.mark.parametrize("fname", sorted(EXPECTED))
def test_import_export_import_round_trip(shared_dir, tmp_path, fname):
    first = read_simgrid(shared_dir / REPLAY / fname)
    out = write_simgrid(first, tmp_path / "tit")
    assert out.skipped == {}
    assert len(out.rank_files) == first.n_ranks
    second = read_simgrid(out.index_file)
    _roundtrip_equal(first, second)
    # and the export of the re-import is the same text
    assert simgrid_lines(second) == simgrid_lines(first)


def test_round_trip_through_saved_signature(shared_dir, tmp_path):
    first = read_simgrid(shared_dir / REPLAY / "actions_with_isend.txt", name="with_isend")
    save_signature(first, tmp_path / "sig")
    loaded = load_signature(tmp_path / "sig")
    _roundtrip_equal(first, loaded)
    assert loaded.header.name == "with_isend"


def test_export_of_measured_bursts_uses_sleep_or_compute(shared_dir, tmp_path):
    import dataclasses

    sig = read_simgrid(shared_dir / REPLAY / "actions0.txt", n_ranks=2)
    ev = sig.events.copy()
    ev.loc[ev["seq"] == 2, "burst_s"] = 0.25
    sig = dataclasses.replace(sig, events=ev)
    lines, _ = simgrid_lines(sig)
    assert lines[0][:4] == ["0 init", "0 send 1 0 1000000", "0 sleep 0.25", "0 recv 1 1 1000000"]
    lines, _ = simgrid_lines(sig, flop_per_s=2e9)
    assert lines[0][2] == "0 compute 500000000"
    back = read_simgrid(write_simgrid(sig, tmp_path / "x").index_file)
    assert back.events["burst_s"].tolist() == ev["burst_s"].tolist()


def test_unrepresentable_calls_are_counted(shared_dir):
    import dataclasses

    sig = read_simgrid(shared_dir / REPLAY / "actions_barrier.txt")
    ev = sig.events.copy()
    ev.loc[(ev["rank"] == 2) & (ev["op"] == Op.BARRIER), "op"] = int(Op.PROBE)
    lines, skipped = simgrid_lines(dataclasses.replace(sig, events=ev))
    assert skipped == {"PROBE": 1}
    assert "2 barrier" not in lines[2] and "1 barrier" in lines[1]


@pytest.mark.parametrize("text, message", [
    ("0 init\n0 frobnicate 3\n", "line.*:2: unknown SimGrid action 'frobnicate'"),
    ("0 init\n0 send 1 0\n", ":2: 'send' takes 3 to 4 arguments, found 2"),
    ("0 init\n0 send x 0 10\n", "send partner: expected a rank, found 'x'"),
    ("0 init\n0 bcast 10 0 99\n", "unknown SimGrid datatype id 99"),
    ("0 init\n0 compute lots\n", "compute flops: expected a number, found 'lots'"),
    ("", "empty SimGrid trace"),
    ("0 init\n1 send 5 0 10\n", "send partner: rank 5 outside 0..1"),
])
def test_bad_traces_give_one_line_errors(tmp_path, text, message):
    f = tmp_path / "line.txt"
    f.write_text(text)
    with pytest.raises(InputError, match=message) as exc:
        read_simgrid(f)
    assert str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_index_naming_a_missing_file(tmp_path):
    f = tmp_path / "index.txt"
    f.write_text("nowhere/rank0.txt\n")
    with pytest.raises(InputError, match="index lists 'nowhere/rank0.txt', which is not a file"):
        read_simgrid(f)


def _smpirun_time(smpirun, index, n, platform, hosts, cwd) -> float:
    res = subprocess.run([smpirun, "-np", str(n), "-platform", str(platform), "-hostfile", str(hosts),
                          "-replay", str(index), "--log=smpi_config.thres:warning",
                          "--log=xbt_cfg.thres:warning"], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r"Simulation time ([0-9.eE+-]+)", res.stdout + res.stderr)
    assert m, res.stdout[-1000:] + res.stderr[-1000:]
    return float(m.group(1))


@pytest.mark.requires("simgrid")
def test_export_replays_in_smpirun_like_the_original(shared_dir, tmp_path):
    """SimGrid itself (Debian libsimgrid-dev) replays each exported trace to the same simulated
    time as the original file: the exporter loses nothing SimGrid uses."""
    smpirun = shutil.which("smpirun")
    platform = shared_dir / "data/simgrid/examples/platforms/small_platform.xml"
    hosts = tmp_path / "hosts"
    hosts.write_text("Tremblay\nJupiter\nFafard\nGinette\n")
    cases = [[f] for f in sorted(EXPECTED)] + [["actions0.txt", "actions1.txt"]]
    for files in cases:
        paths = [shared_dir / REPLAY / f for f in files]
        original = tmp_path / f"orig_{files[0]}"
        original.write_text("".join(f"{p}\n" for p in paths))  # smpirun -replay takes an index file
        sig = read_simgrid(paths)
        out = write_simgrid(sig, tmp_path / files[0].replace(".txt", ""))
        t_orig = _smpirun_time(smpirun, original, sig.n_ranks, platform, hosts, tmp_path)
        t_export = _smpirun_time(smpirun, out.index_file, sig.n_ranks, platform, hosts, tmp_path)
        assert t_orig > 0
        assert t_export == pytest.approx(t_orig, rel=1e-9), files


def test_cli_export(shared_dir, tmp_path, capsys):
    from pmac.cli import main

    sig = read_simgrid(shared_dir / REPLAY / "actions_with_isend.txt", name="with_isend")
    folder = save_signature(sig, tmp_path / "signatures" / "with_isend")
    out = tmp_path / "tit"
    assert main(["export", "simgrid", str(folder), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote 24 actions for 3 ranks: {out / 'traces.txt'}" in text
    assert (out / "rank2.txt").read_text().splitlines()[:3] == ["2 init", "2 compute 2000000000",
                                                                 "2 irecv 1 1 1000000"]
    _roundtrip_equal(sig, read_simgrid(out / "traces.txt"))
    assert main(["export", "simgrid", str(tmp_path / "nope"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"pmac export: error: {tmp_path / 'nope'}: no such signature folder"


def test_cli_import(shared_dir, tmp_path, capsys):
    from pmac.cli import main

    d = shared_dir / REPLAY
    out = tmp_path / "signatures" / "pingpong"
    assert main(["import", "simgrid", str(d / "actions0.txt"), str(d / "actions1.txt"), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}: 2 ranks, 11 MPI calls, memory tables bursts"
    sig = load_signature(out)
    assert sig.header.name == "pingpong" and sig.n_ranks == 2
    _roundtrip_equal(sig, read_simgrid([d / "actions0.txt", d / "actions1.txt"]))
    assert main(["import", "simgrid", str(d / "actions0.txt"), "--ranks", "1", "-o", str(out)]) == 2
    assert "send partner: rank 1 outside 0..0" in capsys.readouterr().err


MORE = """\
0 init
1 init
2 init
0 gatherv 10 10 20 30 1
1 gatherv 20 10 20 30 1
2 gatherv 30 10 20 30 1
0 scatterv 5 6 7 5 0
1 scatterv 5 6 7 6 0
2 scatterv 5 6 7 7 0
0 allgather 4 4
1 allgather 4 4
2 allgather 4 4
0 scatter 9 9 2
1 scatter 9 9 2
2 scatter 9 9 2
0 scan 16 1e6
1 scan 16 1e6
2 scan 16 1e6
0 sendRecv 100 1 300 2 6 6
1 sendRecv 200 2 100 0 6 6
2 sendRecv 300 0 200 1 6 6
0 comm_split
1 comm_split
2 comm_split
0 finalize
1 finalize
2 finalize
"""


def test_other_collectives_by_hand(tmp_path):
    f = tmp_path / "more.txt"
    f.write_text(MORE)
    sig = read_simgrid(f)
    ev = sig.events.set_index(["rank", "op"])
    # gatherv to root 1: everyone sends its count, the root receives 10+20+30
    assert [ev.loc[(r, int(Op.GATHERV)), "send_bytes"] for r in range(3)] == [10, 20, 30]
    assert [ev.loc[(r, int(Op.GATHERV)), "recv_bytes"] for r in range(3)] == [0, 60, 0]
    assert [ev.loc[(r, int(Op.SCATTERV)), "recv_bytes"] for r in range(3)] == [5, 6, 7]
    assert [ev.loc[(r, int(Op.SCATTERV)), "send_bytes"] for r in range(3)] == [18, 0, 0]
    assert [ev.loc[(r, int(Op.ALLGATHER)), "recv_bytes"] for r in range(3)] == [12] * 3
    assert [ev.loc[(r, int(Op.SCATTER)), "send_bytes"] for r in range(3)] == [0, 0, 27]
    assert [ev.loc[(r, int(Op.SENDRECV)), "dest"] for r in range(3)] == [1, 2, 0]
    assert [ev.loc[(r, int(Op.SENDRECV)), "recv_bytes"] for r in range(3)] == [300, 100, 200]
    assert _counts(sig)["COMM_SPLIT"] == 3
    vc = sig.vcounts
    assert vc[["rank", "peer", "send_bytes", "recv_bytes"]].values.tolist() == [
        [0, 0, 5, 0], [0, 1, 6, 0], [0, 2, 7, 0],        # scatterv at its root 0
        [1, 0, 0, 10], [1, 1, 0, 20], [1, 2, 0, 30]]     # gatherv at its root 1
    assert _flops(sig) == 3e6  # the scans' computation
    back = read_simgrid(write_simgrid(sig, tmp_path / "x").index_file)
    _roundtrip_equal(sig, back)
    smpirun = shutil.which("smpirun")
    if smpirun:
        platform = Path(__file__).resolve().parents[2] / "shared" / "data/simgrid/examples/platforms/small_platform.xml"
        if platform.exists():
            hosts = tmp_path / "hosts"
            hosts.write_text("Tremblay\nJupiter\nFafard\n")
            orig = tmp_path / "orig_index"
            orig.write_text(f"{f}\n")
            t0 = _smpirun_time(smpirun, orig, 3, platform, hosts, tmp_path)
            t1 = _smpirun_time(smpirun, tmp_path / "x" / "traces.txt", 3, platform, hosts, tmp_path)
            assert t0 > 0 and t1 == pytest.approx(t0, rel=1e-9)


@pytest.mark.requires("simgrid")
def test_sleep_bursts_add_exact_seconds_in_smpirun(shared_dir, tmp_path):
    import dataclasses

    smpirun = shutil.which("smpirun")
    f = tmp_path / "pp.txt"
    f.write_text("0 init\n1 init\n0 send 1 0 8\n1 recv 0 0 8\n0 finalize\n1 finalize\n")
    sig = read_simgrid(f)
    ev = sig.events.copy()
    ev.loc[(ev["rank"] == 0) & (ev["op"] == Op.SEND), "burst_s"] = 0.25
    platform = shared_dir / "data/simgrid/examples/platforms/small_platform.xml"
    hosts = tmp_path / "hosts"
    hosts.write_text("Tremblay\nJupiter\n")
    t = [_smpirun_time(smpirun, write_simgrid(s, tmp_path / name).index_file, 2, platform, hosts, tmp_path)
         for name, s in (("a", sig), ("b", dataclasses.replace(sig, events=ev)))]
    assert t[1] - t[0] == pytest.approx(0.25, abs=1e-6)


def test_shipped_pmpi_signature_replays_in_smpirun(shared_dir, tmp_path):
    """A real PMPI trace (Irecv/Isend/Waitall, Allreduce) exports to a trace SimGrid replays; its
    simulated time is at least the measured compute of the busiest rank (the sleeps)."""
    smpirun = shutil.which("smpirun")
    sig = load_signature(Path(__file__).resolve().parents[1] / "signatures" / "stencil2d-n2-1024")
    out = write_simgrid(sig, tmp_path / "tit")
    assert out.skipped == {}
    lines = (tmp_path / "tit" / "rank0.txt").read_text().splitlines()
    assert sum(ln.split()[1] == "waitall" for ln in lines) == sig.header.parameters["iters"]
    platform = shared_dir / "data/simgrid/examples/platforms/small_platform.xml"
    hosts = tmp_path / "hosts"
    hosts.write_text("Tremblay\nJupiter\n")
    t = _smpirun_time(smpirun, out.index_file, 2, platform, hosts, tmp_path)
    busiest = sig.events.groupby("rank")["burst_s"].sum().max()
    assert t >= busiest * (1 - 1e-9)


TWO_HOSTS = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="z" routing="Full">
    <host id="h0" speed="1Gf"/>
    <host id="h1" speed="1Gf"/>
    <link id="l" bandwidth="1GBps" latency="10us"/>
    <route src="h0" dst="h1"><link_ctn id="l"/></route>
  </zone>
</platform>
"""


@pytest.mark.parametrize("nbytes", [1000, 100000, 10**7])
def test_smpirun_neutral_network_is_latency_plus_size_over_bandwidth(tmp_path, nbytes):
    from pmac.simgrid import smpirun_replay

    if not shutil.which("smpirun"):
        pytest.skip("smpirun not installed (apt-get install libsimgrid-dev)")
    plat = tmp_path / "two.xml"
    plat.write_text(TWO_HOSTS)
    f = tmp_path / "pp.txt"
    f.write_text(f"0 init\n1 init\n0 send 1 0 {nbytes}\n1 recv 0 0 {nbytes}\n1 send 0 0 {nbytes}\n"
                 f"0 recv 1 0 {nbytes}\n0 finalize\n1 finalize\n")
    out = write_simgrid(read_simgrid(f), tmp_path / "tit")
    t = smpirun_replay(out.index_file, 2, plat, ["h0", "h1"])
    assert t == pytest.approx(2 * (10e-6 + nbytes / 1e9), abs=1.5e-6)  # printed to 1 us
    with pytest.raises(Exception, match="smpirun failed"):
        smpirun_replay(out.index_file, 2, plat, ["h0", "nohost"])


@pytest.mark.requires("simgrid")
def test_export_without_init_gets_one_and_replays(shared_dir, tmp_path):
    """A trace without MPI_Init (generated, or from a tool that drops it) used to crash smpirun
    with SIGSEGV: the exporter starts every non-empty rank with ``init``."""
    from pmac.simgrid import smpirun_replay

    body = {0: "0 compute 1e6\n0 send 1 0 1000000\n0 recv 1 1 8\n", 1: "1 recv 0 0 1000000\n1 send 0 1 8\n"}
    f = tmp_path / "noinit.txt"
    f.write_text("".join(body.values()))
    out = write_simgrid(read_simgrid(f, n_ranks=2), tmp_path / "x")
    assert [p.read_text().splitlines()[0] for p in out.rank_files] == ["0 init", "1 init"]
    platform = shared_dir / "data/simgrid/examples/platforms/small_platform.xml"
    t_export = smpirun_replay(out.index_file, 2, platform, ["Tremblay", "Jupiter"])
    for r, text in body.items():
        (tmp_path / f"h{r}.txt").write_text(f"{r} init\n{text}")
    (tmp_path / "idx").write_text(f"{tmp_path / 'h0.txt'}\n{tmp_path / 'h1.txt'}\n")
    t_hand = smpirun_replay(tmp_path / "idx", 2, platform, ["Tremblay", "Jupiter"])
    assert t_export > 0 and t_export == pytest.approx(t_hand, rel=1e-9)


def _example_traces(folder):
    names = sorted(p.name for p in folder.glob("actions*.txt") if p.name not in ("actions0.txt", "actions1.txt"))
    return [["actions0.txt", "actions1.txt"]] + [[n] for n in names]


@pytest.mark.requires("simgrid", "shared")
@pytest.mark.parametrize("latency_s,bandwidth", [(50e-6, 125e6), (1e-6, 10e9)])
def test_pmac_replay_matches_smpirun_on_simgrid_examples(shared_dir, tmp_path, latency_s, bandwidth):
    """Issue 5: on SimGrid's example traces and an equivalent network, pmac's replay (contention on:
    SimGrid shares links) is within 5 % of smpirun -replay (bench/simgrid_crosscheck prints it)."""
    from pmac.predict import predict
    from pmac.simgrid import MATCHING_COLLECTIVES_CFG, cluster_platform, equivalent_profile, smpirun_replay

    folder = shared_dir / REPLAY
    files = _example_traces(folder)
    assert len(files) == 12
    for names in files:
        sig = read_simgrid([folder / n for n in names], n_ranks=2 if len(names) == 2 else None)
        xml, hosts = cluster_platform(sig.n_ranks, latency_s=latency_s, bandwidth_bytes_per_s=bandwidth,
                                      flop_per_s=1e9)
        work = tmp_path / names[0]
        work.mkdir()
        (work / "p.xml").write_text(xml)
        out = write_simgrid(sig, work / "t")
        t_sg = smpirun_replay(out.index_file, sig.n_ranks, work / "p.xml", hosts, extra=MATCHING_COLLECTIVES_CFG)
        prof = equivalent_profile(latency_s=latency_s, bandwidth_bytes_per_s=bandwidth, flop_per_s=1e9,
                                  n_nodes=sig.n_ranks)
        t = predict(sig, [prof], burst_source="memory" if sig.memory else "measured",
                    contention=True).summary.iloc[0].total_s
        assert t == pytest.approx(t_sg, rel=0.05), names

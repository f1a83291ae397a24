"""A quick real two-rank network probe: positive latency, bandwidth growing with message size."""

import numpy as np
import pytest

from pmac.errors import ToolMissingError
from pmac.probe_network import measure_network, measure_networks, read_record


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``pmac probe``'s network: measured at MPI_THREAD_SINGLE (the model, its record in
    work/single) and at MULTIPLE (the variant, tables ``*_multiple``)."""
    work = tmp_path_factory.mktemp("net")
    seen = []
    model, variants, tables = measure_networks(quick=True, workdir=work, progress=lambda f, m: seen.append(f))
    return model, tables, work / "single", seen, variants


@pytest.mark.requires("mpi")
def test_quick_probe_gives_a_sane_link(quick_run):
    model, tables, work, seen, _ = quick_run
    link = model.intra_node
    assert link is not None and model.inter_node is None  # one machine: no other node
    assert "MPICH" in model.mpi_library or "Open MPI" in model.mpi_library
    pp = tables["pingpong"]
    med = pp[pp.test == "pingpong"].groupby("msg_bytes").time_s.median()
    assert med.index.min() == 0 and med.index.max() == 16 << 20
    assert med.loc[8] > 0 and link.one_way_s[0] > 0
    bw = med.index.to_numpy()[1:] / med.to_numpy()[1:]
    # bandwidth grows with size: compare decades, not neighbours (the machine is shared)
    assert bw[med.index[1:] == 1 << 20][0] > 2 * bw[med.index[1:] == 1024][0] > 100 * bw[0]
    # (no bound on R^2 below 1: on a loaded 2-core machine small-message times scatter widely)
    assert link.bandwidth_bytes_per_s > 1e8 and -1 < link.fit_r2 <= 1
    # each overhead is a live time less half a Python call timed apart from it, floored at 0: a
    # slow spell over the call's timing can floor one of them; together they must cost something
    assert 0 <= link.send_overhead_s < 1e-4 and 0 <= link.recv_overhead_s < 1e-4
    assert link.send_overhead_s + link.recv_overhead_s > 0
    assert link.streaming_bandwidth_bytes_per_s > 1e8
    # the pollution test: every size, both kinds, paired by repetition; the fitted curve costs
    # something once every cache was swept (64 MiB)
    pol = pp[pp.test == "pollution"]
    assert sorted(set(pol.msg_bytes)) == [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
    assert (pol.groupby("msg_bytes").size() >= 3).all()
    assert len(pp[pp.test == "pollution_pause"]) == len(pol)
    assert link.pollution_bytes == tuple(float(x) for x in sorted(set(pol.msg_bytes)))
    assert link.pollution_excess_s[-1] > 0 and list(link.pollution_excess_s) == sorted(link.pollution_excess_s)
    # every repetition kept; collectives for 1 and 2 ranks
    assert (pp[pp.test == "pingpong"].groupby("msg_bytes").size() >= 5).all()
    ops = {(c.op, c.n_ranks) for c in model.collectives}
    assert {("barrier", 2), ("bcast", 2), ("allreduce", 2), ("alltoall", 2)} <= ops
    assert all(c.time_s > 0 for c in model.collectives)
    # the record on disk reads back; progress was reported up to the end
    t2, meta = read_record(work / "network.npz")
    assert len(t2["pingpong"]) == len(pp) and meta["n_ranks"] == 2
    # the bcast rows were timed with a moving root, and the model says so (its excess replays that)
    assert meta["bcast_root"] == "rotating" and model.bcast_root == "rotating"
    from pmac.probe_network import model_from_record
    del meta["bcast_root"]      # a record of a probe before 27 Nov 2026: root 0 every call
    assert model_from_record(t2, meta).bcast_root == "fixed"
    assert seen and seen[-1] == 1.0 and max(seen) == 1.0


@pytest.mark.requires("mpi")
def test_the_network_is_measured_at_both_thread_levels(quick_run):
    """The probe measures the network at each MPI thread level (MPICH gives up its shared-memory
    collectives at MPI_THREAD_MULTIPLE, mpi4py's default), records which, and each calibrated
    network replays the probe's own 2-rank collective loop at the time measured at its level (a
    negative excess, a call cheaper than its messages, through the measured table).

    How much cheaper the single level's calls are is the machine's, not pmac's, and is not asserted
    here: the 2-rank 8 B allreduce, single over multiple, was 0.13 on the Zen 3 VM (24 Nov) and
    0.22-0.82 in seven full probes of the Xeon VM on 26 Nov, and 1.47 in one quick probe of a CI
    run there (its single-level rows measured in a slow spell); bench/collective_check times both
    levels from C."""
    from pmac.calibrate_collectives import excess_table, replayed_s
    from pmac.replay import ReplayOptions

    model, tables, work, _, variants = quick_run
    assert model.thread_level == "single" and [v.thread_level for v in variants] == ["multiple"]
    assert read_record(work / "network.npz")[1]["thread_level"] == "single"
    assert read_record(work.parent / "multiple" / "network.npz")[1]["thread_level"] == "multiple"
    assert len(tables["pingpong_multiple"]) > 0 and len(tables["collective_multiple"]) > 0

    def row(net, op, m):
        return next(c for c in net.collectives if (c.op, c.msg_bytes, c.n_ranks) == (op, m, 2))

    single, multiple = row(model, "allreduce", 8), row(variants[0], "allreduce", 8)
    print(f"2-rank 8 B allreduce: single {single.time_s * 1e6:.2f} us, multiple {multiple.time_s * 1e6:.2f} us")
    assert single.time_s > 0 and multiple.time_s > 0
    for net in (model, variants[0]):
        t = excess_table(net)
        t = t[t.placement == "intra_node"]
        got = replayed_s(net, "intra_node", list(zip(t.op, t.msg_bytes)), ReplayOptions(), with_excess=True)
        assert got == pytest.approx(t.measured_s.to_numpy(), rel=1e-6)


@pytest.mark.requires("mpi")
def test_node_map_places_the_partner_on_another_node(tmp_path):
    model, tables = measure_network(quick=True, workdir=tmp_path, node_map=[0, 1], timeout_s=120,
                                    probe_args=["--max-bytes", "4096"])
    assert model.intra_node is None and model.inter_node is not None
    assert set(tables["pingpong"].placement) == {"inter_node"}
    assert {c.placement for c in model.collectives if c.n_ranks == 2} == {"inter_node"}


def test_no_mpi_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PMAC_MPIEXEC", str(tmp_path / "no-such-mpiexec"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match="no MPI found"):
        measure_network(quick=True, workdir=tmp_path, in_job=False)


@pytest.mark.requires("mpi")
def test_numba_backend_standalone(tmp_path):
    """The full run's backend (numba-mpi loops), run as a user would: the script under mpiexec."""
    import subprocess
    import sys

    from pmac.mpi import find_mpi, launch_command, mpi_env
    from pmac.probe_network import model_from_record, probe_script

    out = tmp_path / "rec.npz"
    cmd = launch_command(2, [sys.executable, str(probe_script()), "--backend", "numba", "--max-bytes", "4096",
                             "--no-collectives", "--batch-ms", "0.5", "--out", str(out)], mpi=find_mpi())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=mpi_env())
    assert r.returncode == 0, r.stderr[-2000:]
    tables, meta = read_record(out)
    assert meta["backend"] == "numba-mpi" and meta["numba_mpi"]
    pp = tables["pingpong"]
    assert "pycall" not in set(pp.test)  # nothing to correct: the loop is compiled
    assert tables["collective"].empty
    med = pp[pp.test == "pingpong"].groupby("msg_bytes").time_s.median()
    assert med.index.max() == 4096 and med.loc[4096] > 0 and med.loc[8] > 0
    link = model_from_record(tables, meta).intra_node
    assert link.send_overhead_s > 0 and link.recv_overhead_s > 0


COMPILED_CHECK = r"""
import importlib.util, sys
import numpy as np
import mpi4py
mpi4py.rc.thread_level = "single"
from mpi4py import MPI
spec = importlib.util.spec_from_file_location("net", sys.argv[1])
net = importlib.util.module_from_spec(spec)
spec.loader.exec_module(net)
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
timed = net.compiled_collectives()
assert len(timed.loop.signatures) == 1      # compiled before the first timed call
a = np.full(3, r + 1.0); b = np.zeros(3)
timed("allreduce", comm, a, b, 4)
assert (b == n * (n + 1) / 2).all(), b
a = np.full(2, 10.0 + r); timed("bcast", comm, a, b, 1)      # one call: root 0
assert (a == 10.0).all(), a
a = np.arange(2.0 * n) + 100 * r; b = np.zeros(2 * n)
timed("alltoall", comm, a, b, 1)                              # block r of every rank, in rank order
assert (b == np.array([[100 * q + 2 * r, 100 * q + 2 * r + 1] for q in range(n)]).ravel()).all(), b
sub = comm.Split(0 if r < 2 else MPI.UNDEFINED, r)            # a sub-communicator, as the probe's
if sub != MPI.COMM_NULL:
    a = np.full(1, r + 1.0); b = np.zeros(1)
    timed("allreduce", sub, a, b, 2)
    assert b[0] == 3.0, b
    timed("barrier", sub, a, b, 3)
    a = np.full(2, 10.0 * (r + 1)); b = np.zeros(2)
    timed("sendrecv", sub, a, b, 2, 1 - r)                    # each sends its a to the other
    assert (b == 10.0 * (2 - r)).all(), b
    sub.Free()
comm.Barrier()
assert len(timed.loop.signatures) == 1      # one compilation for every op and communicator
print(f"<ok {r}>", flush=True)
"""


@pytest.mark.requires("mpi")
def test_compiled_collectives_call_the_library_on_any_communicator(tmp_path):
    """probes/network.compiled_collectives: numba loops calling MPI's C functions through ctypes
    move the data as the calls should, on the world and on a sub-communicator of 2 of 3 ranks
    (MPICH's handles of those read back sign-extended; the loop passes them as C ints); the loop
    is compiled before the first timed call (else the probe's first warm-up would time numba) and
    once for all."""
    import re
    import subprocess
    import sys

    from pmac.mpi import find_mpi, launch_command, mpi_env
    from pmac.probe_network import probe_script

    script = tmp_path / "check.py"
    script.write_text(COMPILED_CHECK)
    cmd = launch_command(3, [sys.executable, str(script), str(probe_script())], mpi=find_mpi())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=mpi_env())
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(re.findall(r"<ok (\d)>", r.stdout)) == ["0", "1", "2"]  # the ranks' lines may interleave


@pytest.mark.requires("mpi")
def test_numba_backend_times_collectives_compiled(tmp_path):
    """With the numba backend the collectives are timed in compiled loops: the record says so, and
    the fitted rows are the raw rows' lower quartile as they are (no one-rank floor taken off), where
    a record of mpi4py loops would take it off. The interpreter test's rows are there, three kinds a
    repetition, and the model's figures are their paired medians (pmac.fit_network.fit_interpreter)."""
    import subprocess
    import sys

    from pmac.fit_network import INTERPRETER_OPS, QUANTILE
    from pmac.mpi import find_mpi, launch_command, mpi_env
    from pmac.probe_network import model_from_record, probe_script

    out = tmp_path / "rec.npz"
    cmd = launch_command(2, [sys.executable, str(probe_script()), "--backend", "numba", "--quick", "--max-bytes",
                             "1024", "--batch-ms", "0.5", "--thread-level", "single", "--out", str(out)],
                         mpi=find_mpi())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=mpi_env())
    assert r.returncode == 0, r.stderr[-2000:]
    tables, meta = read_record(out)
    assert meta["collective_loop"] == "compiled"
    coll = tables["collective"]
    assert set(coll.op) == {"barrier", "bcast", "allreduce", "alltoall", *INTERPRETER_OPS}
    assert set(coll.n_ranks) == {1, 2}
    # the interpreter test: per repetition an mpi4py loop, its own part, the compiled loop
    it = coll[coll.op.isin(INTERPRETER_OPS)].set_index(["op", "n_ranks", "rep"])["time_s"].sort_index()
    for call in ("allreduce", "sendrecv"):
        py2, own, c = it[f"py_{call}", 2], it[f"py_{call}", 1], it[f"c_{call}", 2]
        assert len(py2) == len(own) == len(c) >= 3
        # a call that talks to the other rank costs more than mpi4py's own part of it
        assert py2.median() > own.median() and c.median() > 0
        want = max(float((py2 - own - c).median()), 0.0)
        got = model_from_record(tables, meta)
        assert (got.interpreter_collective_s if call == "allreduce" else got.interpreter_p2p_s) == \
            pytest.approx(want, rel=1e-12)
        assert want < 50e-6

    def quartile(op, nb, nr):
        return float(coll[(coll.op == op) & (coll.msg_bytes == nb) & (coll.n_ranks == nr)].time_s.quantile(QUANTILE))

    net = model_from_record(tables, meta)
    assert net.collective_loop == "compiled"
    row = next(c for c in net.collectives if (c.op, c.msg_bytes, c.n_ranks) == ("allreduce", 8, 2))
    assert row.time_s == pytest.approx(quartile("allreduce", 8, 2), rel=1e-12)
    old = model_from_record(tables, {k: v for k, v in meta.items() if k != "collective_loop"})
    row = next(c for c in old.collectives if (c.op, c.msg_bytes, c.n_ranks) == ("allreduce", 8, 2))
    want = max(quartile("allreduce", 8, 2) - quartile("allreduce", 8, 1), 0.05 * quartile("allreduce", 8, 2))
    assert old.collective_loop == "mpi4py" and row.time_s == pytest.approx(want, rel=1e-12)


def test_probe_script_refuses_one_rank(tmp_path):
    import subprocess
    import sys

    from pmac.probe_network import probe_script

    pytest.importorskip("mpi4py")
    r = subprocess.run([sys.executable, str(probe_script()), "--quick", "--out", str(tmp_path / "x.npz")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs at least 2 ranks" in r.stderr
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.requires("mpi")
def test_in_job_entry_point(tmp_path):
    """Under mpiexec every rank calls measure_network; the model reaches every rank."""
    import subprocess
    import sys

    from pmac.mpi import find_mpi, launch_command, mpi_env

    code = ("import sys; from pathlib import Path; from pmac.probe_network import measure_network\n"
            "m, t = measure_network(quick=True, workdir=Path(sys.argv[1]), node_map=[0, 1])\n"
            "from mpi4py import MPI; r = MPI.COMM_WORLD.Get_rank()\n"
            "Path(sys.argv[1], f'rank{r}.txt').write_text(f'{m.inter_node is not None} {m.intra_node is None} {sorted(t)}')\n")
    cmd = launch_command(2, [sys.executable, "-c", code, str(tmp_path)], mpi=find_mpi())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=mpi_env())
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "rank0.txt").read_text() == "True True ['collective', 'pingpong']"
    assert (tmp_path / "rank1.txt").read_text() == "True True []"  # the model on every rank, tables on 0


def _probe_module():
    import importlib.util

    from pmac.probe_network import probe_script

    spec = importlib.util.spec_from_file_location("probe_network_under_test", probe_script())
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_calibration_sizes_repetitions_and_skips_slow_sizes():
    """Iterations fill the batch; sizes slower than the per-call limit (and larger) are dropped."""
    mod = _probe_module()

    class FakeComm:
        def __init__(self):
            self.sent = []

        def send(self, obj, dest, tag):
            self.sent.append(obj)

    comm = FakeComm()
    link_s = lambda n: 1e-6 + n / 2.5e6  # 20 Mbit/s
    iters = mod._calibrate(None, comm, None, [8, 1024, 1 << 20, 4 << 20], 5e-3, True, 1, True,
                           lambda n, it: it * 2 * link_s(n), max_call_s=1.0)
    assert set(iters) == {8, 1024, 1 << 20}  # 1 MiB takes 0.84 s per round trip, 4 MiB 3.4 s: dropped
    assert iters[1 << 20] == 1
    assert iters[8] == int(5e-3 / (2 * link_s(8)))
    assert iters[1024] == int(5e-3 / (2 * link_s(1024)))
    assert comm.sent == [True, True, True, False, iters]  # the partner follows the decisions
    assert mod.pingpong_sizes(True)[:3] == [0, 1, 2] and mod.pingpong_sizes(True)[-1] == 16 << 20
    assert len(mod.pingpong_sizes(False)) > len(mod.pingpong_sizes(True))


def test_collectives_probe_moves_the_bcast_root_every_call():
    """probes/network.collective_call: a timed bcast loop on 3 ranks uses roots 0, 1, 2, 0, 1, ...
    (a fixed root lets it run ahead: the loop would time draining queued messages); the other ops
    call the library as they are; an unknown op is refused by name."""
    mod = _probe_module()

    class FakeComm:
        def __init__(self):
            self.calls = []

        def Get_size(self):
            return 3

        def Bcast(self, buf, root):
            self.calls.append(("bcast", root))

        def Allreduce(self, a, b, op):
            self.calls.append(("allreduce", op))

        def Barrier(self):
            self.calls.append(("barrier",))

    comm = FakeComm()
    a, b = np.ones(1), np.zeros(1)
    call = mod.collective_call("bcast", comm, a, b, "SUM")
    for _ in range(7):
        call()
    assert comm.calls == [("bcast", r) for r in (0, 1, 2, 0, 1, 2, 0)]
    comm.calls.clear()
    mod.collective_call("allreduce", comm, a, b, "SUM")()
    mod.collective_call("barrier", comm, a, b, "SUM")()
    assert comm.calls == [("allreduce", "SUM"), ("barrier",)]
    with pytest.raises(ValueError, match="collectives probe: unknown op 'scan'"):
        mod.collective_call("scan", comm, a, b, "SUM")


def test_probe_script_stands_alone():
    """A user copies probes/network.py to a new system: it imports no pmac, and MPI only lazily."""
    import ast

    from pmac.probe_network import probe_script

    tree = ast.parse(probe_script().read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module.split(".")[0])
    assert top <= {"__future__", "argparse", "json", "os", "sys", "time", "numpy"}, top
    assert not any(isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("pmac")
                   for n in ast.walk(tree))


@pytest.mark.requires("mpi")
def test_bench_call_interplay_measures_lateness():
    """bench/call_interplay part 1: the early rank of an exchange waits for the late one, so their
    call times differ by about the lateness D (32 us here); part 2 prints a row per sweep size;
    part 3's extra is its three loops' difference; part 4 a row per wait W, mean - median as printed."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from pmac.mpi import find_mpi, launch_command, mpi_env

    script = Path(__file__).resolve().parents[1] / "bench" / "call_interplay"
    cmd = launch_command(2, [sys.executable, str(script), "--iters", "60", "--rounds", "1"], mpi=find_mpi())
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=mpi_env())
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {(m[0], int(m[1])): (float(m[2]), float(m[3]))
            for m in re.findall(r"^\s*(exchange|allreduce)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", r.stdout, re.M)}
    assert len(rows) == 12
    for call in ("exchange", "allreduce"):
        early, late = rows[(call, 32)]
        assert 20.0 < early - late < 48.0, r.stdout
    sweeps = re.findall(r"^\s*(\d+)\s+[\d.]+\s+[\d.]+\s+[+-][\d.]+\s+[+-][\d.]+$", r.stdout, re.M)
    assert [int(w) for w in sweeps] == [4, 16, 64, 256, 1024]
    part3 = dict(re.findall(r"^\s*(numba|mpi4py|mpi4py COMM_SELF|extra)\s+([+-]?[\d.]+)", r.stdout, re.M))
    assert set(part3) == {"numba", "mpi4py", "mpi4py COMM_SELF", "extra"}
    assert float(part3["extra"]) == pytest.approx(float(part3["mpi4py"]) - float(part3["numba"])
                                                  - float(part3["mpi4py COMM_SELF"]), abs=0.011)
    part4 = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+)$", r.stdout, re.M)
    assert [int(w) for w, *_ in part4] == [0, 3, 10]
    for _, med, mean, diff in part4:
        assert float(diff) == pytest.approx(float(mean) - float(med), abs=0.011) and float(med) > 0
    one = launch_command(1, [sys.executable, str(script)], mpi=find_mpi())
    r1 = subprocess.run(one, capture_output=True, text=True, timeout=120, env=mpi_env())
    assert r1.returncode == 2 and "exactly 2 ranks" in r1.stderr


@pytest.mark.requires("mpi")
def test_bench_collective_check_sets_c_times_beside_the_profile_at_each_thread_level():
    """bench/collective_check: every 2-rank intra-node row of a profile that its C program times
    (barrier; bcast and allreduce of 8 B .. 4 KiB) gets a positive C time at each thread level,
    beside the row of the profile's network of that level; profile/C is the quotient of the printed
    columns. MPICH's calls are dearer at MPI_THREAD_MULTIPLE (devbox: allreduce 8 B 0.29 against
    1.72 us): checked loosely, on the median over the calls of multiple / single, above 1.2 (both
    levels alike would give about 1; the Zen 3 VM gave about 6, the Xeon VM of 26 Nov 1.38 in a CI
    run, where the bound of 1.5 set on the Zen 3 failed). With ``--loops`` the probe's compiled loop
    and its mpi4py loop less the floor are timed beside C: the compiled loop makes the same calls as
    the C program, so the median over the calls of compiled / C stays within a factor of 3 (this
    host's slow spells make a call up to 2.9x dearer, and one may fall between the two launches)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    calls = [("barrier", 0)] + [(op, b) for op in ("allreduce", "bcast") for b in (8, 64, 512, 4096)]

    def run_check(*extra) -> dict:
        r = subprocess.run([sys.executable, str(repo / "bench" / "collective_check"), "--iters", "300", "--reps", "3",
                            "--machine", str(repo / "machines" / "xeon-vm.yaml"), *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        rows = [ln.split() for ln in r.stdout.splitlines()[2:] if ln.strip() and not ln.startswith("  (")]
        assert sorted((lv, op, int(b)) for lv, op, b, *_ in rows) == sorted(
            (lv, op, b) for lv in ("single", "multiple") for op, b in calls)
        c_at = {}
        for lv, op, b, c_us, prof_us, ratio, *loops in rows:
            c_us, prof_us, ratio = map(float, (c_us, prof_us, ratio))
            assert 0 < c_us < 1e3 and prof_us > 0
            assert ratio == pytest.approx(prof_us / c_us, rel=0.02, abs=0.01)
            assert len(loops) == (4 if extra else 0)
            if loops:
                comp_us, comp_ratio, py_us, py_ratio = map(float, loops)
                assert comp_us > 0 and py_us > 0
                assert comp_ratio == pytest.approx(comp_us / c_us, rel=0.02, abs=0.01)
                assert py_ratio == pytest.approx(py_us / c_us, rel=0.02, abs=0.01)
                compiled_over_c.append(comp_ratio)
            c_at[(lv, op, int(b))] = c_us
        return c_at

    from pmac.mpi import find_mpi

    compiled_over_c = []
    c_at = run_check("--loops")
    assert len(compiled_over_c) == 2 * len(calls) and 1 / 3 < np.median(compiled_over_c) < 3, compiled_over_c
    if find_mpi().flavour == "mpich":
        def median_quotient(c):
            return np.median([c[("multiple", op, b)] / c[("single", op, b)] for op, b in calls])

        if median_quotient(c_at) <= 1.2:
            # the two levels run one after the other in separate jobs: a slow spell over one of them
            # moves the quotient; measure again and keep each call's faster time (noise only slows)
            again = run_check()
            c_at = {k: min(v, again[k]) for k, v in c_at.items()}
        assert median_quotient(c_at) > 1.2, c_at
    bad = subprocess.run([sys.executable, str(repo / "bench" / "collective_check"), "--machine", "/nonexistent.yaml"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "nonexistent.yaml" in bad.stderr and "Traceback" not in bad.stderr

"""The example applications: build, run at 1, 2 and 4 ranks, results independent of the rank count
and equal to an independent numpy computation; with the PMPI tracer, exact call counts and bytes
derived by hand from each program's structure (see the comment at the top of each source)."""

from __future__ import annotations

import importlib.util
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples"


@pytest.fixture(scope="module")
def built():
    res = subprocess.run(["bash", str(EX / "build.sh"), sys.executable], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return EX / "build"


def _launch(n: int, argv: list[str]) -> list[str]:
    from pmac.mpi import launch_command

    return launch_command(n, argv)


def run_example(n: int, argv: list[str], timeout: float = 60) -> dict:
    res = subprocess.run(_launch(n, argv), capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "wall_s=" in ln]
    assert len(lines) == 1, res.stdout  # rank 0 prints one line
    out = dict(kv.split("=", 1) for kv in lines[0].split()[1:])
    assert float(out["wall_s"]) > 0
    assert int(out["n_ranks"]) == n
    return out


@pytest.mark.requires("mpi")
def test_build_script_targets_x86_64_v3(built):
    for app in ("stencil2d", "stream_mpi", "nbody"):
        exe = built / app
        assert exe.exists() and os.access(exe, os.X_OK)
    # no AVX-512 (zmm registers) in the binaries: valgrind must be able to run them
    objdump = subprocess.run(["objdump", "-d", str(built / "nbody")], capture_output=True, text=True)
    if objdump.returncode == 0:
        assert "zmm" not in objdump.stdout


@pytest.mark.requires("mpi")
def test_stencil_independent_of_decomposition(built):
    outs = {n: run_example(n, [str(built / "stencil2d"), "24", "30"]) for n in (1, 2, 4)}
    assert outs[2]["dims"] == "2x1" and outs[4]["dims"] == "2x2"
    ref = _jacobi_numpy(24, 30)
    for n, o in outs.items():
        assert float(o["checksum"]) == pytest.approx(ref, rel=1e-12), n


def _jacobi_numpy(n: int, iters: int) -> float:
    u = np.zeros((n + 2, n + 2))
    u[0, :] = 1.0
    diff = 0.0
    for _ in range(iters):
        v = u.copy()
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        diff = float(((v[1:-1, 1:-1] - u[1:-1, 1:-1]) ** 2).sum())
        u = v
    return diff


@pytest.mark.requires("mpi")
def test_stream_matches_numpy(built):
    n, sweeps = 1000, 5
    for ranks in (1, 2):
        out = run_example(ranks, [str(built / "stream_mpi"), str(n), str(sweeps)])
        i = np.arange(n)
        b = [1.0 + (i % 7) for _ in range(ranks)]
        c = [0.5 * ((i + r) % 3) for r in range(ranks)]
        check = 0.0
        for k in range(sweeps):
            a = [b[r] + 3.0 * c[r] for r in range(ranks)]
            total = sum(a[r][(k * 7919) % n] for r in range(ranks))
            check += total
            for r in range(ranks):
                b[r][(k * 104729) % n] += 1e-3 * total
        assert float(out["checksum"]) == pytest.approx(check, rel=1e-14)


@pytest.mark.requires("mpi")
def test_nbody_independent_of_rank_count(built):
    outs = [run_example(n, [str(built / "nbody"), "64", "3"]) for n in (1, 2)]
    assert float(outs[0]["checksum"]) == pytest.approx(float(outs[1]["checksum"]), rel=1e-13)


@pytest.mark.requires("mpi")
def test_cg_matches_numpy(built):
    n, iters = 200, 25
    outs = [run_example(r, [sys.executable, str(EX / "cg_mpi4py.py"), str(n), str(iters)], timeout=120)
            for r in (1, 2)]
    # the same iteration in numpy
    A = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
    x = np.zeros(n)
    r = np.ones(n)
    p = r.copy()
    rr = r @ r
    for _ in range(iters):
        q = A @ p
        alpha = rr / (p @ q)
        x += alpha * p
        r -= alpha * q
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    for o in outs:
        assert float(o["checksum"]) == pytest.approx(np.sqrt(rr), rel=1e-9)


# ------------------------------------------------------------------ traced: exact counts

CASES = runpy.run_path(str(EX / "cases.py"))
expected_stencil = CASES["expected_stencil"]
expected_stream = CASES["expected_stream"]
expected_nbody = CASES["expected_nbody"]
expected_cg = CASES["expected_cg"]


def test_expected_counts_by_hand():
    """The formulas above on small cases worked out on paper."""
    calls, m = expected_stencil(4, 10, 3)  # 2x2 grid of 5x5 blocks: 2 neighbours each
    assert calls[0]["ISEND"] == 6 and calls[3]["IRECV"] == 6
    assert m.tolist() == [[0, 120, 120, 0], [120, 0, 0, 120], [120, 0, 0, 120], [0, 120, 120, 0]]
    calls, m = expected_stencil(2, 10, 3)  # 2x1: rows split, one north-south neighbour, 10 doubles
    assert m.tolist() == [[0, 240], [240, 0]]
    calls, m = expected_cg(4, 5)
    assert [calls[r]["SENDRECV"] for r in range(4)] == [5, 10, 10, 5] and m[1, 2] == 40


def _tracer_available():
    return importlib.util.find_spec("pmac.cli.trace") is not None and importlib.util.find_spec("pmac.tracer")


def _trace(tmp_path, name, p, argv):
    from pmac.cli import main
    from pmac.mpi import find_mpi
    from pmac.signature import load_signature

    out = tmp_path / name
    rc = main(["trace", "-o", str(out), "--", find_mpi().mpiexec, "-n", str(p)] + argv)
    assert rc == 0
    return load_signature(out)


def collective_bytes(calls: dict, p: int, allgather_doubles: int = 0) -> dict:
    """(send, recv) bytes per rank and collective op, from the pmac.trace conventions: Allreduce
    sends and receives its buffer; Reduce: every rank sends, the root (0) receives; Allgather sends
    its block and receives all P blocks; Barrier moves nothing."""
    out = {}
    for r, c in calls.items():
        out[r] = {"ALLREDUCE": (8 * c.get("ALLREDUCE", 0), 8 * c.get("ALLREDUCE", 0)),
                  "REDUCE": (8, 8 if r == 0 else 0), "BARRIER": (0, 0)}
        if "ALLGATHER" in c:
            out[r]["ALLGATHER"] = (c["ALLGATHER"] * 8 * allgather_doubles,
                                   c["ALLGATHER"] * 8 * allgather_doubles * p)
    return out


def _check(sig, calls, matrix, coll=None):
    from pmac.report_signature import communication_matrix
    from pmac.trace import Op

    ev = sig.events
    for r, want in (coll or {}).items():
        mine = ev[ev["rank"] == r]
        for op, (sb, rb) in want.items():
            rows = mine[mine["op"] == int(Op[op])]
            assert (int(rows["send_bytes"].sum()), int(rows["recv_bytes"].sum())) == (sb, rb), (r, op)
    for r, want in calls.items():
        got = ev[ev["rank"] == r]["op"].value_counts()
        got = {Op(int(k)).name: int(v) for k, v in got.items()}
        got = {k: v for k, v in got.items() if k in want or k not in ("OTHER",)}
        for op, n in want.items():
            assert got.get(op, 0) == n, (r, op, got)
        extra = {k: v for k, v in got.items() if k not in want}
        assert not extra, (r, extra)
    bytes_m, _ = communication_matrix(sig)
    assert bytes_m.astype(np.int64).tolist() == matrix.tolist()
    # every Waitall names requests the trace saw made, each once: the Irecv/Isend of its own
    # iteration (MPICH gives eager Isends one shared built-in handle; each must still be found)
    rq = sig.requests
    for w in ev[ev["op"] == int(Op.WAITALL)].itertuples():
        named = rq.iloc[w.req_offset: w.req_offset + w.n_requests]
        assert (named["request"] >= 0).all() and named["request"].is_unique and (named["completed"] == 1).all()
        made = ev[(ev["rank"] == w.rank) & ev["seq"].isin(named["request"])]
        assert set(made["op"]) <= {int(Op.IRECV), int(Op.ISEND)} and (made["seq"] < w.seq).all()
    # every receive's bytes come from a matching send
    recv_m = np.zeros_like(matrix)
    rcv = ev[ev["op"].isin([int(Op.IRECV), int(Op.RECV), int(Op.SENDRECV)]) & (ev["source"] >= 0)]
    np.add.at(recv_m, (rcv["source"].to_numpy(), rcv["rank"].to_numpy()), rcv["recv_bytes"].to_numpy())
    assert recv_m.tolist() == matrix.tolist()


@pytest.mark.requires("mpi")
@pytest.mark.parametrize("p", [1, 2, 4])
def test_traced_call_counts_and_bytes(built, tmp_path, p):
    if not _tracer_available():
        pytest.skip("the PMPI tracer (pmac trace) is not in this build yet")
    for name, argv, (calls, matrix), ag in (
            ("stencil", [str(built / "stencil2d"), "12", "4"], expected_stencil(p, 12, 4), 0),
            ("stream", [str(built / "stream_mpi"), "1000", "3"], expected_stream(p, 3), 0),
            ("nbody", [str(built / "nbody"), "16", "2"], expected_nbody(p, 2), 3 * 16 // p),
            ("cg", [sys.executable, str(EX / "cg_mpi4py.py"), "40", "3"], expected_cg(p, 3), 0)):
        sig = _trace(tmp_path, name, p, argv)
        assert sig.n_ranks == p and sig.header.source_format == "pmpi"
        _check(sig, calls, matrix, collective_bytes(calls, p, ag))


# ------------------------------------------------------------------ shipped signatures

SIGS = REPO / "signatures"


def test_shipped_signatures_are_the_cases():
    # signatures/scaling/ holds a series for pmac scale (tests/test_counters.py), not a case
    shipped = sorted(d.name for d in SIGS.iterdir() if d.is_dir() and not d.name.startswith(".")
                     and d.name != "scaling")
    assert shipped == sorted(c["name"] for c in CASES["CASES"])


@pytest.mark.parametrize("case", CASES["CASES"], ids=lambda c: c["name"])
def test_shipped_signature_matches_the_program(case):
    """Each shipped trace has exactly the calls and bytes its program makes at 2 ranks."""
    from pmac.signature import load_signature

    sig = load_signature(SIGS / case["name"])
    h = sig.header
    assert (h.name, h.n_ranks, h.source_format) == (case["name"], 2, "pmpi")
    assert h.parameters == {**case["params"], "app": case["app"]}
    calls, matrix = CASES["expected_calls"](case, 2)
    ag = 3 * case["params"]["N"] // 2 if case["app"] == "nbody" else 0
    _check(sig, calls, matrix, collective_bytes(calls, 2, ag))
    ev = sig.events
    assert (ev["burst_s"] >= 0).all() and (ev["t_end_s"] >= ev["t_start_s"]).all()
    for _, g in ev.groupby("rank"):
        assert g["seq"].tolist() == list(range(len(g)))


@pytest.mark.requires("mpi")
def test_bench_accuracy_probe_now_fails_cleanly_after_saving_the_runs(built, tmp_path):
    """bench/accuracy --probe-now DIR: the native runs are saved first; a probe that cannot write
    its profile ends the script with pmac probe's own one-line error (exit 2), not a traceback."""
    import json

    bench = [sys.executable, str(EX.parent / "bench" / "accuracy")]
    afile = tmp_path / "afile"
    afile.write_text("")
    saved = tmp_path / "runs.json"
    r = subprocess.run(bench + ["--reps", "1", "--only", "nbody-n2-4096", "--no-state", "--save", str(saved),
                                "--probe-now", str(afile / "sub")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == (
        f"accuracy: pmac probe failed (exit 2): pmac probe: error: {afile / 'sub'}: cannot create the output "
        "directory: Not a directory")
    walls = json.loads(saved.read_text())
    assert list(walls) == ["nbody-n2-4096"] and len(walls["nbody-n2-4096"]) == 1 and walls["nbody-n2-4096"][0] > 0
    r = subprocess.run(bench + ["--measured", str(saved), "--probe-now", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--probe-now probes during a measurement" in r.stderr


def test_bench_accuracy_warns_when_the_traced_bursts_miss_the_runs():
    """bench/accuracy: a traced-burst replay far from the native runs (mean absolute error over
    15 %) means the signatures describe another state of the machine: the script says so and
    names the worst case; within 15 % it says nothing."""
    import pandas as pd
    import runpy

    warn = runpy.run_path(str(EX.parent / "bench" / "accuracy"), run_name="bench_accuracy")["stale_bursts_warning"]
    df = pd.DataFrame({"case": ["a", "b", "c"], "replay_error_pct": [4.0, -10.0, 20.0]})
    assert warn(df) is None                                        # mean 11.3 %
    df.loc[2, "replay_error_pct"] = 149.0
    msg = warn(df)
    assert msg.startswith("warning: the signatures' traced bursts replay 54.3 % off these runs (mean absolute; "
                          "c +149.0 %)") and "python bench/make_signatures" in msg


def test_bench_accuracy_reports_the_measured_medians_interval(tmp_path):
    """bench/accuracy --measured FILE --csv: per case the measured median's 90 % interval
    (pmac.validate.median_ci: x_(4) and x_(12) of 15 runs) relative to the median, and the
    prediction against it. Runs 10..150 ms: median 80 ms, interval 40..120 ms (-50 / +50 %).
    --compare-machine prints a second profile's predictions beside (here the same profile)."""
    import json

    import pandas as pd

    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"nbody-n2-4096": [0.01 * k for k in (15, 1, 14, 2, 13, 3, 12, 4, 11, 5, 10, 6, 9, 7, 8)]}))
    csv = tmp_path / "acc.csv"
    machine = str(EX.parent / "machines" / "xeon-vm.yaml")
    r = subprocess.run([sys.executable, str(EX.parent / "bench" / "accuracy"), "--measured", str(runs), "--machine",
                        machine, "--only", "nbody-n2-4096", "--csv", str(csv), "--compare-machine", machine],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    first = r
    row = pd.read_csv(csv).iloc[0]
    assert row["measured_s"] == pytest.approx(0.08) and row["ci_coverage"] == pytest.approx(1 - 2 * 576 / 32768)
    assert (row["measured_lo_s"], row["measured_hi_s"]) == pytest.approx((0.04, 0.12))
    assert (row["ci_lo_pct"], row["ci_hi_pct"]) == pytest.approx((-50.0, 50.0))
    pred = row["predicted_s"]
    inside = 0.04 <= pred <= 0.12
    assert row["error_vs_ci_pct"] == pytest.approx(0.0 if inside else 100 * (pred - 0.04) / 0.04)
    assert "within_15pct_of_ci_frac" in r.stdout and "coverage 96.5% or more" in r.stdout
    # the traced-burst replay against the traced run's own region: per rank from the end of its
    # first Barrier to the start of its last Reduce, the longest, less the tracer's own time in it
    # (a gap between calls longer than its burst; computed here from the events)
    from pmac.signature import load_signature
    from pmac.trace import Op

    ev = load_signature(EX.parent / "signatures" / "nbody-n2-4096").events
    ev = ev.assign(own=ev["t_start_s"] - ev.groupby("rank")["t_end_s"].shift(1).fillna(0.0) - ev["burst_s"])
    regions = []
    for q in (0, 1):
        e = ev[ev["rank"] == q].reset_index(drop=True)
        b = e.index[e["op"] == Op.BARRIER][0]
        r_ = e.index[e["op"] == Op.REDUCE][-1]
        regions.append(e["t_start_s"][r_] - e["t_end_s"][b] - e["own"][b + 1: r_ + 1].sum())
    region = max(regions)
    assert row["traced_region_s"] == pytest.approx(region, rel=1e-9)
    own = 100 * (row["replay_measured_bursts_s"] - region) / region
    assert f"own timed region (its trace's timestamps: the replay's error on the run its bursts come from, " \
           f"no run-to-run noise): nbody-n2-4096 {own:+.1f} %" in r.stdout
    # and where its calls differ from the traced ones (pmac.validate.call_costs), operation by operation
    import re
    assert "where that replay's calls differ from the traced ones" in r.stdout
    assert re.search(r"\n  nbody-n2-4096: (none|[A-Z_]+ [+-]\d+\.\d % \(\d+ calls, )", r.stdout)
    # --compare-machine: the same profile again predicts the same, so the two differ by nothing
    assert row["compare_predicted_s"] == row["predicted_s"] and row["compare_error_pct"] == row["error_pct"]
    assert "the two profiles' predictions differ by 0.0 % (median over the cases; +0.0 to +0.0 %)" in r.stdout
    r = subprocess.run([sys.executable, str(EX.parent / "bench" / "accuracy"), "--measured", str(runs),
                        "--probe-before", str(tmp_path / "p")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--probe-before probes during a measurement" in r.stderr
    # the default statistic is the median (the profile refitted on every repetition); --statistic
    # best: the same runs against the profile as pmac probe fitted it
    # (the shipped profile is pooled at the median: nothing to refit)
    assert "each point at the median of all its repetitions (--statistic median); their own statistic, none " \
           "refitted" in first.stdout
    csv2 = tmp_path / "best.csv"
    r = subprocess.run([sys.executable, str(EX.parent / "bench" / "accuracy"), "--measured", str(runs), "--machine",
                        machine, "--only", "nbody-n2-4096", "--csv", str(csv2), "--statistic", "best"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and f"(--statistic best); refitted from their raw repetitions: {machine}" in r.stdout
    best = pd.read_csv(csv2).iloc[0]
    assert best["measured_s"] == row["measured_s"] and best["predicted_s"] != row["predicted_s"]


def test_bench_accuracy_interleave_probes_around_every_block_and_pools_them(tmp_path):
    """bench/accuracy --interleave: 5 repetitions in 2 blocks (3 + 2) give probe, runs, probe, runs,
    probe; the three probes pooled into DIR/NAME.yaml (every repetition of each, with a sidecar),
    the runs and the state checks saved after each block, before the next probe (which may fail); the
    first probe returned for the comparison. The probe and
    the runs are stand-ins here (a copy of the shipped profile, made-up timings): what is checked
    is the order and the pooling."""
    import json
    import runpy
    import shutil

    from pmac.profile import load_profile, load_raw

    interleaved = runpy.run_path(str(EX.parent / "bench" / "accuracy"), run_name="bench_accuracy")["interleaved"]
    machines = EX.parent / "machines"
    log = []

    saved = tmp_path / "runs.json"
    on_disk = tmp_path / "runs.state.json"

    def probe(out, name):
        out.mkdir(parents=True)
        for suffix in (".yaml", ".raw.npz"):
            shutil.copy(machines / f"xeon-vm{suffix}", out / f"{name}{suffix}")
        log.append(("probe", out.name, len(json.loads(on_disk.read_text())) if on_disk.exists() else None))
        return out / f"{name}.yaml"

    def measure_block(cases, cmd_of, reps, n_ranks, state, label):
        log.append(("runs", reps, label))
        state += [{0: (1.0, 2.0, float(len(log))), 1: (1.5, 2.5, 3.5)}] * reps
        return {c["name"]: [float(len(log))] * reps for c in cases}

    cases = [{"name": "a"}, {"name": "b"}]
    state = []
    walls, pooled, first = interleaved(cases, None, 2, state, tmp_path, "xeon-vm", reps=5, rounds=2, save=str(saved),
                                       probe=probe, measure_block=measure_block,
                                       before_block=lambda i: log.append(("trace", i)))
    assert log == [("probe", "round-0", None), ("trace", 0), ("runs", 3, " of block 1/2"), ("probe", "round-1", 3),
                   ("trace", 1), ("runs", 2, " of block 2/2"), ("probe", "round-2", 5)]
    assert json.loads(on_disk.read_text())[3] == {"0": [1.0, 2.0, 6.0], "1": [1.5, 2.5, 3.5]}
    assert walls == {"a": [3.0] * 3 + [6.0] * 2, "b": [3.0] * 3 + [6.0] * 2} and json.loads(saved.read_text()) == walls
    assert pooled == str(tmp_path / "xeon-vm.yaml") and first == str(tmp_path / "round-0" / "xeon-vm.yaml")
    prof = load_profile(pooled)
    one = load_profile(machines / "xeon-vm.yaml")
    assert len(load_raw(prof, pooled)["compute"]) == 3 * len(load_raw(one, machines / "xeon-vm.yaml")["compute"])
    assert [p["file"] for p in prof.provenance["pooled_from"]] == [
        str(tmp_path / f"round-{k}" / "xeon-vm.yaml") for k in range(3)]
    r = subprocess.run([sys.executable, str(EX.parent / "bench" / "accuracy"), "--measured", str(saved),
                        "--interleave", str(tmp_path / "again")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--interleave probes during the measurement" in r.stderr
    for args, msg in ((["--trace-each-round"], "--trace-each-round traces in the rounds of --interleave"),
                      (["--traces", str(tmp_path)], "--traces gives the traces of an earlier --trace-each-round run")):
        r = subprocess.run([sys.executable, str(EX.parent / "bench" / "accuracy"), *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_bench_accuracy_state_loop_prices_loop_work_as_the_checks_found_it(tmp_path):
    """bench/accuracy --measured FILE --state-loop: FILE.state.json (written by --save beside it)
    holds the state checks of the runs; per round the slower CPU's never-taken branch loop replaces
    the profile's repetitions of that kernel. Checks at twice the profile's median loop time on one
    CPU: the line says so, and stream_mpi-n2-20000 (a scalar triad, much of it loop work) is
    predicted slower than without; no state file, or --no-state: a one-line refusal."""
    import json

    import pandas as pd

    from pmac.profile import load_profile, load_raw

    machine = EX.parent / "machines" / "epyc-vm.yaml"
    comp = load_raw(load_profile(machine), machine)["compute"]
    m = float(comp[(comp["probe"] == "branch") & (comp["param"] == 0.0)]["value"].median())
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"stream_mpi-n2-20000": [0.03, 0.031, 0.029]}))
    bench = [sys.executable, str(EX.parent / "bench" / "accuracy"), "--measured", str(runs), "--machine",
             str(machine), "--only", "stream_mpi-n2-20000"]
    r = subprocess.run(bench + ["--state-loop"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        f"accuracy: --state-loop: no state check with the loop work in {tmp_path / 'runs.state.json'} (none saved, "
        "or taken before pmac.state had the loop)")
    (tmp_path / "runs.state.json").write_text(json.dumps(
        [{"0": [1e11, 1e10, 2 * m], "1": [1e11, 1e10, m]}] * 3))
    out = {}
    for flag in ("", "--state-loop"):
        csv = tmp_path / f"acc{flag}.csv"
        r = subprocess.run(bench + ["--csv", str(csv)] + ([flag] if flag else []), capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out[flag] = (pd.read_csv(csv).iloc[0]["predicted_s"], r)
    assert (f"loop work from the state checks (--state-loop): per round the slower CPU's, 3 rounds, median "
            f"{2 * m * 1e9:.3f} ns an element") in out["--state-loop"][1].stderr
    assert "loop work 0.50 (0.50-0.50)" in out[""][1].stdout     # the state line: cpu 0 at half the speed
    assert out["--state-loop"][0] > 1.1 * out[""][0]
    r = subprocess.run(bench + ["--state-loop", "--no-state"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--state-loop prices loop work from the state checks that --no-state skips" in r.stderr


def test_host_modes_by_size_prints_the_percentiles_of_each_length(built):
    """bench/host_modes --sizes: a line per array length, its working set (3 arrays of N doubles) in
    KiB, five ascending percentiles of ns an element and the 90th over the 10th."""
    res = subprocess.run([sys.executable, str(REPO / "bench" / "host_modes"), "--sizes", "2000,20000", "--runs", "3"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.strip().startswith("N=")]
    assert len(rows) == 2, res.stdout
    for row, n in zip(rows, (2000, 20000)):
        m = re.match(r"\s*N=\s*(\d+) \(\s*(\d+) KiB\):((?: [0-9.]+){5})\s+([0-9.]+)$", row)
        assert m, row
        assert int(m.group(1)) == n and int(m.group(2)) == round(3 * n * 8 / 1024)
        q = [float(x) for x in m.group(3).split()]
        assert q == sorted(q) and 0.01 < q[0] < 100, row
        assert float(m.group(4)) == pytest.approx(q[4] / q[0], abs=0.01)  # both printed rounded

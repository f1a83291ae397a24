"""pmac.counters (counts per rank and function from a signature), hardware-counter detection, the
counter CSV, and ``pmac scale`` / ``pmac cluster`` end to end on a program traced at 1, 2, 4 and 8
ranks, whose floating-point work per rank is known by hand."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pmac.cli import main
from pmac.counters import compute_counters, hardware_counter_status, miss_counters, mpi_counters, read_counter_csv
from pmac.errors import InputError
from pmac.memsig import ACCESS_LOAD, ACCESS_STORE, BURST_FUNCTIONS, BURST_NAMES, BURSTS, REUSE, reuse_bin
from pmac.profile import CacheLevel
from synth import pingpong_signature

REPO = Path(__file__).resolve().parents[1]


def _synthetic(n_iter: int = 3, msg_bytes: int = 1000):
    """The two-rank ping-pong of tests/synth.py with a memory signature made by hand:
    rank 0: the burst ending at INIT (seq 0, 'ld', 1000 instructions), burst 1 split into f (300)
    and g (200), burst 2 whole and named f (100); rank 1: burst 1 whole, without a name (50).
    f's loads and stores: 150 + 50 in burst 1, 40 + 10 in burst 2; its whole-run reuse: 100 loads
    at 10 lines, 100 at 1000 lines, 50 first touches."""
    def b(rank, seq, ins, loads=0, stores=0):
        return dict(rank=rank, seq=seq, instructions=ins, loads=loads, stores=stores, load_bytes=8 * loads,
                    store_bytes=8 * stores, sample_frac=1.0)
    bursts = [b(0, 0, 1000, 300, 100), b(0, 1, 500, 200, 80), b(0, 2, 100, 40, 10), b(1, 1, 50, 5, 5)]
    bt = BURSTS.coerce(pd.DataFrame([{c: x.get(c, 0) for c in BURSTS.names} for x in bursts]))
    split = [dict(rank=0, seq=1, function="f", instructions=300, loads=150, stores=50, load_bytes=1200,
                  store_bytes=400, flop=60.0),
             dict(rank=0, seq=1, function="g", instructions=200, loads=50, stores=30, load_bytes=400,
                  store_bytes=240)]
    bf = BURST_FUNCTIONS.coerce(pd.DataFrame([{c: x.get(c, 0) for c in BURST_FUNCTIONS.names} for x in split]))
    bn = BURST_NAMES.coerce(pd.DataFrame([dict(rank=0, seq=0, function="ld", share=1.0),
                                          dict(rank=0, seq=2, function="f", share=0.99)]))
    reuse = []
    for d, cnt in ((10, 100.0), (1000, 100.0), (-1, 50.0)):
        reuse.append(dict(rank=0, seq=-1, function="f", line_bytes=64, access=ACCESS_LOAD,
                          bin=int(reuse_bin(np.array([d]))[0]), count=cnt))
    reuse.append(dict(rank=0, seq=-1, function="f", line_bytes=128, access=ACCESS_STORE,
                      bin=int(reuse_bin(np.array([5]))[0]), count=7.0))
    mem = {"bursts": bt, "burst_functions": bf, "burst_names": bn, "reuse": REUSE.coerce(pd.DataFrame(reuse))}
    return pingpong_signature(n_iter=n_iter, msg_bytes=msg_bytes, memory=mem)


def _value(t, rank, function, metric):
    sel = t[(t["rank"] == rank) & (t["function"] == function) & (t["metric"] == metric)]
    assert len(sel) <= 1
    return float(sel["value"].iloc[0]) if len(sel) else None


def test_compute_counters_split_and_whole_bursts():
    t = compute_counters(_synthetic())
    assert _value(t, 0, "f", "instructions") == 400.0           # 300 of burst 1 + burst 2 whole
    assert _value(t, 0, "f", "loads") == 190.0 and _value(t, 0, "f", "stores") == 60.0
    assert _value(t, 0, "g", "instructions") == 200.0
    assert _value(t, 0, "ld", "instructions") == 1000.0
    assert _value(t, 1, "(unnamed bursts)", "instructions") == 50.0
    assert _value(t, 0, "f", "flop") == 60.0
    # fetches of the synthetic tables are 0 (counted), never -1
    no_start = compute_counters(_synthetic(), startup=False)
    assert _value(no_start, 0, "ld", "instructions") is None
    assert _value(no_start, 0, "f", "instructions") == 400.0


def test_misses_from_the_functions_reuse_histogram():
    l1 = CacheLevel(name="L1", size_bytes=64 * 64, line_bytes=64)          # 64 lines: the 10-line reuses hit
    big = CacheLevel(name="L3", size_bytes=4 * 64 * 4096, line_bytes=64, shared_by_cores=4)  # 4096 lines a core
    wide = CacheLevel(name="L2", size_bytes=1 << 20, line_bytes=256)      # no reuse rows at 256-byte lines
    t = miss_counters(_synthetic(), [l1, big, wide])
    accesses = 190.0 + 60.0
    assert _value(t, 0, "f", "L1_misses") == pytest.approx(accesses * 150.0 / 250.0, rel=1e-12)
    assert _value(t, 0, "f", "L3_misses") == pytest.approx(accesses * 50.0 / 250.0, rel=1e-12)
    assert _value(t, 0, "f", "L2_misses") is None
    assert _value(t, 0, "g", "L1_misses") is None                  # g has no reuse rows


def test_mpi_counters_of_the_ping_pong():
    t = mpi_counters(_synthetic(n_iter=3, msg_bytes=1000))
    assert _value(t, 0, "MPI_Send", "mpi_calls") == 3.0
    assert _value(t, 0, "MPI_Send", "mpi_send_bytes") == 3000.0
    assert _value(t, 1, "MPI_Recv", "mpi_recv_bytes") == 3000.0
    assert _value(t, 1, "MPI_Init", "mpi_calls") == 1.0


def test_no_memory_signature_is_a_clear_error():
    with pytest.raises(InputError, match="pp: no memory signature: counters per function need one"):
        compute_counters(pingpong_signature())


def _fake_perf(tmp_path, stderr_lines, rc=0):
    exe = tmp_path / "perf"
    exe.write_text("#!/bin/sh\n" + "".join(f"echo '{ln}' >&2\n" for ln in stderr_lines) + f"exit {rc}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_hardware_counters_reported_as_perf_sees_them(tmp_path):
    none = _fake_perf(tmp_path, ["<not supported>,,instructions:u,0,100.00,,",
                                 "<not supported>,,cycles:u,0,100.00,,"])
    ok, why = hardware_counter_status(none)
    assert not ok and why == "perf stat: instructions:u, cycles:u <not supported>"
    (tmp_path / "b").mkdir()
    some = _fake_perf(tmp_path / "b", ["123456,,instructions:u,401000,100.00,,", "<not counted>,,cycles:u,0,0,,"])
    assert hardware_counter_status(some) == (True, "instructions:u")
    (tmp_path / "c").mkdir()
    broken = _fake_perf(tmp_path / "c", ["perf_event_open: permission denied"], rc=255)
    assert hardware_counter_status(broken) == (False, "perf stat failed: perf_event_open: permission denied")
    assert hardware_counter_status(str(tmp_path / "absent"))[0] is False


def test_counter_csv_read_and_its_errors(tmp_path):
    good = tmp_path / "c.csv"
    good.write_text("n_ranks,function,metric,value\n2,kernel,PAPI_TOT_INS,1e6\n4,kernel,PAPI_TOT_INS,5e5\n")
    df = read_counter_csv(good)
    assert list(df["n_ranks"]) == [2, 4] and df["value"].tolist() == [1e6, 5e5]
    for text, msg in (("n_ranks,function,value\n2,k,1\n", "lacks column\\(s\\) metric"),
                      ("n_ranks,function,metric,value,host\n2,k,m,1,a\n", "unknown column\\(s\\) host"),
                      ("n_ranks,function,metric,value\n2,k,m,lots\n", "column value row 2 is not a number"),
                      ("n_ranks,function,metric,value\n0,k,m,1\n", "n_ranks must be whole numbers >= 1"),
                      ("n_ranks,function,metric,value\n2,k,m,-1\n", "negative value")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(InputError, match=msg) as exc:
            read_counter_csv(bad)
        assert "bad.csv" in str(exc.value)


# --- the shipped series: stencil2d 192 x 192, 10 iterations, traced at 1-16 ranks -------------------

def test_shipped_scaling_series_by_hand():
    """signatures/scaling/ (made by python bench/scaling_check --keep signatures/scaling --apps
    stencil2d): 7 flop a point, 192 * 192 / p points a rank (every block equal at these p), 10
    iterations; the fit on all five runs finds 1/p exactly, and the JSON ranks main first at 16."""
    paths = [str(REPO / "signatures" / "scaling" / f"stencil2d-n{p}") for p in (1, 2, 4, 8, 16)]
    rc, out = _run(["scale", *paths, "--no-startup", "--csv"])
    assert rc == 0
    df = pd.read_csv(io.StringIO(out)).set_index(["function", "metric"])
    main_flop = df.loc[("main", "flop")]
    for p in (1, 2, 4, 8, 16):
        assert main_flop[f"at_{p}"] == 7 * 192 * 192 * 10 / p
    assert main_flop["exponent"] == -1.0 and main_flop["c1"] == pytest.approx(7 * 192 * 192 * 10, rel=1e-9)
    isend = df.loc[("MPI_Isend", "mpi_calls")]
    # the largest rank's neighbours: none at 1 rank, 1 (2 x 1), 2 (2 x 2), 3 (4 x 2), 4 (4 x 4)
    assert [isend[f"at_{p}"] for p in (1, 2, 4, 8, 16)] == [0, 10, 20, 30, 40]
    rc, out = _run(["scale", *paths, "--no-startup", "--json", "--at", "16"])
    assert json.loads(out)["ranking"]["16"][0]["function"] == "main"


# --- end to end: stencil2d traced at 1, 2, 4 and 8 ranks ------------------------------------------

N, ITERS = 48, 12


@pytest.fixture(scope="module")
def scaling_runs(tmp_path_factory):
    from conftest import capability, required

    for what in ("mpi", "valgrind"):
        reason = capability(what)
        if reason:
            if what in required():
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
    res = subprocess.run(["bash", str(REPO / "examples" / "build.sh"), sys.executable], capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    base = tmp_path_factory.mktemp("scaling")
    with redirect_stdout(io.StringIO()) as buf:
        rc = main(["trace", "--memory", "-o", str(base / "st"), "--scaling", "1,2,4,8", "--",
                   str(REPO / "examples" / "build" / "stencil2d"), str(N), str(ITERS)])
    assert rc == 0
    assert f"traced at 1, 2, 4, 8 ranks: {base / 'st'}-n1" in buf.getvalue()
    out = {p: base / f"st-n{p}" for p in (1, 2, 4, 8)}
    return out


def _run(argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def test_flop_per_rank_and_its_model_by_hand(scaling_runs):
    from pmac.scaling import fit_models, reduce_ranks, scaling_counters
    from pmac.signature import load_signature

    sigs = {p: load_signature(d) for p, d in scaling_runs.items()}
    counters, _ = scaling_counters(list(sigs.values()))
    flop = counters[(counters["function"] == "main") & (counters["metric"] == "flop")]
    for p in (1, 2, 4, 8):
        # 5-point Jacobi: 3 adds and a multiply for the new value, a subtract for the change and a
        # multiply-add into the sum: 7 flop a point, N*N/p points a rank (every block equal here)
        got = flop[flop["n_ranks"] == p].set_index("rank")["value"]
        assert len(got) == p and (got == 7.0 * N * N / p * ITERS).all(), (p, got.tolist())
    isend = counters[(counters["function"] == "MPI_Isend") & (counters["metric"] == "mpi_calls")]
    # 8 ranks on a 4 x 2 grid: an inner rank of the long side has 3 neighbours
    assert isend[isend["n_ranks"] == 8]["value"].max() == 3 * ITERS
    # fitted on 1, 2 and 4 ranks, the model of main's flop predicts the run at 8
    small = counters[counters["n_ranks"] < 8]
    models = fit_models(reduce_ranks(small, "max"), up_to=8).set_index(["function", "metric"])
    m = models.loc[("main", "flop")]
    assert m["exponent"] == -1.0 and m["log_exponent"] == 0
    assert float(m["model_obj"](8)) == pytest.approx(7.0 * N * N / 8 * ITERS, rel=1e-6)


def test_pmac_scale_cli(scaling_runs):
    paths = [str(scaling_runs[p]) for p in (1, 2, 4, 8)]
    rc, out = _run(["scale", *paths, "--metric", "flop", "--at", "64", "--no-startup"])
    assert rc == 0
    assert "scaling of 4 runs at 1, 2, 4, 8 ranks" in out
    assert "no hardware counters on this machine" in out or "counts hardware events" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("main "))
    assert "p^-1" in line
    assert "ranked by flop at 64 ranks (extrapolated 8x beyond the largest run, 8)" in out
    rc, out = _run(["scale", *paths, "--csv"])
    df = pd.read_csv(io.StringIO(out))
    row = df[(df["function"] == "main") & (df["metric"] == "flop")].iloc[0]
    assert row["exponent"] == -1.0 and row["at_8"] == 7.0 * N * N / 8 * ITERS
    rc, out = _run(["scale", *paths, "--json", "--at", "16,32"])
    doc = json.loads(out)
    assert doc["runs"] == [1, 2, 4, 8] and set(doc["ranking"]) == {"16", "32"}
    assert doc["hardware_counters"]["available"] in (True, False)


def test_pmac_scale_with_a_machine_and_a_counter_file(scaling_runs, tmp_path):
    csv = tmp_path / "hw.csv"
    # measured at 2, 4 and 8 ranks only: fitted over those three, not read as 0 at 1 rank
    csv.write_text("n_ranks,function,metric,value\n" + "".join(f"{p},main,PAPI_TOT_CYC,{3e6 / p + 1000}\n"
                                                               for p in (2, 4, 8)))
    paths = [str(scaling_runs[p]) for p in (1, 2, 4, 8)]
    rc, out = _run(["scale", *paths, str(REPO / "machines" / "emu-tcp-1gbit.yaml"), str(csv), "--csv"])
    assert rc == 0
    df = pd.read_csv(io.StringIO(out)).set_index(["function", "metric"])
    assert df.loc[("main", "PAPI_TOT_CYC"), "c1"] == pytest.approx(3e6, rel=1e-9)
    assert np.isnan(df.loc[("main", "PAPI_TOT_CYC"), "at_1"]) and df.loc[("main", "PAPI_TOT_CYC"), "n_runs"] == 3
    assert ("main", "time_s") in df.index and ("main", "L1_misses") in df.index
    assert ("(run)", "finish_s") in df.index
    # the per-rank function times sum to pmac predict --functions' per function; leaving the start-up
    # bursts out takes exactly their time away
    from pmac.counters import startup_bursts
    from pmac.predict_functions import function_times
    from pmac.profile import load_profile
    from pmac.signature import load_signature

    sig = load_signature(scaling_runs[4])
    prof = load_profile(REPO / "machines" / "emu-tcp-1gbit.yaml")
    whole = function_times(sig, [prof]).set_index("function")["time_s"]
    per_rank = function_times(sig, [prof], by_rank=True)
    assert set(per_rank["rank"]) == {0, 1, 2, 3}
    assert per_rank.groupby("function")["time_s"].sum().reindex(whole.index).to_numpy() == pytest.approx(
        whole.to_numpy(), rel=1e-12)
    lo = startup_bursts(sig)
    # a rank's burst that ends at MPI_Init (seq 0) and the one after MPI_Finalize (seq = its calls)
    calls = sig.events.groupby("rank").size()
    assert sorted(lo) == sorted([(r, 0) for r in range(4)] + [(r, int(calls[r])) for r in range(4)])
    without = function_times(sig, [prof], leave_out=lo)
    assert without["time_s"].sum() < whole.sum()
    # a machine of one node cannot place 8 ranks: counts and misses, no times, and a note saying so
    rc, out = _run(["scale", *paths, str(REPO / "machines" / "epyc-vm.yaml")])
    assert rc == 0 and "no predicted times: machine 'epyc-vm' lacks network.inter_node" in out
    assert "models of instructions" in out


def test_pmac_scale_errors(scaling_runs, capsys):
    assert main(["scale", str(scaling_runs[1]), str(scaling_runs[2])]) == 2
    assert "runs at 3 or more process counts, got 1, 2" in capsys.readouterr().err
    assert main(["scale", str(scaling_runs[2]), str(scaling_runs[2]), str(scaling_runs[4])]) == 2
    assert "two signatures at 2 ranks" in capsys.readouterr().err
    assert main(["scale", *(str(scaling_runs[p]) for p in (1, 2, 4)), "--at", "lots"]) == 2
    assert "--at 'lots': expected process counts like 1,2,4,8" in capsys.readouterr().err
    assert main(["scale", *(str(scaling_runs[p]) for p in (1, 2, 4)), "--at", "16,0"]) == 2
    assert "--at '16,0': expected distinct process counts >= 1" in capsys.readouterr().err


def test_trace_scaling_refuses_a_launcher_and_bad_counts(capsys, tmp_path):
    assert main(["trace", "-o", str(tmp_path / "x"), "--scaling", "1,2", "--", "mpiexec", "-n", "2", "./a"]) == 2
    assert "--scaling launches the program itself: give it without the launcher" in capsys.readouterr().err
    assert main(["trace", "-o", str(tmp_path / "x"), "--scaling", "2,2", "--", "./a"]) == 2
    assert "expected distinct process counts >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x-n2").exists()


def test_pmac_cluster_cli(scaling_runs, tmp_path):
    paths = [str(scaling_runs[p]) for p in (1, 2, 4, 8)]
    rc, out = _run(["cluster", *paths, "--by", "function", "--plot", str(tmp_path / "c.png")])
    assert rc == 0 and "representative" in out and (tmp_path / "c.png").stat().st_size > 1000
    rc, out = _run(["cluster", *paths, "--csv"])
    corr = pd.read_csv(io.StringIO(out), index_col="metric")
    assert list(corr.index) == list(corr.columns)
    assert np.allclose(np.diag(corr.to_numpy()), 1.0) and np.allclose(corr.to_numpy(), corr.to_numpy().T)
    # load and store bytes are 8 bytes an access for this program's doubles: one group
    rc, out = _run(["cluster", *paths, "--json"])
    g = pd.DataFrame(json.loads(out)["groups"]).set_index("metric")
    assert g.loc["loads", "cluster"] == g.loc["load_bytes", "cluster"]


FAKE_PERF = r'''#!/bin/sh
# a stand-in for perf stat -x , [-o FILE] -e EVENTS -- CMD: runs CMD, then reports
# 1000 + rank for every event but cycles, which it does not support
out=""; ev=""
shift
while [ "$1" != "--" ]; do
  case "$1" in -o) out="$2"; shift 2;; -e) ev="$2"; shift 2;; -x) shift 2;; *) shift;; esac
done
shift
"$@"; rc=$?
r=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
text=""
for e in $(echo "$ev" | tr , ' '); do
  if [ "$e" = cycles ]; then text="$text<not supported>,,$e,0,100.00,,
"; else text="$text$((1000 + r)),,$e,4000,100.00,,
"; fi
done
if [ -n "$out" ]; then printf '%s' "$text" > "$out"; else printf '%s' "$text" >&2; fi
exit $rc
'''


@pytest.mark.requires("mpi")
def test_pmac_count_with_a_machine_that_has_counters(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    perf = bin_dir / "perf"
    perf.write_text(FAKE_PERF)
    perf.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "hw.csv"
    rc, text = _run(["count", "-o", str(out), "--scaling", "1,3", "--events", "instructions,cycles,cache-misses",
                     "--", "/bin/true"])
    assert rc == 0, text
    assert "3 ranks: cache-misses, instructions" in text
    df = read_counter_csv(out)
    got = df[df["n_ranks"] == 3].set_index(["rank", "metric"])["value"]
    assert got[(2, "instructions")] == 1002.0 and got[(0, "cache-misses")] == 1000.0
    assert "cycles" not in set(df["metric"]) and set(df["function"]) == {"(all)"}
    assert len(df) == (1 + 3) * 2


def test_pmac_count_without_counters_says_what_to_use(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    perf = bin_dir / "perf"
    perf.write_text("#!/bin/sh\necho '<not supported>,,instructions,0,100.00,,' >&2\n")
    perf.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "hw.csv"
    out.write_text("keep me\n")
    assert main(["count", "-o", str(out), "--scaling", "1,2", "--", "/bin/true"]) == 2
    err = capsys.readouterr().err
    assert "no hardware counters on this machine (perf stat: instructions <not supported>)" in err
    assert "pmac trace --memory --scaling" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == "keep me\n"
    assert main(["count", "-o", str(out), "--scaling", "1", "--", "mpiexec", "./a"]) == 2
    assert "launches the program itself" in capsys.readouterr().err

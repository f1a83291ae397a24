"""bench/host_index: the host index of a run, its rank correlation with the run's time, and the
spread left when the times are divided by it."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "host_index"


@pytest.fixture(scope="module")
def hi():
    return runpy.run_path(str(BENCH), run_name="host_index")


def test_table_by_hand(hi):
    # case a: each run's time proportional to its host index (quanta per core before and after);
    # case b: the same times against an index that is flat
    idx = [1.0, 1.2, 0.9, 1.5, 1.1]
    a = [[2.0 * x, [10.0 * x, 10.0 * x], [10.0 * x, 10.0 * x]] for x in idx]
    b = [[2.0 * x, [10.0, 12.0], [11.0, 11.0]] for x in idx]
    t = hi["table"]({"a": a, "b": b}).set_index("case")
    # the times 2.0 2.4 1.8 3.0 2.2: median 2.2, quartiles 2.0 and 2.4
    assert t.loc["a", "median_s"] == pytest.approx(2.2)
    assert t.loc["a", "spread_pct"] == pytest.approx(100 * 1.2 / 2.2)
    assert t.loc["a", "iqr_pct"] == pytest.approx(100 * 0.4 / 2.2)
    assert t.loc["a", "rho"] == pytest.approx(1.0)
    assert t.loc["a", "iqr_normalised_pct"] == pytest.approx(0.0, abs=1e-9)
    assert t.loc["a", "index_spread_pct"] == pytest.approx(100 * 0.6 / 1.1)
    assert t.loc["b", "index_spread_pct"] == pytest.approx(0.0)
    assert t.loc["b", "iqr_normalised_pct"] == pytest.approx(t.loc["b", "iqr_pct"])
    assert np.isnan(t.loc["b", "rho"])     # a constant index has no rank order


def test_unreadable_saved_runs_is_one_line(tmp_path):
    bad = tmp_path / "runs.json"
    bad.write_text("{not json")
    r = subprocess.run([sys.executable, str(BENCH), "--measured", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith(f"host_index: {bad}: cannot read saved runs") and r.stderr.count("\n") == 1


@pytest.mark.requires("mpi")
def test_runs_a_case_between_noise_chunks(tmp_path, hi):
    out = tmp_path / "runs.json"
    r = subprocess.run([sys.executable, str(BENCH), "--reps", "3", "--only", "stream_mpi-n2-20000", "--chunk-s",
                        "0.01", "--save", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    runs = json.loads(out.read_text())
    assert list(runs) == ["stream_mpi-n2-20000"]
    rs = runs["stream_mpi-n2-20000"]
    assert len(rs) == 3
    for wall, before, after in rs:
        assert wall > 0 and len(before) == len(after) >= 1 and min(before + after) > 0
    # the printed row is the table of the saved runs
    row = next(ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] == ["stream_mpi-n2-20000"])
    t = hi["table"](runs).iloc[0]
    assert int(row[1]) == 3
    assert float(row[2]) == pytest.approx(t["median_s"], rel=1e-3)
    assert float(row[-1]) == pytest.approx(t["iqr_normalised_pct"], rel=1e-3, abs=1e-3)

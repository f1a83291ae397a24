"""bench/accuracy_summary: the pooled figures the README cites, hand-computed on two small tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "accuracy_summary"


def _run(*paths) -> str:
    out = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pooled_errors_and_the_band_count(tmp_path):
    a = pd.DataFrame({"case": ["x", "y"], "error_pct": [10.0, -20.0], "in_band": [True, False]})
    b = pd.DataFrame({"case": ["x", "y"], "error_pct": [-5.0, 14.0], "in_band": [True, True]})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    out = _run(tmp_path / "a.csv", tmp_path / "b.csv")
    # |10| + |-20| + |-5| + |14| = 49 over 4 cases; within 15 %: 10, -5, 14; only run b has both
    assert "2 run(s), mean absolute error 12.25 %, 3 of 4 cases within 15 %, every case within it in 1 of 2 " \
           "run(s)" in out
    assert "band (bench/accuracy --band, 2 of the runs): 3 of 4 native medians inside their band" in out
    # a table without the band column: no band line
    a.drop(columns="in_band").to_csv(tmp_path / "c.csv", index=False)
    assert "band (" not in _run(tmp_path / "c.csv")

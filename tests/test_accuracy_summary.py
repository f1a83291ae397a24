"""bench/accuracy_summary: the pooled figures the README cites, hand-computed on two small tables."""

from __future__ import annotations

import json
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


def test_loop_work_from_the_state_checks_beside_a_run(tmp_path):
    """RUN.state.json beside RUN.csv: per round the slower CPU's loop work (third entry, s an
    element), its median and largest over the rounds in ns; a run without one shows NaN; a
    malformed one is refused naming the file."""
    t = pd.DataFrame({"case": ["x"], "error_pct": [1.0]})
    for name in ("a", "b"):
        t.to_csv(tmp_path / f"{name}.csv", index=False)
    rounds = [{"0": [1e11, 9e9, 3e-10], "1": [1e11, 9e9, 5e-10]},
              {"0": [1e11, 9e9, 4e-10], "1": [1e11, 9e9, 3.5e-10]},
              {"0": [1e11, 9e9, 7e-10], "1": [1e11, 9e9, 2e-10]}]
    (tmp_path / "a.state.json").write_text(json.dumps(rounds))
    out = _run(tmp_path / "a.csv", tmp_path / "b.csv")
    lines = {l.split()[0]: l.split() for l in out.splitlines() if l.strip().startswith(("a.csv", "b.csv"))}
    head = next(l.split() for l in out.splitlines() if l.split()[:1] == ["run"])
    # slower CPU per round: 0.5, 0.4, 0.7 ns -> median 0.5, largest 0.7
    assert float(lines["a.csv"][head.index("loop_ns")]) == 0.5
    assert float(lines["a.csv"][head.index("loop_ns_max")]) == 0.7
    assert lines["b.csv"][head.index("loop_ns")] == "NaN"
    (tmp_path / "a.state.json").write_text("{not json")
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.csv")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "a.state.json: not a bench/accuracy state file" in bad.stderr

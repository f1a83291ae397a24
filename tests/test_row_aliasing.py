"""bench/row_aliasing: its table from made-up timings (medians and ratios by hand), its errors, one
real run."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "row_aliasing"


def test_table_takes_medians_of_ratios_to_each_rounds_baseline():
    table = runpy.run_path(str(SCRIPT), run_name="row_aliasing")["table"]
    # per round and size, the first column count is the baseline; rounds 2x apart in speed
    times = iter([1.0, 1.1, 2.0, 2.2, 4.0, 4.0,  # round 1: size 1 (cols 10, 20), size 2 (10, 20) ...
                  2.0, 2.4, 1.0, 1.3, 4.0, 4.4])
    calls = []

    def measure(size, cols):
        calls.append((size, cols))
        return next(times) * 1e-9

    rows = table(measure, [1024, 2048, 4096], [10, 20], 2)
    assert calls == [(1024, 10), (1024, 20), (2048, 10), (2048, 20), (4096, 10), (4096, 20)] * 2
    got = {(s, c): (t, r) for s, c, t, r in rows}
    assert got[1024, 10] == pytest.approx((1.5, 1.0)) and got[1024, 20] == pytest.approx((1.75, 1.15))
    assert got[2048, 20] == pytest.approx((1.75, (1.1 + 1.3) / 2))
    assert got[4096, 20] == pytest.approx((4.2, 1.05))


def test_bad_arguments_are_one_line_and_a_small_run_prints_its_table():
    for args, msg in ((["--cols", "1000"], "--cols needs two row lengths"),
                      (["--sizes", "a,b"], "comma-separated whole numbers")):
        r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "64", "--cols", "100,130", "--rounds", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["working", "set", "columns", "row", "bytes", "ns/element", "ratio"]
    first, second = lines[1].split(), lines[2].split()
    assert first[:4] == ["64", "KiB", "100", "800"] and float(first[5]) == 1.0 and float(first[4]) > 0
    assert second[:4] == ["64", "KiB", "130", "1040"] and float(second[5]) > 0

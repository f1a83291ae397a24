"""bench/noise_sensitivity: its table, hand-computed on saved rounds, and its errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "noise_sensitivity"


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def _rows(out: str) -> dict[str, list[float]]:
    return {line.split()[0]: [float(v) for v in line.split()[1:]] for line in out.splitlines()[2:]}


def test_episodes_ratios_and_rank_correlation(tmp_path):
    # reference median 1: rounds 4 and 5 (2 x) are the slow episodes, 2 of 6
    secs = np.array([[1, 2, 1], [1, 2, 2], [1, 2, 1], [1, 2, 2], [2, 3, 1], [2, 3, 1]], dtype=float)
    np.savez(tmp_path / "r.npz", names=np.array(["ref", "follows", "other"]), seconds=secs)
    out = _run("--measured", tmp_path / "r.npz")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("6 rounds; slow episodes (the reference over 1.4 x its median): 33.3% of them\n")
    rows = _rows(out.stdout)
    # columns: median_ms, in_slow, outside, p90, p99, rho
    assert rows["ref"] == [1000.0, 2.0, 1.0, 2.0, 2.0, 1.0]
    # follows: median 2, ratios 1,1,1,1,1.5,1.5; ranks tie like the reference's: rho 1
    assert rows["follows"] == [2000.0, 1.5, 1.0, 1.5, 1.5, 1.0]
    # other: median 1, ratios 1,2,1,2,1,1; ranks (2.5,5.5,...) against (2.5,..,5.5,5.5): rho -6/12
    assert rows["other"] == [1000.0, 1.0, 1.5, 2.0, 2.0, -0.5]


def test_no_episode_says_so_and_a_bad_file_is_one_line(tmp_path):
    np.savez(tmp_path / "flat.npz", names=np.array(["ref", "k"]), seconds=np.array([[1.0, 1.0], [1.1, 2.0]]))
    out = _run("--measured", tmp_path / "flat.npz")
    assert out.returncode == 0, out.stderr
    assert "0.0% of them; none met: run longer, or at another time" in out.stdout
    (tmp_path / "junk.npz").write_text("not numpy")
    out = _run("--measured", tmp_path / "junk.npz")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "junk.npz") in lines[0] and "not a file of" in lines[0]
    assert _run("--slow", "1.0").returncode == 2

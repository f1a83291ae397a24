#!/usr/bin/env python3
"""A bulk-synchronous loop of the noise probe's own quantum (bench/noise_check runs it natively).

    mpiexec -n 2 python bench/noise_bsp.py SWEEPS GRAIN STEPS

Every rank runs STEPS steps of GRAIN quanta (probes/noise.py's quantum, SWEEPS sweeps of its
array) followed by MPI_Barrier; rank 0 prints ``wall_s=`` of the loop (from after a barrier to
after the last step's barrier, the maximum over ranks).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probes.noise import ARRAY_DOUBLES, _fwq  # noqa: E402


def main() -> int:
    sweeps, grain, steps = (int(x) for x in sys.argv[1:4])
    comm = MPI.COMM_WORLD
    a = np.linspace(0.5, 1.0, ARRAY_DOUBLES)
    ts = np.zeros(2, dtype=np.int64)
    t_end = np.zeros(grain, dtype=np.int64)
    _fwq(a, sweeps, t_end, ts)          # compiled and warm before the clock starts
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(steps):
        _fwq(a, sweeps, t_end, ts)
        comm.Barrier()
    wall = comm.reduce(MPI.Wtime() - t0, op=MPI.MAX, root=0)
    if comm.Get_rank() == 0:
        print(f"wall_s={wall:.9f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

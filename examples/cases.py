"""The example cases pmac ships signatures for: one place for names, sizes and command lines.

Used by ``bench/make_signatures`` (traces every case at 2 ranks into ``signatures/<name>/``) and
by anything that needs to run the same program natively (accuracy tables, emulated validation):

    import runpy; cases = runpy.run_path("examples/cases.py")
    for c in cases["CASES"]: argv = cases["command"](c)     # without mpiexec

Each application has two input sizes whose per-rank working sets (at 2 ranks) sit in different
cache levels of the development machine (32 KiB L1d, 1 MiB L2 per core, 32 MiB shared L3):

======================  ==========================  =====================  ====================
case                    character                   working set per rank   level
======================  ==========================  =====================  ====================
stencil2d-n2-128        communication-bound         2 x 66 x 130 x 8 B     134 KiB: L2
stencil2d-n2-1024       memory/compute mix          2 x 514 x 1026 x 8 B   8.0 MiB: L3
stream_mpi-n2-20000     memory-bound                3 x 20000 x 8 B        469 KiB: L2
stream_mpi-n2-2000000   memory-bound                3 x 2e6 x 8 B          46 MiB: DRAM
nbody-n2-1024           compute-bound               1024 x 24 B read       24 KiB: L1
nbody-n2-4096           compute-bound               4096 x 24 B read       96 KiB: L2
cg_mpi4py-n2-3000       latency-bound (Allreduce)   5 x 1500 x 8 B         59 KiB: L2
cg_mpi4py-n2-200000     memory-bound + Allreduce    5 x 1e5 x 8 B          3.8 MiB: L3
======================  ==========================  =====================  ====================
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
N_RANKS = 2

#: name, application, size parameter, iteration parameter
CASES = [
    dict(name="stencil2d-n2-128", app="stencil2d", params={"N": 128, "iters": 4000}),
    dict(name="stencil2d-n2-1024", app="stencil2d", params={"N": 1024, "iters": 100}),
    dict(name="stream_mpi-n2-20000", app="stream_mpi", params={"N": 20000, "sweeps": 4000}),
    dict(name="stream_mpi-n2-2000000", app="stream_mpi", params={"N": 2000000, "sweeps": 20}),
    dict(name="nbody-n2-1024", app="nbody", params={"N": 1024, "steps": 50}),
    dict(name="nbody-n2-4096", app="nbody", params={"N": 4096, "steps": 2}),
    dict(name="cg_mpi4py-n2-3000", app="cg_mpi4py", params={"N": 3000, "iters": 2000}),
    dict(name="cg_mpi4py-n2-200000", app="cg_mpi4py", params={"N": 200000, "iters": 200}),
]


def command(case: dict, python: str | None = None) -> list[str]:
    """The program's argv (what follows ``mpiexec -n N``); C programs from examples/build."""
    args = [str(v) for v in case["params"].values()]
    if case["app"] == "cg_mpi4py":
        return [python or sys.executable, str(HERE / "cg_mpi4py.py")] + args
    return [str(BUILD / case["app"])] + args


def by_name(name: str) -> dict:
    for c in CASES:
        if c["name"] == name:
            return c
    raise KeyError(name)

"""The example cases pmac ships signatures for: one place for names, sizes and command lines.

Used by ``bench/make_signatures`` (traces every case at 2 ranks into ``signatures/<name>/``) and
by anything that needs to run the same program natively (accuracy tables, emulated validation):

    import runpy; cases = runpy.run_path("examples/cases.py")
    for c in cases["CASES"]: argv = cases["command"](c)     # without mpiexec

Every program times its loop between a first ``MPI_Barrier`` and a final ``MPI_Reduce`` of the
time (both once per rank): in a trace, the timed region of a rank runs from the end of its first
BARRIER to the start of its REDUCE; ``wall_s`` printed by rank 0 is the longest such region.
What comes before the Barrier (Python imports and numba loading in cg_mpi4py, array set-up) is
start-up, not part of ``wall_s``.

Each application has two input sizes whose per-rank working sets (at 2 ranks) sit in different
cache levels of the development machine (AMD EPYC Zen 3: 32 KiB L1d, 512 KiB L2 per core,
32 MiB shared L3; stream_mpi-n2-20000 fills 92 % of L2). On the Xeon VM it moved to on 26 Nov
(48 KiB L1d, 2 MiB L2 per core, 300 MiB L3 as the guest sees it) they still do, one level apart
or more, but stream_mpi-n2-2000000 sits in L3 and stencil2d-n2-1024 in L3. On the AMD EPYC Zen 4
of 27 Nov (32 KiB L1d, 1 MiB L2 per core, 32 MiB shared L3) each case sits where the table says:

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

import numpy as np

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
N_RANKS = 2

#: name, application, size parameter, iteration parameter
CASES = [
    dict(name="stencil2d-n2-128", app="stencil2d", params={"N": 128, "iters": 2000}),
    dict(name="stencil2d-n2-1024", app="stencil2d", params={"N": 1024, "iters": 100}),
    dict(name="stream_mpi-n2-20000", app="stream_mpi", params={"N": 20000, "sweeps": 2000}),
    dict(name="stream_mpi-n2-2000000", app="stream_mpi", params={"N": 2000000, "sweeps": 20}),
    dict(name="nbody-n2-1024", app="nbody", params={"N": 1024, "steps": 50}),
    dict(name="nbody-n2-4096", app="nbody", params={"N": 4096, "steps": 2}),
    dict(name="cg_mpi4py-n2-3000", app="cg_mpi4py", params={"N": 3000, "iters": 1000}),
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


# ---------------------------------------------------------------- calls each program makes
# Derived by hand from the sources (see the comment at the top of each); checked against real
# traces at 1, 2 and 4 ranks in tests/test_examples.py and against the shipped signatures.
# Each returns ({rank: {op name: calls}}, point-to-point byte matrix [from, to]).

def _dims(p: int) -> tuple[int, int]:
    """MPI_Dims_create(p, 2) for the sizes used here."""
    return {1: (1, 1), 2: (2, 1), 4: (2, 2)}[p]


def expected_stencil(p: int, n: int, iters: int):
    """Per rank: calls by op and the point-to-point byte matrix (hand-derived from stencil2d.c)."""
    dy, dx = _dims(p)
    calls, matrix = {}, np.zeros((p, p), dtype=np.int64)
    for r in range(p):
        py, px = divmod(r, dx)
        ny = n * (py + 1) // dy - n * py // dy
        nx = n * (px + 1) // dx - n * px // dx
        nbrs = []
        if py > 0:
            nbrs.append((r - dx, nx))
        if py < dy - 1:
            nbrs.append((r + dx, nx))
        if px > 0:
            nbrs.append((r - 1, ny))
        if px < dx - 1:
            nbrs.append((r + 1, ny))
        calls[r] = {"INIT": 1, "BARRIER": 1, "IRECV": len(nbrs) * iters, "ISEND": len(nbrs) * iters,
                    "WAITALL": iters, "ALLREDUCE": iters, "REDUCE": 1, "FINALIZE": 1}
        for peer, count in nbrs:
            matrix[r, peer] += 8 * count * iters
    return calls, matrix


def expected_stream(p: int, sweeps: int):
    return {r: {"INIT": 1, "BARRIER": 1, "ALLREDUCE": sweeps, "REDUCE": 1, "FINALIZE": 1} for r in range(p)}, \
        np.zeros((p, p), dtype=np.int64)


def expected_nbody(p: int, steps: int):
    return {r: {"INIT": 1, "BARRIER": 1, "ALLGATHER": steps, "REDUCE": 1, "FINALIZE": 1} for r in range(p)}, \
        np.zeros((p, p), dtype=np.int64)


def expected_cg(p: int, iters: int):
    calls, matrix = {}, np.zeros((p, p), dtype=np.int64)
    for r in range(p):
        nbrs = [q for q in (r - 1, r + 1) if 0 <= q < p]
        calls[r] = {"INIT": 1, "BARRIER": 1, "ALLREDUCE": 1 + 2 * iters, "SENDRECV": len(nbrs) * iters,
                    "REDUCE": 1, "FINALIZE": 1}
        for q in nbrs:
            matrix[r, q] += 8 * iters
    return calls, matrix


def expected_calls(case: dict, p: int = N_RANKS):
    """(calls per rank, byte matrix) of a case run at ``p`` ranks."""
    prm = case["params"]
    if case["app"] == "stencil2d":
        return expected_stencil(p, prm["N"], prm["iters"])
    if case["app"] == "stream_mpi":
        return expected_stream(p, prm["sweeps"])
    if case["app"] == "nbody":
        return expected_nbody(p, prm["steps"])
    return expected_cg(p, prm["iters"])

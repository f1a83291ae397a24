#!/usr/bin/env python3
"""Ping-pong of probes/network.py against a C ping-pong on the same MPI, in the same run.

    /tmp/venv/bin/python bench/probes/pingpong.py [--reps 41]

Builds pingpong.c with the project's mpicc (``-O3 -march=native``) as a shared library, then
starts one two-rank MPI job in which every repetition runs, back to back in the same
processes on the same buffer: the C loop (through ctypes), the probe's numba-mpi loop (what a
full ``pmac probe`` uses) and the probe's mpi4py loop (what ``--quick`` uses; raw, and
corrected by its measured per-call cost). Per repetition the ratio to the C batch just before
it is taken; the verdict is the median ratio (the machine is shared: load from elsewhere comes
and goes, and only a ratio of neighbours in time cancels it). Targets: latency at 8 B at most
1.3x C, bandwidth at 4 MiB at least 0.95x C.

Buffers: one 2 MiB-aligned numpy buffer for all three (numpy asks for transparent huge pages
on large arrays); the page setting is printed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
POINTS = {8: 2000, 4 << 20: 10}  # size -> round trips per repetition
FLAGS = ["-O3", "-march=native"]


def worker(lib_path: str, reps: int) -> None:
    import numpy as np
    from mpi4py import MPI

    spec = importlib.util.spec_from_file_location("probe_network", REPO / "probes" / "network.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lib = ctypes.CDLL(lib_path)
    lib.pp_c.restype = ctypes.c_double
    lib.pp_c.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    first, peer = rank == 0, 1 - rank
    nb, py = mod.NumbaBackend(comm), mod.PythonBackend(comm)
    buf = mod.aligned_buffer(max(POINTS))
    buf[:] = 1
    nb.pingpong(buf, 8, 100, first, peer)  # compile
    loops = {
        "c": lambda n, it: lib.pp_c(buf.ctypes.data, n, it, int(first), peer),
        "numba": lambda n, it: nb.pingpong(buf, n, it, first, peer),
        "mpi4py": lambda n, it: py.pingpong(buf, n, it, first, peer),
    }
    out = {}
    for n, it in POINTS.items():
        for f in loops.values():  # warm-up
            f(n, it // 10 + 1)
        rows = []
        for _ in range(reps):
            rows.append({k: f(n, it) / (2 * it) for k, f in loops.items()})
        out[n] = rows
    pycall = [py.pycall(20000) for _ in range(reps)]
    if rank == 0:
        lib_version = " ".join(MPI.Get_library_version().splitlines()[0].split())
        report(out, pycall, lib_version)


def report(out: dict, pycall: list[float], lib_version: str) -> None:
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    pyc = statistics.median(pycall)
    print(f"MPI library: {lib_version}; C flags: {' '.join(FLAGS)}; "
          f"THP: {thp.read_text().strip() if thp.exists() else 'n/a'}")
    print(f"mpi4py per-call cost (Send+Recv on PROC_NULL): {pyc * 1e6:.3f} us per one-way hop")
    print(f"{'size':>8} {'C us':>9} {'numba us':>9} {'mpi4py us':>10}   median per-repetition ratio to C: "
          "numba, mpi4py raw, mpi4py corrected")
    verdict = {}
    for n, rows in out.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        if n == 8:  # time ratios (lower is better)
            ratios = [statistics.median(r[k] / r["c"] for r in rows) for k in ("numba", "mpi4py")]
            ratios.append(statistics.median((r["mpi4py"] - pyc) / r["c"] for r in rows))
        else:  # bandwidth ratios (higher is better)
            ratios = [statistics.median(r["c"] / r[k] for r in rows) for k in ("numba", "mpi4py")]
            ratios.append(statistics.median(r["c"] / (r["mpi4py"] - pyc) for r in rows))
        verdict[n] = ratios
        print(f"{n:>8} {med['c'] * 1e6:9.3f} {med['numba'] * 1e6:9.3f} {med['mpi4py'] * 1e6:10.3f}   "
              + ", ".join(f"{x:.3f}" for x in ratios))
    lat, bw = verdict[8], verdict[4 << 20]
    print(f"latency 8 B / C: numba-mpi {lat[0]:.2f}x (target <= 1.3x: {'OK' if lat[0] <= 1.3 else 'MISSED'}), "
          f"mpi4py raw {lat[1]:.2f}x, corrected {lat[2]:.2f}x")
    print(f"bandwidth 4 MiB / C: numba-mpi {bw[0]:.3f}x (target >= 0.95x: {'OK' if bw[0] >= 0.95 else 'MISSED'}), "
          f"mpi4py raw {bw[1]:.3f}x, corrected {bw[2]:.3f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--worker", metavar="LIB", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.reps)
        return 0
    sys.path.insert(0, str(REPO))
    from pmac.mpi import find_mpi, launch_command, mpi_env

    mpi = find_mpi()
    if not mpi.mpicc:
        sys.exit("no mpicc beside mpiexec")
    with tempfile.TemporaryDirectory(prefix="pmac-pingpong-") as tmp:
        lib = Path(tmp) / "libpingpong.so"
        subprocess.run([mpi.mpicc, *FLAGS, "-DPINGPONG_LIB", "-shared", "-fPIC", "-o", str(lib),
                        str(HERE / "pingpong.c")], check=True)
        cmd = launch_command(2, [sys.executable, __file__, "--worker", str(lib), "--reps", str(args.reps)], mpi=mpi)
        r = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=900)
        print(r.stdout, end="")
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())

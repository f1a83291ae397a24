#!/usr/bin/env python3
"""Ping-pong of probes/network.py against a C ping-pong on the same MPI, in the same run.

    /tmp/venv/bin/python bench/probes/pingpong.py [--rounds 3] [--reps 11]

Builds pingpong.c with the project's mpicc (``-O3 -march=native``), then runs, ``--rounds``
times interleaved: the C reference, the probe's numba-mpi loop (what ``pmac probe`` uses), and
the probe's plain mpi4py loop (raw, and corrected by its measured per-call cost). Each time is
the median over rounds of the best repetition (on a shared machine interference only adds
time; best-of is what both sides reach undisturbed); the verdicts use the median over rounds
of each round's ratio (C and probe back to back). Prints ratios against C:
latency at 8 B (target <= 1.3x C) and bandwidth at 4 MiB (target >= 0.95x C).

Buffers: the C side aligns to 2 MiB and madvise(MADV_HUGEPAGE)s like numpy does for large
arrays, so both compare like with like; the transparent-huge-page setting is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
POINTS = {8: 2000, 4 << 20: 10}  # size -> iterations per repetition


def worker(backend: str, reps: int, points: list[str]) -> None:
    import numpy as np
    from mpi4py import MPI

    spec = importlib.util.spec_from_file_location("probe_network", REPO / "probes" / "network.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    be = mod.NumbaBackend(comm) if backend == "numba" else mod.PythonBackend(comm)
    pts = [(int(p.split(":")[0]), int(p.split(":")[1])) for p in points]
    buf = mod.aligned_buffer(max(n for n, _ in pts))
    buf[:] = 1
    first, peer = rank == 0, 1 - rank
    be.pingpong(buf, 8, 100, first, peer)  # compile
    if rank == 0 and backend == "numba":
        print("lib " + MPI.Get_library_version().splitlines()[0].replace(" ", "_"), flush=True)
    for n, iters in pts:
        be.pingpong(buf, n, iters // 10 + 1, first, peer)
        ts = sorted(be.pingpong(buf, n, iters, first, peer) / (2 * iters) for _ in range(reps))
        if rank == 0:
            print(f"{n} {ts[0]:.6e}", flush=True)  # best repetition, as pingpong.c
    if rank == 0 and backend == "python":
        print(f"pycall {min(be.pycall(20000) for _ in range(reps)):.6e}", flush=True)


def run(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    res = {}
    for line in out.stdout.splitlines():
        k, v = line.split()
        res[k if k in ("pycall", "lib") else int(k)] = v if k == "lib" else float(v)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--worker", choices=("numba", "python"))
    ap.add_argument("points", nargs="*")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.reps, args.points)
        return 0
    sys.path.insert(0, str(REPO))
    from pmac.mpi import find_mpi, launch_command, mpi_env  # noqa: F401

    mpi = find_mpi()
    if not mpi.mpicc:
        sys.exit("no mpicc beside mpiexec")
    tmp = Path(tempfile.mkdtemp(prefix="pmac-pingpong-"))
    exe = tmp / "pingpong"
    flags = ["-O3", "-march=native"]
    subprocess.run([mpi.mpicc, *flags, "-o", str(exe), str(HERE / "pingpong.c")], check=True)
    points = [f"{n}:{it}" for n, it in POINTS.items()]
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    print(f"mpiexec: {mpi.mpiexec}; C flags: {' '.join(flags)}; "
          f"THP: {thp.read_text().strip() if thp.exists() else 'n/a'} (C buffer madvise(MADV_HUGEPAGE), numpy likewise)")
    runs: dict[str, list[dict]] = {"c": [], "numba": [], "python": []}
    for r in range(args.rounds):
        runs["c"].append(run(launch_command(2, [str(exe), "1", str(args.reps), *points], mpi=mpi)))
        for be in ("numba", "python"):
            runs[be].append(run(launch_command(2, [sys.executable, __file__, "--worker", be,
                                                   "--reps", str(args.reps), *points], mpi=mpi)))
    lib = runs["numba"][0].pop("lib", "?").replace("_", " ")
    for d in runs["numba"]:
        d.pop("lib", None)
    print(f"MPI library: {lib}")
    med = {k: {key: statistics.median(d[key] for d in v) for key in v[0]} for k, v in runs.items()}
    pyc = med["python"]["pycall"]
    print(f"{'size':>8} {'C us':>9} {'numba us':>9} {'ratio':>6} {'mpi4py raw us':>14} {'ratio':>6} "
          f"{'corrected us':>13} {'ratio':>6}")
    for n in POINTS:
        c, nb, py = med["c"][n], med["numba"][n], med["python"][n]
        print(f"{n:>8} {c * 1e6:9.3f} {nb * 1e6:9.3f} {nb / c:6.2f} {py * 1e6:14.3f} {py / c:6.2f} "
              f"{(py - pyc) * 1e6:13.3f} {(py - pyc) / c:6.2f}")
    print(f"mpi4py per-call cost (Send+Recv on PROC_NULL): {pyc * 1e6:.3f} us per one-way hop")
    big = 4 << 20
    # ratios per round (C and probe ran back to back), then the median over rounds
    lat_ratio = statistics.median(nb[8] / c[8] for nb, c in zip(runs["numba"], runs["c"]))
    bw_ratio = statistics.median(c[big] / nb[big] for nb, c in zip(runs["numba"], runs["c"]))
    print("per-round latency ratios: " + ", ".join(f"{nb[8] / c[8]:.2f}" for nb, c in zip(runs["numba"], runs["c"]))
          + "; bandwidth ratios: " + ", ".join(f"{c[big] / nb[big]:.3f}" for nb, c in zip(runs["numba"], runs["c"])))
    print(f"latency 8 B, numba-mpi probe / C: {lat_ratio:.2f}x (target <= 1.3x) "
          f"{'OK' if lat_ratio <= 1.3 else 'MISSED'}; mpi4py raw {med['python'][8] / med['c'][8]:.2f}x, "
          f"corrected {(med['python'][8] - pyc) / med['c'][8]:.2f}x")
    print(f"bandwidth 4 MiB, numba-mpi probe / C: {bw_ratio:.3f}x (target >= 0.95x) "
          f"{'OK' if bw_ratio >= 0.95 else 'MISSED'}; mpi4py raw {med['c'][big] / med['python'][big]:.3f}x, "
          f"corrected {med['c'][big] / (med['python'][big] - pyc):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Noise probe: how a core's speed varies over time (fixed work quantum, FWQ).

Runs on its own (copy it to a new system; it needs only numpy and numba)::

    python probes/noise.py --seconds 0.2     # prints per core the quantum's median and quantiles

Every core at once (one thread per core, pinned to it, started together) repeats the same
small piece of work, a *quantum* (``QUANTUM_S`` on an undisturbed core: a sweep over an
L1-resident array with four independent multiply-add chains, loads and flop alike), and
records when each quantum ended (CLOCK_MONOTONIC in nanoseconds, read inside the compiled loop
through libc, so no interpreter runs between quanta). A quantum that took longer than the others
was slowed by something outside the program: another tenant on the core or its sibling, the
hypervisor, interrupts, frequency. What it does not see well: its chains wait on their own
results, so a neighbour competing for the core's issue ports (the likeliest reading: another
guest's thread on the core's SMT sibling) slows it little while it slows scalar loop code in full
(bench/noise_sensitivity, EPYC VM of 27 Nov 2026: 1.10 against 1.80 for the compute probe's branch
loop and 1.86 for stream_mpi's C triad in the same episodes). pmac keeps the whole series (table
``noise`` of the profile's sidecar: chunk, core, quantum, start_s, dt_ns) and fits from it the
machine's noise model (pmac.noise.fit), which ``pmac predict --noise K`` replays
(pmac.noise.perturb).

Why the series and not a spread: a rank waits for the slowest partner at every synchronisation,
so what a run loses is the *maximum* over ranks of each core's slowdown over the time between
two synchronisations, and on a shared host a core can stay slow for seconds. The series keeps
both the length of a slow spell and which cores were slow at the same time. pmac probe takes it
in several chunks spread over the probe (beside the compute rounds), so a probe of minutes
samples the host's states, not one moment of it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading

import numpy as np
from numba import njit

#: target seconds of one quantum on an undisturbed core
QUANTUM_S = 20e-6
#: doubles of the quantum's array (16 KiB: inside any L1)
ARRAY_DOUBLES = 2048

_libc = ctypes.CDLL(None, use_errno=True)
_clock_gettime = _libc.clock_gettime
_clock_gettime.argtypes = (ctypes.c_int, ctypes.c_void_p)
_clock_gettime.restype = ctypes.c_int
_CLOCK_MONOTONIC = 1


# not cached: a function calling libc through ctypes cannot be (numba keeps the pointer per process)
@njit(nogil=True)
def _now(ts) -> int:
    _clock_gettime(_CLOCK_MONOTONIC, ts.ctypes.data)
    return ts[0] * 1000000000 + ts[1]


@njit(cache=True, nogil=True)
def _quantum(a, sweeps: int) -> float:
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    c = 0.999
    for _ in range(sweeps):
        for i in range(0, a.size, 4):
            s0 = s0 * c + a[i]
            s1 = s1 * c + a[i + 1]
            s2 = s2 * c + a[i + 2]
            s3 = s3 * c + a[i + 3]
    return s0 + s1 + s2 + s3


@njit(nogil=True)
def _fwq(a, sweeps: int, t_end, ts) -> int:
    """Run quanta until ``t_end`` is full; t_end[k] is when quantum k ended (ns); returns the start (ns)."""
    sink = 0.0
    t0 = _now(ts)
    for k in range(t_end.size):
        sink += _quantum(a, sweeps)
        t_end[k] = _now(ts)
    a[0] += sink * 1e-300   # keeps the work
    return t0


def calibrate(quantum_s: float = QUANTUM_S) -> int:
    """Sweeps of the array that take ``quantum_s`` at this core's fastest (median of the 5
    fastest of 200 quanta after a warm-up)."""
    a = np.linspace(0.5, 1.0, ARRAY_DOUBLES)
    ts = np.zeros(2, dtype=np.int64)
    t_end = np.zeros(200, dtype=np.int64)
    _fwq(a, 1, t_end[:10], ts)
    t0 = _fwq(a, 1, t_end, ts)
    dt = np.diff(np.concatenate(([t0], t_end))) * 1e-9
    one = float(np.median(np.sort(dt)[:5]))
    return max(int(round(quantum_s / one)), 1)


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def run(seconds: float, *, sweeps: int | None = None, cores: list[int] | None = None) -> dict:
    """Every core at once, ``seconds`` of quanta. Returns {'sweeps', 'cores': [...], 'start_s':
    [per core: when its first quantum began, from the earliest core's], 'dt_ns': [per core: each
    quantum's nanoseconds, back to back from its start]}."""
    cores = _cores() if cores is None else list(cores)
    sweeps = calibrate() if sweeps is None else int(sweeps)
    n = max(int(seconds / QUANTUM_S), 10)
    out_t = [np.zeros(n, dtype=np.int64) for _ in cores]
    starts = [0] * len(cores)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(cores))

    def work(i: int, cpu: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})      # this thread only (Linux: pid 0 = the calling thread)
            a = np.linspace(0.5, 1.0, ARRAY_DOUBLES)
            ts = np.zeros(2, dtype=np.int64)
            _fwq(a, sweeps, out_t[i][:5], ts)    # first touch, warm caches
            barrier.wait()
            starts[i] = _fwq(a, sweeps, out_t[i], ts)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i, c), daemon=True) for i, c in enumerate(cores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"noise probe: {errors[0]}")
    t0 = min(starts)
    dts = [np.diff(np.concatenate(([s], t))) for s, t in zip(starts, out_t)]
    return dict(sweeps=sweeps, cores=cores, start_s=[(s - t0) * 1e-9 for s in starts], dt_ns=dts)


def rows(res: dict, chunk: int) -> dict[str, np.ndarray]:
    """The run's quanta as columns of the ``noise`` table (chunk, core, quantum, start_s, dt_ns):
    integer nanoseconds as the clock gives them (a quantum ends at its core's start plus the sum
    of its own and the earlier quanta's; exact, and small in the compressed sidecar)."""
    n = [len(d) for d in res["dt_ns"]]
    return dict(chunk=np.full(sum(n), chunk, dtype=np.int32),
                core=np.concatenate([np.full(k, i, dtype=np.int32) for i, k in enumerate(n)]),
                quantum=np.concatenate([np.arange(k, dtype=np.int64) for k in n]),
                start_s=np.concatenate([np.full(k, s) for k, s in zip(n, res["start_s"])]),
                dt_ns=np.concatenate(res["dt_ns"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="seconds of quanta on every core (default 0.5)")
    args = ap.parse_args(argv)
    res = run(args.seconds)
    print(f"quantum: {res['sweeps']} sweeps of {ARRAY_DOUBLES} doubles (target {QUANTUM_S * 1e6:.0f} us)")
    for cpu, dt in zip(res["cores"], res["dt_ns"]):
        q = np.percentile(dt, [1, 50, 90, 99, 100]) * 1e-3
        print(f"cpu {cpu}: {len(dt)} quanta, us at 1/50/90/99/100 %: " + " ".join(f"{x:.1f}" for x in q))
    return 0


if __name__ == "__main__":
    sys.exit(main())

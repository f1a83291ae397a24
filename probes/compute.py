#!/usr/bin/env python3
"""Compute probes: flop rate per core (scalar and SIMD), dependency and branch probes.

Runs on its own (copy it to a new system; it needs only numpy and numba)::

    python probes/compute.py --quick     # prints one line per repetition

Probes (one core; every repetition kept, table ``compute`` of pmac: probe, param, rep, value):

- ``flop_scalar`` / ``flop_simd`` (value: flop/s; param: SIMD width in bits the compiled loop
  uses, read from its assembly): ``s += poly(x[i])`` over an L1-resident array, 8 dependent
  multiply-adds per element (16 flop + 1 add). Without ``fastmath`` the reduction must stay in
  order, so LLVM keeps it scalar; with ``fastmath`` it vectorises (and contracts to FMA). Both
  leave many independent elements in flight, so they measure throughput, not latency.
- ``flop_independent`` (value: flop/s; param: SIMD width in bits, 64 when scalar): ``s += tree(v * c_k
  + e_k)``, eight multiply-adds of one element with different constants, independent of one
  another and summed in a tree (24 flop an element, no chain deeper than five), no fastmath: the
  scalar flop rate of independent work, what a core's floating-point ports sustain. Why beside
  ``flop_scalar``: that kernel's chain of 16 dependent operations an element needs the scheduler
  to hold several elements' chains at once, which a Cascade Lake's does not (28 Nov 2026: 3.9-4.3
  Gflop/s, 1.4 flop a cycle, against this kernel's 6.1, 2 a cycle). The convolver prices a
  burst's scalar flop at this rate where a profile has it (pmac.profile.ComputeModel.scalar_rate).
- ``flop_fma`` (value: flop/s, two an FMA; param: SIMD width in bits, 64 when scalar): twelve
  accumulators ``s_k = s_k * c + v`` an element, contracted to one fused multiply-add each
  (``fastmath={"contract"}``, nothing else relaxed; ``compiled_asm`` shows the ``vfmadd``): twelve
  independent chains, one FMA deep an element, so the ports' throughput bounds them, not the
  FMA's latency (12 FMAs at 2 a cycle take 6 cycles, a chain's latency is 4 on common cores).
  Where the ISA has no FMA they stay a multiply and an add (24 operations). Why: a compiler that
  contracts (gcc at -O2 for C with FMA in the ISA) turns a multiply-add into one operation on the
  same port an add takes: on a Cascade Lake (28 Nov 2026) 6.15 G FMA/s against 6.15 G
  operations/s of ``flop_independent``, twice its flop rate, and the STREAM triad's bursts were
  priced 30 % dear at two flop a multiply-add. The convolver prices a burst's scalar FMAs at this
  rate where a profile has it (pmac.profile.ComputeModel.fma_op_s).
- ``dependency`` (param: def-use distance d; value: flop/s): d independent accumulator chains
  ``x_j = x_j * c + e`` interleaved in one loop, so each floating-point result is used d
  instructions later (in units of the memory signatures' ``dep_distance``). Short distances
  expose the instruction latency; the rate saturates once d covers latency x issue width.
- ``divsqrt`` (value: divide and square-root operations per second; param: SIMD width in bits
  of the compiled loop): ``s += 1 / (v * sqrt(v))`` over an L1-resident array, one square root
  and one divide per element (the inverse-cube pattern of force kernels). On common cores both
  run on one divider that is not fully pipelined, so this measures its throughput; the loop's
  multiply and add fit beside it. Scalar: LLVM keeps these divides scalar even with
  ``fastmath`` (its cost model; so does gcc for C without ``-ffast-math``), so no packed
  divide rate is measured.
- ``divpar`` (param: k; value: seconds per element): the divsqrt kernel's work beside k
  independent multiply-adds an element, each into its own accumulator (``divpar_kernel``), k in
  DIVMIX_TERMS: from less other work than the divider's to more. How far the two overlap:
  pmac.probe.divider_beta. Probes before 29 Nov 2026 ran ``divmix`` instead (``divmix_kernel``:
  the same terms summed in order into one value), which a profile's raw table may still hold and
  pmac.probe.compute_model reads where it has no ``divpar`` rows. Why the change: in the same
  minutes on one core of the Cascade Lake VM (``python bench/divider_overlap``, 29 Nov 2026,
  bench/results/divider_overlap-clx-vm-2026-11-29T0213.txt) the beta fitted on ``divpar`` priced nbody's force loop
  (three accumulators) within -2.0..+1.4 % in the six rounds where the host held still, where
  ``divmix``'s gave -3.5..-6.6 % (medians of all twelve rounds: -2.6 against -8.1 %); nbody is the
  only example with divides, so the form was chosen on it.
- ``chain`` (value: seconds per operation; param 0: adds, 1: multiply-adds): one loop-carried
  chain over an L1-resident array, ``s += x[i]`` (param 0) and ``s = s * c + x[i]`` (param 1,
  contracted to one FMA where the ISA has it, else a multiply and an add: the time per iteration
  over the operations it runs). Without reassociation nothing overlaps the chain, so these are the
  latencies of an add and of a multiply-add, which differ by core (Zen 3: 3 and 4 cycles; Golden
  Cove: 2-3 and 4): the price of the memory signatures' ``fp_recurrence`` and
  ``fp_recurrence_mul`` operations. The ``dependency`` probe's distance-1 chain alternates a
  multiply and an add, the mean of the two.
- ``branch`` (param: probability p that the branch is taken, outcomes iid; value: seconds per
  branch): a loop whose body branches on a precomputed random byte; the taken side stores, so
  the compiler keeps a real conditional jump. ``branch_miss`` rows (param p, value 2p(1-p)) give
  the miss fraction a last-outcome predictor would have on that stream, the unit memory
  signatures use for ``branch_miss_frac``.

- ``all:KERNEL`` (param: the number of cores busy; value: the kernel's own unit, per core): five of
  the kernels above (``ALL_CORES_KERNELS``: the independent and SIMD flop, the divider, the chain of
  adds, the branch never taken) run on every core at once, one numba thread a core each on its own
  copy of the data, timed until the slowest is done. Why: an MPI job runs a rank on every core, and
  a core does not run as fast when its neighbours are busy: a lower all-core clock on bare metal, a
  shared core's ports when two "cores" are one core's hyperthreads, a hypervisor that cannot run
  all of a guest's vCPUs at once. On the Cascade Lake VM (29 Nov 2026, ``python
  bench/all_cores_compute --rounds 8``) the kernels took 1.01-1.19 times as long with both vCPUs
  busy (medians of the rounds; single rounds 0.93-2.97, as the host moves between its states) and
  nbody's interaction at one rank a core 1.13 times its time at one rank. The convolver prices a
  burst's compute at these rates when the job keeps the node's cores busy
  (pmac.convolve.compute_when_busy).
- ``alone:KERNEL`` (param 1; value as ``all:KERNEL``'s): the same call on one core, timed right
  before each ``all:KERNEL`` point, so that the two sides of a slowdown are measured in the same
  minute. Why (since 29 Nov 2026 09:00): a pool of probes where only the newer ones have ``all:``
  rows took each kernel's time alone from every probe and its time busy from the newer ones, and
  the host's states differ between the two sets: the shipped Cascade Lake's twelve probes of 28
  Nov beside six of 29 Nov put the branch's slowdown at 2.16 where the six alone say 1.06.

The instruction set the kernels were compiled for is recorded (``isa()``): the LLVM target CPU
name numba uses and its features.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import numpy as np
from numba import get_num_threads, njit, prange, set_num_threads

_POLY = 8  # multiply-adds per element in the flop kernels


@njit(cache=True)
def _flop_scalar(x, reps, c, e):
    s = 0.0
    for _ in range(reps):
        for i in range(x.size):
            v = x[i]
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            s += v
    return s


@njit(cache=True, fastmath=True)
def _flop_simd(x, reps, c, e):
    s = 0.0
    for _ in range(reps):
        for i in range(x.size):
            v = x[i]
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            v = v * c + e
            s += v
    return s


FLOP_PER_ELEMENT = 2 * _POLY + 1


@njit(cache=True)
def _flop_independent(x, reps, c, e):
    # eight distinct constants: no product is shared (common subexpressions would drop multiplies)
    c1, c2, c3, c4, c5, c6, c7 = c * 0.5, c * 0.25, c * 0.75, c * 0.125, c * 0.375, c * 0.625, c * 0.875
    e1, e2, e3, e4, e5, e6, e7 = e * 2.0, e * 3.0, e * 4.0, e * 5.0, e * 6.0, e * 7.0, e * 8.0
    s = 0.0
    for _ in range(reps):
        for i in range(x.size):
            v = x[i]
            s += (((v * c + e) + (v * c1 + e1)) + ((v * c2 + e2) + (v * c3 + e3))) + \
                (((v * c4 + e4) + (v * c5 + e5)) + ((v * c6 + e6) + (v * c7 + e7)))
    return s


#: flop per element of ``flop_independent``: 8 multiplies, 8 adds, 7 adds of the tree, the ``s +=``
FLOP_PER_ELEMENT_INDEPENDENT = 8 * 2 + 7 + 1


@njit(cache=True, fastmath={"contract"})
def _flop_fma(x, reps, c):
    # twelve chains started apart (equal ones could be merged); each step one contracted FMA
    s0, s1, s2, s3, s4, s5 = 0.0, 0.1, 0.2, 0.3, 0.4, 0.5
    s6, s7, s8, s9, s10, s11 = 0.6, 0.7, 0.8, 0.9, 1.0, 1.1
    for _ in range(reps):
        for i in range(x.size):
            v = x[i]
            s0 = s0 * c + v
            s1 = s1 * c + v
            s2 = s2 * c + v
            s3 = s3 * c + v
            s4 = s4 * c + v
            s5 = s5 * c + v
            s6 = s6 * c + v
            s7 = s7 * c + v
            s8 = s8 * c + v
            s9 = s9 * c + v
            s10 = s10 * c + v
            s11 = s11 * c + v
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + ((s8 + s9) + (s10 + s11))


#: FMAs per element of ``flop_fma`` (two flop each)
FMA_PER_ELEMENT = 12


@njit(cache=True)
def _divsqrt_scalar(x, reps):
    s = 0.0
    for _ in range(reps):
        for i in range(x.size):
            v = x[i]
            s += 1.0 / (v * np.sqrt(v))
    return s


#: divide and square-root operations per element of the divsqrt kernel
DIVSQRT_PER_ELEMENT = 2

#: independent multiply-adds per element of the ``divpar`` (and former ``divmix``) kernels (the probe's params)
DIVMIX_TERMS = (2, 4, 6, 8, 12)


def _compile_source(name: str, src: str):
    """Function ``name`` defined by the Python source ``src``, compiled by numba without fastmath
    (multiplies and adds stay separate, uncontracted, in order) and not cached on disk."""
    ns: dict = {"np": np}
    exec(compile(src, f"<{name}>", "exec"), ns)
    return njit(cache=False)(ns[name])


def divmix_other_flop(k: int) -> int:
    """Flop per element of ``divmix_kernel(k)`` besides its divide and square root: k independent
    ``v * c_j + e_j`` (2 each, no contraction without fastmath), k - 1 adds summing them, the
    multiply ``v * sqrt(v)``, the add of the two sides and the loop-carried ``s +=``; as many as
    ``divpar_kernel(k)``'s (its k accumulators' adds, the multiply, the ``s +=``)."""
    return 2 * k + (k - 1) + 3


@functools.lru_cache(maxsize=None)
def divmix_kernel(k: int):
    """``s += 1 / (v * sqrt(v)) + sum_j (v * c_j + e_j)``, j < k: the divsqrt kernel's divider
    work beside k independent multiply-adds an element, the kind of mix a force kernel is (nbody:
    one divide and one square root beside some 16 flop of differences, squares and sums). No
    fastmath, like the divsqrt and flop_scalar kernels: scalar, uncontracted."""
    terms = " + ".join(f"(v * {1.0 - 1e-3 * (j + 1)!r} + {1e-4 * (j + 1)!r})" for j in range(k))
    return _compile_source(f"divmix{k}", f"def divmix{k}(x, reps):\n    s = 0.0\n    for _ in range(reps):\n"
                                         f"        for i in range(x.size):\n            v = x[i]\n"
                                         f"            s += 1.0 / (v * np.sqrt(v)) + ({terms})\n    return s\n")


@functools.lru_cache(maxsize=None)
def divpar_kernel(k: int):
    """``s += 1 / (v * sqrt(v))`` beside ``a_j += v * c_j + e_j``, j < k, each term into its own
    accumulator: the divsqrt kernel's divider work beside k independent multiply-adds an element,
    as a force loop sums its components (nbody: three). Its other flop are those of
    ``divmix_kernel(k)`` (:func:`divmix_other_flop`: 3k + 2), and one add an accumulator is carried
    from one iteration to the next, as ``s +=`` is in both. No fastmath: scalar, uncontracted."""
    acc = "".join(f"    a{j} = 0.0\n" for j in range(k))
    upd = "".join(f"            a{j} += v * {1.0 - 1e-3 * (j + 1)!r} + {1e-4 * (j + 1)!r}\n" for j in range(k))
    tot = " + ".join(f"a{j}" for j in range(k))
    return _compile_source(f"divpar{k}", f"def divpar{k}(x, reps):\n    s = 0.0\n{acc}    for _ in range(reps):\n"
                                         f"        for i in range(x.size):\n            v = x[i]\n"
                                         f"            s += 1.0 / (v * np.sqrt(v))\n{upd}    return s + {tot}\n")


@functools.lru_cache(maxsize=None)
def chain_kernel(d: int):
    """A kernel with d interleaved independent chains x_j = x_j * c + e (2 flop each); no fastmath:
    the multiply and the add stay separate dependent instructions."""
    init = "\n".join(f"    x{j} = 1.0 + {j} * 1e-3" for j in range(d))
    body = "\n".join(f"        x{j} = x{j} * c + e" for j in range(d))
    total = " + ".join(f"x{j}" for j in range(d))
    return _compile_source(f"chain{d}", f"def chain{d}(n, c, e):\n{init}\n    for _ in range(n):\n{body}\n"
                                        f"    return {total}\n")


@njit(cache=True)
def _chain_add(x, reps):
    s = 0.0
    for _ in range(reps):
        for i in range(x.size):
            s += x[i]
    return s


@njit(cache=True, fastmath={"contract"})
def _chain_muladd(x, reps, c):
    s = 0.0
    for _ in range(reps):
        for i in range(x.size):
            s = s * c + x[i]
    return s


@functools.lru_cache(maxsize=None)
def chain_ops_per_iteration() -> int:
    """Operations per iteration of ``_chain_muladd`` as compiled: 1 (an FMA), 2 (multiply, add)."""
    return 1 if "vfmadd" in compiled_asm(_chain_muladd, np.ones(8), 1, 0.5) else 2


DEP_DISTANCES = (1, 2, 3, 4, 6, 8, 12, 16)

#: bytes of the branch kernel's outcome array (one a branch)
BRANCH_ELEMENTS = 1 << 20

#: the kernels the probe also runs on every core at once (``all:KERNEL`` rows)
ALL_CORES_KERNELS = ("flop_independent", "flop_simd", "divsqrt", "chain", "branch")


@njit(cache=True)
def _branchy(r, reps, out):
    k = 0
    for _ in range(reps):
        for i in range(r.size):
            if r[i]:
                out[k & 1023] = i
                k += 1
            else:
                k += 3
    return k


@njit(cache=True, nogil=True)
def branchy_nogil(r, reps, out):
    """:func:`_branchy` without the GIL: Python threads pinned one a CPU run it at once, each timing
    its own calls (pmac.state's busy check, which says how each CPU runs with the others busy)."""
    return _branchy(r, reps, out)


# the kernels on every core at once: one numba thread a row of ``xs`` (prange over the rows, one a
# thread when there are as many threads as rows); defined here rather than generated so that numba
# caches them on disk like the one-core kernels


@njit(cache=True, parallel=True)
def _all_flop_independent(xs, reps, c, e):
    out = np.zeros(xs.shape[0])
    for t in prange(xs.shape[0]):
        out[t] = _flop_independent(xs[t], reps, c, e)
    return out.sum()


@njit(cache=True, parallel=True)
def _all_flop_simd(xs, reps, c, e):
    out = np.zeros(xs.shape[0])
    for t in prange(xs.shape[0]):
        out[t] = _flop_simd(xs[t], reps, c, e)
    return out.sum()


@njit(cache=True, parallel=True)
def _all_divsqrt(xs, reps):
    out = np.zeros(xs.shape[0])
    for t in prange(xs.shape[0]):
        out[t] = _divsqrt_scalar(xs[t], reps)
    return out.sum()


@njit(cache=True, parallel=True)
def _all_chain(xs, reps):
    out = np.zeros(xs.shape[0])
    for t in prange(xs.shape[0]):
        out[t] = _chain_add(xs[t], reps)
    return out.sum()


@njit(cache=True, parallel=True)
def _all_branch(rs, reps, sinks):
    out = np.zeros(rs.shape[0])
    for t in prange(rs.shape[0]):
        out[t] = _branchy(rs[t], reps, sinks[t])
    return out.sum()


def on_all_cores(kernel: str):
    """``f(xs, reps, *args)``: kernel ``kernel`` (one of :data:`ALL_CORES_KERNELS`) run ``reps``
    times on each row of ``xs`` at once, one numba thread a row (``parallel=True``), returning when
    the slowest is done. The branch kernel's third argument, its sink, is 2-D too (a row a thread)."""
    return {"flop_independent": _all_flop_independent, "flop_simd": _all_flop_simd, "divsqrt": _all_divsqrt,
            "chain": _all_chain, "branch": _all_branch}[kernel]


def compiled_asm(fn, *args) -> str:
    """The assembly of kernel ``fn`` as compiled for ``args``. Cached code cannot be inspected, so
    this compiles a private uncached copy with the same options and inspects that."""
    opts = {k: v for k, v in fn.targetoptions.items() if k in ("fastmath", "boundscheck", "parallel")}
    fresh = njit(**opts)(fn.py_func)
    fresh(*args)
    return fresh.inspect_asm(fresh.signatures[0])


def simd_width_bits(fn, *args) -> int:
    """The widest register the compiled kernel's packed-double arithmetic uses (zmm 512, ymm
    256, xmm 128; 64 when it is all scalar ``sd``)."""
    import re
    asm = compiled_asm(fn, *args)
    widths = [64]
    for m in re.finditer(r"\tv(?:mul|add|sub|div|sqrt|fmadd\d*|fmsub\d*|fnmadd\d*)pd\t([^\n]*)", asm):
        ops = m.group(1)
        widths.append(512 if "%zmm" in ops else 256 if "%ymm" in ops else 128)
    return max(widths)


def isa() -> dict:
    """LLVM target CPU name and features numba compiles for."""
    import llvmlite.binding as llvm
    import numba
    name = numba.config.CPU_NAME or llvm.get_host_cpu_name()
    feats = numba.config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()
    on = sorted(f[1:] for f in feats.split(",") if f.startswith("+"))
    return {"cpu_name": name, "features": " ".join(on), "numba": numba.__version__,
            "llvmlite": __import__("llvmlite").__version__}


def _timeit(fn, target_s: float, reps_min: int, reps_max: int, threshold: float, *, scale) -> list:
    """Call fn(n) with n doubled until it takes target_s; then repeat; return values scale(n, dt)."""
    n = 1
    fn(1)
    while True:
        t0 = time.perf_counter()
        fn(n)
        dt = time.perf_counter() - t0
        if dt >= target_s or n >= 1 << 40:
            break
        n *= 2 if dt > target_s / 16 else 16
    out = []
    while len(out) < reps_max:
        t0 = time.perf_counter()
        fn(n)
        out.append(scale(n, time.perf_counter() - t0))
        if len(out) >= reps_min:
            w = np.asarray(out[-reps_min:])
            if (w.max() - w.min()) / np.median(w) < threshold:
                break
    return out


def run(*, quick: bool = False, progress=None, threshold: float = 0.02,
        rounds: int | None = None) -> list[tuple[str, float, int, float]]:
    """All compute probes, the whole set ``rounds`` times over (default 2 quick, 4 full: a
    disturbance on a shared core can last longer than one point, seen here as a 25 % lower flop
    rate in one run of three); rows (probe, param, rep, value), reps numbered across rounds."""
    target = 0.002 if quick else 0.005
    rmin, rmax = (3, 6) if quick else (5, 15)
    rounds = rounds or (2 if quick else 4)
    rows: list[tuple[str, float, int, float]] = []
    seen: dict = {}

    def add(probe, param, values):
        k = (probe, float(param))
        start = seen.get(k, 0)
        rows.extend((probe, float(param), start + i, float(v)) for i, v in enumerate(values))
        seen[k] = start + len(values)

    probabilities = (0.0, 0.1, 0.25, 0.5) if quick else (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
    distances = (1, 2, 4, 8, 16) if quick else DEP_DISTANCES
    steps = rounds * (8 + len(distances) + len(probabilities))
    done = 0

    def tick(msg):
        nonlocal done
        if progress:
            progress(done / steps, msg)
        done += 1

    for _ in range(rounds):
        _one_round(quick, target, rmin, rmax, threshold, probabilities, distances, add, tick)
    if progress:
        progress(1.0, "compute done")
    return rows


def _one_round(quick, target, rmin, rmax, threshold, probabilities, distances, add, tick):
    x = np.linspace(0.5, 1.0, 512)  # 4 KiB: L1-resident
    c, e = 0.999, 1e-4
    for probe, fn, flop in (("flop_scalar", _flop_scalar, FLOP_PER_ELEMENT), ("flop_simd", _flop_simd, FLOP_PER_ELEMENT),
                            ("flop_independent", _flop_independent, FLOP_PER_ELEMENT_INDEPENDENT)):
        tick(probe)
        vals = _timeit(lambda n: fn(x, n, c, e), target, rmin, rmax, threshold,
                       scale=lambda n, dt, f=flop: f * x.size * n / dt)
        add(probe, simd_width_bits(fn, x, 1, c, e), vals)
    tick("flop_fma")
    vals = _timeit(lambda n: _flop_fma(x, n, c), target, rmin, rmax, threshold,
                   scale=lambda n, dt: 2 * FMA_PER_ELEMENT * x.size * n / dt)
    add("flop_fma", simd_width_bits(_flop_fma, x, 1, c), vals)
    tick("divsqrt")
    vals = _timeit(lambda n: _divsqrt_scalar(x, n), target, rmin, rmax, threshold,
                   scale=lambda n, dt: DIVSQRT_PER_ELEMENT * x.size * n / dt)
    add("divsqrt", simd_width_bits(_divsqrt_scalar, x, 1), vals)
    tick("divpar")
    for k in DIVMIX_TERMS:
        fn = divpar_kernel(k)
        vals = _timeit(lambda n, f=fn: f(x, n), target, rmin, rmax, threshold, scale=lambda n, dt: dt / (n * x.size))
        add("divpar", k, vals)
    tick("chain")
    ops = chain_ops_per_iteration()
    for param, run_chain, n_ops in ((0, lambda n: _chain_add(x, n), 1), (1, lambda n: _chain_muladd(x, n, c), ops)):
        vals = _timeit(run_chain, target, rmin, rmax, threshold, scale=lambda n, dt, k=n_ops: dt / (k * x.size * n))
        add("chain", param, vals)
    for d in distances:
        tick(f"dependency d={d}")
        k = chain_kernel(d)
        vals = _timeit(lambda n: k(n, c, e), target, rmin, rmax, threshold,
                       scale=lambda n, dt: 2.0 * d * n / dt)
        add("dependency", d, vals)
    rng = np.random.default_rng(3)
    out = np.zeros(1024, dtype=np.int64)
    for p in probabilities:
        tick(f"branch p={p}")
        r = (rng.random(BRANCH_ELEMENTS) < p).astype(np.uint8)
        vals = _timeit(lambda n: _branchy(r, n, out), target, rmin, rmax, threshold,
                       scale=lambda n, dt: dt / (n * r.size))
        add("branch", p, vals)
        add("branch_miss", p, [2 * p * (1 - p)])
    _all_cores_round(x, c, e, target, rmin, rmax, threshold, add, tick)


def busy_cores() -> int:
    """How many cores the ``all:`` kernels keep busy: those this process may run on, at most as
    many as numba has threads."""
    import os

    import numba

    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        n = os.cpu_count() or 1
    return min(n, numba.config.NUMBA_NUM_THREADS)


def all_cores_calls(x, n: int, c: float, e: float) -> dict[str, tuple]:
    """Per kernel of :data:`ALL_CORES_KERNELS`: ``(alone, busy, scale)``, the kernel called ``reps``
    times on ``x`` on one core (``alone(reps)``) and on ``n`` copies of it at once, one numba thread
    each (``busy(reps)``, :func:`on_all_cores`; the caller sets numba's thread count), and
    ``scale(reps, seconds)``, a call's value in the one-core kernel's unit, per core (flop or divider
    operations a second, seconds an operation or a branch). The branch kernel runs over its own
    never-taken outcome array, as the state check's loop does."""
    xs = np.ascontiguousarray(np.tile(x, (n, 1)))
    never, nevers = np.zeros(BRANCH_ELEMENTS, np.uint8), np.zeros((n, BRANCH_ELEMENTS), np.uint8)
    sink, sinks = np.zeros(1024, np.int64), np.zeros((n, 1024), np.int64)

    def rate(per_element):
        return lambda k, dt: per_element * x.size * k / dt

    return {"flop_independent": (lambda k: _flop_independent(x, k, c, e),
                                 lambda k: on_all_cores("flop_independent")(xs, k, c, e), rate(FLOP_PER_ELEMENT_INDEPENDENT)),
            "flop_simd": (lambda k: _flop_simd(x, k, c, e), lambda k: on_all_cores("flop_simd")(xs, k, c, e),
                          rate(FLOP_PER_ELEMENT)),
            "divsqrt": (lambda k: _divsqrt_scalar(x, k), lambda k: on_all_cores("divsqrt")(xs, k),
                        rate(DIVSQRT_PER_ELEMENT)),
            "chain": (lambda k: _chain_add(x, k), lambda k: on_all_cores("chain")(xs, k),
                      lambda k, dt: dt / (k * x.size)),
            "branch": (lambda k: _branchy(never, k, sink), lambda k: on_all_cores("branch")(nevers, k, sinks),
                       lambda k, dt: dt / (k * BRANCH_ELEMENTS))}


def _all_cores_round(x, c, e, target, rmin, rmax, threshold, add, tick):
    """The ``alone:KERNEL`` and ``all:KERNEL`` rows of one round, kernel by kernel, one right after
    the other (module docstring); nothing on one core."""
    n = busy_cores()
    if n < 2:
        return
    tick("all cores")
    before = get_num_threads()
    set_num_threads(n)
    try:
        for kernel, (alone, busy, scale) in all_cores_calls(x, n, c, e).items():
            add(f"alone:{kernel}", 1, _timeit(alone, target, rmin, rmax, threshold, scale=scale))
            add(f"all:{kernel}", n, _timeit(busy, target, rmin, rmax, threshold, scale=scale))
    finally:
        set_num_threads(before)


def tables(rows) -> dict[str, np.ndarray]:
    return {"probe": np.array([r[0] for r in rows], dtype="U24"),
            "param": np.array([r[1] for r in rows], dtype=np.float64),
            "rep": np.array([r[2] for r in rows], dtype=np.int32),
            "value": np.array([r[3] for r in rows], dtype=np.float64)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", help="write the raw table to this .npz (compute/<column>)")
    a = ap.parse_args(argv)
    print(f"# isa={isa()}")
    rows = run(quick=a.quick)
    print("probe param rep value")
    for r in rows:
        print(r[0], r[1], r[2], f"{r[3]:.6e}")
    if a.out:
        np.savez(a.out, **{f"compute/{k}": v for k, v in tables(rows).items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

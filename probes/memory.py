#!/usr/bin/env python3
"""Memory probes (MAPS-like): bandwidth and pointer-chase latency against working-set size.

Runs on its own (copy it to a new system; it needs only numpy and numba)::

    python probes/memory.py --quick            # prints one line per repetition
    python probes/memory.py --out mem.npz      # one array per table/column (pmac RAW_TABLES layout)

What is measured
----------------
*Bandwidth* for the access kinds ``load_unit`` (sum of a float64 array, unit stride),
``load_random`` (gather ``a[idx[i]]`` through a uint32 random permutation; bytes counted = the
8-byte data load plus the 4-byte index load, i.e. every byte loaded), ``store`` (fill a float64
array) and ``copy`` (``b[i] = a[i]``; bytes counted both ways). ``working_set_bytes`` is every
byte the kernel touches per sweep (for ``copy`` both arrays, for ``load_random`` data + index).

*All cores at once*: one numba ``prange`` thread per core (``parallel=True``, the numba
threading layer), each thread sweeping its own contiguous slice of the same arrays, so the
working set is the total over all cores (a private 32 KiB L1 per core shows up at 2 x 32 KiB
with 2 cores). Bandwidth is the sum over cores.

*Latency*: a pointer chase through one pointer per 64-byte line in a random cyclic order
(Sattolo's algorithm), so neither prefetchers nor the out-of-order core can overlap loads.

*Repetition*: each repetition times enough sweeps to take about ``rep_s``; a point is
repeated until the relative spread (max - min) / median of ``window`` repetitions falls below
``threshold`` or ``max_reps`` (or a time budget) is reached; every repetition is kept, and a
point that never stabilised is flagged with its spread. Which ``window`` repetitions:
``--stop-rule best`` (default) the fastest ones, ``last`` the most recent ones. On a shared
machine a neighbour can only ever slow a repetition down, so the fastest repetitions agreeing is
the sign of an undisturbed measurement, while the last ones rarely agree there; the point's
value (``PointResult.value``, the fitted curves) is the median of the repetitions that ended it.

Buffers are numpy arrays whose data start on a 2 MiB boundary (:data:`BUFFER_ALIGN_BYTES`, as
the C reference kernels of bench/probes allocate theirs): numpy's own arrays start on a 16-byte
boundary, so half of the 32-byte stores of a vectorised loop then straddle two cache lines
(measured here, Zen 3: L1 stores 62 GB/s unaligned, 90 GB/s aligned; C 92). The probe measures
what the machine can do, as MAPS does. Pages (:func:`set_pages`, ``--pages``): numpy asks for
transparent huge pages (``madvise``) on allocations of 4 MiB and more (``huge``, what numpy programs
get), which a C or Fortran program's malloc does not: where ``/sys/kernel/mm/transparent_hugepage/enabled``
is ``madvise`` those get 4 KiB pages (``default``, numpy's request turned off). It matters from the
last cache level on: on the Xeon VM of 26 Nov 2026 one core's loads ran 13-17 % slower on 4 KiB pages
at 91-128 MiB, stores alike (docs/probing.md: ``--pages huge`` against ``--pages default``). Both are recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit, prange, get_num_threads, set_num_threads

ACCESS_KINDS = ("load_unit", "load_random", "store", "copy")
LINE_BYTES = 64


# ------------------------------------------------------------------ kernels (one core)

@njit(cache=True, fastmath=True)
def _load_unit(a, sweeps):
    s = 0.0
    for _ in range(sweeps):
        for i in range(a.size):
            s += a[i]
    return s


@njit(cache=True, fastmath=True)
def _load_random(a, idx, sweeps):
    s = 0.0
    for _ in range(sweeps):
        for i in range(idx.size):
            s += a[idx[i]]
    return s


# The gather in two loops as well: LLVM vectorises the one above into AVX-512 gathers (vgatherqpd,
# four in flight); without fastmath the sum keeps its order and the loop stays scalar, one load an
# element. In L1 and L2 the gathers are 1.4-2x faster; from memory on the EPYC Zen 4 of 27 Nov 2026
# the vectorised loop ran 0.903-0.947 of gcc's (its vgatherdpd, two in flight; bench/probes/run, four
# runs) and the scalar one about as fast as C in a scratch timing at 128 MiB (0.98-0.99). measure_point
# keeps the faster, as for the stores: bench/probes/run then read 0.929-0.966 at best-of (seven runs,
# 28 Nov; the medians of all repetitions 0.951-1.085 against 0.939-0.977 for the vector loop alone).
# (Written twice rather than one source compiled twice, as the stores are: numba's cache keys a
# function's compilations by source and signature, not by fastmath, and these two are cached.)
@njit(cache=True)
def _load_random_scalar(a, idx, sweeps):
    s = 0.0
    for _ in range(sweeps):
        for i in range(idx.size):
            s += a[idx[i]]
    return s


# The store and copy kernels come in two loops, the same source compiled twice: with LLVM's loop
# interleaving off (_compile_plain: one store per iteration, what gcc emits for the C reference
# kernels of bench/probes) and with LLVM's own choice (a 4-way interleaved loop). Which is faster
# depends on the core: on the Zen 3 of 23 Nov 2026 the interleaved loop streamed to memory 10-14 %
# slower (checked with C intrinsics); on the Xeon VM of 26 Nov it stored into L1 2.0-2.1x as fast
# and alike beyond (bench/store_kernels). measure_point times both at each point and keeps the
# faster (MAPS measures what the machine can do, not what one loop does). Not cached: numba's
# cache key does not include LLVM options.
def _store_src(a, sweeps):
    for r in range(sweeps):
        v = float(r)
        for i in range(a.size):
            a[i] = v
    return a[0]


def _copy_src(a, b, sweeps):
    for _ in range(sweeps):
        for i in range(a.size):
            b[i] = a[i]
    return b[0]


_store = njit(cache=False)(_store_src)
_copy = njit(cache=False)(_copy_src)
_store_il = njit(cache=False)(_store_src)
_copy_il = njit(cache=False)(_copy_src)


# ------------------------------------------------------------------ kernels (all cores)

# Each thread runs the one-core kernel on its own slice: the same vectorised loop as one core
# (written inline in the prange body, the index arithmetic kept LLVM from vectorising it).

@njit(cache=True, parallel=True)
def _load_unit_par(a, sweeps, n_threads):
    n = a.size
    out = np.zeros(n_threads)
    for t in prange(n_threads):
        out[t] = _load_unit(a[n * t // n_threads:n * (t + 1) // n_threads], sweeps)
    return out.sum()


@njit(cache=True, parallel=True)
def _load_random_par(a, idx, sweeps, n_threads, scalar=False):
    # idx holds, for each slice, a permutation of that slice's own indices; ``scalar``: the
    # gather's scalar loop (GATHER_LOOPS)
    n = idx.size
    out = np.zeros(n_threads)
    for t in prange(n_threads):
        mine = idx[n * t // n_threads:n * (t + 1) // n_threads]
        out[t] = _load_random_scalar(a, mine, sweeps) if scalar else _load_random(a, mine, sweeps)
    return out.sum()


def _store_par_of(store):
    @njit(cache=False, parallel=True)
    def store_par(a, sweeps, n_threads):
        n = a.size
        out = np.zeros(n_threads)
        for t in prange(n_threads):
            out[t] = store(a[n * t // n_threads:n * (t + 1) // n_threads], sweeps)
        return out.sum()
    return store_par


def _copy_par_of(copy):
    @njit(cache=False, parallel=True)
    def copy_par(a, b, sweeps, n_threads):
        n = a.size
        out = np.zeros(n_threads)
        for t in prange(n_threads):
            lo, hi = n * t // n_threads, n * (t + 1) // n_threads
            out[t] = copy(a[lo:hi], b[lo:hi], sweeps)
        return out.sum()
    return copy_par


_store_par, _store_par_il = _store_par_of(_store), _store_par_of(_store_il)
_copy_par, _copy_par_il = _copy_par_of(_copy), _copy_par_of(_copy_il)
#: the two loops of the store and copy kernels: (one core, all cores) per kind
STORE_LOOPS = ("one_store", "interleaved")
#: the two loops of the gather
GATHER_LOOPS = ("vector", "scalar")
#: the kinds measured with more than one loop, the faster kept at each point (faster_loop)
KERNEL_LOOPS = {"store": STORE_LOOPS, "copy": STORE_LOOPS, "load_random": GATHER_LOOPS}
_LOOPS = {("store", "one_store"): (_store, _store_par), ("store", "interleaved"): (_store_il, _store_par_il),
          ("copy", "one_store"): (_copy, _copy_par), ("copy", "interleaved"): (_copy_il, _copy_par_il),
          ("load_random", "vector"): (_load_random, _load_random_par),
          ("load_random", "scalar"): (_load_random_scalar,
                                      lambda a, idx, sweeps, k: _load_random_par(a, idx, sweeps, k, True))}


_PLAIN_COMPILED = []


def _compile_plain() -> None:
    """Compile the one-store loops of the store/copy kernels for float64 C arrays with LLVM's
    ``-force-vector-interleave=1`` (process-wide while it lasts; restored to the default after),
    then their interleaved twins with the default."""
    if _PLAIN_COMPILED:
        return
    import llvmlite.binding as llvm
    llvm.set_option("", "-force-vector-interleave=1")
    try:
        a, b = np.zeros(8), np.zeros(8)
        _store(a, 0)
        _copy(a, b, 0)
        _store_par(a, 0, 1)
        _copy_par(a, b, 0, 1)
    finally:
        llvm.set_option("", "-force-vector-interleave=0")
    a, b = np.zeros(8), np.zeros(8)   # and the interleaved loops, with LLVM's own choice
    _store_il(a, 0)
    _copy_il(a, b, 0)
    _store_par_il(a, 0, 1)
    _copy_par_il(a, b, 0, 1)
    _PLAIN_COMPILED.append(True)


# ------------------------------------------------------------------ overlap probe
# a[i] = f_r(b[i]) over a working set in one level, f_r the sum of r independent chains of 8
# dependent multiply-adds (the flop_simd probe's element), each with its own constants read at
# run time (with shared constants fastmath lets LLVM fold the chains into one): 16 r + (r - 1)
# flop per element (r = 0: a plain copy). Vectorised across elements (fastmath). Small r: the
# sweep is memory-bound; large r: compute-bound; in between both matter, and how much they
# overlap is the machine's overlap parameter (pmac.overlap.samples_from_probe).

OVERLAP_CHAINS = (0, 1, 2, 4, 8, 16)
_MIXED: dict = {}


def overlap_flop_per_element(r: int) -> int:
    return 16 * r + (r - 1) if r > 0 else 0


def mixed_kernel(r: int):
    """The overlap kernel with r chains per element (compiled once per process)."""
    if r not in _MIXED:
        lines = ["            v = b[i]"]
        if r == 0:
            lines.append("            a[i] = v")
        else:
            lines += [f"            x{j} = v" for j in range(r)]
            for _ in range(8):
                lines += [f"            x{j} = x{j} * c{j} + e{j}" for j in range(r)]
            lines.append("            a[i] = " + " + ".join(f"x{j}" for j in range(r)))
        consts = "".join(f"    c{j} = cs[{j}]\n    e{j} = es[{j}]\n" for j in range(r))
        src = (f"def mixed{r}(a, b, sweeps, cs, es):\n{consts}    for _ in range(sweeps):\n"
               f"        for i in range(a.size):\n" + "\n".join(lines) + "\n    return a[0]\n")
        ns: dict = {}
        exec(compile(src, f"<mixed{r}>", "exec"), ns)
        _MIXED[r] = njit(cache=False, fastmath=True)(ns[f"mixed{r}"])
    return _MIXED[r]


def measure_overlap(ws_bytes: int, r: int, p: "Params") -> tuple[int, list[float]]:
    """(elements, seconds per sweep of each repetition) of the overlap kernel with r chains:
    arrays a and b of ws_bytes in all, one core, the probe's stop rule on the repetitions."""
    n = max(ws_bytes // 16, 8)
    a, b = aligned_full(n, 0.0), aligned_full(n, 1.0)
    fn = mixed_kernel(r)
    cs = 0.999 - 1e-4 * np.arange(max(r, 1))
    es = 1e-4 * (1.0 + np.arange(max(r, 1)))
    fn(a, b, 1, cs, es)
    sweeps = 1
    while True:
        t0 = time.perf_counter()
        fn(a, b, sweeps, cs, es)
        dt = time.perf_counter() - t0
        if dt >= p.rep_s or sweeps >= 1 << 30:
            break
        sweeps *= 2
    reps: list[float] = []
    while len(reps) < p.max_reps:
        t0 = time.perf_counter()
        fn(a, b, sweeps, cs, es)
        reps.append((time.perf_counter() - t0) / sweeps)
        if len(reps) >= max(p.min_reps, p.window):
            w = np.asarray(ending_reps(reps, p.window, p.stop_rule, larger_is_better=False))
            if (w.max() - w.min()) / np.median(w) < p.threshold:
                break
    return n, reps


def overlap_working_sets(cache_sizes: list[int]) -> list[int]:
    """One working set inside each cache level (half of each private level, a quarter of the
    last) and one in memory (4x the last level)."""
    if not cache_sizes:
        return [16 << 10, 128 << 20]
    out = [s // 2 for s in cache_sizes[:-1]] + [cache_sizes[-1] // 4, 4 * cache_sizes[-1]]
    return out


# ------------------------------------------------------------------ pointer chase

@njit(cache=True)
def _sattolo_lines(nxt, n_lines, stride, seed):
    """nxt[line*stride] = (next line)*stride along one random cycle through all lines.

    ``nxt`` is allocated by numpy (huge pages like every other probe buffer), filled here."""
    np.random.seed(seed)
    order = np.arange(n_lines)
    for i in range(n_lines - 1, 0, -1):
        j = np.random.randint(0, i)  # j < i: Sattolo, a single cycle
        order[i], order[j] = order[j], order[i]
    for i in range(n_lines):
        nxt[i * stride] = order[i] * stride


@njit(cache=True)
def _chase(nxt, start, steps):
    p = start
    for _ in range(steps):
        p = nxt[p]
    return p


@njit(cache=True)
def _permutation_in_slices(idx, n_slices, seed):
    """Fill idx: within each of n_slices contiguous slices, a random permutation of it."""
    np.random.seed(seed)
    n = idx.size
    for t in range(n_slices):
        lo = n * t // n_slices
        hi = n * (t + 1) // n_slices
        for i in range(lo, hi):
            idx[i] = i
        for i in range(hi - 1, lo, -1):
            j = lo + np.random.randint(0, i - lo + 1)
            idx[i], idx[j] = idx[j], idx[i]


# ------------------------------------------------------------------ front end

#: the full probe's largest working set: this many times the last-level cache the probed cores
#: use (every instance of it together), at least MIN_MAX_BYTES, at most a quarter of the memory
#: available and MAX_MAX_BYTES. Why 8: the memory plateau is fitted from 4x on (pmac.fit.fit_node),
#: and a last level that is not LRU still serves part of a sweep of twice its size (on the EPYC VM
#: of 27 Nov 2026, 32 MiB L3: both cores together 44 GB/s at 64 MiB, 32 at 128 MiB, medians of
#: machines/epyc-vm.raw.npz); a fixed 128 MiB never reaches memory on nodes with more cache than
#: that (the Xeon VM of 26 Nov reports 300 MiB of L3).
LLC_FACTOR = 8
MIN_MAX_BYTES = 128 * 1024 * 1024
MAX_MAX_BYTES = 4 * 1024 ** 3


def cache_indices(cpu: int, root: str = "/sys/devices/system/cpu") -> list[tuple[int, int, str]]:
    """The data and unified caches of CPU ``cpu`` from sysfs: (level, size in bytes, the
    ``shared_cpu_list`` text), in sysfs's order; [] where sysfs has no cache information (an entry
    it cannot read is left out)."""
    out = []
    for d in sorted(Path(root, f"cpu{cpu}", "cache").glob("index*")):
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            out.append((int((d / "level").read_text()), _size_bytes((d / "size").read_text()),
                        (d / "shared_cpu_list").read_text().strip()))
        except (OSError, ValueError):
            continue
    return out


def shared_cpu_count(cpu_list: str) -> int:
    """How many CPUs a sysfs CPU list ("0-3,8") names."""
    n = 0
    for part in cpu_list.split(","):
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return n


def last_level_bytes(cpus=None, root: str = "/sys/devices/system/cpu") -> int | None:
    """The last-level data cache the CPUs ``cpus`` (default: those this process may run on) use,
    all its instances together, from sysfs; None where sysfs has no cache information."""
    cpus = sorted(cpus if cpus is not None else _cpus())
    best: dict = {}
    for cpu in cpus:
        for level, size, shared in cache_indices(cpu, root):
            best.setdefault(level, {})[shared] = size
    if not best:
        return None
    return int(sum(best[max(best)].values()))


def _size_bytes(text: str) -> int:
    """A sysfs cache size ("32K", "32768K", "1M") in bytes (as pmac.fit reads them: the probes
    import nothing from pmac, so they run on a machine without it)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(t[-1:], 1)
    return int(t.rstrip("KMG")) * mult


def _cpus() -> set:
    """The CPUs this process may run on (all of them where the OS cannot say)."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover
        return set(range(os.cpu_count() or 1))


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable from /proc/meminfo in bytes; None where there is none."""
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_max_bytes(llc_bytes: int | None, avail_bytes: int | None) -> int:
    """The full probe's largest working set (see :data:`LLC_FACTOR`), a multiple of 1 MiB."""
    want = max(MIN_MAX_BYTES, LLC_FACTOR * (llc_bytes or 0))
    cap = MAX_MAX_BYTES if avail_bytes is None else min(MAX_MAX_BYTES, avail_bytes // 4)
    return max(min(want, cap), MIN_MAX_BYTES) // 2 ** 20 * 2 ** 20


@dataclass
class Params:
    min_bytes: int = 4 * 1024
    #: None: :func:`default_max_bytes` for this machine (:meth:`resolved`); the quick probe 128 MiB
    max_bytes: int | None = None
    points_per_doubling: int = 4
    rep_s: float = 0.001  # one core; all cores at once 4x (amortises the thread start)
    threshold: float = 0.02
    window: int = 5
    stop_rule: str = "best"          # 'best': the fastest `window` reps agree; 'last': the last ones
    min_reps: int = 5
    max_reps: int = 20
    point_budget_s: float = 0.6
    latency_steps_min: int = 200_000
    latency_steps_max: int = 500_000  # a repetition walks on from where the last one stopped
    accesses: tuple = ACCESS_KINDS
    core_counts: tuple = ()          # () -> (1, all cores)

    @classmethod
    def quick(cls) -> "Params":
        return cls(points_per_doubling=2, window=3, min_reps=3, max_reps=8, max_bytes=MIN_MAX_BYTES,
                   point_budget_s=0.25, latency_steps_min=100_000, latency_steps_max=200_000)

    def resolved(self) -> "Params":
        """These parameters with ``max_bytes`` set (:func:`default_max_bytes` of this machine when None)."""
        if self.max_bytes is not None:
            return self
        return dataclasses.replace(self, max_bytes=default_max_bytes(last_level_bytes(), available_bytes()))

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["accesses"] = list(self.accesses)
        d["core_counts"] = list(self.core_counts)
        return d


@dataclass
class PointResult:
    access: str
    n_cores: int
    working_set_bytes: int
    bandwidth_bytes_per_s: list = field(default_factory=list)
    spread_frac: float = 0.0
    stable: bool = True
    value: float = 0.0               # median of the repetitions that ended the point
    #: store, copy and load_random: the loop that ran the point (KERNEL_LOOPS, the faster of the
    #: two); "" otherwise
    loop: str = ""


def ending_reps(values, window: int, rule: str, *, larger_is_better: bool = True) -> list:
    """The repetitions the stopping rule looks at: the ``window`` best or the last ones."""
    v = list(values)
    if rule == "last":
        return v[-window:]
    if rule != "best":
        raise ValueError(f"unknown stop rule {rule!r} (best, last)")
    v = sorted(v, reverse=larger_is_better)
    return v[:window]


def working_sets(p: Params) -> list[int]:
    """Working-set sizes: ``points_per_doubling`` per doubling from ``min_bytes``, multiples of
    1 KiB, ending at ``max_bytes`` itself. A ``max_bytes`` off that grid (8x a 35.75 MiB L3) ends
    the list in place of the grid's last point when that point lies within half a step of it, and
    is added after it otherwise; no point exceeds it (the largest is sized to the memory the
    machine has)."""
    p = p.resolved()
    steps = np.log2(p.max_bytes / p.min_bytes) * p.points_per_doubling
    n = int(np.floor(steps - 0.5 + 1e-9)) if steps >= 0.5 else -1
    sizes = list(p.min_bytes * 2.0 ** (np.arange(n + 1) / p.points_per_doubling)) + [p.max_bytes]
    return sorted({int(round(s / 1024)) * 1024 for s in sizes})


#: how the probe's buffers get their pages (:func:`set_pages`, ``pmac probe --pages``)
PAGE_MODES = ("default", "huge")


def _madvise_flag():
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray
    return multiarray


@contextlib.contextmanager
def pages(mode: str):
    """:func:`set_pages` for the duration of a ``with`` block; numpy's setting and the environment
    as they were afterwards."""
    flag, env = _madvise_flag()._get_madvise_hugepage(), os.environ.get("NUMPY_MADVISE_HUGEPAGE")
    set_pages(mode)
    try:
        yield
    finally:
        _madvise_flag()._set_madvise_hugepage(flag)
        if env is None:
            os.environ.pop("NUMPY_MADVISE_HUGEPAGE", None)
        else:
            os.environ["NUMPY_MADVISE_HUGEPAGE"] = env


def set_pages(mode: str) -> None:
    """Pages of the probe buffers allocated from now on, in this process and in the processes it
    starts (the network probe's ranks): ``default``, what a plain allocation gets on this system
    (numpy does not ask for huge pages; with transparent huge pages in ``madvise`` mode that is 4 KiB
    pages, as a C or Fortran program's malloc'd arrays get); ``huge``, transparent huge pages asked
    for on buffers of 4 MiB and more (numpy's own ``madvise``), as a program that asks gets them."""
    if mode not in PAGE_MODES:
        raise ValueError(f"pages must be one of {', '.join(PAGE_MODES)}, not {mode!r}")
    _madvise_flag()._set_madvise_hugepage(mode == "huge")
    os.environ["NUMPY_MADVISE_HUGEPAGE"] = "1" if mode == "huge" else "0"


def pages_in_effect(mode: str, thp: str | None = None) -> str:
    """The pages large probe buffers get with ``mode`` on this system (``thp``: the transparent
    huge page setting, default read from /sys), in words, as the profile records them."""
    thp = thp_setting() if thp is None else thp
    if thp == "always":
        return "huge pages (transparent huge pages: always)"
    if thp == "never":
        return "4 KiB pages (transparent huge pages: never)"
    if thp == "madvise":
        return ("huge pages, asked for (transparent huge pages: madvise)" if mode == "huge" else
                "4 KiB pages: huge pages not asked for (transparent huge pages: madvise)")
    return f"huge pages {'asked for' if mode == 'huge' else 'not asked for'} (transparent huge pages: {thp})"


def thp_setting() -> str:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        return "unknown"
    return text[text.find("[") + 1:text.find("]")] if "[" in text else text


def spread(values) -> float:
    v = np.asarray(values, dtype=np.float64)
    med = np.median(v)
    return float((v.max() - v.min()) / med) if med > 0 else float("inf")


#: where every probe buffer's data start (bytes): a huge page, hence also a cache line and a page
BUFFER_ALIGN_BYTES = 2 << 20


def aligned_full(n: int, value, dtype=np.float64) -> np.ndarray:
    """``np.full(n, value, dtype)`` whose data start on a BUFFER_ALIGN_BYTES boundary."""
    item = np.dtype(dtype).itemsize
    raw = np.empty(n * item + BUFFER_ALIGN_BYTES, dtype=np.uint8)
    off = -raw.ctypes.data % BUFFER_ALIGN_BYTES
    out = raw[off:off + n * item].view(dtype)
    out.fill(value)
    return out


class _Point:
    """Buffers and a timed call ``run(sweeps)`` for one access kind, size and core count."""

    def __init__(self, access: str, ws_bytes: int, n_cores: int, seed: int = 1, loop: str | None = None):
        self.access, self.n_cores = access, n_cores
        self.loop = loop or KERNEL_LOOPS.get(access, ("",))[0]
        if access in ("store", "copy"):
            _compile_plain()
        if access == "load_random":
            n = max(ws_bytes // 12, n_cores)
            self.a = aligned_full(n, 1.0)
            self.idx = aligned_full(n, 0, np.uint32)  # unsigned: no negative-index wraparound test
            _permutation_in_slices(self.idx, n_cores, seed)
            self.bytes_per_sweep = 12 * n
        elif access == "copy":
            n = max(ws_bytes // 16, n_cores)
            self.a = aligned_full(n, 1.0)
            self.b = aligned_full(n, 0.0)
            self.bytes_per_sweep = 16 * n
        else:
            n = max(ws_bytes // 8, n_cores)
            self.a = aligned_full(n, 1.0)
            self.bytes_per_sweep = 8 * n
        self.ws_bytes = self.bytes_per_sweep

    def run(self, sweeps: int) -> float:
        a, k = self.access, self.n_cores
        t0 = time.perf_counter()
        if k == 1:
            if a == "load_unit":
                _load_unit(self.a, sweeps)
            elif a == "load_random":
                _LOOPS[a, self.loop][0](self.a, self.idx, sweeps)
            elif a == "store":
                _LOOPS[a, self.loop][0](self.a, sweeps)
            else:
                _LOOPS[a, self.loop][0](self.a, self.b, sweeps)
        else:
            if a == "load_unit":
                _load_unit_par(self.a, sweeps, k)
            elif a == "load_random":
                _LOOPS[a, self.loop][1](self.a, self.idx, sweeps, k)
            elif a == "store":
                _LOOPS[a, self.loop][1](self.a, sweeps, k)
            else:
                _LOOPS[a, self.loop][1](self.a, self.b, sweeps, k)
        return time.perf_counter() - t0


def faster_loop(pt: "_Point", sweeps: int, rounds: int = 3) -> str:
    """Of the point's loops (KERNEL_LOOPS), the one whose best of ``rounds`` repetitions
    (alternated) is faster."""
    loops = KERNEL_LOOPS[pt.access]
    best = {}
    for _ in range(rounds):
        for loop in loops:
            pt.loop = loop
            dt = pt.run(sweeps)
            best[loop] = min(best.get(loop, dt), dt)
    return min(loops, key=lambda loop: best[loop])


def measure_point(access: str, ws_bytes: int, n_cores: int, p: Params) -> PointResult:
    """Repeat one point until ``window`` repetitions (see ``stop_rule``) agree within ``threshold``."""
    pt = _Point(access, ws_bytes, n_cores)
    pt.run(1)  # warm: first touch, page faults, caches
    # calibrate: double the sweeps until one repetition takes rep_s (this also amortises the
    # thread start of the all-cores kernels, ~10 us on a quiet machine)
    rep_s = p.rep_s * (4 if n_cores > 1 else 1)
    sweeps, dt = 1, pt.run(1)
    while dt < rep_s and sweeps < 1 << 30:
        sweeps *= 2 if dt > rep_s / 16 else 8
        dt = pt.run(sweeps)
    loop = faster_loop(pt, sweeps) if access in KERNEL_LOOPS else ""
    pt.loop = loop or pt.loop
    res = PointResult(access=access, n_cores=n_cores, working_set_bytes=int(pt.ws_bytes), loop=loop)
    t_start = time.perf_counter()
    while True:
        dt = pt.run(sweeps)
        res.bandwidth_bytes_per_s.append(pt.bytes_per_sweep * sweeps / dt)
        reps = len(res.bandwidth_bytes_per_s)
        if reps >= max(p.min_reps, p.window):
            ending = ending_reps(res.bandwidth_bytes_per_s, p.window, p.stop_rule)
            res.spread_frac = spread(ending)
            res.value = float(np.median(ending))
            if res.spread_frac < p.threshold:
                break
            if reps >= p.max_reps or (time.perf_counter() - t_start > p.point_budget_s and reps >= p.min_reps):
                res.stable = False
                break
    return res


def measure_latency_point(ws_bytes: int, p: Params) -> tuple[int, list[float]]:
    """Pointer chase; returns (working_set_bytes, seconds per load for each repetition)."""
    stride = LINE_BYTES // 8
    n_lines = max(ws_bytes // LINE_BYTES, 2)
    nxt = aligned_full(n_lines * stride, 0, np.int64)
    _sattolo_lines(nxt, n_lines, stride, 7)
    steps = max(p.latency_steps_min, min(n_lines, p.latency_steps_max))
    pos = _chase(nxt, 0, min(n_lines, steps))  # warm
    out = []
    cap = max(p.min_reps, p.window, 3) + 2
    t_start = time.perf_counter()
    while len(out) < cap:
        t0 = time.perf_counter()
        pos = _chase(nxt, pos, steps)
        out.append((time.perf_counter() - t0) / steps)
        if len(out) >= max(p.window, p.min_reps):
            if spread(ending_reps(out, p.window, p.stop_rule, larger_is_better=False)) < p.threshold:
                break
            if time.perf_counter() - t_start > 2 * p.point_budget_s:
                break
    return n_lines * LINE_BYTES, out


def n_cores_available() -> int:
    return len(_cpus())


def run(p: Params, progress=None):
    """Run every bandwidth and latency point. Returns (bandwidth points, latency points).

    ``progress(fraction, message)`` is called between points; an exception it raises stops
    the probe (that is how an interrupted run is simulated in tests).
    """
    sizes = working_sets(p)
    ncores = n_cores_available()
    cores = tuple(p.core_counts) or ((1, ncores) if ncores > 1 else (1,))
    if max(cores) > get_num_threads():
        set_num_threads(min(max(cores), get_num_threads()))
    todo = [(a, s, k) for k in cores for a in p.accesses for s in sizes]
    total = len(todo) + len(sizes)
    bw, lat = [], []
    for i, (a, s, k) in enumerate(todo):
        if progress:
            progress(i / total, f"bandwidth {a} {k} core(s) {s // 1024} KiB")
        bw.append(measure_point(a, s, k, p))
    for j, s in enumerate(sizes):
        if progress:
            progress((len(todo) + j) / total, f"latency {s // 1024} KiB")
        lat.append(measure_latency_point(s, p))
    if progress:
        progress(1.0, "memory done")
    return bw, lat


def tables(bw, lat) -> dict[str, dict[str, np.ndarray]]:
    """Columns of the ``bandwidth`` and ``latency`` raw tables, one row per repetition."""
    rows = [(r.access, r.n_cores, r.working_set_bytes, i, v)
            for r in bw for i, v in enumerate(r.bandwidth_bytes_per_s)]
    b = {"access": np.array([x[0] for x in rows], dtype="U16"),
         "n_cores": np.array([x[1] for x in rows], dtype=np.int32),
         "working_set_bytes": np.array([x[2] for x in rows], dtype=np.int64),
         "rep": np.array([x[3] for x in rows], dtype=np.int32),
         "bandwidth_bytes_per_s": np.array([x[4] for x in rows], dtype=np.float64)}
    lrows = [(ws, i, v) for ws, vals in lat for i, v in enumerate(vals)]
    lt = {"working_set_bytes": np.array([x[0] for x in lrows], dtype=np.int64),
          "rep": np.array([x[1] for x in lrows], dtype=np.int32),
          "latency_s": np.array([x[2] for x in lrows], dtype=np.float64)}
    return {"bandwidth": b, "latency": lt}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 points per doubling, fewer repetitions")
    ap.add_argument("--max-bytes", type=int, help="largest working set (default: 8x the last-level cache, "
                                                  "128 MiB at least; --quick 128 MiB)")
    ap.add_argument("--access", action="append", choices=ACCESS_KINDS, help="access kind(s)")
    ap.add_argument("--cores", type=int, action="append", help="core count(s) (default 1 and all)")
    ap.add_argument("--threshold", type=float, help="relative spread to stop repeating (default 0.02)")
    ap.add_argument("--stop-rule", choices=("best", "last"), help="which repetitions must agree (default best)")
    ap.add_argument("--out", help="write the raw tables to this .npz")
    ap.add_argument("--pages", choices=PAGE_MODES, default="huge",
                    help="default: what a plain allocation gets here; huge: huge pages asked for (default)")
    a = ap.parse_args(argv)
    set_pages(a.pages)
    p = Params.quick() if a.quick else Params()
    if a.max_bytes:
        p.max_bytes = a.max_bytes
    if a.access:
        p.accesses = tuple(a.access)
    if a.cores:
        p.core_counts = tuple(a.cores)
    if a.threshold:
        p.threshold = a.threshold
    if a.stop_rule:
        p.stop_rule = a.stop_rule
    p = p.resolved()
    print(f"# transparent_hugepage={thp_setting()} pages={pages_in_effect(a.pages)} params={p.to_dict()}")
    bw, lat = run(p)
    print("access n_cores working_set_bytes rep bandwidth_bytes_per_s")
    for r in bw:
        for i, v in enumerate(r.bandwidth_bytes_per_s):
            print(r.access, r.n_cores, r.working_set_bytes, i, f"{v:.6e}")
        if r.loop:
            print(f"# loop {r.access} {r.n_cores} core(s) {r.working_set_bytes} B: {r.loop}")
        if not r.stable:
            print(f"# WARNING: {r.access} {r.n_cores} core(s) {r.working_set_bytes} B did not stabilise: "
                  f"spread {r.spread_frac:.1%}")
    print("working_set_bytes rep latency_s")
    for ws, vals in lat:
        for i, v in enumerate(vals):
            print(ws, i, f"{v:.6e}")
    if a.out:
        t = tables(bw, lat)
        np.savez(a.out, **{f"{k}/{c}": v for k, cols in t.items() for c, v in cols.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

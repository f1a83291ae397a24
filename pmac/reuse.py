"""Reuse-distance analysis: LRU stack distances, SHARDS sampling, histograms, hit rates.

Numba kernels over plain arrays behind a thin Python front:

- :func:`stack_distances`: exact LRU stack distance of every access (distinct lines touched
  since the previous access to the same line; -1 = first touch). The top of the LRU stack, the
  :data:`TOP_LINES` most recent lines, is a small array in recency order: an access found there
  has its position as distance (84-99 % of the sampled accesses of stencil2d and cg_mpi4py at
  32-256-byte lines; 47-97 % are to the previous access's line). Below it, a hash table maps
  each line to the time it left the top; a bitmap over those times marks the lines still below,
  and a Fenwick tree sums the marks of 512-slot blocks (small enough to stay in the cache):
  distance = TOP_LINES + the marks after the line's own, O(log n) per access; the hash slot of
  an access a few ahead is prefetched. ``bench/reuse_distance`` measures the speed on a random
  stream, where nearly every access goes below the top (issue 4's goal: 20 M accesses/s of the
  traced program).
- :func:`shards_filter` / :func:`reuse_histogram`: SHARDS spatial sampling (Waldspurger et al.,
  FAST 2015): keep the accesses whose line hashes below ``R * 2**24``; distances and counts of
  the sampled stream, scaled by ``1/R``, estimate the full histogram. The hash is the one the
  valgrind tool uses (Fibonacci hashing, top 24 bits of ``line * 0x9E3779B97F4A7C15``).
- :func:`burst_histograms`: per-burst load/store histograms at several line sizes from the
  tool's sampled access words (pmac.memtrace).
- Associativity, two stated placement models (:func:`hit_fraction_assoc`):
  ``placement="random"`` is Smith's (1978) binomial model: with the set of each line chosen at
  random, an access with fully-associative stack distance ``d`` hits an ``S``-set ``W``-way LRU
  cache iff fewer than ``W`` of the ``d`` distinct lines in between fall in its set,
  ``P(hit | d) = BinomCDF(W - 1; d, 1/S)`` (:func:`set_assoc_hit_prob`);
  ``placement="balanced"`` (default) takes the ``d`` lines as spread evenly over the sets, as
  contiguous arrays are, so a hit is ``d < S * W``: the fully-associative answer. Measured by
  ``bench/reuse_distance`` against :func:`simulate_lru` (32 KiB 8-way and 1 MiB 16-way, 64 B
  lines): on random streams over 0.5-4x the cache, sequential sweeps and two same-aligned
  arrays "balanced" is within 0.02 pp; the binomial model is 0.01-1.6 pp low on the random
  streams and 39-45 pp low on the sweeps. Neither sees pathological conflicts: 2W lines at a
  stride of S lines always miss in the real cache, and "balanced" says they always hit.
- :func:`simulate_lru` is a direct set-associative LRU simulator (modulo set index) to
  measure that model's error; :func:`level_fractions` gives the fraction of accesses served by
  each level of a hierarchy.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir
import numba
import numpy as np
from numba.core import types
from numba.extending import intrinsic

from .memsig import COLD_BIN, N_REUSE_BINS, REUSE_BIN_EDGES_LINES, hit_fraction

HASH_BITS = 24
HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
_EDGES = REUSE_BIN_EDGES_LINES.astype(np.float64)


def threshold_for(rate: float) -> int:
    """Hash threshold of sampling rate ``rate`` (0 < rate <= 1)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sampling rate must be in (0, 1], got {rate}")
    return max(1, min(1 << HASH_BITS, int(round(rate * (1 << HASH_BITS)))))


@numba.njit(cache=True)
def _hash_top(line):
    return (np.uint64(line) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - 24)


@numba.njit(cache=True, inline="always")
def _mix(key):
    # splitmix64 finaliser: independent of the SHARDS hash, so sampled keys spread evenly
    z = np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


#: lines at the top of the LRU stack kept in recency order (see the module docstring)
TOP_LINES = 16
_EMPTY = -1     # hash slot unused
_IN_TOP = -2    # hash slot of a line in the top array (not in the tree)


def _new_table(n_slots):
    """An empty hash table: per slot (line, its time below the top or _IN_TOP; _EMPTY unused),
    side by side so that a probe reads one cache line."""
    table = np.empty((n_slots, 2), np.int64)
    table[:, 1] = _EMPTY
    return table


@numba.njit(cache=True, nogil=True)
def _grow_table(table, bits):
    """The hash table rehashed into twice the slots (``bits`` = the new log2 size)."""
    ncap = table.shape[0] * 2
    new = np.empty((ncap, 2), np.int64)
    new[:, 1] = _EMPTY
    nmask = ncap - 1
    for j in range(table.shape[0]):
        if table[j, 1] != _EMPTY:
            k = table[j, 0]
            g = np.int64(_mix(k) >> np.uint64(64 - bits))
            while new[g, 1] != _EMPTY:
                g = (g + 1) & nmask
            new[g, 0] = k
            new[g, 1] = table[j, 1]
    return new


@intrinsic
def _popcount(typingctx, x):
    """Number of set bits of a uint64 (LLVM's ctpop: one instruction where the CPU has it)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [args[0].type])
        return builder.call(fn, args)

    return types.uint64(types.uint64), codegen


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Ask the CPU to fetch the cache line of ``arr.flat[idx]`` (read, keep in all levels)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        # llvmlite names it for typed pointers (llvm.prefetch.p0i8); LLVM >= 15 renames it
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(),
                                                                                     [i8p, i32, i32, i32]))
        builder.call(fn, [builder.bitcast(builder.gep(ary.data, [args[1]]), i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.none(arr, idx), codegen


_AHEAD = 4      # accesses ahead whose hash slot is prefetched
_BLOCK = 512    # time slots per block of the mark bitmap: 8 words, one cache line


@numba.njit(cache=True, nogil=True)
def _compact_time(table, live):
    """Renumber the times of the ``live`` lines below the top 0..live-1 in order (in place).

    Returns the new marks: a bitmap over ``max(4096, 8 * live)`` time slots (rounded up to whole
    blocks) with bits 0..live-1 set, and the Fenwick tree of its blocks' mark counts.
    """
    slots = np.empty(live, np.int64)
    k = 0
    for j in range(table.shape[0]):
        if table[j, 1] >= 0:
            slots[k] = j
            k += 1
    order = np.argsort(table[slots, 1])
    for r in range(live):
        table[slots[order[r]], 1] = r
    size = (max(4096, 8 * live) + _BLOCK - 1) // _BLOCK * _BLOCK
    marks = np.zeros(size // 64, np.uint64)
    for w in range(live // 64):
        marks[w] = np.uint64(0xFFFFFFFFFFFFFFFF)
    if live % 64:
        marks[live // 64] = (np.uint64(1) << np.uint64(live % 64)) - np.uint64(1)
    nblk = size // _BLOCK
    btree = np.zeros(nblk + 1, np.int32)
    for i in range(1, nblk + 1):
        btree[i] += min(_BLOCK, max(0, live - (i - 1) * _BLOCK))
        j = i + (i & (-i))
        if j <= nblk:
            btree[j] += btree[i]
    return marks, btree


@numba.njit(cache=True, nogil=True)
def _lru_pass(data, i0, words, shift, out, lut, scale, edges, top, table, marks, btree, st, hist, fhist):
    """The LRU stack over a stream, from ``data[i0]`` on, continuing the state in (top, table,
    marks, btree, st = [bits, live, size, pos, ntop, burst, stopped, next]).

    ``top[:ntop]`` holds the most recent lines, most recent first. Below them ``live`` lines,
    each with the time it left the top in the hash table ``table`` (_IN_TOP for the lines of
    the top) and a mark at that time in the bitmap ``marks`` over ``size`` slots, whose blocks'
    counts are summed by the Fenwick tree ``btree`` (a line's distance counts the marks after
    its own: the tree over blocks stays in the cache, the block is one cache line); ``pos`` is
    the next time. ``words=False``: ``data`` are lines (int64 as uint64) and ``out`` gets each
    access's distance (-1: first touch). ``words=True``: ``data`` are the tool's access words
    (lines = address >> ``shift``), and each access adds ``scale`` to its bin of its burst's
    and its function's histogram; the pass stops (st[6] = 1, st[7] = the word) at an access
    whose burst or function id is beyond ``hist`` / ``fhist``, for the caller to grow them.
    One function for both uses: numba passes arrays to a called function at a cost that halved
    the speed. Returns the state arrays.
    """
    n = data.shape[0]
    bits, live, size, pos, ntop, b = st[0], st[1], st[2], st[3], st[4], st[5]
    ntop_max = top.shape[0]
    mask = table.shape[0] - 1
    nh, nf = hist.shape[0], fhist.shape[0]
    cold = edges.shape[0] - 1
    st[6] = 0
    stop = n
    f = 0
    a = 0
    for i in range(i0, n):
        w = data[i]
        if words:
            if w >> np.uint64(63):
                # a burst marker, or (bit 62 too) an MPI call's accesses: -1, counted nowhere
                b = -1 if (w >> np.uint64(62)) == np.uint64(3) else np.int64(w & np.uint64(0x3FFFFFFFFFFFFFFF))
                continue
            f = np.int64((w >> np.uint64(FN_SHIFT)) & np.uint64(_FN_MASK))
            if b >= nh or (b >= 0 and f >= nf):
                st[6] = 1
                stop = i
                break
            line = np.int64(((w & np.uint64(_ADDR_MASK)) >> np.uint64(1)) >> np.uint64(shift))
            a = np.int64(w & np.uint64(1))
        else:
            line = np.int64(w)
        if i + _AHEAD < n:                # the slot of an access a few ahead, should it miss the top
            w2 = data[i + _AHEAD]
            if words:
                l2 = np.int64(((w2 & np.uint64(_ADDR_MASK)) >> np.uint64(1)) >> np.uint64(shift))
            else:
                l2 = np.int64(w2)
            _prefetch(table, 2 * np.int64(_mix(l2) >> np.uint64(64 - bits)))
        p = 0
        while p < ntop and top[p] != line:
            p += 1
        if p < ntop:                      # in the top: move it to the front (kept apart from the
            for q in range(p, 0, -1):     # rest, this path runs twice as fast)
                top[q] = top[q - 1]
            top[0] = line
            if words:
                if b >= 0:
                    k = lut[p]
                    hist[b, a, k] += scale
                    fhist[f, a, k] += scale
            else:
                out[i] = p
            continue
        # not in the top: below it, or a first touch
        h = np.int64(_mix(line) >> np.uint64(64 - bits))
        while table[h, 1] != _EMPTY and table[h, 0] != line:
            h = (h + 1) & mask
        t = table[h, 1]
        if t == _EMPTY:
            d = -1
            table[h, 0] = line
        else:                             # below the top: the lines that left the top after it
            blk = t // _BLOCK                 # marks at times <= t: blocks before, words, bits
            s = 0
            j = blk
            while j > 0:
                s += btree[j]
                j -= j & (-j)
            wt = t >> 6
            for q in range(blk * (_BLOCK // 64), wt):
                s += _popcount(marks[q])
            bit = np.uint64(t & 63)
            s += _popcount(marks[wt] & ((np.uint64(2) << bit) - np.uint64(1)))
            d = ntop + live - np.int64(s)
            marks[wt] &= ~(np.uint64(1) << bit)
            j = blk + 1
            while j < btree.shape[0]:
                btree[j] -= 1
                j += j & (-j)
            live -= 1
        table[h, 1] = _IN_TOP
        if ntop < ntop_max:
            ntop += 1
            p = ntop - 1
        else:                             # the least recent line of the top leaves it
            gone = top[ntop - 1]
            g = np.int64(_mix(gone) >> np.uint64(64 - bits))
            while table[g, 0] != gone:
                g = (g + 1) & mask
            table[g, 1] = pos
            marks[pos >> 6] |= np.uint64(1) << np.uint64(pos & 63)
            j = pos // _BLOCK + 1
            while j < btree.shape[0]:
                btree[j] += 1
                j += j & (-j)
            live += 1
            pos += 1
            if pos == size:
                marks, btree = _compact_time(table, live)
                size, pos = marks.shape[0] * 64, live
        if (live + ntop) * 2 > table.shape[0]:
            bits += 1
            table = _grow_table(table, bits)
            mask = table.shape[0] - 1
        for q in range(p, 0, -1):         # move to the front
            top[q] = top[q - 1]
        top[0] = line
        if words:
            if b >= 0:
                k = cold if d < 0 else lut[d] if d < lut.shape[0] else _bin_of(d * scale, edges)
                hist[b, a, k] += scale
                fhist[f, a, k] += scale
        else:
            out[i] = d
    st[0], st[1], st[2], st[3], st[4], st[5], st[7] = bits, live, size, pos, ntop, b, stop
    return table, marks, btree


_NO_HIST = np.zeros((1, 2, 1), np.float64)
_NO_LUT = np.zeros(1, np.int64)


class StackState:
    """LRU stack state carried across chunks of one access stream (see :func:`_lru_pass`)."""

    def __init__(self):
        self.top = np.zeros(TOP_LINES, np.int64)
        self.table = _new_table(1 << 10)
        self.marks = np.zeros(4096 // 64, np.uint64)
        self.btree = np.zeros(4096 // _BLOCK + 1, np.int32)
        self.st = np.array([10, 0, 4096, 0, 0, 0, 0, 0], np.int64)   # see _lru_pass

    def distances(self, lines: np.ndarray) -> np.ndarray:
        lines = np.ascontiguousarray(lines, dtype=np.int64)
        out = np.empty(lines.shape[0], np.int64)
        if lines.shape[0]:
            self.table, self.marks, self.btree = _lru_pass(
                lines.view(np.uint64), 0, False, 0, out, _NO_LUT, 1.0, _EDGES, self.top, self.table, self.marks,
                self.btree, self.st, _NO_HIST, _NO_HIST)
        return out

    def feed_words(self, words, i0, shift, lut, scale, hist, fhist) -> None:
        """Histogram the tool's words from ``i0`` on (see :func:`_lru_pass`)."""
        self.table, self.marks, self.btree = _lru_pass(
            words, i0, True, shift, _NO_LUT, lut, scale, _EDGES, self.top, self.table, self.marks, self.btree,
            self.st, hist, fhist)


def stack_distances(lines: np.ndarray) -> np.ndarray:
    """Exact LRU stack distance (in distinct lines) of each access; -1 for a first touch."""
    return StackState().distances(lines)


@numba.njit(cache=True)
def _shards_mask(lines, threshold, out):
    for i in range(lines.shape[0]):
        out[i] = _hash_top(lines[i]) < np.uint64(threshold)
    return out


def shards_filter(lines: np.ndarray, rate: float) -> np.ndarray:
    """Boolean mask of the accesses SHARDS keeps at sampling rate ``rate``."""
    lines = np.ascontiguousarray(lines, dtype=np.int64)
    return _shards_mask(lines, threshold_for(rate), np.empty(lines.shape[0], np.bool_))


@numba.njit(cache=True)
def _bin_of(d, edges):
    # edges[i] <= d < edges[i+1]; beyond the last edge: last finite bin
    lo = 0
    hi = edges.shape[0] - 1
    if d >= edges[hi]:
        return hi - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if edges[mid] <= d:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _histogram(dist, is_store, scale, edges, hist):
    cold = edges.shape[0] - 1
    w = scale
    for t in range(dist.shape[0]):
        a = 1 if is_store[t] else 0
        d = dist[t]
        if d < 0:
            hist[a, cold] += w
        else:
            hist[a, _bin_of(d * scale, edges)] += w
    return hist


def reuse_histogram(lines: np.ndarray, is_store: np.ndarray | None = None, *, sample_rate: float = 1.0) -> np.ndarray:
    """Histogram ``[2, N_REUSE_BINS]`` (loads, stores) of the stream's stack distances.

    With ``sample_rate < 1`` only the SHARDS-sampled lines are analysed and distances and
    counts are scaled by ``1/sample_rate`` (an estimate of the full histogram).
    """
    lines = np.ascontiguousarray(lines, dtype=np.int64)
    st = np.zeros(lines.shape[0], np.bool_) if is_store is None else np.ascontiguousarray(is_store, dtype=np.bool_)
    if st.shape != lines.shape:
        raise ValueError("is_store and lines differ in length")
    scale = 1.0
    if sample_rate < 1.0:
        keep = shards_filter(lines, sample_rate)
        lines, st = lines[keep], st[keep]
        scale = (1 << HASH_BITS) / threshold_for(sample_rate)
    hist = np.zeros((2, N_REUSE_BINS), np.float64)
    return _histogram(stack_distances(lines), st, scale, _EDGES, hist)


#: access words of pmac_vg.c (acc_sample): bit 0 store, bits 1-43 the address in 32-byte units,
#: bits 44-61 the id of the function making the access, bit 62 an instruction fetch; bit 63 set:
#: a burst marker (burst number in bits 0-61), or with bit 62 too (OUTSIDE_MARK) the start of an MPI
#: call's accesses, which move lines in the LRU stacks and count in no histogram (up to the next
#: burst marker)
FN_SHIFT = 44
FETCH_BIT = 62
OUTSIDE_MARK = (1 << 63) | (1 << 62)
_ADDR_MASK = (1 << FN_SHIFT) - 1
_FN_MASK = (1 << 18) - 1
#: access kinds of the histograms (pmac.memsig ACCESS_LOAD, ACCESS_STORE, ACCESS_FETCH)
N_KINDS = 3


_LUT_N = 1 << 12    # distances below this are binned by table lookup


def _bin_lut(scale: float) -> np.ndarray:
    """Bin of each sampled distance 0.._LUT_N-1 once scaled by ``scale`` (as :func:`_bin_of`)."""
    x = np.arange(_LUT_N, dtype=np.float64) * scale
    return np.minimum(np.searchsorted(_EDGES, x, side="right") - 1, _EDGES.shape[0] - 2).astype(np.int64)


class _KindStream:
    """One LRU stack over part of the tool's words (data or code) and its histograms."""

    def __init__(self, shift: int, lut: np.ndarray, scale: float):
        self.shift, self.lut, self.scale = shift, lut, scale
        self.stack = StackState()
        self.hist = np.zeros((16, 2, N_REUSE_BINS), np.float64)
        self.fhist = np.zeros((16, 2, N_REUSE_BINS), np.float64)

    def feed(self, words: np.ndarray) -> None:
        i = 0
        while True:
            self.stack.feed_words(words, i, self.shift, self.lut, self.scale, self.hist, self.fhist)
            if not self.stack.st[6]:
                return
            i = int(self.stack.st[7])
            self.hist = _grown(self.hist, int(self.stack.st[5]))
            self.fhist = _grown(self.fhist, (int(words[i]) >> FN_SHIFT) & _FN_MASK)


class BurstHistograms:
    """Per-burst and per-function load, store and instruction-fetch reuse histograms of the
    tool's access words, fed chunk by chunk.

    Words are in 32-byte units (pmac_vg.c); the LRU stack runs over the whole stream (a burst
    starts with the cache state the previous ones left; an access's distance counts every line
    touched since, whichever function touched it, in a burst or inside an MPI call between
    bursts: the library's code and data evict the program's); distances and counts are scaled by
    ``scale = 1/R``. Data (loads and stores) and code (fetches, bit 62) have a stack each: they
    meet in separate first-level caches, and the fetch histogram says what an instruction cache
    of a given size holds. The code is sampled at its own rate: ``code_scale`` (default
    ``scale``). One numba pass per chunk and stack (:func:`_lru_pass`).
    """

    def __init__(self, line_bytes: int, scale: float, code_scale: float | None = None):
        if line_bytes < 32 or line_bytes & (line_bytes - 1):
            raise ValueError(f"line size must be a power of two >= 32 bytes, got {line_bytes}")
        self.shift = int(math.log2(line_bytes // 32))
        self.scale = float(scale)
        self.code_scale = self.scale if code_scale is None else float(code_scale)
        self.data = _KindStream(self.shift, _bin_lut(self.scale), self.scale)
        self.code = _KindStream(self.shift, _bin_lut(self.code_scale), self.code_scale)

    @property
    def burst(self) -> int:
        return int(self.data.stack.st[5])

    def feed(self, words: np.ndarray) -> None:
        words = np.ascontiguousarray(words, dtype=np.uint64)
        top = words >> np.uint64(FETCH_BIT)            # 0 data, 1 fetch, 2 burst marker, 3 MPI call
        fetch = top == 1
        if fetch.any():
            self.data.feed(words[~fetch])
            self.code.feed(words[top != 0])           # fetches and the markers
        else:
            self.data.feed(words)
            self.code.stack.st[5] = self.data.stack.st[5]   # the burst it is in

    def _kinds(self, data: np.ndarray, code: np.ndarray, n: int) -> np.ndarray:
        out = np.zeros((n, N_KINDS, N_REUSE_BINS), np.float64)
        k = min(n, data.shape[0])
        out[:k, :2] = data[:k]
        k = min(n, code.shape[0])
        out[:k, 2] = code[:k, 0]
        return out

    def result(self, n_bursts: int) -> np.ndarray:
        """Histograms ``[n_bursts, 3, N_REUSE_BINS]`` (loads, stores, fetches)."""
        for h in (self.data.hist, self.code.hist):
            if h[n_bursts:].any():
                last = int(np.nonzero(h.reshape(h.shape[0], -1).any(axis=1))[0].max())
                raise ValueError(f"access words name burst {last} of {n_bursts}")
        return self._kinds(self.data.hist, self.code.hist, n_bursts)

    def function_result(self, n_functions: int) -> np.ndarray:
        """Histograms ``[n_functions, 3, N_REUSE_BINS]`` by the id of the accessing function."""
        for h in (self.data.fhist, self.code.fhist):
            if h[n_functions:].any() and n_functions <= _FN_MASK:
                raise ValueError(f"access words name a function beyond the {n_functions} the summary lists")
        return self._kinds(self.data.fhist, self.code.fhist, n_functions)


def _grown(h: np.ndarray, top: int) -> np.ndarray:
    if top < h.shape[0]:
        return h
    g = np.zeros((max(top + 1, 2 * h.shape[0]), 2, N_REUSE_BINS), np.float64)
    g[: h.shape[0]] = h
    return g


def burst_histograms(words: np.ndarray, n_bursts: int, line_bytes: int, scale: float,
                     code_scale: float | None = None) -> np.ndarray:
    """Histograms ``[n_bursts, 3, N_REUSE_BINS]`` (loads, stores, fetches) from the tool's access
    words in one go."""
    bh = BurstHistograms(line_bytes, scale, code_scale)
    bh.feed(words)
    return bh.result(n_bursts)


# ---- associativity and hierarchies ------------------------------------------------------

def set_assoc_hit_prob(distance: np.ndarray, n_sets: int, ways: int) -> np.ndarray:
    """Smith's model: P(hit | fully-associative stack distance d) in an S-set, W-way LRU cache."""
    from scipy.stats import binom

    d = np.asarray(distance, dtype=np.float64)
    if n_sets <= 1:
        return (d < ways).astype(np.float64)
    return binom.cdf(ways - 1, np.floor(np.maximum(d, 0.0)), 1.0 / n_sets)


PLACEMENTS = ("balanced", "random")


def hit_fraction_assoc(hist: np.ndarray, cache_lines: int, ways: int, *, placement: str = "balanced",
                       points_per_bin: int = 16) -> float:
    """Expected hit fraction of a histogram (one access kind) in a set-associative LRU cache.

    Distances are taken uniform within a bin (as pmac.memsig.hit_fraction). ``placement``:
    "balanced" (lines spread evenly over sets: the fully-associative answer) or "random"
    (Smith's binomial model, :func:`set_assoc_hit_prob`). ``ways >= cache_lines`` is fully
    associative under both.
    """
    hist = np.asarray(hist, dtype=np.float64)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if ways <= 0 or cache_lines <= 0:
        raise ValueError("cache_lines and ways must be positive")
    total = hist.sum()
    if total <= 0:
        return 0.0
    if placement == "balanced":
        return hit_fraction(hist, cache_lines)
    ways = min(ways, cache_lines)
    n_sets = max(1, cache_lines // ways)
    lo = REUSE_BIN_EDGES_LINES[:-1]
    hi = REUSE_BIN_EDGES_LINES[1:]
    hits = 0.0
    for b in range(COLD_BIN):
        if hist[b] == 0.0:
            continue
        width = int(hi[b] - lo[b])
        pts = np.arange(lo[b], hi[b]) if width <= points_per_bin else \
            lo[b] + (np.arange(points_per_bin) + 0.5) * (width / points_per_bin)
        hits += hist[b] * float(set_assoc_hit_prob(pts, n_sets, ways).mean())
    return hits / total


def level_fractions(hist: np.ndarray, levels: list[tuple[int, int]], *, placement: str = "balanced") -> np.ndarray:
    """Fraction of accesses served by each level and by memory (last entry).

    ``levels`` = [(cache_lines, ways), ...] smallest first, all at the histogram's line size;
    every level sees every access (an LRU stack per level, inclusive), so level L serves
    ``P_L(hit) - P_{L-1}(hit)``.
    """
    cum = [0.0]
    for lines, ways in levels:
        cum.append(max(cum[-1], hit_fraction_assoc(hist, lines, ways, placement=placement)))
    cum.append(1.0)
    return np.diff(np.asarray(cum))


@numba.njit(cache=True)
def _simulate_lru(lines, n_sets, ways, hits):
    tags = np.full((n_sets, ways), -1, np.int64)
    age = np.zeros((n_sets, ways), np.int64)
    for t in range(lines.shape[0]):
        ln = lines[t]
        s = ln % n_sets
        victim = 0
        hit = False
        for w in range(ways):
            if tags[s, w] == ln:
                age[s, w] = t + 1
                hit = True
                break
            if age[s, w] < age[s, victim]:
                victim = w
        if not hit:
            tags[s, victim] = ln
            age[s, victim] = t + 1
        hits[t] = hit
    return hits


def simulate_lru(lines: np.ndarray, cache_lines: int, ways: int) -> np.ndarray:
    """Direct simulation of a set-associative LRU cache (set = line mod n_sets): hit per access."""
    lines = np.ascontiguousarray(lines, dtype=np.int64)
    ways = min(ways, cache_lines)
    n_sets = max(1, cache_lines // ways)
    return _simulate_lru(lines, n_sets, ways, np.empty(lines.shape[0], np.bool_))

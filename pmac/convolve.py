"""The convolver: the compute time of every burst of a memory signature on a machine profile.

A burst (pmac.memsig ``bursts`` row) says what the code does; a profile says how fast the
machine does it. Per burst ``b`` and machine ``p``:

**Memory time.** For each cache level ``L`` (smallest first) the fraction of accesses whose
LRU stack distance is below the level's *cumulative capacity* ``C_L`` (in lines of the
level's line size) hits at or above ``L``::

    h_L = F_b(C_L)             F_b = cumulative reuse-distance distribution of the burst
    C_L = share_L              (inclusive level: it holds a copy of everything above it)
    C_L = C_{L-1} + share_L    (non-inclusive/victim level: it adds its capacity)
    share_L = size_bytes / min(shared_by_cores, active cores) / line_bytes

``F_b`` is read off the fixed log bins of pmac.memsig with distances uniform inside a bin,
exactly as :func:`pmac.memsig.hit_fraction` does. With ``soft_capacity`` (off by default;
``pmac predict --capacity curve``) a level's capacity is a distribution read off the profile's
load curve and ``h_L`` the mean of ``F_b`` over its quantiles (pmac.capacity, which says why it
is off). Level ``L`` serves ``h_L - h_{L-1}`` of
the accesses, memory serves ``1 - h_last``. Below the first level, what moves is *lines*: an
access served by level ``L > 1`` (or memory) brings a whole line of ``line_L`` bytes, so the
traffic from it is ``n_L = accesses * (h_L - h_{L-1}) * line_L`` bytes, priced at the level's
plateau bandwidth; the first level serves what is left of the burst's bytes::

    t_load = sum_{L>1, memory} n_L / bw_load_L + max(load_bytes - sum n_L, 0) / bw_load_1

(stores alike with their own histogram, counts and ``store`` plateaus). Why lines: a unit-stride
sweep over DRAM has 7 of 8 accesses at stack distance 0 (same 64 B line) and 1 in 8 missing;
pricing accesses, not lines, charged only 1/8 of its bytes to memory and predicted the shipped
stream_mpi case at DRAM size 2x too fast. With lines its cost is ``load_bytes / bw_mem``,
exactly the probe's measurement of the same pattern. It has no free parameter, reproduces every
plateau of the unit-stride curve, and is linear in the histogram. What it does not capture:
random single-word access out of a far level is latency-bound (the probe's ``load_random``
plateau), and costs more than a line at the unit-stride rate.
Plateaus are ``bw_*_L = min(bw_1core, bw_allcores / active_cores)`` (``load_unit`` and ``store``
of the profile). Memory's loads and stores go together: where the profile has memory's ``copy``
plateau (one array read, another written, bytes counted both ways), the lines a burst moves both
ways pair off and go at it, the rest at the one-way plateaus::

    t_mem = 2 * min(n_load, n_store) / bw_copy + (n_load - min) / bw_load + (n_store - min) / bw_store

Why: one stream of loads keeps fewer lines in flight than DRAM can serve, and a stream of stores
pays a read for ownership and a write-back; together they use more of it. A STREAM triad from
DRAM (two loads and a store an element) ran 2.1 ns an element on a Cascade Lake (28 Nov 2026)
where the one-way plateaus say 2.36 and the pairing 2.14; stream_mpi-n2-2000000 went from +11.3
and +19.0 % to +1.4 and +5.8 % in that day's two runs with the FMA kernel (``bench/accuracy
--measured F --machine P --traces D``, their own profiles), +21.3 to +7.9 % against the shipped
profile. On the Zen 4's shipped profile over ten of its runs of 28 Nov (the EPYC's host is gone, so
``--measured`` again): its mean signed error +7.2 -> -3.8 %, the runs' mean absolute error 8.38 ->
8.03 %, every case within 15 % in 6 runs instead of 4 (66 of 80 cases instead of 67: the host's
slow runs, already short, a point shorter). Pairing at the cache levels too was tried and left
out: cg_mpi4py-n2-200000, which sweeps its L2 and L3, went 1-2 points further short on both cores
(bench/results/README.md). Why this rather than PMaC's stretched exponential fitted to the bandwidth curve:
see above (``bench/convolve --mapping`` compares both on the probe curve).

**Compute time.** ``t_flop = (flop_scalar / flop_per_s_scalar + flop_simd / flop_per_s_simd)
* slowdown(dep_distance_mean)`` where the slowdown is ``max(dependency_flop_per_s) /
dependency_flop_per_s`` interpolated (clamped) at the burst's mean def-use distance -- only
with ``dependency=True``, off by default: the signature's def-use distance is measured to the
nearest writer *inside* a loop iteration, and chains inside an iteration overlap across
iterations on an out-of-order core, while the dependency probe's chains are loop-carried. The
probe kernels show it: ``flop_scalar`` (8 dependent multiply-adds per element, def-use distance
about 1) runs at the full scalar rate, not at the distance-1 rate of the dependency probe (6x
lower on devbox). With the slowdown on, every shipped example was over-predicted 2-9x
(``bench/accuracy --dependency``). Until the tracer separates loop-carried recurrences, the
dependency probe is kept in the profile but not applied. Branches: ``branch_cost_s(branch_miss_frac)``
interpolated on the branch probe; its value at no miss, ``c0``, is the loop work a predicted branch
comes with, the rest a misprediction's stall.
The scalar share of the flop follows from the instruction counts by width (lanes of doubles).
Divides and square roots (the burst's ``fp_divsqrt`` operations, part of its flop) run on a
divider that is not fully pipelined, beside the other arithmetic: where the profile has the
divider's rate (``divsqrt_per_s``, probes/compute.py) its time ``t_div = divsqrt / divsqrt_per_s``
runs beside the other flop, priced as above, and the loop work (``t_compute`` below). Why: nbody
(one divide and one square root per interaction) runs at the divider's rate, 1.6x slower than
its flop count at the probed flop rate says. Vector divides are priced at the scalar rate (no
packed-divide rate is probed: numba and gcc without ``-ffast-math`` keep these divides scalar).

**The scalar rate.** ``flop_per_s_scalar`` above is the profile's ``ComputeModel.scalar_rate``:
the ``flop_independent`` kernel's rate of independent scalar work where the probe ran it (since 28
Nov 2026), else the ``flop_scalar`` kernel's. That kernel's 16-deep chain an element holds a core
to what its scheduler can keep in flight: a Cascade Lake's to 1.4 flop a cycle where independent
work ran at 2, which priced nbody's and stencil2d-n2-128's bursts 20-25 % dear there
(docs/accuracy.md); chains that cross iterations are priced apart (below).

**Fused multiply-adds.** pmac_vg counts an FMA as one instruction of two flop, so a burst's scalar
flop beyond its scalar FP instructions are its FMAs (``_flop_split``). Where the profile has the
``flop_fma`` kernel's rate (profile schema 17, ``ComputeModel.fma_op_s``: twelve independent FMAs
an element) an FMA is priced at it and the burst's other scalar flop at the scalar rate; without it,
as two flop at the scalar rate, as before. Why: a compiler that contracts (gcc -O2 with FMA in the
ISA: the C examples) turns a multiply and an add into one operation on the port an add takes. On a
Cascade Lake (28 Nov 2026) the kernel ran 6.15 G FMA/s, as many as ``flop_independent``'s
operations, so two flop at the scalar rate priced an FMA twice over and stream_mpi-n2-20000's L2
triad (an FMA, two loads, a store and the loop's branch an element) 30 % dear. What it does not
capture: a core with more adders than FMA units (Zen 4: two of each) runs a mix of the two faster
than the sum of their prices; SIMD FMAs are in ``flop_per_s_simd`` already (its kernel contracts).

**Busy neighbours.** Every compute rate above is one core's, the other cores idle. A profile whose
probe also ran its kernels on every core at once (profile schema 19, ``ComputeModel.all_cores_*``:
probes/compute.py ``all:KERNEL``) prices a burst of a job that keeps ``a`` of the node's cores busy
at those rates: each kernel's time a core slowed by its measured ratio, linearly between one core
and the ``all_cores_n`` the probe kept busy (:func:`compute_when_busy`, which says which rate
follows which kernel). Why: a lower all-core clock (bare metal), hyperthreads sharing one core's
ports, a hypervisor that cannot run every vCPU at once: the memory plateaus have their all-cores
side for the same reason.

**Loop-carried chains.** A burst's ``fp_recurrence`` (pmac_vg: FP operations on dependency
chains carried from one loop iteration to the next, e.g. the add of ``s += a[i] * b[i]``
compiled without reassociation) cannot overlap with each other on any core: the flop time is
at least the chain's latency: ``t_chain = (fp_recurrence - fp_recurrence_mul) * chain_add_s +
fp_recurrence_mul * chain_mul_s``, the adds and the multiply-class operations (multiplies, FMAs,
divides, square roots; pmac_vg counts them on the chain, signature version 7) each at the latency
the compute probe's ``chain`` kernels measure (profile schema 9). The loop's other work, its flop
at the throughput rates and its predicted branches' loop work (``branches * c0``, below), runs in
the chain's shadow: ``t_other = max(t_flop + branches * c0, t_chain)``. Until 27 Nov 2026 only the
flop was in the shadow (``max(t_flop, t_chain) + branches * c0``), which prices the loop work twice
where the chain probe's own loop hid it already: on the EPYC's two accuracy runs of that day
(``python bench/accuracy --measured FILE --machine DIR/epyc-vm.yaml --traces DIR/traces``)
stencil2d, whose ``local += d * d`` chain bounds its loop, went from +18.4 and +15.0 % to +4.5 and
-1.6 %, the mean absolute error from 14.1 to 11.0 % (bench/results/README.md). Why two prices: an add's latency
and an FMA's differ by core (``pmac show machines/xeon-vm.yaml``: 0.67 ns an add, 1.35 ns a
multiply-add, against 1.18 ns an operation of the dependency probe's chain; Zen 3: 3 and 4 cycles), and an application's chains are one or the
other: cg_mpi4py's numba dot products add (no contraction without fastmath), stencil2d's
``local += d * d`` is an FMA (gcc contracts at -O2). A signature without the split (before version
7), or a profile without the chain probe, prices every chain operation at ``t_chain_op = 1 /
dependency_flop_per_s`` at the dependency probe's shortest distance (a chain that alternates a
multiply and an add: the mean of the two latencies). Why chains at all: cg_mpi4py's dot products
(numba, no fastmath) ran 2x slower than the flop count at the throughput rate says.
Signatures before version 3 (-1, not counted) and profiles without the dependency probe skip it.
**Instruction fetch.** A burst's ``fetches`` (pmac_vg: entries into a 32-byte chunk of code) have
their own reuse histogram (access kind 2, signature version 6); those beyond the profile's L1
instruction cache (``node.fetch``: its size, fully associative like the data levels) miss, each
at the fetch probe's ``miss_s`` (probes/fetch.py: code jumping in random order, a footprint of
4 x L1i against one of L1i / 2): ``t_fetch = misses(C_L1i) * miss_s``. A miss stalls the front
end as a mispredicted branch does, so it adds to the compute side. Why: cg_mpi4py-n2-3000's
interpreter-bound bursts run 64 k instructions and 18 k fetches an iteration through code that a
32 KiB cache does not hold and a 64 KiB one does (its fetch histogram). ``misses(C)`` is the
*count* of sampled fetches at distance >= C, scaled by 1/R (SHARDS' estimator, unbiased; code is
sampled at R = 1/8 by default, denser than data, to cut the estimator's spread: pmac_vg.c), kept
in ``fetch_cum`` as ``1 - misses / fetches``; a burst with no sampled fetch has none. Not the
share of the sample times the fetches, as for data: a burst's code is a few hot 256-byte blocks,
and when the hot loop's block is not sampled the share is that of its entry and exit code (after
the MPI accesses entered the stacks, stencil2d-n2-128's bursts borrowed an 11 % miss share that
way, +8.7 points on its prediction). Associativity: callgrind's 8-way and fully associative 32 KiB L1i
count 2,427 and 2,473 misses an iteration in those bursts (bench/frontend_check, --i1-ways), so
the cache is taken fully associative. What it does not capture: misses behind mispredicted
indirect jumps, which cost more than the probe's predictable direct ones. Signatures before
version 6 and profiles without ``node.fetch`` skip it.
``t_compute = max(t_div, t_other) + divider_beta * min(t_div, t_other) + branches *
(branch_cost_s(miss) - c0) + t_fetch`` with ``t_other = max(t_flop' + branches * c0, t_chain)``,
``t_div`` the divider's time and ``t_flop'`` the other flop's:
a predicted branch and the loop work around it run beside the divider as the other flop does,
mispredictions and fetch misses stall everything. Why: the divider probe's own kernel (per element
two divider operations, a multiply, an add and a predicted branch) was priced one predicted branch
dearer than the probe measured it with the sum ``max(t_div, t_flop') + branches * cost`` (+15 % on
the Xeon of 26 Nov), and so was nbody; on the day's four accuracy runs (``bench/accuracy --measured
FILE --machine DIR/xeon-vm.yaml``) nbody moved from +12..+28 % to -13..+16 %, the mean absolute
error from 10.1 / 12.1 / 8.9 / 9.6 % to 10.0 / 8.9 / 8.0 / 6.8 %. Without divides it is the sum it
was. ``divider_beta`` (profile schema 10, ``node.compute.divider_beta``; 0 for older profiles) is
how far the two sides fail to overlap, measured by the compute probe's ``divpar`` kernels (the
divider kernel's work beside 2 to 12 independent multiply-adds an element, each into its own
accumulator; ``divmix``, the terms summed in order, before 29 Nov 2026; pmac.probe.divider_beta):
a core whose divider shares issue ports with the multipliers would run such a mix above the max.
On the Xeon VM (26 Nov 2026) three probes measured 0: the kernels ran at the divider's time up to 8 terms
and below their other work's price at 12 (independent scalar flop outrun the flop_scalar probe's
rate, whose 8-step chains are partly latency-bound), so nbody's -8..-14 % in that day's accuracy
runs is not this. On the Cascade Lake VM (29 Nov 2026, ``python bench/divider_overlap``: the probe's
kernels and nbody in alternation on one core; bench/results/divider_overlap-clx-vm-2026-11-29T0213.txt) in the six
rounds where the host held still (2-5, 10, 11) ``divmix`` gave 0.12-0.15 and ``divpar`` 0.20-0.22,
and nbody's own loop needed 0.19-0.24: with ``divmix``'s beta its price per interaction was
-3.5..-6.6 % off, with ``divpar``'s -2.0..+1.4 %; hence the probe's form since (chosen on nbody).

**Overlap.** ``t = max(t_mem, t_compute) + beta * min(t_mem, t_compute)``: ``beta = 0`` is
perfect overlap, ``beta = 1`` none. ``beta`` belongs to the machine (pmac.overlap calibrates it).

**4 KiB aliasing.** A burst's ``alias_loads`` (pmac_vg: loads whose bytes share their low 12
address bits with one of the last 8 stores', on another page; signature version 9) each stall
the aliasing probe's price (``node.alias``, probes/alias.py, profile schema 18), added after the
overlap: ``t += alias_loads * (sum_L w_L * a_L + (1 - sum_L w_L) * a_1)``. ``a_L`` is the probe's
stall an aliased load of its loop (``v[i] = 0.5 * u[i] + 1.0``, ``v[i - 1]`` at ``u[i]``'s 4 KiB
phase) with its arrays in level L (memory last), on one core, or on all cores at once where more
than one rank is busy on the node (``MachineCoeffs.alias_stall_s``); ``w_L`` is the share of the
burst's store bytes whose lines level L (or memory) brings, as the convolver counts lines above
(capped: the shares sum to at most 1), the rest at L1's price. Why the stores' level: a load that
matches a store in the store buffer waits for it, and how long stores sit there depends on where
their lines come from. On a Cascade Lake VM (28 Nov 2026, the ten passes of ``pmac probe
--add-alias machines/clx-vm.yaml --rounds 10 --gap 50``, one core) the same loop lost 0.11-0.26 ns
an aliased load with its arrays in L3 and 0.003-0.23 ns in L1, more in L3 in every pass, though in
both most of its loads hit L1. So the probe's loop is priced at what it measured (``w_L = 1`` at its
own level), and stencil2d's update loop, whose stores stream from L3 and two of whose five loads
alias a store one or two back, at the L3 figure. Pricing each aliased load by the level that serves
*it* (the loads' hit fractions, with the probe's L1 hits taken apart) was tried first, and chosen
against after seeing what each did to stencil2d-n2-1024 on the 17:16 run of that day: -26 % to -23 %
that way, to -6 % this way (``bench/accuracy --measured``, bench/results/README.md); the fresh runs
since are the test of it. Why after the overlap: the probe loop's stall adds to a memory-bound
loop's time, and stencil2d's chain-bound loop paid it too (bench/stencil_kernel: the arrays at one
4 KiB phase cost 9-24 % beside the same loop 32 doubles apart). What it does not capture: how far
back the store is (pmac_vg counts up to 8; the probe measures 1; bench/alias_depth saw the cost fade
by about 8), and a shared host's state: the L3 stall ranged 0.16-0.32 ns with both cores busy over
those ten passes, 0.72 in a pass ten minutes before, so ``--rounds K --gap S`` pools K passes over a
span. Signatures before version 9 (-1) and profiles without ``node.alias`` have no term.

The hot loop is one numba function over plain arrays: chunks of bursts in parallel, machines
inside a chunk, and per machine simple loops over the chunk's bursts (contiguous, vectorised).
This module never touches files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numba
import numpy as np
import pandas as pd

from .capacity import capacity_ratios, is_data_level
from .errors import MissingSectionError
from .memsig import (ACCESS_FETCH, ACCESS_LOAD, ACCESS_STORE, COLD_BIN, N_REUSE_BINS,
                     REUSE_BIN_EDGES_LINES)
from .profile import AliasModel, ComputeModel, MachineProfile

#: overlap model kinds the convolver knows
OVERLAP_KINDS = ("max_beta_min",)
#: beta used when a profile has no calibrated overlap model (perfect overlap)
DEFAULT_BETA = 0.0
#: largest capacity (lines) a cumulative histogram is kept for: 2**27 lines = 8 GiB at 64 B
MAX_CAPACITY_LINES = 2 ** 27

_EDGES = REUSE_BIN_EDGES_LINES.astype(np.float64)


def edge_position(capacity_lines: float) -> tuple[int, float]:
    """(i, f): F(C) = cum[i] + f * (cum[i+1] - cum[i]) for the bin ``i`` that holds C."""
    i = int(np.searchsorted(_EDGES, capacity_lines, side="right") - 1)
    i = min(max(i, 0), COLD_BIN - 1)
    f = (capacity_lines - _EDGES[i]) / (_EDGES[i + 1] - _EDGES[i])
    return i, float(min(max(f, 0.0), 1.0))


#: number of cumulative columns kept: enough for any capacity up to MAX_CAPACITY_LINES
N_CUM = edge_position(MAX_CAPACITY_LINES)[0] + 2


# ---------------------------------------------------------------- bursts

@dataclass(frozen=True, kw_only=True)
class BurstArrays:
    """The bursts of a memory signature as plain arrays (one entry per burst).

    ``cum[l, a, b, k]`` is the fraction of accesses of kind ``a`` (0 loads, 1 stores) of burst
    ``b`` at line size ``line_bytes[l]`` with stack distance below ``REUSE_BIN_EDGES_LINES[k]``.
    """

    rank: np.ndarray
    seq: np.ndarray
    load_bytes: np.ndarray
    store_bytes: np.ndarray
    #: access counts (loads and stores); where a source gives bytes only, bytes / 8
    loads: np.ndarray
    stores: np.ndarray
    flop_scalar: np.ndarray
    flop_simd: np.ndarray
    branches: np.ndarray
    dep_distance_mean: np.ndarray
    branch_miss_frac: np.ndarray
    line_bytes: tuple[int, ...]
    cum: np.ndarray
    #: bursts whose histogram was empty and borrowed the rank's (or the run's) aggregate
    n_borrowed_hist: int = 0
    #: (line sizes x 3 x bursts): which of the bursts' own sampled histograms (line size, loads /
    #: stores / fetches, burst) were empty, borrowed or not (None: not recorded)
    unsampled: np.ndarray | None = None
    #: divide and square-root operations (part of the flop); None: not recorded (priced as flop)
    divsqrt: np.ndarray | None = None
    #: FP operations on loop-carried dependency chains; None: not recorded
    recurrence: np.ndarray | None = None
    #: of which multiplies, FMAs, divides and square roots; None: not recorded (one price for all)
    recurrence_mul: np.ndarray | None = None
    #: scalar fused multiply-adds (two of ``flop_scalar`` each); None: not told apart (priced as flop)
    fma_scalar: np.ndarray | None = None
    #: instruction fetches (entries into a 32-byte chunk of code); None: not recorded
    fetches: np.ndarray | None = None
    #: ``fetch_cum[l, b, k]``: ``1 - misses / fetches`` at the capacity points of ``cum``, the misses
    #: counted from the sampled fetches (None with ``fetches``)
    fetch_cum: np.ndarray | None = None
    #: loads that 4 KiB-alias one of the last stores (pmac_vg, signature version 9); None: not counted
    alias_loads: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.rank)
        for name in ("seq", "load_bytes", "store_bytes", "loads", "stores", "flop_scalar", "flop_simd", "branches",
                     "dep_distance_mean", "branch_miss_frac") + (("divsqrt",) if self.divsqrt is not None else ()) + (
                         ("recurrence",) if self.recurrence is not None else ()) + (
                         ("recurrence_mul",) if self.recurrence_mul is not None else ()) + (
                         ("fma_scalar",) if self.fma_scalar is not None else ()) + (
                         ("fetches",) if self.fetches is not None else ()) + (
                         ("alias_loads",) if self.alias_loads is not None else ()):
            if len(getattr(self, name)) != n:
                raise ValueError(f"BurstArrays.{name} has {len(getattr(self, name))} entries, expected {n}")
        if self.cum.ndim != 4 or self.cum.shape[:3] != (len(self.line_bytes), 2, n):
            raise ValueError(f"BurstArrays.cum has shape {self.cum.shape}, expected "
                             f"({len(self.line_bytes)}, 2, {n}, K)")
        if (self.fetches is None) != (self.fetch_cum is None) or (
                self.fetch_cum is not None and self.fetch_cum.shape != (len(self.line_bytes), n, self.cum.shape[3])):
            raise ValueError("BurstArrays: fetches and fetch_cum go together, fetch_cum shaped as cum without "
                             "the access axis")

    @property
    def n_bursts(self) -> int:
        return len(self.rank)


def _flop_split(b: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scalar and SIMD flop of each burst (``flop`` split by lanes (doubles) per width) and the
    scalar fused multiply-adds among them: pmac_vg counts an FMA lane two flop and any other
    arithmetic lane one, so the flop beyond the lanes are FMAs (shared between the widths as the
    flop are). A burst with flop but no lanes counted has none told apart."""
    flop = b["flop"].to_numpy(np.float64)
    lanes_s = b["fp_scalar"].to_numpy(np.float64)
    lanes_v = (2 * b["fp_128"].to_numpy(np.float64) + 4 * b["fp_256"].to_numpy(np.float64)
               + 8 * b["fp_512"].to_numpy(np.float64))
    tot = lanes_s + lanes_v
    share_s = np.divide(lanes_s, tot, out=np.ones_like(tot), where=tot > 0)
    flop_s = flop * share_s
    fma_s = np.where(tot > 0, np.clip(flop_s - lanes_s, 0.0, flop_s / 2), 0.0)
    return flop_s, flop * (1.0 - share_s), fma_s


def burst_arrays(memory: dict[str, pd.DataFrame], *, line_sizes: Sequence[int] | None = None,
                 dtype=np.float32) -> BurstArrays:
    """Columnar bursts and their cumulative reuse histograms from the memory tables.

    Bursts whose (sampled) load or store histogram is empty at a line size borrow the aggregate
    histogram of their rank (else of the whole run) so that a sampled-out short burst does not look
    all-DRAM; the count is kept in ``n_borrowed_hist``.
    """
    bursts = memory.get("bursts")
    if bursts is None or len(bursts) == 0:
        raise MissingSectionError("memory signature", "bursts", needed_by="convolve")
    reuse = memory.get("reuse")
    bursts = bursts.reset_index(drop=True)
    n = len(bursts)
    if line_sizes is None:
        present = sorted(set(reuse["line_bytes"].unique().tolist())) if reuse is not None and len(reuse) else []
        line_sizes = tuple(int(x) for x in present) or (64,)
    line_sizes = tuple(int(x) for x in line_sizes)
    kinds = (ACCESS_LOAD, ACCESS_STORE, ACCESS_FETCH)
    hist = np.zeros((len(line_sizes), len(kinds), n, N_REUSE_BINS), dtype=np.float64)
    if reuse is not None and len(reuse):
        r = reuse[(reuse["seq"] >= 0) & (reuse["function"] == "")]
        key = pd.DataFrame({"rank": bursts["rank"].to_numpy(), "seq": bursts["seq"].to_numpy(),
                            "_row": np.arange(n)})
        r = r.merge(key, on=["rank", "seq"], how="inner")
        li = np.searchsorted(np.array(line_sizes), r["line_bytes"].to_numpy())
        ok = (li < len(line_sizes))
        ok[ok] &= np.array(line_sizes)[li[ok]] == r["line_bytes"].to_numpy()[ok]
        # np.add.at by flat index (bincount: the same sums, in the same order, ~10x faster)
        flat = np.ravel_multi_index((li[ok], r["access"].to_numpy()[ok].astype(np.int64), r["_row"].to_numpy()[ok],
                                     r["bin"].to_numpy()[ok].astype(np.int64)), hist.shape)
        hist += np.bincount(flat, weights=r["count"].to_numpy(np.float64)[ok], minlength=hist.size).reshape(hist.shape)
    totals = hist.sum(axis=3)
    empty = totals <= 0
    borrowed = np.zeros(n, dtype=bool)
    unsampled = empty.copy()
    if empty.any():
        ranks = bursts["rank"].to_numpy()
        for l in range(len(line_sizes)):
            for a in (ACCESS_LOAD, ACCESS_STORE):   # not fetches: their misses are counted (below)
                e = empty[l, a]
                if not e.any():
                    continue
                whole = hist[l, a].sum(axis=0)
                for rk in np.unique(ranks[e]):
                    rows = ranks == rk
                    agg = hist[l, a, rows].sum(axis=0)
                    if agg.sum() <= 0:
                        agg = whole
                    if agg.sum() > 0:
                        hist[l, a, e & rows] = agg
                        borrowed |= e & rows
        totals = hist.sum(axis=3)
    c = np.zeros(hist.shape[:3] + (N_CUM,))   # sampled accesses below each capacity point
    c[..., 1:] = np.cumsum(hist[..., :N_CUM - 1], axis=3)
    data, tot = c[:, :2], totals[:, :2, :, None]
    cum = np.where(tot > 0, data / np.where(tot > 0, tot, 1.0), 0.0).astype(dtype)
    fetches = fetch_cum = None   # not counted before signature version 6
    if "fetches" in bursts.columns and (bursts["fetches"].to_numpy() >= 0).all():
        fetches = bursts["fetches"].to_numpy(np.float64)
        # misses counted, not a share: the sampled (scaled) fetches beyond a capacity estimate the
        # misses without bias, a share of the sample does not when a burst's few hot 256-byte
        # blocks of code go unsampled (module docstring); a burst with no sampled fetch has none,
        # one with no fetches nothing to miss
        counted = fetches[None, :, None] > 0
        misses = totals[:, ACCESS_FETCH, :, None] - c[:, ACCESS_FETCH]
        fetch_cum = np.where(counted, np.clip(1.0 - misses / np.where(counted, fetches[None, :, None], 1.0),
                                              0.0, 1.0), 1.0).astype(dtype)
    flop_s, flop_v, fma_s = _flop_split(bursts)
    dep = np.nan_to_num(bursts["dep_distance_mean"].to_numpy(np.float64), nan=0.0)
    bmiss = np.nan_to_num(bursts["branch_miss_frac"].to_numpy(np.float64), nan=0.0)
    lb, sb = bursts["load_bytes"].to_numpy(np.float64), bursts["store_bytes"].to_numpy(np.float64)
    loads, stores = bursts["loads"].to_numpy(np.float64), bursts["stores"].to_numpy(np.float64)
    loads = np.where(loads > 0, loads, lb / 8.0)
    stores = np.where(stores > 0, stores, sb / 8.0)
    divsqrt = None   # not counted (signatures before version 2 hold -1): divides priced as flop
    if "fp_divsqrt" in bursts.columns and (bursts["fp_divsqrt"].to_numpy() >= 0).all():
        divsqrt = bursts["fp_divsqrt"].to_numpy(np.float64)
    recurrence = None  # not counted before signature version 3
    if "fp_recurrence" in bursts.columns and (bursts["fp_recurrence"].to_numpy() >= 0).all():
        recurrence = bursts["fp_recurrence"].to_numpy(np.float64)
    recurrence_mul = None  # not counted before signature version 7
    if (recurrence is not None and "fp_recurrence_mul" in bursts.columns
            and (bursts["fp_recurrence_mul"].to_numpy() >= 0).all()):
        recurrence_mul = np.minimum(bursts["fp_recurrence_mul"].to_numpy(np.float64), recurrence)
    alias = None   # not counted before signature version 9 (-1)
    if "alias_loads" in bursts.columns and (bursts["alias_loads"].to_numpy() >= 0).all():
        alias = np.minimum(bursts["alias_loads"].to_numpy(np.float64), loads)
    return BurstArrays(
        rank=bursts["rank"].to_numpy(np.int32), seq=bursts["seq"].to_numpy(np.int64),
        load_bytes=lb, store_bytes=sb, loads=loads, stores=stores,
        flop_scalar=flop_s, flop_simd=flop_v, branches=bursts["branches"].to_numpy(np.float64),
        dep_distance_mean=dep, branch_miss_frac=bmiss, line_bytes=line_sizes, cum=cum,
        n_borrowed_hist=int(borrowed.sum()), unsampled=unsampled, divsqrt=divsqrt, recurrence=recurrence,
        recurrence_mul=recurrence_mul, fma_scalar=fma_s, fetches=fetches, fetch_cum=fetch_cum, alias_loads=alias)


def event_bursts(ba: BurstArrays, events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the index of its burst in ``ba`` (keyed by rank and seq; -1 when it has none),
    and whether its rank had no memory trace: such a rank takes the bursts of traced rank
    ``traced[rank % n_traced]`` (a signature traced on some ranks only, ``pmac trace --ranks``)."""
    ranks = events["rank"].to_numpy(np.int64)
    traced = np.unique(ba.rank.astype(np.int64))
    src = ranks.copy()
    untraced = ~np.isin(ranks, traced)
    if len(traced):
        src[untraced] = traced[ranks[untraced] % len(traced)]
    key_b = pd.MultiIndex.from_arrays([ba.rank.astype(np.int64), ba.seq.astype(np.int64)])
    idx = key_b.get_indexer(pd.MultiIndex.from_arrays([src, events["seq"].to_numpy(np.int64)]))
    return idx, untraced


# ---------------------------------------------------------------- machines

@dataclass(frozen=True, kw_only=True)
class MachineCoeffs:
    """What the convolver needs of one machine, as plain numbers (see module docstring)."""

    name: str
    level_names: tuple[str, ...]
    level_line_bytes: tuple[int, ...]
    #: nominal cumulative capacities (the OS's sizes)
    capacity_lines: tuple[float, ...]
    #: per level then memory (len = levels + 1), bytes/s per core
    load_bandwidth_bytes_per_s: tuple[float, ...]
    store_bandwidth_bytes_per_s: tuple[float, ...]
    flop_per_s_scalar: float
    flop_per_s_simd: float
    dep_distance: tuple[float, ...] = ()
    dep_slowdown_ratio: tuple[float, ...] = ()
    branch_miss_frac: tuple[float, ...] = ()
    branch_cost_s: tuple[float, ...] = ()
    #: memory's copy plateau (bytes/s a core, both ways): lines a burst moves both ways go at it;
    #: None: loads and stores at their own plateaus
    copy_bandwidth_bytes_per_s: float | None = None
    #: seconds a scalar fused multiply-add is priced at; None: two flop at ``flop_per_s_scalar``
    fma_op_s: float | None = None
    #: divide/square-root operations per second; None: divides priced as flop
    divsqrt_per_s: float | None = None
    #: seconds per FP operation of one dependent chain; None: chains not priced
    chain_op_s: float | None = None
    #: seconds per add and per multiply-class operation of a chain (the chain probe); None: not
    #: probed, such operations at ``chain_op_s``
    chain_add_s: float | None = None
    chain_mul_s: float | None = None
    #: divider against the other work: ``max(t_div, t_other) + divider_beta * min(t_div, t_other)``
    divider_beta: float = 0.0
    #: the L1 instruction cache in lines of ``l1i_line_bytes``, and the price of a miss in it;
    #: None: no instruction-cache term (the profile has no ``node.fetch``)
    l1i_capacity_lines: float = 0.0
    l1i_line_bytes: int = 64
    fetch_miss_s: float | None = None
    #: the stall of a 4 KiB-aliased load in a loop whose stores stream from each level, then from
    #: memory (len = levels + 1; node.alias, probes/alias.py, at the active cores); empty: not priced
    alias_stall_s: tuple[float, ...] = ()
    beta: float = DEFAULT_BETA
    active_cores: int = 1
    #: per level, the capacities (lines, cumulative) of its equally weighted copies read off the
    #: load curve (pmac.capacity); an empty tuple, or none at all: the nominal capacity
    capacity_quantile_lines: tuple[tuple[float, ...], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        n = len(self.level_names)
        if not (len(self.level_line_bytes) == len(self.capacity_lines) == n):
            raise ValueError("MachineCoeffs: per-level tuples differ in length")
        q = self.capacity_quantile_lines
        if q and (len(q) != n or not all(c > 0 for lev in q for c in lev)):
            raise ValueError("MachineCoeffs: capacity_quantile_lines needs one tuple of positive capacities a level")
        if len(self.load_bandwidth_bytes_per_s) != n + 1 or len(self.store_bandwidth_bytes_per_s) != n + 1:
            raise ValueError("MachineCoeffs: bandwidths need one entry per level plus memory")
        if not all(b > 0 and np.isfinite(b) for b in self.load_bandwidth_bytes_per_s + self.store_bandwidth_bytes_per_s):
            raise ValueError("MachineCoeffs: bandwidths must be positive")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"MachineCoeffs: beta must be in [0, 1], got {self.beta}")
        if self.alias_stall_s and (len(self.alias_stall_s) != n + 1 or min(self.alias_stall_s) < 0):
            raise ValueError("MachineCoeffs: alias_stall_s needs one stall >= 0 per level plus memory")

    def quantile_lines(self, level: int) -> tuple[float, ...]:
        """The capacities of level ``level``'s copies (one, the nominal, without a distribution)."""
        q = self.capacity_quantile_lines
        return (q[level] if q and q[level] else ()) or (self.capacity_lines[level],)


_LOAD_KINDS = ("load_unit", "copy", "load_random")
_STORE_KINDS = ("store", "copy", "load_unit")


def _plateau(level, kinds, active: int, what: str, machine: str) -> tuple[float, str | None]:
    one = level.bandwidth_1core_bytes_per_s
    allc = level.bandwidth_allcores_bytes_per_s
    for k in kinds:
        if k in one or k in allc:
            b1 = one.get(k)
            ba = allc.get(k)
            if b1 is None:
                bw = ba / max(active, 1)
            elif ba is None or active <= 1:
                bw = b1
            else:
                bw = min(b1, ba / active)
            note = None if k == kinds[0] else f"{what}: no '{kinds[0]}' bandwidth, used '{k}'"
            return float(bw), note
    raise MissingSectionError(f"machine '{machine}'", f"{what}.bandwidth_1core_bytes_per_s.{kinds[0]}",
                              needed_by="convolve")


#: apply the dependency probe's slowdown by default? (no: see the module docstring)
DEPENDENCY_SLOWDOWN = False
#: capacities as distributions read off the load curves (pmac.capacity) by default? (no: on the
#: Xeon VM it helped pooled profiles and hurt single probes, see pmac.capacity)
SOFT_CAPACITY = False


def alias_stalls(model: AliasModel, names: Sequence[str], active_cores: int = 1) -> tuple[float, ...]:
    """The stall of a 4 KiB-aliased load in a loop whose stores stream from each data level
    ``names``, then from memory (the aliasing probe's, module docstring), with ``active_cores``
    busy. A level the probe did not measure (a what-if copy's added level) takes the next one out's;
    memory unmeasured: 0."""
    a = [model.stall_at(x, active_cores) for x in names] + [model.stall_at("memory", active_cores)]
    for i in range(len(a) - 1, -1, -1):
        if a[i] is None:
            a[i] = a[i + 1] if i + 1 < len(a) and a[i + 1] is not None else 0.0
    return tuple(float(x) for x in a)


def compute_when_busy(comp: ComputeModel, active_cores: int) -> ComputeModel:
    """``comp``'s rates as a core runs them with ``active_cores`` cores of its node busy: each
    kernel's one-core rate slowed by its ``all_cores_slowdown`` (pmac.profile.ComputeModel), that
    measured with ``all_cores_n`` busy, and taken as linear in the busy cores between one (1) and
    ``all_cores_n`` (capped there); unchanged for one core or a model without the measurement.
    Which rates follow which kernel: scalar flop (the dependent and the independent kernel's, FMA
    code's, and the dependency probe's, whose ratios stay) ``flop_independent``; SIMD flop
    ``flop_simd``; divides ``divsqrt``; the loop-carried chains ``chain``; branches ``branch``.
    A kernel not measured leaves its rates alone. Linear in between is an assumption: the probe
    measures one core and all of them (on two cores there is nothing in between)."""
    if active_cores <= 1 or not comp.all_cores_slowdown:
        return comp
    w = min(1.0, (active_cores - 1) / max(comp.all_cores_n - 1, 1))
    f = {k: 1.0 + (s - 1.0) * w for k, s in zip(comp.all_cores_kernels, comp.all_cores_slowdown)}
    fl, sv, dv, ch, br = (f.get(k, 1.0) for k in ("flop_independent", "flop_simd", "divsqrt", "chain", "branch"))

    def slower(rate):
        return None if rate is None else rate / fl

    return replace(comp, flop_per_s_scalar=comp.flop_per_s_scalar / fl,
                   flop_per_s_scalar_independent=slower(comp.flop_per_s_scalar_independent),
                   flop_per_s_scalar_fma=slower(comp.flop_per_s_scalar_fma),
                   dependency_flop_per_s=tuple(y / fl for y in comp.dependency_flop_per_s),
                   flop_per_s_simd=comp.flop_per_s_simd / sv,
                   divsqrt_per_s=None if comp.divsqrt_per_s is None else comp.divsqrt_per_s / dv,
                   chain_add_s=None if comp.chain_add_s is None else comp.chain_add_s * ch,
                   chain_mul_s=None if comp.chain_mul_s is None else comp.chain_mul_s * ch,
                   branch_cost_s=tuple(b * br for b in comp.branch_cost_s))


def machine_coeffs(profile: MachineProfile, *, active_cores: int = 1, beta: float | None = None,
                   dependency: bool | None = None, soft_capacity: bool | None = None) -> MachineCoeffs:
    """Convolver coefficients of a profile with ``active_cores`` ranks busy on its node.

    ``dependency``: apply the dependency probe's slowdown (default: :data:`DEPENDENCY_SLOWDOWN`).
    ``soft_capacity``: level capacities as distributions read off the load curve (pmac.capacity;
    default: :data:`SOFT_CAPACITY`); off, each level has its nominal capacity.
    """
    if dependency is None:
        dependency = DEPENDENCY_SLOWDOWN
    if soft_capacity is None:
        soft_capacity = SOFT_CAPACITY
    profile.require("node", "node.compute", needed_by="convolve")
    node = profile.node
    active = max(1, min(int(active_cores), node.n_cores))
    names, lines, caps, bl, bs, notes = [], [], [], [], [], []
    prev = 0.0
    for lev in node.caches:
        if not is_data_level(lev.name):
            continue  # instruction caches hold no data
        share = lev.size_bytes / min(lev.shared_by_cores, active) / lev.line_bytes
        cap = share if lev.inclusive else prev + share
        cap = max(cap, prev)
        names.append(lev.name)
        lines.append(lev.line_bytes)
        caps.append(cap)
        prev = cap
        for kinds, out in ((_LOAD_KINDS, bl), (_STORE_KINDS, bs)):
            bw, note = _plateau(lev, kinds, active, f"node.caches[{lev.name}]", profile.name)
            out.append(bw)
            if note:
                notes.append(note)
    for kinds, out in ((_LOAD_KINDS, bl), (_STORE_KINDS, bs)):
        bw, note = _plateau(node.memory, kinds, active, "node.memory", profile.name)
        out.append(bw)
        if note:
            notes.append(note)
    copy = None
    if "copy" in node.memory.bandwidth_1core_bytes_per_s or "copy" in node.memory.bandwidth_allcores_bytes_per_s:
        copy = _plateau(node.memory, ("copy",), active, "node.memory", profile.name)[0]
    quantiles = ()
    if soft_capacity:
        # the curve of one core for one active core, of all cores otherwise
        n_curve = 1 if active == 1 else max((c.n_cores for c in node.bandwidth_curves), default=1)
        quantiles = tuple(tuple(r * c for r in rl) for rl, c in zip(capacity_ratios(node, n_curve), caps))
    comp = compute_when_busy(node.compute, active)
    dep_x, dep_y = (), ()
    if dependency and comp.dependency_distance:
        order = np.argsort(comp.dependency_distance)
        x = np.asarray(comp.dependency_distance, dtype=np.float64)[order]
        y = np.asarray(comp.dependency_flop_per_s, dtype=np.float64)[order]
        dep_x, dep_y = tuple(x), tuple(y.max() / y)
    chain = None
    if comp.dependency_distance and comp.dependency_flop_per_s:
        k = int(np.argmin(comp.dependency_distance))
        if comp.dependency_flop_per_s[k] > 0:
            chain = 1.0 / float(comp.dependency_flop_per_s[k])
    br_x, br_y = (), ()
    if comp.branch_miss_frac:
        order = np.argsort(comp.branch_miss_frac)
        br_x = tuple(np.asarray(comp.branch_miss_frac, dtype=np.float64)[order])
        br_y = tuple(np.asarray(comp.branch_cost_s, dtype=np.float64)[order])
    l1i_lines, l1i_line, fetch_miss = 0.0, 64, None
    if node.fetch is not None:
        l1i_line = node.fetch.l1i_line_bytes
        l1i_lines = node.fetch.l1i_size_bytes / l1i_line
        fetch_miss = node.fetch.miss_s
    alias = alias_stalls(node.alias, names, active) if node.alias is not None else ()
    if beta is None:
        ov = profile.overlap
        if ov is not None and ov.kind in OVERLAP_KINDS and "beta" in ov.params:
            beta = float(ov.params["beta"])
        else:
            beta = DEFAULT_BETA
            notes.append(f"no calibrated overlap model: beta = {DEFAULT_BETA}")
    return MachineCoeffs(
        name=profile.name, level_names=tuple(names), level_line_bytes=tuple(lines), capacity_lines=tuple(caps),
        load_bandwidth_bytes_per_s=tuple(bl), store_bandwidth_bytes_per_s=tuple(bs),
        flop_per_s_scalar=comp.scalar_rate, flop_per_s_simd=comp.flop_per_s_simd,
        fma_op_s=comp.fma_op_s if comp.flop_per_s_scalar_fma else None, copy_bandwidth_bytes_per_s=copy,
        dep_distance=dep_x, dep_slowdown_ratio=dep_y, branch_miss_frac=br_x, branch_cost_s=br_y,
        divsqrt_per_s=comp.divsqrt_per_s, chain_op_s=chain, chain_add_s=comp.chain_add_s,
        chain_mul_s=comp.chain_mul_s, divider_beta=float(comp.divider_beta or 0.0),
        l1i_capacity_lines=l1i_lines, l1i_line_bytes=l1i_line,
        fetch_miss_s=fetch_miss, alias_stall_s=alias, beta=float(beta), active_cores=active,
        capacity_quantile_lines=quantiles, notes=tuple(notes))


# ---------------------------------------------------------------- the kernel

@numba.njit(cache=True, error_model="numpy", fastmath=True)
def _segment_curve(out, x, y0, xs, iw, dy, p):
    """``out[j] = y0 + sum_k clip((x[j] - xs[k, p]) * iw[k, p], 0, 1) * dy[k, p]``: machine p's
    piecewise-linear curve (see _segments) at every x of a chunk (once per machine and chunk)."""
    for j in range(out.shape[0]):
        out[j] = y0
    for k in range(xs.shape[0]):
        x0 = xs[k, p]
        w = iw[k, p]
        d = dy[k, p]
        for j in range(out.shape[0]):
            out[j] += min(max((x[j] - x0) * w, 0.0), 1.0) * d


@numba.njit(cache=True, error_model="numpy", fastmath=True)
def _mean_hits(out, h_k, lev_q, n_q, L, p):
    """``out[j]``: the hit fraction (of ``h_k``: loads or stores) of level L on machine ``p``, the
    mean over the level's capacity copies (one, the nominal, without a distribution)."""
    nq = n_q[L, p]
    k = lev_q[L, 0, p]
    for j in range(out.shape[0]):
        out[j] = h_k[k, j]
    if nq > 1:
        for q in range(1, nq):
            k = lev_q[L, q, p]
            for j in range(out.shape[0]):
                out[j] += h_k[k, j]
        w = 1.0 / nq
        for j in range(out.shape[0]):
            out[j] *= w


@numba.njit(cache=True, parallel=True, error_model="numpy", fastmath=True)
def _kernel(cum, load_bytes, store_bytes, loads, stores, flop_s, flop_v, fma_s, divsqrt, recur, recur_mul, branches, dep,
            bmiss, cap_line, cap_edge, cap_frac, lev_q, n_q, line_b, inv_bl, inv_bs, inv_bc, inv_fs, inv_fv, fma_x, inv_dv, dv_beta,
            t_add, t_mul,
            dep_y0, dep_x, dep_iw, dep_dy, br_y0, br_x, br_iw, br_dy, br_knots, br_yv, beta, chunk,
            out_t, out_m, out_c, detail, fetches, fetch_cum, f_line, f_edge, f_frac, f_miss, has_fetch,
            alias, al_st, has_alias, out_a):
    """Chunks of bursts in parallel; in a chunk, the hit fraction of every distinct capacity point
    as a vector over the chunk's bursts, then per machine simple loops over those bursts
    (contiguous, vectorised) writing the machine's row ``out_t[p, b0:b1]``. Machine arrays are
    (X, machine); a level's hit fraction is the mean over its capacity points ``lev_q[L,
    :n_q[L, p], p]``; levels are padded (a padded level repeats the previous points), curves
    are sums of clamped segments. With ``has_fetch``, a machine with ``f_miss > 0`` adds its L1i
    misses (``fetches * (1 - F_fetch(L1i))``) at ``f_miss`` each to the compute time. With
    ``has_alias``, each of a burst's ``alias`` loads stalls ``al_st[L, p]`` weighted by the share of
    the burst's store bytes whose lines level L brings (memory: ``L = n_l``; the rest at L = 0),
    added after the overlap."""
    n_b = load_bytes.shape[0]
    n_p = beta.shape[0]
    n_k = cap_line.shape[0]
    n_l = lev_q.shape[0]
    # every machine's branch curve on the same knots (all probed by pmac): locate a burst's
    # miss fraction once, then one interpolation per machine
    n_kn = br_knots.shape[0]
    n_chunks = (n_b + chunk - 1) // chunk
    for ci in numba.prange(n_chunks):
        b0 = ci * chunk
        b1 = min(n_b, b0 + chunk)
        m = b1 - b0
        hl_k = np.empty((n_k, m))
        hs_k = np.empty((n_k, m))
        for k in range(n_k):
            li = cap_line[k]
            e = cap_edge[k]
            f = cap_frac[k]
            for j in range(m):
                c0 = cum[li, 0, b0 + j, e]
                hl_k[k, j] = c0 + f * (cum[li, 0, b0 + j, e + 1] - c0)
                c0 = cum[li, 1, b0 + j, e]
                hs_k[k, j] = c0 + f * (cum[li, 1, b0 + j, e + 1] - c0)
        jb = np.zeros(m, np.int64)
        fb = np.zeros(m)
        if n_kn >= 2:
            for j in range(m):
                x_br = bmiss[b0 + j]
                if x_br >= br_knots[n_kn - 1]:
                    jb[j] = n_kn - 2
                    fb[j] = 1.0
                elif x_br > br_knots[0]:
                    q = 0
                    while br_knots[q + 1] <= x_br:
                        q += 1
                    jb[j] = q
                    fb[j] = (x_br - br_knots[q]) / (br_knots[q + 1] - br_knots[q])
        nl = loads[b0:b1]
        ns = stores[b0:b1]
        lb = load_bytes[b0:b1]
        sb = store_bytes[b0:b1]
        fsb = flop_s[b0:b1]
        fvb = flop_v[b0:b1]
        fmb = fma_s[b0:b1]
        dsq = divsqrt[b0:b1]
        rec = recur[b0:b1]
        recm = recur_mul[b0:b1]
        tf = np.empty(m)
        brb = branches[b0:b1]
        x_dep = dep[b0:b1]
        x_br = bmiss[b0:b1]
        hlp = np.empty(m)
        hsp = np.empty(m)
        hlc = np.empty(m)
        hsc = np.empty(m)
        tm = np.empty(m)
        mvl = np.empty(m)
        mvs = np.empty(m)
        slow = np.empty(m)
        cost = np.empty(m)
        tdv = np.empty(m)
        tch = np.empty(m)
        sal = np.zeros(m)
        tal = np.zeros(m)
        isb = np.zeros(m)      # 1 / store bytes (0 without stores: no share, branch-free loops)
        if has_alias:
            for j in range(m):
                isb[j] = 1.0 / store_bytes[b0 + j] if store_bytes[b0 + j] > 0.0 else 0.0
        for p in range(n_p):
            if n_l > 0:
                _mean_hits(hlp, hl_k, lev_q, n_q, 0, p)
                _mean_hits(hsp, hs_k, lev_q, n_q, 0, p)
            else:
                hlp[:] = 0.0
                hsp[:] = 0.0
            if has_alias:
                sal[:] = 0.0    # the stores' share streamed from beyond the first level so far
                tal[:] = 0.0    # and the stall it prices
            tm[:] = 0.0
            mvl[:] = 0.0
            mvs[:] = 0.0
            for L in range(1, n_l):
                _mean_hits(hlc, hl_k, lev_q, n_q, L, p)
                _mean_hits(hsc, hs_k, lev_q, n_q, L, p)
                lbl = line_b[L, p]
                ibl = inv_bl[L, p]
                ibs = inv_bs[L, p]
                if has_alias:
                    # the share of the stores' bytes whose lines this level brings (below)
                    al = al_st[L, p]
                    for j in range(m):
                        w = min(ns[j] * (max(hsc[j], hsp[j]) - hsp[j]) * lbl * isb[j], 1.0 - sal[j])
                        tal[j] += w * al
                        sal[j] += w
                for j in range(m):
                    hl = max(hlc[j], hlp[j])
                    hs = max(hsc[j], hsp[j])
                    ml = nl[j] * (hl - hlp[j]) * lbl
                    ms = ns[j] * (hs - hsp[j]) * lbl
                    tm[j] += ml * ibl + ms * ibs
                    mvl[j] += ml
                    mvs[j] += ms
                    hlp[j] = hl
                    hsp[j] = hs
            # memory moves lines too; without caches it serves the bytes as they are
            lbm = line_b[n_l, p]
            iblm = inv_bl[n_l, p]
            ibsm = inv_bs[n_l, p]
            ibl0 = inv_bl[0, p]
            ibs0 = inv_bs[0, p]
            ibcm = inv_bc[p]
            has_levels = n_l > 0
            if has_alias:
                # a loop's aliased loads stall as the probe's loop streaming its stores from where
                # this burst's stores stream (module docstring): by the share of its store bytes
                # whose lines each level (and memory) brings, the rest at the first level's stall
                alm, al0 = al_st[n_l, p], al_st[0, p]
                if has_levels:
                    for j in range(m):
                        w = min(ns[j] * (1.0 - hsp[j]) * lbm * isb[j], 1.0 - sal[j])
                        sal[j] = alias[b0 + j] * (tal[j] + w * alm + max(1.0 - sal[j] - w, 0.0) * al0)
                else:
                    for j in range(m):
                        sal[j] = alias[b0 + j] * alm
            for j in range(m):
                ml = nl[j] * (1.0 - hlp[j]) * lbm if has_levels else 0.0
                ms = ns[j] * (1.0 - hsp[j]) * lbm if has_levels else 0.0
                # lines moved both ways pair off at the copy plateau (module docstring)
                pr = min(ml, ms) if ibcm > 0.0 else 0.0
                t = tm[j] + (ml - pr) * iblm + (ms - pr) * ibsm + 2.0 * pr * ibcm
                tm[j] = t + max(lb[j] - mvl[j] - ml, 0.0) * ibl0 + max(sb[j] - mvs[j] - ms, 0.0) * ibs0
            _segment_curve(slow, x_dep, dep_y0[p], dep_x, dep_iw, dep_dy, p)
            if n_kn >= 2:
                for j in range(m):
                    y_lo = br_yv[jb[j], p]
                    cost[j] = y_lo + fb[j] * (br_yv[jb[j] + 1, p] - y_lo)
            else:
                _segment_curve(cost, x_br, br_y0[p], br_x, br_iw, br_dy, p)
            ifs = inv_fs[p]
            ifv = inv_fv[p]
            fmx = fma_x[p]
            idv = inv_dv[p]
            dvb = dv_beta[p]
            bet = beta[p]
            if idv > 0.0:
                # divides/square roots on the divider (scalar ones first); the other flop apart
                for j in range(m):
                    d = min(dsq[j], fsb[j] + fvb[j])
                    dv = max(d - fsb[j], 0.0)
                    tf[j] = (fsb[j] - (d - dv)) * ifs + fmb[j] * fmx + (fvb[j] - dv) * ifv
                    tdv[j] = d * idv
            else:
                for j in range(m):
                    tf[j] = fsb[j] * ifs + fmb[j] * fmx + fvb[j] * ifv
                    tdv[j] = 0.0
            ta = t_add[p]
            tmul = t_mul[p]
            if ta > 0.0 or tmul > 0.0:
                # loop-carried chains: no core overlaps their operations (adds, multiply-class);
                # the loop's other work (its flop and its predicted branches' loop work, below)
                # runs in their shadow: the longer of the two is the time
                for j in range(m):
                    tch[j] = (rec[j] - recm[j]) * ta + recm[j] * tmul
            else:
                tch[:] = 0.0
            # a branch's price beyond a predicted one's (mispredictions) stalls everything; the
            # predicted branch's own price is loop work, which runs beside the divider as the
            # other flop does (the final loop)
            c_0 = br_y0[p]
            if has_fetch and f_miss[p] > 0.0:
                # instruction-cache misses stall the front end like mispredicted branches
                fl, fe, ff, fm = f_line[p], f_edge[p], f_frac[p], f_miss[p]
                for j in range(m):
                    c0 = fetch_cum[fl, b0 + j, fe]
                    hit = c0 + ff * (fetch_cum[fl, b0 + j, fe + 1] - c0)
                    cost[j] = brb[j] * max(cost[j] - c_0, 0.0) + fetches[b0 + j] * (1.0 - hit) * fm
            else:
                for j in range(m):
                    cost[j] = brb[j] * max(cost[j] - c_0, 0.0)
            for j in range(m):
                sl = slow[j] if x_dep[j] > 0.0 else 1.0
                to = max(tf[j] * sl + brb[j] * c_0, tch[j])
                tc = max(tdv[j], to) + dvb * min(tdv[j], to) + cost[j]
                t_m = tm[j]
                out_t[p, b0 + j] = max(t_m, tc) + bet * min(t_m, tc) + sal[j]
                if detail:
                    out_m[p, b0 + j] = t_m
                    out_c[p, b0 + j] = tc
                    out_a[p, b0 + j] = sal[j]


@dataclass(frozen=True, kw_only=True)
class ConvolveResult:
    """Per machine (rows, in the order given) and burst (columns): seconds."""

    machines: tuple[str, ...]
    time_s: np.ndarray
    memory_s: np.ndarray | None = None
    compute_s: np.ndarray | None = None
    #: the stalls of 4 KiB-aliased loads, added after the overlap (zeros where not priced)
    alias_s: np.ndarray | None = None


def _segments(xs: Sequence[float], ys: Sequence[float], empty_value: float, n_seg: int):
    """A piecewise-linear curve (clamped outside) as y0 + sum_j clip((x - x_j) / w_j, 0, 1) * dy_j."""
    x0 = np.zeros(n_seg)
    iw = np.zeros(n_seg)
    dy = np.zeros(n_seg)
    if len(xs) == 0:
        return empty_value, x0, iw, dy
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    for j in range(len(xs) - 1):
        w = xs[j + 1] - xs[j]
        x0[j] = xs[j]
        iw[j] = 1.0 / w if w > 0 else 1e300
        dy[j] = ys[j + 1] - ys[j]
    return float(ys[0]), x0, iw, dy


def pack_machines(machines: Sequence[MachineCoeffs], line_bytes: Sequence[int]) -> dict[str, np.ndarray]:
    """The machine-side arrays of the kernel (cheap; done once per set of machines).

    Capacity points (line size, bin, fraction in bin) shared by several machines or levels are
    evaluated once per burst; point 0 is the empty cache (hit fraction 0).
    """
    lb = np.array(line_bytes)
    n_p = len(machines)
    n_l = max([len(m.level_names) for m in machines] + [0])
    n_d = max([len(m.dep_distance) - 1 for m in machines] + [0])
    n_r = max([len(m.branch_miss_frac) - 1 for m in machines] + [0])
    n_qm = max([len(m.quantile_lines(L)) for m in machines for L in range(len(m.level_names))] + [1])
    points: dict[tuple[int, int, float], int] = {(0, 0, 0.0): 0}
    a = dict(lev_q=np.zeros((n_l, n_qm, n_p), np.int64), n_q=np.ones((n_l, n_p), np.int64), line_b=np.zeros((n_l + 1, n_p)), inv_bl=np.zeros((n_l + 1, n_p)), inv_bs=np.zeros((n_l + 1, n_p)),
             inv_bc=np.zeros(n_p), inv_fs=np.zeros(n_p), inv_fv=np.zeros(n_p), fma_extra=np.zeros(n_p), inv_dv=np.zeros(n_p), dv_beta=np.zeros(n_p), t_ch=np.zeros(n_p),
             t_cha=np.zeros(n_p), t_chm=np.zeros(n_p),
             dep_y0=np.zeros(n_p), dep_x=np.zeros((n_d, n_p)), dep_iw=np.zeros((n_d, n_p)), dep_dy=np.zeros((n_d, n_p)),
             br_y0=np.zeros(n_p), br_x=np.zeros((n_r, n_p)), br_iw=np.zeros((n_r, n_p)), br_dy=np.zeros((n_r, n_p)),
             beta=np.zeros(n_p), f_line=np.zeros(n_p, np.int64), f_edge=np.zeros(n_p, np.int64),
             f_frac=np.zeros(n_p), f_miss=np.zeros(n_p), al_st=np.zeros((n_l + 1, n_p)))
    for p, m in enumerate(machines):
        nl = len(m.level_names)
        for L in range(n_l):
            if L < nl:
                # the histogram of the nearest recorded line size
                li = int(np.argmin(np.abs(np.log2(lb) - np.log2(m.level_line_bytes[L]))))
                qs = m.quantile_lines(L)
                a["n_q"][L, p] = len(qs)
                for q, c in enumerate(qs):
                    e, f = edge_position(min(c * m.level_line_bytes[L] / lb[li], MAX_CAPACITY_LINES))
                    a["lev_q"][L, q, p] = points.setdefault((li, e, f), len(points))
                a["line_b"][L, p] = m.level_line_bytes[L]
                a["inv_bl"][L, p] = 1.0 / m.load_bandwidth_bytes_per_s[L]
                a["inv_bs"][L, p] = 1.0 / m.store_bandwidth_bytes_per_s[L]
            elif L > 0:
                # padded levels repeat the last points: they serve nothing
                a["lev_q"][L, :, p] = a["lev_q"][L - 1, :, p]
                a["n_q"][L, p] = a["n_q"][L - 1, p]
        # memory moves lines of the last level's size
        a["line_b"][nl:, p] = m.level_line_bytes[nl - 1] if nl else 64
        a["inv_bl"][n_l, p] = 1.0 / m.load_bandwidth_bytes_per_s[nl]
        a["inv_bs"][n_l, p] = 1.0 / m.store_bandwidth_bytes_per_s[nl]
        a["inv_bc"][p] = 1.0 / m.copy_bandwidth_bytes_per_s if m.copy_bandwidth_bytes_per_s else 0.0
        a["inv_fs"][p] = 1.0 / m.flop_per_s_scalar
        a["inv_fv"][p] = 1.0 / m.flop_per_s_simd
        # an FMA's price beyond its two flop at the scalar rate (0 without an FMA rate)
        a["fma_extra"][p] = m.fma_op_s - 2.0 * a["inv_fs"][p] if m.fma_op_s else 0.0
        a["inv_dv"][p] = 1.0 / m.divsqrt_per_s if m.divsqrt_per_s else 0.0
        a["dv_beta"][p] = m.divider_beta
        a["t_ch"][p] = m.chain_op_s if m.chain_op_s else 0.0
        a["t_cha"][p] = m.chain_add_s if m.chain_add_s else a["t_ch"][p]
        a["t_chm"][p] = m.chain_mul_s if m.chain_mul_s else a["t_ch"][p]
        a["dep_y0"][p], a["dep_x"][:, p], a["dep_iw"][:, p], a["dep_dy"][:, p] = _segments(
            m.dep_distance, m.dep_slowdown_ratio, 1.0, n_d)
        a["br_y0"][p], a["br_x"][:, p], a["br_iw"][:, p], a["br_dy"][:, p] = _segments(
            m.branch_miss_frac, m.branch_cost_s, 0.0, n_r)
        a["beta"][p] = m.beta
        if m.alias_stall_s:
            a["al_st"][:nl, p] = m.alias_stall_s[:nl]
            a["al_st"][n_l, p] = m.alias_stall_s[nl]
        if m.fetch_miss_s is not None and m.l1i_capacity_lines > 0:
            li = int(np.argmin(np.abs(np.log2(lb) - np.log2(m.l1i_line_bytes))))
            cap = m.l1i_capacity_lines * m.l1i_line_bytes / lb[li]
            a["f_line"][p] = li
            a["f_edge"][p], a["f_frac"][p] = edge_position(min(cap, MAX_CAPACITY_LINES))
            a["f_miss"][p] = m.fetch_miss_s
    knots = {m.branch_miss_frac for m in machines}
    shared = next(iter(knots)) if len(knots) == 1 else ()
    if len(shared) >= 2 and np.all(np.diff(shared) > 0):
        a["br_knots"] = np.array(shared, np.float64)
        a["br_yv"] = np.array([m.branch_cost_s for m in machines], np.float64).T.copy()
    else:
        a["br_knots"] = np.zeros(0)
        a["br_yv"] = np.zeros((0, n_p))
    pts = sorted(points.items(), key=lambda kv: kv[1])
    a["cap_line"] = np.array([q[0][0] for q in pts], np.int64)
    a["cap_edge"] = np.array([q[0][1] for q in pts], np.int64)
    a["cap_frac"] = np.array([q[0][2] for q in pts], np.float64)
    return a


def convolve(bursts: BurstArrays, machines: Sequence[MachineCoeffs], *, detail: bool = True,
             packed: dict[str, np.ndarray] | None = None, chunk: int = 512,
             out: np.ndarray | None = None) -> ConvolveResult:
    """Time of every burst on every machine (``time_s[p, b]``); with ``detail`` also the
    memory and compute parts before overlap.

    ``out``: a C-contiguous float64 array of shape (machines, bursts) to write ``time_s`` into
    (sweeps convolving many profile sets reuse one; on a VM the first touch of fresh memory
    costs more than the convolution, see bench/convolve)."""
    if not machines:
        raise ValueError("convolve: no machines")
    a = packed if packed is not None else pack_machines(machines, bursts.line_bytes)
    n_p, n_b = len(machines), bursts.n_bursts
    if int(a["cap_edge"].max()) + 1 >= bursts.cum.shape[3]:
        raise ValueError("convolve: a cache is larger than the cumulative histograms cover")
    if out is not None:
        if out.shape != (n_p, n_b) or out.dtype != np.float64 or not out.flags.c_contiguous:
            raise ValueError(f"convolve: out must be a C-contiguous float64 array of shape {(n_p, n_b)}")
        out_t = out
    else:
        out_t = np.empty((n_p, n_b))
    out_m = np.empty((n_p, n_b)) if detail else np.empty((1, 1))
    out_c = np.empty((n_p, n_b)) if detail else np.empty((1, 1))
    divsqrt = bursts.divsqrt if bursts.divsqrt is not None else np.zeros(n_b)
    fma = bursts.fma_scalar if bursts.fma_scalar is not None else np.zeros(n_b)
    recur = bursts.recurrence if bursts.recurrence is not None else np.zeros(n_b)
    # chains split into adds and multiply-class operations, each at its price; unsplit (signature
    # before version 7): all at the one price of chain_op_s
    split = bursts.recurrence_mul is not None
    recur_mul = bursts.recurrence_mul if split else np.zeros(n_b)
    t_add, t_mul = (a["t_cha"], a["t_chm"]) if split else (a["t_ch"], a["t_ch"])
    has_fetch = bursts.fetches is not None
    if has_fetch and int(a["f_edge"].max()) + 1 >= bursts.fetch_cum.shape[2]:
        raise ValueError("convolve: an instruction cache is larger than the cumulative histograms cover")
    fetches = bursts.fetches if has_fetch else np.zeros(1)
    fetch_cum = bursts.fetch_cum if has_fetch else np.zeros((1, 1, 2), bursts.cum.dtype)
    has_alias = bursts.alias_loads is not None and bool(a["al_st"].any())
    alias = bursts.alias_loads if has_alias else np.zeros(1)
    out_a = np.zeros((n_p, n_b)) if detail else np.empty((1, 1))
    _kernel(bursts.cum, bursts.load_bytes, bursts.store_bytes, bursts.loads, bursts.stores,
            bursts.flop_scalar, bursts.flop_simd, fma, divsqrt, recur, recur_mul,
            bursts.branches, bursts.dep_distance_mean, bursts.branch_miss_frac,
            a["cap_line"], a["cap_edge"], a["cap_frac"], a["lev_q"], a["n_q"], a["line_b"], a["inv_bl"], a["inv_bs"], a["inv_bc"],
            a["inv_fs"], a["inv_fv"], a["fma_extra"], a["inv_dv"], a["dv_beta"], t_add, t_mul, a["dep_y0"], a["dep_x"], a["dep_iw"], a["dep_dy"],
            a["br_y0"], a["br_x"], a["br_iw"], a["br_dy"], a["br_knots"], a["br_yv"], a["beta"], max(int(chunk), 1),
            out_t, out_m, out_c, detail, fetches, fetch_cum, a["f_line"], a["f_edge"], a["f_frac"], a["f_miss"],
            has_fetch, alias, a["al_st"], has_alias, out_a)
    return ConvolveResult(machines=tuple(m.name for m in machines), time_s=out_t,
                          memory_s=out_m if detail else None, compute_s=out_c if detail else None,
                          alias_s=out_a if detail else None)


def combine_overlap(memory_s: np.ndarray, compute_s: np.ndarray, beta: float) -> np.ndarray:
    """``max(m, c) + beta * min(m, c)`` (the overlap model, for calibration)."""
    m = np.asarray(memory_s, dtype=np.float64)
    c = np.asarray(compute_s, dtype=np.float64)
    return np.maximum(m, c) + beta * np.minimum(m, c)

"""Machine profiles: what the probes measured, fitted into a model a prediction can use.

File: ``machines/<name>.yaml`` (kind ``pmac.machine``) with a sidecar ``<name>.raw.npz``
holding every probe repetition (tables of :data:`RAW_TABLES`). The YAML holds fitted values
and the median curves; the raw repetitions stay apart so later work can turn their spread
into prediction intervals.

A profile may lack a section (``node``, ``network``, ``network.inter_node``, …): an imported
kerncraft file has no network, an OSU import has no node. :meth:`MachineProfile.missing` lists
what is absent; :meth:`MachineProfile.require` raises :class:`MissingSectionError` naming it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError, MissingSectionError
from .mpi import THREAD_CLASSES, check_thread_level, thread_level_class
from .schema import (check_document, from_dict, read_yaml, register_kind, save_document,
                     sha256_file, to_dict)
from .table import TableSpec, load_tables

KIND = "pmac.machine"
#: current schema version of machine profiles (history below)
SCHEMA_VERSION = 19
register_kind(KIND, SCHEMA_VERSION, {1: "first version: node (caches, memory, compute, curves), network "
                           "(intra/inter-node links, collectives), overlap, raw sidecar",
                        2: "node.compute.divsqrt_per_s (optional): divide and square-root operations "
                           "per second; version 1 files have none",
                        3: "network links: shaper_rate_bytes_per_s, shaper_burst_bytes and "
                           "shaper_header_bytes (optional, a token-bucket egress limit); version 2 files "
                           "have none (unshaped)",
                        4: "network links: exchange_excess_s (optional, default 0: the extra cost of "
                           "two ranks sending each other at once); version 3 files have none",
                        5: "network.collectives: excess_s (optional: what the 2-rank call cost beyond the "
                           "algorithm's messages on the fitted links, pmac.calibrate_collectives); version 4 "
                           "files have none (collectives priced by algorithm alone; `python -m "
                           "pmac.calibrate_collectives FILE.yaml` adds it)",
                        6: "network links: pollution_bytes and pollution_excess_s (optional: what a call "
                           "costs after its burst swept that many bytes through the caches, pmac.pollution); "
                           "version 5 files have none (no such cost)",
                        7: "network.thread_level (optional: the MPI thread level the network was measured "
                           "at) and network_variants (optional: the network measured at other thread "
                           "levels); version 6 files have '' (not recorded) and no variants",
                        8: "node.fetch (optional: the L1 instruction cache and the price of a line fetched "
                           "from beyond it, probes/fetch.py); version 7 files have none (no instruction-"
                           "cache term)",
                        9: "node.compute.chain_add_s and chain_mul_s (optional: seconds per operation of a "
                           "loop-carried chain of adds, and of multiply-adds; probes/compute.py ``chain``); "
                           "version 8 files have none (every chain operation at the dependency probe's "
                           "shortest-distance rate)",
                        10: "node.compute.divider_beta (optional: how far the divider and the other work of a "
                            "core overlap, probes/compute.py ``divpar``, ``divmix`` before 29 Nov 2026); "
                            "version 9 files have none (side by side: 0)",
                        11: "node.noise (optional: each core's slowdown over time, probes/noise.py, for "
                            "``pmac predict --noise``); version 10 files have none (no noise to replay)",
                        12: "network.bcast_root (optional: 'rotating' when the probe moved a bcast's root every "
                            "call, 'fixed' for root 0 every call); version 11 files have none ('fixed', as "
                            "every probe before 27 Nov 2026 timed it)",
                        13: "network.collective_loop (optional: 'compiled' when the probe timed the collectives "
                            "in compiled loops, the rows a call's whole cost; 'mpi4py' for the interpreter's "
                            "loops, less the one-rank floor); version 12 files have none ('mpi4py', as every "
                            "probe before 28 Nov 2026 timed them)",
                        14: "network.interpreter_collective_s and interpreter_p2p_s (optional: what a call from "
                            "a Python interpreter costs beyond the same call compiled, the network probe's "
                            "``interpreter`` test; pmac.interpreter); version 13 files have none (not priced)",
                        15: "node.caches[].probed_size_bytes (optional: the size the probes met, in a what-if "
                            "copy whose size_bytes was changed, pmac.sweep); version 14 files have none (as "
                            "probed)",
                        16: "node.compute.flop_per_s_scalar_independent (optional: the scalar flop rate of "
                            "independent work, probes/compute.py ``flop_independent``, at which the convolver "
                            "prices scalar flop); version 15 files have none (scalar flop at "
                            "flop_per_s_scalar, the dependent kernel's rate)",
                        17: "node.compute.flop_per_s_scalar_fma (optional: the scalar flop rate of code "
                            "contracted to fused multiply-adds, probes/compute.py ``flop_fma``, at which the "
                            "convolver prices a burst's scalar FMAs); version 16 files have none (an FMA "
                            "priced as two flop at the scalar rate)",
                        18: "node.alias (optional: the stall of a load that 4 KiB-aliases a recent store, in a "
                            "loop streaming from each level, probes/alias.py); version 17 files have none (such "
                            "loads not priced)",
                        19: "node.compute.all_cores_n, all_cores_kernels, all_cores_slowdown (optional: how much "
                            "longer the compute kernels take a core with every core busy, probes/compute.py "
                            "``all:KERNEL``); version 18 files have none (compute priced at one core's rates)"},
              migrations={1: lambda body: body, 2: lambda body: body, 3: lambda body: body, 4: lambda body: body,
                          5: lambda body: body, 6: lambda body: body, 7: lambda body: body, 8: lambda body: body,
                          9: lambda body: body, 10: lambda body: body, 11: lambda body: body,
                          12: lambda body: body, 13: lambda body: body, 14: lambda body: body,
                          15: lambda body: body, 16: lambda body: body, 17: lambda body: body,
                          18: lambda body: body})

#: Access kinds of the bandwidth probes. Loads are unit-stride or random (gather); stores
#: write unit-stride; copy reads one array and writes another (bytes counted both ways).
ACCESS_KINDS = ("load_unit", "load_random", "store", "copy")

#: Collective operations the collectives probe measures and the replay can price.
COLLECTIVE_OPS = ("barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall", "gather", "scatter")


def _positive(name: str, value: float | None, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _check_kinds(name: str, mapping: dict[str, float]) -> None:
    for k, v in mapping.items():
        if k not in ACCESS_KINDS:
            raise ValueError(f"{name}: unknown access kind '{k}' (known: {', '.join(ACCESS_KINDS)})")
        _positive(f"{name}.{k}", v)


@dataclass(frozen=True, kw_only=True)
class CacheLevel:
    """One cache level. Sizes are per instance; ``shared_by_cores`` cores share an instance."""

    name: str
    size_bytes: int
    line_bytes: int = 64
    ways: int = 8
    shared_by_cores: int = 1
    inclusive: bool = False
    latency_s: float | None = None
    #: plateau bandwidth per access kind, one core alone
    bandwidth_1core_bytes_per_s: dict[str, float] = field(default_factory=dict)
    #: plateau bandwidth per access kind, all cores of the node at once (sum over cores)
    bandwidth_allcores_bytes_per_s: dict[str, float] = field(default_factory=dict)
    #: where the geometry came from: 'measured+os', 'os', 'measured', 'imported:<file>'
    source: str = "os"
    #: the size the profile's probes met, where a what-if copy changed ``size_bytes`` (pmac.sweep);
    #: what was measured against the caches as they were (pmac.pollution's curve) is read at it.
    #: None: ``size_bytes``
    probed_size_bytes: int | None = None

    def __post_init__(self):
        if self.size_bytes <= 0 or self.line_bytes <= 0 or self.ways <= 0 or self.shared_by_cores <= 0:
            raise ValueError(f"cache {self.name}: size, line, ways and sharing must be positive")
        if self.probed_size_bytes is not None and self.probed_size_bytes <= 0:
            raise ValueError(f"cache {self.name}: probed_size_bytes must be positive")
        _positive(f"cache {self.name} latency_s", self.latency_s)
        _check_kinds(f"cache {self.name} bandwidth_1core_bytes_per_s", self.bandwidth_1core_bytes_per_s)
        _check_kinds(f"cache {self.name} bandwidth_allcores_bytes_per_s", self.bandwidth_allcores_bytes_per_s)


@dataclass(frozen=True, kw_only=True)
class MemoryLevel:
    """Main memory: plateau bandwidths beyond the last cache, and load-to-use latency."""

    latency_s: float | None = None
    bandwidth_1core_bytes_per_s: dict[str, float] = field(default_factory=dict)
    bandwidth_allcores_bytes_per_s: dict[str, float] = field(default_factory=dict)
    size_bytes: int | None = None

    def __post_init__(self):
        _positive("memory latency_s", self.latency_s)
        _check_kinds("memory bandwidth_1core_bytes_per_s", self.bandwidth_1core_bytes_per_s)
        _check_kinds("memory bandwidth_allcores_bytes_per_s", self.bandwidth_allcores_bytes_per_s)


@dataclass(frozen=True, kw_only=True)
class BandwidthCurve:
    """Median bandwidth against working-set size for one access kind and core count."""

    access: str
    n_cores: int
    working_set_bytes: tuple[float, ...]
    bandwidth_bytes_per_s: tuple[float, ...]
    #: relative spread (max-min)/median of the repetitions that ended each point
    spread_frac: tuple[float, ...] = ()

    def __post_init__(self):
        if self.access not in ACCESS_KINDS:
            raise ValueError(f"bandwidth curve: unknown access kind '{self.access}'")
        if len(self.working_set_bytes) != len(self.bandwidth_bytes_per_s):
            raise ValueError("bandwidth curve: working_set_bytes and bandwidth_bytes_per_s differ in length")
        if self.spread_frac and len(self.spread_frac) != len(self.working_set_bytes):
            raise ValueError("bandwidth curve: spread_frac length differs")
        if any(np.diff(self.working_set_bytes) <= 0):
            raise ValueError("bandwidth curve: working_set_bytes must increase")


@dataclass(frozen=True, kw_only=True)
class LatencyCurve:
    """Pointer-chase load-to-use latency against working-set size."""

    working_set_bytes: tuple[float, ...]
    latency_s: tuple[float, ...]

    def __post_init__(self):
        if len(self.working_set_bytes) != len(self.latency_s):
            raise ValueError("latency curve: lengths differ")


@dataclass(frozen=True, kw_only=True)
class ComputeModel:
    """Per-core compute rates and the dependency / branch probes (Carrington et al. 2005).

    Units shared with memory signatures: ``dependency_distance`` is the mean def-use distance
    in instructions of floating-point instructions; ``branch_miss_frac`` is the fraction of
    conditional branches a last-outcome predictor gets wrong.
    """

    isa: str
    flop_per_s_scalar: float
    flop_per_s_simd: float
    simd_width_bits: int = 256
    clock_hz: float | None = None
    dependency_distance: tuple[float, ...] = ()
    dependency_flop_per_s: tuple[float, ...] = ()
    branch_miss_frac: tuple[float, ...] = ()
    branch_cost_s: tuple[float, ...] = ()
    #: divide and square-root operations per second (probes/compute.py ``divsqrt``: scalar code,
    #: the divider's throughput); None where the source did not measure it
    divsqrt_per_s: float | None = None
    #: seconds per operation of one loop-carried chain of adds (``s += x[i]``) and of multiply-adds
    #: (``s = s * c + x[i]``, one FMA where the ISA has it, else a multiply and an add: per
    #: operation) (probes/compute.py ``chain``); None where not measured
    chain_add_s: float | None = None
    chain_mul_s: float | None = None
    #: how far the divider and the other work of a core overlap: ``t = max(t_div, t_other) +
    #: divider_beta * min(t_div, t_other)`` (0: side by side, 1: one after the other; probes/compute.py
    #: ``divpar``, ``divmix`` before 29 Nov 2026, pmac.probe.divider_beta); None where not measured
    #: (priced as 0)
    divider_beta: float | None = None
    #: scalar flop per second of independent work (probes/compute.py ``flop_independent``: eight
    #: independent multiply-adds an element), what the floating-point ports sustain;
    #: ``flop_per_s_scalar`` is the ``flop_scalar`` kernel's rate, whose 16-deep chain an element
    #: holds a core to its scheduler's reach. None where not measured: the convolver then prices
    #: scalar flop at ``flop_per_s_scalar``
    flop_per_s_scalar_independent: float | None = None
    #: scalar flop per second of code contracted to fused multiply-adds (probes/compute.py
    #: ``flop_fma``: twelve independent FMAs an element, two flop each). None where not measured:
    #: the convolver then prices an FMA as two flop at ``scalar_rate``
    flop_per_s_scalar_fma: float | None = None
    #: how much longer a kernel takes on each core when ``all_cores_n`` cores run it at once than on
    #: one core alone (probes/compute.py ``all:KERNEL``: a lower all-core clock, hyperthreads sharing
    #: a core's ports, a hypervisor that cannot run every vCPU at once), by kernel
    #: (``all_cores_kernels``, names of the compute probe's kernels: flop_independent, flop_simd,
    #: divsqrt, chain, branch). Empty where not measured: the convolver then prices compute at one
    #: core's rates however many cores are busy (pmac.convolve.compute_when_busy)
    all_cores_n: int | None = None
    all_cores_kernels: tuple[str, ...] = ()
    all_cores_slowdown: tuple[float, ...] = ()

    @property
    def scalar_rate(self) -> float:
        """The rate a burst's scalar flop are priced at: the independent work's where measured."""
        return self.flop_per_s_scalar_independent or self.flop_per_s_scalar

    @property
    def fma_op_s(self) -> float:
        """Seconds a scalar fused multiply-add is priced at: two flop at the ``flop_fma`` kernel's
        rate where measured, else two flop at :attr:`scalar_rate` (what an FMA cost before)."""
        return 2.0 / (self.flop_per_s_scalar_fma or self.scalar_rate)

    def __post_init__(self):
        _positive("flop_per_s_scalar", self.flop_per_s_scalar)
        _positive("flop_per_s_scalar_independent", self.flop_per_s_scalar_independent)
        _positive("flop_per_s_scalar_fma", self.flop_per_s_scalar_fma)
        _positive("flop_per_s_simd", self.flop_per_s_simd)
        _positive("divsqrt_per_s", self.divsqrt_per_s)
        _positive("chain_add_s", self.chain_add_s)
        _positive("chain_mul_s", self.chain_mul_s)
        if self.divider_beta is not None and not 0.0 <= self.divider_beta <= 1.0:
            raise ValueError(f"divider_beta must lie in [0, 1], not {self.divider_beta}")
        if len(self.dependency_distance) != len(self.dependency_flop_per_s):
            raise ValueError("dependency_distance and dependency_flop_per_s differ in length")
        if len(self.branch_miss_frac) != len(self.branch_cost_s):
            raise ValueError("branch_miss_frac and branch_cost_s differ in length")
        if len(self.all_cores_kernels) != len(self.all_cores_slowdown):
            raise ValueError("all_cores_kernels and all_cores_slowdown differ in length")
        if self.all_cores_kernels and (self.all_cores_n is None or self.all_cores_n < 2):
            raise ValueError(f"all_cores_n must be 2 or more where all_cores_slowdown is given, not {self.all_cores_n}")
        if any(not (x > 0) for x in self.all_cores_slowdown):
            raise ValueError("all_cores_slowdown must be positive")


@dataclass(frozen=True, kw_only=True)
class FetchModel:
    """Instruction fetch (probes/fetch.py): the L1 instruction cache, and what one line of code
    fetched from beyond it costs.

    ``miss_s`` is the convolver's price of an L1i miss: the probe's time per 64-byte line of code
    whose blocks jump to one another in random order, at a footprint beyond the L1i (in L2) minus
    the same within it. ``miss_sequential_s`` is the same for code laid out in order (what
    next-line prefetch hides; recorded, not used). The curve: per footprint, the median seconds
    per line of each layout.
    """

    l1i_size_bytes: int
    l1i_line_bytes: int = 64
    #: 0: not known
    l1i_ways: int = 0
    miss_s: float
    miss_sequential_s: float | None = None
    footprint_bytes: tuple[float, ...] = ()
    line_random_s: tuple[float, ...] = ()
    line_sequential_s: tuple[float, ...] = ()
    #: where the L1i geometry came from ('sysfs', or '' when given by hand)
    source: str = ""

    def __post_init__(self):
        _positive("l1i_size_bytes", self.l1i_size_bytes)
        _positive("l1i_line_bytes", self.l1i_line_bytes)
        _positive("l1i_ways", self.l1i_ways, allow_zero=True)
        _positive("miss_s", self.miss_s, allow_zero=True)
        _positive("miss_sequential_s", self.miss_sequential_s, allow_zero=True)
        n = len(self.footprint_bytes)
        if len(self.line_random_s) != n or len(self.line_sequential_s) not in (0, n):
            raise ValueError("fetch: footprint_bytes, line_random_s and line_sequential_s differ in length")


@dataclass(frozen=True, kw_only=True)
class AliasModel:
    """4 KiB aliasing (probes/alias.py): what a load costs beyond its price when it shares its low
    12 address bits with one of the last stores, to another page.

    ``stall_s[i]``: seconds an aliased load of the probe's loop costs when its arrays sit in
    ``levels[i]`` (the data cache levels by name, smallest first, then ``memory``), measured at
    ``working_set_bytes[i]``: the probe's ``v[i] = 0.5 * u[i] + 1.0`` with ``v[i - 1]`` at
    ``u[i]``'s 4 KiB phase against the same a page apart, one core; ``stall_allcores_s`` the same
    with all ``n_cores_all`` cores sweeping at once (each its own arrays, at
    ``working_set_allcores_bytes``; empty on one core).
    """

    levels: tuple[str, ...]
    working_set_bytes: tuple[int, ...]
    stall_s: tuple[float, ...]
    n_cores_all: int = 1
    working_set_allcores_bytes: tuple[int, ...] = ()
    stall_allcores_s: tuple[float, ...] = ()

    def __post_init__(self):
        n = len(self.levels)
        if not n or len(self.working_set_bytes) != n or len(self.stall_s) != n:
            raise ValueError("alias: levels, working_set_bytes and stall_s need one entry each per level")
        if len(self.stall_allcores_s) not in (0, n) or len(self.working_set_allcores_bytes) != len(self.stall_allcores_s):
            raise ValueError("alias: stall_allcores_s and working_set_allcores_bytes need one entry each per level, "
                             "or none")
        if len(set(self.levels)) != n:
            raise ValueError("alias: a level is named twice")
        _positive("alias.n_cores_all", self.n_cores_all)
        for x in self.stall_s + self.stall_allcores_s:
            _positive("alias.stall_s", x, allow_zero=True)
            if not np.isfinite(x):
                raise ValueError("alias.stall_s: every stall must be finite")

    def stall_at(self, level: str, active_cores: int = 1) -> float | None:
        """The stall of an aliased load of a loop streaming from ``level`` with ``active_cores``
        cores busy (all cores' figure from two on, where measured); None: not measured there."""
        if level not in self.levels:
            return None
        i = self.levels.index(level)
        return self.stall_allcores_s[i] if active_cores > 1 and self.stall_allcores_s else self.stall_s[i]


@dataclass(frozen=True, kw_only=True)
class NoiseModel:
    """Each core's slowdown over time (probes/noise.py, fitted by pmac.noise.fit).

    ``slowdown[c][k]``: how much longer than the reference core ``c`` took for its work in the
    ``k``-th window of ``window_s`` seconds of wall time (1.0: the reference speed; 2.0: half
    of it), the windows of all cores aligned in time, the probe's chunks one after another
    (``chunk_starts``: the index of each chunk's first window). ``reference``: the statistic of
    the windows' speeds the factors are relative to, the same as the profile's other figures
    (``best``: the median of the fastest windows, as pmac probe fits every point; ``median``; a
    slow quantile). ``quantum_s``: the probe's quantum at the reference speed.
    """

    window_s: float
    quantum_s: float
    reference: str = "best"
    chunk_starts: tuple[int, ...] = (0,)
    slowdown: tuple[tuple[float, ...], ...]

    def __post_init__(self):
        _positive("noise.window_s", self.window_s)
        _positive("noise.quantum_s", self.quantum_s)
        if not self.slowdown or not self.slowdown[0]:
            raise ValueError("noise.slowdown: empty")
        n = len(self.slowdown[0])
        if any(len(row) != n for row in self.slowdown):
            raise ValueError("noise.slowdown: the cores' series differ in length")
        for row in self.slowdown:
            if not all(np.isfinite(x) and x > 0 for x in row):
                raise ValueError("noise.slowdown: every factor must be > 0")
        if list(self.chunk_starts) != sorted(set(self.chunk_starts)) or (self.chunk_starts and (
                self.chunk_starts[0] != 0 or self.chunk_starts[-1] >= n)):
            raise ValueError("noise.chunk_starts: increasing window indices from 0, inside the series")


@dataclass(frozen=True, kw_only=True)
class NodeModel:
    cpu_model: str
    n_cores: int
    caches: tuple[CacheLevel, ...]
    memory: MemoryLevel
    compute: ComputeModel | None = None
    bandwidth_curves: tuple[BandwidthCurve, ...] = ()
    latency_curve: LatencyCurve | None = None
    #: instruction fetch (probes/fetch.py); None: not measured (no instruction-cache term)
    fetch: FetchModel | None = None
    #: each core's slowdown over time (probes/noise.py); None: not measured (no noise to replay)
    noise: NoiseModel | None = None
    #: the stall of a 4 KiB-aliased load (probes/alias.py); None: not measured (not priced)
    alias: AliasModel | None = None

    def __post_init__(self):
        if self.n_cores <= 0:
            raise ValueError("n_cores must be positive")
        sizes = [c.size_bytes for c in self.caches]
        if sizes != sorted(sizes):
            raise ValueError("caches must be listed from smallest (L1) to largest")

    def curve(self, access: str, n_cores: int = 1) -> BandwidthCurve | None:
        for c in self.bandwidth_curves:
            if c.access == access and c.n_cores == n_cores:
                return c
        return None


@dataclass(frozen=True, kw_only=True)
class LinkSegment:
    """time(bytes) = latency_s + bytes / bandwidth_bytes_per_s for min_bytes <= bytes < max_bytes."""

    min_bytes: float
    max_bytes: float
    latency_s: float
    bandwidth_bytes_per_s: float

    def __post_init__(self):
        if not self.max_bytes > self.min_bytes >= 0:
            raise ValueError(f"segment [{self.min_bytes}, {self.max_bytes}) is empty")
        _positive("segment latency_s", self.latency_s, allow_zero=True)
        _positive("segment bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)


@dataclass(frozen=True, kw_only=True)
class LinkModel:
    """A point-to-point network model (LogGP-like) fitted from ping-pong and overhead probes.

    ``segments`` are authoritative for transfer time (one-way, no overheads); the scalar
    ``latency_s``/``bandwidth_bytes_per_s`` summarise small- and large-message behaviour.
    """

    latency_s: float
    bandwidth_bytes_per_s: float
    eager_threshold_bytes: int
    send_overhead_s: float = 0.0
    recv_overhead_s: float = 0.0
    segments: tuple[LinkSegment, ...] = ()
    fit_r2: float | None = None
    streaming_bandwidth_bytes_per_s: float | None = None
    #: measured curve (medians): message size and one-way time
    msg_bytes: tuple[float, ...] = ()
    one_way_s: tuple[float, ...] = ()
    #: token-bucket egress shaper of each node on this link (None: unshaped). Tokens (bytes)
    #: accrue at ``shaper_rate_bytes_per_s`` up to ``shaper_burst_bytes``; a message leaves
    #: once the bucket holds its bytes, so sporadic messages pass at the line speed of
    #: ``segments`` and sustained traffic at the rate (a tc tbf, a cloud NIC's baseline/burst
    #: allowance). ``segments`` then describe the line without the shaper.
    shaper_rate_bytes_per_s: float | None = None
    shaper_burst_bytes: float | None = None
    #: tokens a message takes beyond its payload (protocol headers; None or 0: payload only)
    shaper_header_bytes: float | None = None
    #: extra receive time of each half of an exchange (two ranks sending each other at once:
    #: MPI_Sendrecv with one peer, the pairwise rounds of collectives) beyond what the rest of
    #: this model prices for the two messages; from the network probe's ``exchange`` test (see
    #: pmac.calibrate_exchange). On TCP a message that arrives while its receiver is inside its
    #: own send is processed only after that send (0: an exchange costs what the messages do).
    exchange_excess_s: float = 0.0
    #: what a call costs more after its rank swept ``pollution_bytes[i]`` bytes through the
    #: caches (the library's and the kernel's path evicted) than after a pause as long: the
    #: network probe's ``pollution`` test, ascending sizes, non-decreasing (pmac.pollution;
    #: empty: not measured, no such cost)
    pollution_bytes: tuple[float, ...] = ()
    pollution_excess_s: tuple[float, ...] = ()

    def __post_init__(self):
        _positive("latency_s", self.latency_s, allow_zero=True)
        _positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        _positive("send_overhead_s", self.send_overhead_s, allow_zero=True)
        _positive("recv_overhead_s", self.recv_overhead_s, allow_zero=True)
        if self.eager_threshold_bytes < 0:
            raise ValueError("eager_threshold_bytes must be >= 0")
        for a, b in zip(self.segments, self.segments[1:]):
            if a.max_bytes != b.min_bytes:
                raise ValueError("segments must be contiguous and sorted")
        if len(self.msg_bytes) != len(self.one_way_s):
            raise ValueError("msg_bytes and one_way_s differ in length")
        if (self.shaper_rate_bytes_per_s is None) != (self.shaper_burst_bytes is None):
            raise ValueError("shaper_rate_bytes_per_s and shaper_burst_bytes go together")
        _positive("shaper_rate_bytes_per_s", self.shaper_rate_bytes_per_s)
        _positive("shaper_burst_bytes", self.shaper_burst_bytes, allow_zero=True)
        _positive("shaper_header_bytes", self.shaper_header_bytes, allow_zero=True)
        _positive("exchange_excess_s", self.exchange_excess_s, allow_zero=True)
        if self.shaper_header_bytes is not None and self.shaper_rate_bytes_per_s is None:
            raise ValueError("shaper_header_bytes needs shaper_rate_bytes_per_s")
        if len(self.pollution_bytes) != len(self.pollution_excess_s):
            raise ValueError("pollution_bytes and pollution_excess_s differ in length")
        pb, pe = np.asarray(self.pollution_bytes, float), np.asarray(self.pollution_excess_s, float)
        if pb.size and not (np.all(np.isfinite(pb)) and pb[0] > 0 and np.all(np.diff(pb) > 0)):
            raise ValueError("pollution_bytes must be positive and ascending")
        if pe.size and not (np.all(np.isfinite(pe)) and pe[0] >= 0 and np.all(np.diff(pe) >= 0)):
            raise ValueError("pollution_excess_s must be >= 0 and non-decreasing")

    @property
    def shaped(self) -> bool:
        return self.shaper_rate_bytes_per_s is not None

    def pingpong_one_way_s(self, msg_bytes: Any) -> np.ndarray:
        """One-way time of a two-rank ping-pong in its steady state, overheads included: what the
        network probe measures (half a round trip). Unshaped: ``W(m) + o_s + o_r``. Behind a
        shaper each side's bucket refills only during the other side's turn, so below two buckets
        a round trip takes m / r (one-way m / 2r, latency hidden in the token wait); above, each
        turn starts with a full bucket: ``W(0) + o + (m - b) / r``; never below the line (m counts
        the message's header tokens too). Above the
        eager threshold the rendezvous handshake adds ``2 W(0)`` (as the replay prices it; the
        steady state is reached once a full bucket has drained, ~b / (m - 2 r W(m)) round trips)."""
        m = np.asarray(msg_bytes, dtype=np.float64)
        w0 = float(self.transfer_time_s(0.0))
        o = self.send_overhead_s + self.recv_overhead_s + np.where(m > self.eager_threshold_bytes, 2 * w0, 0.0)
        t = self.transfer_time_s(m) + o
        if not self.shaped:
            return t
        r, b = self.shaper_rate_bytes_per_s, self.shaper_burst_bytes
        tokens = m + (self.shaper_header_bytes or 0.0)
        return np.maximum.reduce([t, tokens / (2 * r), w0 + o + (tokens - b) / r])

    def transfer_time_s(self, msg_bytes: Any) -> np.ndarray:
        """One-way wire time (excluding send/recv overheads) for an array of message sizes."""
        m = np.asarray(msg_bytes, dtype=np.float64)
        if not self.segments:
            return self.latency_s + m / self.bandwidth_bytes_per_s
        lo = np.array([s.min_bytes for s in self.segments])
        idx = np.clip(np.searchsorted(lo, m, side="right") - 1, 0, len(self.segments) - 1)
        lat = np.array([s.latency_s for s in self.segments])[idx]
        bw = np.array([s.bandwidth_bytes_per_s for s in self.segments])[idx]
        return lat + m / bw


@dataclass(frozen=True, kw_only=True)
class CollectiveCost:
    """Measured time of one collective: op, bytes per rank, ranks -> seconds (the fit's quantile
    of the repetitions); ``excess_s``: what it cost beyond its algorithm's messages on the fitted
    links (2-rank rows, pmac.calibrate_collectives; None where not calibrated; negative where the
    library's call costs less than those messages)."""

    op: str
    msg_bytes: int
    n_ranks: int
    time_s: float
    spread_frac: float | None = None
    placement: str = "intra_node"
    excess_s: float | None = None

    def __post_init__(self):
        if self.op not in COLLECTIVE_OPS:
            raise ValueError(f"unknown collective '{self.op}' (known: {', '.join(COLLECTIVE_OPS)})")
        _positive("collective time_s", self.time_s)
        if self.excess_s is not None and not np.isfinite(self.excess_s):
            raise ValueError(f"collective excess_s must be finite, got {self.excess_s!r}")


#: how a network probe placed its bcast roots (NetworkModel.bcast_root)
BCAST_ROOTS = ("fixed", "rotating")
#: how a network probe timed its collectives (NetworkModel.collective_loop)
COLLECTIVE_LOOPS = ("mpi4py", "compiled")


@dataclass(frozen=True, kw_only=True)
class NetworkModel:
    intra_node: LinkModel | None = None
    inter_node: LinkModel | None = None
    collectives: tuple[CollectiveCost, ...] = ()
    mpi_library: str = ""
    #: optional topology for contention: a SimGrid platform file or a generator spec
    topology: dict[str, Any] | None = None
    #: the MPI thread level the probe ran at ('single' or 'multiple'; '' not recorded). MPICH
    #: and Open MPI lock only at MPI_THREAD_MULTIPLE, and MPICH then gives up its shared-memory
    #: collectives: on devbox a 2-rank 8 B allreduce costs 0.3 us single, 1.7 us multiple
    thread_level: str = ""
    #: how the probe timed its 2-rank bcast rows: 'fixed' (root 0 every call: probes before 27 Nov
    #: 2026; the root runs ahead and the loop times draining queued messages) or 'rotating' (the
    #: root moves to the next rank every call, probes/network.collective_call). The collective
    #: excess replays the loop the same way (pmac.calibrate_collectives)
    bcast_root: str = "fixed"
    #: how the probe timed the collective rows: 'mpi4py' (interpreter loops, the one-rank floor
    #: taken off each row: probes before 28 Nov 2026) or 'compiled' (numba loops calling the C
    #: library, probes/network.compiled_collectives: a row is what a C program's call costs).
    #: pmac.fit_network.fit_collectives reads it when it refits a profile from its raw rows
    collective_loop: str = "mpi4py"
    #: what a call from a Python interpreter (an mpi4py program) costs beyond the same call from
    #: compiled code and beyond its own instructions, which a memory signature counts in its burst:
    #: the network probe's ``interpreter`` test (8 B Allreduce and Sendrecv between two ranks,
    #: pmac.fit_network.fit_interpreter); collectives pay the first, point-to-point calls the
    #: second (pmac.interpreter). None: not probed (probes before 28 Nov 2026, the Python backend)
    interpreter_collective_s: float | None = None
    interpreter_p2p_s: float | None = None

    def __post_init__(self):
        check_thread_level("network.thread_level", self.thread_level)
        if self.bcast_root not in BCAST_ROOTS:
            raise ValueError(f"network.bcast_root must be one of {', '.join(BCAST_ROOTS)}, not {self.bcast_root!r}")
        if self.collective_loop not in COLLECTIVE_LOOPS:
            raise ValueError(f"network.collective_loop must be one of {', '.join(COLLECTIVE_LOOPS)}, "
                             f"not {self.collective_loop!r}")
        for f in ("interpreter_collective_s", "interpreter_p2p_s"):
            v = getattr(self, f)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"network.{f} must be a finite number >= 0 seconds, not {v!r}")


@dataclass(frozen=True, kw_only=True)
class OverlapModel:
    """How compute and memory time combine; a property of the machine, not of an application.

    ``kind`` names the model (see pmac.convolve); ``params`` its parameters; ``calibrated_on``
    lists the kernels or applications used, so a validation can exclude the one it predicts.
    """

    kind: str
    params: dict[str, float] = field(default_factory=dict)
    calibrated_on: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MachineProfile:
    name: str
    description: str = ""
    node: NodeModel | None = None
    network: NetworkModel | None = None
    overlap: OverlapModel | None = None
    #: nodes in the machine (for placement of ranks; cores per node from node.n_cores)
    n_nodes: int = 1
    #: sidecar with every probe repetition, relative to the YAML file
    raw_file: str | None = None
    raw_sha256: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    #: ranks per node when a prediction is not told (None: node.n_cores). The emulated TCP
    #: machines run one rank per namespace node although each namespace sees every core.
    ranks_per_node: int | None = None
    #: the same network measured at other MPI thread levels (each with its thread_level; the
    #: topology is the main network's): a prediction takes the one of the application's level
    network_variants: tuple[NetworkModel, ...] = ()

    def __post_init__(self):
        if not self.name or "/" in self.name:
            raise ValueError(f"invalid machine name {self.name!r}")
        if self.n_nodes <= 0:
            raise ValueError("n_nodes must be positive")
        if self.ranks_per_node is not None and self.ranks_per_node <= 0:
            raise ValueError("ranks_per_node must be positive")
        if self.network_variants:
            if self.network is None:
                raise ValueError("network_variants without a network")
            nets = (self.network, *self.network_variants)
            classes = [thread_level_class(n.thread_level) for n in nets]
            if "" in classes or len(set(classes)) != len(classes):
                got = ", ".join(n.thread_level or "''" for n in nets)
                raise ValueError(f"network and network_variants need distinct thread levels (single, multiple), "
                                 f"got {got}")

    def network_for(self, thread_level: str) -> tuple[NetworkModel | None, str | None]:
        """The network measured at the class of ``thread_level`` (pmac.mpi.thread_level_class),
        and a note when the profile has none there and its main network stands in. An unknown
        level (``''``: traces of older shims, imported traces) or a profile that does not say its
        level takes the main network without a note."""
        want = thread_level_class(thread_level)
        if self.network is None or not want:
            return self.network, None
        nets = (self.network, *self.network_variants)
        for net in nets:
            if thread_level_class(net.thread_level) == want:
                if net is not self.network and net.topology is None and self.network.topology is not None:
                    net = dataclasses.replace(net, topology=self.network.topology)
                return net, None
        if not self.network.thread_level:
            return self.network, None
        return self.network, (f"machine '{self.name}' has no network measured at MPI_THREAD_{want.upper()} "
                              f"(the application's level): priced with MPI_THREAD_"
                              f"{self.network.thread_level.upper()}'s, where collectives can cost several times "
                              "more or less (pmac probe measures both)")

    @property
    def cpu_model(self) -> str | None:
        """The CPU the profile describes: its node's, else the one its provenance was made on."""
        return self.node.cpu_model if self.node else self.provenance.get("cpu_model")

    def missing(self, sections: tuple[str, ...] = ("node", "node.compute", "network.intra_node",
                                                    "network.inter_node")) -> list[str]:
        """The dotted section names among ``sections`` that this profile lacks."""
        out = []
        for sec in sections:
            obj: Any = self
            for part in sec.split("."):
                obj = getattr(obj, part, None) if obj is not None else None
            if obj is None or obj == ():
                out.append(sec)
        return out

    def require(self, *sections: str, needed_by: str = "") -> None:
        lacking = self.missing(tuple(sections))
        if lacking:
            raise MissingSectionError(f"machine '{self.name}'", lacking[0], needed_by=needed_by)


# ---------------------------------------------------------------- raw repetitions sidecar

#: Tables of the raw sidecar: one row per repetition, nothing aggregated away.
RAW_TABLES = {
    "bandwidth": TableSpec(name="bandwidth", columns=(
        ("access", "U16"), ("n_cores", "int32"), ("working_set_bytes", "int64"),
        ("rep", "int32"), ("bandwidth_bytes_per_s", "float64"))),
    "latency": TableSpec(name="latency", columns=(
        ("working_set_bytes", "int64"), ("rep", "int32"), ("latency_s", "float64"))),
    "pingpong": TableSpec(name="pingpong", columns=(
        ("placement", "U16"), ("test", "U16"), ("msg_bytes", "int64"), ("rep", "int32"), ("time_s", "float64"))),
    "collective": TableSpec(name="collective", columns=(
        ("placement", "U16"), ("op", "U16"), ("msg_bytes", "int64"), ("n_ranks", "int32"),
        ("rep", "int32"), ("time_s", "float64"))),
    # source: which of a pooled profile's probes a row came from (pmac.pool.pool_raw; 0 in a probe's
    # own table and in tables written before 29 Nov 2026), so that what is derived from several
    # kernels is derived within each probe (pmac.probe.compute_model)
    "compute": TableSpec(name="compute", columns=(
        ("source", "int32"), ("probe", "U24"), ("param", "float64"), ("rep", "int32"), ("value", "float64")),
        added=(("source", 0),)),
    # the overlap probe (probes/memory.py measure_overlap): seconds per sweep of a[i] = f_chains(b[i])
    "overlap": TableSpec(name="overlap", columns=(
        ("working_set_bytes", "int64"), ("chains", "int32"), ("n_elements", "int64"), ("rep", "int32"),
        ("time_s", "float64"))),
    # the instruction-fetch probe (probes/fetch.py): seconds per 64-byte line of code by layout
    "fetch": TableSpec(name="fetch", columns=(
        ("pattern", "U16"), ("footprint_bytes", "int64"), ("rep", "int32"), ("seconds_per_line_s", "float64"))),
    # the 4 KiB-aliasing probe (probes/alias.py): seconds an element of each placement, per round
    "alias": TableSpec(name="alias", columns=(
        ("level", "U16"), ("n_cores", "int32"), ("working_set_bytes", "int64"), ("round", "int32"), ("placement", "U16"),
        ("seconds_per_element_s", "float64"))),
    # the noise probe (probes/noise.py): each fixed-work quantum of each core, back to back from the
    # core's start in its chunk (seconds from the chunk's earliest start), in integer nanoseconds
    "noise": TableSpec(name="noise", columns=(
        ("chunk", "int32"), ("core", "int32"), ("quantum", "int64"), ("start_s", "float64"), ("dt_ns", "int64"))),
}
#: the network probe's tables of a network variant (MachineProfile.network_variants) are stored
#: as ``pingpong_<level>`` and ``collective_<level>``; the main network's as plain ``pingpong``
NETWORK_RAW_TABLES = ("pingpong", "collective")
RAW_TABLES |= {f"{t}_{lv}": dataclasses.replace(RAW_TABLES[t], name=f"{t}_{lv}")
               for lv in THREAD_CLASSES for t in NETWORK_RAW_TABLES}


# ---------------------------------------------------------------- file I/O

def load_profile(path: str | Path) -> MachineProfile:
    """Load and validate ``machines/<name>.yaml``."""
    path = Path(path)
    body = check_document(read_yaml(path), KIND, path=path)
    return from_dict(MachineProfile, body, path=path)


def save_profile(profile: MachineProfile, path: str | Path) -> None:
    """Write atomically: a failure leaves any previous file intact."""
    save_document(path, KIND, to_dict(profile))


def check_machine_name(name: str) -> None:
    """InputError unless ``name`` can name a profile written as DIR/NAME.yaml (and NAME.raw.npz):
    a plain file name, not hidden."""
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"invalid machine name {name!r} (a plain file name, no '/')")


def not_this_machine(profile: MachineProfile) -> str | None:
    """Why ``profile`` does not describe the machine this process runs on, or None when it does:
    probed on this host (name) with this CPU (pmac.schema.cpu_model). What compares a profile's
    predictions with runs measured here needs it (a VM keeps its name on other hardware)."""
    import socket

    from .schema import cpu_model

    host = profile.provenance.get("host")
    cpu = profile.cpu_model
    here_host, here_cpu = socket.gethostname(), cpu_model()
    if host != here_host:
        return f"probed on host {host!r}, this is {here_host!r}"
    if cpu != here_cpu:
        return f"probed on CPU {cpu!r}, this machine has {here_cpu!r}"
    return None


#: provenance keys of a profile that took its node or network from another profile
DERIVED_PROVENANCE = ("combined_from", "node_profile")


def this_machines_profile(directory: str | Path) -> Path | None:
    """The first profile (by file name) in ``directory`` that describes this machine
    (:func:`not_this_machine`), a probe of it before one built from other profiles (pmac combine,
    the emulated variants of bench/emulated_profiles: their network is another machine's); None
    when none does. Unreadable files are skipped."""
    derived = None
    for path in sorted(Path(directory).glob("*.yaml")):
        try:
            prof = load_profile(path)
        except InputError:
            continue
        if not_this_machine(prof) is None:
            if not any(k in (prof.provenance or {}) for k in DERIVED_PROVENANCE):
                return path
            derived = derived or path
    return derived


def default_profile_of_this_machine(directory: str | Path) -> Path:
    """The default ``--machine`` of a script that measures this machine: :func:`this_machines_profile`
    of ``directory``; InputError saying what to do when none describes it."""
    from .schema import cpu_model

    found = this_machines_profile(directory)
    if found is None:
        raise InputError(f"no profile in {directory} was probed on this machine ({cpu_model()}): "
                         "pmac probe --name NAME, then --machine machines/NAME.yaml")
    return found


def raw_path(profile: MachineProfile, yaml_path: str | Path) -> Path | None:
    if profile.raw_file is None:
        return None
    return Path(yaml_path).parent / profile.raw_file


def load_raw(profile: MachineProfile, yaml_path: str | Path) -> dict:
    """The raw probe tables of a profile (its sidecar, checked against the recorded sha256), as
    DataFrames by table name; empty when the profile has none (imported or combined profiles)."""
    p = raw_path(profile, yaml_path)
    if p is None:
        return {}
    verify_raw(profile, yaml_path)
    return load_tables(p, RAW_TABLES)


def verify_raw(profile: MachineProfile, yaml_path: str | Path) -> None:
    p = raw_path(profile, yaml_path)
    if p is None:
        return
    if not p.exists():
        raise InputError(f"raw sidecar '{profile.raw_file}' is missing", path=yaml_path)
    if profile.raw_sha256 and sha256_file(p) != profile.raw_sha256:
        raise InputError(f"raw sidecar '{profile.raw_file}' does not match its recorded sha256", path=yaml_path)


#: provenance keys that describe the node's memory probe and the statistic its rates are at (kept at
#: the top by :func:`combine`)
NODE_PROVENANCE = ("pages", "transparent_hugepage", "statistic")


def node_probe_provenance(profile: MachineProfile) -> dict:
    """What ``profile``'s provenance says of how its node's memory was probed (NODE_PROVENANCE):
    for a profile that takes its node from another one and writes a provenance of its own."""
    prov = profile.provenance or {}
    return {k: prov[k] for k in NODE_PROVENANCE if k in prov}


def combine(node_from: MachineProfile, network_from: MachineProfile, *, name: str,
            description: str = "") -> MachineProfile:
    """A complete profile from the node of one profile and the network of another.

    The inputs' provenances are kept whole under ``node_provenance`` / ``network_provenance``; what
    describes how the node's memory was probed (``pages``, ``transparent_hugepage``) is also lifted
    to the top, where pmac predict's pages note, pmac show and pmac pool read it."""
    node_from.require("node", needed_by="combine")
    network_from.require("network", needed_by="combine")
    prov = {"combined_from": {"node": node_from.name, "network": network_from.name},
            "node_provenance": node_from.provenance, "network_provenance": network_from.provenance}
    prov.update(node_probe_provenance(node_from))
    return dataclasses.replace(
        node_from, name=name, network=network_from.network, network_variants=network_from.network_variants,
        description=description or f"node of {node_from.name}, network of {network_from.name}", provenance=prov)

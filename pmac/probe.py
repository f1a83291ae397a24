"""``pmac probe``: run the node and network probes, fit them, write the machine profile.

Order: memory bandwidth and latency, compute (in this process, numba kernels from ``probes/``),
then the network (:func:`pmac.probe_network.measure_networks`, which launches its own two-rank
runs, one per MPI thread level: single for the main network, multiple for its variant; or
:func:`~pmac.probe_network.measure_network` in place, at the job's level only, when this process is
already one rank of an ``mpiexec`` job).

Nothing is written until every probe has finished: the raw sidecar ``NAME.raw.npz`` and
``NAME.yaml`` are first written beside their targets under temporary names and then renamed,
the sidecar first, with SIGINT/SIGTERM held back between the two renames. An interrupted or
failed probe therefore leaves any previous profile and sidecar as they were.

Conditions that are not errors but change the profile, recorded in ``provenance.warnings``:
a point that never stabilised (with its spread), no MPI (the network section is skipped), a
single core (no all-cores curves; no intra-node ping-pong), no cache information from the OS.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .errors import InputError, PmacError, ProbeError, ToolMissingError
from .fit import at_slow_quantile, curves_from_raw, fit_node, latency_from_raw, os_caches
from .noise import fit as fit_noise
from .profile import RAW_TABLES, AliasModel, ComputeModel, FetchModel, MachineProfile, NodeModel, check_machine_name, save_profile
from .schema import cpu_model, ensure_folder, new_file_mode, provenance, sha256_file
from .table import save_tables

Progress = Callable[[float, str], None]

#: share of the progress bar per phase
_PHASES = {"memory": (0.0, 0.62), "compute": (0.62, 0.68), "overlap": (0.68, 0.71), "fetch": (0.71, 0.72),
           "alias": (0.72, 0.73), "network": (0.73, 1.0)}


def clock_hz() -> float | None:
    """Nominal clock: sysfs cpuinfo_max_freq, else /proc/cpuinfo 'cpu MHz' (None if neither)."""
    try:
        return float(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) * 1e3
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1]) * 1e6
    except (OSError, ValueError):
        pass
    return None


def _sub(progress: Progress | None, phase: str) -> Progress:
    lo, hi = _PHASES[phase]

    def cb(fraction: float, message: str) -> None:
        if progress:
            progress(lo + (hi - lo) * min(max(fraction, 0.0), 1.0), message)
    return cb


#: compute values: the median of this many best repetitions of a point (over all rounds)
COMPUTE_BEST = 5
#: where the compute probe's rounds run (one each, in this order, as many as it has rounds: 2
#: quick, 4 full): spread over the node probe's ~110 s rather than back to back (~11 s). Why: a
#: shared VM's core can run slow for a minute; the 26 Nov probe of the Xeon VM ran all its four
#: rounds in such a spell (scalar 4.6-4.8 Gflop/s, against 6.7-6.9 in three probes around it and
#: 1.22x its value in bench/accuracy's state checks minutes before), and predicted nbody +24-28 %
COMPUTE_ROUND_PLACES = ("before the memory probe", "after the memory probe", "after the overlap probe",
                        "after the fetch probe")
#: the progress bar's span of each round (the compute phase's own span for the one after memory;
#: the others stand still at their place, so the bar never runs back)
_ROUND_SPAN = {"before the memory probe": (0.0, 0.0), "after the memory probe": _PHASES["compute"],
               "after the overlap probe": (_PHASES["overlap"][1],) * 2,
               "after the fetch probe": (_PHASES["fetch"][1],) * 2}


#: where the aliasing probe's rounds run in a node probe, and how many at each (quick, full: 5 and 15
#: in all): spread over the last part of the node probe rather than back to back at its end. Why: on
#: the Zen 4 VM of 2 Dec 2026 the probe's ratio of an aliased loop's time to an unaliased one's
#: agreed within a few points over its 15 rounds (about a minute) and moved from probe to probe (the
#: medians of twelve probes from -0.03 to +6.9 in L3 with both cores busy), and by hand it moved with
#: the minute, not with the buffer (bench/results/README.md): a state of the host, which one minute
#: of rounds samples once
ALIAS_ROUND_PLACES = (("after the memory probe", (2, 5)), ("after the overlap probe", (2, 5)),
                      ("after the fetch probe", (1, 5)))


class _AliasChunks:
    """The aliasing probe's rounds, run a chunk at a time at :data:`ALIAS_ROUND_PLACES` (numbered on
    across the chunks, a new buffer each); ``table()`` once all have run (the model: alias_model)."""

    #: the progress bar's span at each place (standing still before the last, so it never runs back)
    _SPAN = {"after the memory probe": (_PHASES["compute"][1],) * 2, "after the overlap probe": (_PHASES["overlap"][1],) * 2,
             "after the fetch probe": _PHASES["alias"]}

    def __init__(self, quick: bool, progress: Progress | None):
        self._quick, self._progress, self._tables = quick, progress, []
        self._done = 0

    def run(self, place: str, caches) -> None:
        from probes import alias as pa

        n = dict(ALIAS_ROUND_PLACES)[place][0 if self._quick else 1]
        lo, hi = self._SPAN[place]

        def report(f: float, msg: str) -> None:
            if self._progress:
                self._progress(lo + (hi - lo) * min(max(f, 0.0), 1.0), f"{msg} ({place})")
        res = pa.run(alias_levels(caches), quick=self._quick, rounds=n, first_round=self._done, progress=report)
        self._tables.append(pd.DataFrame(res["rows"]))
        self._done += n

    def table(self) -> pd.DataFrame:
        return RAW_TABLES["alias"].coerce(pd.concat(self._tables, ignore_index=True))


class _ComputeRounds:
    """The compute probe's rounds, run one at a time at COMPUTE_ROUND_PLACES; ``rows()`` numbers
    the repetitions of each point across all of them (the best-of rule pools them)."""

    def __init__(self, quick: bool, threshold: float, progress: Progress | None):
        from probes import compute as pc
        self._pc, self._quick, self._threshold, self._progress = pc, quick, threshold, progress
        self.total = 2 if quick else 4
        self._rows: list = []

    def run(self, place: str) -> bool:
        """Run the round at ``place``; False when this probe has no round there (quick: two)."""
        k = COMPUTE_ROUND_PLACES.index(place)
        if k >= self.total:
            return False
        lo, hi = _ROUND_SPAN[place]

        def report(f: float, m: str) -> None:
            if self._progress:
                self._progress(lo + (hi - lo) * min(max(f, 0.0), 1.0), f"{m} (round {k + 1}, {place})")
        self._rows += self._pc.run(quick=self._quick, rounds=1, threshold=self._threshold, progress=report)
        return True

    def rows(self) -> pd.DataFrame:
        df = pd.DataFrame(self._pc.tables(self._rows))
        df["rep"] = df.groupby(["probe", "param"]).cumcount().astype(np.int32)
        return RAW_TABLES["compute"].coerce(df)


#: how the probe's buffers get their pages by default (``pmac probe --pages``; probes/memory.py
#: ``set_pages``): huge pages asked for, as every profile before the option was probed; a run with the
#: probes on 4 KiB pages (``default``) was no more accurate on the Xeon VM, where no example case is
#: priced at the memory plateau (docs/accuracy.md)
DEFAULT_PAGES = "huge"

#: seconds of the noise probe's chunk, one beside each compute round (quick, full)
NOISE_CHUNK_S = (0.1, 0.25)


class _NoiseChunks:
    """The noise probe (probes/noise.py) in chunks beside the compute rounds: the host's states
    over the whole probe rather than one moment; the quantum is calibrated once, so every chunk
    runs the same work."""

    def __init__(self, quick: bool):
        from probes import noise as pn
        self._pn, self._seconds, self._sweeps, self._rows = pn, NOISE_CHUNK_S[0 if quick else 1], None, []

    def run(self) -> None:
        if self._sweeps is None:
            self._sweeps = self._pn.calibrate()
        res = self._pn.run(self._seconds, sweeps=self._sweeps)
        self._rows.append(pd.DataFrame(self._pn.rows(res, chunk=len(self._rows))))

    def table(self) -> pd.DataFrame:
        return RAW_TABLES["noise"].coerce(pd.concat(self._rows, ignore_index=True))


#: the kernels divider_beta is fitted on: divpar since 29 Nov 2026, divmix before (probes/compute.py)
_DIVIDER_KERNELS = ("divpar", "divmix")


def compute_model(rows: pd.DataFrame, isa: dict, *, best: int = COMPUTE_BEST,
                  slow_quantile: float | None = None) -> ComputeModel:
    """ComputeModel from the raw ``compute`` table: per point the median of its ``best`` best
    repetitions over all rounds (highest rates, lowest branch costs: a neighbour on a shared core
    only ever makes a repetition worse), as the memory probe's stop rule does; with
    ``slow_quantile``, that quantile of all of them (pmac.fit.at_slow_quantile, pmac.pool.refit).
    A pooled table's rates come from all its rows; what is derived from several kernels at once
    comes from each probe's own rows (:func:`within_probes`)."""
    model = _compute_model(rows, isa, best=best, slow_quantile=slow_quantile)
    if "source" in rows.columns and rows["source"].nunique() > 1:
        return within_probes(model, rows, isa, best=best, slow_quantile=slow_quantile)
    return model


def within_probes(model: ComputeModel, rows: pd.DataFrame, isa: dict, **statistic) -> ComputeModel:
    """``model`` (fitted from every row of a pooled ``compute`` table, column ``source``: the probe
    a row came from, pmac.pool.pool_raw) with its ``divider_beta`` and all-cores slowdowns derived
    within each probe, then the median over the probes that ran their kernels.

    Each is a ratio of kernels: the divpar kernels against the divider and scalar rates, a kernel
    with every core busy against it alone. Pooled, a ratio's two sides would come from different
    probes wherever only some probes ran one side (the divpar kernels since 29 Nov 2026, the
    ``alone:`` rows since 09:00 that day); a host that ran slower on one day than another then
    biases it (the 28 Nov probes pooled with four of 29 Nov gave divider_beta 0.735, the four
    alone 0.41). A probe lacking a point another has (e.g. the loop kernel replaced by
    pmac.state.with_loop_reps) takes the pool's rows of it, except those of the kernels a ratio is
    derived from (divpar and divmix, ``all:`` and ``alone:`` rows): a probe without ``alone:``
    rows prices its slowdowns against its own one-core kernels, as it did alone, and a probe with
    divmix kernels derives its beta from them, not from another probe's divpar."""
    point = ["probe", "param"]
    keys = pd.MultiIndex.from_frame(rows[point])
    # never filled in: the kernels a ratio is derived from (a probe without them derives none)
    own_only = rows["probe"].isin(_DIVIDER_KERNELS) | rows["probe"].str.startswith(("all:", "alone:"))
    betas, slowdowns, n = [], {}, model.all_cores_n
    for _, own in rows.groupby("source", sort=True):
        lack = rows[~keys.isin(pd.MultiIndex.from_frame(own[point])) & ~own_only]
        one = _compute_model(pd.concat([own, lack], ignore_index=True), isa, **statistic)
        kinds = set(own["probe"].unique())
        if one.divider_beta is not None and kinds & set(_DIVIDER_KERNELS):
            betas.append(one.divider_beta)
        for k, r in zip(one.all_cores_kernels or (), one.all_cores_slowdown or ()):
            if f"all:{k}" in kinds:
                slowdowns.setdefault(k, []).append(r)
                n = one.all_cores_n
    out = dataclasses.replace(model, divider_beta=float(np.median(betas)) if betas else model.divider_beta)
    if slowdowns:
        out = dataclasses.replace(out, all_cores_n=n, all_cores_kernels=tuple(slowdowns),
                                  all_cores_slowdown=tuple(float(np.median(v)) for v in slowdowns.values()))
    return out


def _compute_model(rows: pd.DataFrame, isa: dict, *, best: int = COMPUTE_BEST,
                   slow_quantile: float | None = None) -> ComputeModel:
    from probes.memory import ending_reps

    def med(probe):
        g = rows[rows["probe"] == probe]
        if g.empty:
            raise ProbeError(f"compute probe '{probe}' produced no values")
        # rates: larger is better; times: smaller (an all: or alone: row in its kernel's unit)
        better = probe.split(":")[-1] not in ("branch", "chain", "divpar", "divmix")
        if slow_quantile is not None:
            return g.groupby("param", sort=True)["value"].agg(
                lambda v: at_slow_quantile(v.to_numpy(), slow_quantile, larger_is_better=better))
        return g.groupby("param", sort=True)["value"].agg(
            lambda v: float(np.median(ending_reps(v.to_numpy(), best, "best", larger_is_better=better))))

    sc, sv = med("flop_scalar"), med("flop_simd")
    dep, br, miss = med("dependency"), med("branch"), med("branch_miss")
    ds = med("divsqrt") if (rows["probe"] == "divsqrt").any() else None
    ch = med("chain") if (rows["probe"] == "chain").any() else None
    ind = float(med("flop_independent").iloc[0]) if (rows["probe"] == "flop_independent").any() else None
    fma = float(med("flop_fma").iloc[0]) if (rows["probe"] == "flop_fma").any() else None
    chain_add = float(ch[0.0]) if ch is not None and 0.0 in ch.index else None
    model = ComputeModel(
        isa=f"{isa['cpu_name']} (llvmlite {isa['llvmlite']})",
        flop_per_s_scalar=float(sc.iloc[0]), flop_per_s_simd=float(sv.iloc[0]),
        simd_width_bits=int(sv.index[0]), clock_hz=clock_hz(),
        dependency_distance=tuple(float(d) for d in dep.index),
        dependency_flop_per_s=tuple(float(v) for v in dep),
        branch_miss_frac=tuple(float(miss[p]) for p in br.index),
        branch_cost_s=tuple(float(v) for v in br),
        divsqrt_per_s=float(ds.iloc[0]) if ds is not None else None,
        chain_add_s=chain_add,
        chain_mul_s=float(ch[1.0]) if ch is not None and 1.0 in ch.index else None,
        flop_per_s_scalar_independent=ind, flop_per_s_scalar_fma=fma, **all_cores_slowdown(rows, med))
    # the divpar kernels (probes before 29 Nov 2026: divmix, probes/compute.py), their other work at
    # the price the convolver gives scalar flop
    mix = next((k for k in _DIVIDER_KERNELS if (rows["probe"] == k).any()), None)
    if ds is None or mix is None:
        return model
    return dataclasses.replace(model, divider_beta=divider_beta(
        med(mix), divsqrt_per_s=model.divsqrt_per_s, flop_per_s_scalar=model.scalar_rate,
        chain_add_s=chain_add, branch_s=float(br.iloc[0])))


def all_cores_slowdown(rows: pd.DataFrame, med) -> dict:
    """The ComputeModel fields of the ``all:KERNEL`` rows (probes/compute.py): per kernel measured
    both ways, its time a core with every core busy over its time alone, each at ``med``'s
    statistic (a point's value by param, as compute_model takes them). Its time alone: the
    ``alone:KERNEL`` rows, timed beside the busy ones in the same rounds, where the probe wrote
    them (since 29 Nov 2026 09:00); else the one-core kernel's own rows (the branch kernel's at
    p = 0, the chain's at its adds). In a pool, each probe's own (:func:`within_probes`). {}
    without ``all:`` rows (probes before 29 Nov 2026 05:00, one core)."""
    names, ratios, n = [], [], None
    for kernel in dict.fromkeys(p.removeprefix("all:") for p in rows["probe"].unique() if p.startswith("all:")):
        if not (rows["probe"] == kernel).any():
            continue
        busy = med(f"all:{kernel}")
        if (rows["probe"] == f"alone:{kernel}").any():      # timed beside the all-cores points
            alone = float(med(f"alone:{kernel}").iloc[0])
        else:
            alone = med(kernel)
            alone = float(alone[0.0] if kernel in ("branch", "chain") else alone.iloc[0])
        both = float(busy.iloc[-1])
        n = int(busy.index[-1])
        names.append(kernel)
        ratios.append(both / alone if kernel in ("branch", "chain") else alone / both)
    if not names:
        return {}
    return {"all_cores_n": n, "all_cores_kernels": tuple(names), "all_cores_slowdown": tuple(ratios)}


def divider_beta(kernels: pd.Series, *, divsqrt_per_s: float, flop_per_s_scalar: float,
                 chain_add_s: float | None, branch_s: float) -> float:
    """How far a core's divider and its other work overlap, from the ``divpar`` kernels (or a
    profile's former ``divmix`` ones): ``kernels``, seconds per element by k (probes/compute.py),
    each priced as the convolver prices a burst, the divider ``t_div = 2 / divsqrt_per_s`` an
    element, the other work ``t_other = max(flop / flop_per_s_scalar, chain_add_s) + branch_s``
    (its flop, its loop-carried adds, one predicted branch at the branch probe's p = 0 cost),
    measured ``t = max(t_div, t_other) + beta * min(t_div, t_other)``:
    beta as pmac.overlap.fit_beta fits the overlap model's (least squares on the relative error,
    one group per k), in [0, 1]. 0: the two run side by side as if on separate units; 1: one after
    the other.

    Measured rather than assumed 0: a core whose divider shares issue ports with the multipliers
    would run such a mix above the max. The Xeon VM of 26 Nov 2026 gave 0 in three probes (two
    ``python probes/compute.py --out F.npz`` read with compute_model, one ``pmac probe``): the
    kernels ran at the divider's time up to 8 terms and under their other work's price at 12 (this
    price is the flop_scalar probe's rate, which independent scalar flop outrun). ``flop_per_s_scalar``
    is the rate the convolver prices scalar flop at: the ``flop_independent`` kernel's where the
    probe ran it (ComputeModel.scalar_rate), so that beta is fitted against the same prices."""
    from probes.compute import DIVSQRT_PER_ELEMENT, divmix_other_flop

    from .overlap import fit_beta

    t_div = DIVSQRT_PER_ELEMENT / divsqrt_per_s
    rows = []
    for k, t in kernels.items():
        t_flop = divmix_other_flop(int(k)) / flop_per_s_scalar
        other = max(t_flop, chain_add_s or 0.0) + branch_s
        rows.append(dict(app=f"divider-mix:{int(k)}", max_s=max(t_div, other), min_s=min(t_div, other),
                         measured_s=float(t), memory_s=0.0, compute_s=0.0))
    return fit_beta(pd.DataFrame(rows))[0]


def fetch_model(rows: pd.DataFrame, l1i: dict | None, *, baseline_bytes: int, miss_bytes: int,
                source: str = "sysfs") -> FetchModel | None:
    """FetchModel from the raw ``fetch`` table (probes/fetch.py): per footprint and layout the
    median seconds per line; ``miss_s`` = random layout at ``miss_bytes`` minus at
    ``baseline_bytes`` (floored at 0), ``miss_sequential_s`` alike. None without the L1i size."""
    if l1i is None or not len(rows):
        return None
    med = rows.groupby(["pattern", "footprint_bytes"])["seconds_per_line_s"].median()

    def price(pattern: str) -> float:
        return max(0.0, float(med[(pattern, miss_bytes)] - med[(pattern, baseline_bytes)]))

    fp = sorted(int(x) for x in rows["footprint_bytes"].unique())
    return FetchModel(l1i_size_bytes=int(l1i["size_bytes"]), l1i_line_bytes=int(l1i.get("line_bytes") or 64),
                      l1i_ways=int(l1i.get("ways") or 0), miss_s=price("random"),
                      miss_sequential_s=price("sequential"), footprint_bytes=tuple(float(x) for x in fp),
                      line_random_s=tuple(float(med[("random", x)]) for x in fp),
                      line_sequential_s=tuple(float(med[("sequential", x)]) for x in fp), source=source)


def measure_fetch(*, quick: bool, progress: Progress | None = None
                  ) -> tuple[FetchModel | None, pd.DataFrame | None, list[str], dict]:
    """The instruction-fetch probe: (model, raw table, warnings, details); no model off x86-64
    or without the L1i size (a warning says which)."""
    from probes import fetch as pf

    try:
        res = pf.run(quick=quick, progress=_sub(progress, "fetch"))
    except pf.UnsupportedPlatform as exc:
        return None, None, [f"no instruction-fetch probe ({exc}): no instruction-cache term"], {}
    raw = RAW_TABLES["fetch"].coerce(pd.DataFrame(res["rows"]).drop(columns=["seconds_per_instruction_s"]))
    warnings = [] if res["l1i"] else ["no L1 instruction-cache size from the OS: no instruction-cache term"]
    model = fetch_model(raw, res["l1i"], baseline_bytes=res["baseline_footprint_bytes"],
                        miss_bytes=res["miss_footprint_bytes"])
    details = {"baseline_footprint_bytes": res["baseline_footprint_bytes"],
               "miss_footprint_bytes": res["miss_footprint_bytes"]}
    return model, raw, warnings, details


def alias_model(rows: pd.DataFrame, statistic: str = "best") -> AliasModel | None:
    """AliasModel from the raw ``alias`` table (probes/alias.py): per level and core count, the
    median over the rounds of aliased / apart - 1 times the apart time at ``statistic`` (the
    fastest rounds' for ``best``, else the median; probes.alias.stalls). None without one-core rows."""
    from probes import alias as pa

    if rows is None or not len(rows):
        return None
    st = pa.stalls(rows.to_dict("records"), statistic)
    ws = rows.groupby(["level", "n_cores"], sort=False)["working_set_bytes"].first()
    one = [lv for lv, c in st if c == 1]
    if not one:
        return None
    n_all = max(c for _, c in st)
    allc = [lv for lv, c in st if c == n_all] if n_all > 1 else []
    if allc != one:
        allc = []   # all cores not measured at every level: not used
    return AliasModel(levels=tuple(one), working_set_bytes=tuple(int(ws[(lv, 1)]) for lv in one),
                      stall_s=tuple(float(st[(lv, 1)]) for lv in one), n_cores_all=n_all if allc else 1,
                      working_set_allcores_bytes=tuple(int(ws[(lv, n_all)]) for lv in allc),
                      stall_allcores_s=tuple(float(st[(lv, n_all)]) for lv in allc))


def alias_levels(caches) -> list[tuple[str, int, int]]:
    """The aliasing probe's levels (probes/alias.py ``run``): (name, size_bytes, shared_by_cores)
    of the data cache levels of ``caches`` (CacheLevel, smallest first)."""
    from .capacity import is_data_level

    return [(c.name, int(c.size_bytes), int(c.shared_by_cores)) for c in caches if is_data_level(c.name)]


def measure_alias(caches, *, quick: bool, progress: Progress | None = None, passes: int = 1, gap_s: float = 0.0,
                  statistic: str = "best") -> tuple[AliasModel | None, pd.DataFrame | None]:
    """The 4 KiB-aliasing probe at a working set in each data cache level of ``caches``
    (CacheLevel, smallest first) and in memory, on one core and on all: (model, raw table).
    ``passes``: run it that many times, ``gap_s`` apart, the rounds of all pooled (numbered on)."""
    from probes import alias as pa

    levels = alias_levels(caches)
    tables = []
    sub = _sub(progress, "alias")
    for k in range(max(int(passes), 1)):
        if k:
            time.sleep(max(float(gap_s), 0.0))
        res = pa.run(levels, quick=quick, first_round=sum(len(x["round"].unique()) for x in tables),
                     progress=lambda f, msg, k=k: sub((k + f) / max(int(passes), 1), f"pass {k + 1}: {msg}"))
        tables.append(pd.DataFrame(res["rows"]))
    raw = RAW_TABLES["alias"].coerce(pd.concat(tables, ignore_index=True))
    return alias_model(raw, statistic), raw


def measure_node(*, quick: bool, progress: Progress | None = None, memory_params=None):
    """Run the memory and compute probes. Returns (NodeModel, raw tables, warnings, details)."""
    from probes import compute as pc
    from probes import memory as pm

    p = (memory_params or (pm.Params.quick() if quick else pm.Params())).resolved()   # max_bytes for this node
    n_cores = pm.n_cores_available()
    warnings: list[str] = []
    if n_cores < 2:
        warnings.append("single core: no all-cores bandwidth curves")
    t0 = time.monotonic()
    compute = _ComputeRounds(quick, p.threshold, progress)
    noise = _NoiseChunks(quick)
    if compute.run("before the memory probe"):   # a noise chunk beside each compute round
        noise.run()
    bw, lat = pm.run(p, progress=_sub(progress, "memory"))
    t1 = time.monotonic()
    for r in bw:
        if not r.stable:
            warnings.append(f"bandwidth {r.access} {r.n_cores} core(s) {r.working_set_bytes} B did not stabilise: "
                            f"spread {r.spread_frac:.1%} after {len(r.bandwidth_bytes_per_s)} repetitions")
    t = pm.tables(bw, lat)
    raw = {"bandwidth": RAW_TABLES["bandwidth"].coerce(pd.DataFrame(t["bandwidth"])),
           "latency": RAW_TABLES["latency"].coerce(pd.DataFrame(t["latency"]))}
    # the caches first: the aliasing probe's working sets follow them
    curves = curves_from_raw(raw["bandwidth"], window=p.window, rule=p.stop_rule)
    latency = latency_from_raw(raw["latency"], window=p.window, rule=p.stop_rule)
    oc, src = os_caches(n_cores)
    fit = fit_node(curves, latency, n_cores=n_cores, os_view=oc, os_source=src)
    if not oc:
        warnings.append("no cache information from the OS (sysfs, lscpu): cache geometry from the measured plateaus only")
    alias_chunks = _AliasChunks(quick, progress)
    if compute.run("after the memory probe"):
        noise.run()
    alias_chunks.run("after the memory probe", fit.caches)
    t2 = time.monotonic()
    isa = pc.isa()
    # the overlap probe: one working set per level, memory- to compute-bound (pmac.overlap)
    rows = []
    sizes = pm.overlap_working_sets([c.size_bytes for c in fit.caches])
    todo = [(ws, r) for ws in sizes for r in pm.OVERLAP_CHAINS]
    ov_progress = _sub(progress, "overlap")
    for i, (ws, r) in enumerate(todo):
        ov_progress(i / len(todo), f"overlap {ws // 1024} KiB, {r} chains")
        n, reps = pm.measure_overlap(ws, r, p)
        rows += [dict(working_set_bytes=ws, chains=r, n_elements=n, rep=j, time_s=t) for j, t in enumerate(reps)]
    raw["overlap"] = RAW_TABLES["overlap"].coerce(pd.DataFrame(rows))
    if compute.run("after the overlap probe"):
        noise.run()
    alias_chunks.run("after the overlap probe", fit.caches)
    fetch, fetch_raw, fetch_warnings, fetch_details = measure_fetch(quick=quick, progress=progress)
    warnings += fetch_warnings
    if fetch_raw is not None:
        raw["fetch"] = fetch_raw
    if compute.run("after the fetch probe"):
        noise.run()
    alias_chunks.run("after the fetch probe", fit.caches)
    raw["alias"] = alias_chunks.table()
    alias = alias_model(raw["alias"])
    raw["compute"] = compute.rows()
    raw["noise"] = noise.table()
    # the node once every compute round has run (the model is fitted on all of them)
    node = NodeModel(cpu_model=cpu_model(), n_cores=n_cores, caches=fit.caches, memory=fit.memory,
                     compute=compute_model(raw["compute"], isa), bandwidth_curves=tuple(curves),
                     latency_curve=latency, fetch=fetch, noise=fit_noise(raw["noise"]), alias=alias)
    t3 = time.monotonic()
    details = {
        "memory_probe": {**p.to_dict(), "all_cores": "numba prange threads, one per core, each on its own slice"},
        "transparent_hugepage": pm.thp_setting(),
        "buffer_align_bytes": pm.BUFFER_ALIGN_BYTES,
        "isa": isa,
        "os_caches": {"source": src, "levels": [dataclasses.asdict(c) for c in oc]},
        "fit_notes": list(fit.notes),
        "fetch_probe": fetch_details,
        "alias_probe": {"rounds_at": {place: n[0 if quick else 1] for place, n in ALIAS_ROUND_PLACES}},
        "phase_duration_s": {"memory_and_compute_round_1": round(t1 - t0, 1),
                             "compute_round_2_and_alias_rounds_1": round(t2 - t1, 1),
                             "overlap_and_fetch_and_compute_rounds_3_4_and_alias_rounds_2_3": round(t3 - t2, 1)},
    }
    return node, raw, warnings, details


def write_pair(profile: MachineProfile, raw: dict[str, pd.DataFrame], yaml_path: Path) -> MachineProfile:
    """Write ``profile`` to ``yaml_path`` with ``raw`` as its sidecar (NAME.raw.npz beside it, its
    sha256 recorded); the previous pair stays intact unless both renames happen."""
    yaml_path.parent.mkdir(parents=True, exist_ok=True)
    raw_final = yaml_path.with_name(f"{profile.name}.raw.npz")
    fd, tmp = tempfile.mkstemp(prefix=f".{raw_final.name}.", dir=yaml_path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        save_tables(tmp, raw, RAW_TABLES, compress=True)   # the noise series: 3.2 MB plain, 0.4 zipped
        profile = dataclasses.replace(profile, raw_file=raw_final.name, raw_sha256=sha256_file(tmp))
        fd, tmp_yaml = tempfile.mkstemp(prefix=f".{yaml_path.name}.", dir=yaml_path.parent)
        os.close(fd)
        tmp_yaml = Path(tmp_yaml)
        try:
            save_profile(profile, tmp_yaml)
            for f in (tmp, tmp_yaml):  # mkstemp makes 0600 files: give them the usual mode
                os.chmod(f, new_file_mode())
            blocked = {signal.SIGINT, signal.SIGTERM}
            old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
            try:
                os.replace(tmp, raw_final)
                os.replace(tmp_yaml, yaml_path)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        finally:
            tmp_yaml.unlink(missing_ok=True)
    finally:
        tmp.unlink(missing_ok=True)
    return profile


def run_probe(name: str, *, quick: bool, out_dir: str | Path = "machines", progress: Progress | None = None,
              network: bool = True, command: str | None = None, memory_params=None,
              pages: str = DEFAULT_PAGES) -> MachineProfile | None:
    """Probe this machine and write ``out_dir/NAME.yaml`` (+ ``NAME.raw.npz``); return the profile.
    ``pages``: how the probe buffers get their pages (probes/memory.py ``set_pages``: ``default``
    what a plain allocation gets here, ``huge`` huge pages asked for), recorded in the provenance.

    Under ``mpiexec`` (several ranks) every rank takes part in the network probe and only rank
    0 probes the node and writes; the other ranks return None.
    """
    check_machine_name(name)
    from probes import memory as pm

    with pm.pages(pages):  # every probe buffer, here and in the network probe's ranks; restored after
        return _run_probe(name, quick=quick, out_dir=out_dir, progress=progress, network=network, command=command,
                          memory_params=memory_params, pages=pages)


def _run_probe(name: str, *, quick: bool, out_dir, progress, network: bool, command, memory_params,
               pages: str) -> MachineProfile | None:
    from probes import memory as pm

    out_dir = Path(out_dir)
    yaml_path = out_dir / f"{name}.yaml"
    # before minutes of probing: a directory the profile cannot be written to fails now
    ensure_folder(out_dir, "output directory", try_write=True)
    t0 = time.monotonic()
    warnings: list[str] = []
    net_model, net_variants, net_raw, net_note = None, (), {}, None
    rank = 0
    in_job = False
    if network:
        try:
            from . import probe_network
        except ImportError:  # pragma: no cover - the network side is optional in a build
            probe_network = None
            net_note = "network probe not available in this build: network section skipped"
        if probe_network is not None and probe_network.job_size() > 1:
            in_job = True
            from mpi4py import MPI
            rank = MPI.COMM_WORLD.Get_rank()
            net_model, net_raw = probe_network.measure_network(quick=quick, workdir=out_dir,
                                                               progress=_sub(progress if rank == 0 else None, "network"))
            if rank != 0:
                return None
    node, raw, node_warn, details = measure_node(quick=quick, progress=progress, memory_params=memory_params)
    warnings += node_warn
    if network and not in_job and net_note is None:
        if node.n_cores < 2:
            net_note = "single core: intra-node ping-pong needs two cores; network section skipped"
        else:
            t_net = time.monotonic()
            try:
                with tempfile.TemporaryDirectory(prefix="pmac-probe-") as wd:
                    net_model, net_variants, net_raw = probe_network.measure_networks(
                        quick=quick, workdir=Path(wd), progress=_sub(progress, "network"))
            except ToolMissingError as exc:
                net_note = f"no MPI ({exc}): network section skipped"
            details["phase_duration_s"]["network"] = round(time.monotonic() - t_net, 1)
    elif not network:
        net_note = "network not probed (--no-network)"
    if net_note:
        warnings.append(net_note)
    raw.update({k: v for k, v in net_raw.items() if k in RAW_TABLES})
    mpi_lib = net_model.mpi_library if net_model else ""
    if not mpi_lib:
        try:
            from .mpi import find_mpi
            mpi_lib = find_mpi().version_text
        except ToolMissingError:
            mpi_lib = "none found"
    # the overlap model from the overlap probe's points, priced with this node's plateaus
    from .overlap import calibrate, samples_from_probe
    overlap = None
    try:
        overlap = calibrate(samples_from_probe(MachineProfile(name=name, node=node), raw["overlap"]))
    except PmacError as exc:
        warnings.append(f"overlap model not calibrated: {exc}")
    import numba
    details["pages"] = {"mode": pages, "in_effect": pm.pages_in_effect(pages)}
    prov = provenance(command=command, parameters={"quick": quick, "memory": details.pop("memory_probe")},
                      n_cores=node.n_cores, mpi_library=mpi_lib,
                      numba_version=numba.__version__, duration_s=round(time.monotonic() - t0, 1),
                      warnings=warnings, **details)
    profile = MachineProfile(name=name, description=f"probed on {prov['host']} ({node.cpu_model})",
                             node=node, network=net_model, n_nodes=1, provenance=prov, overlap=overlap,
                             network_variants=net_variants)
    if progress:
        progress(1.0, "writing")
    return write_pair(profile, raw, yaml_path)


def add_fetch(yaml_path: str | Path, *, quick: bool = False, progress: Progress | None = None,
              command: str | None = None) -> MachineProfile:
    """Run the instruction-fetch probe on this machine and write its result into the existing
    profile ``yaml_path`` (``node.fetch`` and the sidecar's ``fetch`` table, atomically; the rest
    of the profile stays as it was). For a profile probed before the fetch probe existed, on the
    machine it describes: ``provenance.fetch_added`` records when and how."""
    yaml_path = Path(yaml_path)
    profile, raw = _profile_to_add_to(yaml_path, "the fetch probe")
    model, fetch_raw, warnings, details = measure_fetch(quick=quick, progress=progress)
    if model is None:
        raise ProbeError(f"{yaml_path}: {'; '.join(warnings) or 'the fetch probe gave no result'}")
    return _add_to(yaml_path, profile, raw, "fetch", fetch_raw, model,
                   provenance(command=command, parameters={"quick": quick, **details}))


def add_alias(yaml_path: str | Path, *, quick: bool = False, passes: int = 1, gap_s: float = 0.0,
              progress: Progress | None = None, command: str | None = None) -> MachineProfile:
    """Run the 4 KiB-aliasing probe (probes/alias.py) on this machine at the working sets of the
    existing profile ``yaml_path``'s cache levels and write it in (``node.alias`` and the sidecar's
    ``alias`` table, atomically; the rest stays as it was): for a profile probed before that probe
    existed. ``passes`` times, ``gap_s`` apart, pooled: the machine over a span, as a profile pooled
    from probe rounds describes it (a shared host's aliasing cost moves with its state), at the
    profile's statistic (``provenance.statistic`` of a pooled profile, else ``best``). Refused for a
    profile of another machine (pmac.profile.not_this_machine)."""
    yaml_path = Path(yaml_path)
    profile, raw = _profile_to_add_to(yaml_path, "the aliasing probe", measured_here="its aliasing")
    if passes < 1 or gap_s < 0:
        raise InputError(f"the aliasing probe needs passes >= 1 and a gap >= 0 (got {passes} and {gap_s})")
    statistic = str(profile.provenance.get("statistic", "best"))
    model, table = measure_alias(profile.node.caches, quick=quick, progress=progress, passes=passes, gap_s=gap_s,
                                 statistic=statistic)
    if model is None:
        raise ProbeError(f"{yaml_path}: the aliasing probe gave no result")
    return _add_to(yaml_path, profile, raw, "alias", table, model,
                   provenance(command=command, parameters={"quick": quick, "passes": passes, "gap_s": gap_s,
                                                           "statistic": statistic}))


def _profile_to_add_to(yaml_path: Path, what: str, *, measured_here: str | None = None
                       ) -> tuple[MachineProfile, dict[str, pd.DataFrame]]:
    """The profile to add ``what`` to and its sidecar. ``measured_here`` (what cannot be measured
    elsewhere, e.g. "its noise"): refused for a profile of another machine
    (pmac.profile.not_this_machine), saying why."""
    from .profile import load_profile, load_raw, not_this_machine

    profile = load_profile(yaml_path)
    if profile.node is None:
        raise InputError(f"the profile has no node section to add {what} to", path=yaml_path)
    if measured_here and (why := not_this_machine(profile)):
        raise InputError(f"not a profile of this machine ({why}): {measured_here} cannot be measured here",
                         path=yaml_path)
    return profile, load_raw(profile, yaml_path)


def _add_to(yaml_path: Path, profile: MachineProfile, raw: dict[str, pd.DataFrame], field: str, table: pd.DataFrame,
            model, prov: dict) -> MachineProfile:
    """``model`` as ``node.<field>`` and ``table`` as the sidecar's table of that name, the
    provenance's ``<field>_added`` saying when and how; written atomically beside the rest."""
    raw = {**raw, field: table}
    prov = {**profile.provenance, f"{field}_added": prov}
    profile = dataclasses.replace(profile, node=dataclasses.replace(profile.node, **{field: model}), provenance=prov)
    return write_pair(profile, raw, yaml_path)


def add_noise(yaml_path: str | Path, *, quick: bool = False, span_s: float | None = None,
              progress: Progress | None = None, command: str | None = None) -> MachineProfile:
    """Run the noise probe (probes/noise.py) on this machine and write it into the existing
    profile ``yaml_path`` (``node.noise`` and the sidecar's ``noise`` table): 2 (quick) or 4
    chunks spread over ``span_s`` seconds (default 10 quick, 60 full: a shared host's states
    over a minute, not one moment), fitted at the profile's statistic (``provenance.statistic``
    of a pooled profile, else ``best``). Refused for a profile of another machine
    (pmac.profile.not_this_machine): the series is this machine's."""
    yaml_path = Path(yaml_path)
    profile, raw = _profile_to_add_to(yaml_path, "the noise probe", measured_here="its noise")
    n = 2 if quick else 4
    span = (10.0 if quick else 60.0) if span_s is None else float(span_s)
    chunks = _NoiseChunks(quick)
    t0 = time.monotonic()
    for k in range(n):
        if progress:
            progress(k / n, f"noise chunk {k + 1} of {n}")
        time.sleep(max(t0 + k * span / max(n - 1, 1) - time.monotonic(), 0.0))
        chunks.run()
    table = chunks.table()
    statistic = str(profile.provenance.get("statistic", "best"))
    details = {"quick": quick, "chunks": n, "chunk_s": NOISE_CHUNK_S[0 if quick else 1], "span_s": span,
               "statistic": statistic}
    return _add_to(yaml_path, profile, raw, "noise", table, fit_noise(table, statistic=statistic),
                   provenance(command=command, parameters=details))

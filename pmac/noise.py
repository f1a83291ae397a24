"""A machine's noise: each core's slowdown over time, fitted from the noise probe and replayed.

**Fit** (:func:`fit`). The probe (probes/noise.py) ran the same quantum of work on every core at
once and recorded when each quantum ended. Per core ``c`` the quanta completed by time ``t``,
``Q_c(t)``, is linear between those ends; on a grid of windows of ``window_s`` seconds of wall
time, the same for every core of a chunk, a window's raw factor is ``window_s / (Q_c(t_k+1) -
Q_c(t_k))``: seconds per quantum in that window. The factors are divided by a reference, the
statistic of all windows of all cores named like the profile's (``best``: the median of the
fastest ``BEST_FRAC`` of them, as pmac probe takes the median of the fastest repetitions;
``median``; a slow quantile q: pmac.fit.at_slow_quantile), so ``slowdown`` 1.0 is the speed the
profile's rates describe and 2.0 half of it. Windows are aligned in time, so which cores were
slow together is kept; the probe's chunks (taken at different moments) follow one another.

**Replay** (:func:`perturb`). A burst of ``d`` seconds at the profile's speed on a core whose
speed follows the series takes the wall time that does that much work: with the cumulative work
``W_c(t) = integral of 1 / slowdown_c`` (piecewise linear over the windows, periodic over the
series), a burst starting at work ``w`` ends at ``W_c^-1(w + d)``. Each rank follows the series
of a core of the probed node (its place on its node, modulo the probed cores), from an offset
drawn once per node (every rank of a node at the same moment of the series, so cores slow
together stay together; nodes independent). A rank's position in the series is its own
compute time so far: time spent in MPI does not move it (a simplification: ranks that waited
drift apart in the series by their difference in waiting, small beside a slow spell). Bursts
change, MPI calls do not. ``pmac predict --noise K`` replays K such draws (seeds 0..K-1) and
reports the median one. Why: on a host where a core can run at half speed for seconds, a
synchronised run goes at its slowest core; a profile's single speed predicts a run where every
core is at it (pmac's Xeon VM, 26 Nov 2026: the traced stream_mpi's rank 1 ran 1.5x slower than
rank 0 for the whole run, and the profile's one speed under-predicted that case in most
interleaved accuracy runs). Measured (bench/results/README.md, ``bench/accuracy --noise``): on that VM it
over-predicted the example runs (mean absolute error 11.0 -> 33.9 % and 10.3 -> 11.2 % in two runs
at the median), its probes' series holding more stalls and slow states than the runs saw; so it
is opt-in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import InputError
from .fit import at_slow_quantile, slow_quantile_of
from .profile import NoiseModel

#: window of the fitted series, seconds of wall time
WINDOW_S = 0.5e-3
#: ``best``: the reference is the median of this fastest share of the windows
BEST_FRAC = 0.05
#: factors are stored rounded to this many decimals (the YAML stays readable; 1e-4 of a factor)
DECIMALS = 4


def _reference(raw_factor: np.ndarray, statistic: str | float) -> float:
    q = slow_quantile_of(statistic)
    if q is None:
        x = np.sort(raw_factor)
        return float(np.median(x[:max(int(round(BEST_FRAC * len(x))), 1)]))
    return at_slow_quantile(raw_factor, q, larger_is_better=False)


def fit(table: pd.DataFrame, *, statistic: str | float = "best", window_s: float = WINDOW_S) -> NoiseModel:
    """NoiseModel from the raw ``noise`` table (chunk, core, quantum, start_s, dt_ns)."""
    if table is None or len(table) == 0:
        raise InputError("noise: no quanta recorded")
    cores = sorted(int(c) for c in table["core"].unique())
    series: list[list[np.ndarray]] = [[] for _ in cores]
    starts = []
    n_win = 0
    for _, ch in table.groupby("chunk", sort=True):
        per = {}
        for c, g in ch.groupby("core"):
            g = g.sort_values("quantum")
            ns = np.concatenate(([0], np.cumsum(g["dt_ns"].to_numpy(np.int64))))
            per[int(c)] = (float(g["start_s"].iloc[0]) + ns * 1e-9, np.arange(len(ns), dtype=np.float64))
        if set(per) != set(cores):
            raise InputError("noise: a chunk lacks a core's quanta")
        lo = max(t[0] for t, _ in per.values())
        hi = min(t[-1] for t, _ in per.values())
        k = int((hi - lo) / window_s)
        if k < 1:
            continue
        grid = lo + window_s * np.arange(k + 1)
        starts.append(n_win)
        n_win += k
        for i, c in enumerate(cores):
            t, q = per[c]
            done = np.diff(np.interp(grid, t, q))
            series[i].append(window_s / np.maximum(done, 1e-12))
    if not starts:
        raise InputError(f"noise: no chunk lasted a window of {window_s * 1e3:g} ms on every core")
    raw = np.array([np.concatenate(s) for s in series])
    ref = _reference(raw.ravel(), statistic)
    factors = np.round(raw / ref, DECIMALS)
    factors = np.maximum(factors, 10.0 ** -DECIMALS)
    return NoiseModel(window_s=window_s, quantum_s=ref, reference=str(statistic), chunk_starts=tuple(starts),
                      slowdown=tuple(tuple(float(x) for x in row) for row in factors))


def _cumulative(model: NoiseModel) -> tuple[np.ndarray, np.ndarray]:
    """(cores x windows+1) work done by each window's start, and the wall times of those starts."""
    f = np.asarray(model.slowdown, dtype=np.float64)
    work = np.concatenate([np.zeros((f.shape[0], 1)), np.cumsum(model.window_s / f, axis=1)], axis=1)
    return work, model.window_s * np.arange(f.shape[1] + 1)


def _wall_at(work_pos: np.ndarray, work: np.ndarray, wall: np.ndarray) -> np.ndarray:
    """Wall time at which the periodic series has done ``work_pos`` seconds of work."""
    cyc_w, cyc_t = work[-1], wall[-1]
    k = np.floor(work_pos / cyc_w)
    return k * cyc_t + np.interp(work_pos - k * cyc_w, work, wall)


def rank_runs(rank: np.ndarray, seq: np.ndarray) -> list[np.ndarray]:
    """Per rank that has events, the indices of its events in call order (what :func:`perturb`
    walks; computed once for many draws)."""
    rank = np.asarray(rank, dtype=np.int64)
    order = np.lexsort((np.asarray(seq), rank))
    return [idx for idx in np.split(order, np.flatnonzero(np.diff(rank[order])) + 1) if len(idx)]


def perturb(burst_s: np.ndarray, rank: np.ndarray, seq: np.ndarray, placement: np.ndarray, model: NoiseModel,
            rng: np.random.Generator, *, runs: list[np.ndarray] | None = None) -> np.ndarray:
    """Burst times (one per event, events in any order) as the noise ``model`` stretches them;
    ``placement[r]``: the node of rank r (ranks numbered block-wise on nodes); ``runs``:
    :func:`rank_runs` of ``rank`` and ``seq``, when the caller draws several times."""
    burst_s = np.asarray(burst_s, dtype=np.float64)
    rank = np.asarray(rank, dtype=np.int64)
    placement = np.asarray(placement, dtype=np.int64)
    work, wall = _cumulative(model)
    n_cores = work.shape[0]
    n_nodes = int(placement.max()) + 1 if len(placement) else 0
    offsets = rng.uniform(0.0, wall[-1], size=n_nodes)
    first = np.full(n_nodes, len(placement), dtype=np.int64)
    np.minimum.at(first, placement, np.arange(len(placement)))
    out = np.zeros_like(burst_s)
    for idx in rank_runs(rank, seq) if runs is None else runs:
        r = int(rank[idx[0]])
        node = int(placement[r])
        c = (r - int(first[node])) % n_cores
        w0 = np.interp(offsets[node], wall, work[c])
        pos = w0 + np.concatenate(([0.0], np.cumsum(burst_s[idx])))
        out[idx] = np.diff(_wall_at(pos, work[c], wall))
    return out


def describe(model: NoiseModel) -> list[str]:
    """Lines for ``pmac show``: per core the slowdown's quantiles, and those of the slowest core
    at each moment (what a run synchronised across the cores goes at)."""
    f = np.asarray(model.slowdown)
    lines = [f"noise: {f.shape[1]} windows of {model.window_s * 1e3:g} ms per core in {len(model.chunk_starts)} "
             f"chunk(s); slowdown against the {model.reference} speed (quantum {model.quantum_s * 1e6:.1f} us)"]
    for c, row in enumerate(f):
        q = np.percentile(row, [50, 90, 99])
        lines.append(f"  core {c}: median {q[0]:.2f}, 90 % {q[1]:.2f}, 99 % {q[2]:.2f}, max {row.max():.2f}")
    if f.shape[0] > 1:
        slowest = f.max(axis=0)
        lines.append(f"  slowest core at each moment: median {np.median(slowest):.2f}, "
                     f"90 % {np.percentile(slowest, 90):.2f}")
    return lines

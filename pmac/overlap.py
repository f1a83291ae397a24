"""Calibrating the overlap model of a machine (``t = max(m, c) + beta * min(m, c)``).

``beta`` belongs to the machine, not to an application. It is fitted on bursts whose time was
measured on that machine: the bursts of applications traced there (their memory signature
convolved with the machine's profile gives ``m`` and ``c``, the MPI trace gives the measured
time), and any probe kernel recorded as such a sample. Applications are weighted equally:

    beta* = argmin_{0 <= beta <= 1}  sum_app ( sum_b t_b(beta) / sum_b measured_b - 1 )^2

A prediction of application A must use a ``beta`` fitted without A (all its input sizes):
:func:`calibrate` takes ``exclude``; :func:`leave_one_out` gives each application's own
``beta``. The result is an :class:`pmac.profile.OverlapModel` (kind ``max_beta_min``) whose
``calibrated_on`` lists the applications used; pmac.predict flags a prediction of an
application the model was calibrated on.

Pure probe kernels (a bandwidth sweep, a flop loop) have ``min(m, c)`` close to 0 and so carry
no information on ``beta``; they can be passed as samples but do not move it.

Only steady-state bursts are samples (:func:`steady_bursts`): a rank's bursts before its first two
calls (program start; set-up between MPI_Init and the next call) and before MPI_Finalize
(tear-down) run code the rest of the run does not (imports, JIT compilation or cache loading,
allocation and first touch), and for Python programs differ between the native run and the run
under the memory tracer (cg_mpi4py-n2-3000: its set-up burst measured 0.67 s of a 2.3 s burst total
whose timed region is 0.02 s; with it in, the fitted ``beta`` went to 1).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from .convolve import burst_arrays, machine_coeffs
from .errors import InputError, MissingSectionError
from .fit import at_slow_quantile, slow_quantile_of
from .phases import convolve_phases, phases_of
from .profile import MachineProfile, OverlapModel
from .signature import Signature
from .trace import Op

KIND = "max_beta_min"
#: ``max_s`` / ``min_s``: the burst's max(m, c) and min(m, c), summed over its functions for a burst
#: priced phase by phase (pmac.phases); samples without them take them from memory_s and compute_s
SAMPLE_COLUMNS = ("app", "case", "rank", "seq", "memory_s", "compute_s", "max_s", "min_s", "measured_s")


def app_of(sig: Signature) -> str:
    """The application a signature belongs to (its ``app`` parameter, else its name)."""
    return str(sig.header.parameters.get("app", sig.name))


def not_traced_on(sig: Signature, profile: MachineProfile) -> str | None:
    """Why ``sig``'s measured bursts are not samples of the machine ``profile`` describes, or None
    when they are: traced on the profile's host (every rank) with the CPU its node names.

    The host name alone is not enough: a VM keeps its name when it is moved to other hardware
    (this project's ``vm`` was an AMD EPYC on 24 Nov 2026 and an Intel Xeon on 26 Nov). A signature
    whose provenance names no CPU (traced before pmac recorded it) cannot be told apart and is
    refused too: retrace it on the machine.
    """
    host = profile.provenance.get("host")
    hosts = set(sig.header.rank_hosts) or {sig.header.provenance.get("host")}
    if host and hosts != {host}:
        return f"traced on {', '.join(sorted(str(h) for h in hosts))}, not on {host}"
    cpu = profile.cpu_model
    sig_cpu = sig.header.provenance.get("cpu_model")
    if not sig_cpu:
        return "its provenance names no CPU (traced before pmac recorded it): retrace it on this machine"
    if cpu != sig_cpu:
        return f"traced on CPU {sig_cpu!r}; the profile describes {cpu!r}"
    return None


def steady_bursts(events: pd.DataFrame) -> pd.DataFrame:
    """(rank, seq) of the steady-state bursts: not before a rank's first two calls, nor before
    MPI_Finalize (see the module docstring)."""
    ev = events[["rank", "seq", "op"]]
    first = ev.groupby("rank")["seq"].transform("min")
    keep = (ev["seq"] > first + 1) & (ev["op"] != int(Op.FINALIZE))
    return ev.loc[keep, ["rank", "seq"]].astype({"rank": np.int64})


def samples_from_signature(sig: Signature, profile: MachineProfile, *, active_cores: int | None = None,
                           steady: bool = True) -> pd.DataFrame:
    """Per traced burst: convolved memory and compute time, and the measured burst time; with
    ``steady`` (default) the steady-state bursts only.

    Only meaningful when ``sig`` was traced on the machine ``profile`` describes.
    """
    if not sig.memory or "bursts" not in sig.memory:
        raise MissingSectionError(f"signature '{sig.name}'", "memory.bursts", path=sig.path, needed_by="overlap calibration")
    if sig.header.burst_source != "measured":
        raise InputError(f"signature '{sig.name}' has no measured burst times", path=sig.path)
    if active_cores is None:
        active_cores = min(sig.n_ranks, profile.node.n_cores if profile.node else 1)
    ba = burst_arrays(sig.memory)
    res, mx, mn = convolve_phases(ba, phases_of(sig.memory, ba),
                                  [machine_coeffs(profile, active_cores=active_cores, beta=0.0)])
    ev = sig.events[["rank", "seq", "burst_s"]]
    df = pd.DataFrame({"rank": ba.rank.astype(np.int64), "seq": ba.seq, "memory_s": res.memory_s[0],
                       "compute_s": res.compute_s[0], "max_s": mx[0], "min_s": mn[0]})
    df = df.merge(ev.astype({"rank": np.int64}), on=["rank", "seq"], how="inner")
    if steady:
        df = df.merge(steady_bursts(sig.events), on=["rank", "seq"], how="inner")
    df = df.rename(columns={"burst_s": "measured_s"})
    df.insert(0, "case", sig.name)
    df.insert(0, "app", app_of(sig))
    return df[list(SAMPLE_COLUMNS)]


def probe_points(overlap: pd.DataFrame, slow_quantile: float | None) -> dict[tuple[int, int], tuple[int, float]]:
    """``{(working set, chains): (elements, seconds)}`` of the overlap probe's raw table: each
    point's time, the median of its five fastest repetitions (the probe's stop rule) or, with
    ``slow_quantile``, that quantile of all of them."""
    from probes.memory import ending_reps

    points = {}
    for (ws, r), g in overlap.groupby(["working_set_bytes", "chains"], sort=True):
        t = g["time_s"].to_numpy()
        measured = (float(np.median(ending_reps(t, 5, "best", larger_is_better=False))) if slow_quantile is None
                    else at_slow_quantile(t, slow_quantile, larger_is_better=False))
        points[(int(ws), int(r))] = (int(g["n_elements"].iloc[0]), measured)
    return points


def samples_from_probe(profile: MachineProfile, overlap: pd.DataFrame, *, slow_quantile: float | None = None
                       ) -> pd.DataFrame:
    """Samples of the overlap probe (raw table ``overlap``; probes/memory.py measure_overlap).

    Per (working set, r chains): ``a[i] = f_r(b[i])`` over n elements. Its memory side is priced as
    the convolver prices a unit-stride sweep of the level the working set fits in (8n bytes
    loaded, 8n stored, at the level's one-core plateaus). Its compute side is the r-chain kernel's
    own time an element at the smallest working set (the L1 point, where the sweep costs least),
    times n; the L1 points are then the compute side's measurement, not samples. Measured: the
    median of the five fastest repetitions (the probe's stop rule), or with ``slow_quantile`` that
    quantile of all of them (pmac.fit.at_slow_quantile: for a profile refitted so,
    pmac.pool.refit). Without ``slow_quantile``, the statistic the profile's own rates were fitted
    at (its provenance's ``statistic``: pmac pool, pmac probe --rounds; ``best`` when it has none),
    so that the points are priced and measured alike: bench/calibrate_overlap on a profile pooled
    at the median, its points at best, put beta at 0 with a 32 % error. Each point is its own group
    in the fit, so every balance of memory and compute counts equally.

    Why the compute side is measured (since 29 Nov 2026): priced as its flop at the SIMD rate
    (16 r + r - 1 an element, 8-long chains), the 8- and 16-chain kernels ran 1.7-2 times their
    price even in L1 on the Cascade Lake (``python bench/overlap_points``), and beta absorbed that,
    moving with it from run to run: the five interleaved runs of that day with the all-cores
    compute rows had their leave-one-application-out beta at 0.11-0.56, and stream_mpi's error
    followed it (-6.8 % at 0.11, +26.6 % at 0.56). Re-predicted with the compute side measured
    (``bench/accuracy --measured F --machine DIR/clx-vm.yaml --traces DIR/traces``; bench/results/
    README.md): beta 0.0-0.40, 38 of 40 cases within 15 % instead of 34, every case in 3 of the 5
    runs instead of 1. Without a point in L1 (a single working set, or none that small) there
    is nothing to measure it with: priced as before.
    """
    if overlap is None or len(overlap) == 0:
        raise InputError("overlap calibration: the profile has no overlap-probe repetitions")
    if slow_quantile is None:
        slow_quantile = slow_quantile_of((profile.provenance or {}).get("statistic") or "best")
    mc = machine_coeffs(profile, active_cores=1, beta=0.0)
    caps = [c * lb for c, lb in zip(mc.capacity_lines, mc.level_line_bytes)]
    points = probe_points(overlap, slow_quantile)
    smallest = min(ws for ws, _ in points)
    measured_compute = len({ws for ws, _ in points}) > 1 and smallest <= caps[0]
    rows = []
    for (ws, r), (n, measured) in points.items():
        if measured_compute and ws == smallest:
            continue
        level = next((i for i, c in enumerate(caps) if ws <= c), len(caps))
        memory_s = 8.0 * n / mc.load_bandwidth_bytes_per_s[level] + 8.0 * n / mc.store_bandwidth_bytes_per_s[level]
        if r == 0:
            compute_s = 0.0
        elif measured_compute and (smallest, r) in points:
            n1, t1 = points[(smallest, r)]
            compute_s = t1 / n1 * n
        else:
            compute_s = (16 * r + (r - 1)) * n / mc.flop_per_s_simd
        key = f"probe:{ws}B:{r}chains"
        rows.append(dict(app=key, case=key, rank=0, seq=0, memory_s=memory_s, compute_s=compute_s,
                         max_s=max(memory_s, compute_s), min_s=min(memory_s, compute_s), measured_s=measured))
    return pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))


def max_min(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, max(m, c) and min(m, c): the ``max_s`` / ``min_s`` columns where present."""
    if "max_s" in g.columns and "min_s" in g.columns:
        return g["max_s"].to_numpy(np.float64), g["min_s"].to_numpy(np.float64)
    m, c = g["memory_s"].to_numpy(np.float64), g["compute_s"].to_numpy(np.float64)
    return np.maximum(m, c), np.minimum(m, c)


def _objective(beta: float, groups: list[tuple[np.ndarray, np.ndarray, float]]) -> float:
    err = 0.0
    for mx, mn, meas in groups:
        err += ((mx.sum() + beta * mn.sum()) / meas - 1.0) ** 2
    return err


def fit_beta(samples: pd.DataFrame) -> tuple[float, float]:
    """(beta, rms relative error of the per-application totals) minimising the objective.

    The objective is a sum of quadratics in beta: solved in closed form, then clipped to [0, 1].
    """
    if len(samples) == 0:
        raise InputError("overlap calibration: no samples")
    groups = []
    for _, g in samples.groupby("app", sort=True):
        meas = float(g["measured_s"].sum())
        if meas <= 0:
            continue
        groups.append((*max_min(g), meas))
    if not groups:
        raise InputError("overlap calibration: no measured burst time in the samples")
    # d/dbeta sum (a_i + beta b_i - 1)^2 = 0  with a_i = sum max / meas, b_i = sum min / meas
    a = np.array([mx.sum() / meas for mx, _, meas in groups])
    b = np.array([mn.sum() / meas for _, mn, meas in groups])
    beta = float(np.sum(b * (1.0 - a)) / np.sum(b * b)) if np.sum(b * b) > 0 else 0.0
    beta = min(max(beta, 0.0), 1.0)
    rms = float(np.sqrt(_objective(beta, groups) / len(groups)))
    return beta, rms


def calibrate(samples: pd.DataFrame, *, exclude: Iterable[str] = ()) -> OverlapModel:
    """Fit ``beta`` on every application of ``samples`` except ``exclude``."""
    exclude = set(exclude)
    use = samples[~samples["app"].isin(exclude)]
    if len(use) == 0:
        raise InputError(f"overlap calibration: no application left after excluding {', '.join(sorted(exclude))}")
    beta, rms = fit_beta(use)
    return OverlapModel(kind=KIND, params={"beta": beta, "rms_rel_err": rms},
                        calibrated_on=tuple(sorted(use["app"].unique())))


def leave_one_out(samples: pd.DataFrame) -> pd.DataFrame:
    """Per application: beta fitted without it and its totals' relative error with that beta."""
    rows = []
    for app in sorted(samples["app"].unique()):
        others = samples[samples["app"] != app]
        if others["app"].nunique() == 0:
            continue
        beta, _ = fit_beta(others)
        mine = samples[samples["app"] == app]
        for case, g in mine.groupby("case", sort=True):
            mx, mn = max_min(g)
            pred = float((mx + beta * mn).sum())
            meas = float(g["measured_s"].sum())
            rows.append(dict(app=app, case=case, beta=beta, predicted_s=pred, measured_s=meas,
                             error_pct=100.0 * (pred - meas) / meas if meas > 0 else np.nan))
    return pd.DataFrame(rows, columns=["app", "case", "beta", "predicted_s", "measured_s", "error_pct"])

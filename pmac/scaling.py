"""Scaling models: counters at several process counts, a model function fitted to each, and the
functions ranked at a process count not run (Ding et al. 2018, with Extra-P's model search).

Input: the counter tables of one program traced at several process counts
(pmac.counters.signature_counters, or counters measured elsewhere), reduced over the ranks of each
run (:data:`OVER_RANKS`: the largest rank's, the mean, or the sum) to one figure per run, function
and metric.

Each (function, metric) gets the best of the single-term hypotheses of the performance model
normal form, ``f(p) = c0 + c1 * p**i * log2(p)**j``, with ``i`` in :data:`EXPONENTS` (negative ones
included: a strong-scaling run's per-rank work falls as ``1/p``) and ``j`` in 0, 1, 2, and the
constant ``f(p) = c0``; coefficients by least squares. The best is the one whose leave-one-out
cross-validation (fit on all runs but one, predict that one) has the smallest symmetric mean
absolute percentage error (SMAPE), as Extra-P chooses; exact ties (within :data:`TIE_PCT` points) go
to the simpler model (constant, then fewer logarithms, then the smaller exponent). A hypothesis that predicts a negative count
anywhere between the smallest run and the largest process count asked about is not taken. The
table of models keeps each one's SMAPE on the runs themselves and in cross-validation: the
second is what to trust an extrapolation by.
"""

from __future__ import annotations

import dataclasses

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np
import pandas as pd

from .errors import InputError

#: exponents of p tried (Extra-P's default set, with their negatives for work divided among ranks)
EXPONENTS = tuple(sorted({Fraction(a, b) for a, b in (
    (0, 1), (1, 4), (1, 3), (1, 2), (2, 3), (3, 4), (1, 1), (5, 4), (4, 3), (3, 2), (5, 3), (7, 4), (2, 1),
    (9, 4), (7, 3), (5, 2), (8, 3), (11, 4), (3, 1))} | {-Fraction(a, b) for a, b in (
        (1, 4), (1, 3), (1, 2), (2, 3), (3, 4), (1, 1), (3, 2), (2, 1))}))
LOG_EXPONENTS = (0, 1, 2)
#: a hypothesis within this many points of the best cross-validation SMAPE counts as as good
#: (numerically equal: cross-validation already charges a model that fits noise)
TIE_PCT = 1e-6
OVER_RANKS = ("max", "mean", "sum")
MIN_RUNS = 3
MODEL_COLUMNS = ("function", "metric", "model", "c0", "c1", "exponent", "log_exponent", "smape_pct",
                 "loo_smape_pct", "n_runs")


@dataclass(frozen=True, kw_only=True)
class ScalingModel:
    """``c0 + c1 * p**exponent * log2(p)**log_exponent`` (``c1`` 0: the constant ``c0``)."""

    c0: float
    c1: float = 0.0
    exponent: Fraction = Fraction(0)
    log_exponent: int = 0
    #: SMAPE of the fit on the runs it was fitted to, and of leave-one-out predictions (per cent)
    smape_pct: float = 0.0
    loo_smape_pct: float = float("nan")
    n_runs: int = 0

    def __post_init__(self):
        if not (math.isfinite(self.c0) and math.isfinite(self.c1)):
            raise ValueError("ScalingModel: coefficients must be finite")
        if self.log_exponent not in LOG_EXPONENTS:
            raise ValueError(f"ScalingModel: log_exponent must be one of {LOG_EXPONENTS}")

    @property
    def constant(self) -> bool:
        return self.c1 == 0.0 or (self.exponent == 0 and self.log_exponent == 0)

    def __call__(self, p) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        return self.c0 + self.c1 * _term(p, self.exponent, self.log_exponent)

    def formula(self, var: str = "p") -> str:
        """``c0 + c1 * p^(i) * log2(p)^j`` as text, 4 significant digits; a ``c0`` below a
        billionth of ``c1`` is left out (a least-squares zero)."""
        if self.constant:
            return f"{self.c0:.4g}"
        parts = []
        if self.exponent != 0:
            e = self.exponent
            parts.append(var if e == 1 else f"{var}^{e}" if e.denominator == 1 else f"{var}^({e})")
        if self.log_exponent:
            parts.append(f"log2({var})" + (f"^{self.log_exponent}" if self.log_exponent > 1 else ""))
        term = " * ".join(parts)
        if abs(self.c0) <= 1e-9 * abs(self.c1):
            return f"{self.c1:.4g} * {term}"
        return f"{self.c0:.4g} {'+' if self.c1 >= 0 else '-'} {abs(self.c1):.4g} * {term}"


def _term(p: np.ndarray, i: Fraction, j: int) -> np.ndarray:
    return np.power(p, float(i)) * np.log2(p) ** j


def _smape_rows(a: np.ndarray, f: np.ndarray) -> np.ndarray:
    den = np.abs(a) + np.abs(f)
    e = np.where(den > 0, 2.0 * np.abs(f - a) / np.where(den > 0, den, 1.0), 0.0)
    return 100.0 * e.mean(axis=-1)


def smape_pct(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Symmetric mean absolute percentage error, 0-200; a pair of zeros counts as 0."""
    return float(_smape_rows(np.asarray(actual, dtype=np.float64), np.asarray(predicted, dtype=np.float64)))


def _hypotheses() -> list[tuple[Fraction, int]]:
    """Every (exponent, log exponent), the simplest first (the order ties are broken in)."""
    return sorted(((i, j) for i in EXPONENTS for j in LOG_EXPONENTS), key=lambda h: _complexity(*h))


def _complexity(i: Fraction, j: int) -> tuple:
    """Order of preference among models as good: constant, then fewer logarithms, then |exponent|."""
    return (0 if (i == 0 and j == 0) else 1, j, abs(float(i)))


def fit_many(p: Sequence[float], ys: np.ndarray, *, up_to: float | None = None) -> list[ScalingModel]:
    """:func:`fit_model` for every row of ``ys`` (series x runs) at once: per hypothesis one
    hat matrix ``H`` of the runs, the fit ``H y`` and the leave-one-out predictions in closed form,
    ``y_k - e_k / (1 - H_kk)`` (what refitting without run ``k`` predicts there, exactly); a
    hypothesis with some ``H_kk = 1`` (a run without which its two coefficients are not
    determined) is not taken."""
    p = np.asarray(p, dtype=np.float64)
    ys = np.atleast_2d(np.asarray(ys, dtype=np.float64))
    if p.ndim != 1 or ys.shape[1] != len(p):
        raise InputError("fit_model: p and y must be 1-D of one length")
    if len(np.unique(p)) < MIN_RUNS or len(p) != len(np.unique(p)):
        raise InputError(f"fit_model: needs {MIN_RUNS} or more runs at distinct process counts, got "
                         f"{', '.join(format(x, 'g') for x in p)}")
    if (p < 1).any() or not np.isfinite(ys).all():
        raise InputError("fit_model: process counts must be >= 1 and values finite")
    n_s, n = ys.shape
    hi = max(float(p.max()), float(up_to or 0.0))
    check_p = np.unique(np.concatenate([p, np.geomspace(p.min(), hi, 64)]))
    scale = np.abs(ys).max(axis=1)
    nonneg = (ys >= 0).all(axis=1)
    hyps = _hypotheses()
    cv = np.full((n_s, len(hyps)), np.inf)
    coef = np.zeros((len(hyps), n_s, 2))
    for h, (i, j) in enumerate(hyps):
        if i == 0 and j == 0:
            x = np.ones((n, 1))
        else:
            g = _term(p, i, j)
            if np.ptp(g) == 0:
                continue
            x = np.column_stack([np.ones(n), g])
        pinv = np.linalg.pinv(x)                       # (k, n)
        hat = x @ pinv
        d = np.diag(hat)
        if (d >= 1.0 - 1e-9).any():
            continue
        c = ys @ pinv.T                                # (series, k)
        fitted = c @ x.T
        loo = ys - (ys - fitted) / (1.0 - d)
        cv[:, h] = _smape_rows(ys, loo)
        coef[h, :, : c.shape[1]] = c
        xc = np.ones((len(check_p), 1)) if x.shape[1] == 1 else np.column_stack([np.ones(len(check_p)),
                                                                                 _term(check_p, i, j)])
        neg = ((c @ xc.T) < -1e-9 * scale[:, None]).any(axis=1) & nonneg
        cv[neg, h] = np.inf
    out = []
    best_cv = cv.min(axis=1)
    pick = np.argmax(cv <= best_cv[:, None] + TIE_PCT, axis=1)
    for s in range(n_s):
        y = ys[s]
        flat = np.ptp(y) <= 1e-12 * max(scale[s], 1e-300)
        if flat or not np.isfinite(best_cv[s]):  # constant, or every hypothesis went negative
            mean = float(y.mean())
            out.append(ScalingModel(c0=mean, smape_pct=_smape1(y, np.full(n, mean)),
                                    loo_smape_pct=0.0 if flat else float("nan"), n_runs=n))
            continue
        i, j = hyps[pick[s]]
        c0, c1 = coef[pick[s], s]
        m = ScalingModel(c0=float(c0), c1=float(c1), exponent=i, log_exponent=j)
        out.append(dataclasses.replace(m, smape_pct=_smape1(y, m(p)), loo_smape_pct=float(cv[s, pick[s]]), n_runs=n))
    return out


def _smape1(a: np.ndarray, f: np.ndarray) -> float:
    return float(_smape_rows(a, f))


def fit_model(p: Sequence[float], y: Sequence[float], *, up_to: float | None = None) -> ScalingModel:
    """The model of the module docstring for values ``y`` at process counts ``p`` (at least
    :data:`MIN_RUNS` distinct); ``up_to``: the largest process count it will be asked about."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise InputError("fit_model: p and y must be 1-D of one length")
    return fit_many(p, y[None, :], up_to=up_to)[0]


def reduce_ranks(counters: pd.DataFrame, over_ranks: str = "max") -> pd.DataFrame:
    """Per run, function and metric, one figure from the ranks' (:data:`OVER_RANKS`): columns
    ``n_ranks, function, metric, value`` (input: the counter rows with an ``n_ranks`` column). A
    rank without a row of a function counts as 0 in the mean (it ran none of it)."""
    if over_ranks not in OVER_RANKS:
        raise InputError(f"over_ranks must be one of {', '.join(OVER_RANKS)}, not {over_ranks!r}")
    g = counters.groupby(["n_ranks", "function", "metric"], sort=True)["value"]
    if over_ranks == "mean":
        per_run = counters.groupby("n_ranks")["rank"].nunique()
        out = g.sum().reset_index()
        out["value"] = out["value"] / out["n_ranks"].map(per_run).to_numpy()
        return out
    return getattr(g, over_ranks)().reset_index()


def fit_models(table: pd.DataFrame, *, up_to: float | None = None) -> pd.DataFrame:
    """A model per (function, metric) of a reduced table (:func:`reduce_ranks`), with the figure
    of each run (``at_P``). A metric is fitted over the runs that have it at all (a counter file
    may cover some runs only; ``at_P`` is NaN where it has none); within them a function without
    a row counts 0 (the run did not call it). A metric of fewer than :data:`MIN_RUNS` runs is
    left out and named in ``attrs["skipped"]``. Columns :data:`MODEL_COLUMNS`, ``model_obj``
    (the :class:`ScalingModel`) and ``at_P`` per run."""
    runs = np.sort(table["n_ranks"].unique())
    if len(runs) < MIN_RUNS:
        raise InputError(f"scaling models need runs at {MIN_RUNS} or more process counts, got "
                         f"{', '.join(str(int(r)) for r in runs) or 'none'}")
    rows, skipped = [], []
    for metric, part in table.groupby("metric", sort=True):
        have = np.sort(part["n_ranks"].unique())
        if len(have) < MIN_RUNS:
            skipped.append(f"{metric} (runs at {', '.join(str(int(r)) for r in have)})")
            continue
        wide = part.pivot_table(index="function", columns="n_ranks", values="value", aggfunc="sum",
                                fill_value=0.0).reindex(columns=have, fill_value=0.0)
        ys = wide.to_numpy(np.float64)
        for function, y, m in zip(wide.index, ys, fit_many(have.astype(np.float64), ys, up_to=up_to)):
            at = dict(zip(have, y))
            rows.append({"function": function, "metric": metric, "model": m.formula(), "c0": m.c0, "c1": m.c1,
                         "exponent": float(m.exponent), "log_exponent": m.log_exponent, "smape_pct": m.smape_pct,
                         "loo_smape_pct": m.loo_smape_pct, "n_runs": m.n_runs, "model_obj": m,
                         **{f"at_{int(r)}": float(at.get(r, np.nan)) for r in runs}})
    if not rows:
        raise InputError("no metric has runs at " + f"{MIN_RUNS} or more process counts: " + "; ".join(skipped))
    out = pd.DataFrame(rows)
    out.attrs["skipped"] = skipped
    return out


def rank_at(models: pd.DataFrame, metric: str, p: float) -> pd.DataFrame:
    """The functions ranked by ``metric`` extrapolated to ``p`` processes, beside their rank in the
    largest run: columns ``function, value_now, share_now, rank_now, value_at, share_at, rank_at,
    growth_ratio`` (value at ``p`` over value in the largest run), ``loo_smape_pct``, ``model``."""
    sel = models[models["metric"] == metric]
    if len(sel) == 0:
        known = ", ".join(sorted(models["metric"].unique()))
        raise InputError(f"no metric {metric!r} in the counters (these are: {known})")
    now_col = max((c for c in sel.columns if c.startswith("at_") and sel[c].notna().any()), key=lambda c: int(c[3:]))
    now = sel[now_col].to_numpy(np.float64)
    at = np.array([max(float(m(p)), 0.0) for m in sel["model_obj"]])
    out = pd.DataFrame({"function": sel["function"].to_numpy(), "value_now": now,
                        "share_now": now / now.sum() if now.sum() > 0 else 0.0,
                        "value_at": at, "share_at": at / at.sum() if at.sum() > 0 else 0.0,
                        "growth_ratio": np.where(now > 0, at / np.where(now > 0, now, 1.0), np.inf),
                        "loo_smape_pct": sel["loo_smape_pct"].to_numpy(), "model": sel["model"].to_numpy()})
    out["rank_now"] = out["value_now"].rank(ascending=False, method="min").astype(int)
    out["rank_at"] = out["value_at"].rank(ascending=False, method="min").astype(int)
    return out.sort_values(["rank_at", "function"], kind="stable").reset_index(drop=True)[
        ["function", "value_now", "share_now", "rank_now", "value_at", "share_at", "rank_at", "growth_ratio",
         "loo_smape_pct", "model"]]


#: the rows of a whole run in a counter table with a machine (pmac.predict's per-rank table)
RUN = "(run)"
RUN_METRICS = ("finish_s", "compute_s", "comm_s", "wait_s")


def scaling_counters(sigs: Sequence, *, profile=None, ranks_per_node: int | None = None,
                     measured: pd.DataFrame | None = None, startup: bool = True) -> tuple[pd.DataFrame, list[str]]:
    """The counter rows (pmac.counters.COUNTERS plus ``n_ranks``) of one program's signatures at
    several process counts, and notes. With ``profile``: its caches' misses and, where it can
    predict every run (a machine of one node cannot place more ranks than its cores), each
    function's predicted compute time on it (metric ``time_s``, pmac.predict_functions) and the
    predicted run's per-rank split (function :data:`RUN`). ``measured``: counters read with
    pmac.counters.read_counter_csv, added as they are (a table without ranks as rank 0).
    ``startup`` False: the counts and function times without the program's start and end
    (pmac.counters); the predicted run's split stays the whole run's."""
    from .counters import COUNTERS, signature_counters, startup_bursts
    from .predict import needed_sections, predict
    from .predict_functions import function_times

    parts, notes = [], []
    seen: dict[int, str] = {}
    for sig in sigs:
        if sig.n_ranks in seen:
            raise InputError(f"two signatures at {sig.n_ranks} ranks ({seen[sig.n_ranks]}, {sig.name}): a scaling "
                             "model takes one run per process count")
        seen[sig.n_ranks] = sig.name
    timed = profile is not None
    for sig in sigs if timed else ():
        lacking = needed_sections(profile, sig, ranks_per_node=ranks_per_node)
        if lacking:
            notes.append(f"no predicted times: machine '{profile.name}' lacks {lacking[0]} for {sig.name} at "
                         f"{sig.n_ranks} ranks (a machine of several nodes has network.inter_node)")
            timed = False
            break
    for sig in sigs:
        caches = profile.node.caches if profile is not None and profile.node is not None else ()
        t = signature_counters(sig, caches=caches, startup=startup)
        traced = sorted(int(r) for r in sig.memory["bursts"]["rank"].unique())
        if len(traced) < sig.n_ranks:
            notes.append(f"{sig.name}: the memory tracer traced ranks {traced} of {sig.n_ranks}; compute counters "
                         "are theirs")
        if timed:
            ft = function_times(sig, [profile], ranks_per_node=ranks_per_node, by_rank=True,
                                leave_out=None if startup else startup_bursts(sig))
            tt = pd.DataFrame({"rank": ft["rank"], "function": ft["function"], "metric": "time_s",
                               "value": ft["time_s"]})
            pr = predict(sig, [profile], ranks_per_node=ranks_per_node).per_rank
            rr = pr[["rank", *RUN_METRICS]].melt(id_vars="rank", var_name="metric", value_name="value")
            rr.insert(1, "function", RUN)
            t = COUNTERS.coerce(pd.concat([t, tt, rr], ignore_index=True))
        parts.append(t.assign(n_ranks=sig.n_ranks, signature=sig.name))
    if measured is not None and len(measured):
        m = measured.copy()
        if "rank" not in m.columns:
            m["rank"] = 0
        parts.append(m.assign(signature="(counters file)")[["rank", "function", "metric", "value", "n_ranks",
                                                            "signature"]])
    if not parts:
        raise InputError("no signatures or counters given")
    params = {repr(sorted((k, v) for k, v in s.header.parameters.items())) for s in sigs}
    if len(params) > 1:
        notes.append("the signatures' parameters differ (" + "; ".join(
            f"{s.name}: {dict(s.header.parameters)}" for s in sigs) + "): a weak-scaling series, or runs of "
            "different inputs")
    return pd.concat(parts, ignore_index=True), notes

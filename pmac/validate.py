"""Error tables of predictions against measurements (one function, shared by every validation).

Input: a tidy DataFrame with one row per case and at least ``predicted_s`` and ``measured_s``
(other columns, e.g. ``app``, ``size``, ``machine``, group the table). Errors are signed and
relative to the measurement: ``error_pct = 100 * (predicted - measured) / measured``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from .errors import InputError

ERROR_COLUMNS = ("group", "n_cases", "mean_abs_error_pct", "std_error_pct", "mean_signed_error_pct",
                 "max_abs_error_pct", "within_15pct_frac")
#: added by error_table when the cases carry the measured median's confidence interval
CI_COLUMN = "within_15pct_of_ci_frac"


def median_ci(values: Sequence[float], level: float = 0.9) -> tuple[float, float, float]:
    """(lo, hi, coverage): a distribution-free confidence interval for the median of the
    population ``values`` were drawn from: the order statistics x_(j) and x_(n+1-j) (1-based),
    with the largest j whose coverage ``1 - 2 P(B <= j - 1)``, B ~ Binomial(n, 1/2), is at least
    ``level``. No assumption on the distribution (run times on a shared host are skewed and
    bimodal). 15 values at 90 %: x_(4) and x_(12), coverage 96.5 %. Too few values for ``level``
    (fewer than 5 at 90 %): the whole range, with its lower coverage."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0:
        raise InputError("median_ci: no values")
    def coverage(j: int) -> float:      # P(x_(j) <= median <= x_(n+1-j)) = 1 - 2 P(B <= j - 1)
        return 1.0 - 2.0 * sum(math.comb(n, k) for k in range(j)) / 2.0 ** n

    j = 1
    while j + 1 <= n // 2 and coverage(j + 1) >= level:
        j += 1
    cov = coverage(j)
    return float(x[j - 1]), float(x[n - j]), float(cov)


def case_errors(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an ``error_pct`` column added (a copy)."""
    for c in ("predicted_s", "measured_s"):
        if c not in df.columns:
            raise InputError(f"error table: column '{c}' missing (have {', '.join(map(str, df.columns))})")
    meas = df["measured_s"].to_numpy(np.float64)
    if np.any(~(meas > 0)):
        raise InputError("error table: every measured_s must be positive")
    out = df.copy()
    pred = df["predicted_s"].to_numpy(np.float64)
    out["error_pct"] = 100.0 * (pred - meas) / meas
    if "measured_lo_s" in df.columns and "measured_hi_s" in df.columns:
        lo, hi = df["measured_lo_s"].to_numpy(np.float64), df["measured_hi_s"].to_numpy(np.float64)
        out["error_vs_ci_pct"] = np.where(pred > hi, 100.0 * (pred - hi) / hi,
                                          np.where(pred < lo, 100.0 * (pred - lo) / lo, 0.0))
    return out


def _summarise(name: str, g: pd.DataFrame) -> dict:
    e = g["error_pct"].to_numpy()
    row = dict(group=name, n_cases=int(len(e)), mean_abs_error_pct=float(np.mean(np.abs(e))),
               std_error_pct=float(np.std(e, ddof=1)) if len(e) > 1 else 0.0,
               mean_signed_error_pct=float(np.mean(e)), max_abs_error_pct=float(np.max(np.abs(e))),
               within_15pct_frac=float(np.mean(np.abs(e) <= 15.0)))
    if "error_vs_ci_pct" in g.columns:
        row[CI_COLUMN] = float(np.mean(np.abs(g["error_vs_ci_pct"].to_numpy()) <= 15.0))
    return row


def error_table(df: pd.DataFrame, by: str | Sequence[str] | None = None) -> pd.DataFrame:
    """Mean absolute, standard deviation and mean signed error (in %) per group, then 'all'.

    ``std_error_pct`` is the sample standard deviation of the signed errors. Cases that carry
    the measured median's confidence interval (``measured_lo_s``, ``measured_hi_s``: :func:`median_ci`)
    add ``within_15pct_of_ci_frac``: the share of cases within 15 % of the nearest value of
    that interval (``error_vs_ci_pct``, 0 inside it), the goal stated with the measurement's own
    uncertainty beside the plain ``within_15pct_frac``.
    """
    e = case_errors(df)
    rows = []
    if by is not None:
        for key, g in e.groupby(by, sort=True):
            name = "/".join(map(str, key)) if isinstance(key, tuple) else str(key)
            rows.append(_summarise(name, g))
    rows.append(_summarise("all", e))
    cols = list(ERROR_COLUMNS) + ([CI_COLUMN] if "error_vs_ci_pct" in e.columns else [])
    return pd.DataFrame(rows, columns=cols)


def timed_compute_s(events: pd.DataFrame) -> float:
    """Compute time inside an example program's timed loop (after its first Barrier, up to the
    Reduce of the timing; examples/cases.py), max over ranks: what a disturbed machine inflates,
    and how bench/make_signatures and bench/validate_emulated pick the median of several traces."""
    from .trace import Op

    worst = 0.0
    for g, b, r in _timed_calls(events, int(Op.BARRIER), int(Op.REDUCE), strict=False):
        worst = max(worst, float(g["burst_s"].to_numpy()[b + 1:r + 1].sum()))
    return worst


def _timed_calls(frame: pd.DataFrame, barrier, reduce, strict: bool):
    """Per rank, (its rows, position of its first ``barrier`` call, position of its last ``reduce``
    call): the bounds of an example program's timed region (examples/cases.py). A rank without
    either call: InputError when ``strict``, else left out."""
    for _, g in frame.groupby("rank"):
        ops = g["op"].to_numpy()
        b = np.flatnonzero(ops == barrier)
        r = np.flatnonzero(ops == reduce)
        if not (len(b) and len(r)):
            if strict:
                raise InputError("the timeline lacks the BARRIER / REDUCE around the timed region")
            continue
        yield g, int(b[0]), int(r[-1])


def _region_s(frame: pd.DataFrame, barrier, reduce, start: str, end: str, strict: bool) -> float:
    """Max over ranks of (``start`` of the last ``reduce`` call) - (``end`` of the first
    ``barrier`` call) (:func:`_timed_calls`; 0 when no rank has both)."""
    worst = 0.0
    for g, b, r in _timed_calls(frame, barrier, reduce, strict):
        worst = max(worst, float(g[start].iloc[r] - g[end].iloc[b]))
    return worst


def timeline_region_s(timeline: pd.DataFrame) -> float:
    """The timed region of an example program in a predicted timeline (pmac.predict with
    ``timeline=True``: op names, ``start_s`` / ``end_s``); what bench/accuracy and
    bench/validate_emulated compare with the program's own ``wall_s``."""
    return _region_s(timeline, "BARRIER", "REDUCE", "start_s", "end_s", strict=True)


def traced_region_s(events: pd.DataFrame) -> float:
    """The timed region of an example program as its traced run measured it, from the trace's
    own timestamps (op codes, ``t_start_s`` / ``t_end_s``); 0 when no rank has both calls.

    The traced run against the untraced runs of the same host is the host's run-to-run noise,
    no model involved (bench/validate_emulated prints it as the noise floor). The tracer's own
    time inside the region (pmac.rawtrace.tracer_own_s: left out of the bursts) is left out here
    too: the region is its bursts plus its calls, which equals the timestamps' difference when the
    tracer took no time of its own."""
    from .trace import Op

    worst = 0.0
    for g, b, r in _timed_calls(events, int(Op.BARRIER), int(Op.REDUCE), strict=False):
        calls = g["t_end_s"].to_numpy()[b + 1:r] - g["t_start_s"].to_numpy()[b + 1:r]
        worst = max(worst, float(g["burst_s"].to_numpy()[b + 1:r + 1].sum() + calls.sum()))
    return worst


def call_costs(events: pd.DataFrame, timeline: pd.DataFrame, *, region: str = "timed") -> pd.DataFrame:
    """Where a replay with the traced bursts spends other time in the calls than the traced run:
    per operation, the traced and the replayed time of a call.

    ``region``: ``timed``, the calls inside an example program's timed region (after each rank's
    first BARRIER, before its last REDUCE; :func:`traced_region_s`), or ``all``, every call but
    MPI_Init and MPI_Finalize (``pmac predict --calls``). ``events``: the trace (op codes,
    ``t_start_s`` / ``t_end_s``); ``timeline``: pmac.predict's timeline of the same signature on one
    machine (``start_s`` / ``end_s``; rows matched by (rank, seq)). Columns: ``op``, ``calls``
    (over all ranks), ``traced_us`` / ``replayed_us`` (mean a call), ``traced_median_us`` /
    ``replayed_median_us``, ``diff_pct``: (replayed - traced) summed over the calls, per rank, as a
    share of the traced span (the timed region, or for ``all`` the longest rank's time from the end
    of MPI_Init, or its first call, to the start of MPI_Finalize, or the end of its last call).
    Blocking calls include their waits on both sides, so a wait the replay prices otherwise shows
    here too. InputError when the timeline has rows of several machines or the two share no call."""
    from .trace import Op, op_name

    if "machine" in timeline and timeline["machine"].nunique() > 1:
        raise InputError("call_costs: the timeline has several machines; pass one machine's rows")
    cols = ["rank", "seq", "op", "t_start_s", "t_end_s"]
    if region == "timed":
        keep = [g.iloc[b + 1:r][cols] for g, b, r in _timed_calls(events, int(Op.BARRIER), int(Op.REDUCE),
                                                                   strict=False)]
        if not keep:
            raise InputError("call_costs: the trace lacks the BARRIER / REDUCE around the timed region")
        tr = pd.concat(keep, ignore_index=True)
        span = traced_region_s(events)
    elif region == "all":
        ends = (int(Op.INIT), int(Op.FINALIZE))
        tr = events.loc[~events["op"].isin(ends), cols]
        span = 0.0
        for _, g in events.groupby("rank"):
            ops = g["op"].to_numpy()
            t0 = g["t_end_s"].to_numpy()[ops == ends[0]]
            t1 = g["t_start_s"].to_numpy()[ops == ends[1]]
            span = max(span, float((t1[-1] if len(t1) else g["t_end_s"].max())
                                   - (t0[0] if len(t0) else g["t_start_s"].min())))
    else:
        raise InputError(f"call_costs: region must be 'timed' or 'all', not {region!r}")
    m = tr.merge(timeline[["rank", "seq", "start_s", "end_s"]], on=["rank", "seq"], how="inner")
    if m.empty:
        raise InputError("call_costs: the timeline has none of the trace's calls (rank, seq)")
    m = m.assign(traced=m["t_end_s"] - m["t_start_s"], replayed=m["end_s"] - m["start_s"],
                 name=[op_name(int(o)) for o in m["op"]])
    n_ranks = m["rank"].nunique()
    rows = []
    for name, g in m.groupby("name", sort=True):
        t, p = g["traced"].to_numpy(), g["replayed"].to_numpy()
        rows.append(dict(op=name, calls=len(g), traced_us=1e6 * t.mean(), replayed_us=1e6 * p.mean(),
                         traced_median_us=1e6 * float(np.median(t)), replayed_median_us=1e6 * float(np.median(p)),
                         diff_pct=100 * (p.sum() - t.sum()) / n_ranks / span if span > 0 else np.nan))
    return pd.DataFrame(rows)

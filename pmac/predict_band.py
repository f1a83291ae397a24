"""A prediction's band: the same prediction with each machine's probe points taken at a fast and a
slow quantile of their repetitions (``pmac predict --band``).

A profile's rates are each one statistic of many repetitions (``pmac probe``: the median of the
fastest that agreed; a pooled profile: the median of all of them, pmac.pool). On a quiet node the
repetitions agree and any statistic gives the same prediction; on a shared one they spread, and
which speed a run meets is not known in advance. The band says how far that spread moves the
prediction: every point of the profile refitted from its raw repetitions (pmac.pool.refit) at
quantile ``lo`` (the value a share ``lo`` of its repetitions is at least as fast as: the fast end)
and at ``hi`` (the slow end), and the signature predicted on both.

What it spans: the node's points (memory, compute, overlap; so the bursts convolved from a memory
signature) and the network's (links, overheads, collectives: pmac.pool.network_quantile_of). With
measured burst times only the network moves. A profile without raw repetitions (imported, or
written before they were kept) has no band, nor one that cannot be refitted here (one combined
from another profile's node, whose cache list it does not carry); ``notes`` says which and why.
The ends are not ordered by construction: a collective's time is its quantile less the one-rank
call's at the same quantile, so a slow end can come out a hair faster than the fast one.

Measured on pmac's EPYC VM (bench/results/README.md): the band at (0.1, 0.9) held the native
median of 30 of 40 cases over five interleaved accuracy runs, their widths (median over the runs)
from 12 % of the prediction for the compute-bound nbody to 60 % for the stream in DRAM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .errors import InputError, PmacError
from .pool import refit
from .predict import predict, resolve_burst_source
from .profile import MachineProfile, load_raw
from .signature import Signature

#: the default band: each point at the 10 % and the 90 % quantile of its repetitions
BAND = (0.1, 0.9)
BAND_COLUMNS = ("machine", "signature", "fast_quantile", "slow_quantile", "fast_s", "total_s", "slow_s")


def parse_band(text: str) -> tuple[float, float]:
    """``"LO,HI"`` as two quantiles with 0 < LO < HI < 1; InputError naming the text otherwise."""
    parts = str(text).split(",")
    try:
        lo, hi = (float(x) for x in parts)
    except ValueError:
        raise InputError(f"band {text!r}: two quantiles LO,HI, e.g. 0.1,0.9") from None
    if not 0.0 < lo < hi < 1.0:
        raise InputError(f"band {text!r}: needs 0 < LO < HI < 1")
    return lo, hi


def band_profiles(profiles: Sequence[MachineProfile], paths: Sequence[str | Path],
                  band: tuple[float, float] = BAND) -> tuple[list[tuple[MachineProfile, MachineProfile] | None],
                                                             list[str]]:
    """Per profile (loaded from the same-index ``paths``, where its raw sidecar is) the pair
    (fast, slow) refitted at ``band``, or None with a note saying why it has no band."""
    lo, hi = band
    out, notes = [], []
    for p, path in zip(profiles, paths):
        try:
            raw = load_raw(p, path)
            if not raw:
                raise InputError("no raw repetitions (an imported profile, or one written without them)")
            out.append((refit(p, raw, statistic=str(lo)), refit(p, raw, statistic=str(hi))))
        except PmacError as exc:
            out.append(None)
            notes.append(f"{p.name}: no band: {_reason(exc, p.name)}")
    return out, notes


def _reason(exc: PmacError, name: str) -> str:
    return str(exc).removeprefix(f"profile '{name}': ")


def predict_band(sig: Signature, profiles: Sequence[MachineProfile], paths: Sequence[str | Path], *,
                 band: tuple[float, float] = BAND, totals: Sequence[float] | None = None,
                 ends: tuple[list, list[str]] | None = None,
                 **predict_kw) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The band of ``sig``'s prediction on every profile: a table of :data:`BAND_COLUMNS` (one row
    per profile; ``fast_s`` and ``slow_s`` NaN where it has no band) and notes. ``totals``: the
    point predictions (``predict``'s ``total_s``, same order), predicted here when not given;
    ``ends``: :func:`band_profiles` of these profiles at ``band``, refitted here when not given (a
    caller predicting several signatures refits each profile once); ``predict_kw`` as for
    :func:`pmac.predict.predict` (its options apply to both ends)."""
    lo, hi = band
    if totals is None:
        totals = list(predict(sig, profiles, **predict_kw).summary["total_s"])
    fast = np.full(len(profiles), np.nan)
    slow = np.full(len(profiles), np.nan)
    pairs, notes = ends if ends is not None else band_profiles(profiles, paths, band)
    notes = list(notes)
    have = [i for i, pr in enumerate(pairs) if pr is not None]
    if have:
        kw = {k: v for k, v in predict_kw.items() if k != "timeline"}
        f = predict(sig, [pairs[i][0] for i in have], **kw).summary["total_s"].to_numpy()
        s = predict(sig, [pairs[i][1] for i in have], **kw).summary["total_s"].to_numpy()
        fast[have], slow[have] = f, s
    if have and resolve_burst_source(sig, predict_kw.get("burst_source", "auto")) != "memory":
        notes.append("band: the burst times are the traced ones; only the network's spread moves them")
    df = pd.DataFrame({"machine": [p.name for p in profiles], "signature": sig.name,
                       "fast_quantile": lo, "slow_quantile": hi, "fast_s": fast,
                       "total_s": np.asarray(totals, np.float64), "slow_s": slow})
    return df[list(BAND_COLUMNS)], tuple(notes)


def contains(band_row, measured_s: float) -> bool:
    """Whether a measured time lies within a band row's ``fast_s`` and ``slow_s``, in either order
    (the ends are not ordered by construction: module doc)."""
    a, b = sorted((float(band_row["fast_s"]), float(band_row["slow_s"])))
    return a <= measured_s <= b

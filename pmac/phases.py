"""Bursts that run several functions one after another (pmac.memsig.BURST_FUNCTIONS).

Memory and compute overlap only while the same code runs. A burst that first streams a matrix
(memory-bound) and then sums a dependent chain (compute-bound) takes about the sum of the two
phases, where one ``max(m, c) + beta * min(m, c)`` over the whole burst hides the shorter one:
cg_mpi4py-n2-200000's steady burst measured 165 us against a convolved memory time of 58 us and
compute of 102 us (``python bench/calibrate_overlap machines/devbox.yaml --dry-run --by-call``,
24 Nov 2026), which the whole-burst model put at 118 us.

For a burst with function rows:

- its memory time ``m_b`` (from its own reuse histograms, as for every burst) is split among its
  functions in proportion to each one's memory time priced alone: its bytes in the burst at the hit
  rates of its whole-run reuse histograms on its rank (the OTHER_FUNCTIONS row, and a function
  whose histograms sampled nothing, takes the burst's);
- each function's compute time ``c_f`` comes from its own counters in the burst; its instruction-
  cache misses are its fetches in the burst at the miss rate *counted* over its whole run (sampled
  fetches beyond the capacity, scaled, over its fetches: pmac.convolve), so a function none of
  whose code is in the sample has none, as a burst with none has none; only the OTHER_FUNCTIONS
  row takes its burst's rate;
- ``t_b = sum_f max(m_f, c_f) + beta * min(m_f, c_f) + a_f``, ``a_f`` the stalls of the function's
  4 KiB-aliased loads in the burst, priced by where its own stores stream from (its histograms, as
  above; pmac.convolve: after the overlap).

Bursts without rows (one function; signatures before version 4) are convolved as one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .convolve import BurstArrays, ConvolveResult, MachineCoeffs, burst_arrays, convolve
from .memsig import BURSTS, OTHER_FUNCTIONS


@dataclass(frozen=True)
class Phases:
    """The (burst, function) rows of a signature's bursts, as convolver input."""

    #: one row per (burst, function), counters from ``burst_functions``, histograms as above
    rows: BurstArrays
    #: per row, its burst's index in the signature's BurstArrays
    burst: np.ndarray
    #: per row, its function's name (OTHER_FUNCTIONS for the rest of its burst)
    function: np.ndarray


def _keys(rank, seq) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([np.asarray(rank, np.int64), np.asarray(seq, np.int64)])


def phases_of(memory: dict[str, pd.DataFrame], ba: BurstArrays) -> Phases | None:
    """The rows of ``memory['burst_functions']`` whose burst is in ``ba``; None without any."""
    bf = memory.get("burst_functions")
    if bf is None or len(bf) == 0:
        return None
    burst = _keys(ba.rank, ba.seq).get_indexer(_keys(bf["rank"], bf["seq"]))
    keep = burst >= 0
    if not keep.any():
        return None
    bf = bf[keep].reset_index(drop=True)
    burst = burst[keep].astype(np.int64)
    counters = bf.drop(columns=["function"]).assign(sample_frac=1.0)
    rows = burst_arrays({"bursts": BURSTS.coerce(counters)}, line_sizes=ba.line_bytes, dtype=ba.cum.dtype)
    # each row's histograms: its function's whole-run ones on its rank, else its burst's
    cum = ba.cum[:, :, burst, :].copy()
    fetch_cum = ba.fetch_cum[:, burst, :].copy() if ba.fetch_cum is not None and rows.fetches is not None else None
    reuse = memory.get("reuse")
    named = bf["function"].to_numpy() != OTHER_FUNCTIONS
    if reuse is not None and len(reuse) and named.any():
        fr = reuse[(reuse["seq"] == -1) & (reuse["function"] != "")]
        funcs = bf.loc[named, ["rank", "function"]].drop_duplicates().reset_index(drop=True)
        fid = funcs.reset_index().rename(columns={"index": "seq"})
        fr = fr.drop(columns=["seq"]).merge(fid, on=["rank", "function"], how="inner")
        fake = pd.DataFrame({c: np.zeros(len(funcs), d) for c, d in BURSTS.columns})
        fake["rank"] = funcs["rank"].to_numpy(np.int32)
        fake["seq"] = np.arange(len(funcs))
        fake["sample_frac"] = 1.0
        fn_fetches = np.full(len(funcs), -1.0)
        fn_tab = memory.get("functions")
        if fn_tab is not None and "fetches" in fn_tab.columns:
            # the whole-run fetch count each function's histogram is a sample of (convolve.burst_arrays
            # turns its counted misses into a miss rate of it); -1: not counted or not listed
            fn_fetches = funcs.merge(fn_tab[["rank", "function", "fetches"]].drop_duplicates(
                ["rank", "function"]), on=["rank", "function"], how="left")["fetches"].fillna(-1).to_numpy()
            fake["fetches"] = np.maximum(fn_fetches, 0)
        fba = burst_arrays({"bursts": fake, "reuse": fr.assign(function="")}, line_sizes=ba.line_bytes,
                           dtype=ba.cum.dtype)
        row_f = pd.MultiIndex.from_frame(funcs).get_indexer(pd.MultiIndex.from_frame(bf[["rank", "function"]]))
        has = row_f >= 0
        own = ~fba.unsampled[:, :2, row_f[has]]             # (line sizes, loads/stores, rows with a function)
        cum[:, :, has, :] = np.where(own[..., None], fba.cum[:, :, row_f[has], :], cum[:, :, has, :])
        if fetch_cum is not None and fba.fetch_cum is not None:
            counted = fn_fetches[row_f[has]] >= 0
            fetch_cum[:, has, :] = np.where(counted[None, :, None], fba.fetch_cum[:, row_f[has], :],
                                            fetch_cum[:, has, :])
    rows = dataclasses.replace(rows, cum=cum, unsampled=None, n_borrowed_hist=0,
                               fetches=rows.fetches if fetch_cum is not None else None, fetch_cum=fetch_cum)
    return Phases(rows=rows, burst=burst, function=bf["function"].to_numpy())


def phase_split(ba: BurstArrays, phases: Phases, machines: Sequence[MachineCoeffs]
                ) -> tuple[ConvolveResult, np.ndarray, np.ndarray, np.ndarray]:
    """(the bursts convolved whole, memory, compute and aliasing-stall seconds of each (burst,
    function) row per machine): a burst's own memory time split among its rows as each row's memory
    time priced alone says, each row's compute and stalls from its own counters (module docstring)."""
    res = convolve(ba, machines, detail=True)
    rr = convolve(phases.rows, machines, detail=True)
    n_p, n_b = res.memory_s.shape
    b = phases.burst
    raw = rr.memory_s
    tot = np.zeros((n_p, n_b))
    for p in range(n_p):
        tot[p] = np.bincount(b, weights=raw[p], minlength=n_b)
    size = phases.rows.load_bytes + phases.rows.store_bytes
    size_tot = np.bincount(b, weights=size, minlength=n_b)[b]
    count = np.bincount(b, minlength=n_b)   # rows per burst
    even = np.where(size_tot > 0, size / np.where(size_tot > 0, size_tot, 1.0), 1.0 / count[b])
    t = tot[:, b]
    share = np.where(t > 0, raw / np.where(t > 0, t, 1.0), even[None, :])
    return res, res.memory_s[:, b] * share, rr.compute_s, rr.alias_s


def convolve_phases(ba: BurstArrays, phases: Phases | None, machines: Sequence[MachineCoeffs]
                    ) -> tuple[ConvolveResult, np.ndarray, np.ndarray]:
    """(result, sum of max(m, c) plus the aliasing stalls, sum of min(m, c)) per machine and burst:
    ``convolve`` of the bursts, those with function rows priced phase by phase (module docstring),
    so that ``time = max + beta * min`` (pmac.overlap fits beta on it). The result's ``compute_s``
    and ``alias_s`` of such a burst are the sums over its functions, ``memory_s`` its own."""
    if phases is None:
        res = convolve(ba, machines, detail=True)
        m, c = res.memory_s, res.compute_s
        return res, np.maximum(m, c) + res.alias_s, np.minimum(m, c)
    res, m_rows, c_rows, a_rows = phase_split(ba, phases, machines)
    m, c = res.memory_s, res.compute_s
    mx, mn = np.maximum(m, c) + res.alias_s, np.minimum(m, c)
    n_p, n_b = m.shape
    b = phases.burst
    count = np.bincount(b, minlength=n_b)
    beta = np.array([mc.beta for mc in machines])[:, None]
    has = count > 0
    compute_s = c.copy()
    alias_s = res.alias_s.copy()
    for p in range(n_p):
        sa = np.bincount(b, weights=a_rows[p], minlength=n_b)
        sx = np.bincount(b, weights=np.maximum(m_rows[p], c_rows[p]), minlength=n_b) + sa
        sn = np.bincount(b, weights=np.minimum(m_rows[p], c_rows[p]), minlength=n_b)
        mx[p, has], mn[p, has] = sx[has], sn[has]
        compute_s[p, has] = np.bincount(b, weights=c_rows[p], minlength=n_b)[has]
        alias_s[p, has] = sa[has]
    time_s = np.where(has[None, :], mx + beta * mn, res.time_s)
    return dataclasses.replace(res, time_s=time_s, compute_s=compute_s, alias_s=alias_s), mx, mn

"""Where the predicted compute goes, function by function (``pmac predict --functions``).

A performance engineer comparing machines asks which code a machine makes slower, not only by how
much: the convolver prices each burst's functions one after another (pmac.phases), so each
function's share of a burst is known. Per machine and function, summed over every rank and every
burst the replay uses (a rank without a memory trace counts the bursts it borrows):

- ``time_s``: its convolved time, ``max(m, c) + beta * min(m, c) + a`` per (burst, function) row
  (``a``: its 4 KiB-aliased loads' stalls, pmac.convolve) with
  ``memory_s`` = m and ``compute_s`` = c summed beside it (a burst's rows sum to its time as
  ``pmac predict`` replays it, before pollution and noise, which belong to the calls);
- ``bound``: ``memory`` when its memory time exceeds its compute time over the run, else ``compute``;
- ``traced_s``: the traced run's burst times split among a burst's functions as this machine's
  prediction splits that burst, so ``diff_pct`` of a function is that of the bursts it runs in,
  weighted by its share of them (exact for a function that has its bursts to itself). Meaningful
  on a profile of the machine the signature was traced on, as ``--calls``.

A burst the tracer left whole (it ran one function, 98 % or more of it:
pmac.memsig.BURST_FUNCTION_MIN_SHARE, or fewer than pmac.memsig.BURST_FUNCTION_MIN_INSTRUCTIONS
instructions) counts for the function that ran most of it (pmac.memsig.BURST_NAMES, signatures
of version 8 on); in an older signature, which does not name it, it is in one ``(unsplit
bursts)`` row, as is every burst of a signature traced before version 4. Below 2 % of a split
burst, a function is in its ``(other)`` row: a Python program, whose interpreter runs many small
functions, has a large one.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .convolve import burst_arrays, convolve, event_bursts
from .errors import InputError
from .phases import phase_split, phases_of
from .predict import active_cores_for, coeffs_for
from .profile import MachineProfile
from .signature import Signature

FUNCTION_COLUMNS = ("machine", "function", "object", "bursts", "instructions", "bytes", "flop", "memory_s",
                    "compute_s", "time_s", "share", "bound", "traced_s", "diff_pct")
UNSPLIT = "(unsplit bursts)"


def function_times(sig: Signature, profiles: Sequence[MachineProfile], *, ranks_per_node: int | None = None,
                   capacity: str = "nominal", by_rank: bool = False, leave_out=None) -> pd.DataFrame:
    """The table of the module docstring, functions by descending time within each machine; the
    ranks placed per node as ``pmac.predict.predict`` places them. ``by_rank``: one row per rank
    and function (a ``rank`` column after ``machine``; a burst counts for the rank that ran it
    where its uses are counted, so a rank the memory tracer skipped has no rows). ``leave_out``:
    ``(rank, seq)`` keys (a MultiIndex) of bursts not to count."""
    mem = sig.memory
    if not mem or mem.get("bursts") is None or len(mem["bursts"]) == 0:
        raise InputError(f"{sig.name}: no memory signature: per-function times need one "
                         "(pmac trace --memory)")
    ba = burst_arrays(mem)
    ph = phases_of(mem, ba)
    ms = coeffs_for(profiles, active_cores_for(profiles, ranks_per_node, sig.n_ranks), capacity)
    idx, _ = event_bursts(ba, sig.events)
    used = idx >= 0
    uses = np.bincount(idx[used], minlength=ba.n_bursts).astype(np.float64)
    if leave_out is not None and len(leave_out):
        uses[pd.MultiIndex.from_arrays([ba.rank.astype(np.int64), ba.seq.astype(np.int64)]).isin(leave_out)] = 0.0
    traced_b = np.bincount(idx[used], weights=sig.events["burst_s"].to_numpy(np.float64)[used],
                           minlength=ba.n_bursts)
    # rows: the phases' (burst, function) rows, then one row per burst without any
    if ph is not None:
        res, m_rows, c_rows, a_rows = phase_split(ba, ph, ms)
        row_b = ph.burst
        row_f = ph.function.astype(object)
        counters = mem["burst_functions"].set_index(["rank", "seq", "function"])
        key = pd.MultiIndex.from_arrays([ba.rank[row_b].astype(np.int64), ba.seq[row_b], ph.function])
        sub = counters.reindex(key)
        r_ins = sub["instructions"].to_numpy(np.float64)
        r_bytes = (sub["load_bytes"] + sub["store_bytes"]).to_numpy(np.float64)
        r_flop = sub["flop"].to_numpy(np.float64)
        alone = np.setdiff1d(np.arange(ba.n_bursts), row_b)
    else:
        res = convolve(ba, ms, detail=True)
        m_rows = c_rows = a_rows = np.zeros((len(ms), 0))
        row_b = np.zeros(0, np.int64)
        row_f = np.zeros(0, object)
        r_ins = r_bytes = r_flop = np.zeros(0)
        alone = np.arange(ba.n_bursts)
    b_tab = mem["bursts"]
    ins_b = b_tab["instructions"].to_numpy(np.float64)
    bytes_b = (b_tab["load_bytes"] + b_tab["store_bytes"]).to_numpy(np.float64)
    flop_b = b_tab["flop"].to_numpy(np.float64)
    all_b = np.concatenate([row_b, alone])
    names = np.concatenate([row_f, _lone_names(mem, ba, alone)])
    w = uses[all_b]
    objects = _objects(mem)
    out = []
    for k, (p, mc) in enumerate(zip(profiles, ms)):
        m = np.concatenate([m_rows[k], res.memory_s[k, alone]])
        c = np.concatenate([c_rows[k], res.compute_s[k, alone]])
        t = np.maximum(m, c) + mc.beta * np.minimum(m, c) + np.concatenate([a_rows[k], res.alias_s[k, alone]])
        t_burst = np.bincount(all_b, weights=t, minlength=ba.n_bursts)
        frac = np.where(t_burst[all_b] > 0, t / np.where(t_burst[all_b] > 0, t_burst[all_b], 1.0), 0.0)
        df = pd.DataFrame({
            "rank": ba.rank[all_b].astype(np.int64), "function": names, "bursts": w,
            "instructions": np.concatenate([r_ins, ins_b[alone]]) * w,
            "bytes": np.concatenate([r_bytes, bytes_b[alone]]) * w,
            "flop": np.concatenate([r_flop, flop_b[alone]]) * w,
            "memory_s": m * w, "compute_s": c * w, "time_s": t * w, "traced_s": traced_b[all_b] * frac})
        keys = ["rank", "function"] if by_rank else ["function"]
        g = df.drop(columns=[] if by_rank else ["rank"]).groupby(keys, sort=False).sum()
        g = g[g["bursts"] > 0]
        total = g["time_s"].sum()
        g["share"] = g["time_s"] / total if total > 0 else 0.0
        g["bound"] = np.where(g["memory_s"] > g["compute_s"], "memory", "compute")
        g["diff_pct"] = np.where(g["traced_s"] > 0, 100.0 * (g["time_s"] / g["traced_s"].where(g["traced_s"] > 0, 1.0) - 1.0),
                                 np.nan)
        g = g.reset_index().sort_values("time_s", ascending=False, kind="stable")
        g["machine"] = p.name
        g["object"] = [objects.get(f, "") for f in g["function"]]
        g["bursts"] = g["bursts"].round().astype(np.int64)
        out.append(g)
    cols = list(FUNCTION_COLUMNS)
    return pd.concat(out, ignore_index=True)[cols[:1] + ["rank"] + cols[1:] if by_rank else cols]


def _lone_names(mem: dict, ba, alone: np.ndarray) -> np.ndarray:
    """The function of each burst in ``alone`` (bursts without rows) from the signature's
    ``burst_names`` (version 8), UNSPLIT where it has none."""
    out = np.full(len(alone), UNSPLIT, object)
    bn = mem.get("burst_names")
    if bn is None or len(bn) == 0 or len(alone) == 0:
        return out
    at = pd.MultiIndex.from_arrays([bn["rank"].to_numpy(np.int64), bn["seq"].to_numpy(np.int64)]).get_indexer(
        pd.MultiIndex.from_arrays([ba.rank[alone].astype(np.int64), ba.seq[alone].astype(np.int64)]))
    named = at >= 0
    out[named] = bn["function"].to_numpy(object)[at[named]]
    return out


def _objects(mem: dict) -> dict[str, str]:
    """Function name -> the object file (program or library) it came from, from the whole-run
    functions table (its first rank's row)."""
    fn = mem.get("functions")
    if fn is None or len(fn) == 0 or "object" not in fn.columns:
        return {}
    first = fn.drop_duplicates("function")
    return dict(zip(first["function"], first["object"].map(lambda s: s.rsplit("/", 1)[-1])))

"""Counters per rank and function, from a signature: what scaling models and counter clustering
take (pmac.scaling, pmac.cluster).

Ding et al. (2018) and Jagga and Malakar (2021) read hardware counters per function at several
process counts. This machine, like many VMs, exposes none (:func:`hardware_counter_status`), and
counters measured on one machine describe that machine. The counts here come from the memory
signature instead (valgrind, ``pmac trace --memory``): instructions, loads, stores, bytes, flop,
branches and instruction fetches executed, which do not depend on the machine the program ran on,
and, given a profile's caches, the misses each level would take (from the reuse histograms).
Counters measured elsewhere (perf, PAPI) join them through :func:`read_counter_csv`.

Table :data:`COUNTERS` is tidy, one row per (rank, function, metric):

- compute: the counters of the bursts (the code between MPI calls; what runs inside a call is the
  MPI library's and is not counted), each burst's counters split among its functions as the
  tracer split them (``burst_functions``), a burst left whole counted for the function that ran
  most of it (``burst_names``), one without a name under :data:`UNNAMED`. Only the ranks the memory
  tracer traced have rows.
- ``LEVEL_misses`` (with caches): a function's loads and stores times the fraction of its accesses
  whose stack distance reaches the level's capacity, read from the function's whole-run reuse
  histogram at the level's line size (fully associative LRU; a shared level counted at one core's
  share of it). Includes first touches.
- MPI: per rank and MPI operation (function ``MPI_<Op>``) ``mpi_calls``, ``mpi_send_bytes`` and
  ``mpi_recv_bytes`` from the events table, every rank.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .errors import InputError
from .memsig import ACCESS_LOAD, ACCESS_STORE, N_REUSE_BINS, hit_fraction
from .profile import CacheLevel
from .signature import Signature
from .table import TableSpec
from .trace import Op, op_name

COUNTERS = TableSpec(name="counters", columns=(
    ("rank", "int32"),
    ("function", "U64"),
    ("metric", "U64"),
    ("value", "float64"),
))
#: the memory signature's counts per burst that become metrics, by their column names
COUNT_METRICS = ("instructions", "loads", "stores", "load_bytes", "store_bytes", "flop", "branches", "fetches")
MPI_METRICS = ("mpi_calls", "mpi_send_bytes", "mpi_recv_bytes")
UNNAMED = "(unnamed bursts)"
#: the function names of the MPI rows begin with it
MPI_PREFIX = "MPI_"


def mpi_function(op: int) -> str:
    """``MPI_Allreduce`` for the op of an Allreduce (pmac.trace.Op names, MPI's capitalisation)."""
    return MPI_PREFIX + op_name(op).capitalize()


def compute_counters(sig: Signature, *, startup: bool = True) -> pd.DataFrame:
    """The compute rows of :data:`COUNTERS` (see the module docstring); raises InputError
    without a memory signature. ``startup`` False: without the bursts that end at MPI_Init (the
    program's start: loading libraries, reading input) and those after MPI_Finalize."""
    mem = sig.memory
    if not mem or mem.get("bursts") is None or len(mem["bursts"]) == 0:
        raise InputError(f"{sig.name}: no memory signature: counters per function need one (pmac trace --memory)")
    bursts = mem["bursts"]
    split = mem.get("burst_functions")
    if not startup:
        bursts = bursts[~_edge_bursts(sig, bursts)]
    split = split if split is not None else pd.DataFrame(columns=["rank", "seq", "function", *COUNT_METRICS])
    keys = pd.MultiIndex.from_frame(bursts[["rank", "seq"]])
    if not startup and len(split):
        split = split[pd.MultiIndex.from_frame(split[["rank", "seq"]]).isin(keys)]
    whole = bursts[~keys.isin(pd.MultiIndex.from_frame(split[["rank", "seq"]]))] if len(split) else bursts
    names = mem.get("burst_names")
    if names is not None and len(names):
        whole = whole.merge(names[["rank", "seq", "function"]], on=["rank", "seq"], how="left")
        whole["function"] = whole["function"].fillna(UNNAMED)
    else:
        whole = whole.assign(function=UNNAMED)
    rows = pd.concat([split[["rank", "function", *COUNT_METRICS]], whole[["rank", "function", *COUNT_METRICS]]],
                     ignore_index=True)
    per = rows.groupby(["rank", "function"], sort=True)[list(COUNT_METRICS)].sum()
    # fetches are -1 (not counted) in signatures before version 6: no metric rather than a negative one
    out = per.reset_index().melt(id_vars=["rank", "function"], var_name="metric", value_name="value")
    out = out[out["value"] >= 0]
    return COUNTERS.coerce(out.reset_index(drop=True))


def startup_bursts(sig: Signature) -> pd.MultiIndex:
    """The ``(rank, seq)`` keys of the memory signature's bursts that ``startup=False`` leaves out."""
    b = sig.memory["bursts"]
    return pd.MultiIndex.from_frame(b.loc[_edge_bursts(sig, b), ["rank", "seq"]])


def _edge_bursts(sig: Signature, bursts: pd.DataFrame) -> np.ndarray:
    """Which of ``bursts`` end at a rank's MPI_Init or come after its MPI_Finalize."""
    ev = sig.events
    op = ev["op"].to_numpy()
    init = pd.MultiIndex.from_frame(ev.loc[op == int(Op.INIT), ["rank", "seq"]])
    fin = ev.loc[op == int(Op.FINALIZE)].groupby("rank")["seq"].min()
    key = pd.MultiIndex.from_frame(bursts[["rank", "seq"]])
    after = bursts["seq"].to_numpy() > bursts["rank"].map(fin).fillna(np.inf).to_numpy()
    return key.isin(init) | after


def miss_counters(sig: Signature, caches: Sequence[CacheLevel], *, startup: bool = True,
                  compute: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ``LEVEL_misses`` rows of :data:`COUNTERS` for each of ``caches`` (see the module
    docstring); none for a function without reuse rows at a level's line size. ``compute``:
    :func:`compute_counters`' table for the same ``startup``, where the caller has it."""
    mem = sig.memory
    comp = compute if compute is not None else compute_counters(sig, startup=startup)
    acc = comp[comp["metric"].isin(["loads", "stores"])].groupby(["rank", "function"])["value"].sum()
    reuse = mem.get("reuse")
    out = []
    if reuse is None or len(reuse) == 0 or not caches:
        return COUNTERS.coerce(pd.DataFrame(columns=[c for c, _ in COUNTERS.columns]))
    fn_rows = reuse[(reuse["seq"] == -1) & reuse["access"].isin([ACCESS_LOAD, ACCESS_STORE])]
    hists: dict[int, list] = {}  # line size -> [(rank, function, accesses, histogram)], built once
    for level in caches:
        if level.line_bytes not in hists:
            at = fn_rows[fn_rows["line_bytes"] == level.line_bytes]
            hists[level.line_bytes] = [
                (rank, function, acc[(rank, function)],
                 np.bincount(g["bin"].to_numpy(np.int64), weights=g["count"].to_numpy(np.float64),
                             minlength=N_REUSE_BINS))
                for (rank, function), g in at.groupby(["rank", "function"], sort=True)
                if (rank, function) in acc.index]  # not: a function that ran only inside MPI calls
        lines = level.size_bytes / level.shared_by_cores / level.line_bytes
        for rank, function, n_acc, h in hists[level.line_bytes]:
            out.append((rank, function, f"{level.name}_misses", n_acc * (1.0 - hit_fraction(h, lines))))
    return COUNTERS.coerce(pd.DataFrame(out, columns=[c for c, _ in COUNTERS.columns]))


def mpi_counters(sig: Signature) -> pd.DataFrame:
    """The MPI rows of :data:`COUNTERS`: per rank and operation, calls and bytes sent and received."""
    ev = sig.events
    ops = ev["op"].to_numpy()
    names = {int(o): mpi_function(o) for o in np.unique(ops)}
    g = pd.DataFrame({"rank": ev["rank"].to_numpy(), "function": pd.Series(ops).map(names).to_numpy(),
                      "mpi_calls": 1.0, "mpi_send_bytes": ev["send_bytes"].clip(lower=0).to_numpy(np.float64),
                      "mpi_recv_bytes": ev["recv_bytes"].clip(lower=0).to_numpy(np.float64)})
    per = g.groupby(["rank", "function"], sort=True)[list(MPI_METRICS)].sum().reset_index()
    return COUNTERS.coerce(per.melt(id_vars=["rank", "function"], var_name="metric", value_name="value"))


def signature_counters(sig: Signature, *, caches: Sequence[CacheLevel] = (), startup: bool = True) -> pd.DataFrame:
    """Every row of :data:`COUNTERS` for ``sig``: compute counts, misses of ``caches``, MPI
    (``startup``: as :func:`compute_counters`)."""
    comp = compute_counters(sig, startup=startup)
    parts = [comp, mpi_counters(sig)]
    if caches:
        parts.insert(1, miss_counters(sig, caches, startup=startup, compute=comp))
    return COUNTERS.coerce(pd.concat(parts, ignore_index=True))


def read_counter_csv(path: str | Path) -> pd.DataFrame:
    """Counters measured elsewhere (perf, PAPI), one row per measurement: columns ``n_ranks``,
    ``function``, ``metric``, ``value`` and optionally ``rank`` (absent: one figure per run, the
    value taken as every rank's). Raises InputError naming the file and what is wrong."""
    p = Path(path)
    try:
        df = pd.read_csv(p)
    except FileNotFoundError:
        raise InputError("no such file", path=p) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"not a CSV file ({str(exc).splitlines()[0]})", path=p) from None
    need = {"n_ranks", "function", "metric", "value"}
    missing = sorted(need - set(df.columns))
    if missing:
        raise InputError(f"counter CSV lacks column(s) {', '.join(missing)} (needs n_ranks, function, metric, value"
                         "[, rank])", path=p)
    extra = sorted(set(df.columns) - need - {"rank"})
    if extra:
        raise InputError(f"counter CSV has unknown column(s) {', '.join(extra)}", path=p)
    for col in ("n_ranks", "value") + (("rank",) if "rank" in df.columns else ()):
        v = pd.to_numeric(df[col], errors="coerce")
        if v.isna().any():
            raise InputError(f"counter CSV: column {col} row {int(v.isna().to_numpy().argmax()) + 2} is not a number",
                             path=p)
        df[col] = v
    if (df["n_ranks"] < 1).any() or (df["n_ranks"] != df["n_ranks"].round()).any():
        raise InputError("counter CSV: n_ranks must be whole numbers >= 1", path=p)
    if (df["value"] < 0).any():
        raise InputError("counter CSV: negative value", path=p)
    df["n_ranks"] = df["n_ranks"].astype(np.int64)
    df["function"] = df["function"].astype(str)
    df["metric"] = df["metric"].astype(str)
    return df.reset_index(drop=True)


#: the events asked of perf: what Ding et al. read per function, at the level perf names them
PERF_EVENTS = ("instructions", "cycles", "cache-misses", "branch-misses")


def hardware_counter_status(perf: str | None = None, timeout_s: float = 10.0) -> tuple[bool, str]:
    """Can this machine count hardware events? ``(True, events)`` or ``(False, why)``, the why
    one line a user can act on: no ``perf`` on PATH, or the events perf reports as not supported
    or not counted (a VM without a virtual PMU: ``/sys/bus/event_source/devices`` has no ``cpu``)."""
    exe = perf or shutil.which("perf")
    if not exe:
        return False, "no perf on PATH (Debian: linux-perf)"
    try:
        r = subprocess.run([exe, "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "--", "true"],
                           capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"perf stat did not run ({exc})"
    lines = [ln.split(",") for ln in r.stderr.splitlines() if ln.count(",") >= 2 and not ln.startswith("#")]
    ok, bad = [], {}
    for f in lines:
        value, event = f[0], f[2]
        if value.startswith("<"):
            bad.setdefault(value, []).append(event)
        else:
            ok.append(event)
    if r.returncode != 0 and not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"perf stat failed: {tail}"
    if not ok:
        return False, "perf stat: " + ("; ".join(f"{', '.join(ev)} {v}" for v, ev in bad.items()) or
                                       "none of " + ", ".join(PERF_EVENTS) + " counted")
    return True, ", ".join(ok)

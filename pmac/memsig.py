"""Memory-signature tables: machine-independent behaviour of each compute burst and function.

Stored in ``memory.npz`` beside the signature YAML. A burst is keyed by ``(rank, seq)``: the
compute that ends at call ``seq`` of that rank in the events table (see pmac.trace).

Reuse distances are LRU stack distances in *distinct cache lines* at a given line size, in
fixed log bins (:data:`REUSE_BIN_EDGES_LINES`): bin ``i`` counts accesses with distance ``d``
in ``[edges[i], edges[i+1])``; the last bin (:data:`COLD_BIN`) counts first touches (infinite
distance). With fully-associative LRU, an access hits a cache of ``C`` lines iff ``d < C``.

Units shared with the profile's compute probes: ``dep_distance_mean`` is the mean def-use
distance in instructions of floating-point instructions (weighted by execution count);
``branch_miss_frac`` is the fraction of conditional branches a last-outcome predictor misses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .table import TableSpec

#: Line sizes at which reuse histograms are recorded.
LINE_SIZES_BYTES = (32, 64, 128, 256)

#: Fixed bin edges in lines: 0, 1, then 4 bins per doubling up to 2**36 lines (rounded up to
#: integers, duplicates removed). Shared by every signature; never change without a new
#: schema version.
REUSE_BIN_EDGES_LINES = np.unique(np.concatenate((
    [0], np.ceil(2.0 ** (np.arange(0, 36 * 4 + 1) / 4.0)).astype(np.int64)))).astype(np.int64)
N_REUSE_BINS = len(REUSE_BIN_EDGES_LINES)  # finite bins = len(edges) - 1, plus the cold bin
COLD_BIN = N_REUSE_BINS - 1

ACCESS_LOAD = 0
ACCESS_STORE = 1
#: instruction fetches of 32-byte chunks of code (signature version 6; pmac_vg.c C_FETCH): their own
#: LRU stack, what an instruction cache holds
ACCESS_FETCH = 2
ACCESS_KINDS = (ACCESS_LOAD, ACCESS_STORE, ACCESS_FETCH)


def reuse_bin(distance_lines: np.ndarray) -> np.ndarray:
    """Bin index of each stack distance; negative distance means cold (first touch)."""
    d = np.asarray(distance_lines, dtype=np.int64)
    idx = np.searchsorted(REUSE_BIN_EDGES_LINES, d, side="right") - 1
    idx = np.minimum(idx, COLD_BIN - 1)
    return np.where(d < 0, COLD_BIN, idx)


def hit_fraction(hist: np.ndarray, cache_lines: float) -> float:
    """Fraction of accesses with stack distance < cache_lines (fully associative LRU).

    Within a bin, distances are taken as uniformly spread between its edges.
    """
    hist = np.asarray(hist, dtype=np.float64)
    total = hist.sum()
    if total <= 0:
        return 0.0
    edges = REUSE_BIN_EDGES_LINES.astype(np.float64)
    lo = edges[:-1]
    hi = edges[1:]
    finite = hist[:COLD_BIN]
    frac = np.clip((cache_lines - lo) / (hi - lo), 0.0, 1.0)
    return float((finite * frac).sum() / total)


BURSTS = TableSpec(name="bursts", columns=(
    ("rank", "int32"),
    ("seq", "int64"),
    ("instructions", "int64"),
    ("loads", "int64"),
    ("stores", "int64"),
    ("load_bytes", "int64"),
    ("store_bytes", "int64"),
    ("fp_scalar", "int64"),      # floating-point instructions by width
    ("fp_128", "int64"),
    ("fp_256", "int64"),
    ("fp_512", "int64"),
    ("flop", "float64"),         # floating-point operations (lanes x instructions)
    ("fp_divsqrt", "int64"),     # of which divides and square roots (lanes); -1: not counted
    ("fp_recurrence", "int64"),  # FP operations on loop-carried dependency chains; -1: not counted
    ("fp_recurrence_mul", "int64"),  # of which multiplies, FMAs, divides, square roots; -1: not counted
    ("fetches", "int64"),        # instruction fetches (entries into a 32-byte chunk of code); -1: not counted
    ("alias_loads", "int64"),    # loads that 4 KiB-alias a recent store (pmac_vg, sampled); -1: not counted
    ("branches", "int64"),
    ("dep_distance_mean", "float64"),
    ("branch_miss_frac", "float64"),
    ("sample_frac", "float64"),  # of data accesses sampled for the reuse histograms (code: memory_fetch_sample_rate)
))

REUSE = TableSpec(name="reuse", columns=(
    ("rank", "int32"),
    ("seq", "int64"),            # burst key; -1 for whole-run / per-function rows
    ("function", "U64"),         # '' for burst rows
    ("line_bytes", "int32"),
    ("access", "int8"),          # ACCESS_LOAD / ACCESS_STORE / ACCESS_FETCH
    ("bin", "int16"),
    ("count", "float64"),        # scaled to the full (unsampled) access count
))

FUNCTIONS = TableSpec(name="functions", columns=(
    ("rank", "int32"),
    ("function", "U64"),
    ("object", "U64"),
    ("instructions", "int64"),
    ("loads", "int64"),
    ("stores", "int64"),
    ("load_bytes", "int64"),
    ("store_bytes", "int64"),
    ("fp_scalar", "int64"),
    ("fp_128", "int64"),
    ("fp_256", "int64"),
    ("fp_512", "int64"),
    ("flop", "float64"),
    ("fp_divsqrt", "int64"),
    ("fp_recurrence", "int64"),
    ("fp_recurrence_mul", "int64"),
    ("fetches", "int64"),
    ("alias_loads", "int64"),
    ("branches", "int64"),
    ("dep_distance_mean", "float64"),
    ("branch_miss_frac", "float64"),
))

#: The counters of each burst split by function (signature version 4): the functions of a
#: burst run one after another, so each gets its own overlap of memory and compute
#: (pmac.phases). Per burst of at least :data:`BURST_FUNCTION_MIN_INSTRUCTIONS`, a function with
#: at least :data:`BURST_FUNCTION_MIN_SHARE` of its instructions (bytes counted in 8-byte words)
#: or flop has a row; the rest of the burst is one row named :data:`OTHER_FUNCTIONS`. The rows of
#: a burst sum to its ``bursts`` row; a burst without rows is convolved as one.
BURST_FUNCTIONS = TableSpec(name="burst_functions", columns=(
    ("rank", "int32"),
    ("seq", "int64"),
    ("function", "U64"),
) + tuple(c for c in FUNCTIONS.columns if c[0] not in ("rank", "function", "object")))
BURST_FUNCTION_MIN_SHARE = 0.02
#: below this, a burst (the few instructions of the tracer's wrappers between two MPI calls, say)
#: costs what its calls around it cost, whatever its functions: no rows
BURST_FUNCTION_MIN_INSTRUCTIONS = 10_000
OTHER_FUNCTIONS = "(other)"

#: The function that ran most of each burst (signature version 8): the largest of its functions'
#: instructions plus bytes in 8-byte words, as BURST_FUNCTIONS weighs them. A burst that ran one
#: function has no BURST_FUNCTIONS rows; this names it (``pmac predict --functions``). A burst
#: in which the tracer saw no function (none on record) has no row.
BURST_NAMES = TableSpec(name="burst_names", columns=(
    ("rank", "int32"),
    ("seq", "int64"),
    ("function", "U64"),
    ("share", "float64"),        # of the burst's weight that function ran, (0, 1]
))

MEMORY_TABLES = {t.name: t for t in (BURSTS, REUSE, FUNCTIONS, BURST_FUNCTIONS, BURST_NAMES)}

#: columns added to memory.npz by signature schema version, with the value they take in files
#: of older versions (-1: not counted)
ADDED_COLUMNS = {
    2: {"bursts": {"fp_divsqrt": -1}, "functions": {"fp_divsqrt": -1}},
    3: {"bursts": {"fp_recurrence": -1}, "functions": {"fp_recurrence": -1}},
    6: {"bursts": {"fetches": -1}, "functions": {"fetches": -1}, "burst_functions": {"fetches": -1}},
    7: {"bursts": {"fp_recurrence_mul": -1}, "functions": {"fp_recurrence_mul": -1},
        "burst_functions": {"fp_recurrence_mul": -1}},
    9: {"bursts": {"alias_loads": -1}, "functions": {"alias_loads": -1}, "burst_functions": {"alias_loads": -1}},
}


def _added_after(version: int, table: str) -> dict:
    out: dict = {}
    for v, cols in ADDED_COLUMNS.items():
        if v > version:
            out.update(cols.get(table, {}))
    return out


def memory_tables_of_version(version: int) -> dict[str, TableSpec]:
    """The table specs of the memory.npz of a signature of schema ``version``."""
    return {name: TableSpec(name=name, columns=tuple(c for c in spec.columns
                                                     if c[0] not in _added_after(version, name)))
            for name, spec in MEMORY_TABLES.items()}


def upgrade(tables: dict, version: int) -> dict:
    """Memory tables of schema ``version`` with the columns added since, at their 'not
    counted' value."""
    out = {}
    for name, df in tables.items():
        df = df.copy()
        for col, value in _added_after(version, name).items():
            df[col] = value
        out[name] = MEMORY_TABLES[name].coerce(df)
    return out


_COUNTS = ("instructions", "loads", "stores", "load_bytes", "store_bytes", "fp_scalar", "fp_128", "fp_256", "fp_512",
           "branches")


def _no_negative(df, table: str, cols) -> None:
    for col in cols:
        if (df[col].to_numpy() < 0).any():
            raise ValueError(f"table '{table}': negative {col}")


def check_tables(tables: dict) -> None:
    """Raise ValueError (one line: table, column, what is wrong) where memory-signature tables
    hold values no reader can use: reuse bins outside 0..COLD_BIN, access other than load/store,
    line sizes that are not powers of two >= 32 bytes, negative or non-finite counts, burst keys
    (rank, seq) that repeat, sampling fractions outside (0, 1], burst_functions rows that repeat a
    (rank, seq, function) or name a burst the bursts table lacks, burst_names rows that repeat a
    burst, name one the bursts table lacks or give a share outside (0, 1]. Column sets and dtypes
    are checked by pmac.table on load."""
    r = tables.get("reuse")
    if r is not None and len(r):
        bins = r["bin"].to_numpy()
        if bins.min() < 0 or bins.max() > COLD_BIN:
            raise ValueError(f"table 'reuse': bin {int(bins.min() if bins.min() < 0 else bins.max())} "
                             f"outside 0..{COLD_BIN}")
        bad = ~np.isin(r["access"].to_numpy(), ACCESS_KINDS)
        if bad.any():
            raise ValueError(f"table 'reuse': access {int(r['access'].to_numpy()[bad][0])} is none of "
                             f"{ACCESS_LOAD} (load), {ACCESS_STORE} (store), {ACCESS_FETCH} (fetch)")
        lb = r["line_bytes"].to_numpy().astype(np.int64)
        bad = (lb < 32) | (lb & (lb - 1) != 0)
        if bad.any():
            raise ValueError(f"table 'reuse': line_bytes {int(lb[bad][0])} is not a power of two >= 32")
        c = r["count"].to_numpy()
        if not np.isfinite(c).all() or (c < 0).any():
            raise ValueError("table 'reuse': negative or non-finite count")
        if (r["seq"].to_numpy() < -1).any():
            raise ValueError("table 'reuse': seq below -1 (-1 marks per-function rows)")
    b = tables.get("bursts")
    if b is not None and len(b):
        _no_negative(b, "bursts", _COUNTS)
        if b.duplicated(["rank", "seq"]).any():
            k = b[b.duplicated(["rank", "seq"])].iloc[0]
            raise ValueError(f"table 'bursts': burst (rank {int(k['rank'])}, seq {int(k['seq'])}) appears twice")
        f = b["sample_frac"].to_numpy()
        if not ((f > 0) & (f <= 1)).all():
            raise ValueError("table 'bursts': sample_frac outside (0, 1]")
    bf = tables.get("burst_functions")
    if bf is not None and len(bf):
        _no_negative(bf, "burst_functions", _COUNTS + ("flop",))
        dup = bf.duplicated(["rank", "seq", "function"])
        if dup.any():
            k = bf[dup].iloc[0]
            raise ValueError(f"table 'burst_functions': function {k['function']!r} of burst (rank {int(k['rank'])}, "
                             f"seq {int(k['seq'])}) appears twice")
        known = pd.MultiIndex.from_frame(b[["rank", "seq"]]) if b is not None else pd.MultiIndex.from_tuples([])
        own = pd.MultiIndex.from_frame(bf[["rank", "seq"]])
        stray = ~own.isin(known)
        if stray.any():
            k = bf[stray].iloc[0]
            raise ValueError(f"table 'burst_functions': burst (rank {int(k['rank'])}, seq {int(k['seq'])}) "
                             "is not in table 'bursts'")
    bn = tables.get("burst_names")
    if bn is not None and len(bn):
        dup = bn.duplicated(["rank", "seq"])
        if dup.any():
            k = bn[dup].iloc[0]
            raise ValueError(f"table 'burst_names': burst (rank {int(k['rank'])}, seq {int(k['seq'])}) appears twice")
        known = pd.MultiIndex.from_frame(b[["rank", "seq"]]) if b is not None else pd.MultiIndex.from_tuples([])
        stray = ~pd.MultiIndex.from_frame(bn[["rank", "seq"]]).isin(known)
        if stray.any():
            k = bn[stray].iloc[0]
            raise ValueError(f"table 'burst_names': burst (rank {int(k['rank'])}, seq {int(k['seq'])}) "
                             "is not in table 'bursts'")
        sh = bn["share"].to_numpy()
        if not ((sh > 0) & (sh <= 1)).all():
            raise ValueError("table 'burst_names': share outside (0, 1]")

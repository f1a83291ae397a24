"""Application signatures: ``signatures/<name>/`` = ``signature.yaml`` + ``events.npz``
(+ ``memory.npz``).

The YAML header (kind ``pmac.signature``) says what was traced and how; the tables hold the
MPI events (pmac.trace) and, when a memory trace was taken, the memory signature
(pmac.memsig). A :class:`Signature` carries the header and the loaded tables.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import InputError
from .memsig import MEMORY_TABLES, check_tables, memory_tables_of_version, upgrade
from .mpi import check_thread_level
from .schema import check_document, ensure_folder, from_dict, read_yaml, register_kind, save_document, to_dict
from .table import load_tables, save_tables
from .trace import EVENT_TABLES, world_comm_table

KIND = "pmac.signature"
#: current schema version (memory.npz columns by version: pmac.memsig.ADDED_COLUMNS; version 4
#: adds the table burst_functions, version 8 burst_names)
SCHEMA_VERSION = 9
register_kind(KIND, SCHEMA_VERSION, {1: "first version: header + events.npz (+ memory.npz)",
                        2: "memory.npz: bursts and functions gain fp_divsqrt (divide and square-root "
                           "operations); version-1 signatures load with -1 there (not counted)",
                        3: "memory.npz: bursts and functions gain fp_recurrence (FP operations on "
                           "loop-carried dependency chains); older signatures load with -1 (not counted)",
                        4: "memory.npz gains table burst_functions (the counters of a burst per function, "
                           "pmac.phases); older signatures have none and each burst is convolved as one",
                        5: "header gains mpi_thread_level (the thread level MPI_Init(_thread) provided the "
                           "traced program); older signatures have '' (not recorded)",
                        6: "memory.npz: bursts, functions and burst_functions gain fetches (instruction "
                           "fetches), reuse gains access 2 (their stack distances); older signatures load "
                           "with -1 (not counted) and no instruction-cache term",
                        7: "memory.npz: bursts, functions and burst_functions gain fp_recurrence_mul (the "
                           "multiplies, FMAs, divides and square roots among fp_recurrence, priced at the "
                           "profile's multiply-add chain); older signatures load with -1 (not counted: "
                           "every chain operation at one price)",
                        8: "memory.npz gains table burst_names (the function that ran most of each burst); "
                           "older signatures have none and pmac predict --functions shows their bursts that "
                           "ran one function as '(unsplit bursts)'",
                        9: "memory.npz: bursts, functions and burst_functions gain alias_loads (loads that "
                           "4 KiB-alias a recent store, pmac_vg's time-sampled windows scaled to all "
                           "loads); older signatures load with -1 (not counted)"},
              migrations={1: lambda body: body, 2: lambda body: body, 3: lambda body: body, 4: lambda body: body,
                          5: lambda body: body, 6: lambda body: body, 7: lambda body: body, 8: lambda body: body})

HEADER_FILE = "signature.yaml"
EVENTS_FILE = "events.npz"
MEMORY_FILE = "memory.npz"


@dataclass(frozen=True, kw_only=True)
class SignatureHeader:
    name: str
    n_ranks: int
    #: how the events were obtained: 'pmpi', 'simgrid', 'otf2', 'synthetic'
    source_format: str
    description: str = ""
    #: the traced command line, as run
    command: str = ""
    #: application parameters (e.g. input size) for tables and validation
    parameters: dict[str, Any] = field(default_factory=dict)
    #: MPI processor name of each rank during tracing (placement of the traced run)
    rank_hosts: tuple[str, ...] = ()
    mpi_library: str = ""
    #: the MPI thread level the traced program ran at (pmac.mpi.THREAD_LEVELS), '' when not
    #: recorded: the replay prices the calls with the profile's network measured at that level
    mpi_thread_level: str = ""
    #: wall time of the traced run (includes tracing overhead); never used to predict
    traced_wall_s: float | None = None
    events_file: str = EVENTS_FILE
    memory_file: str | None = None
    #: whether burst_s was measured ('measured') or must come from the memory signature
    burst_source: str = "measured"
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.n_ranks <= 0:
            raise ValueError("n_ranks must be positive")
        check_thread_level("mpi_thread_level", self.mpi_thread_level)
        if self.rank_hosts and len(self.rank_hosts) != self.n_ranks:
            raise ValueError(f"rank_hosts has {len(self.rank_hosts)} entries for {self.n_ranks} ranks")


@dataclass(frozen=True, kw_only=True)
class Signature:
    header: SignatureHeader
    events: pd.DataFrame
    requests: pd.DataFrame
    vcounts: pd.DataFrame
    comms: pd.DataFrame
    #: memory tables ('bursts', 'reuse', 'functions'), empty dict when not traced
    memory: dict[str, pd.DataFrame] = field(default_factory=dict)
    path: str | None = None

    @property
    def name(self) -> str:
        return self.header.name

    @property
    def n_ranks(self) -> int:
        return self.header.n_ranks


def memory_pages(pages) -> dict:
    """The provenance entry for the traced ranks' memory pages (pmac.rawtrace.RawTrace.pages: per
    rank (anonymous bytes, of which on huge pages) or None): ``{}`` without any sample."""
    if not pages or all(p is None for p in pages):
        return {}
    return {"memory_pages": {"anonymous_bytes": [None if p is None else int(p[0]) for p in pages],
                             "anon_huge_bytes": [None if p is None else int(p[1]) for p in pages]}}


def huge_page_fraction(header: SignatureHeader) -> float | None:
    """The share of the traced ranks' anonymous memory that was on huge pages (at each rank's sample
    with the most of it), None where the tracer did not record it."""
    mp = header.provenance.get("memory_pages")
    if not isinstance(mp, dict):
        return None
    pairs = [(a, h) for a, h in zip(mp.get("anonymous_bytes") or (), mp.get("anon_huge_bytes") or ())
             if a is not None and h is not None]
    anon = sum(a for a, _ in pairs)
    return sum(h for _, h in pairs) / anon if anon > 0 else None


def make_signature(header: SignatureHeader, events: pd.DataFrame, *, requests=None, vcounts=None,
                   comms=None, memory=None) -> Signature:
    """Build a Signature with coerced tables (missing optional tables become empty)."""
    et = EVENT_TABLES
    return Signature(
        header=header,
        events=et["events"].coerce(events),
        requests=et["requests"].coerce(requests) if requests is not None else et["requests"].empty(),
        vcounts=et["vcounts"].coerce(vcounts) if vcounts is not None else et["vcounts"].empty(),
        comms=et["comms"].coerce(comms) if comms is not None else world_comm_table(header.n_ranks),
        memory={k: MEMORY_TABLES[k].coerce(v) for k, v in (memory or {}).items()},
    )


def load_signature(path: str | Path, *, with_memory: bool = True) -> Signature:
    """Load ``signatures/<name>`` (the folder) or its ``signature.yaml``."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    yaml_path = folder / HEADER_FILE if path.is_dir() else path
    if not yaml_path.exists():
        raise InputError(f"no {HEADER_FILE} here: not a pmac signature", path=folder)
    raw = read_yaml(yaml_path)
    body = check_document(raw, KIND, path=yaml_path)
    header = from_dict(SignatureHeader, body, path=yaml_path)
    tables = load_tables(folder / header.events_file, EVENT_TABLES, required=("events",))
    memory = {}
    if with_memory and header.memory_file:
        version = int(raw["schema_version"])
        if version < SCHEMA_VERSION:
            memory = upgrade(load_tables(folder / header.memory_file, memory_tables_of_version(version)), version)
        else:
            memory = load_tables(folder / header.memory_file, MEMORY_TABLES)
        try:
            check_tables(memory)
        except ValueError as exc:
            raise InputError(str(exc), path=folder / header.memory_file) from None
    _check_events(tables["events"], header.n_ranks, folder / header.events_file)
    sig = make_signature(header, tables["events"], requests=tables.get("requests"),
                         vcounts=tables.get("vcounts"), comms=tables.get("comms"), memory=memory)
    return dataclasses.replace(sig, path=str(folder))


def _check_events(ev: pd.DataFrame, n_ranks: int, path: Path) -> None:
    """What every consumer assumes of the events: ranks of this signature, one call per (rank,
    seq), peers among the ranks, bursts finite and >= 0 (the replay would refuse some of these
    later without naming the file, and take a repeated seq in an arbitrary order)."""
    rank = ev["rank"].to_numpy()
    seq = ev["seq"].to_numpy(np.int64)
    bad = np.flatnonzero((rank < 0) | (rank >= n_ranks))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{bad.size} event(s) name a rank outside 0..{n_ranks - 1} (the first: rank "
                         f"{int(rank[i])}, seq {int(seq[i])})", path=path)
    key = np.sort(rank.astype(np.int64) * (1 << 40) + seq)
    dup = np.flatnonzero(key[1:] == key[:-1])
    if dup.size:
        k = int(key[dup[0]])
        raise InputError(f"{dup.size} call(s) repeat a (rank, seq) of another (the first: rank {k >> 40}, "
                         f"seq {k & ((1 << 40) - 1)})", path=path)
    for col in ("dest", "source"):
        peer = ev[col].to_numpy()
        bad = np.flatnonzero(peer >= n_ranks)
        if bad.size:
            i = int(bad[0])
            raise InputError(f"{bad.size} call(s) name a {col} outside the {n_ranks} ranks (the first: rank "
                             f"{int(rank[i])}, seq {int(seq[i])}, {col} {int(peer[i])})", path=path)
    burst = ev["burst_s"].to_numpy(np.float64)
    bad = np.flatnonzero(~(np.isfinite(burst) & (burst >= 0.0)))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{bad.size} burst(s) not finite and >= 0 (the first: rank {int(rank[i])}, seq "
                         f"{int(seq[i])}, burst_s {float(burst[i])!r})", path=path)


def save_signature(sig: Signature, folder: str | Path) -> Path:
    """Write tables first, then the header (each atomically); returns the folder."""
    folder = ensure_folder(folder, "signature")
    header = sig.header
    save_tables(folder / header.events_file,
                {"events": sig.events, "requests": sig.requests, "vcounts": sig.vcounts, "comms": sig.comms},
                EVENT_TABLES)
    if sig.memory:
        mf = header.memory_file or MEMORY_FILE
        save_tables(folder / mf, sig.memory, MEMORY_TABLES, compress=True)
        header = dataclasses.replace(header, memory_file=mf)
    save_document(folder / HEADER_FILE, KIND, to_dict(header))
    return folder

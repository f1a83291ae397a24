"""Memory signatures of unmodified programs: run them under pmac's valgrind tool, read, join.

:func:`trace_memory` runs ``argv`` (a plain program, or ``mpiexec ... ./app args``) with the
tool (pmac.vgtool_build) on the sampled ranks only: a small wrapper script placed before the
program in the command line checks the rank (``PMI_RANK``, ``OMPI_COMM_WORLD_RANK``,
``PMIX_RANK``) and execs valgrind or the program. The PMPI shim (pmac.shim_build) is preloaded
so that each MPI call issues the client requests that cut bursts; it writes no trace (no
``PMAC_TRACE_DIR``). The tool's per-rank files are read by :func:`read_tool_output` and turned
into the pmac.memsig tables by :func:`memory_tables` (reuse histograms from the sampled access
stream via pmac.reuse), then written as ``memory.npz`` into the signature folder.

Numba programs: valgrind's CPU lacks AVX-512 and numba would otherwise compile for the CPU it
detects, so ``NUMBA_CPU_NAME`` is pinned (default ``haswell``; pin the same value in the run you
measure). Jitted code has no symbols: the tool names code outside any object by its 64-byte block
(``?0x...``), and a ``sitecustomize`` put first on ``PYTHONPATH`` (it chains to any other one)
writes, at exit of a Python process that imported numba, the entry address of every compiled
overload (``numba-<pid>.txt``); :func:`name_jit_code` maps each block to the function whose entry
point precedes it (object ``numba``). The at-exit walk runs in the last burst.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .errors import InputError, TruncatedError
from .memsig import (BURST_FUNCTION_MIN_INSTRUCTIONS, BURST_FUNCTION_MIN_SHARE, BURST_FUNCTIONS, BURST_NAMES, BURSTS,
                     FUNCTIONS, LINE_SIZES_BYTES, OTHER_FUNCTIONS, REUSE, check_tables)
from .reuse import HASH_BITS, BurstHistograms
from .schema import provenance
from .signature import (HEADER_FILE, MEMORY_FILE, Signature, SignatureHeader, load_signature, make_signature,
                        save_signature)
from .vgtool_build import build_tool, valgrind_command

#: counters of the tool, in file order (pmac_vg.c enum C_*)
COUNTERS = ("instructions", "loads", "stores", "load_bytes", "store_bytes", "fp_scalar", "fp_128", "fp_256",
            "fp_512", "flop", "fp_divsqrt", "branches", "branch_misses", "dep_sum", "dep_n", "fp_recurrence",
            "fetches", "sampled", "fp_recurrence_mul", "alias_loads", "alias_seen")
#: version of the tool's summary file: 2 adds fp_divsqrt (divide and square-root operations),
#: 3 fp_recurrence (FP operations on loop-carried chains), 4 the counters per (burst, function),
#: 5 instruction fetches (counted, and sampled in the access file: ACC_MAGIC), 6 the accesses
#: inside MPI calls (in the access file after an outside marker), 7 the code's own sample rate
#: (fetch_threshold), 8 fp_recurrence_mul (the multiply-class operations of the chains), 9
#: alias_loads of alias_seen (the loads of the tool's sampled windows that 4 KiB-alias a recent
#: store, of the loads it tested); the files live only while a trace runs, so older ones are
#: refused, not migrated
TOOL_FILE_VERSION = 9
#: the access file's magic: version 2 words carry fetches (bit 62) and 18-bit function ids,
#: version 3 also the accesses inside MPI calls (pmac.reuse.OUTSIDE_MARK), version 4 a header
#: with the code's sample threshold
ACC_MAGIC = b"PMACVGA4"
NC = len(COUNTERS)
_HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("n_counters", "<u4"), ("hash_bits", "<u4"),
                    ("threshold", "<u4"), ("pid", "<i4"), ("flags", "<u4"), ("n_bursts", "<i8"),
                    ("n_functions", "<i8"), ("n_acc_words", "<i8"), ("n_burst_functions", "<i8"),
                    ("fetch_threshold", "<u4"), ("pad", "<u4")])
_ACC_HEADER = np.dtype([("magic", "S8"), ("hash_bits", "<u4"), ("threshold", "<u4"), ("fetch_threshold", "<u4"),
                        ("pad", "<u4")])
_BURST = np.dtype([("seq", "<i8"), ("c", "<u8", (NC,))])
_FUNC = np.dtype([("name", "S64"), ("object", "S64"), ("c", "<u8", (NC,))])
_BURST_FN = np.dtype([("burst", "<i8"), ("fn", "<i8"), ("c", "<u8", (NC,))])
TRAILER = b"PMACEND1"
DEFAULT_SAMPLE_RATE = 1.0 / 16
#: the code's: a burst's code is a few hot 256-byte blocks, whose presence in a sparser sample
#: decides its instruction-cache misses (pmac_vg.c, sample_fetch)
DEFAULT_FETCH_SAMPLE_RATE = 1.0 / 8
DEFAULT_NUMBA_CPU = "haswell"
_UNHANDLED = ("unhandled instruction bytes", "Illegal opcode", "unhandled instruction")


@dataclass(frozen=True, kw_only=True)
class ToolOutput:
    """One process's tool files, decoded."""
    pid: int
    sample_rate: float
    fetch_sample_rate: float
    mpi: dict[str, int]           # counters of code outside bursts: inside MPI calls, other threads
    burst_seq: np.ndarray         # int64 [n_bursts]
    bursts: np.ndarray            # uint64 [n_bursts, NC]
    function: np.ndarray          # str [n_functions]
    object: np.ndarray            # str [n_functions]
    functions: np.ndarray         # uint64 [n_functions, NC]
    words: np.ndarray             # uint64 sampled access words (pmac_vg.c); empty when streamed
    #: per line size, histograms [n_bursts, 3, bins] (loads, stores, fetches) computed while the
    #: program ran (streamed)
    hists: dict[int, np.ndarray] | None = None
    #: the same per function [n_functions, 3, bins] (streamed)
    fn_hists: dict[int, np.ndarray] | None = None
    #: per (burst, function) pair the code of a burst ran: burst index and function index
    #: [m, 2], and their counters [m, NC]
    burst_fn: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    burst_fn_counts: np.ndarray = field(default_factory=lambda: np.zeros((0, NC), np.uint64))


def read_tool_output(path: str | Path, stream: "AccessStream | None" = None) -> ToolOutput:
    """Read ``path`` (summary) and ``path.acc`` (sampled accesses) written by pmac_vg.

    With ``stream`` (the access words were analysed through a FIFO while the program ran),
    the histograms come from it and its word count is checked against the summary.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the memory tracer's output: {exc.strerror}", path=path) from None
    if len(data) < _HEADER.itemsize:
        raise TruncatedError(f"{len(data)} bytes: shorter than the {_HEADER.itemsize}-byte header", path=path)
    h = np.frombuffer(data[:_HEADER.itemsize], _HEADER)[0]
    if h["magic"] != b"PMACVGS1":
        raise InputError("not a pmac_vg summary file (bad magic)", path=path)
    if h["version"] != TOOL_FILE_VERSION or h["n_counters"] != NC:
        raise InputError(f"pmac_vg summary version {h['version']} with {h['n_counters']} counters; "
                         f"this pmac reads version {TOOL_FILE_VERSION} with {NC}", path=path)
    nb, nf, nbf = int(h["n_bursts"]), int(h["n_functions"]), int(h["n_burst_functions"])
    need = (_HEADER.itemsize + 8 * NC + nb * _BURST.itemsize + nf * _FUNC.itemsize + nbf * _BURST_FN.itemsize
            + len(TRAILER))
    if nb < 1 or nf < 0 or nbf < 0 or len(data) != need or data[-len(TRAILER):] != TRAILER:
        raise TruncatedError(f"{len(data)} bytes where the header announces {nb} bursts and {nf} functions "
                             f"({need} bytes): the traced program was killed before valgrind finished?",
                             path=path)
    off = _HEADER.itemsize
    mpi = np.frombuffer(data, "<u8", NC, off)
    off += 8 * NC
    b = np.frombuffer(data, _BURST, nb, off)
    off += nb * _BURST.itemsize
    f = np.frombuffer(data, _FUNC, nf, off)
    off += nf * _FUNC.itemsize
    bf = np.frombuffer(data, _BURST_FN, nbf, off)
    if nbf and (bf["burst"].min() < 0 or bf["burst"].max() >= nb or bf["fn"].min() < 0 or bf["fn"].max() >= nf):
        raise InputError("a (burst, function) entry names a burst or function the file does not hold", path=path)
    acc_path = Path(str(path) + ".acc")
    if stream is not None:
        return _decoded(h, mpi, b, f, nf, bf, np.zeros(0, np.uint64), stream.histograms(h, nb, acc_path),
                        stream.function_histograms(nf, acc_path))
    try:
        acc = acc_path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the sampled accesses: {exc.strerror}", path=acc_path) from None
    nw = int(h["n_acc_words"])
    if len(acc) < _ACC_HEADER.itemsize or acc[:8] != ACC_MAGIC:
        raise InputError("not a pmac_vg access file (bad magic)", path=acc_path)
    if len(acc) != _ACC_HEADER.itemsize + 8 * nw:
        raise TruncatedError(f"{len(acc)} bytes where the summary announces {nw} access words "
                             f"({_ACC_HEADER.itemsize + 8 * nw} bytes)", path=acc_path)
    ah = np.frombuffer(acc[:_ACC_HEADER.itemsize], _ACC_HEADER)[0]
    if not _same_sampling(ah, h):
        raise InputError("access file and summary disagree on the sampling parameters", path=acc_path)
    words = np.frombuffer(acc, "<u8", nw, _ACC_HEADER.itemsize)
    return _decoded(h, mpi, b, f, nf, bf, words, None)


def _same_sampling(acc_header, summary_header) -> bool:
    return (acc_header["hash_bits"] == HASH_BITS and summary_header["hash_bits"] == HASH_BITS
            and acc_header["threshold"] == summary_header["threshold"]
            and acc_header["fetch_threshold"] == summary_header["fetch_threshold"])


def _scales(header) -> tuple[float, float]:
    """1/R of the data and of the code sample (0 when nothing is sampled)."""
    return tuple((1 << HASH_BITS) / float(header[k]) if header[k] else 0.0 for k in ("threshold", "fetch_threshold"))


def _decoded(h, mpi, b, f, nf, bf, words, hists, fn_hists=None) -> ToolOutput:
    dec = np.vectorize(lambda s: s.decode("utf-8", "replace"), otypes=[object])
    return ToolOutput(
        pid=int(h["pid"]), sample_rate=float(h["threshold"]) / (1 << HASH_BITS),
        fetch_sample_rate=float(h["fetch_threshold"]) / (1 << HASH_BITS),
        mpi=dict(zip(COUNTERS, (int(x) for x in mpi))),
        burst_seq=b["seq"].astype(np.int64), bursts=b["c"].astype(np.uint64),
        function=dec(f["name"]).astype(str) if nf else np.zeros(0, str),
        object=dec(f["object"]).astype(str) if nf else np.zeros(0, str),
        functions=f["c"].astype(np.uint64).reshape(nf, NC), words=words, hists=hists, fn_hists=fn_hists,
        burst_fn=np.stack([bf["burst"], bf["fn"]], axis=1).astype(np.int64),
        burst_fn_counts=bf["c"].astype(np.uint64).reshape(len(bf), NC),
    )


_PIPE_BYTES = 1 << 20     # the FIFO's buffer (Linux's default limit for unprivileged users)
_CHUNK_BYTES = 4 << 20    # access words analysed per numba call


class AccessStream:
    """Reads one rank's access words from a FIFO while the program runs, histogramming them.

    The tool opens ``rank-N.acc``; when that is a FIFO made by :func:`run_under_tool`, nothing
    goes to disk: a thread feeds pmac.reuse.BurstHistograms for every line size.
    """

    def __init__(self, fifo: Path, line_sizes: tuple[int, ...]):
        import threading

        self.fifo = fifo
        self.line_sizes = line_sizes
        self.n_words = 0
        self.header = b""
        self.tail = 0
        self.error: str | None = None
        self.hist = {}
        self.cpu_s = 0.0   # CPU time of the analysis thread
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        import fcntl

        from .reuse import BurstHistograms

        try:
            fd = os.open(self.fifo, os.O_RDONLY)  # blocks until the tool opens it
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        try:
            try:  # a larger pipe lets the tool run on while a chunk is analysed (Linux; best effort)
                fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
            except OSError:
                pass
            # load the numba kernel (~0.4 s) while the program starts under valgrind (the tool
            # opens the FIFO first thing and blocks on that open until this thread opens it)
            BurstHistograms(32, 1.0).feed(np.zeros(1, np.uint64))
            head = b""
            while len(head) < _ACC_HEADER.itemsize:
                part = os.read(fd, _ACC_HEADER.itemsize - len(head))
                if not part:
                    break
                head += part
            self.header = head
            if len(head) < _ACC_HEADER.itemsize or head[:8] != ACC_MAGIC:
                return
            scale, code_scale = _scales(np.frombuffer(head, _ACC_HEADER)[0])
            self.hist = {lb: BurstHistograms(lb, scale, code_scale) for lb in self.line_sizes}
            buf = bytearray(_CHUNK_BYTES)
            view = memoryview(buf)
            fill, eof = 0, False
            while not eof:
                # read until a good chunk is in (the tool writes 512 KiB at a time), then analyse it
                while fill < _CHUNK_BYTES // 2:
                    k = os.readv(fd, [view[fill:]])
                    if k == 0:
                        eof = True
                        break
                    fill += k
                k = fill // 8 * 8
                words = np.frombuffer(buf, "<u8", k // 8)
                for bh in self.hist.values():
                    bh.feed(words)
                del words
                self.n_words += k // 8
                rest = bytes(view[k:fill])   # < 8 bytes of a word cut by the read
                view[:len(rest)] = rest
                fill = len(rest)
            self.tail = fill
        except Exception as exc:  # reported by histograms()
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            os.close(fd)
            self.cpu_s = time.thread_time()

    def release(self) -> None:
        """After the program ended: unblock a reader still waiting for a writer, then wait."""
        if self.thread.is_alive():
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass
        self.thread.join()

    def histograms(self, h, n_bursts: int, path: Path) -> dict[int, np.ndarray]:
        self.release()
        if self.error:
            raise InputError(f"reading the sampled accesses failed: {self.error}", path=path)
        if len(self.header) < _ACC_HEADER.itemsize or self.header[:8] != ACC_MAGIC:
            raise InputError("not a pmac_vg access stream (bad or missing header)", path=path)
        if not _same_sampling(np.frombuffer(self.header, _ACC_HEADER)[0], h):
            raise InputError("access stream and summary disagree on the sampling parameters", path=path)
        if self.n_words != int(h["n_acc_words"]) or self.tail:
            raise TruncatedError(f"{self.n_words} access words (+{self.tail} bytes) where the summary announces "
                                 f"{int(h['n_acc_words'])}", path=path)
        try:
            return {lb: bh.result(n_bursts) for lb, bh in self.hist.items()}
        except ValueError as exc:
            raise InputError(str(exc), path=path) from None

    def function_histograms(self, n_functions: int, path: Path) -> dict[int, np.ndarray]:
        try:
            return {lb: bh.function_result(n_functions) for lb, bh in self.hist.items()}
        except ValueError as exc:
            raise InputError(str(exc), path=path) from None


def _derived(c: np.ndarray) -> dict[str, np.ndarray]:
    """memsig columns from a [n, NC] counter block."""
    col = {name: c[:, i].astype(np.int64) for i, name in enumerate(COUNTERS)}
    with np.errstate(invalid="ignore", divide="ignore"):
        dep = np.where(col["dep_n"] > 0, col["dep_sum"] / np.maximum(col["dep_n"], 1), np.nan)
        miss = np.where(col["branches"] > 0, col["branch_misses"] / np.maximum(col["branches"], 1), np.nan)
    out = {k: col[k] for k in ("instructions", "loads", "stores", "load_bytes", "store_bytes", "fp_scalar",
                               "fp_128", "fp_256", "fp_512", "fp_divsqrt", "fp_recurrence",
                               "fp_recurrence_mul", "fetches", "alias_loads", "branches")}   # alias: _pool_alias
    out["flop"] = col["flop"].astype(np.float64)
    out["dep_distance_mean"] = dep
    out["branch_miss_frac"] = miss
    return out


def _pool_alias(o: ToolOutput) -> ToolOutput:
    """``o`` with the aliasing counters of every function, (burst, function) pair and burst made
    estimates of all their loads: aliased = loads x the function's share over the whole run (its
    aliased / tested loads in the tool's windows), tested = loads. The windows (a few hundred
    accesses every few ten thousand) miss most short bursts and catch a long one a few times;
    whether a load aliases is a matter of the code and where its arrays lie, which the iterations
    of a run share. A function no window saw has 0; a burst has the sum of its pairs'."""
    ia, iseen, il = (COUNTERS.index(k) for k in ("alias_loads", "alias_seen", "loads"))
    f = o.functions.astype(np.float64)
    share = np.where(f[:, iseen] > 0, f[:, ia] / np.maximum(f[:, iseen], 1.0), 0.0)

    def estimated(c: np.ndarray, s: np.ndarray) -> np.ndarray:
        c = c.copy()
        c[:, ia] = np.rint(c[:, il].astype(np.float64) * s).astype(np.uint64)
        c[:, iseen] = c[:, il]
        return c

    functions = estimated(o.functions, share)
    pairs = estimated(o.burst_fn_counts, share[o.burst_fn[:, 1]])
    est = pairs[:, ia]
    bursts = o.bursts.copy()
    bursts[:, ia] = np.bincount(o.burst_fn[:, 0], weights=est.astype(np.float64),
                                minlength=len(bursts))[:len(bursts)].round().astype(np.uint64)
    bursts[:, iseen] = bursts[:, il]
    return dataclasses.replace(o, bursts=bursts, burst_fn_counts=pairs, functions=functions)


def _function_counts(o: ToolOutput, keep: np.ndarray | None = None) -> pd.DataFrame:
    """The (burst, function) counters of ``o`` (the rows ``keep`` selects), one row per burst and
    function name (numba's jit blocks of one function come as several), in the tool's order."""
    keep = slice(None) if keep is None else keep
    df = pd.DataFrame(o.burst_fn_counts[keep].astype(np.int64), columns=list(COUNTERS))
    df["burst"] = o.burst_fn[keep, 0]
    df["function"] = o.function[o.burst_fn[keep, 1]]
    return df.groupby(["burst", "function"], as_index=False, sort=False)[list(COUNTERS)].sum()


def _weight(d: pd.DataFrame) -> pd.Series:
    """A function's weight in a burst: its instructions plus its bytes in 8-byte words."""
    return d["instructions"] + (d["load_bytes"] + d["store_bytes"]) / 8.0


def burst_functions(rank: int, o: ToolOutput, min_share: float = BURST_FUNCTION_MIN_SHARE,
                    min_instructions: int = BURST_FUNCTION_MIN_INSTRUCTIONS) -> pd.DataFrame:
    """The ``burst_functions`` rows of one rank (pmac.memsig.BURST_FUNCTIONS).

    A function's weight in a burst is its instructions plus its bytes in 8-byte words (a ``rep
    stos`` memset is one instruction); per burst, each function with at least ``min_share`` of
    the burst's weight or flop has a row, the rest is one OTHER_FUNCTIONS row. A burst that comes
    out as one function (with at most ``min_share`` of other code) is left out: it is its row; so
    is a burst of fewer than ``min_instructions``."""
    if not len(o.burst_fn):
        return BURST_FUNCTIONS.empty()
    df = _function_counts(o, o.bursts[o.burst_fn[:, 0], COUNTERS.index("instructions")] >= min_instructions)

    def shares(d):
        size = pd.DataFrame({"weight": _weight(d), "flop": d["flop"].astype(np.float64)})
        total = size.groupby(d["burst"].to_numpy()).transform("sum")
        return (size / total.where(total > 0)).fillna(0.0).max(axis=1).to_numpy()

    df.loc[shares(df) < min_share, "function"] = OTHER_FUNCTIONS
    df = df.groupby(["burst", "function"], as_index=False, sort=True)[list(COUNTERS)].sum()
    # rows that count: every named function, and the other code when it is not minor itself
    counts = (df["function"] != OTHER_FUNCTIONS) | (shares(df) >= min_share)
    df = df[counts.groupby(df["burst"]).transform("sum") >= 2]
    d = _derived(df[list(COUNTERS)].to_numpy(np.uint64))
    return BURST_FUNCTIONS.coerce(pd.DataFrame({
        "rank": np.full(len(df), rank, np.int32), "seq": o.burst_seq[df["burst"].to_numpy()],
        "function": df["function"].to_numpy(), **d}))


def burst_names(rank: int, o: ToolOutput) -> pd.DataFrame:
    """The ``burst_names`` rows of one rank (pmac.memsig.BURST_NAMES): per burst the function with
    the largest weight (instructions plus bytes in 8-byte words, as :func:`burst_functions`
    weighs them; the first in the tool's order on a tie) and its share of the burst's weight."""
    if not len(o.burst_fn):
        return BURST_NAMES.empty()
    df = _function_counts(o)
    df = df[["burst", "function"]].assign(weight=_weight(df))
    total = df.groupby("burst")["weight"].transform("sum")
    df = df[total > 0].assign(share=df["weight"] / total)
    top = df.loc[df.groupby("burst", sort=True)["weight"].idxmax()]
    return BURST_NAMES.coerce(pd.DataFrame({
        "rank": np.full(len(top), rank, np.int32), "seq": o.burst_seq[top["burst"].to_numpy()],
        "function": top["function"].to_numpy(), "share": np.minimum(top["share"].to_numpy(), 1.0)}))


def memory_tables(outputs: dict[int, ToolOutput], *, line_sizes: tuple[int, ...] = LINE_SIZES_BYTES) -> dict[str, pd.DataFrame]:
    """The pmac.memsig tables (bursts, reuse, functions, burst_functions, burst_names) of the traced ranks."""
    bursts, reuse, funcs, split, names = [], [], [], [], []
    for rank, o in sorted(outputs.items()):
        o = _pool_alias(o)
        split.append(burst_functions(rank, o))
        names.append(burst_names(rank, o))
        n = len(o.burst_seq)
        d = _derived(o.bursts)
        bursts.append(pd.DataFrame({"rank": np.full(n, rank, np.int32), "seq": o.burst_seq, **d,
                                    "sample_frac": np.full(n, o.sample_rate)}))
        scale = 1.0 / o.sample_rate if o.sample_rate > 0 else 0.0
        code_scale = 1.0 / o.fetch_sample_rate if o.fetch_sample_rate > 0 else 0.0
        for lb in line_sizes:
            if o.hists is not None and lb in o.hists:
                h = o.hists[lb]
                fh = o.fn_hists.get(lb) if o.fn_hists else None
            else:
                bh = BurstHistograms(lb, scale, code_scale)
                bh.feed(o.words)
                h, fh = bh.result(n), bh.function_result(len(o.function))    # [n, 3, bins], [nf, 3, bins]
            bi, ai, ki = np.nonzero(h)
            reuse.append(pd.DataFrame({
                "rank": np.full(len(bi), rank, np.int32), "seq": o.burst_seq[bi], "function": "",
                "line_bytes": np.full(len(bi), lb, np.int32), "access": ai.astype(np.int8),
                "bin": ki.astype(np.int16), "count": h[bi, ai, ki]}))
            if fh is not None and len(o.function):
                fi, ai, ki = np.nonzero(fh)
                rows = pd.DataFrame({"function": o.function[fi], "access": ai.astype(np.int8),
                                     "bin": ki.astype(np.int16), "count": fh[fi, ai, ki]})
                rows = rows.groupby(["function", "access", "bin"], as_index=False, sort=False)["count"].sum()
                reuse.append(rows.assign(rank=np.int32(rank), seq=np.int64(-1), line_bytes=np.int32(lb)))
        if len(o.function):
            f = pd.DataFrame({"function": o.function, "object": o.object})
            for i, name in enumerate(COUNTERS):
                f[name] = o.functions[:, i].astype(np.int64)
            f = f.groupby(["function", "object"], as_index=False, sort=False).sum()  # names cut at 63 chars
            f = f[f["instructions"] > 0]
            d = _derived(f[list(COUNTERS)].to_numpy(np.uint64))
            funcs.append(pd.DataFrame({"rank": np.full(len(f), rank, np.int32), "function": f["function"].to_numpy(),
                                       "object": f["object"].to_numpy(), **d})
                         .sort_values("instructions", ascending=False, kind="stable"))
    cat = (lambda parts, spec: spec.coerce(pd.concat(parts, ignore_index=True)) if parts else spec.empty())
    tables = {"bursts": cat(bursts, BURSTS), "reuse": cat(reuse, REUSE), "functions": cat(funcs, FUNCTIONS),
              "burst_functions": cat(split, BURST_FUNCTIONS), "burst_names": cat(names, BURST_NAMES)}
    check_tables(tables)
    return tables


_PY_HOOK = r"""# pmac memory tracer: name numba-jitted code (entry address of every compiled overload at exit)
import atexit, os, sys


def _pmac_numba_dump():
    if "numba" not in sys.modules or not os.environ.get("PMAC_VG_DIR"):
        return
    try:
        import gc
        from numba.core.dispatcher import Dispatcher
        rows = []
        for d in gc.get_objects():
            if isinstance(d, Dispatcher):
                f = getattr(d, "py_func", None)
                name = "%s.%s" % (getattr(f, "__module__", None) or "?", getattr(f, "__qualname__", None) or "?")
                for cres in list(d.overloads.values()):
                    try:
                        addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
                    except Exception:
                        continue
                    if addr:
                        rows.append("%x %s" % (addr, name))
        with open(os.path.join(os.environ["PMAC_VG_DIR"], "numba-%d.txt" % os.getpid()), "w") as f:
            f.write("".join(r + chr(10) for r in rows))
    except Exception:
        pass


atexit.register(_pmac_numba_dump)
_here = os.path.dirname(os.path.abspath(__file__))
try:  # chain to the sitecustomize this one shadows
    import importlib.machinery, importlib.util
    _spec = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
    if _spec is not None:
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
except Exception:
    pass
"""


def read_jit_symbols(folder: Path) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``numba-<pid>.txt`` files: pid -> (sorted entry addresses, function names)."""
    out = {}
    for p in Path(folder).glob("numba-*.txt"):
        try:
            pid = int(p.stem.split("-", 1)[1])
            rows = [ln.split(" ", 1) for ln in p.read_text().splitlines() if " " in ln]
            addr = np.array([int(a, 16) for a, _ in rows], dtype=np.uint64)
        except ValueError:
            continue
        names = np.array([n for _, n in rows], dtype=object)
        order = np.argsort(addr, kind="stable")
        out[pid] = (addr[order], names[order])
    return out


def name_jit_code(o: ToolOutput, symbols: tuple[np.ndarray, np.ndarray], *, max_size: int = 1 << 20) -> ToolOutput:
    """Rename the anonymous-code rows (``?0x<block>``, no object) after the jitted functions."""
    addr, names = symbols
    if not len(addr) or not len(o.function):
        return o
    fn = o.function.astype(object).copy()
    ob = o.object.astype(object).copy()
    for k, (f, obj) in enumerate(zip(o.function, o.object)):
        if obj or not f.startswith("?0x"):
            continue
        a = int(f[3:], 16)
        i = int(np.searchsorted(addr, np.uint64(a), side="right")) - 1
        if i < 0 and len(addr) and int(addr[0]) - a < 64:
            i = 0  # the block holding the entry point starts just before it
        if i >= 0 and a + 64 > int(addr[i]) and a - int(addr[i]) < max_size:
            fn[k], ob[k] = names[i], "numba"
    return dataclasses.replace(o, function=fn.astype(str), object=ob.astype(str))


_WRAPPER = """#!/bin/sh
# pmac memory tracer: run this rank under valgrind when it is one of PMAC_VG_RANKS
r="${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}"
case " $PMAC_VG_RANKS " in
  *" $r "*|"  ") exec %(vg)s --pmac-out="$PMAC_VG_DIR/rank-$r" "$@" ;;
esac
exec "$@"
"""


def _program_index(argv: list[str]) -> int:
    from .shim_build import _LAUNCHERS, find_program

    if Path(argv[0]).name not in _LAUNCHERS:
        return 0
    prog = find_program(argv)
    for i, tok in enumerate(argv[1:], 1):
        if tok.startswith("-") or tok.isdigit():
            continue
        p = shutil.which(tok) if "/" not in tok else tok
        if p and os.path.abspath(p) == prog:
            return i
    raise InputError(f"cannot find the program in: {shlex.join(argv)}")


@dataclass(frozen=True, kw_only=True)
class ToolRun:
    files: dict[int, Path]               # summary file per traced rank
    streams: dict[int, AccessStream]     # ranks whose accesses went through a FIFO
    #: pid -> numba entry points (see :func:`read_jit_symbols`)
    jit_symbols: dict[int, tuple[np.ndarray, np.ndarray]]
    returncode: int
    wall_s: float
    stderr: str

    def output(self, rank: int) -> ToolOutput:
        o = read_tool_output(self.files[rank], self.streams.get(rank))
        return name_jit_code(o, self.jit_symbols[o.pid]) if o.pid in self.jit_symbols else o


def _n_ranks(launcher_args: list[str]) -> int | None:
    for flag in ("-n", "-np", "--n", "--np"):
        if flag in launcher_args:
            k = launcher_args.index(flag)
            if k + 1 < len(launcher_args) and launcher_args[k + 1].isdigit():
                return int(launcher_args[k + 1])
    return None


def run_under_tool(argv: list[str], out_dir: str | Path, *, ranks: tuple[int, ...] | None = None,
                   sample_rate: float = DEFAULT_SAMPLE_RATE, fetch_sample_rate: float = DEFAULT_FETCH_SAMPLE_RATE,
                   env: dict | None = None, timeout_s: float | None = None, stream: bool = False,
                   line_sizes: tuple[int, ...] = LINE_SIZES_BYTES) -> ToolRun:
    """Run the command with the sampled ranks under pmac_vg (data sampled at ``sample_rate``, code
    at ``fetch_sample_rate``).

    ``stream=True``: the sampled accesses of each traced rank go through a FIFO into reuse
    histograms while the program runs (nothing on disk); else into ``rank-N.acc`` files.
    """
    from .reuse import threshold_for

    if not argv:
        raise InputError("no command to trace (give it after --)")
    tool = build_tool()
    thresholds = {"sample_threshold": threshold_for(sample_rate),
                  "fetch_sample_threshold": threshold_for(fetch_sample_rate)}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    e = dict(os.environ if env is None else env)
    e["VALGRIND_LIB"] = tool.lib_dir
    e.setdefault("NUMBA_CPU_NAME", DEFAULT_NUMBA_CPU)
    hook = out_dir / "pyhook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_PY_HOOK)
    e["PYTHONPATH"] = str(hook) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["PMAC_VG_DIR"] = str(out_dir)
    i = _program_index(argv)
    if i > 0:  # MPI: preload the shim for burst marks, wrap the program
        from .mpi import mpi_env
        from .shim_build import shim_for

        e = mpi_env(e)
        shim = shim_for(argv, e)
        e["LD_PRELOAD"] = shim.library + (" " + e["LD_PRELOAD"] if e.get("LD_PRELOAD") else "")
        e.pop("PMAC_TRACE_DIR", None)
        vg = [a for a in valgrind_command(tool, "", **thresholds) if not a.startswith("--pmac-out=")]
        wrapper = out_dir / "pmac-vg-wrap.sh"
        wrapper.write_text(_WRAPPER % {"vg": shlex.join(vg)})
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        e["PMAC_VG_DIR"] = str(out_dir)
        e["PMAC_VG_RANKS"] = " ".join(str(r) for r in ranks) if ranks else ""
        cmd = argv[:i] + [str(wrapper)] + argv[i:]
    else:
        cmd = valgrind_command(tool, out_dir / "rank-0", **thresholds) + argv
    traced = [0] if i == 0 else list(ranks) if ranks else \
        (list(range(_n_ranks(argv[1:i]))) if _n_ranks(argv[1:i]) else [])
    streams = {}
    if stream:
        for r in traced:
            fifo = out_dir / f"rank-{r}.acc"
            os.mkfifo(fifo)
            streams[r] = AccessStream(fifo, tuple(line_sizes))
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=timeout_s)
        rc, err = r.returncode, r.stderr
    except FileNotFoundError:
        for st in streams.values():
            st.release()
        raise InputError(f"command not found: {cmd[0]}") from None
    except subprocess.TimeoutExpired as exc:
        rc, err = -9, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    for st in streams.values():
        st.release()   # the analysis ran alongside; this waits for its last chunk
    wall = time.monotonic() - t0
    if any(s in err for s in _UNHANDLED):
        raise InputError("valgrind 3.19 met an instruction it cannot run (AVX-512 or newer): build the traced "
                         "program for a baseline ISA (e.g. -march=x86-64-v3; numba: NUMBA_CPU_NAME=haswell)")
    files = {}
    for p in out_dir.glob("rank-*"):
        if p.suffix == ".acc":
            continue
        try:
            files[int(p.name.split("-", 1)[1])] = p
        except ValueError:
            continue
    if not files:
        tail = " | ".join(err.strip().splitlines()[-3:])
        raise InputError(f"the memory tracer wrote nothing (exit code {rc}): {tail or 'no message'}")
    return ToolRun(files=files, streams={r: s for r, s in streams.items() if r in files},
                   jit_symbols=read_jit_symbols(out_dir), returncode=rc, wall_s=wall, stderr=err)


def trace_memory(argv: list[str], out: Path, *, ranks: tuple[int, ...] | None = None,
                 progress: Callable[[float, str], None] | None = None, sample_rate: float = DEFAULT_SAMPLE_RATE,
                 fetch_sample_rate: float = DEFAULT_FETCH_SAMPLE_RATE, timeout_s: float | None = None,
                 env: dict | None = None) -> Path:
    """Take the memory signature of ``argv`` into the signature folder ``out``; returns ``out``.
    ``env``: the program's environment (default: this process's).

    When ``out`` holds a signature (e.g. from ``pmac trace`` just before), its header and
    events are kept and ``memory.npz`` is added; otherwise a memory-only signature is made.
    """
    out = Path(out)
    progress = progress or (lambda f, m: None)
    progress(0.0, "building the valgrind tool")
    build_tool()
    tmp = Path(tempfile.mkdtemp(prefix=".mem-", dir=out.parent if out.parent.exists() else None))
    try:
        progress(0.05, "running under valgrind")
        run = run_under_tool(argv, tmp, ranks=ranks, sample_rate=sample_rate, fetch_sample_rate=fetch_sample_rate,
                             timeout_s=timeout_s, stream=True, env=env)
        rc, wall = run.returncode, run.wall_s
        progress(0.7, "computing reuse distances")
        outputs = {r: run.output(r) for r in sorted(run.files)}
        tables = memory_tables(outputs)
        progress(0.95, "saving")
        made = provenance()
        info = {"memory_command": shlex.join(argv), "memory_created_utc": made["created_utc"],
                "memory_host": made["host"], "memory_cpu_model": made["cpu_model"],
                "memory_ranks": sorted(outputs), "memory_wall_s": float(wall),
                "memory_streamed_ranks": sorted(run.streams),
                "memory_analysis_cpu_s": {int(r): round(float(st.cpu_s), 3) for r, st in sorted(run.streams.items())},
                "memory_exit_code": int(rc), "memory_sample_rate": float(sample_rate),
                "memory_fetch_sample_rate": float(fetch_sample_rate),
                "numba_cpu_name": os.environ.get("NUMBA_CPU_NAME", DEFAULT_NUMBA_CPU),
                "mpi_instructions": {int(r): int(o.mpi["instructions"]) for r, o in outputs.items()}}
        if (out / HEADER_FILE).exists():
            sig = load_signature(out, with_memory=False)
            warn = _check_join(sig, outputs)
            header = dataclasses.replace(sig.header, memory_file=MEMORY_FILE,
                                         provenance=dict(sig.header.provenance) | {"memory": info | {"warnings": warn}})
            sig = dataclasses.replace(sig, header=header, memory=tables)
        else:
            n = max(outputs) + 1
            header = SignatureHeader(name=out.name, n_ranks=n, source_format="memory-only",
                                     command=shlex.join(argv), memory_file=MEMORY_FILE, burst_source="memory",
                                     provenance=provenance(command=shlex.join(argv)) | {"memory": info})
            from .trace import EVENTS

            sig = make_signature(header, EVENTS.empty(), memory=tables)
        save_signature(sig, out)
        progress(1.0, "done")
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_join(sig: Signature, outputs: dict[int, ToolOutput]) -> list[str]:
    """Warnings where the bursts do not line up with the MPI calls of the events table."""
    warn = []
    ev = sig.events
    for r, o in outputs.items():
        if r >= sig.n_ranks:
            warn.append(f"memory trace of rank {r} but the signature has {sig.n_ranks} ranks")
            continue
        n_calls = int((ev["rank"] == r).sum())
        if n_calls and len(o.burst_seq) != n_calls + 1:
            warn.append(f"rank {r}: {len(o.burst_seq)} bursts for {n_calls} MPI calls (expected calls + 1)")
    return warn

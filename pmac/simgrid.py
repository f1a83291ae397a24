"""SimGrid time-independent traces (TiT): import into signature tables, export for ``smpirun -replay``.

The format (SimGrid's SMPI replay; one action per line, ``rank action args``) counts data in
elements of a datatype and computation in flops, with no times. Sizes here are converted to
bytes: the default datatype is MPI_BYTE, or MPI_DOUBLE after ``init 1``; an explicit datatype
argument is a SimGrid datatype id (:data:`DATATYPE_BYTES`).

Import (:func:`read_simgrid`): one file holding every rank's lines, several per-rank files, or
an index file listing per-rank files (SimGrid's ``split_traces``). Mapping to pmac.trace:

- ``compute F`` (flops) and the computation part of ``reduce``/``allreduce``/``reducescatter``/
  ``scan``/``exscan`` accumulate into the burst *before the next call* of the rank (SimGrid runs
  that computation right after the collective's communication, so the timing is the same). The
  flops go into the memory signature's ``bursts`` table (column ``flop``, other counts 0, keyed
  by ``(rank, seq)`` of the call that ends the burst); ``burst_s`` stays 0 and the header says
  ``burst_source: memory``.
- ``sleep T`` adds ``T`` seconds to ``burst_s`` (a trace of sleeps alone is ``burst_source:
  measured``). ``t_start_s``/``t_end_s`` are the running sum of ``burst_s`` (calls take no time).
- ``isend``/``irecv`` create requests (ids from 1 per rank); ``wait src dst tag`` completes the
  oldest pending request with that key (SimGrid's rule); ``test`` names it without completing it
  (whether a test succeeds is the replay's business); ``waitall`` completes every pending request.
- Vector collectives store per-peer byte counts in ``vcounts`` as the PMPI tracer does:
  ``send_bytes`` = bytes from this rank to the peer, ``recv_bytes`` = bytes from the peer to this
  rank; gatherv/scatterv at the root only; allgatherv/alltoallv on every rank; reducescatter:
  ``send_bytes`` = the peer's block size, ``recv_bytes`` = this rank's block size.
- Collective byte columns (this rank's view): bcast root sends / others receive ``n``; reduce sends
  ``n``, root also receives ``n``; allreduce/scan send and receive ``n``; gather/allgather send ``s``,
  receive ``P r`` (gather: root only); scatter root sends ``P s``, all receive ``r``; alltoall send
  ``P s`` and receive ``P r``; v-variants send/receive the sums of their counts.
- ``comm_split``/``comm_dup`` become COMM_SPLIT/COMM_DUP events (SimGrid ignores them; no new
  communicator); ``comm_size`` and ``location`` are ignored.

Export (:func:`write_simgrid`): one file per rank plus an index file for ``smpirun -replay``,
sizes in bytes (default datatype MPI_BYTE). A burst becomes ``sleep burst_s`` (exact seconds,
independent of the platform's host speed) and/or ``compute flop`` from the bursts table; with
``flop_per_s`` given, seconds become ``compute burst_s*flop_per_s`` instead. Waits on a subset of
the pending requests become one ``wait`` per request; a test that completed a request becomes a
``wait``. Calls SimGrid cannot replay (probes, persistent-request setup, non-world collectives,
communicator creation other than split/dup, OTHER) are skipped and counted in the result.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InputError
from .memsig import BURSTS
from .schema import atomic_write_text, ensure_folder, provenance
from .signature import Signature, SignatureHeader, make_signature
from .trace import ANY_SOURCE, NONE, Op, op_name

#: SimGrid datatype id -> size in bytes (smpi_datatype.cpp; ids are stable in its traces)
DATATYPE_BYTES = {
    0: 8, 1: 4, 2: 1, 3: 2, 4: 8, 5: 4, 6: 1, 7: 8, 8: 1, 9: 1, 10: 2, 11: 4, 12: 8, 13: 8, 14: 16,
    15: 4, 16: 1, 17: 1, 18: 2, 19: 4, 20: 8, 21: 1, 22: 2, 23: 4, 24: 8, 25: 8, 26: 16, 27: 32,
    28: 8, 29: 8, 30: 8, 31: 16, 32: 16, 33: 8, 34: 8, 35: 8, 36: 16, 37: 16, 38: 4, 39: 4, 40: 8,
    41: 16, 42: 8, 43: 16, 44: 16, 45: 4, 46: 2, 47: 4, 48: 8, 49: 16,
}
BYTE_ID = 6
DOUBLE_ID = 0

_EVENT_COLUMNS = ("rank", "seq", "op", "t_start_s", "t_end_s", "burst_s", "comm", "dest", "source",
                  "send_tag", "recv_tag", "send_bytes", "recv_bytes", "root", "request", "req_offset",
                  "n_requests", "new_comm")
_IDX = {c: i for i, c in enumerate(_EVENT_COLUMNS)}


@dataclass(kw_only=True)
class _RankState:
    rank: int
    default_dt: int = BYTE_ID
    rows: list = field(default_factory=list)
    requests: list = field(default_factory=list)  # (rank, request, completed, source, recv_bytes)
    burst_s: float = 0.0
    flop: float = 0.0
    clock_s: float = 0.0
    next_request: int = 1
    #: (src, dst, tag) -> deque of (request id, is_recv, recv_bytes)
    pending: dict = field(default_factory=lambda: defaultdict(deque))
    order: list = field(default_factory=list)  # pending request ids in posting order


class _Parser:
    """Builds the tables from actions; one instance per import."""

    def __init__(self, n_ranks: int):
        self.n = n_ranks
        self.ranks = {r: _RankState(rank=r) for r in range(n_ranks)}
        self.vcounts: list[tuple] = []
        self.bursts: list[tuple] = []
        self.has_compute = False
        self.file = ""
        self.lineno = 0

    # -------------------------------------------------------------- helpers
    def fail(self, msg: str):
        raise InputError(msg, path=f"{self.file}:{self.lineno}")

    def num(self, tok: str, what: str) -> float:
        try:
            return float(tok)
        except ValueError:
            self.fail(f"{what}: expected a number, found {tok!r}")

    def count(self, tok: str, what: str) -> int:
        v = self.num(tok, what)
        return int(math.trunc(v))

    def peer(self, tok: str, what: str) -> int:
        try:
            v = int(tok)
        except ValueError:
            self.fail(f"{what}: expected a rank, found {tok!r}")
        if not 0 <= v < self.n:
            self.fail(f"{what}: rank {v} outside 0..{self.n - 1}")
        return v

    def dt(self, st: _RankState, args: list[str], i: int) -> int:
        if i < len(args):
            try:
                dtid = int(args[i])
            except ValueError:
                self.fail(f"datatype id {args[i]!r} is not an integer")
            if dtid not in DATATYPE_BYTES:
                self.fail(f"unknown SimGrid datatype id {dtid}")
            return DATATYPE_BYTES[dtid]
        return DATATYPE_BYTES[st.default_dt]

    def nargs(self, args: list[str], lo: int, hi: int, action: str):
        if not lo <= len(args) <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            self.fail(f"'{action}' takes {want} arguments, found {len(args)}")

    def emit(self, st: _RankState, op: Op, **kw) -> int:
        seq = len(st.rows)
        t = st.clock_s + st.burst_s
        row = [st.rank, seq, int(op), t, t, st.burst_s, 0, NONE, NONE, NONE, NONE, 0, 0, NONE, NONE, NONE, 0, NONE]
        for k, v in kw.items():
            row[_IDX[k]] = v
        st.clock_s = t
        if st.flop:
            self.bursts.append((st.rank, seq, st.flop))
            st.flop = 0.0
        st.burst_s = 0.0
        st.rows.append(row)
        return seq

    # -------------------------------------------------------------- actions
    def action(self, rank: int, name: str, args: list[str]):
        st = self.ranks[rank]
        a = name.lower() if name != "sendRecv" else name
        if a == "init":
            self.nargs(args, 0, 1, a)
            st.default_dt = DOUBLE_ID if args else BYTE_ID
            self.emit(st, Op.INIT)
        elif a == "finalize":
            self.emit(st, Op.FINALIZE)
        elif a == "compute":
            self.nargs(args, 1, 1, a)
            st.flop += self.num(args[0], "compute flops")
            self.has_compute = True
        elif a == "sleep":
            self.nargs(args, 1, 1, a)
            st.burst_s += self.num(args[0], "sleep seconds")
        elif a in ("send", "isend", "recv", "irecv"):
            self.nargs(args, 3, 4, a)
            partner = self.peer(args[0], f"{a} partner")
            tag = int(self.count(args[1], f"{a} tag"))
            n = self.count(args[2], f"{a} size")
            if n < 0:
                self.fail(f"'{a}' with unknown size ({n}) is not supported")
            nbytes = n * self.dt(st, args, 3)
            if a in ("send", "isend"):
                kw = dict(dest=partner, send_tag=tag, send_bytes=nbytes)
                key = (rank, partner, tag)
            else:
                kw = dict(source=partner, recv_tag=tag, recv_bytes=nbytes)
                key = (partner, rank, tag)
            if a[0] == "i":
                rid = st.next_request
                st.next_request += 1
                st.pending[key].append((rid, a == "irecv", partner, nbytes))
                st.order.append(rid)
                kw["request"] = rid
                self.emit(st, Op.ISEND if a == "isend" else Op.IRECV, **kw)
            else:
                self.emit(st, Op.SEND if a == "send" else Op.RECV, **kw)
        elif a in ("wait", "test"):
            self.nargs(args, 3, 3, a)
            key = (self.peer(args[0], f"{a} src"), self.peer(args[1], f"{a} dst"), self.count(args[2], f"{a} tag"))
            q = st.pending.get(key)
            if not q:
                # SimGrid ignores a wait/test whose request is gone (completed by an earlier test)
                self.emit(st, Op.WAIT if a == "wait" else Op.TEST)
                return
            rid, is_recv, partner, nbytes = q[0]
            if a == "wait":
                q.popleft()
                st.order.remove(rid)
            off, k = len(st.requests), 1
            st.requests.append((rank, rid, 1 if a == "wait" else 0, partner if is_recv else NONE,
                                  nbytes if is_recv else 0))
            self.emit(st, Op.WAIT if a == "wait" else Op.TEST, req_offset=off, n_requests=k)
        elif a == "waitall":
            self.nargs(args, 0, 0, a)
            entries = {}
            for q in st.pending.values():
                for rid, is_recv, partner, nbytes in q:
                    entries[rid] = (is_recv, partner, nbytes)
            ids = [r for r in st.order if r in entries]
            off = len(st.requests) if ids else NONE
            for rid in ids:
                is_recv, partner, nbytes = entries[rid]
                st.requests.append((rank, rid, 1, partner if is_recv else NONE, nbytes if is_recv else 0))
            st.pending.clear()
            st.order.clear()
            self.emit(st, Op.WAITALL, req_offset=off, n_requests=len(ids))
        elif a == "sendRecv":
            self.nargs(args, 4, 6, a)
            s = self.count(args[0], "sendRecv sendcount") * self.dt(st, args, 4)
            dst = self.peer(args[1], "sendRecv dst")
            r = self.count(args[2], "sendRecv recvcount") * self.dt(st, args, 5)
            src = self.peer(args[3], "sendRecv src")
            self.emit(st, Op.SENDRECV, dest=dst, source=src, send_tag=0, recv_tag=0, send_bytes=s, recv_bytes=r)
        elif a == "barrier":
            self.emit(st, Op.BARRIER)
        elif a == "bcast":
            self.nargs(args, 1, 3, a)
            n = self.count(args[0], "bcast size") * self.dt(st, args, 2)
            root = self.peer(args[1], "bcast root") if len(args) > 1 else 0
            self.emit(st, Op.BCAST, root=root, send_bytes=n if rank == root else 0,
                      recv_bytes=0 if rank == root else n)
        elif a in ("reduce", "allreduce", "scan", "exscan"):
            hi = 4 if a == "reduce" else 3
            self.nargs(args, 2, hi, a)
            if a == "reduce":
                n = self.count(args[0], "reduce size") * self.dt(st, args, 3)
                root = self.peer(args[2], "reduce root") if len(args) > 2 else 0
                self.emit(st, Op.REDUCE, root=root, send_bytes=n, recv_bytes=n if rank == root else 0)
            else:
                n = self.count(args[0], f"{a} size") * self.dt(st, args, 2)
                op = {"allreduce": Op.ALLREDUCE, "scan": Op.SCAN, "exscan": Op.EXSCAN}[a]
                self.emit(st, op, send_bytes=n, recv_bytes=n)
            self.add_comp(st, args[1])
        elif a in ("alltoall", "allgather", "gather"):
            hi = 5 if a == "gather" else 4
            self.nargs(args, 2, hi, a)
            s_i, r_i = (3, 4) if a == "gather" else (2, 3)
            s = self.count(args[0], f"{a} send size") * self.dt(st, args, s_i)
            r = self.count(args[1], f"{a} recv size") * self.dt(st, args, r_i)
            if a == "alltoall":
                self.emit(st, Op.ALLTOALL, send_bytes=s * self.n, recv_bytes=r * self.n)
            elif a == "allgather":
                self.emit(st, Op.ALLGATHER, send_bytes=s, recv_bytes=r * self.n)
            else:
                root = self.peer(args[2], "gather root") if len(args) > 2 else 0
                self.emit(st, Op.GATHER, root=root, send_bytes=s, recv_bytes=r * self.n if rank == root else 0)
        elif a == "scatter":
            self.nargs(args, 2, 5, a)
            s = self.count(args[0], "scatter send size") * self.dt(st, args, 3)
            r = self.count(args[1], "scatter recv size") * self.dt(st, args, 4)
            root = self.peer(args[2], "scatter root") if len(args) > 2 else 0
            self.emit(st, Op.SCATTER, root=root, send_bytes=s * self.n if rank == root else 0, recv_bytes=r)
        elif a in ("allgatherv", "gatherv"):
            P = self.n
            if len(args) < 1 + P:
                self.fail(f"'{a}' needs a send size and {P} receive counts, found {len(args)} arguments")
            if a == "gatherv":
                root = self.peer(args[1 + P], "gatherv root") if len(args) > 1 + P else 0
                d1, d2 = self.dt(st, args, 2 + P), self.dt(st, args, 3 + P)
            else:
                root = NONE
                extra = len(args) - 1 - P  # dt1 dt2 [disps...] or disps only
                if extra >= 2 + P:
                    d1, d2 = self.dt(st, args, 1 + P), self.dt(st, args, 2 + P)
                elif extra > 2:
                    d1 = d2 = DATATYPE_BYTES[st.default_dt]
                else:
                    d1, d2 = self.dt(st, args, 1 + P), self.dt(st, args, 2 + P)
            s = self.count(args[0], f"{a} send size") * d1
            rc = [self.count(t, f"{a} recv count") * d2 for t in args[1:1 + P]]
            seq = self.emit(st, Op.GATHERV if a == "gatherv" else Op.ALLGATHERV, root=root, send_bytes=s,
                            recv_bytes=sum(rc) if (a == "allgatherv" or rank == root) else 0)
            if a == "allgatherv":
                for p in range(P):
                    self.vcounts.append((rank, seq, p, s, rc[p]))
            elif rank == root:  # like the PMPI tracer: per-peer counts at the root only
                for p in range(P):
                    self.vcounts.append((rank, seq, p, 0, rc[p]))
        elif a == "scatterv":
            P = self.n
            if len(args) < 1 + P:
                self.fail(f"'scatterv' needs {P} send counts and a receive size, found {len(args)} arguments")
            root = self.peer(args[1 + P], "scatterv root") if len(args) > 1 + P else 0
            d1, d2 = self.dt(st, args, 2 + P), self.dt(st, args, 3 + P)
            sc = [self.count(t, "scatterv send count") * d1 for t in args[0:P]]
            r = self.count(args[P], "scatterv recv size") * d2
            seq = self.emit(st, Op.SCATTERV, root=root, send_bytes=sum(sc) if rank == root else 0, recv_bytes=r)
            if rank == root:
                for p in range(P):
                    self.vcounts.append((rank, seq, p, sc[p], 0))
        elif a == "alltoallv":
            P = self.n
            if len(args) < 2 + 2 * P:
                self.fail(f"'alltoallv' needs 2 buffer sizes and 2x{P} counts, found {len(args)} arguments")
            d1, d2 = self.dt(st, args, 2 + 2 * P), self.dt(st, args, 3 + 2 * P)
            sc = [self.count(t, "alltoallv send count") * d1 for t in args[1:1 + P]]
            rc = [self.count(t, "alltoallv recv count") * d2 for t in args[2 + P:2 + 2 * P]]
            seq = self.emit(st, Op.ALLTOALLV, send_bytes=sum(sc), recv_bytes=sum(rc))
            for p in range(P):
                self.vcounts.append((rank, seq, p, sc[p], rc[p]))
        elif a == "reducescatter":
            P = self.n
            if len(args) < 1 + P:
                self.fail(f"'reducescatter' needs {P} receive counts and a computation size, "
                          f"found {len(args)} arguments")
            d = self.dt(st, args, 1 + P)
            rc = [self.count(t, "reducescatter recv count") * d for t in args[0:P]]
            seq = self.emit(st, Op.REDUCE_SCATTER, send_bytes=sum(rc), recv_bytes=rc[rank])
            for p in range(P):
                self.vcounts.append((rank, seq, p, rc[p], rc[rank]))
            self.add_comp(st, args[P])
        elif a == "comm_split":
            self.emit(st, Op.COMM_SPLIT)
        elif a == "comm_dup":
            self.emit(st, Op.COMM_DUP)
        elif a in ("comm_size", "location"):
            pass
        else:
            self.fail(f"unknown SimGrid action '{name}'")

    def add_comp(self, st: _RankState, tok: str):
        f = self.num(tok, "computation size")
        if f:
            st.flop += f
            self.has_compute = True

    # -------------------------------------------------------------- result
    def tables(self):
        for st in self.ranks.values():
            if st.flop or st.burst_s:  # computation after the last call: carried by a FINALIZE
                self.emit(st, Op.FINALIZE)
        rows, reqs = [], []
        for r in sorted(self.ranks):  # rank-major; request offsets become global
            st = self.ranks[r]
            base = len(reqs)
            if base:
                for row in st.rows:
                    if row[_IDX["req_offset"]] != NONE:
                        row[_IDX["req_offset"]] += base
            rows += st.rows
            reqs += st.requests
        events = pd.DataFrame.from_records(rows, columns=list(_EVENT_COLUMNS)) if rows else None
        requests = pd.DataFrame(reqs, columns=["rank", "request", "completed", "source", "recv_bytes"])
        vcounts = pd.DataFrame(sorted(self.vcounts), columns=["rank", "seq", "peer", "send_bytes", "recv_bytes"])
        return events, requests, vcounts


def _is_action_line(tokens: list[str]) -> bool:
    if len(tokens) < 2:
        return False
    try:
        int(tokens[0])
    except ValueError:
        return False
    return True


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError("is a folder, expected a SimGrid trace or index file", path=path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file", path=path) from None


def _expand(paths: list[Path]) -> tuple[list[Path], int]:
    """Action files from the arguments (index files, one path per line, are expanded) and the
    number of per-rank files the indexes list (a rank with no actions still counts)."""
    out = []
    n_listed = 0
    for p in paths:
        lines = [ln.strip() for ln in _read_lines(p) if ln.strip() and not ln.lstrip().startswith("#")]
        if not lines:
            if len(paths) > 1:  # an empty per-rank file among several
                continue
            raise InputError("empty SimGrid trace", path=p)
        if _is_action_line(lines[0].split()):
            out.append(p)
            continue
        n_listed += len(lines)
        for ln in lines:  # an index: paths relative to it, else to its parent (SimGrid's cwd)
            cand = [Path(ln)] if Path(ln).is_absolute() else [p.parent / ln, p.parent.parent / ln, Path(ln)]
            found = next((c for c in cand if c.is_file()), None)
            if found is None:
                raise InputError(f"index lists {ln!r}, which is not a file", path=p)
            out.append(found)
    return out, n_listed


def read_simgrid(paths, *, name: str | None = None, n_ranks: int | None = None,
                 description: str = "") -> Signature:
    """Import SimGrid time-independent trace file(s) into a :class:`Signature` (see module doc)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError("no SimGrid trace given")
    files, n_listed = _expand(paths)
    per_file = []  # (file, [(lineno, rank, action, args)])
    max_rank = -1
    for f in files:
        acts = []
        for i, ln in enumerate(_read_lines(f), 1):
            tok = ln.split()
            if not tok or tok[0][0] == "#":
                continue
            try:
                r = int(tok[0])
            except ValueError:
                r = -1
            if r < 0 or len(tok) < 2:
                raise InputError(f"line {i}: expected 'rank action args' with a rank >= 0, "
                                 f"found {ln.strip()!r:.60}", path=f)
            if r > max_rank:
                max_rank = r
            acts.append((i, r, tok[1], tok[2:]))
        per_file.append((f, acts))
    if max_rank < 0:
        raise InputError("no actions found", path=paths[0])
    n = n_ranks if n_ranks is not None else max(max_rank + 1, n_listed)
    if max_rank >= n:
        raise InputError(f"rank {max_rank} appears but n_ranks is {n}", path=paths[0])
    ps = _Parser(n)
    for f, acts in per_file:
        ps.file = str(f)
        action = ps.action
        for i, r, act, args in acts:
            ps.lineno = i
            action(r, act, args)
    events, requests, vcounts = ps.tables()
    if events is None:
        raise InputError("no MPI calls found (only computation)", path=paths[0])
    memory = {}
    if ps.bursts:
        b = np.array(sorted(ps.bursts), dtype=np.float64).reshape(-1, 3)
        cols = {c: np.zeros(len(b), dtype=d) for c, d in BURSTS.columns}
        cols["rank"] = b[:, 0].astype(np.int32)
        cols["seq"] = b[:, 1].astype(np.int64)
        cols["flop"] = b[:, 2]
        # the format gives flops only: divides and chains not counted, no accesses sampled away
        cols["fp_divsqrt"][:] = -1
        cols["fp_recurrence"][:] = -1
        cols["sample_frac"][:] = 1.0
        memory["bursts"] = pd.DataFrame(cols)
    if name is None:
        name = files[0].stem if len(files) == 1 else files[0].parent.name or "simgrid"
    header = SignatureHeader(
        name=name, n_ranks=n, source_format="simgrid",
        description=description or f"imported from SimGrid time-independent trace {', '.join(p.name for p in paths)}",
        parameters={"files": [str(p) for p in paths]},
        burst_source="memory" if ps.has_compute else "measured",
        provenance=provenance(inputs={str(f): f for f in dict.fromkeys(files)}),
    )
    return make_signature(header, events, requests=requests, vcounts=vcounts, memory=memory)


# ====================================================================== export

@dataclass(frozen=True, kw_only=True)
class SimgridExport:
    index_file: Path
    rank_files: tuple[Path, ...]
    n_actions: int
    #: op name -> number of calls not representable in SimGrid's format (skipped)
    skipped: dict[str, int] = field(default_factory=dict)


def _fmt(x: float) -> str:
    r = repr(float(x))
    return r[:-2] if r.endswith(".0") else r


_K = {}
for _o in (Op.SEND, Op.SSEND, Op.BSEND, Op.RSEND):
    _K[int(_o)] = "send"
for _o in (Op.ISEND, Op.ISSEND, Op.IBSEND, Op.IRSEND):
    _K[int(_o)] = "isend"
for _o in (Op.WAIT, Op.WAITALL, Op.WAITANY, Op.WAITSOME, Op.TEST, Op.TESTALL, Op.TESTANY, Op.TESTSOME):
    _K[int(_o)] = "complete"
for _o in (Op.ALLGATHERV, Op.GATHERV, Op.ALLTOALLV, Op.SCATTERV, Op.REDUCE_SCATTER):
    _K[int(_o)] = "vcoll"
_K.update({int(Op.INIT): "init", int(Op.FINALIZE): "finalize", int(Op.RECV): "recv", int(Op.MRECV): "recv",
           int(Op.IRECV): "irecv", int(Op.IMRECV): "irecv", int(Op.SENDRECV): "sendrecv",
           int(Op.SENDRECV_REPLACE): "sendrecv", int(Op.BARRIER): "barrier", int(Op.BCAST): "bcast",
           int(Op.REDUCE): "reduce", int(Op.ALLREDUCE): "allreduce", int(Op.SCAN): "scan",
           int(Op.EXSCAN): "exscan", int(Op.ALLTOALL): "alltoall", int(Op.ALLGATHER): "allgather",
           int(Op.GATHER): "gather", int(Op.SCATTER): "scatter", int(Op.COMM_SPLIT): "comm_split",
           int(Op.COMM_DUP): "comm_dup"})
_COLL = {"barrier", "bcast", "reduce", "allreduce", "scan", "exscan", "alltoall", "allgather", "gather",
         "scatter", "vcoll"}
_WAIT_OPS = {int(Op.WAIT), int(Op.WAITALL)}


def simgrid_lines(sig: Signature, *, flop_per_s: float | None = None) -> tuple[dict[int, list[str]], dict[str, int]]:
    """The action lines of each rank (without the file I/O) and the skipped calls by op name."""
    ev = sig.events.sort_values(["rank", "seq"], kind="stable").reset_index(drop=True)
    n = sig.n_ranks
    m = len(ev)
    # per-event arrays: communicator size, flops of the burst before the call
    csize = sig.comms.groupby("comm").size() if len(sig.comms) else pd.Series({0: n})
    P_ev = csize.reindex(ev["comm"].to_numpy()).fillna(n).to_numpy().astype(np.int64).tolist()
    flop_ev = [0.0] * m
    mem_b = sig.memory.get("bursts")
    if mem_b is not None and len(mem_b):
        b = mem_b[mem_b["flop"] != 0]
        idx = pd.MultiIndex.from_arrays([ev["rank"], ev["seq"]])
        pos = idx.get_indexer(pd.MultiIndex.from_arrays([b["rank"], b["seq"]]))
        arr = np.zeros(m)
        ok = pos >= 0
        np.add.at(arr, pos[ok], b["flop"].to_numpy()[ok])
        flop_ev = arr.tolist()
    req = sig.requests
    req_id = req["request"].to_numpy().tolist()
    req_done = req["completed"].to_numpy().tolist()
    any_src = {}
    if (ev["source"] == ANY_SOURCE).any():  # the completing wait's status tells the source
        done = req[req["completed"] == 1]
        any_src = {(int(r), int(q)): int(s) for r, q, s in zip(done["rank"], done["request"], done["source"])}
    vc = {}
    if len(sig.vcounts):
        v = sig.vcounts.sort_values(["rank", "seq", "peer"], kind="stable")
        for (r, sq), g in v.groupby(["rank", "seq"], sort=False):
            vc[(int(r), int(sq))] = (g["send_bytes"].tolist(), g["recv_bytes"].tolist())
    c = {k: ev[k].to_numpy().tolist() for k in _EVENT_COLUMNS}
    rank_l, seq_l, op_l, burst_l, comm_l = c["rank"], c["seq"], c["op"], c["burst_s"], c["comm"]
    dest_l, src_l, stag_l, rtag_l = c["dest"], c["source"], c["send_tag"], c["recv_tag"]
    sb_l, rb_l, root_l, rq_l, off_l, k_l = (c["send_bytes"], c["recv_bytes"], c["root"], c["request"],
                                            c["req_offset"], c["n_requests"])
    skipped: dict[str, int] = defaultdict(int)
    out: dict[int, list[str]] = {}
    pending: dict[int, dict[int, str]] = defaultdict(dict)  # rank -> request -> "src dst tag"
    K = _K
    cur_rank, lines, keys, pre = None, None, None, ""
    for i in range(m):
        rank = rank_l[i]
        if rank != cur_rank:
            cur_rank = rank
            lines = out.setdefault(rank, [])
            keys = pending[rank]
            pre = f"{rank} "
        b = burst_l[i]
        if b > 0:
            lines.append(f"{pre}compute {_fmt(b * flop_per_s)}" if flop_per_s else f"{pre}sleep {_fmt(b)}")
        f = flop_ev[i]
        if f:
            lines.append(f"{pre}compute {_fmt(f)}")
        op = op_l[i]
        kind = K.get(op)
        if kind is None:
            skipped[op_name(op)] += 1
            continue
        if kind in _COLL and comm_l[i] != 0:  # SimGrid replays collectives on MPI_COMM_WORLD only
            skipped[f"{op_name(op)}(sub-communicator)"] += 1
            continue
        if kind == "send":
            lines.append(f"{pre}send {dest_l[i]} {stag_l[i]} {sb_l[i]}")
        elif kind == "recv":
            lines.append(f"{pre}recv {src_l[i]} {rtag_l[i]} {rb_l[i]}")
        elif kind == "isend":
            lines.append(f"{pre}isend {dest_l[i]} {stag_l[i]} {sb_l[i]}")
            keys[rq_l[i]] = f"{rank} {dest_l[i]} {stag_l[i]}"
        elif kind == "irecv":
            src = src_l[i]
            if src == ANY_SOURCE:
                src = any_src.get((rank, rq_l[i]), src)
            if src < 0:
                skipped["IRECV(any source)"] += 1
                continue
            lines.append(f"{pre}irecv {src} {rtag_l[i]} {rb_l[i]}")
            keys[rq_l[i]] = f"{src} {rank} {rtag_l[i]}"
        elif kind == "complete":
            off, k = off_l[i], k_l[i]
            ids = [(req_id[j], req_done[j]) for j in range(off, off + k)] if k > 0 and off >= 0 else []
            known = [(q, d) for q, d in ids if q in keys]
            if op == Op.WAITALL and known and len(known) == len(keys):
                lines.append(f"{pre}waitall")
                keys.clear()
                continue
            is_wait_op = op in _WAIT_OPS
            for q, d in known:
                if is_wait_op or d:
                    lines.append(f"{pre}wait {keys.pop(q)}")
                else:
                    lines.append(f"{pre}test {keys[q]}")
        elif kind == "allreduce" or kind == "scan" or kind == "exscan":
            lines.append(f"{pre}{kind} {max(sb_l[i], rb_l[i])} 0")
        elif kind == "sendrecv":
            # SimGrid requires both datatypes on sendRecv lines
            lines.append(f"{pre}sendRecv {sb_l[i]} {dest_l[i]} {rb_l[i]} {src_l[i]} {BYTE_ID} {BYTE_ID}")
        elif kind == "init":
            lines.append(f"{pre}init")
        elif kind == "finalize":
            lines.append(f"{pre}finalize")
        elif kind == "barrier":
            lines.append(f"{pre}barrier")
        elif kind == "bcast":
            lines.append(f"{pre}bcast {max(sb_l[i], rb_l[i])} {root_l[i]}")
        elif kind == "reduce":
            lines.append(f"{pre}reduce {sb_l[i]} 0 {root_l[i]}")
        elif kind == "alltoall":
            P = P_ev[i]
            lines.append(f"{pre}alltoall {sb_l[i] // P} {rb_l[i] // P}")
        elif kind == "allgather":
            lines.append(f"{pre}allgather {sb_l[i]} {rb_l[i] // P_ev[i]}")
        elif kind == "gather":
            root = root_l[i]
            r_each = rb_l[i] // P_ev[i] if rank == root else sb_l[i]
            lines.append(f"{pre}gather {sb_l[i]} {r_each} {root} {BYTE_ID} {BYTE_ID}")
        elif kind == "scatter":
            root = root_l[i]
            s_each = sb_l[i] // P_ev[i] if rank == root else rb_l[i]
            lines.append(f"{pre}scatter {s_each} {rb_l[i]} {root} {BYTE_ID} {BYTE_ID}")
        elif kind == "vcoll":
            P = P_ev[i]
            g = vc.get((rank, seq_l[i]))
            if g is not None and len(g[0]) == P:
                to_p, from_p = g
            else:  # no per-peer counts recorded: even split
                to_p, from_p = [sb_l[i] // P] * P, [rb_l[i] // P] * P
            if op == Op.ALLGATHERV:
                lines.append(f"{pre}allgatherv {sb_l[i]} {' '.join(map(str, from_p))} {BYTE_ID} {BYTE_ID}")
            elif op == Op.GATHERV:
                lines.append(f"{pre}gatherv {sb_l[i]} {' '.join(map(str, from_p))} {root_l[i]} {BYTE_ID} {BYTE_ID}")
            elif op == Op.SCATTERV:
                lines.append(f"{pre}scatterv {' '.join(map(str, to_p))} {rb_l[i]} {root_l[i]} {BYTE_ID} {BYTE_ID}")
            elif op == Op.ALLTOALLV:
                lines.append(f"{pre}alltoallv {sum(to_p)} {' '.join(map(str, to_p))} {sum(from_p)} "
                             f"{' '.join(map(str, from_p))}")
            else:
                lines.append(f"{pre}reducescatter {' '.join(map(str, to_p))} 0")
        else:  # comm_split, comm_dup
            lines.append(f"{pre}{kind}")
    return out, dict(skipped)


def _with_init(lines: list[str], rank: int) -> list[str]:
    """A rank's actions starting with ``init``: SimGrid's replay (3.x) crashes with SIGSEGV on a
    trace whose first action is not ``init``, and traces from other sources may lack it."""
    if lines and lines[0].split()[1:2] != ["init"]:
        return [f"{rank} init"] + lines
    return lines


def write_simgrid(sig: Signature, folder: str | Path, *, flop_per_s: float | None = None,
                  absolute_index: bool = True) -> SimgridExport:
    """Write ``folder/rank<R>.txt`` per rank and ``folder/traces.txt`` (the index for
    ``smpirun -np N -replay folder/traces.txt``). Index paths are absolute unless
    ``absolute_index=False`` (then relative to ``folder``'s parent, SimGrid's usual cwd)."""
    if flop_per_s is not None and not flop_per_s > 0:
        raise InputError(f"flop_per_s must be positive, found {flop_per_s}")
    folder = ensure_folder(folder, "export of per-rank files")
    per_rank, skipped = simgrid_lines(sig, flop_per_s=flop_per_s)
    files = []
    n_actions = 0
    for r in range(sig.n_ranks):
        lines = _with_init(per_rank.get(r, []), r)
        n_actions += len(lines)
        f = folder / f"rank{r}.txt"
        atomic_write_text(f, "\n".join(lines) + ("\n" if lines else ""))
        files.append(f)
    index = folder / "traces.txt"
    names = [str(f.resolve()) if absolute_index else str(Path(folder.name) / f.name) for f in files]
    atomic_write_text(index, "\n".join(names) + "\n")
    return SimgridExport(index_file=index, rank_files=tuple(files), n_actions=n_actions, skipped=skipped)


# ====================================================================== running smpirun

#: smpirun options that make SimGrid's network plain ``latency + bytes / bandwidth`` per link:
#: no SMPI piecewise correction factors, no TCP window cap, no cross-traffic of acknowledgements.
#: (Checked: a ping-pong of S bytes over one link then takes exactly 2 (L + S/B).)
NEUTRAL_NETWORK_CFG = ("--cfg=smpi/bw-factor:0:1", "--cfg=smpi/lat-factor:0:1", "--cfg=network/TCP-gamma:0",
                       "--cfg=network/crosstraffic:0")


def smpirun_replay(index_file, n_ranks: int, platform, hosts, *, neutral: bool = True, extra=(),
                   timeout_s: float = 600.0) -> float:
    """Run ``smpirun -replay`` on an exported trace; returns SimGrid's simulated time in seconds
    (its ``smpi/display-timing`` figure, 9 significant digits; where absent, the replay's own
    figure at microsecond resolution). ``hosts``: a hostfile path or a list of host names,
    one per rank. ToolMissingError without smpirun (Debian libsimgrid-dev), ReplayError on failure."""
    import re
    import shutil
    import subprocess
    import tempfile

    from .errors import ReplayError, ToolMissingError

    smpirun = shutil.which("smpirun")
    if not smpirun:
        raise ToolMissingError("smpirun not found: apt-get install libsimgrid-dev")
    index_file = Path(index_file).resolve()
    with tempfile.TemporaryDirectory(prefix="pmac-smpirun-") as tmp:
        if isinstance(hosts, (str, Path)):
            hostfile = Path(hosts).resolve()
        else:
            hostfile = Path(tmp) / "hosts"
            hostfile.write_text("".join(f"{h}\n" for h in hosts))
        cmd = [smpirun, "-np", str(n_ranks), "-platform", str(Path(platform).resolve()), "-hostfile",
               str(hostfile), "-replay", str(index_file), "--log=smpi_config.thres:warning",
               "--log=xbt_cfg.thres:warning", "--cfg=smpi/display-timing:yes",
               *(NEUTRAL_NETWORK_CFG if neutral else ()), *extra]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise ReplayError(f"smpirun did not finish in {timeout_s:g} s", path=index_file) from None
    text = res.stdout + res.stderr
    m = re.findall(r"Simulation time ([0-9.eE+-]+)", text)
    if res.returncode != 0 or not m:
        why = next((ln.strip() for ln in text.splitlines() if "CRITICAL" in ln or "rror" in ln),
                   f"exit code {res.returncode}")
        raise ReplayError(f"smpirun failed: {why[:200]}", path=index_file)
    fine = re.findall(r"Simulated time: ([0-9.eE+-]+) seconds", text)
    return float(fine[-1]) if fine else max(float(x) for x in m)


__all__ = ["read_simgrid", "write_simgrid", "simgrid_lines", "SimgridExport", "DATATYPE_BYTES",
           "NEUTRAL_NETWORK_CFG", "smpirun_replay", "MATCHING_COLLECTIVES_CFG", "cluster_platform",
           "equivalent_profile"]


# ====================================================================== an equivalent machine

#: SimGrid collective algorithms matching pmac.collectives where SimGrid's defaults differ at the
#: sizes of SimGrid's example traces: gather by binomial tree (SimGrid: linear), alltoall(v) by
#: P-1 rounds of shifted exchange (SimGrid's ``ring`` is pmac's pairwise; its ``pair`` needs 2^k ranks)
MATCHING_COLLECTIVES_CFG = ("--cfg=smpi/gather:ompi_binomial", "--cfg=smpi/alltoall:ring",
                            "--cfg=smpi/alltoallv:ring")


def cluster_platform(n_hosts: int, *, latency_s: float, bandwidth_bytes_per_s: float, flop_per_s: float,
                     prefix: str = "h-") -> tuple[str, list[str]]:
    """A SimGrid cluster of ``n_hosts`` hosts, each on a private link to one switch (no backbone),
    and its host names. A message crosses two private links: latency ``2 * latency_s``, bandwidth
    ``bandwidth_bytes_per_s`` (with :data:`NEUTRAL_NETWORK_CFG`), shared by concurrent flows."""
    last = max(n_hosts - 1, 1)
    xml = ("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
           f"<platform version=\"4.1\">\n  <cluster id=\"c\" prefix=\"{prefix}\" radical=\"0-{last}\" suffix=\"\" "
           f"speed=\"{flop_per_s!r}f\" bw=\"{bandwidth_bytes_per_s!r}Bps\" lat=\"{latency_s!r}s\"/>\n</platform>\n")
    return xml, [f"{prefix}{i}" for i in range(n_hosts)]


def equivalent_profile(*, latency_s: float, bandwidth_bytes_per_s: float, flop_per_s: float, n_nodes: int,
                       eager_threshold_bytes: int = 65536, name: str = "simgrid-cluster"):
    """The pmac machine equivalent to :func:`cluster_platform`: one rank per node, a link of
    latency ``2 * latency_s`` and the same bandwidth, no send/receive overheads, eager below
    SimGrid's detached-send threshold (64 KiB), and a node that computes ``flop_per_s`` (SimGrid
    traces carry flops, not bytes: its memory levels are never used, their bandwidth is nominal)."""
    from .profile import (CacheLevel, ComputeModel, LinkModel, MachineProfile, MemoryLevel, NetworkModel,
                          NodeModel)
    nominal = {"load_unit": 1e12, "store": 1e12}
    node = NodeModel(cpu_model="SimGrid host", n_cores=1,
                     caches=(CacheLevel(name="L1d", size_bytes=32768, bandwidth_1core_bytes_per_s=nominal),),
                     memory=MemoryLevel(bandwidth_1core_bytes_per_s=nominal),
                     compute=ComputeModel(isa="simgrid", flop_per_s_scalar=flop_per_s, flop_per_s_simd=flop_per_s))
    link = LinkModel(latency_s=2 * latency_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                     eager_threshold_bytes=eager_threshold_bytes)
    return MachineProfile(name=name, description="equivalent of pmac.simgrid.cluster_platform", node=node,
                          network=NetworkModel(intra_node=link, inter_node=link), n_nodes=max(n_nodes, 1),
                          ranks_per_node=1)

"""Read the PMPI shim's raw per-rank files into the signature's event tables (pmac.trace).

The file layout is described at the top of ``pmac/shim/runtime.h``: a 128-byte header and
96-byte records. This reader

- accepts a file cut inside a record (a killed program) and reports the cut;
- translates communicator-local ranks to world ranks with the members the shim recorded,
  and gives communicators ids that agree across ranks (key: member list + occurrence); the
  peers named on an intercommunicator are ranks of its remote group, and its ``comms`` rows
  list both groups, the one holding the lower world rank first (the same on both sides);
- renumbers request handles (which MPI reuses) as the ``seq`` of the call that created them,
  so a wait names the request of its own isend/irecv even when the handle was recycled;
- checks that every send has a receive (same communicator, source, destination, tag).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InputError, TruncatedError
from .mpi import THREAD_LEVELS
from .trace import COMMS, EVENTS, REQUESTS, VCOUNTS, Op

MAGIC = b"PMACRAW\0"
VERSION = 1
HEADER_BYTES = 128
RECORD_BYTES = 96

HEADER_DTYPE = np.dtype([("magic", "S8"), ("version", "<u4"), ("rec_size", "<u4"), ("rank", "<i4"), ("size", "<i4"),
                         ("pid", "<i4"), ("has_valgrind", "<i4"), ("epoch_mono_ns", "<i8"), ("epoch_real_ns", "<i8"),
                         ("host", "S64"), ("clock_kind", "<i4"), ("pad", "<i4"),
                         ("ns_per_tick", "<f8")])
RECORD_DTYPE = np.dtype([("type", "u1"), ("flag", "u1"), ("op", "<i2"), ("comm", "<i4"), ("seq", "<i8"),
                         ("t_start_ns", "<i8"), ("t_end_ns", "<i8"), ("dest", "<i4"), ("source", "<i4"),
                         ("send_tag", "<i4"), ("recv_tag", "<i4"), ("send_bytes", "<i8"), ("recv_bytes", "<i8"),
                         ("root", "<i4"), ("new_comm", "<i4"), ("request", "<i8"), ("aux", "<i8"),
                         ("n_sub", "<i4"), ("pad", "<i4")])
assert HEADER_DTYPE.itemsize == HEADER_BYTES and RECORD_DTYPE.itemsize == RECORD_BYTES

T_EVENT, T_REQ, T_VCOUNT, T_COMMDEF, T_MEMBER, T_CLOCK, T_PAGES, T_SELF = 1, 2, 3, 4, 5, 6, 7, 8

_CREATES_REQUEST = frozenset({Op.ISEND, Op.ISSEND, Op.IBSEND, Op.IRSEND, Op.IRECV, Op.IMRECV, Op.SEND_INIT,
                              Op.RECV_INIT, Op.COMM_IDUP, Op.INEIGHBOR_ALLGATHER, Op.INEIGHBOR_ALLTOALL,
                              Op.COLL_INIT} | {o for o in Op if 80 <= o < 100})
#: create a request only in their request-based form (MPI_Rput, ...): ``request`` is set then
_MAY_CREATE_REQUEST = frozenset({Op.PUT, Op.GET, Op.ACCUMULATE})
_RECV_REQUEST_OPS = frozenset({Op.IRECV, Op.IMRECV, Op.RECV_INIT})
#: requests that stay valid after completion (freed by MPI_Request_free)
_PERSISTENT_OPS = frozenset({Op.SEND_INIT, Op.RECV_INIT, Op.COLL_INIT})


@dataclass(frozen=True, kw_only=True)
class RawRank:
    path: str
    rank: int
    size: int
    pid: int
    host: str
    epoch_real_ns: int
    has_valgrind: bool
    records: np.ndarray
    #: nanoseconds per timestamp unit (1.0 for a monotonic-ns clock; TSC: from calibration records)
    ns_per_tick: float = 1.0
    #: bytes after the last whole record (0 when the file ends cleanly)
    truncated_bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class RawTrace:
    n_ranks: int
    events: pd.DataFrame
    requests: pd.DataFrame
    vcounts: pd.DataFrame
    comms: pd.DataFrame
    rank_hosts: tuple[str, ...]
    #: human-readable problems: truncated files, missing ranks, unmatched messages
    warnings: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()
    truncated_ranks: tuple[int, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    has_valgrind: bool = False
    stats: dict = field(default_factory=dict)
    #: the MPI thread level the ranks' MPI_Init(_thread) provided (pmac.mpi.THREAD_LEVELS; the
    #: highest where ranks differ), '' where the shim did not record it
    thread_level: str = ""
    #: per rank (by rank), its anonymous memory and how much of it was on huge pages, in bytes, at
    #: the shim's sample with the most anonymous memory (type-7 records); None for a rank without
    #: samples (older shims, other threads calling MPI)
    pages: tuple = ()
    #: per rank (by rank), the tracer's own time taken out of the bursts, in seconds (pmac.rawtrace.tracer_own_s)
    tracer_own_s: tuple = ()


def read_raw_file(path: str | Path) -> RawRank:
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        raise TruncatedError(f"{len(head)} bytes: shorter than the {HEADER_BYTES}-byte header", path=path)
    hdr = np.frombuffer(head, HEADER_DTYPE)[0]
    if bytes(hdr["magic"]).ljust(8, b"\0") != MAGIC:
        raise InputError("not a pmac raw trace (bad magic)", path=path)
    if int(hdr["version"]) != VERSION or int(hdr["rec_size"]) != RECORD_BYTES:
        raise InputError(f"raw trace version {int(hdr['version'])} / record size {int(hdr['rec_size'])} "
                         f"not supported (expected {VERSION} / {RECORD_BYTES})", path=path)
    body = size - HEADER_BYTES
    n = body // RECORD_BYTES
    recs = np.fromfile(path, RECORD_DTYPE, count=n, offset=HEADER_BYTES)  # one copy, whole records only
    ns_per_tick = 1.0
    if int(hdr["clock_kind"]) == 1:
        cal = recs[recs["type"] == T_CLOCK]
        cal = cal[cal["t_start_ns"] > 0]
        if len(cal):  # the last calibration spans the longest interval
            ns_per_tick = float(cal["t_end_ns"][-1]) / float(cal["t_start_ns"][-1])
        else:
            ns_per_tick = float(hdr["ns_per_tick"])
        if not (0.0 < ns_per_tick < 1e3):
            raise InputError(f"clock calibration is unusable ({ns_per_tick} ns per tick)", path=path)
    return RawRank(path=str(path), rank=int(hdr["rank"]), size=int(hdr["size"]), pid=int(hdr["pid"]),
                   host=bytes(hdr["host"]).split(b"\0")[0].decode(errors="replace"),
                   epoch_real_ns=int(hdr["epoch_real_ns"]), has_valgrind=bool(hdr["has_valgrind"]), records=recs, ns_per_tick=ns_per_tick, truncated_bytes=body - n * RECORD_BYTES)


def raw_files(folder: str | Path) -> list[Path]:
    return sorted(Path(folder).glob("rank-*.pmr"))


def read_raw_dir(folder: str | Path, *, n_ranks: int | None = None) -> RawTrace:
    """All ``rank-*.pmr`` files of one run -> signature tables + what went wrong."""
    folder = Path(folder)
    files = raw_files(folder)
    if not files:
        raise InputError("no raw trace files (rank-*.pmr): did the program call MPI_Init with the shim loaded?",
                         path=folder)
    ranks = [read_raw_file(f) for f in files]
    size = n_ranks or max(r.size for r in ranks)
    warnings: list[str] = []
    by_rank = {}
    for r in ranks:
        if r.size != size:
            raise InputError(f"rank {r.rank} ran in a world of {r.size}, others in {size}: files of two runs?",
                             path=r.path)
        by_rank[r.rank] = r
    missing = tuple(i for i in range(size) if i not in by_rank)
    if missing:
        warnings.append(f"no trace from rank(s) {', '.join(map(str, missing))}")
    truncated = []
    for r in ranks:
        if r.truncated_bytes:
            truncated.append(r.rank)
            warnings.append(f"{r.path}: truncated inside a record ({r.truncated_bytes} trailing bytes dropped; "
                            f"{len(r.records)} whole records kept)")

    # ---- communicators: per-rank local id -> global id; peers (local ranks) -> world ranks
    defs: dict[int, dict[int, tuple[int, ...]]] = {}
    occ_key: dict[int, dict[int, tuple]] = {}
    all_keys: dict[tuple, int] = {}
    for r in ranks:
        rec = r.records
        idx = np.flatnonzero(rec["type"] == T_COMMDEF)
        d, keys, seen = {}, {}, Counter()
        for i in idx:
            n = int(rec["n_sub"][i])
            mem = rec[i + 1: i + 1 + n]
            if len(mem) < n or np.any(mem["type"] != T_MEMBER):
                warnings.append(f"{r.path}: communicator definition cut short")
                continue
            members = tuple(int(x) for x in mem["dest"])
            cid = int(rec["comm"][i])
            if rec["flag"][i] & 1:  # intercommunicator: local group, then the remote group
                n_local = int(rec["source"][i])
                local, remote = members[:n_local], members[n_local:]
                low, high = (local, remote) if min(local, default=0) <= min(remote, default=0) else (remote, local)
                ident = (1, low + high)
                d[cid] = remote
            else:
                ident = (0, members)
                d[cid] = members
            k = (ident, seen[ident])
            seen[ident] += 1
            keys[cid] = k
            first = int(rec["seq"][i])
            all_keys[k] = min(all_keys.get(k, first), first)
        defs[r.rank], occ_key[r.rank] = d, keys
    world = ((0, tuple(range(size))), 0)
    ordered = sorted(all_keys, key=lambda k: (k != world, all_keys[k], k[0], k[1]))
    global_id = {k: i for i, k in enumerate(ordered)}
    comm_rows = [(global_id[k], lr, wr) for k in ordered for lr, wr in enumerate(k[0][1])]
    comms = pd.DataFrame(comm_rows, columns=["comm", "local_rank", "world_rank"])

    ev_parts, rq_parts, vc_parts = [], [], []
    sends: dict[tuple, list] = defaultdict(list)  # (comm, src, dst, tag) -> [(posting seq, bytes)]
    recvs: dict[tuple, list] = defaultdict(list)
    has_vg = any(r.has_valgrind for r in ranks)
    n_records = 0
    n_large = 0
    levels = set()   # the thread levels the ranks' MPI_Init(_thread) recorded (pmac.shim_gen)
    pages: dict[int, tuple[int, int]] = {}
    own_s: dict[int, float] = {}
    for r in sorted(ranks, key=lambda x: x.rank):
        samples = r.records[r.records["type"] == T_PAGES]
        if len(samples):
            k = int(np.argmax(samples["send_bytes"]))
            pages[r.rank] = (int(samples["send_bytes"][k]), int(samples["recv_bytes"][k]))
        ev_mask = r.records["type"] == T_EVENT
        own = tracer_own_s(r.records, r.records["t_start_ns"][ev_mask], r.records["t_end_ns"][ev_mask]) \
            * (r.ns_per_tick * 1e-9)
        own_s[r.rank] = float(own.sum())
        n_large += int(np.count_nonzero(ev_mask & ((r.records["flag"] & 0x80) != 0)))
        init_aux = r.records["aux"][ev_mask & (r.records["op"] == int(Op.INIT))]
        levels |= {int(x) for x in init_aux if 1 <= int(x) <= len(THREAD_LEVELS)}
        e, q, v = _rank_tables(r, defs[r.rank], occ_key[r.rank], global_id, warnings, sends, recvs, own)
        ev_parts.append(e)
        rq_parts.append(q)
        vc_parts.append(v)
        n_records += len(r.records)

    def cat(parts, spec):
        parts = [p for p in parts if len(p)]
        return spec.coerce(pd.concat(parts, ignore_index=True)) if parts else spec.empty()

    events = cat(ev_parts, EVENTS)
    requests = cat(rq_parts, REQUESTS)
    if len(ev_parts) > 1 and len(requests):
        # req_offset is per rank while building; make it global
        offs = np.cumsum([0] + [len(p) for p in rq_parts[:-1]])
        ro = events["req_offset"].to_numpy().copy()
        rk = events["rank"].to_numpy()
        present = sorted(by_rank)
        for i, rank in enumerate(present):
            m = (rk == rank) & (ro >= 0)
            ro[m] += offs[i]
        events["req_offset"] = ro
    unmatched = []
    for key in sorted(set(sends) | set(recvs)):
        ss, rr = sorted(sends.get(key, [])), sorted(recvs.get(key, []))
        comm, src, dst, tag = key
        if len(ss) != len(rr):
            unmatched.append(f"comm {comm} {src}->{dst} tag {tag}: {len(ss)} send(s), {len(rr)} receive(s)")
            continue
        # non-overtaking: the k-th send of a stream is the k-th receive, byte for byte
        for k, ((_, sb), (_, rb)) in enumerate(zip(ss, rr)):
            if sb != rb:
                unmatched.append(f"comm {comm} {src}->{dst} tag {tag}: message {k} sends {sb} bytes, "
                                 f"its receive gets {rb}")
                break
    if unmatched and not missing and not truncated:
        warnings.append(f"{len(unmatched)} unmatched send/receive stream(s), e.g. {unmatched[0]}")
    hosts = tuple(by_rank[i].host if i in by_rank else "" for i in range(size))
    if len(levels) > 1:
        warnings.append("ranks initialised MPI at different thread levels: "
                        + ", ".join(THREAD_LEVELS[x - 1] for x in sorted(levels)))
    return RawTrace(n_ranks=size, events=events, requests=requests, vcounts=cat(vc_parts, VCOUNTS),
                    comms=COMMS.coerce(comms), rank_hosts=hosts, warnings=tuple(warnings),
                    unmatched=tuple(unmatched), truncated_ranks=tuple(truncated), missing_ranks=missing,
                    has_valgrind=has_vg, stats={"n_records": n_records, "n_large_count_calls": n_large},
                    thread_level=THREAD_LEVELS[max(levels) - 1] if levels else "",
                    pages=tuple(pages.get(i) for i in range(size)) if pages else (),
                    tracer_own_s=tuple(own_s.get(i, 0.0) for i in range(size)))


def tracer_own_s(rec: np.ndarray, t_start: np.ndarray, t_end: np.ndarray) -> np.ndarray:
    """Per event (its ``t_start`` / ``t_end`` in ticks, in call order), the tracer's own time in
    the gap before it, in ticks: the type-7 (pages) and type-8 (flush) records whose interval lies
    between the previous call's end and this call's start. That time ran on the program's clock
    but is not the program's: the burst leaves it out. Older shims' type-7 records carry no end
    (0) and count nothing."""
    typ = rec["type"]
    s = rec["t_start_ns"].astype(np.int64)
    e = rec["t_end_ns"].astype(np.int64)
    keep = ((typ == T_PAGES) | (typ == T_SELF)) & (s > 0) & (e >= s)
    n = len(t_start)
    if not keep.any() or n == 0:
        return np.zeros(n)
    order = np.argsort(s[keep], kind="stable")
    starts = s[keep][order]
    cum = np.concatenate([[0], np.cumsum((e[keep] - s[keep])[order])]).astype(np.float64)
    prev_end = np.concatenate([[np.iinfo(np.int64).min], np.asarray(t_end, np.int64)[:-1]])
    lo = np.searchsorted(starts, prev_end, side="left")
    hi = np.searchsorted(starts, np.asarray(t_start, np.int64), side="right")
    return cum[np.maximum(hi, lo)] - cum[lo]


def _rank_tables(r: RawRank, defs, keys, global_id, warnings, sends: dict, recvs: dict, own: np.ndarray):
    """The rank's events, requests and vcounts; ``own``: per event the tracer's own time before it,
    in seconds (:func:`tracer_own_s`), left out of its burst."""
    rec = r.records
    typ = rec["type"]
    ev_idx = np.flatnonzero(typ == T_EVENT)
    ev = rec[ev_idx]
    n = len(ev)
    rank = r.rank
    # local comm id -> (global id, members)
    gmap = {cid: global_id[keys[cid]] for cid in defs}
    local = ev["comm"].astype(np.int64)

    def to_world(vals, comms_local):
        out = np.asarray(vals, dtype=np.int32).copy()
        for cid in np.unique(comms_local):
            members = defs.get(int(cid))
            m = (comms_local == cid) & (out >= 0)
            if members is None:
                continue
            arr = np.asarray(members, dtype=np.int32)
            ok = m & (out < len(arr))
            out[ok] = arr[out[ok]]
        return out

    # matched receives learn their communicator from the probe that returned the message
    ops = ev["op"].astype(np.int16)
    msg_comm: dict[int, int] = {}
    comm_local = local.copy()
    for i in np.flatnonzero(np.isin(ops, [Op.MPROBE, Op.IMPROBE, Op.MRECV, Op.IMRECV])):
        o = int(ops[i])
        if o in (Op.MPROBE, Op.IMPROBE):
            msg_comm[int(ev["aux"][i])] = int(comm_local[i])
        else:
            comm_local[i] = msg_comm.pop(int(ev["aux"][i]), -1)
    gcomm = _map_ids(comm_local, gmap)

    t0 = ev["t_start_ns"].astype(np.float64) * (r.ns_per_tick * 1e-9)
    t1 = ev["t_end_ns"].astype(np.float64) * (r.ns_per_tick * 1e-9)
    prev_end = np.concatenate([[0.0], t1[:-1]]) if n else t1
    root_local = ev["root"]
    events = pd.DataFrame({
        "rank": np.full(n, rank, np.int32), "seq": ev["seq"], "op": ops,
        "t_start_s": t0, "t_end_s": t1, "burst_s": np.maximum(t0 - prev_end - own, 0.0),
        "comm": gcomm, "dest": to_world(ev["dest"], comm_local), "source": to_world(ev["source"], comm_local),
        "send_tag": ev["send_tag"], "recv_tag": ev["recv_tag"],
        "send_bytes": ev["send_bytes"], "recv_bytes": ev["recv_bytes"],
        "root": to_world(root_local, comm_local), "request": np.full(n, -1, np.int64),
        "req_offset": np.full(n, -1, np.int64), "n_requests": np.zeros(n, np.int32),
        "new_comm": _map_ids(ev["new_comm"], gmap),
    })

    # sub-records: owner event = the last event before them
    owner = np.cumsum(typ == T_EVENT) - 1
    sub_req = np.flatnonzero((typ == T_REQ) & (owner >= 0))
    sub_v = np.flatnonzero((typ == T_VCOUNT) & (owner >= 0))
    declared = ev["n_sub"]
    if n:
        # the last event may have lost sub-records to a cut
        have = np.bincount(owner[(typ == T_REQ) | (typ == T_VCOUNT)], minlength=n)[:n] if (len(sub_req) + len(sub_v)) else np.zeros(n, int)
        short = np.flatnonzero((declared > have) & (np.isin(ops, list(_SUBS_OPS))))
        if len(short):
            warnings.append(f"{r.path}: {len(short)} call(s) lost part of their request/count list (cut trace)")

    # requests: renumber handles as the seq of the creating call; walk in call order
    # (plain Python lists: this loop visits every request-related call)
    req_col = events["request"].to_numpy().copy()
    ro = events["req_offset"].to_numpy().copy()
    nr = events["n_requests"].to_numpy().copy()
    # handle -> live requests with that handle, oldest first: (seq, local comm, op, event index).
    # A list, not one entry: MPICH hands out one shared built-in handle for requests that are
    # complete at once (e.g. MPI_Rput/MPI_Rget), so several live requests can have the same value;
    # the k-th time a call names a handle it means the k-th oldest.
    live: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    sub_by_owner: dict[int, list[int]] = defaultdict(list)
    for j, o in zip(sub_req.tolist(), owner[sub_req].tolist()):
        sub_by_owner[o].append(j)
    rq_rows = []
    ops_l, evreq_l, seqs_l = ops.tolist(), ev["request"].tolist(), ev["seq"].tolist()
    cl_l, gc_l = comm_local.tolist(), gcomm.tolist()
    dest_l, stag_l = events["dest"].to_numpy().tolist(), ev["send_tag"].tolist()
    sb_l, rb_l = ev["send_bytes"].tolist(), ev["recv_bytes"].tolist()
    started: dict[int, int] = {}  # persistent request handle -> seq of its latest Start
    r_req, r_flag, r_src = rec["request"].tolist(), rec["flag"].tolist(), rec["source"].tolist()
    r_bytes, r_tag = rec["recv_bytes"].tolist(), rec["recv_tag"].tolist()
    isend_ops = {int(Op.ISEND), int(Op.ISSEND), int(Op.IBSEND), int(Op.IRSEND)}
    creates = {int(o) for o in _CREATES_REQUEST}
    recv_req_ops = {int(o) for o in _RECV_REQUEST_OPS}
    persistent = {int(o) for o in _PERSISTENT_OPS}
    maybe = {int(o) for o in _MAY_CREATE_REQUEST}
    starts = {int(Op.START), int(Op.STARTALL)}
    for i in np.flatnonzero(np.isin(ops, list(_CREATES_REQUEST | _REQUEST_USERS | _MAY_CREATE_REQUEST))).tolist():
        o = ops_l[i]
        if o in maybe:
            if evreq_l[i] == -1:
                continue
            live[evreq_l[i]].append((seqs_l[i], cl_l[i], o, i))
            req_col[i] = seqs_l[i]
            continue
        if o in creates:
            live[evreq_l[i]].append((seqs_l[i], cl_l[i], o, i))
            req_col[i] = seqs_l[i]
            if o in isend_ops and dest_l[i] >= 0:
                sends[(gc_l[i], rank, dest_l[i], stag_l[i])].append((seqs_l[i], sb_l[i]))
            continue
        if o == Op.REQUEST_FREE:
            lst = live.get(evreq_l[i])
            req_col[i] = lst.pop(0)[0] if lst else -1
            continue
        subs = sub_by_owner.get(i, [])
        ro[i] = len(rq_rows) if subs else -1
        nr[i] = len(subs)
        named: Counter = Counter()
        finished = []
        for j in subs:
            h = r_req[j]
            lst = live.get(h)
            k = named[h]
            named[h] += 1
            if not lst or k >= len(lst):
                rq_rows.append((rank, -1, 0, -1, 0))  # MPI_REQUEST_NULL or a request we never saw made
                continue
            info = lst[k]
            cseq, ccomm, cop, ci = info
            completed, src, nbytes = r_flag[j], -1, 0
            if o in starts:
                started[h] = seqs_l[i]
                if cop == Op.SEND_INIT and dest_l[ci] >= 0:
                    sends[(gc_l[ci], rank, dest_l[ci], stag_l[ci])].append((seqs_l[i], sb_l[ci]))
                completed = 0
            elif completed:
                if cop in recv_req_ops:
                    src = _one_world(r_src[j], defs.get(ccomm))
                    nbytes = r_bytes[j]
                    if src >= 0:
                        posted = started.get(h, cseq) if cop == Op.RECV_INIT else cseq
                        recvs[(gmap.get(ccomm, -1), src, rank, r_tag[j])].append((posted, nbytes))
                if cop not in persistent:
                    finished.append((h, info))
            rq_rows.append((rank, cseq, completed, src, nbytes))
        for h, info in finished:
            live[h].remove(info)
        if o == Op.START and subs:
            req_col[i] = rq_rows[ro[i]][1]
    events["request"] = req_col
    events["req_offset"] = ro
    events["n_requests"] = nr

    # blocking sends / receives for the match check
    src_l = events["source"].to_numpy().tolist()
    rtag_l = ev["recv_tag"].tolist()
    for i in np.flatnonzero(np.isin(ops, [Op.SEND, Op.SSEND, Op.BSEND, Op.RSEND, Op.SENDRECV,
                                          Op.SENDRECV_REPLACE])).tolist():
        if dest_l[i] >= 0:
            sends[(gc_l[i], rank, dest_l[i], stag_l[i])].append((seqs_l[i], sb_l[i]))
    for i in np.flatnonzero(np.isin(ops, [Op.RECV, Op.MRECV, Op.SENDRECV, Op.SENDRECV_REPLACE])).tolist():
        if src_l[i] >= 0:
            recvs[(gc_l[i], src_l[i], rank, rtag_l[i])].append((seqs_l[i], rb_l[i]))

    requests = pd.DataFrame(rq_rows, columns=["rank", "request", "completed", "source", "recv_bytes"]) if rq_rows \
        else REQUESTS.empty()
    if len(sub_v):
        own = owner[sub_v]
        vcomm = comm_local[own]
        vc = pd.DataFrame({"rank": np.full(len(sub_v), rank, np.int32), "seq": ev["seq"][own],
                           "peer": to_world(rec["dest"][sub_v], vcomm),
                           "send_bytes": rec["send_bytes"][sub_v], "recv_bytes": rec["recv_bytes"][sub_v]})
    else:
        vc = VCOUNTS.empty()
    return events, requests, vc


def _map_ids(local_ids, gmap: dict[int, int]) -> np.ndarray:
    """Local communicator ids -> global ids (-1 where unknown), vectorised."""
    local_ids = np.asarray(local_ids, dtype=np.int64)
    out = np.full(len(local_ids), -1, np.int32)
    for cid, g in gmap.items():
        out[local_ids == cid] = g
    return out


def _one_world(local: int, members) -> int:
    if local < 0 or members is None or local >= len(members):
        return local
    return int(members[local])


_REQUEST_USERS = frozenset({o for o in Op if 50 <= o < 60} | {Op.START, Op.STARTALL, Op.REQUEST_FREE})
_SUBS_OPS = frozenset(_REQUEST_USERS - {Op.REQUEST_FREE} | {Op.GATHERV, Op.SCATTERV, Op.ALLGATHERV, Op.ALLTOALLV,
                                                            Op.ALLTOALLW, Op.REDUCE_SCATTER, Op.IGATHERV,
                                                            Op.ISCATTERV, Op.IALLGATHERV, Op.IALLTOALLV,
                                                            Op.IALLTOALLW, Op.IREDUCE_SCATTER, Op.COLL_INIT,
                                                            Op.NEIGHBOR_ALLGATHER, Op.NEIGHBOR_ALLTOALL,
                                                            Op.INEIGHBOR_ALLGATHER, Op.INEIGHBOR_ALLTOALL})

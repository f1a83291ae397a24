"""Calls the replay would take no time for, rewritten as the calls it prices. Pure functions over
the tables of pmac.trace (no files, nothing of the replay's internals):

- A neighbourhood collective (NEIGHBOR_* / INEIGHBOR_*) becomes its messages, as MPI libraries
  implement it: one Irecv per in-neighbour, then one Isend per out-neighbour (its ``vcounts``
  rows in slot order; MPI_PROC_NULL slots move nothing), then, for the blocking form, a Waitall
  on all of them. The requests of a non-blocking one are completed by the wait/test calls that
  name its request. The messages travel on a shadow communicator (``comm + SHADOW_COMM``, tag
  0): MPI keeps collective traffic apart from the program's own messages, and within one
  collective the k-th message from a to b matches b's k-th receive from a (non-overtaking).
- MPI_Start of a persistent collective (COLL_INIT) becomes the non-blocking collective it starts
  (op from the init's ``send_tag``; bytes, root and communicator from the init; its request the
  init's), so the Wait on it completes a priced collective. An MPI_Startall keeps the requests
  that are not collectives and is followed by one such row per collective it names.

The rows made from one call keep its ``rank`` and ``seq``, in order; :attr:`Expansion.source_row`
gives the call each row comes from and :attr:`Expansion.first` the row that keeps the compute
burst before it. Changed wait/test calls get new ``requests`` rows appended to the table (the
rows they named before stay, unreferenced).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .trace import EVENTS, NONE, REQUESTS, Op, op_name

NEIGHBOR_OPS = frozenset({Op.NEIGHBOR_ALLGATHER, Op.NEIGHBOR_ALLTOALL, Op.INEIGHBOR_ALLGATHER,
                          Op.INEIGHBOR_ALLTOALL})
_NONBLOCKING_NEIGHBOR = frozenset({Op.INEIGHBOR_ALLGATHER, Op.INEIGHBOR_ALLTOALL})
#: added to a communicator id for the messages of its neighbourhood collectives
SHADOW_COMM = 1 << 30
#: request ids of the generated Isend/Irecv: ID_BASE + (seq << 20) + message index (the tracer's
#: ids are call sequence numbers, far below)
ID_BASE = 1 << 62
#: calls the replay takes no time for although they communicate or synchronise (one-sided)
UNPRICED_OPS = frozenset({Op.PUT, Op.GET, Op.ACCUMULATE, Op.WIN_FENCE, Op.WIN_LOCK, Op.WIN_UNLOCK, Op.WIN_SYNC})


@dataclass(frozen=True, kw_only=True)
class Expansion:
    events: pd.DataFrame
    requests: pd.DataFrame
    #: for each row of ``events``, the row (position) of the input call it comes from
    source_row: np.ndarray
    #: the row of its call that keeps the burst before the call
    first: np.ndarray
    n_neighbor_calls: int = 0
    n_collective_starts: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return bool(self.n_neighbor_calls or self.n_collective_starts)


def expand_for_replay(events: pd.DataFrame, requests: pd.DataFrame | None = None,
                      vcounts: pd.DataFrame | None = None) -> Expansion:
    """Rewrite neighbourhood collectives and started persistent collectives (see module doc)."""
    n = len(events)
    op = np.asarray(events["op"])
    is_nbr = np.isin(op, [int(o) for o in NEIGHBOR_OPS])
    if not is_nbr.any() and not (op == int(Op.COLL_INIT)).any():  # the common case: the tables as given
        return Expansion(events=events, requests=requests if requests is not None else REQUESTS.empty(),
                         source_row=np.arange(n), first=np.ones(n, bool))
    events = EVENTS.coerce(events)
    requests = REQUESTS.coerce(requests) if requests is not None else REQUESTS.empty()
    op = events["op"].to_numpy()
    inits = events[op == int(Op.COLL_INIT)]

    rank_l, seq_l = events["rank"].to_numpy().tolist(), events["seq"].to_numpy().tolist()
    req_l, off_l, cnt_l = (events["request"].to_numpy().tolist(), events["req_offset"].to_numpy().tolist(),
                           events["n_requests"].to_numpy().tolist())
    rq_rank, rq_id = requests["rank"].to_numpy().tolist(), requests["request"].to_numpy().tolist()
    rq_done = requests["completed"].to_numpy().tolist()
    cols = {c: events[c].to_numpy() for c in events.columns}

    # ---- the messages of each neighbourhood collective, from its vcounts rows
    slots: dict[tuple[int, int], list] = defaultdict(list)
    if is_nbr.any() and vcounts is not None and len(vcounts):
        keys = set(zip(events["rank"].to_numpy()[is_nbr].tolist(), events["seq"].to_numpy()[is_nbr].tolist()))
        for r, s, p, sb, rb in zip(*(vcounts[c].to_numpy().tolist() for c in ("rank", "seq", "peer", "send_bytes",
                                                                                 "recv_bytes"))):
            if (r, s) in keys and p >= 0:
                slots[(r, s)].append((p, sb, rb))
    # ---- persistent collectives: (rank, request) -> init row
    init_of = {(int(r), int(q)): i for i, r, q in zip(inits.index.tolist(), inits["rank"].tolist(),
                                                      inits["request"].tolist())}

    replaced: dict[int, list[dict]] = {}   # input row -> rows standing in its place ("_rq": their requests)
    renamed: dict[int, list[tuple]] = {}   # kept completion call -> the requests rows it names now
    expands_to: dict[tuple[int, int], list[tuple]] = {}  # (rank, I-neighbour request) -> requests rows
    n_nbr = n_starts = 0

    def row(i, **kw):
        d = {c: cols[c][i] for c in cols}
        d.update(send_tag=NONE, recv_tag=NONE, dest=NONE, source=NONE, send_bytes=0, recv_bytes=0, root=NONE,
                 request=NONE, req_offset=NONE, n_requests=0, new_comm=NONE)
        d.update(kw)
        return d

    for i in np.flatnonzero(is_nbr).tolist():
        r, s = rank_l[i], seq_l[i]
        msgs = slots.get((r, s), [])
        if not msgs:
            continue  # nothing moves (every neighbour MPI_PROC_NULL) or no counts: stays a local call
        shadow = int(cols["comm"][i]) + SHADOW_COMM
        recvs = [(p, rb) for p, sb, rb in msgs if sb == NONE]
        sends = [(p, sb) for p, sb, rb in msgs if rb == NONE]
        rows_i, named = [], []
        for j, (p, b) in enumerate(recvs + sends):
            rid = ID_BASE + (s << 20) + j
            if j < len(recvs):
                rows_i.append(row(i, op=int(Op.IRECV), comm=shadow, source=p, recv_tag=0, recv_bytes=b, request=rid))
                named.append((r, rid, 1, p, b))
            else:
                rows_i.append(row(i, op=int(Op.ISEND), comm=shadow, dest=p, send_tag=0, send_bytes=b, request=rid))
                named.append((r, rid, 1, NONE, 0))
        if int(cols["op"][i]) in _NONBLOCKING_NEIGHBOR:
            expands_to[(r, req_l[i])] = named
        else:
            rows_i.append(row(i, op=int(Op.WAITALL), _rq=named))
        replaced[i] = rows_i
        n_nbr += 1

    # ---- completion calls naming a non-blocking neighbourhood collective; Start(all) of collectives
    for i in np.flatnonzero(np.asarray(cnt_l) > 0).tolist():
        o = int(cols["op"][i])
        r = rank_l[i]
        lo, k = off_l[i], cnt_l[i]
        named = [(rq_rank[j], rq_id[j], rq_done[j], NONE, 0) for j in range(lo, lo + k)] if lo >= 0 else []
        if o == Op.STARTALL:
            coll = [q for _, q, _, _, _ in named if (r, q) in init_of]
            if not coll:
                continue
            keep = [x for x in named if (r, x[1]) not in init_of]
            rows_i = [row(i, op=int(Op.STARTALL), _rq=keep)] if keep else []
            rows_i += [_started(row, i, cols, init_of[(r, q)], q) for q in coll]
            replaced[i] = rows_i
            n_starts += len(coll)
            continue
        if any((r, q) in expands_to for _, q, _, _, _ in named):
            new = []
            for x in named:
                sub = expands_to.get((r, x[1]))
                new += ([(rr, q, x[2], p if x[2] else NONE, b if x[2] else 0) for rr, q, _, p, b in sub]
                        if sub is not None else [x])
            renamed[i] = new
    for i in np.flatnonzero(op == int(Op.START)).tolist():
        q = req_l[i]
        if (rank_l[i], q) in init_of:
            replaced[i] = [_started(row, i, cols, init_of[(rank_l[i], q)], q)]
            n_starts += 1

    # ---- assemble: untouched rows, replaced rows; requests rows appended for new lists
    extra_rq: list[tuple] = []

    def place(lst) -> tuple[int, int]:
        start = len(requests) + len(extra_rq)
        extra_rq.extend(lst)
        return start, len(lst)

    keep_mask = np.ones(n, bool)
    keep_mask[list(replaced)] = False
    kept = events[keep_mask].copy()
    kept["_src"] = np.flatnonzero(keep_mask)
    kept["_sub"] = 0
    for i, lst in renamed.items():
        kept.loc[i, "req_offset"], kept.loc[i, "n_requests"] = place(lst)
    gen = []
    for i, rows_i in replaced.items():
        for sub, d in enumerate(rows_i):
            lst = d.pop("_rq", None)
            if lst is not None:
                d["req_offset"], d["n_requests"] = place(lst)
            d["_src"], d["_sub"] = i, sub
            gen.append(d)
    both = pd.concat([kept, pd.DataFrame(gen, columns=list(kept.columns))], ignore_index=True)
    both = both.sort_values(["rank", "seq", "_sub"], kind="stable").reset_index(drop=True)
    src = both["_src"].to_numpy(np.int64)
    first = both["_sub"].to_numpy() == 0
    new_events = EVENTS.coerce(both.drop(columns=["_src", "_sub"]))
    new_requests = requests
    if extra_rq:
        new_requests = REQUESTS.coerce(pd.concat(
            [requests, pd.DataFrame(extra_rq, columns=list(REQUESTS.names))], ignore_index=True))
    notes = []
    if n_nbr:
        notes.append(f"{n_nbr} neighbourhood collective call(s) replayed as their point-to-point messages "
                     "(an Irecv per in-neighbour, an Isend per out-neighbour)")
    if n_starts:
        notes.append(f"{n_starts} start(s) of MPI-4 persistent collectives replayed as the non-blocking "
                     "collective each starts")
    return Expansion(events=new_events, requests=new_requests, source_row=src, first=first,
                     n_neighbor_calls=n_nbr, n_collective_starts=n_starts, notes=tuple(notes))


def _started(row, i, cols, init: int, request: int) -> dict:
    """The non-blocking collective an MPI_Start (row ``i``) of the persistent request made by
    row ``init`` runs."""
    return row(i, op=int(cols["send_tag"][init]), comm=int(cols["comm"][init]), root=int(cols["root"][init]),
               send_bytes=int(cols["send_bytes"][init]), recv_bytes=int(cols["recv_bytes"][init]), request=request)


def unreplayed_note(events: pd.DataFrame) -> str | None:
    """A note naming the calls that communicate or synchronise but take no time in the replay
    (one-sided calls; neighbourhood collectives left unexpanded), or None."""
    op = events["op"].to_numpy()
    counts = pd.Series(op[np.isin(op, [int(o) for o in UNPRICED_OPS | NEIGHBOR_OPS])]).value_counts()
    if not len(counts):
        return None
    names = ", ".join(f"{op_name(o)} {int(c)}" for o, c in sorted(counts.items()))
    return (f"{int(counts.sum())} call(s) take no time in the replay ({names}): their communication and "
            "synchronisation are not modelled")


def collapse_timeline(timeline: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per call of ``events`` (``rank``, ``seq``, ``op``, ``start_s``, ``end_s``) from a
    timeline of the expanded calls: the first start and the last end of its rows, its own op."""
    if not len(timeline):
        return timeline
    g = timeline.groupby(["rank", "seq"], sort=True).agg(start_s=("start_s", "min"), end_s=("end_s", "max"))
    g = g.reset_index()
    ops = events.set_index(["rank", "seq"])["op"]
    g["op"] = ops.reindex(pd.MultiIndex.from_arrays([g["rank"], g["seq"]])).to_numpy()
    return g[list(timeline.columns)]

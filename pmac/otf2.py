"""OTF2 archives (Score-P and other tools) into signature tables, with the ``otf2`` PyPI wheel.

An MPI call is the outermost ``Enter``/``Leave`` pair of an MPI region (region paradigm MPI or
a name starting ``MPI_``) on the location of a rank; the op comes from the region name
(``MPI_Allreduce`` -> ALLREDUCE, ``_c`` large-count suffixes stripped, unknown names -> OTHER).
The MPI records inside the pair fill the row:

- ``MpiSend``/``MpiIsend``: ``dest`` (communicator rank -> world rank), ``send_tag``,
  ``send_bytes``, ``request``; ``MpiRecv``: ``source``, ``recv_tag``, ``recv_bytes``;
- ``MpiIrecvRequest``: the IRECV's ``request`` (its source, tag and size are known only when it
  completes: ``MpiIrecv`` inside the wait fills both the request row and the IRECV row);
- ``MpiIsendComplete``/``MpiIrecv`` in a wait or test: a ``requests`` row with ``completed`` 1;
  ``MpiRequestTest``: a row with ``completed`` 0;
- ``MpiCollectiveEnd``: ``root`` (world rank), ``send_bytes`` = size_sent, ``recv_bytes`` =
  size_received (as the tool recorded them for this rank);
- ``CommCreate`` inside a call: ``new_comm``.

Ranks are the order of the locations in the MPI ``COMM_LOCATIONS`` group (else the process
location groups in definition order; only the first location of each process is read).
Communicators are numbered with MPI_COMM_WORLD (the one whose members are all ranks in order)
as 0. Times are seconds since the archive's global offset; ``burst_s`` is the time since the
previous MPI call ended (for the first call, since the rank's first event). ``rank_hosts`` are the
names of the system-tree nodes above each process.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InputError, ToolMissingError
from .schema import provenance
from .signature import Signature, SignatureHeader, make_signature
from .trace import ANY_SOURCE, NONE, Op

_UNDEF_U32 = 0xFFFFFFFF

#: OTF2 CollectiveOp value -> Op (used when the region name does not say)
_COLLECTIVE = {0: Op.BARRIER, 1: Op.BCAST, 2: Op.GATHER, 3: Op.GATHERV, 4: Op.SCATTER, 5: Op.SCATTERV,
               6: Op.ALLGATHER, 7: Op.ALLGATHERV, 8: Op.ALLTOALL, 9: Op.ALLTOALLV, 10: Op.ALLTOALLW,
               11: Op.ALLREDUCE, 12: Op.REDUCE, 13: Op.REDUCE_SCATTER, 14: Op.SCAN, 15: Op.EXSCAN,
               16: Op.REDUCE_SCATTER_BLOCK}

_ALIASES = {"INIT_THREAD": Op.INIT, "COMM_CREATE_GROUP": Op.COMM_CREATE, "ISENDRECV": Op.OTHER}


def op_from_region(name: str) -> Op:
    """``MPI_Sendrecv_replace`` -> SENDRECV_REPLACE, ``MPI_Send_c`` -> SEND, else OTHER."""
    n = name.upper()
    if n.startswith("MPI_"):
        n = n[4:]
    if n.endswith("_C"):
        n = n[:-2]
    if n in _ALIASES:
        return _ALIASES[n]
    try:
        return Op[n]
    except KeyError:
        return Op.OTHER


def _import_otf2():
    try:
        return importlib.import_module("otf2")
    except ImportError:
        raise ToolMissingError("reading OTF2 needs the otf2 package: pip install otf2") from None


def _ref(d) -> int:
    return int(getattr(d, "_ref", id(d)))


_COLUMNS = ("rank", "seq", "op", "t_start_s", "t_end_s", "burst_s", "comm", "dest", "source", "send_tag",
            "recv_tag", "send_bytes", "recv_bytes", "root", "request", "req_offset", "n_requests", "new_comm")


class _Rank:
    def __init__(self, rank: int):
        self.rank = rank
        self.rows: list[dict] = []
        self.requests: list[tuple] = []
        self.depth = 0
        self.cur: dict | None = None
        self.first_t: int | None = None
        self.last_leave: int | None = None
        self.irecv_rows: dict[int, dict] = {}  # request id -> IRECV row awaiting its completion


def read_otf2(path, *, name: str | None = None, description: str = "") -> Signature:
    """Import an OTF2 archive (``traces.otf2`` anchor file, or the folder holding it)."""
    otf2 = _import_otf2()
    path = Path(path)
    anchor = path
    if path.is_dir():
        cands = sorted(path.glob("*.otf2"))
        if not cands:
            raise InputError("no .otf2 anchor file in this folder", path=path)
        anchor = cands[0]
    if not anchor.exists():
        raise InputError("no such file", path=anchor)
    ev_mod = otf2.events
    try:
        reader_cm = otf2.reader.open(str(anchor))
        trace = reader_cm.__enter__()
    except Exception as exc:  # the C library reports malformed archives with its own exceptions
        raise InputError(f"not a readable OTF2 archive ({exc})", path=anchor) from None
    try:
        defs = trace.definitions
        resolution = float(trace.timer_resolution or 1)
        offset = int(getattr(defs.clock_properties, "global_offset", 0) or 0)
        mpi_para = otf2.Paradigm.MPI
        world_locs = None
        for g in defs.groups:
            if g.group_type == otf2.GroupType.COMM_LOCATIONS and g.paradigm == mpi_para:
                world_locs = list(g.members)
                break
        if world_locs is None:  # no MPI definitions: one rank per process location group
            seen, world_locs = set(), []
            for loc in defs.locations:
                lg = loc.group
                if lg.location_group_type == otf2.LocationGroupType.PROCESS and _ref(lg) not in seen:
                    seen.add(_ref(lg))
                    world_locs.append(loc)
        if not world_locs:
            raise InputError("archive defines no MPI ranks or processes", path=anchor)
        loc_rank = {_ref(loc): r for r, loc in enumerate(world_locs)}
        n = len(world_locs)
        # communicators: world first, then the rest in definition order
        comm_ids, comm_rows = {}, []
        comms = list(defs.comms)

        def members(c):
            return [loc_rank.get(_ref(m), -1) for m in c.group.members]

        world = next((c for c in comms if members(c) == list(range(n))), None)
        ordered = ([world] if world is not None else []) + [c for c in comms if c is not world]
        for i, c in enumerate(ordered, start=0 if world is not None else 1):
            comm_ids[_ref(c)] = i
            for lr, wr in enumerate(members(c)):
                comm_rows.append((i, lr, wr))
        if world is None:
            comm_rows = [(0, r, r) for r in range(n)] + comm_rows
        comm_members = {}
        for cid, lr, wr in comm_rows:
            comm_members.setdefault(cid, []).append(wr)

        def to_world(comm, local) -> int:
            if local is None or int(local) == _UNDEF_U32:
                return NONE
            mem = comm_members.get(comm_ids.get(_ref(comm), 0), [])
            local = int(local)
            return mem[local] if 0 <= local < len(mem) else NONE

        ranks = {r: _Rank(r) for r in range(n)}
        for loc, ev in trace.events:
            r = loc_rank.get(_ref(loc))
            if r is None:
                continue
            st = ranks[r]
            t = int(ev.time)
            if st.first_t is None:
                st.first_t = t
            if isinstance(ev, ev_mod.Enter):
                reg = ev.region
                if not _is_mpi_region(reg, mpi_para):
                    continue
                st.depth += 1
                if st.depth == 1:
                    prev = st.last_leave if st.last_leave is not None else st.first_t
                    st.cur = dict(rank=r, seq=len(st.rows), op=int(op_from_region(reg.name)),
                                  t_start_s=(t - offset) / resolution, t_end_s=np.nan,
                                  burst_s=(t - prev) / resolution, comm=0, dest=NONE, source=NONE,
                                  send_tag=NONE, recv_tag=NONE, send_bytes=0, recv_bytes=0, root=NONE,
                                  request=NONE, req_offset=NONE, n_requests=0, new_comm=NONE)
                    st.rows.append(st.cur)
                continue
            if isinstance(ev, ev_mod.Leave):
                if not _is_mpi_region(ev.region, mpi_para) or st.depth == 0:
                    continue
                st.depth -= 1
                if st.depth == 0 and st.cur is not None:
                    st.cur["t_end_s"] = (t - offset) / resolution
                    st.last_leave = t
                    st.cur = None
                continue
            row = st.cur
            if row is None:
                continue  # MPI records outside an MPI region: nothing to attach them to
            if isinstance(ev, (ev_mod.MpiSend, ev_mod.MpiIsend)):
                row.update(comm=comm_ids.get(_ref(ev.communicator), 0), dest=to_world(ev.communicator, ev.receiver),
                           send_tag=int(ev.msg_tag), send_bytes=row["send_bytes"] + int(ev.msg_length))
                if isinstance(ev, ev_mod.MpiIsend):
                    row["request"] = int(ev.request_id)
            elif isinstance(ev, ev_mod.MpiRecv):
                row.update(comm=comm_ids.get(_ref(ev.communicator), 0), source=to_world(ev.communicator, ev.sender),
                           recv_tag=int(ev.msg_tag), recv_bytes=row["recv_bytes"] + int(ev.msg_length))
            elif isinstance(ev, ev_mod.MpiIrecvRequest):
                row.update(request=int(ev.request_id), source=ANY_SOURCE)
                st.irecv_rows[int(ev.request_id)] = row
            elif isinstance(ev, ev_mod.MpiIrecv):
                src = to_world(ev.communicator, ev.sender)
                rid = int(ev.request_id)
                _add_request(st, row, rid, 1, src, int(ev.msg_length))
                post = st.irecv_rows.pop(rid, None)
                if post is not None:
                    post.update(comm=comm_ids.get(_ref(ev.communicator), 0), source=src, recv_tag=int(ev.msg_tag),
                                recv_bytes=int(ev.msg_length))
            elif isinstance(ev, ev_mod.MpiIsendComplete):
                _add_request(st, row, int(ev.request_id), 1, NONE, 0)
            elif isinstance(ev, ev_mod.MpiRequestTest):
                _add_request(st, row, int(ev.request_id), 0, NONE, 0)
            elif isinstance(ev, ev_mod.MpiCollectiveEnd):
                if row["op"] == Op.OTHER:
                    row["op"] = int(_COLLECTIVE.get(int(ev.collective_op), Op.OTHER))
                row.update(comm=comm_ids.get(_ref(ev.communicator), 0), root=to_world(ev.communicator, ev.root),
                           send_bytes=int(ev.size_sent), recv_bytes=int(ev.size_received))
            elif isinstance(ev, ev_mod.CommCreate):
                row["new_comm"] = comm_ids.get(_ref(ev.communicator), NONE)
        hosts = []
        for loc in world_locs:
            node = getattr(loc.group, "system_tree_parent", None)
            hosts.append(str(getattr(node, "name", "")) if node is not None else "")
    finally:
        reader_cm.__exit__(None, None, None)

    rows, reqs = [], []
    unfinished = 0
    for r in range(n):
        st = ranks[r]
        base = len(reqs)
        for row in st.rows:
            if row["req_offset"] != NONE:
                row["req_offset"] += base
            if not np.isfinite(row["t_end_s"]):  # trace ends inside the call
                row["t_end_s"] = row["t_start_s"]
                unfinished += 1
        rows += st.rows
        reqs += st.requests
    if not rows:
        raise InputError("archive has no MPI calls", path=anchor)
    events = pd.DataFrame({c: [row[c] for row in rows] for c in _COLUMNS})
    requests = pd.DataFrame(reqs, columns=["rank", "request", "completed", "source", "recv_bytes"])
    comms_df = pd.DataFrame(comm_rows, columns=["comm", "local_rank", "world_rank"])
    header = SignatureHeader(
        name=name or (anchor.parent.name if anchor.parent.name else anchor.stem),
        n_ranks=n, source_format="otf2",
        description=description or f"imported from OTF2 archive {anchor.name}"
                                   + (f" ({unfinished} calls unfinished at the end)" if unfinished else ""),
        parameters={"archive": str(anchor)},
        rank_hosts=tuple(hosts) if all(hosts) else (),
        provenance=provenance(inputs={"anchor": anchor}),
    )
    return make_signature(header, events, requests=requests, comms=comms_df)


def _is_mpi_region(reg, mpi_para) -> bool:
    try:
        if reg.paradigm == mpi_para:
            return True
    except AttributeError:
        pass
    return str(reg.name).startswith("MPI_")


def _add_request(st: _Rank, row: dict, rid: int, completed: int, source: int, nbytes: int):
    if row["req_offset"] == NONE:
        row["req_offset"] = len(st.requests)
    st.requests.append((st.rank, rid, completed, source, nbytes))
    row["n_requests"] += 1

"""Generate the PMPI interposition library's C source from ONE table of wrapped functions.

Each :class:`W` row names an MPI function, its parameters (``{C}`` = count type, ``{D}`` =
displacement type, so one row yields both the classic and the large-count ``MPI_*_c``
variant when ``c=True``), the :class:`pmac.trace.Op` it records and C snippets:

- ``pre``: before the PMPI call, always run (save handles the call overwrites, replace
  ``MPI_STATUS(ES)_IGNORE`` by scratch statuses so the shim can read them);
- ``post``: after the call when recording: fill the event record ``r`` (``ci`` is the
  communicator entry of ``comm`` when the row has ``comm``);
- ``subs``: after the event is pushed: push its sub-records (requests, per-peer counts).

The hand-written runtime (buffer, clock, communicators, signals) is ``pmac/shim/runtime.h``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .trace import Op

#: valgrind client-request contract with the memory tracer (repeated in the generated C)
VG_CONTRACT = """\
Contract with the memory tracer (pmac valgrind tool): when the shim is compiled where
<valgrind/valgrind.h> exists, every wrapped MPI call issues
    VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ_TOOL_BASE('P','M') + 0, seq, 0, 0, 0, 0)
at entry (before the clock is read and PMPI is called: MPI call `seq` begins) and
    VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ_TOOL_BASE('P','M') + 1, seq, 0, 0, 0, 0)
at exit (after the record is written: call `seq` ends). `seq` is the rank's call sequence
number from 0 (MPI_Init or MPI_Init_thread is 0), the `seq` column of the events table; it is
counted whether or not PMAC_TRACE_DIR is set, so a memory-only run numbers calls the same way.
The instructions between exit of `seq` and entry of `seq+1` are the compute burst before
call `seq+1`. Outside valgrind these requests are a few no-op instructions."""


@dataclass(frozen=True)
class W:
    name: str
    params: str
    op: Op
    c: bool = False
    pre: str = ""
    post: str = ""
    subs: str = ""
    always: str = ""
    #: MPI-4 only (persistent collectives, ...): compiled where MPI_VERSION >= 4, no Fortran wrapper
    mpi4: bool = False


_STATUS_PRE = "MPI_Status pmac_st; if (status == MPI_STATUS_IGNORE) status = &pmac_st;"
_STATUS_POST = ("r.source = pmac_rank(status->MPI_SOURCE); r.recv_tag = status->MPI_TAG; "
                "r.recv_bytes = pmac_status_bytes(status);")
_CI = "pmac_comm_t *ci = pmac_comm(comm); r.comm = ci ? ci->id : -1;"


def _p2p_send(name, op, nb=False):
    params = "const void *buf, {C} count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm"
    post = _CI + " r.dest = pmac_rank(dest); r.send_tag = tag; r.send_bytes = pmac_bytes(count, datatype);"
    if nb:
        params += ", MPI_Request *request"
        post += " r.request = PMAC_H(*request);"
    return W(name, params, op, c=True, post=post)


def _p2p_recv(name, op, nb):
    params = "void *buf, {C} count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm"
    post = _CI + " r.source = pmac_rank(source); r.recv_tag = pmac_tag(tag); r.recv_bytes = pmac_bytes(count, datatype);"
    if nb:
        return W(name, params + ", MPI_Request *request", op, c=True, post=post + " r.request = PMAC_H(*request);")
    return W(name, params + ", MPI_Status *status", op, c=True, pre=_STATUS_PRE, post=_CI + " " + _STATUS_POST)


def _rooted(name, params, op, post, nb=False, subs=""):
    if nb:
        params += ", MPI_Request *request"
        post += " r.request = PMAC_H(*request);"
    return W(name, params, op, c=True, post=_CI + " " + post, subs=subs)


# bytes of one collective, with MPI_IN_PLACE handled: `n = count*size`
_BCAST = "int64_t n = pmac_bytes(count, datatype); r.root = root; if (ci && ci->rank == root) r.send_bytes = n; else r.recv_bytes = n;"
_REDUCE = "int64_t n = pmac_bytes(count, datatype); r.root = root; r.send_bytes = n; if (ci && ci->rank == root) r.recv_bytes = n;"
_ALLRED = "r.send_bytes = r.recv_bytes = pmac_bytes(count, datatype);"
_GATHER = ("r.root = root; int me = ci && ci->rank == root; r.send_bytes = sendbuf == MPI_IN_PLACE ? pmac_bytes(recvcount, recvtype) "
           ": pmac_bytes(sendcount, sendtype); if (me) r.recv_bytes = pmac_bytes(recvcount, recvtype) * ci->size;")
_GATHERV = ("r.root = root; int me = ci && ci->rank == root; if (me) pmac_coll_v(&r, ci, {BIG}, NULL, 0, 0, recvcounts, pmac_tsize(recvtype), 0, 0); "
            "r.send_bytes = sendbuf == MPI_IN_PLACE ? (me ? pmac_at(recvcounts, {BIG}, ci->rank) * pmac_tsize(recvtype) : 0) : pmac_bytes(sendcount, sendtype);")
_GATHERV_SUBS = "if (ci && ci->rank == root) pmac_coll_v(&r, ci, {BIG}, NULL, 0, 0, recvcounts, pmac_tsize(recvtype), 0, 1);"
_SCATTER = ("r.root = root; int me = ci && ci->rank == root; if (me) r.send_bytes = pmac_bytes(sendcount, sendtype) * ci->size; "
            "r.recv_bytes = recvbuf == MPI_IN_PLACE ? pmac_bytes(sendcount, sendtype) : pmac_bytes(recvcount, recvtype);")
_SCATTERV = ("r.root = root; int me = ci && ci->rank == root; if (me) pmac_coll_v(&r, ci, {BIG}, sendcounts, pmac_tsize(sendtype), 0, NULL, 0, 0, 0); "
             "r.recv_bytes = recvbuf == MPI_IN_PLACE ? (me ? pmac_at(sendcounts, {BIG}, ci->rank) * pmac_tsize(sendtype) : 0) : pmac_bytes(recvcount, recvtype);")
_SCATTERV_SUBS = "if (ci && ci->rank == root) pmac_coll_v(&r, ci, {BIG}, sendcounts, pmac_tsize(sendtype), 0, NULL, 0, 0, 1);"
_ALLGATHER = ("r.send_bytes = sendbuf == MPI_IN_PLACE ? pmac_bytes(recvcount, recvtype) : pmac_bytes(sendcount, sendtype); "
              "r.recv_bytes = pmac_bytes(recvcount, recvtype) * (ci ? ci->size : 0);")
_ALLGATHERV_ARGS = ("ci, {BIG}, NULL, 0, sendbuf == MPI_IN_PLACE ? (ci ? pmac_at(recvcounts, {BIG}, ci->rank) * pmac_tsize(recvtype) : 0) "
                    ": pmac_bytes(sendcount, sendtype), recvcounts, pmac_tsize(recvtype), 0")
_ALLGATHERV_OWN = ("(sendbuf == MPI_IN_PLACE ? (ci ? pmac_at(recvcounts, {BIG}, ci->rank) * pmac_tsize(recvtype) : 0) "
                   ": pmac_bytes(sendcount, sendtype))")
# send_bytes = this rank's block (it goes to every peer: vcounts say so per peer)
_ALLGATHERV = f"pmac_coll_v(&r, {_ALLGATHERV_ARGS}, 0); r.send_bytes = {_ALLGATHERV_OWN};"
_ALLGATHERV_SUBS = f"pmac_coll_v(&r, {_ALLGATHERV_ARGS}, 1);"
_ALLTOALL = ("int n = ci ? ci->size : 0; r.recv_bytes = pmac_bytes(recvcount, recvtype) * n; "
             "r.send_bytes = sendbuf == MPI_IN_PLACE ? r.recv_bytes : pmac_bytes(sendcount, sendtype) * n;")
_ALLTOALLV_ARGS = ("ci, {BIG}, sendbuf == MPI_IN_PLACE ? recvcounts : sendcounts, "
                   "sendbuf == MPI_IN_PLACE ? pmac_tsize(recvtype) : pmac_tsize(sendtype), 0, recvcounts, pmac_tsize(recvtype), 0")
_RSCAT_ARGS = "ci, {BIG}, recvcounts, pmac_tsize(datatype), 0, NULL, 0, ci ? pmac_at(recvcounts, {BIG}, ci->rank) * pmac_tsize(datatype) : 0"
# recv_bytes = this rank's reduced block; per peer: the block sent to p, and this rank's block from each
_RSCAT_OWN = "(ci ? pmac_at(recvcounts, {BIG}, ci->rank) * pmac_tsize(datatype) : 0)"
_RSCAT_BLOCK = "r.recv_bytes = pmac_bytes(recvcount, datatype); r.send_bytes = r.recv_bytes * (ci ? ci->size : 0);"
_ALLTOALLW = ("int n = ci ? ci->size : 0; r.n_sub = n; for (int p = 0; p < n; p++) { "
              "r.recv_bytes += pmac_at(recvcounts, {BIG}, p) * pmac_tsize(recvtypes[p]); "
              "r.send_bytes += sendbuf == MPI_IN_PLACE ? pmac_at(recvcounts, {BIG}, p) * pmac_tsize(recvtypes[p]) "
              ": pmac_at(sendcounts, {BIG}, p) * pmac_tsize(sendtypes[p]); }")
_ALLTOALLW_SUBS = ("int n2 = ci ? ci->size : 0; for (int p = 0; p < n2; p++) { int64_t rb = pmac_at(recvcounts, {BIG}, p) * pmac_tsize(recvtypes[p]); "
                   "pmac_subv(p, sendbuf == MPI_IN_PLACE ? rb : pmac_at(sendcounts, {BIG}, p) * pmac_tsize(sendtypes[p]), rb); }")

_RED = "const void *sendbuf, void *recvbuf, {C} count, MPI_Datatype datatype, MPI_Op op"
_GA = "const void *sendbuf, {C} sendcount, MPI_Datatype sendtype, void *recvbuf, {C} recvcount, MPI_Datatype recvtype"
_GAV = "const void *sendbuf, {C} sendcount, MPI_Datatype sendtype, void *recvbuf, const {C} recvcounts[], const {D} displs[], MPI_Datatype recvtype"
_SCV = "const void *sendbuf, const {C} sendcounts[], const {D} displs[], MPI_Datatype sendtype, void *recvbuf, {C} recvcount, MPI_Datatype recvtype"
_A2AV = ("const void *sendbuf, const {C} sendcounts[], const {D} sdispls[], MPI_Datatype sendtype, void *recvbuf, "
         "const {C} recvcounts[], const {D} rdispls[], MPI_Datatype recvtype")
_A2AW = ("const void *sendbuf, const {C} sendcounts[], const {D} sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, "
         "const {C} recvcounts[], const {D} rdispls[], const MPI_Datatype recvtypes[]")


def _collectives() -> list[W]:
    rows = []
    for nb in (False, True):
        p = "I" if nb else ""
        o = (lambda name: Op[("I" if nb else "") + name])
        rows += [
            W(f"MPI_{p}barrier" if nb else "MPI_Barrier", "MPI_Comm comm" + (", MPI_Request *request" if nb else ""),
              o("BARRIER"), post=_CI + (" r.request = PMAC_H(*request);" if nb else "")),
            _rooted(f"MPI_{p}bcast" if nb else "MPI_Bcast", "void *buffer, {C} count, MPI_Datatype datatype, int root, MPI_Comm comm",
                    o("BCAST"), _BCAST, nb),
            _rooted(f"MPI_{p}reduce" if nb else "MPI_Reduce", _RED + ", int root, MPI_Comm comm", o("REDUCE"), _REDUCE, nb),
            _rooted(f"MPI_{p}allreduce" if nb else "MPI_Allreduce", _RED + ", MPI_Comm comm", o("ALLREDUCE"), _ALLRED, nb),
            _rooted(f"MPI_{p}gather" if nb else "MPI_Gather", _GA + ", int root, MPI_Comm comm", o("GATHER"), _GATHER, nb),
            _rooted(f"MPI_{p}gatherv" if nb else "MPI_Gatherv", _GAV + ", int root, MPI_Comm comm", o("GATHERV"), _GATHERV, nb,
                    subs=_GATHERV_SUBS),
            _rooted(f"MPI_{p}scatter" if nb else "MPI_Scatter", _GA + ", int root, MPI_Comm comm", o("SCATTER"), _SCATTER, nb),
            _rooted(f"MPI_{p}scatterv" if nb else "MPI_Scatterv", _SCV + ", int root, MPI_Comm comm", o("SCATTERV"), _SCATTERV, nb,
                    subs=_SCATTERV_SUBS),
            _rooted(f"MPI_{p}allgather" if nb else "MPI_Allgather", _GA + ", MPI_Comm comm", o("ALLGATHER"), _ALLGATHER, nb),
            _rooted(f"MPI_{p}allgatherv" if nb else "MPI_Allgatherv", _GAV + ", MPI_Comm comm", o("ALLGATHERV"), _ALLGATHERV, nb,
                    subs=_ALLGATHERV_SUBS),
            _rooted(f"MPI_{p}alltoall" if nb else "MPI_Alltoall", _GA + ", MPI_Comm comm", o("ALLTOALL"), _ALLTOALL, nb),
            _rooted(f"MPI_{p}alltoallv" if nb else "MPI_Alltoallv", _A2AV + ", MPI_Comm comm", o("ALLTOALLV"),
                    f"pmac_coll_v(&r, {_ALLTOALLV_ARGS}, 0);", nb, subs=f"pmac_coll_v(&r, {_ALLTOALLV_ARGS}, 1);"),
            _rooted(f"MPI_{p}reduce_scatter" if nb else "MPI_Reduce_scatter",
                    "const void *sendbuf, void *recvbuf, const {C} recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm",
                    o("REDUCE_SCATTER"), f"pmac_coll_v(&r, {_RSCAT_ARGS}, 0); r.recv_bytes = {_RSCAT_OWN};", nb,
                    subs=f"pmac_coll_v(&r, {_RSCAT_ARGS}, 1);"),
            _rooted(f"MPI_{p}scan" if nb else "MPI_Scan", _RED + ", MPI_Comm comm", o("SCAN"), _ALLRED, nb),
            _rooted(f"MPI_{p}exscan" if nb else "MPI_Exscan", _RED + ", MPI_Comm comm", o("EXSCAN"), _ALLRED, nb),
        ]
    for nb in (False, True):
        p = "I" if nb else ""
        rows += [
            _rooted(f"MPI_{p}alltoallw" if nb else "MPI_Alltoallw", _A2AW + ", MPI_Comm comm", Op[p + "ALLTOALLW"],
                    _ALLTOALLW, nb, subs=_ALLTOALLW_SUBS),
            _rooted(f"MPI_{p}reduce_scatter_block" if nb else "MPI_Reduce_scatter_block",
                    "const void *sendbuf, void *recvbuf, {C} recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm",
                    Op[p + "REDUCE_SCATTER_BLOCK"], _RSCAT_BLOCK, nb),
        ]
    return rows


# ---------------------------------------------------------------- neighbourhood collectives
_NA2AW = ("const void *sendbuf, const {C} sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], "
          "void *recvbuf, const {C} recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[]")
#: pmac_nbr_v arguments after (&r, ci, {BIG}, ...) and before the emit flag
_NBR_ARGS = {
    "allgather": ("NULL, NULL, 0, pmac_bytes(sendcount, sendtype), NULL, NULL, 0, pmac_bytes(recvcount, recvtype)", _GA),
    "allgatherv": ("NULL, NULL, 0, pmac_bytes(sendcount, sendtype), recvcounts, NULL, pmac_tsize(recvtype), 0", _GAV),
    "alltoall": ("NULL, NULL, 0, pmac_bytes(sendcount, sendtype), NULL, NULL, 0, pmac_bytes(recvcount, recvtype)", _GA),
    "alltoallv": ("sendcounts, NULL, pmac_tsize(sendtype), 0, recvcounts, NULL, pmac_tsize(recvtype), 0", _A2AV),
    "alltoallw": ("sendcounts, sendtypes, 0, 0, recvcounts, recvtypes, 0, 0", _NA2AW),
}


def _neighbor_rows() -> list[W]:
    rows = []
    for nb in (False, True):
        for kind, (args, params) in _NBR_ARGS.items():
            op = Op[("I" if nb else "") + ("NEIGHBOR_ALLGATHER" if kind.startswith("allgather") else "NEIGHBOR_ALLTOALL")]
            name = ("MPI_Ineighbor_" if nb else "MPI_Neighbor_") + kind
            rows.append(_rooted(name, params + ", MPI_Comm comm", op, f"pmac_nbr_v(&r, ci, {{BIG}}, {args}, 0);", nb,
                                subs=f"pmac_nbr_v(&r, ci, {{BIG}}, {args}, 1);"))
    return rows


def _persistent(w: W) -> W:
    """The MPI-4 persistent form (``MPI_X_init``) of a blocking collective row: recorded like the
    collective (bytes, root, per-peer counts) as COLL_INIT, ``send_tag`` = Op of the non-blocking form."""
    nbop = Op(int(w.op) + 20) if int(w.op) < 100 else Op(int(w.op) + 2)
    return W(w.name + "_init", w.params + ", MPI_Info info, MPI_Request *request", Op.COLL_INIT, c=w.c,
             post=f"{w.post} r.request = PMAC_H(*request); r.send_tag = {int(nbop)};", subs=w.subs, mpi4=True)


# ---------------------------------------------------------------- one-sided (RMA)
_RMA_ORIGIN = ("const void *origin_addr, {C} origin_count, MPI_Datatype origin_datatype, int target_rank, "
               "MPI_Aint target_disp, {C} target_count, MPI_Datatype target_datatype")
_RMA_GETACC = ("const void *origin_addr, {C} origin_count, MPI_Datatype origin_datatype, void *result_addr, "
               "{C} result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint target_disp, "
               "{C} target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win")
_WIN = "r.comm = pmac_win_comm(win);"
_PUT = _WIN + " r.dest = pmac_rank(target_rank); r.send_bytes = pmac_bytes(origin_count, origin_datatype);"
_GET = _WIN + " r.source = pmac_rank(target_rank); r.recv_bytes = pmac_bytes(origin_count, origin_datatype);"
_GETACC = (_WIN + " r.dest = r.source = pmac_rank(target_rank); r.recv_bytes = pmac_bytes(result_count, result_datatype); "
           "r.send_bytes = op == MPI_NO_OP ? 0 : pmac_bytes(origin_count, origin_datatype);")
_REQ = " r.request = PMAC_H(*request);"
_WIN_NEW = _CI + " pmac_win_add(*win, r.comm);"


def _rma_rows() -> list[W]:
    rows = []
    for r in ("", "R"):  # MPI_Put and MPI_Rput (request-based), ...
        req, sub = (", MPI_Request *request", _REQ) if r else ("", "")
        name = (lambda x: f"MPI_R{x.lower()}" if r else f"MPI_{x}")  # noqa: E731
        rows += [
            W(name("Put"), _RMA_ORIGIN + ", MPI_Win win" + req, Op.PUT, c=True, post=_PUT + sub),
            W(name("Get"), _RMA_ORIGIN.replace("const void", "void") + ", MPI_Win win" + req, Op.GET, c=True,
              post=_GET + sub),
            W(name("Accumulate"), _RMA_ORIGIN + ", MPI_Op op, MPI_Win win" + req, Op.ACCUMULATE, c=True,
              post=_PUT + sub),
            W(name("Get_accumulate"), _RMA_GETACC + req, Op.ACCUMULATE, c=True, post=_GETACC + sub),
        ]
    rows += [
        W("MPI_Fetch_and_op", "const void *origin_addr, void *result_addr, MPI_Datatype datatype, int target_rank, "
          "MPI_Aint target_disp, MPI_Op op, MPI_Win win", Op.ACCUMULATE,
          post=_WIN + " r.dest = r.source = pmac_rank(target_rank); r.recv_bytes = pmac_tsize(datatype); "
               "r.send_bytes = op == MPI_NO_OP ? 0 : r.recv_bytes;"),
        W("MPI_Compare_and_swap", "const void *origin_addr, const void *compare_addr, void *result_addr, "
          "MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Win win", Op.ACCUMULATE,
          post=_WIN + " r.dest = r.source = pmac_rank(target_rank); r.recv_bytes = pmac_tsize(datatype); "
               "r.send_bytes = 2 * r.recv_bytes;"),
        # windows: remember the communicator, so target ranks translate to world ranks
        W("MPI_Win_create", "void *base, MPI_Aint size, {D} disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win *win",
          Op.WIN_CREATE, c=True, post=_WIN_NEW),
        W("MPI_Win_allocate", "MPI_Aint size, {D} disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, MPI_Win *win",
          Op.WIN_CREATE, c=True, post=_WIN_NEW),
        W("MPI_Win_allocate_shared", "MPI_Aint size, {D} disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, "
          "MPI_Win *win", Op.WIN_CREATE, c=True, post=_WIN_NEW),
        W("MPI_Win_create_dynamic", "MPI_Info info, MPI_Comm comm, MPI_Win *win", Op.WIN_CREATE, post=_WIN_NEW),
        W("MPI_Win_free", "MPI_Win *win", Op.WIN_FREE, pre="MPI_Win pmac_w0 = *win;",
          post="r.comm = pmac_win_comm(pmac_w0); pmac_win_del(pmac_w0);"),
        W("MPI_Win_fence", "int assert, MPI_Win win", Op.WIN_FENCE, post=_WIN),
        W("MPI_Win_lock", "int lock_type, int rank, int assert, MPI_Win win", Op.WIN_LOCK,
          post=_WIN + " r.dest = pmac_rank(rank); r.aux = lock_type;"),
        W("MPI_Win_lock_all", "int assert, MPI_Win win", Op.WIN_LOCK, post=_WIN),
        W("MPI_Win_unlock", "int rank, MPI_Win win", Op.WIN_UNLOCK, post=_WIN + " r.dest = pmac_rank(rank);"),
        W("MPI_Win_unlock_all", "MPI_Win win", Op.WIN_UNLOCK, post=_WIN),
        W("MPI_Win_flush", "int rank, MPI_Win win", Op.WIN_SYNC, post=_WIN + " r.dest = pmac_rank(rank);"),
        W("MPI_Win_flush_local", "int rank, MPI_Win win", Op.WIN_SYNC, post=_WIN + " r.dest = pmac_rank(rank);"),
        W("MPI_Win_flush_all", "MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_flush_local_all", "MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_sync", "MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_post", "MPI_Group group, int assert, MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_start", "MPI_Group group, int assert, MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_complete", "MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_wait", "MPI_Win win", Op.WIN_SYNC, post=_WIN),
        W("MPI_Win_test", "MPI_Win win, int *flag", Op.WIN_SYNC, post=_WIN + " r.flag = (uint8_t)(*flag != 0);"),
    ]
    return rows


_WAITALL_PRE = ("MPI_Request *pmac_q = pmac_reqsave(array_of_requests, count); "
                "if (array_of_statuses == MPI_STATUSES_IGNORE) array_of_statuses = pmac_statbuf(count);")
_SOME_PRE = ("MPI_Request *pmac_q = pmac_reqsave(array_of_requests, incount); "
             "if (array_of_statuses == MPI_STATUSES_IGNORE) array_of_statuses = pmac_statbuf(incount);")


def _some_subs() -> str:
    return ("int nd = (*outcount == MPI_UNDEFINED) ? 0 : *outcount; "
            "for (int i = 0; i < incount; i++) { int k = 0; while (k < nd && array_of_indices[k] != i) k++; "
            "pmac_subreq(pmac_q[i], k < nd, k < nd ? &array_of_statuses[k] : NULL); }")


# recording starts inside Init: time it unconditionally
_INIT_PRE = "r.t_start_ns = pmac_now();"
_INIT_ALWAYS = "if (pmac_rc == MPI_SUCCESS) { pmac_start(); } pmac_t1 = pmac_now();"
# the thread level MPI provides, in aux: 1 single, 2 funneled, 3 serialized, 4 multiple (0: not
# recorded, raw traces of older shims; the MPI constants' values differ between libraries). MPICH
# and Open MPI take their locks, and MPICH gives up its shared-memory collectives, only at
# MPI_THREAD_MULTIPLE: a collective can cost several times more there (pmac.mpi.THREAD_LEVELS)
_INIT_POST = ("r.comm = 0; { int pmac_lv = MPI_THREAD_SINGLE; PMPI_Query_thread(&pmac_lv); "
              "r.aux = pmac_lv == MPI_THREAD_MULTIPLE ? 4 : pmac_lv == MPI_THREAD_SERIALIZED ? 3 : "
              "pmac_lv == MPI_THREAD_FUNNELED ? 2 : 1; }")

WRAPPERS: list[W] = [
    # --- init / finalize ---
    W("MPI_Init", "int *argc, char ***argv", Op.INIT, pre=_INIT_PRE, always=_INIT_ALWAYS, post=_INIT_POST),
    W("MPI_Init_thread", "int *argc, char ***argv, int required, int *provided", Op.INIT, pre=_INIT_PRE,
      always=_INIT_ALWAYS, post=_INIT_POST),
    W("MPI_Finalize", "void", Op.FINALIZE, post="r.comm = 0;",
      subs="if (!pmac_mt && pthread_equal(pthread_self(), pmac_owner)) pmac_pages_sample(r.seq, 1); pmac_close();"),
    W("MPI_Abort", "MPI_Comm comm, int errorcode", Op.OTHER,
      pre="if (pmac_on) { PMAC_FILL(r, 127); r.t_end_ns = r.t_start_ns; r.comm = pmac_cid(comm); "
          "r.aux = errorcode; pmac_push(&r); pmac_close(); }"),
    # --- blocking point-to-point ---
    _p2p_send("MPI_Send", Op.SEND), _p2p_send("MPI_Ssend", Op.SSEND), _p2p_send("MPI_Bsend", Op.BSEND),
    _p2p_send("MPI_Rsend", Op.RSEND), _p2p_recv("MPI_Recv", Op.RECV, False),
    W("MPI_Sendrecv", "const void *sendbuf, {C} sendcount, MPI_Datatype sendtype, int dest, int sendtag, "
      "void *recvbuf, {C} recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status",
      Op.SENDRECV, c=True, pre=_STATUS_PRE,
      post=_CI + " r.dest = pmac_rank(dest); r.send_tag = sendtag; r.send_bytes = pmac_bytes(sendcount, sendtype); " + _STATUS_POST),
    W("MPI_Sendrecv_replace", "void *buf, {C} count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, "
      "MPI_Comm comm, MPI_Status *status", Op.SENDRECV_REPLACE, c=True, pre=_STATUS_PRE,
      post=_CI + " r.dest = pmac_rank(dest); r.send_tag = sendtag; r.send_bytes = pmac_bytes(count, datatype); " + _STATUS_POST),
    # --- non-blocking ---
    _p2p_send("MPI_Isend", Op.ISEND, True), _p2p_send("MPI_Issend", Op.ISSEND, True),
    _p2p_send("MPI_Ibsend", Op.IBSEND, True), _p2p_send("MPI_Irsend", Op.IRSEND, True),
    _p2p_recv("MPI_Irecv", Op.IRECV, True),
    # --- persistent (all send modes are SEND_INIT) ---
    _p2p_send("MPI_Send_init", Op.SEND_INIT, True), _p2p_send("MPI_Ssend_init", Op.SEND_INIT, True),
    _p2p_send("MPI_Bsend_init", Op.SEND_INIT, True), _p2p_send("MPI_Rsend_init", Op.SEND_INIT, True),
    _p2p_recv("MPI_Recv_init", Op.RECV_INIT, True),
    W("MPI_Start", "MPI_Request *request", Op.START, pre="MPI_Request pmac_h0 = *request;",
      post="r.request = PMAC_H(pmac_h0); r.n_sub = 1;", subs="pmac_subreq(pmac_h0, 0, NULL);"),
    W("MPI_Startall", "int count, MPI_Request array_of_requests[]", Op.STARTALL,
      pre="MPI_Request *pmac_q = pmac_reqsave(array_of_requests, count);", post="r.n_sub = count;",
      subs="for (int i = 0; i < count; i++) pmac_subreq(pmac_q[i], 0, NULL);"),
    W("MPI_Request_free", "MPI_Request *request", Op.REQUEST_FREE, pre="MPI_Request pmac_h0 = *request;",
      post="r.request = PMAC_H(pmac_h0);"),
    # --- probes and matched probes (message handle in `aux`) ---
    W("MPI_Probe", "int source, int tag, MPI_Comm comm, MPI_Status *status", Op.PROBE, pre=_STATUS_PRE,
      post=_CI + " " + _STATUS_POST),
    W("MPI_Iprobe", "int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status", Op.IPROBE, pre=_STATUS_PRE,
      post=_CI + " r.flag = (uint8_t)(*flag != 0); if (*flag) { " + _STATUS_POST + " } else { r.source = pmac_rank(source); }"),
    W("MPI_Mprobe", "int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status", Op.MPROBE,
      pre=_STATUS_PRE, post=_CI + " " + _STATUS_POST + " r.aux = PMAC_H(*message);"),
    W("MPI_Improbe", "int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status",
      Op.IMPROBE, pre=_STATUS_PRE,
      post=_CI + " r.flag = (uint8_t)(*flag != 0); if (*flag) { " + _STATUS_POST + " r.aux = PMAC_H(*message); } "
           "else { r.source = pmac_rank(source); }"),
    W("MPI_Mrecv", "void *buf, {C} count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status", Op.MRECV,
      c=True, pre=_STATUS_PRE + " MPI_Message pmac_m0 = *message;", post=_STATUS_POST + " r.aux = PMAC_H(pmac_m0);"),
    W("MPI_Imrecv", "void *buf, {C} count, MPI_Datatype datatype, MPI_Message *message, MPI_Request *request", Op.IMRECV,
      c=True, pre="MPI_Message pmac_m0 = *message;",
      post="r.aux = PMAC_H(pmac_m0); r.request = PMAC_H(*request); r.recv_bytes = pmac_bytes(count, datatype);"),
    # --- completion: every named request becomes a sub-record ---
    W("MPI_Wait", "MPI_Request *request, MPI_Status *status", Op.WAIT,
      pre=_STATUS_PRE + " MPI_Request pmac_h0 = *request;", post="r.n_sub = 1;",
      subs="pmac_subreq(pmac_h0, pmac_h0 != MPI_REQUEST_NULL, status);"),
    W("MPI_Waitall", "int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses", Op.WAITALL,
      pre=_WAITALL_PRE, post="r.n_sub = count;",
      subs="for (int i = 0; i < count; i++) pmac_subreq(pmac_q[i], pmac_q[i] != MPI_REQUEST_NULL, &array_of_statuses[i]);"),
    W("MPI_Waitany", "int count, MPI_Request array_of_requests[], int *index, MPI_Status *status", Op.WAITANY,
      pre=_STATUS_PRE + " MPI_Request *pmac_q = pmac_reqsave(array_of_requests, count);", post="r.n_sub = count;",
      subs="for (int i = 0; i < count; i++) pmac_subreq(pmac_q[i], i == *index, i == *index ? status : NULL);"),
    W("MPI_Waitsome", "int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], "
      "MPI_Status *array_of_statuses", Op.WAITSOME, pre=_SOME_PRE, post="r.n_sub = incount;", subs=_some_subs()),
    W("MPI_Test", "MPI_Request *request, int *flag, MPI_Status *status", Op.TEST,
      pre=_STATUS_PRE + " MPI_Request pmac_h0 = *request;", post="r.n_sub = 1; r.flag = (uint8_t)(*flag != 0);",
      subs="pmac_subreq(pmac_h0, *flag && pmac_h0 != MPI_REQUEST_NULL, status);"),
    W("MPI_Testall", "int count, MPI_Request array_of_requests[], int *flag, MPI_Status *array_of_statuses",
      Op.TESTALL, pre=_WAITALL_PRE, post="r.n_sub = count; r.flag = (uint8_t)(*flag != 0);",
      subs="for (int i = 0; i < count; i++) pmac_subreq(pmac_q[i], *flag && pmac_q[i] != MPI_REQUEST_NULL, &array_of_statuses[i]);"),
    W("MPI_Testany", "int count, MPI_Request array_of_requests[], int *index, int *flag, MPI_Status *status",
      Op.TESTANY, pre=_STATUS_PRE + " MPI_Request *pmac_q = pmac_reqsave(array_of_requests, count);",
      post="r.n_sub = count; r.flag = (uint8_t)(*flag != 0);",
      subs="for (int i = 0; i < count; i++) pmac_subreq(pmac_q[i], *flag && i == *index, (*flag && i == *index) ? status : NULL);"),
    W("MPI_Testsome", "int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], "
      "MPI_Status *array_of_statuses", Op.TESTSOME, pre=_SOME_PRE, post="r.n_sub = incount;", subs=_some_subs()),
    # --- collectives (classic, large-count, non-blocking), MPI-4 persistent, neighbourhood ---
    *_collectives(),
    *[_persistent(w) for w in _collectives() if int(w.op) < 80],
    *_neighbor_rows(),
    *[_persistent(w) for w in _neighbor_rows() if w.op in (Op.NEIGHBOR_ALLGATHER, Op.NEIGHBOR_ALLTOALL)],
    # --- one-sided ---
    *_rma_rows(),
    # --- communicators: new ones get a local id and a definition record (members as world ranks) ---
    W("MPI_Comm_dup", "MPI_Comm comm, MPI_Comm *newcomm", Op.COMM_DUP, post=_CI + " r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Comm_dup_with_info", "MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm", Op.COMM_DUP,
      post=_CI + " r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Comm_idup", "MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request", Op.COMM_IDUP,
      post=_CI + " r.request = PMAC_H(*request);"),
    W("MPI_Comm_idup_with_info", "MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm, MPI_Request *request", Op.COMM_IDUP,
      post=_CI + " r.request = PMAC_H(*request);", mpi4=True),
    W("MPI_Comm_split", "MPI_Comm comm, int color, int key, MPI_Comm *newcomm", Op.COMM_SPLIT,
      post=_CI + " r.aux = color; r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Comm_split_type", "MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm",
      Op.COMM_SPLIT_TYPE, post=_CI + " r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Comm_create", "MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm", Op.COMM_CREATE,
      post=_CI + " r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Comm_create_group", "MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm", Op.COMM_CREATE,
      post=_CI + " r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Cart_create", "MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder, MPI_Comm *comm_cart",
      Op.CART_CREATE, post=_CI + " r.new_comm = pmac_newcomm(*comm_cart);"),
    W("MPI_Cart_sub", "MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm", Op.COMM_SPLIT,
      post=_CI + " r.new_comm = pmac_newcomm(*newcomm);"),
    W("MPI_Graph_create", "MPI_Comm comm, int nnodes, const int indx[], const int edges[], int reorder, "
      "MPI_Comm *comm_graph", Op.GRAPH_CREATE, post=_CI + " r.new_comm = pmac_newcomm(*comm_graph);"),
    W("MPI_Dist_graph_create", "MPI_Comm comm, int n, const int sources[], const int degrees[], const int destinations[], "
      "const int *weights, MPI_Info info, int reorder, MPI_Comm *comm_dist_graph", Op.GRAPH_CREATE,
      post=_CI + " r.new_comm = pmac_newcomm(*comm_dist_graph);"),
    W("MPI_Dist_graph_create_adjacent", "MPI_Comm comm, int indegree, const int sources[], const int *sourceweights, "
      "int outdegree, const int destinations[], const int *destweights, MPI_Info info, int reorder, "
      "MPI_Comm *comm_dist_graph", Op.GRAPH_CREATE, post=_CI + " r.new_comm = pmac_newcomm(*comm_dist_graph);"),
    # intercommunicators: the peer ranks of calls on them are ranks of the remote group
    W("MPI_Intercomm_create", "MPI_Comm comm, int local_leader, MPI_Comm peer_comm, int remote_leader, int tag, "
      "MPI_Comm *newintercomm", Op.INTERCOMM_CREATE, post=_CI + " r.new_comm = pmac_newcomm(*newintercomm);"),
    W("MPI_Intercomm_create_from_groups", "MPI_Group local_group, int local_leader, MPI_Group remote_group, "
      "int remote_leader, const char *stringtag, MPI_Info info, MPI_Errhandler errhandler, MPI_Comm *newintercomm",
      Op.INTERCOMM_CREATE, post="r.new_comm = pmac_newcomm(*newintercomm);", mpi4=True),
    W("MPI_Intercomm_merge", "MPI_Comm comm, int high, MPI_Comm *newintracomm", Op.INTERCOMM_MERGE,
      post=_CI + " r.aux = high; r.new_comm = pmac_newcomm(*newintracomm);"),
    W("MPI_Comm_free", "MPI_Comm *comm", Op.COMM_FREE,
      pre="MPI_Comm pmac_c0 = *comm; int32_t pmac_cf = pmac_on ? pmac_cid(pmac_c0) : -1;",
      post="r.comm = pmac_cf; pmac_unregister(pmac_c0);"),
]

_VARIANT_TYPES = {False: {"C": "int", "D": "int"}, True: {"C": "MPI_Count", "D": "MPI_Aint"}}


def _arg_names(params: str) -> list[str]:
    if params.strip() == "void":
        return []
    names = []
    for p in params.split(","):
        m = re.search(r"([A-Za-z_]\w*)\s*(\[\s*\])?\s*$", p.strip())
        if not m:
            raise ValueError(f"cannot find the parameter name in {p!r}")
        names.append(m.group(1))
    return names


def _wrapper(w: W, big: bool) -> str:
    name = w.name + ("_c" if big else "")
    params = w.params.format(**_VARIANT_TYPES[big])
    args = ", ".join(_arg_names(params))
    fmt = lambda s: s.replace("{BIG}", "1" if big else "0")  # noqa: E731
    lines = [f"PMAC_VIS int {name}({params}) {{",
             f"    PMAC_BEGIN(r, {int(w.op)});"]
    if w.pre:
        lines.append(f"    {fmt(w.pre)}")
    lines.append(f"    int pmac_rc = P{name}({args});")
    lines.append("    int64_t pmac_t1 = pmac_on ? pmac_now() : 0;")
    if w.always:
        lines.append(f"    {fmt(w.always)}")
    lines.append("    if (pmac_on) {")
    lines.append(f"        PMAC_FILL(r, {int(w.op)}); r.t_end_ns = pmac_t1;")
    lines.append("        {" + (f" {fmt(w.post)}" if w.post else ""))
    if big:
        lines.append("        r.flag |= 0x80; /* entered through the large-count MPI_*_c name */")
    lines.append("        pmac_push(&r);")
    if w.subs:
        lines.append(f"        {fmt(w.subs)}")
    lines.append("        }")
    lines.append("    }")
    lines.append("    PMAC_VG_EXIT(pmac_s);")
    lines.append("    return pmac_rc;")
    lines.append("}")
    return "\n".join(lines)


# ---------------------------------------------------------------- Fortran (mpif.h / use mpi)
#: rows without Fortran wrappers (besides the MPI-4 ones): matched probes (MPI_Message), per-peer
#: datatype arrays, non-blocking dup, window allocation (the base address is a Fortran pointer)
FORTRAN_SKIP = frozenset({"MPI_Mprobe", "MPI_Improbe", "MPI_Mrecv", "MPI_Imrecv", "MPI_Alltoallw", "MPI_Ialltoallw",
                          "MPI_Neighbor_alltoallw", "MPI_Ineighbor_alltoallw", "MPI_Comm_idup",
                          "MPI_Win_allocate", "MPI_Win_allocate_shared"})
#: Fortran argument lists that differ from C (besides the trailing ierr)
FORTRAN_PARAMS = {"MPI_Init": "void", "MPI_Init_thread": "int required, int *provided"}
_HANDLE_TYPES = {"MPI_Datatype": "Type", "MPI_Comm": "Comm", "MPI_Op": "Op", "MPI_Group": "Group",
                 "MPI_Info": "Info", "MPI_Request": "Request", "MPI_Win": "Win"}


def _fortran_wrapper(w: W) -> str | None:
    """``mpi_xxx_`` calling ``pmpi_xxx_``: Fortran handles converted with MPI_*_f2c into C
    variables named like the C parameters, so the row's C snippets apply unchanged."""
    if w.name in FORTRAN_SKIP or w.mpi4:
        return None
    params = FORTRAN_PARAMS.get(w.name, w.params).format(**_VARIANT_TYPES[False])
    fparams, fargs, before, after = [], [], [], []
    for p in ([] if params.strip() == "void" else [x.strip() for x in params.split(",")]):
        name = _arg_names(p)[0]
        typ = p[: p.rindex(name)].strip()
        arr = p.rstrip().endswith("]")
        f = f"f_{name}"
        if typ.endswith("void *"):
            fparams.append(f"{typ}{f}")
            fargs.append(f)
            # Fortran's MPI_IN_PLACE is its own sentinel: the C snippets compare with C's
            before.append(f"{typ}{name} = PMAC_F_IN_PLACE({f});")
            continue
        fparams.append(f"MPI_Fint *{f}")
        fargs.append(f)
        base = typ.replace("const", "").replace("*", "").strip()
        if typ == "int" and not arr:
            before.append(f"int {name} = (int)*{f};")
        elif base in _HANDLE_TYPES and "*" not in typ and not arr:
            before.append(f"{base} {name} = PMPI_{_HANDLE_TYPES[base]}_f2c(*{f});")
        elif (typ == "const int" and arr) or typ == "const int *":
            before.append(f"const int *{name} = (const int *){f};")
        elif typ == "MPI_Aint" and not arr:  # INTEGER(KIND=MPI_ADDRESS_KIND), by reference
            before.append(f"MPI_Aint {name} = *(const MPI_Aint *){f};")
        elif typ == "int *" and name == "index":  # Fortran indices count from 1
            before.append(f"int {name}_c = MPI_UNDEFINED; int *{name} = &{name}_c;")
            after.append(f"{name}_c = (*{f} == MPI_UNDEFINED) ? MPI_UNDEFINED : (int)*{f} - 1;")
        elif typ == "int" and arr and name == "array_of_indices":
            before.append(f"int *{name} = pmac_fidx(incount);")
            after.append(f"for (int k = 0; k < incount && *outcount != MPI_UNDEFINED && k < *outcount; k++) "
                         f"{name}[k] = (int){f}[k] - 1;")
        elif typ == "int *":
            before.append(f"int *{name} = (int *){f};")
        elif typ == "MPI_Status *" and name == "status":
            before.append(f"if ({f} == MPI_F_STATUS_IGNORE) {{ {f} = pmac_fst; }} MPI_Status {name}_c; "
                          f"MPI_Status *{name} = &{name}_c;")
            after.append(f"PMPI_Status_f2c({f}, &{name}_c);")
        elif typ == "MPI_Status *":  # array_of_statuses, with `count` or `incount` requests
            n = "incount" if "incount" in params else "count"
            before.append(f"if ({f} == MPI_F_STATUSES_IGNORE) {{ {f} = pmac_fstbuf({n}); }} "
                          f"MPI_Status *{name} = pmac_statbuf({n});")
            after.append(f"for (int i = 0; i < {n}; i++) PMPI_Status_f2c({f} + (size_t)i * PMAC_FSTATUS, &{name}[i]);")
        elif base == "MPI_Request" and arr:
            before.append(f"MPI_Request *{name} = pmac_f2c_reqs({f}, {'incount' if 'incount' in params else 'count'});")
        elif base in _HANDLE_TYPES and typ.endswith("*"):
            h = _HANDLE_TYPES[base]
            before.append(f"{base} {name}_c = PMPI_{h}_f2c(*{f}); {base} *{name} = &{name}_c;")
            after.append(f"{name}_c = PMPI_{h}_f2c(*{f});")
        else:
            raise ValueError(f"{w.name}: no Fortran conversion for parameter {p!r}")
    fparams.append("MPI_Fint *ierr")
    fargs.append("ierr")
    fname = w.name.lower()
    lines = [f"extern void p{fname}_({', '.join(fparams)});",
             f"PMAC_VIS void {fname}_({', '.join(fparams)}) {{",
             f"    PMAC_BEGIN(r, {int(w.op)});"]
    lines += [f"    {b}" for b in before]
    if w.pre:
        lines.append(f"    {w.pre.replace('{BIG}', '0')}")
    lines.append(f"    p{fname}_({', '.join(fargs)});")
    lines.append("    int pmac_rc = (int)*ierr;")
    lines.append("    int64_t pmac_t1 = pmac_on ? pmac_now() : 0;")
    if w.always:
        lines.append(f"    {w.always}")
    lines.append("    if (pmac_on) {")
    lines += [f"        {a}" for a in after if a]
    lines.append(f"        PMAC_FILL(r, {int(w.op)}); r.t_end_ns = pmac_t1;")
    lines.append("        {" + (f" {w.post.replace('{BIG}', '0')}" if w.post else ""))
    lines.append("        r.flag |= 0x40; /* entered through the Fortran binding */")
    lines.append("        pmac_push(&r);")
    if w.subs:
        lines.append(f"        {w.subs.replace('{BIG}', '0')}")
    lines.append("        }")
    lines.append("    }")
    lines.append("    (void)pmac_rc;")
    lines.append("    PMAC_VG_EXIT(pmac_s);")
    lines.append("}")
    # Open MPI's `use mpi_f08` layer calls the mpif.h implementation by its internal name
    # (mpi_send_f08_ -> ompi_send_f, same arguments), not through mpi_send_: one more name
    lines.append(f"PMAC_VIS void ompi_{fname[4:]}_f({', '.join(fparams)}) __attribute__((alias(\"{fname}_\")));")
    return "\n".join(lines)


def fortran_names() -> list[str]:
    """The mpif.h / ``use mpi`` names wrapped (each also as ``ompi_*_f`` for ``use mpi_f08``)."""
    return [w.name.lower() + "_" for w in WRAPPERS if w.name not in FORTRAN_SKIP and not w.mpi4]


def runtime_source() -> str:
    return resources.files("pmac").joinpath("shim/runtime.h").read_text()


def generate() -> str:
    """The whole C source of the shim (runtime inlined, so one file compiles anywhere)."""
    out = ["/* pmac PMPI shim: GENERATED by pmac/shim_gen.py from its WRAPPERS table. Do not edit.",
           " *", *(" * " + ln if ln else " *" for ln in VG_CONTRACT.splitlines()), " */",
           runtime_source(), ""]
    for w in WRAPPERS:
        if w.mpi4:
            out.append("#if MPI_VERSION >= 4")
        out.append(_wrapper(w, False))
        if w.c:
            if not w.mpi4:
                out.append("#if MPI_VERSION >= 4")
            out.append(_wrapper(w, True))
        if w.c or w.mpi4:
            out.append("#endif")
        out.append("")
    out.append("#ifdef PMAC_FORTRAN /* MPIs whose Fortran layer calls PMPI_* directly (Open MPI's libmpi_mpifh) */")
    for w in WRAPPERS:
        f = _fortran_wrapper(w)
        if f:
            out += [f, ""]
    out.append("#endif /* PMAC_FORTRAN */")
    return "\n".join(out)


def wrapped_names() -> list[str]:
    names = []
    for w in WRAPPERS:
        names.append(w.name)
        if w.c:
            names.append(w.name + "_c")
    return names


def source_hash(src: str | None = None) -> str:
    return hashlib.sha256((src or generate()).encode()).hexdigest()[:16]


def write_source(path: str | Path) -> Path:
    path = Path(path)
    path.write_text(generate())
    return path

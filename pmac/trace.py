"""The MPI event tables of a signature: the contract between tracers, importers and replay.

One row per MPI call of one rank (a collective is one row on each rank). Ranks and peers are
*world* ranks (the tracer translates communicator-local ranks). The compute burst before a
call is ``burst_s`` (time from the end of the previous call of that rank to the start of
this one). ``seq`` numbers a rank's calls from 0 and is the key a memory trace joins on.

Tables (all in ``events.npz`` beside the signature YAML):

- ``events``: see :data:`EVENTS`.
- ``requests``: the request handles a wait/test call names, in order (CSR: an event's
  ``req_offset``/``n_requests`` index into this table, rows of the same rank). For requests
  completed by the call, ``completed`` is 1 and ``source``/``recv_bytes`` come from the status.
- ``vcounts``: per-peer byte counts of vector collectives (``*v``, ``*w``).
- ``comms``: members of every communicator, in local-rank order; comm 0 is MPI_COMM_WORLD.
"""

from __future__ import annotations

import enum

import numpy as np

from .table import TableSpec


class Op(enum.IntEnum):
    """MPI operations recorded. Values are stable: they are stored in files."""

    INIT = 1
    FINALIZE = 2
    # blocking point-to-point
    SEND = 10
    SSEND = 11
    BSEND = 12
    RSEND = 13
    RECV = 14
    SENDRECV = 15
    SENDRECV_REPLACE = 16
    # non-blocking point-to-point
    ISEND = 20
    ISSEND = 21
    IBSEND = 22
    IRSEND = 23
    IRECV = 24
    # persistent
    SEND_INIT = 30
    RECV_INIT = 31
    START = 32
    STARTALL = 33
    REQUEST_FREE = 34
    # probes / matched probes
    PROBE = 40
    IPROBE = 41
    MPROBE = 42
    IMPROBE = 43
    MRECV = 44
    IMRECV = 45
    # completion
    WAIT = 50
    WAITALL = 51
    WAITANY = 52
    WAITSOME = 53
    TEST = 54
    TESTALL = 55
    TESTANY = 56
    TESTSOME = 57
    # collectives (blocking)
    BARRIER = 60
    BCAST = 61
    REDUCE = 62
    ALLREDUCE = 63
    GATHER = 64
    GATHERV = 65
    SCATTER = 66
    SCATTERV = 67
    ALLGATHER = 68
    ALLGATHERV = 69
    ALLTOALL = 70
    ALLTOALLV = 71
    ALLTOALLW = 72
    REDUCE_SCATTER = 73
    REDUCE_SCATTER_BLOCK = 74
    SCAN = 75
    EXSCAN = 76
    # collectives (non-blocking): completed by a wait on ``request``
    IBARRIER = 80
    IBCAST = 81
    IREDUCE = 82
    IALLREDUCE = 83
    IGATHER = 84
    IGATHERV = 85
    ISCATTER = 86
    ISCATTERV = 87
    IALLGATHER = 88
    IALLGATHERV = 89
    IALLTOALL = 90
    IALLTOALLV = 91
    IALLTOALLW = 92
    IREDUCE_SCATTER = 93
    IREDUCE_SCATTER_BLOCK = 94
    ISCAN = 95
    IEXSCAN = 96
    # communicators
    COMM_DUP = 100
    COMM_SPLIT = 101
    COMM_CREATE = 102
    COMM_FREE = 103
    COMM_SPLIT_TYPE = 104
    COMM_IDUP = 105
    CART_CREATE = 106
    # 110..126: recorded, replayed as local calls (pmac.predict says so; pmac.expand turns
    # neighbourhood collectives and started persistent collectives into what the replay prices).
    # Neighbourhood collectives (v/w variants share the op): one ``vcounts`` row per message slot
    # in MPI order, out-neighbours first (``recv_bytes`` NONE), then in-neighbours (``send_bytes``
    # NONE); ``peer`` NONE for MPI_PROC_NULL. Event totals count real neighbours only.
    NEIGHBOR_ALLGATHER = 110
    NEIGHBOR_ALLTOALL = 111
    INEIGHBOR_ALLGATHER = 112
    INEIGHBOR_ALLTOALL = 113
    GRAPH_CREATE = 114        # MPI_Graph_create, MPI_Dist_graph_create(_adjacent)
    INTERCOMM_CREATE = 115    # comms rows of an intercommunicator: both groups, lower world rank's first
    INTERCOMM_MERGE = 116
    #: MPI-4 persistent collective (MPI_*_init, neighbourhood ones too): bytes/root/vcounts as the
    #: collective; ``send_tag`` holds the Op of its non-blocking form; each MPI_Start runs it
    COLL_INIT = 117
    # one-sided (RMA): ``comm`` is the window's communicator, ``dest``/``source`` the target
    WIN_CREATE = 118          # create, allocate, allocate_shared, create_dynamic
    WIN_FREE = 119
    PUT = 120                 # Put, Rput: dest = target, send_bytes
    GET = 121                 # Get, Rget: source = target, recv_bytes
    ACCUMULATE = 122          # (R)accumulate, (R)get_accumulate, Fetch_and_op, Compare_and_swap
    WIN_FENCE = 123
    WIN_LOCK = 124            # lock (dest = target), lock_all
    WIN_UNLOCK = 125          # unlock (dest = target), unlock_all
    WIN_SYNC = 126            # flush*, sync, post/start/complete/wait/test
    # anything else wrapped for timing only
    OTHER = 127


SEND_OPS = frozenset({Op.SEND, Op.SSEND, Op.BSEND, Op.RSEND, Op.ISEND, Op.ISSEND, Op.IBSEND, Op.IRSEND,
                      Op.SEND_INIT})
RECV_OPS = frozenset({Op.RECV, Op.IRECV, Op.RECV_INIT, Op.MRECV, Op.IMRECV})
COLLECTIVE_OPS = frozenset(o for o in Op if 60 <= o < 100)
NONBLOCKING_OPS = frozenset({Op.ISEND, Op.ISSEND, Op.IBSEND, Op.IRSEND, Op.IRECV, Op.IMRECV}
                            | {o for o in Op if 80 <= o < 100})
COMPLETION_OPS = frozenset(o for o in Op if 50 <= o < 60)

#: no peer / root / request
NONE = -1
#: MPI_ANY_SOURCE before the status told the real source
ANY_SOURCE = -2

EVENTS = TableSpec(name="events", columns=(
    ("rank", "int32"),          # world rank making the call
    ("seq", "int64"),           # per-rank call sequence number, from 0
    ("op", "int16"),            # Op
    ("t_start_s", "float64"),   # monotonic clock, seconds since the rank's trace epoch
    ("t_end_s", "float64"),
    ("burst_s", "float64"),     # compute time before this call (since previous call's end)
    ("comm", "int32"),          # communicator id (comms table); 0 = world
    ("dest", "int32"),          # world rank sent to, NONE
    ("source", "int32"),        # world rank received from (from status when known), NONE, ANY_SOURCE
    ("send_tag", "int32"),
    ("recv_tag", "int32"),
    ("send_bytes", "int64"),    # bytes this rank sends (collectives: this rank's contribution)
    ("recv_bytes", "int64"),    # bytes this rank receives
    ("root", "int32"),          # world rank of a rooted collective, NONE
    ("request", "int64"),       # request created by this call (non-blocking, persistent), NONE
    ("req_offset", "int64"),    # first row in 'requests' for completion calls, NONE
    ("n_requests", "int32"),    # rows in 'requests' (0 if none)
    ("new_comm", "int32"),      # communicator created by this call, NONE
))

REQUESTS = TableSpec(name="requests", columns=(
    ("rank", "int32"),
    ("request", "int64"),
    ("completed", "int8"),
    ("source", "int32"),
    ("recv_bytes", "int64"),
))

VCOUNTS = TableSpec(name="vcounts", columns=(
    ("rank", "int32"),
    ("seq", "int64"),
    ("peer", "int32"),          # world rank
    ("send_bytes", "int64"),
    ("recv_bytes", "int64"),
))

COMMS = TableSpec(name="comms", columns=(
    ("comm", "int32"),
    ("local_rank", "int32"),
    ("world_rank", "int32"),
))

EVENT_TABLES = {t.name: t for t in (EVENTS, REQUESTS, VCOUNTS, COMMS)}


def op_name(op: int) -> str:
    try:
        return Op(int(op)).name
    except ValueError:
        return f"OP{int(op)}"


def world_comm_table(n_ranks: int):
    """The comms table of a trace that uses only MPI_COMM_WORLD."""
    import pandas as pd

    r = np.arange(n_ranks, dtype=np.int32)
    return pd.DataFrame({"comm": np.zeros(n_ranks, np.int32), "local_rank": r, "world_rank": r})

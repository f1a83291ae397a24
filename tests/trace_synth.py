"""Events of hand-built traces for the replay tests (tests/test_replay.py,
tests/test_calibrate_collectives.py): a plain link and a builder of events and requests."""

from __future__ import annotations

import pandas as pd

from pmac.profile import LinkModel, NetworkModel
from pmac.replay import ReplayOptions, replay
from pmac.trace import EVENTS, REQUESTS, Op

L, B, OS, OR = 1.0e-6, 1.0e9, 2.0e-7, 3.0e-7


def link(lat=L, bw=B, eager=65536, os_=OS, or_=OR, **kw):
    return LinkModel(latency_s=lat, bandwidth_bytes_per_s=bw, eager_threshold_bytes=eager, send_overhead_s=os_,
                     recv_overhead_s=or_, **kw)


def net1(**kw):
    return NetworkModel(intra_node=link(**kw), inter_node=link(**kw))


DEFAULTS = dict(t_start_s=0.0, t_end_s=0.0, burst_s=0.0, comm=0, dest=-1, source=-1, send_tag=0, recv_tag=0,
                send_bytes=0, recv_bytes=0, root=-1, request=-1, req_offset=-1, n_requests=0, new_comm=-1)


class Trace:
    """Builds events (seq numbered per rank) and the requests table."""

    def __init__(self, n_ranks):
        self.n = n_ranks
        self.rows = []
        self.reqs = []
        self.seq = [0] * n_ranks
        self.next_req = [1] * n_ranks

    def add(self, rank, op, **kw):
        d = dict(DEFAULTS)
        d.update(kw)
        d.update(rank=rank, seq=self.seq[rank], op=int(op))
        self.seq[rank] += 1
        self.rows.append(d)
        return d

    def isend(self, rank, dest, m, tag=0, **kw):
        h = self.next_req[rank]
        self.next_req[rank] += 1
        self.add(rank, kw.pop("op", Op.ISEND), dest=dest, send_bytes=m, send_tag=tag, request=h, **kw)
        return h

    def irecv(self, rank, src, m, tag=0, **kw):
        h = self.next_req[rank]
        self.next_req[rank] += 1
        self.add(rank, Op.IRECV, source=src, recv_bytes=m, recv_tag=tag, request=h, **kw)
        return h

    def waitall(self, rank, handles, op=Op.WAITALL, completed=None, **kw):
        off = len(self.reqs)
        for i, h in enumerate(handles):
            c = 1 if completed is None else completed[i]
            self.reqs.append(dict(rank=rank, request=h, completed=c, source=-1, recv_bytes=0))
        self.add(rank, op, req_offset=off, n_requests=len(handles), **kw)

    def coll(self, op, m=0, root=-1, burst=None, **kw):
        for r in range(self.n):
            b = 0.0 if burst is None else burst[r]
            sb, rb = m, m
            if op == Op.BCAST:
                sb, rb = (m, 0) if r == root else (0, m)
            self.add(r, op, send_bytes=sb, recv_bytes=rb, root=root, burst_s=b, **kw)

    def events(self):
        df = pd.DataFrame(self.rows, columns=list(EVENTS.names))
        return EVENTS.coerce(df)

    def requests(self):
        if not self.reqs:
            return REQUESTS.empty()
        return REQUESTS.coerce(pd.DataFrame(self.reqs, columns=list(REQUESTS.names)))

    def run(self, network=None, placement=None, **opts):
        return replay(self.events(), None, placement, network or net1(), ReplayOptions(**opts),
                      requests=self.requests(), n_ranks=self.n)

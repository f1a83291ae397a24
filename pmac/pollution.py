"""What an MPI call costs after its compute burst pushed the communication path out of the caches.

A call runs through the MPI library's and the kernel's code and data (queues, socket buffers,
page tables). Back to back, as the network probe times them, those stay in the caches; after a
burst that streamed megabytes they must come back from further out. Measured here (the network
probe's ``pollution`` test, :mod:`probes.network`): an 8-byte exchange after each rank swept W
bytes, against one after a pause as long; on this project's development VM (machines/emu-tcp.yaml,
emu-shm.yaml, ``python bench/emulated_profiles --pollution-only``) between two TCP namespace nodes
+1.3 us after 64 KiB, +2.1 us after 1 MiB, +7.0 us after 16 MiB; in shared memory +0.5, +1.3 and
+3.0 us.

The link keeps the curve (``LinkModel.pollution_bytes`` / ``pollution_excess_s``). The replay
charges a call (:func:`event_excess`) what the curve says for what its burst did to each cache
level:

- the probe's sweep of W bytes evicts every level smaller than W and leaves the others, so the
  cost of losing level L (and all smaller ones) is ``e(2 S_L)`` and level L alone adds
  ``a_L = e(2 S_L) - e(2 S_{L-1})`` (:func:`level_costs`; ``e`` interpolated in the curve, 0 at 0;
  ``S_L`` the size the probe met: a what-if copy of another size, ``pmac sweep``, evicts by its
  own size and pays what losing the level cost as probed);
- a burst that moved ``M_L`` bytes into level L of size ``S_L`` (its misses there, from its reuse
  histogram, :func:`burst_fill`) evicted a share ``min(1, M_L / S_L)`` of it (LRU: each miss
  displaces the oldest line);
- the call after the burst pays ``sum_L a_L min(1, M_L / S_L)`` on its link (the call's peer's
  node, or whether its communicator spans nodes); calls with no peer (waits, tests, local calls)
  pay nothing: the first call after a burst is usually the one that communicates.

Added to the call's start (its messages leave that much later) and counted as communication.
Needs the signature's memory (reuse histograms per burst), the profile's caches and a link with a
curve; without them nothing is added. Limits: the probe evicts with both ranks sweeping at once
and the sizes of the profile's caches are taken as they are listed (a shared level is not split
between the ranks that share it); the interpreter's own path in an mpi4py program is not in the
probe (it measures with compiled loops).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .convolve import MAX_CAPACITY_LINES, BurstArrays, edge_position, event_bursts
from .profile import CacheLevel, LinkModel
from .trace import COLLECTIVE_OPS, RECV_OPS, SEND_OPS, Op

#: calls that talk to one peer (the persistent inits do not; their Starts are replayed as these)
_P2P = np.array(sorted(int(o) for o in (SEND_OPS | RECV_OPS | {Op.SENDRECV, Op.SENDRECV_REPLACE})
                       - {Op.SEND_INIT, Op.RECV_INIT}))
_COLL = np.array(sorted(int(o) for o in COLLECTIVE_OPS))
#: link codes of :func:`event_links`
NO_LINK, INTRA, INTER = 0, 1, 2


def level_costs(link: LinkModel | None, caches: Sequence[CacheLevel]) -> np.ndarray:
    """``a_L`` per cache level (seconds): what a call pays once level L has lost the path, the
    smaller levels' share excluded (module doc); zeros without a curve."""
    out = np.zeros(len(caches))
    if link is None or not link.pollution_bytes or not caches:
        return out
    w = np.concatenate(([0.0], link.pollution_bytes))
    e = np.concatenate(([0.0], link.pollution_excess_s))
    # the curve was measured against the caches as probed (a what-if copy's sizes differ)
    at = np.interp(2.0 * np.array([c.probed_size_bytes or c.size_bytes for c in caches], np.float64), w, e)
    return np.diff(np.concatenate(([0.0], at)))


def burst_fill(ba: BurstArrays, caches: Sequence[CacheLevel]) -> np.ndarray:
    """(levels x bursts): the share of each cache level a burst evicted, min(1, bytes it moved into
    the level / the level's size); the bytes are the burst's accesses that miss a fully
    associative LRU cache of the level's size (reuse histogram at the line size nearest the
    level's) times that line size.

    Accesses of a kind (loads, stores) whose own sampled histogram was empty (``ba.unsampled``;
    the convolver borrows the rank's) evicted nothing here: the memory tracer samples by address (a
    hash of the line), so an empty sample means the burst touched few distinct lines of that kind
    (at 1/16, 46 lines or fewer leave no sample one time in twenty), whatever its access count;
    the borrowed histogram would charge a spin loop calling MPI_Wtime 39,000 times as if it
    streamed (bench/pollution_check)."""
    out = np.zeros((len(caches), ba.n_bursts))
    lines = np.array(ba.line_bytes)
    acc = (ba.loads, ba.stores)
    for i, c in enumerate(caches):
        li = int(np.argmin(np.abs(lines - c.line_bytes)))
        k, f = edge_position(min(c.size_bytes / lines[li], MAX_CAPACITY_LINES))
        miss = np.zeros(ba.n_bursts)
        for a in (0, 1):
            cum = ba.cum[li, a]
            hit = cum[:, k] + f * (cum[:, k + 1] - cum[:, k])
            m = acc[a] * (1.0 - hit)
            if ba.unsampled is not None:
                m = np.where(ba.unsampled[li, a], 0.0, m)
            miss += m
        out[i] = np.minimum(1.0, miss * lines[li] / c.size_bytes)
    return out


def event_links(events: pd.DataFrame, node_of_rank: np.ndarray, comms: pd.DataFrame | None) -> np.ndarray:
    """Per event: :data:`INTER` when it talks to another node (point-to-point: its peer's node;
    collectives: its communicator spans nodes), :data:`INTRA` when it talks within its node,
    :data:`NO_LINK` when it has no peer (waits, tests, local calls, MPI_PROC_NULL)."""
    op = events["op"].to_numpy(np.int64)
    rank = events["rank"].to_numpy(np.int64)
    dest = events["dest"].to_numpy(np.int64)
    source = events["source"].to_numpy(np.int64)
    node = np.asarray(node_of_rank, np.int64)
    out = np.full(len(op), NO_LINK, np.int8)
    p2p = np.isin(op, _P2P)
    peer = np.where(dest >= 0, dest, source)
    ok = p2p & (peer >= 0) & (peer < len(node))
    out[ok] = np.where(node[peer[ok]] != node[rank[ok]], INTER, INTRA)
    coll = np.isin(op, _COLL)
    if coll.any():
        comm = events["comm"].to_numpy(np.int64)
        spans = {0: len(np.unique(node)) > 1}
        if comms is not None and len(comms):
            for c, g in comms.groupby("comm"):
                members = g["world_rank"].to_numpy(np.int64)
                members = members[(members >= 0) & (members < len(node))]
                spans[int(c)] = len(np.unique(node[members])) > 1
        ids, inv = np.unique(comm[coll], return_inverse=True)
        out[coll] = np.array([INTER if spans.get(int(c), spans[0]) else INTRA for c in ids], np.int8)[inv]
    return out


def event_excess(events: pd.DataFrame, ba: BurstArrays, caches: Sequence[CacheLevel],
                 intra: LinkModel | None, inter: LinkModel | None, node_of_rank: np.ndarray,
                 comms: pd.DataFrame | None = None) -> np.ndarray:
    """Seconds each event's call pays for its burst's pollution (module doc); 0 where the event
    has no memory burst (keyed by rank and seq) or no link."""
    a = np.stack([level_costs(intra, caches), level_costs(inter, caches)])  # (2, levels)
    per_burst = a @ burst_fill(ba, caches)                                   # (2, bursts)
    # ranks without a memory trace take a traced rank's bursts, as pmac.predict's convolved bursts do
    idx, _ = event_bursts(ba, events)
    link = event_links(events, node_of_rank, comms)
    out = np.zeros(len(events))
    ok = (idx >= 0) & (link != NO_LINK)
    out[ok] = per_burst[link[ok] - 1, idx[ok]]
    return out

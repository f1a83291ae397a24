"""What a collective call costs beyond its algorithm's messages, from the collectives probe.

The replay prices a collective by the algorithm the MPI library would pick (pmac.collectives),
each message on the fitted links. The network probe also times the calls themselves
(``NetworkModel.collectives``, two ranks, per placement and size), and on some machines the
call costs more than its messages: on the emulated TCP nodes (MPICH 5.0.2, ``machines/emu-tcp``)
a 2-rank allreduce of 8 B took 22.6 us where the one exchange of recursive doubling is 13.1 us
on the same links, and the examples that call it once an iteration (cg_mpi4py, stream_mpi,
stencil2d) were predicted 10-40 % short there. In shared memory the excess is negative where
the library's call does not go through its point-to-point path: at MPI_THREAD_SINGLE MPICH 5
runs intra-node collectives on shared-memory flags, and a 2-rank 8 B allreduce took 0.25 us on
devbox against 1.3 us for recursive doubling's exchange (at MPI_THREAD_MULTIPLE, mpi4py's
default, 1.98 us: a profile's network per thread level, ``MachineProfile.network_variants``).
The excess is a property of the machine and its MPI library, measured by the probe, like a
link's ``exchange_excess_s`` (pmac.calibrate_exchange):

    excess(op, placement, m) = measured(op, m) - replayed(op, m)

A call with a negative excess is not made of those messages: the replay prices it from the
probe's table wherever the table covers it (pmac.replay), and elsewhere adds the negative excess
without letting a member leave before what it needs was posted
(:func:`pmac.collectives.add_excess`). Profiles calibrated before 24 Nov 2026 hold
``max(0, ...)``: ``python -m pmac.calibrate_collectives`` recalibrates them.

``replayed`` is the steady state of the loop the probe timed (``(T(2K) - T(K)) / K`` for K
calls back to back, so a shaper's bucket drains as it did in the probe), replayed with the
caller's message options and no excess. Between the probe's sizes the excess is interpolated
linearly in the size the algorithm is priced with (:func:`pmac.replay.collective_bytes`), and
held at the end values outside them.

Two ranks only: that is where the probe's rows say which placement they had, and where each of
these algorithms is one round. The replay adds the excess once to every member's exit of each
instance priced by algorithm, whatever the communicator's size (if the excess is per round, a
lower bound at more ranks; the probe cannot tell on a 2-node machine).

Computed when the network is fitted (:func:`pmac.calibrate_exchange.calibrate_network`, after the
links' exchange excess, which the replayed price includes) and stored with each 2-rank row
(``CollectiveCost.excess_s``): a property of the machine as probed, so a what-if that scales the
links keeps it (the library's cost does not follow the link rate). Profiles fitted before it
(schema 4) get it with ``python -m pmac.calibrate_collectives machines/NAME.yaml ...``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from .errors import PmacError
from .profile import NetworkModel, load_profile, save_profile
from .replay import COLLECTIVE_CODES, ReplayOptions, priced_bytes, replay
from .trace import EVENTS, Op

#: calls per replayed loop (and twice as many)
LOOP = 100
#: the two ranks' nodes per placement (pmac.calibrate_exchange uses the same)
PLACEMENT_NODES = {"intra_node": (0, 0), "inter_node": (0, 1)}


def two_rank_events(n: int, op, **cols) -> pd.DataFrame:
    """``n`` calls of each of two ranks (rank 0's, then rank 1's): ``op`` and ``cols`` per row
    (arrays of 2n or scalars) over blocking-call defaults (no peers, tags 0, no requests, no
    bursts); pmac.calibrate_exchange's loop too."""
    k = np.arange(2 * n)
    rank = (k // n).astype(np.int32)
    d = {"rank": rank, "seq": (k % n).astype(np.int64), "op": op, "t_start_s": 0.0, "t_end_s": 0.0,
         "burst_s": 0.0, "comm": 0, "dest": -1, "source": -1, "send_tag": 0, "recv_tag": 0, "send_bytes": 0,
         "recv_bytes": 0, "root": -1, "request": -1, "req_offset": -1, "n_requests": 0, "new_comm": -1}
    d.update(cols)
    return EVENTS.coerce(pd.DataFrame(d)[list(EVENTS.names)])


def loop_events(op: int, m: int, n: int, bcast_root: str = "fixed") -> pd.DataFrame:
    """Two ranks calling ``op`` of ``m`` bytes ``n`` times (bytes as the probe records them: the
    send buffer); a bcast's root 0 every call (``bcast_root`` 'fixed') or 0, 1, 0, ... ('rotating')
    as the probe placed it (pmac.profile.NetworkModel.bcast_root)."""
    if op != int(Op.BCAST):
        root = -1
    elif bcast_root == "rotating":
        root = np.arange(2 * n) % n % 2
    else:
        root = 0
    return two_rank_events(n, op, send_bytes=m, recv_bytes=m, root=root)


def replayed_s(network: NetworkModel, placement: str, blocks: list[tuple[int, int]], options, *,
               with_excess: bool = False) -> np.ndarray:
    """Steady-state seconds per call of each ``(op, bytes)`` block on two ranks of ``placement``,
    priced by algorithm (the network's collective rows ignored), or as the replay prices them
    with ``with_excess`` (plus the excess; a call cheaper than its messages from the table). Each
    block is replayed alone, both ranks starting it together, as each of the probe's repetitions
    starts after a barrier: a block left skewed by the one before (a bcast's root leaves first)
    can settle into another steady state."""
    net = network if with_excess else dataclasses.replace(network, collectives=())
    opts = ReplayOptions(eager_buffered=options.eager_buffered, rendezvous_handshake=options.rendezvous_handshake)
    nodes = np.array(PLACEMENT_NODES[placement])
    out = np.empty(len(blocks))
    for k, (op, m) in enumerate(blocks):
        ends = [replay(loop_events(op, m, n, network.bcast_root), None, nodes, net, opts, n_ranks=2).makespan_s
                for n in (LOOP, 2 * LOOP)]
        out[k] = (ends[1] - ends[0]) / LOOP
    return out


def excess_table(network: NetworkModel, options: ReplayOptions | None = None) -> pd.DataFrame:
    """One row per 2-rank probe row the replay can price: name (the probe's op), op (its Op code),
    placement, msg_bytes (the probe's), priced_bytes (what the algorithm is priced with),
    measured_s, replayed_s, excess_s. Empty without such rows."""
    cols = ["name", "op", "placement", "msg_bytes", "priced_bytes", "measured_s", "replayed_s", "excess_s"]
    options = options or ReplayOptions()
    rows = [c for c in network.collectives if c.n_ranks == 2]
    parts = []
    for placement in PLACEMENT_NODES:
        mine = [c for c in rows if c.placement == placement]
        if not mine or getattr(network, placement) is None:
            continue
        blocks = [(COLLECTIVE_CODES[c.op], int(c.msg_bytes)) for c in mine]
        rep = replayed_s(network, placement, blocks, options)
        meas = np.array([c.time_s for c in mine])
        parts.append(pd.DataFrame({
            "name": [c.op for c in mine], "op": [b[0] for b in blocks], "placement": placement,
            "msg_bytes": [b[1] for b in blocks], "priced_bytes": [priced_bytes(c) for c in mine],
            "measured_s": meas, "replayed_s": rep, "excess_s": meas - rep}))
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True).sort_values(["placement", "op", "priced_bytes"],
                                                           ignore_index=True)


def calibrate_collectives(network: NetworkModel, options: ReplayOptions | None = None) -> NetworkModel:
    """``network`` with ``excess_s`` set on every 2-rank collective row (None on the others)."""
    return _with_excess(network, excess_table(network, options))


def _with_excess(network: NetworkModel, table: pd.DataFrame) -> NetworkModel:
    got = {(r.name, r.placement, int(r.msg_bytes)): float(r.excess_s) for r in table.itertuples()}
    rows = tuple(dataclasses.replace(c, excess_s=got.get((c.op, c.placement, int(c.msg_bytes))) if c.n_ranks == 2
                                     else None)
                 for c in network.collectives)
    return dataclasses.replace(network, collectives=rows)


def main(argv: list[str] | None = None) -> int:
    """``python -m pmac.calibrate_collectives FILE.yaml ...``: (re)calibrate the collective excess of
    machine profiles in place (each written atomically), and print each table."""
    import argparse
    import sys
    import time

    ap = argparse.ArgumentParser(prog="python -m pmac.calibrate_collectives", description=main.__doc__)
    ap.add_argument("profiles", nargs="+", metavar="FILE.yaml")
    args = ap.parse_args(argv)
    for path in args.profiles:
        try:
            prof = load_profile(path)
            if prof.network is None or not prof.network.collectives:
                print(f"{path}: no collectives table, nothing to calibrate")
                continue
            t = excess_table(prof.network)
            net = _with_excess(prof.network, t)
            prov = dict(prof.provenance or {})
            prov["collective_excess"] = ("pmac.calibrate_collectives " +
                                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            save_profile(dataclasses.replace(prof, network=net, provenance=prov), path)
        except PmacError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{path}: excess over the algorithm's price of the 2-rank calls (us)")
        print(t.assign(measured_us=t.measured_s * 1e6, replayed_us=t.replayed_s * 1e6, excess_us=t.excess_s * 1e6)
              [["placement", "name", "msg_bytes", "measured_us", "replayed_us", "excess_us"]]
              .to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

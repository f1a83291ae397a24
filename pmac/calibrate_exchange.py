"""The exchange excess of a link (``LinkModel.exchange_excess_s``) from the network probe's
``exchange`` rows, by replaying the probe's own loop.

The probe times two ranks that send each other ``m`` bytes at once, over and over (MPI_Sendrecv;
the numba loop posts Irecv + Isend + Waitall, which is what MPICH's Sendrecv does). The rest of
the fitted link (overheads, segments, a shaper's bucket) already prices each of the two messages;
what an exchange costs beyond that is the excess. It is found by simulation rather than by a
closed form, so that whatever the link model is (a shaper refilling during the other side's
turn, rendezvous handshakes) the excess is exactly what the model misses on the probe:

    excess = max(0, median over sizes of (measured exchange - replayed exchange with excess 0))

The replayed exchange is the steady state of the same loop, ``(T(2K) - T(K)) / K`` for K
exchanges. Sizes: the probe's (0 .. 512 B, where the exchange is a latency effect; larger
messages mostly measure the bandwidth the segments and the shaper already price).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from .calibrate_collectives import PLACEMENT_NODES, calibrate_collectives, two_rank_events
from .fit_network import QUANTILE, pycall_s
from .profile import LinkModel, NetworkModel
from .replay import ReplayOptions, replay
from .trace import Op

#: exchanges in the replayed loop (and twice as many): enough to drain a shaper's bucket
LOOP = 400


def exchange_loop(n: int, m: int) -> pd.DataFrame:
    """Events of two ranks doing ``n`` MPI_Sendrecv of ``m`` bytes with each other."""
    peer = np.repeat(np.array([1, 0], np.int32), n)
    return two_rank_events(n, int(Op.SENDRECV), dest=peer, source=peer, send_bytes=m, recv_bytes=m)


def replayed_exchange_s(link: LinkModel, placement: str, m: int, n: int = LOOP) -> float:
    """Steady-state seconds per exchange of ``m`` bytes that the replay gives ``link``."""
    link = dataclasses.replace(link, exchange_excess_s=0.0)
    net = NetworkModel(intra_node=link, inter_node=link) if placement == "intra_node" else \
        NetworkModel(intra_node=None, inter_node=link)
    place = np.array(PLACEMENT_NODES[placement])
    t = [replay(exchange_loop(k, m), None, place, net, ReplayOptions(), n_ranks=2).makespan_s for k in (n, 2 * n)]
    return (t[1] - t[0]) / n


def measured_exchange(pp: pd.DataFrame, placement: str, quantile: float = QUANTILE) -> pd.Series:
    """Seconds per exchange by size (the fit's ``quantile`` over repetitions), the interpreter's cost
    of one call (half a ``pycall``, which times a Send and a Recv) taken off."""
    rows = pp[(pp.placement == placement) & (pp.test == "exchange")]
    if rows.empty:
        return pd.Series(dtype=float)
    corr = pycall_s(pp, placement) / 2.0
    return (rows.groupby("msg_bytes")["time_s"].quantile(quantile) - corr).sort_index()


def exchange_excess_s(link: LinkModel, pp: pd.DataFrame, placement: str,
                      quantile: float = QUANTILE) -> tuple[float, pd.DataFrame]:
    """(excess, table of msg_bytes / measured_s / replayed_s) of one placement; (0, empty) when
    the record has no exchange rows (older probes)."""
    meas = measured_exchange(pp, placement, quantile)
    if meas.empty:
        return 0.0, pd.DataFrame(columns=["msg_bytes", "measured_s", "replayed_s"])
    rep = [replayed_exchange_s(link, placement, int(m)) for m in meas.index]
    table = pd.DataFrame({"msg_bytes": meas.index.to_numpy(np.int64), "measured_s": meas.to_numpy(),
                          "replayed_s": rep})
    excess = float(np.median(table.measured_s - table.replayed_s))
    return max(excess, 0.0), table


def calibrate_network(network: NetworkModel, pp: pd.DataFrame | None, quantile: float = QUANTILE) -> NetworkModel:
    """``network`` with each measured link's ``exchange_excess_s`` set from the probe rows (each size
    at ``quantile`` of its repetitions, as the link was fitted), then
    its 2-rank collective rows' ``excess_s`` (pmac.calibrate_collectives: priced on those links)."""
    if pp is not None and not pp.empty and "exchange" in set(pp.test):
        out = {}
        for placement in PLACEMENT_NODES:
            link = getattr(network, placement)
            if link is None:
                continue
            x, _ = exchange_excess_s(link, pp, placement, quantile)
            out[placement] = dataclasses.replace(link, exchange_excess_s=x)
        network = dataclasses.replace(network, **out)
    return calibrate_collectives(network)

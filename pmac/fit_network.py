"""Fit network models from the raw ping-pong, streaming, overhead and collective repetitions.

Each point is a quantile of its repetitions: the lower quartile (:data:`QUANTILE`) as ``pmac
probe`` fits a profile, or the quantile of the profile's statistic when pmac.pool refits one
(``quantile=``: 0.5 for ``median``, as the node's points). Input: the ``pingpong`` and ``collective`` tables of :data:`pmac.profile.RAW_TABLES` (one row
per repetition, as ``probes/network.py`` writes them). Output: :class:`LinkModel` per
placement and :class:`CollectiveCost` per (placement, op, bytes, ranks).

``test`` values of the ``pingpong`` table:

- ``pingpong``: one-way time (half a round trip) of a message of ``msg_bytes``;
- ``stream``: time per message when a window of messages is in flight (streaming bandwidth);
- ``send_overhead`` / ``recv_overhead``: time the sender spends in the send call, and the time
  the receiver spends in the receive call once the message has already arrived (LogP o_s, o_r);
- ``pycall``: interpreter cost of one send plus one receive call (only when the probe ran its
  timed loops in Python); subtracted from ``pingpong`` before fitting ("corrected");
- ``burst``: a message and a 1-byte acknowledgement after a long silence (the pair's time).

Shaped links (inter-node only): a token-bucket egress limit (rate r, bucket b; a tc tbf, a cloud
NIC's burst allowance) shows as a ping-pong faster per message than the stream of the same size
(:data:`SHAPER_FINGERPRINT`): a link without burst credit cannot beat its own streaming rate,
while a ping-pong refills each side's bucket during the other side's turn (one-way m / 2r). Then
r is the stream rate of the largest window; b follows from the largest ping-pong sizes, which
start each turn with a full bucket: one-way(m) = one-way(0) + (m - b) / r; the line under the
shaper has the ping-pong's 0-byte latency and the slope of the ``burst`` curve within the bucket
(a least-squares slope, so the first message's wake-up cost after the silence, 10-60 us here,
cancels; it is noisy, and bounded below by twice the rate). Headers take tokens too: where even
small ping-pongs are drained (a slow rate), an empty message's one-way time is H / 2r, which gives
the header tokens H per message (78-79 B of TCP/IP and MPI headers at 20 Mbit/s, every size from
64 B to 1 KiB); where they are not, H is not seen and does not matter (0).

The link fit is a piecewise ``latency + bytes / bandwidth`` model. Break points are chosen
among the measured sizes by exhaustive search over 1..``max_segments`` segments, each fitted
by least squares on relative error (times span six decades, so absolute error would only see
the largest messages); the number of segments is chosen by BIC. The eager/rendezvous threshold
is the first break where the time steps (a rendezvous handshake adds a round trip, but saves
the eager copy, so the step may go either way); a change of slope alone is not a threshold.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .profile import CollectiveCost, LinkModel, LinkSegment, NetworkModel

PLACEMENTS = ("intra_node", "inter_node")

#: Which repetition a fit takes per point: the lower quartile. Interference from other work on
#: the machine only ever adds time, so a low quantile tracks the machine itself; on a quiet
#: machine it is within the spread of the median. Every repetition stays in the raw tables.
QUANTILE = 0.25

#: a ping-pong one-way time below this fraction of the stream's time per message of the same
#: size reveals a shaper (through tc tbf: 0.50-0.69; unshaped TCP and shared memory: >= 1.1)
SHAPER_FINGERPRINT = 0.75


@dataclass(frozen=True, kw_only=True)
class SegmentFit:
    """Result of the piecewise fit before overheads are split off."""

    breaks_bytes: tuple[float, ...]  # segment lower bounds after the first
    latency_s: tuple[float, ...]
    bandwidth_bytes_per_s: tuple[float, ...]
    r2: float
    eager_threshold_bytes: int | None


def _fit_line(m: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """t = a + m*b, minimising sum(((t - a - m b)/t)^2); a >= 0, b > 0. Returns (a, b, rss)."""
    w = 1.0 / t
    A = np.column_stack([w, m * w])
    y = np.ones_like(t)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    if a < 0:  # no negative latency: fit slope alone
        a = 0.0
        b = float(np.sum(m * w * w * t) / np.sum((m * w) ** 2)) if np.any(m > 0) else 0.0
    if b <= 0:  # flat segment: time independent of size
        b = 0.0
        a = float(np.sum(w) / np.sum(w * w))
    rss = float(np.sum(((t - a - m * b) / t) ** 2))
    return float(a), float(b), rss


def fit_segments(msg_bytes, time_s, *, max_segments: int = 3, min_points: int = 3,
                 jump_frac: float = 0.10, rel_floor: float = 1e-3) -> SegmentFit:
    """Piecewise ``latency + bytes/bandwidth`` fit of median times against message size.

    ``jump_frac``: a break counts as the eager/rendezvous threshold when the time predicted
    just above it differs from the time just below it by more than this fraction (a protocol
    switch is a step, up or down; a mere change of slope, as at a cache size, is not).
    """
    m = np.asarray(msg_bytes, dtype=np.float64)
    t = np.asarray(time_s, dtype=np.float64)
    order = np.argsort(m)
    m, t = m[order], t[order]
    if len(m) < 2:
        raise ValueError("a link fit needs at least two message sizes")
    if np.any(t <= 0) or not np.all(np.isfinite(t)):
        raise ValueError("times must be positive and finite")
    n = len(m)
    best = None
    for k in range(1, max_segments + 1):
        if k * min_points > n:
            break
        for cuts in itertools.combinations(range(min_points, n - min_points + 1), k - 1):
            bounds = (0, *cuts, n)
            if any(b - a < min_points for a, b in zip(bounds, bounds[1:])):
                continue
            segs = [_fit_line(m[a:b], t[a:b]) for a, b in zip(bounds, bounds[1:])]
            rss = sum(s[2] for s in segs)
            n_params = 3 * k - 1
            # floor: 0.1 % relative error per point, below which timings cannot tell models apart
            bic = n * math.log(max(rss / n, rel_floor**2)) + n_params * math.log(n)
            if best is None or bic < best[0] - 1e-9:
                best = (bic, bounds, segs)
    assert best is not None
    _, bounds, segs = best
    lat = tuple(s[0] for s in segs)
    bw = tuple((1.0 / s[1]) if s[1] > 0 else float("inf") for s in segs)
    breaks = tuple(float(m[b]) for b in bounds[1:-1])
    pred = np.empty_like(t)
    for (a, b), (la, sl, _) in zip(zip(bounds, bounds[1:]), segs):
        pred[a:b] = la + m[a:b] * sl
    # R^2 on relative error: 1 - sum(((t-p)/t)^2) / sum(((t-mean_w)/t)^2), with the weighted mean
    w = 1.0 / t**2
    mean_w = float(np.sum(w * t) / np.sum(w))
    ss_tot = float(np.sum(w * (t - mean_w) ** 2))
    ss_res = float(np.sum(w * (t - pred) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    eager = None
    for i, br in enumerate(breaks):
        below = segs[i][0] + br * segs[i][1]
        above = segs[i + 1][0] + br * segs[i + 1][1]
        if abs(above - below) > below * jump_frac:
            eager = int(br)
            break
    return SegmentFit(breaks_bytes=breaks, latency_s=lat, bandwidth_bytes_per_s=bw, r2=r2,
                      eager_threshold_bytes=eager)


def fit_link(msg_bytes, one_way_s, *, send_overhead_s: float = 0.0, recv_overhead_s: float = 0.0,
             streaming_bandwidth_bytes_per_s: float | None = None, max_segments: int = 3,
             rel_noise: float = 1e-3) -> LinkModel:
    """A :class:`LinkModel` from median one-way times (overheads included, as ping-pong measures).

    Segment latencies are the fitted intercepts less ``send_overhead_s + recv_overhead_s``
    (clamped at 0), so ``transfer_time_s`` excludes the overheads the replay adds itself.
    When no step is found, every measured size is taken as eager (the threshold is the
    largest size measured). ``rel_noise`` is the relative scatter of one median: segments that
    improve the fit by less than that are not added.
    """
    m = np.asarray(msg_bytes, dtype=np.float64)
    t = np.asarray(one_way_s, dtype=np.float64)
    order = np.argsort(m)
    m, t = m[order], t[order]
    fit = fit_segments(m, t, max_segments=max_segments, rel_floor=max(rel_noise, 1e-3))
    overhead = send_overhead_s + recv_overhead_s
    lows = (0.0, *fit.breaks_bytes)
    highs = (*fit.breaks_bytes, float("inf"))
    big = 1e30  # stand-in for an infinite bandwidth of a flat segment
    segments = tuple(
        LinkSegment(min_bytes=lo, max_bytes=hi if math.isfinite(hi) else 2.0**62,
                    latency_s=max(lat - overhead, 0.0), bandwidth_bytes_per_s=min(bw, big))
        for lo, hi, lat, bw in zip(lows, highs, fit.latency_s, fit.bandwidth_bytes_per_s))
    eager = fit.eager_threshold_bytes if fit.eager_threshold_bytes is not None else int(m[-1])
    return LinkModel(
        latency_s=segments[0].latency_s,
        bandwidth_bytes_per_s=segments[-1].bandwidth_bytes_per_s,
        eager_threshold_bytes=eager,
        send_overhead_s=float(send_overhead_s), recv_overhead_s=float(recv_overhead_s),
        segments=segments, fit_r2=float(fit.r2),
        streaming_bandwidth_bytes_per_s=streaming_bandwidth_bytes_per_s,
        msg_bytes=tuple(float(x) for x in m), one_way_s=tuple(float(x) for x in t))


# ---------------------------------------------------------------- from raw tables

def _quantile_by_size(df: pd.DataFrame, quantile: float = QUANTILE) -> tuple[np.ndarray, np.ndarray]:
    g = df.groupby("msg_bytes")["time_s"].quantile(quantile)
    return g.index.to_numpy(dtype=np.float64), g.to_numpy(dtype=np.float64)


def pycall_s(pp: pd.DataFrame, placement: str) -> float:
    """The interpreter's cost of one Send + Recv pair (the ``pycall`` rows' median; 0 when the
    probe timed in compiled code and has none)."""
    py = pp[(pp.placement == placement) & (pp.test == "pycall")]
    return float(py.time_s.median()) if len(py) else 0.0


def corrected_pingpong(pp: pd.DataFrame, placement: str) -> pd.DataFrame:
    """The ``pingpong`` rows of one placement with the interpreter's per-call cost removed.

    Returns columns msg_bytes, rep, time_s (raw) and time_corrected_s.
    """
    rows = pp[(pp.placement == placement) & (pp.test == "pingpong")].copy()
    rows["time_corrected_s"] = rows.time_s - pycall_s(pp, placement)
    return rows[["msg_bytes", "rep", "time_s", "time_corrected_s"]].reset_index(drop=True)


#: the network probe's pollution tests (raw ping-pong rows; msg_bytes = bytes swept before each call)
POLLUTION_TESTS = ("pollution", "pollution_pause")


def fit_pollution(rows: pd.DataFrame) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(bytes swept, excess seconds) of one placement's probe rows: per size the median over
    repetitions of (swept - paused) of the same repetition, at least 0, made non-decreasing (more
    bytes swept cannot leave more of the path in the caches); ((), ()) without such rows."""
    a = rows[rows.test == POLLUTION_TESTS[0]].set_index(["msg_bytes", "rep"])["time_s"]
    b = rows[rows.test == POLLUTION_TESTS[1]].set_index(["msg_bytes", "rep"])["time_s"]
    d = (a - b).dropna()
    d = d[d.index.get_level_values(0) > 0]
    if d.empty:
        return (), ()
    med = d.groupby(level=0).median().sort_index()
    ex = np.maximum.accumulate(np.maximum(med.to_numpy(np.float64), 0.0))
    return tuple(float(x) for x in med.index), tuple(float(x) for x in ex)


def fit_placement(pp: pd.DataFrame, placement: str, quantile: float = QUANTILE) -> LinkModel | None:
    """LinkModel of one placement from the ``pingpong`` raw table, or None if not measured; each
    size's time (and each overhead) at ``quantile`` of its repetitions."""
    rows = corrected_pingpong(pp, placement)
    if rows.empty:
        return None
    sizes = rows.groupby("msg_bytes")["time_corrected_s"].quantile(quantile)
    m = sizes.index.to_numpy(dtype=np.float64)
    t = sizes.to_numpy(dtype=np.float64)
    floor = max(float(np.min(t[t > 0])) * 0.05 if np.any(t > 0) else 1e-9, 1e-9)
    t = np.maximum(t, floor)  # a correction larger than a sample must not give t <= 0
    sel = pp[pp.placement == placement]
    py_s = pycall_s(pp, placement)

    def small_median(test: str) -> float:
        d = sel[sel.test == test]
        if d.empty:
            return 0.0
        m0 = d.msg_bytes.min()
        # the overhead probe's calls are timed in Python too when pycall exists: half per call
        return max(float(d[d.msg_bytes == m0].time_s.quantile(quantile)) - py_s / 2.0, 0.0)

    o_s = small_median("send_overhead")
    o_r = small_median("recv_overhead")
    # LogP: one-way = o_s + L + o_r, so the overheads cannot exceed the smallest one-way time;
    # a receive delayed by a busy shared machine can make o_r look larger: scale both down to it,
    # keeping their ratio (capping o_r alone at t - o_s gave o_r = 0 whenever a noisy o_s reached
    # the one-way time: on 26 Nov's Xeon VM, one-way 1.15 us, o_s 0.56-0.96 us, o_r 1.05 us)
    t_small = float(t[m > 0][0]) if np.any(m > 0) else float(t[0])
    if o_s + o_r > t_small:
        o_s, o_r = (o_s * t_small / (o_s + o_r), o_r * t_small / (o_s + o_r))
    stream_bw = None
    st = sel[sel.test == "stream"]
    if not st.empty:
        sm, stt = _quantile_by_size(st, quantile)
        stream_bw = float(np.max(sm / stt))
    model = fit_link(m, t, send_overhead_s=o_s, recv_overhead_s=o_r, streaming_bandwidth_bytes_per_s=stream_bw,
                     rel_noise=relative_noise(rows))
    pb, pe = fit_pollution(sel)
    model = dataclasses.replace(model, pollution_bytes=pb, pollution_excess_s=pe)
    shaper = fit_shaper(m, t, st, sel[sel.test == "burst"], quantile) if placement == "inter_node" else None
    if shaper is None:
        return model
    rate, burst, line_bw, header = shaper
    lat = max(float(t[0]) - o_s - o_r, 0.0)
    line = LinkSegment(min_bytes=0.0, max_bytes=2.0**62, latency_s=lat, bandwidth_bytes_per_s=line_bw)
    return dataclasses.replace(model, latency_s=lat, bandwidth_bytes_per_s=line_bw, segments=(line,),
                               shaper_rate_bytes_per_s=rate, shaper_burst_bytes=burst,
                               shaper_header_bytes=header)


def fit_shaper(m: np.ndarray, t: np.ndarray, stream: pd.DataFrame,
               burst: pd.DataFrame, quantile: float = QUANTILE) -> tuple[float, float, float, float] | None:
    """(rate, bucket bytes, line bandwidth, header bytes per message) of a token-bucket shaper,
    or None when the link shows none (see the module doc). ``m``, ``t``: the ping-pong curve
    (sorted by size)."""
    if stream.empty or m.size < 4:
        return None
    sm, stt = _quantile_by_size(stream, quantile)
    common = np.isin(m, sm)
    if not common.any():
        return None
    ratio = t[common] / stt[np.searchsorted(sm, m[common])]
    if float(ratio.min()) >= SHAPER_FINGERPRINT:
        return None
    rate = float(sm[-1] / stt[-1])
    top = slice(-3, None)
    b = float(np.median(np.maximum(m[top] - rate * (t[top] - t[0]), 0.0)))
    if m[-1] < 4 * b:  # the largest message does not see past the bucket: cannot tell
        return None
    # header tokens: where the small ping-pong is drained, one-way = (m + H) / 2r, so an empty
    # message takes H / 2r; drained means a small size costs its payload at 2r on top of it
    header = 0.0
    small = np.flatnonzero((m > 0) & (m <= min(b / 4, 256.0)))
    if m[0] == 0 and small.size:
        k = small[-1]
        if t[k] - t[0] >= 0.8 * m[k] / (2 * rate):
            header = float(2 * rate * t[0])
    b += header  # the largest messages took their header tokens too
    line_bw = 1e30  # no size inside the bucket to tell the line's bandwidth: a flat line
    if not burst.empty:
        bm, bt = _quantile_by_size(burst, quantile)
        inside = bm <= 0.8 * b  # the wake-up round trips before each took a few headers' tokens
        if inside.sum() >= 3 and bm[inside].max() >= 1024:
            slope = float(np.polyfit(bm[inside], bt[inside], 1)[0])
            if slope > 0:
                line_bw = 1.0 / slope
    # the fingerprint needs a line well above the rate: never less than twice it
    return rate, b, max(line_bw, 2.0 * rate), header


def relative_noise(rows: pd.DataFrame) -> float:
    """Typical relative standard error of a per-size median: the median over sizes of
    1.4826 * MAD / median / sqrt(repetitions) (robust against the outliers a shared machine makes)."""
    g = rows.groupby("msg_bytes")["time_corrected_s"]
    med = g.median()
    mad = g.apply(lambda x: float(np.median(np.abs(x - np.median(x)))))
    n = g.size().clip(lower=1)
    ok = med > 0
    if not ok.any():
        return 1e-3
    return float(np.median((1.4826 * mad[ok] / med[ok]) / np.sqrt(n[ok])))


#: the network probe's ``interpreter`` test: its ops in the ``collective`` table (probes/network.py
#: INTERPRETER_OPS); ``py_`` from an mpi4py loop (``n_ranks`` 1: mpi4py's own part), ``c_`` compiled
INTERPRETER_CALLS = ("allreduce", "sendrecv")
INTERPRETER_OPS = tuple(f"{k}_{c}" for c in INTERPRETER_CALLS for k in ("py", "c"))


def fit_interpreter(coll: pd.DataFrame | None) -> dict[str, float]:
    """Seconds a call from a Python interpreter costs beyond the same call compiled and beyond
    mpi4py's own part (probes/network.py ``_interpreter_calls``), per call of
    :data:`INTERPRETER_CALLS` the probe timed: per repetition ``py(2 ranks) - py(own part) -
    compiled`` (the three timed one after another), the median over repetitions, at least 0.
    The median and not the fit's quantile: a difference of three loops, each as often slowed
    as the others by the host. Empty without the test's rows (older probes, the Python backend).
    Rows of two placements (an emulated cluster's tables, concatenated): the intra-node pair's."""
    out: dict[str, float] = {}
    if coll is None or coll.empty:
        return out
    mine = coll[coll.op.isin(INTERPRETER_OPS)]
    if mine.empty:
        return out
    placement = "intra_node" if (mine.placement == "intra_node").any() else str(mine.placement.iloc[0])
    mine = mine[mine.placement == placement]
    for call in INTERPRETER_CALLS:
        py = mine[mine.op == f"py_{call}"]
        c = mine[(mine.op == f"c_{call}") & (mine.n_ranks == 2)].set_index("rep")["time_s"]
        py2 = py[py.n_ranks == 2].set_index("rep")["time_s"]
        own = py[py.n_ranks == 1].set_index("rep")["time_s"]
        d = (py2 - own - c).dropna()
        if len(d):
            out[call] = max(float(d.median()), 0.0)
    return out


def fit_collectives(coll: pd.DataFrame, quantile: float = QUANTILE, loop: str = "mpi4py"
                    ) -> tuple[CollectiveCost, ...]:
    """Time per (placement, op, bytes, ranks) (``quantile`` of the repetitions, by default the lower
    quartile: :data:`QUANTILE`); ``spread_frac`` is (max-min)/median.

    ``loop`` says how the probe timed them (``NetworkModel.collective_loop``). ``compiled``: the
    rows are what a C program's call costs, kept as they are. ``mpi4py``: interpreter loops, and
    rows with ``n_ranks == 1`` (the op on a one-rank communicator: interpreter and library entry,
    no communication) at the smallest size of each op are subtracted from that op's times, never
    below 5 % of the raw value (an estimate: on the EPYC VM the 2-rank 8 B allreduce less its
    floor stayed 0.13-0.8 us above the compiled loop's 0.25-0.71, probes/network.py).
    """
    if coll is None or coll.empty:
        return ()
    coll = coll[~coll.op.isin(INTERPRETER_OPS)]
    out = []
    floors = {}
    for op, d in coll[coll.n_ranks == 1].groupby("op") if loop == "mpi4py" else ():
        m0 = d.msg_bytes.min()
        floors[op] = float(d[d.msg_bytes == m0].time_s.quantile(quantile))
    for (placement, op, mb, nr), d in coll[coll.n_ranks >= 2].groupby(
            ["placement", "op", "msg_bytes", "n_ranks"], sort=True):
        med = float(d.time_s.median())
        spread = float((d.time_s.max() - d.time_s.min()) / med) if med > 0 else None
        low = float(d.time_s.quantile(quantile))
        t = max(low - floors.get(op, 0.0), 0.05 * low)
        out.append(CollectiveCost(op=str(op), msg_bytes=int(mb), n_ranks=int(nr), time_s=t,
                                  spread_frac=spread, placement=str(placement)))
    return tuple(out)


def fit_network(tables: dict[str, pd.DataFrame], *, mpi_library: str = "", quantile: float = QUANTILE,
                collective_loop: str = "mpi4py") -> NetworkModel:
    """NetworkModel from the raw ``pingpong`` and ``collective`` tables, every point at ``quantile``
    of its repetitions; ``collective_loop``: how the collectives were timed (:func:`fit_collectives`)."""
    pp = tables.get("pingpong")
    links = {}
    for placement in PLACEMENTS:
        links[placement] = fit_placement(pp, placement, quantile) if pp is not None and not pp.empty else None
    interp = fit_interpreter(tables.get("collective"))
    return NetworkModel(intra_node=links["intra_node"], inter_node=links["inter_node"],
                        collectives=fit_collectives(tables.get("collective"), quantile, collective_loop),
                        mpi_library=mpi_library, collective_loop=collective_loop,
                        interpreter_collective_s=interp.get("allreduce"), interpreter_p2p_s=interp.get("sendrecv"))

"""How much of each cache level a sweep really gets: capacity quantiles read off the bandwidth curves.

The convolver's LRU model gives a level a hard capacity: a line whose stack distance is below it
hits, one above misses. A measured unit-stride curve is not a step: past a level's nominal size
the bandwidth falls over a range of working sets (associativity and replacement, the hardware's
own policies, other tenants of a shared last level, the OS's page placement). Read as a
*distribution* of the level's effective capacity, the curve gives it directly: a sweep of ``W``
bytes (every line at stack distance ``W``) that runs at ``bw(W)`` between the level's plateau
``b_L`` and the next one's ``b_N`` has the share ::

    S(W) = (1 / b_N - 1 / bw(W)) / (1 / b_N - 1 / b_L)        clipped to [0, 1]

of its lines served by the level (time per byte is linear in that share), i.e. ``S(W)`` is the
probability that the effective capacity exceeds ``W``. ``S`` is made non-increasing (pool
adjacent violators: the curve is noisy) and its quantiles at ``(k + 1/2) / K`` are the
capacities of ``K`` equally weighted copies of the level; the convolver averages the hit
fraction over them. For the probe's own sweep this reproduces the measured curve through the
transition (each copy prices its share at the plateaus); a step at the nominal size reproduces it
only on the plateaus. A curve that does not cover the level (no plateau of either side, too few
points) leaves the nominal capacity, and so does one that stops short of ``pmac.fit.MEMORY_FROM``
(4x) the last level's capacity: memory's plateau is fitted from there on, since a victim L3 still
serves part of a sweep of twice its size, and a share read against a "memory" plateau that is
partly the level's residue is wrong by the residue (the Xeon VM's guest, told of 300 MiB of L3 and
probed to 128 MiB, once put its L3 at 65-107 MB this way while a 92 MiB sweep ran at L3 speed).

Quantiles are returned as ratios to the level's nominal cumulative capacity on the curve's axis
(the curve's cores together), and the convolver multiplies them by its nominal capacity for the
active cores (pmac.convolve: ``C_L``): the share of one of ``n`` active cores. They are read off
the curve as it is, so a what-if that changes a cache's size must stretch the curve's working sets
past that level alike (or drop the curves, leaving nominal sizes): changing ``size_bytes`` alone
moves the ratios and not the capacities.

Which curve: the unit-stride load curve, one distribution a level for loads and stores alike (a
cache has one capacity; what writing dirty lines back costs is in the store plateaus); the one-core
curve for one active core, the all-core curve otherwise.

**Off by default** (pmac.convolve.SOFT_CAPACITY; ``pmac predict --capacity curve``,
``bench/accuracy --capacity curve``). Re-predicting the eleven interleaved accuracy runs of
26 Nov 2026 on the Xeon VM (``bench/accuracy --measured FILE --machine DIR/xeon-vm.yaml
--compare-machine DIR/round-0/xeon-vm.yaml``, saved runs of stops 29-31): with the profile pooled
from the run's four probes the mean absolute error went from 8.97 to 8.35 % and the cases within
15 % from 67 to 71 of 88 (stream_mpi-n2-2000000, at the edge of the guest's L3 share, from -1..-25 %
to -19..+21 %); with one probe alone from 10.47 to 14.51 % and 69 to 67 of 88, three predictions
of that case at +41, +59 and +311 %: a single probe's edge moves with the host (one probe's two-core
curve fell to half at 32 MiB when the other vCPU was busy, and the model read that as capacity).
Two variants did worse and were dropped: a store distribution from the store curve (its edge at
54-91 MiB: pooled 9.35 %, one probe 14.49 %) and the one-core curve's for two active cores
(12.31 %, 16.69 %). On the EPYC VM (27 Nov), once the memory probe went to 8x the L3 and memory
was fitted from 4x on (pmac.fit.MEMORY_FROM: the next plateau below the last level is then memory's,
not the L3 residue's), two pooled runs went 6.0 -> 5.4 and 4.0 -> 3.0 % (stream_mpi-n2-2000000, 2.9x
the L3, +10.8 -> +6.3 and +15.7 -> +7.9 %; bench/results/README.md), their single probes 28 -> 29 of
32 cases within 15 %; on runs probed to 128 MiB only it stayed neutral. The Xeon figures above
were read before the last level needed its curve to reach ``MEMORY_FROM`` times its capacity: its
guest's 300 MiB L3, probed to 128 MiB, now keeps its nominal size with the curve too. It stays off by
default: seven EPYC runs with the deeper probe moved by -0.6, -1.0, -0.04, +0.1, +0.3, +1.0 and +3.3
points (``bench/results/README.md``), by one case: it lowers stream_mpi-n2-2000000's prediction, which
helps where steady runs over-predict it, hurts where slow ones under-predict it, and where a run's
probes found the fall from the L3 to memory long (both cores at 131 GB/s at 32 MiB, 84 at 64, 55 from
91 MiB on) reads too much of the L3 (-3.8 -> -30.8 %). This module never touches files.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .fit import MEMORY_FROM, reaches

#: capacity copies per level
N_QUANTILES = 8
#: fewest curve points inside a level's window for a distribution
MIN_POINTS = 3
#: least ratio of a level's plateau to the next one's for a distribution (closer plateaus leave
#: the share ill-conditioned: noise of a few percent would move it end to end)
MIN_STEP = 1.25


def _decreasing(y: np.ndarray) -> np.ndarray:
    """Least-squares non-increasing fit of ``y`` (pool adjacent violators)."""
    vals: list[float] = []
    counts: list[int] = []
    for v in y:
        vals.append(float(v))
        counts.append(1)
        while len(vals) > 1 and vals[-2] < vals[-1]:
            n = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / n
            counts[-2] = n
            vals.pop()
            counts.pop()
    return np.repeat(vals, counts)


def survival_quantiles(ws: np.ndarray, s: np.ndarray, n: int = N_QUANTILES) -> np.ndarray:
    """Working sets where the non-increasing ``s`` (1 at the first point, 0 at the last) crosses
    ``(k + 1/2) / n``, interpolated in log working set."""
    lx = np.log(ws)
    out = np.empty(n)
    for k in range(n):
        u = 1.0 - (k + 0.5) / n     # quantiles from the smallest capacity up
        i = int(np.argmax(s <= u))  # first point at or below u (exists: s[-1] = 0)
        if i == 0:
            out[k] = ws[0]
            continue
        d = s[i - 1] - s[i]
        f = (s[i - 1] - u) / d if d > 0 else 0.0
        out[k] = np.exp(lx[i - 1] + f * (lx[i] - lx[i - 1]))
    return out


def level_quantiles(ws: Sequence[float], bw: Sequence[float], lo: float, hi: float, nominal: float,
                    b_level: float, b_next: float, n: int = N_QUANTILES) -> np.ndarray | None:
    """Capacity quantiles (bytes, as the curve counts them) of a level whose curve transition lies in
    ``(lo, hi]`` (``hi`` may be inf), or None when the curve does not show the transition.

    ``nominal``: the level's nominal capacity on that axis, where the distribution ends when the
    curve stops before reaching the next plateau.
    """
    if not (b_next > 0 and b_level >= MIN_STEP * b_next):
        return None
    x = np.asarray(ws, np.float64)
    y = np.asarray(bw, np.float64)
    keep = (x > lo) & (x <= hi)
    if keep.sum() < MIN_POINTS:
        return None
    x, y = x[keep], y[keep]
    s = np.clip((1.0 / b_next - 1.0 / y) / (1.0 / b_next - 1.0 / b_level), 0.0, 1.0)
    s = _decreasing(s)
    if s[0] < 1.0:
        # the level's own plateau below the window: full share at its lower end
        x = np.concatenate(([lo if lo > 0 else x[0] / 2], x))
        s = np.concatenate(([1.0], s))
    if s[-1] > 0.0:
        # not at the next plateau yet: the rest ends at the window's end (or, for the last
        # level, at its nominal size, at least twice the largest working set probed)
        end = hi if np.isfinite(hi) else max(nominal, x[-1] * 2)
        x = np.concatenate((x, [end]))
        s = np.concatenate((s, [0.0]))
    return survival_quantiles(x, s, n)


def is_data_level(name: str) -> bool:
    """False for instruction caches (they hold no data)."""
    return not (name.upper().startswith("L1I") or name.lower().endswith("i"))


def capacity_ratios(node, n_cores: int, n: int = N_QUANTILES, access: str = "load_unit") -> list[tuple[float, ...]]:
    """Per data level of ``node`` (a pmac.profile.NodeModel): its ``n`` capacity quantiles as ratios
    to its nominal cumulative capacity, read off the ``access`` curve of ``n_cores`` cores; ``()``
    for a level the curve does not resolve (and for every level without that curve)."""
    levels = [c for c in node.caches if is_data_level(c.name)]
    curve = node.curve(access, n_cores)
    if curve is None or not levels:
        return [()] * len(levels)
    side = "bandwidth_1core_bytes_per_s" if n_cores == 1 else "bandwidth_allcores_bytes_per_s"
    cum, prev = [], 0.0
    for c in levels:
        agg = c.size_bytes * (n_cores / c.shared_by_cores if c.shared_by_cores < n_cores else 1)
        prev = max(agg if c.inclusive else prev + agg, prev)
        cum.append(prev)
    plateaus = [getattr(c, side).get(access) for c in levels] + [getattr(node.memory, side).get(access)]
    out = []
    for i, c in enumerate(levels):
        lo = np.sqrt(cum[i - 1] * cum[i]) if i else cum[0] / 4
        hi = np.sqrt(cum[i] * cum[i + 1]) if i + 1 < len(levels) else np.inf
        b_l, b_n = plateaus[i], plateaus[i + 1]
        q = None
        # the last level's share is read against memory's plateau: only where the curve reaches
        # past the level's residue, as the fit takes memory (MEMORY_FROM x its capacity, sizes
        # within 1 %); a curve stopping short leaves the level its nominal size
        short = i + 1 == len(levels) and not reaches(curve.working_set_bytes[-1], MEMORY_FROM * cum[i])
        if b_l and b_n and not short:
            q = level_quantiles(curve.working_set_bytes, curve.bandwidth_bytes_per_s, lo, hi, cum[i], b_l, b_n, n)
        out.append(tuple(float(v) for v in q / cum[i]) if q is not None else ())
    return out

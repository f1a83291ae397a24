"""Fitting the node side of a machine profile from probe records.

Cache levels are *detected* from the plateaus of the one-core unit-stride bandwidth curve and
*cross-checked* against what the OS reports (``/sys/devices/system/cpu/cpu0/cache``; ``lscpu``
when sysfs lacks it; neither -> measured only, and said so).

Detection: the curve's log-bandwidth (after a running median of three points, so one disturbed
point moves nothing) against log-size is split into piecewise-constant
segments by exact dynamic programming (least squares), the number of segments chosen by BIC
with a noise level estimated from the curve itself; adjacent segments whose bandwidth does not
fall by at least ``min_drop_frac`` are merged (a rise, e.g. loop overhead at tiny sizes, is
never a level boundary). Each remaining plateau but the last is a cache level; its size is
where the curve crosses the geometric middle between its plateau and the next one (a streaming
kernel falls off right after its data stop fitting). The last plateau is main memory.

Plateau bandwidths per access kind and core count are then read off each curve in a window
inside the level, ``(lower * margin, upper / margin)``, where the bounds are the level sizes
(the OS's where matched) scaled to the aggregate capacity the cores see: a private cache of
``n_cores`` cores holds ``n_cores`` times its size, a shared one its size.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .profile import ACCESS_KINDS, BandwidthCurve, CacheLevel, LatencyCurve, MemoryLevel

if TYPE_CHECKING:       # pandas only for the annotations: this module loads without importing it
    import pandas as pd

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


# ------------------------------------------------------------------ the OS's view

@dataclass(frozen=True, kw_only=True)
class OsCache:
    level: int
    type: str               # Data, Instruction, Unified
    size_bytes: int
    ways: int
    line_bytes: int
    shared_by_cores: int


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text)
    if not m:
        raise ValueError(f"bad cache size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[m.group(2)]


def _cpu_list_len(text: str) -> int:
    n = 0
    for part in text.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return max(n, 1)


def os_caches_sysfs(root: str | Path = SYSFS_CACHE) -> list[OsCache]:
    """Data and unified caches of cpu0 from sysfs, smallest first; [] if unavailable."""
    root = Path(root)
    out = []
    for d in sorted(root.glob("index*")):
        try:
            typ = (d / "type").read_text().strip()
            if typ == "Instruction":
                continue
            out.append(OsCache(
                level=int((d / "level").read_text()), type=typ,
                size_bytes=_parse_size((d / "size").read_text()),
                ways=int((d / "ways_of_associativity").read_text() or 0) or 1,
                line_bytes=int((d / "coherency_line_size").read_text() or 64),
                shared_by_cores=_cpu_list_len((d / "shared_cpu_list").read_text())))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda c: (c.level, c.size_bytes))


def parse_lscpu_caches(text: str, n_cpus: int) -> list[OsCache]:
    """Parse ``lscpu -C=NAME,ONE-SIZE,ALL-SIZE,WAYS,TYPE,LEVEL,COHERENCY-SIZE --bytes``."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 7 or f[4] == "Instruction":
            continue
        try:
            one, allsz = int(f[1]), int(f[2])
            instances = max(allsz // one, 1) if one else 1
            out.append(OsCache(level=int(f[5]), type=f[4], size_bytes=one, ways=int(f[3]) or 1,
                               line_bytes=int(f[6]) or 64, shared_by_cores=max(n_cpus // instances, 1)))
        except ValueError:
            continue
    return sorted(out, key=lambda c: (c.level, c.size_bytes))


def os_caches(n_cpus: int, root: str | Path = SYSFS_CACHE) -> tuple[list[OsCache], str]:
    """(caches, source) with source 'sysfs', 'lscpu' or 'none'."""
    caches = os_caches_sysfs(root)
    if caches:
        return caches, "sysfs"
    if shutil.which("lscpu"):
        try:
            text = subprocess.run(["lscpu", "-C=NAME,ONE-SIZE,ALL-SIZE,WAYS,TYPE,LEVEL,COHERENCY-SIZE",
                                   "--bytes"], capture_output=True, text=True, timeout=10).stdout
            caches = parse_lscpu_caches(text, n_cpus)
        except (OSError, subprocess.SubprocessError):
            caches = []
        if caches:
            return caches, "lscpu"
    return [], "none"


# ------------------------------------------------------------------ level detection

@dataclass(frozen=True, kw_only=True)
class Plateau:
    first_bytes: float          # smallest working set in the plateau
    last_bytes: float           # largest
    bandwidth_bytes_per_s: float
    #: estimated capacity (where the curve falls half-way, in log, to the next plateau);
    #: None for the last plateau (main memory)
    size_bytes: float | None


def _segment_dp(y: np.ndarray, k_max: int) -> tuple[list[list[int]], np.ndarray]:
    """For k = 1..k_max, the optimal split of y into k contiguous segments (least squares)."""
    n = len(y)
    c1 = np.concatenate([[0.0], np.cumsum(y)])
    c2 = np.concatenate([[0.0], np.cumsum(y * y)])

    def cost(i, j):  # segment y[i:j]
        s = c1[j] - c1[i]
        return (c2[j] - c2[i]) - s * s / (j - i)

    inf = float("inf")
    best = np.full((k_max + 1, n + 1), inf)
    arg = np.zeros((k_max + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for k in range(1, k_max + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                v = best[k - 1, i] + cost(i, j)
                if v < best[k, j]:
                    best[k, j], arg[k, j] = v, i
    out = []
    for k in range(1, k_max + 1):
        cuts, j = [], n
        for kk in range(k, 0, -1):
            i = arg[kk, j]
            cuts.append(i)
            j = i
        out.append(sorted(cuts)[1:] + [n])
    return out, best[1:, n]


def detect_plateaus(working_set_bytes, bandwidth_bytes_per_s, *, min_drop_frac: float = 0.12,
                    k_max: int = 8, smooth: bool = True) -> list[Plateau]:
    """Plateaus of a bandwidth curve, largest bandwidth (smallest sizes) first; the last is memory."""
    x = np.asarray(working_set_bytes, dtype=np.float64)
    bw = np.asarray(bandwidth_bytes_per_s, dtype=np.float64)
    if len(x) < 3 or np.any(bw <= 0) or np.any(np.diff(x) <= 0):
        raise ValueError("need at least 3 points with increasing sizes and positive bandwidth")
    y = np.log(bw)
    if smooth and len(y) >= 5:
        # running median of 3: one disturbed point (a noisy neighbour) moves no edge
        y = np.concatenate([y[:1], np.median(np.stack([y[:-2], y[1:-1], y[2:]]), axis=0), y[-1:]])
    n = len(y)
    d = np.diff(y)
    sigma = max(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2), 0.005)
    ends_by_k, sse = _segment_dp(y, min(k_max, n))
    # BIC with the noise level known: sse / sigma^2 + (2k - 1) log n
    crit = sse / sigma ** 2 + (2 * np.arange(1, len(sse) + 1) - 1) * np.log(n)
    ends = ends_by_k[int(np.argmin(crit))]
    segs, start = [], 0
    for e in ends:
        segs.append([start, e])
        start = e
    # a plateau must fall by min_drop_frac to the next one (a rise or a small step is merged);
    # a one-point segment between two others is a transition and joins the previous plateau
    def level(seg):
        return float(np.median(y[seg[0]:seg[1]]))
    changed = True
    while changed:
        changed = False
        for i in range(1, len(segs)):
            a, b = segs[i - 1], segs[i]
            transition = b[1] - b[0] == 1 and i + 1 < len(segs)
            if transition or level(b) > level(a) + np.log(1 - min_drop_frac):
                segs[i - 1] = [a[0], b[1]]
                del segs[i]
                changed = True
                break
    out = []
    for i, (s, e) in enumerate(segs):
        size = None
        if i + 1 < len(segs):
            mid = 0.5 * (level([s, e]) + level(segs[i + 1]))
            size = _crossing(x, y, mid, segs[i + 1][0])
        out.append(Plateau(first_bytes=float(x[s]), last_bytes=float(x[e - 1]),
                           bandwidth_bytes_per_s=float(np.exp(level([s, e]))), size_bytes=size))
    return out


def _crossing(x: np.ndarray, y: np.ndarray, level: float, next_start: int) -> float:
    """The size (log-interpolated) where y falls below ``level``: the crossing nearest to the
    start of the next plateau, searched backwards (noise inside a plateau does not count)."""
    for j in range(min(next_start, len(y) - 1), 0, -1):
        if y[j] < level <= y[j - 1]:
            lx0, lx1 = np.log(x[j - 1]), np.log(x[j])
            t = (y[j - 1] - level) / (y[j - 1] - y[j])
            return float(np.exp(lx0 + t * (lx1 - lx0)))
    return float(x[max(next_start - 1, 0)])


# ------------------------------------------------------------------ the node model

@dataclass(frozen=True, kw_only=True)
class NodeFit:
    caches: tuple[CacheLevel, ...]
    memory: MemoryLevel
    #: human-readable findings: OS cross-check, missing information
    notes: tuple[str, ...]
    plateaus: tuple[Plateau, ...]


def _window_value(x, v, lo: float, hi: float, *, margin: float) -> float | None:
    """Median of v over lo*margin <= x <= hi/margin; nearest point to the middle if empty."""
    x = np.asarray(x, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if len(x) == 0:
        return None
    sel = (x >= lo * margin) & (x <= hi / margin)
    if sel.any():
        return float(np.median(v[sel]))
    if hi <= x[0] or lo >= x[-1] and not np.isinf(hi):
        return None
    mid = np.sqrt(max(lo, x[0]) * min(hi, x[-1]))
    return float(v[int(np.argmin(np.abs(np.log(x / mid))))])


#: the memory plateau is fitted from this many times the last-level capacity the curve's cores
#: share on: a last level that is not LRU (AMD's victim L3) still serves part of a sweep of twice
#: its size. EPYC VM, 27 Nov 2026, 32 MiB L3 (machines/epyc-vm.raw.npz): both cores together read
#: 50, 44 and 36 GB/s at 54, 64 and 91 MiB against 32 GB/s at 128 MiB, and over the pooled
#: profiles of eight accuracy runs that day the window from 2x on gave all-cores memory load
#: bandwidths of 34 to 65 GB/s (from 4x: 32 to 53).
MEMORY_FROM = 4.0


def reaches(largest: float, size: float) -> bool:
    """Whether a probe whose largest working set is ``largest`` reached ``size``: within 1 % counts
    (a gather's working set, data and index, falls a few bytes short of the nominal size)."""
    return largest * 1.01 >= size


def _memory_from(largest: float, last_level: float) -> tuple[float, str]:
    """(where the memory window starts, why it starts short of MEMORY_FROM x ``last_level`` or "").
    Sizes within 1 % count as reached (:func:`reaches`)."""
    if last_level <= 0:
        return largest, ""
    for k, why in ((MEMORY_FROM, ""), (2.0, f"from 2x ({largest / 2**20:.0f} MiB probed)")):
        if reaches(largest, k * last_level):
            return min(k * last_level, largest), why
    return largest, f"from the largest point, {largest / 2**20:.0f} MiB (below 2x)"


def fit_node(curves: list[BandwidthCurve], latency: LatencyCurve | None, *, n_cores: int,
             os_view: list[OsCache], os_source: str = "sysfs", margin: float = 1.25,
             min_drop_frac: float = 0.12) -> NodeFit:
    """Cache levels and memory from bandwidth curves (medians) and the OS's cache list."""
    notes: list[str] = []
    ref = next((c for c in curves if c.access == "load_unit" and c.n_cores == 1), None)
    if ref is None:
        raise ValueError("fit_node needs the one-core load_unit bandwidth curve")
    plats = detect_plateaus(ref.working_set_bytes, ref.bandwidth_bytes_per_s, min_drop_frac=min_drop_frac)
    measured = [p.size_bytes for p in plats[:-1]]
    notes.append("measured levels (load_unit, 1 core): " +
                 (", ".join(f"{s / 1024:.0f} KiB" for s in measured) or "none") +
                 f"; memory plateau from {plats[-1].first_bytes / 1024:.0f} KiB")
    # geometry: OS levels, each matched to the measured level nearest in log-size (factor 2)
    levels: list[dict] = []
    if os_view:
        used = set()
        for oc in os_view:
            j = None
            if measured:
                dist = [abs(np.log(m / oc.size_bytes)) if k not in used else np.inf for k, m in enumerate(measured)]
                if min(dist) < np.log(2.0):
                    j = int(np.argmin(dist))
                    used.add(j)
            name = f"L{oc.level}"
            if j is None:
                notes.append(f"{name}: OS reports {oc.size_bytes / 1024:.0f} KiB; no matching plateau measured")
                src = "os"
            else:
                notes.append(f"{name}: OS reports {oc.size_bytes / 1024:.0f} KiB, measured {measured[j] / 1024:.0f} KiB"
                             f" ({measured[j] / oc.size_bytes:.2f}x)")
                src = "measured+os"
            levels.append(dict(name=name, size_bytes=oc.size_bytes, line_bytes=oc.line_bytes, ways=oc.ways,
                               shared_by_cores=oc.shared_by_cores, source=src))
        for k, m in enumerate(measured):
            if k not in used:
                notes.append(f"measured plateau edge at {m / 1024:.0f} KiB matches no OS cache level (ignored)")
    else:
        notes.append(f"no cache information from the OS ({os_source}): geometry from the measured plateaus only "
                     "(line 64 B and ways 8 assumed; the last level assumed shared by all cores)")
        for k, m in enumerate(measured):
            last = k == len(measured) - 1
            levels.append(dict(name=f"L{k + 1}", size_bytes=int(round(m / 1024)) * 1024 or 1024, line_bytes=64, ways=8,
                               shared_by_cores=n_cores if last else 1, source="measured"))
    # plateau bandwidths per access kind and core count
    lat_x = latency.working_set_bytes if latency else ()
    lat_y = latency.latency_s if latency else ()
    caches = []
    prev = {}
    for lv in levels:
        bw1, bwall = {}, {}
        for c in curves:
            agg = lv["size_bytes"] * (c.n_cores / lv["shared_by_cores"] if lv["shared_by_cores"] < c.n_cores else 1)
            lo = prev.get(c.n_cores, 0.0)
            lo = max(lo, agg / 4) if lo == 0 else lo
            val = _window_value(c.working_set_bytes, c.bandwidth_bytes_per_s, lo, agg, margin=margin)
            if val is not None:
                (bw1 if c.n_cores == 1 else bwall)[c.access] = val
        lo1 = prev.get(1, 0.0) or lv["size_bytes"] / 4
        lat = _window_value(lat_x, lat_y, lo1, lv["size_bytes"], margin=margin) if latency else None
        for c in curves:
            prev[c.n_cores] = lv["size_bytes"] * (c.n_cores / lv["shared_by_cores"]
                                                  if lv["shared_by_cores"] < c.n_cores else 1)
        prev[1] = lv["size_bytes"]
        caches.append(CacheLevel(**lv, latency_s=lat, bandwidth_1core_bytes_per_s=bw1,
                                 bandwidth_allcores_bytes_per_s=bwall))
    # memory: from MEMORY_FROM x the aggregate last-level capacity on, 2x where the probe stopped short
    mem1, memall = {}, {}
    short = []
    for c in curves:
        x = np.asarray(c.working_set_bytes)
        if caches:
            lo, why = _memory_from(x[-1], prev.get(c.n_cores, plats[-1].first_bytes))
        else:
            lo, why = min(plats[-1].first_bytes, x[-1]), ""
        if why:
            short.append(f"{c.access} {c.n_cores} core(s) {why}")
        v = _window_value(x, c.bandwidth_bytes_per_s, lo, np.inf, margin=1.0)
        if v is not None:
            (mem1 if c.n_cores == 1 else memall)[c.access] = v
    mem_lat = None
    if latency and len(lat_x):
        lo, why = _memory_from(lat_x[-1], prev.get(1, 0.0)) if caches else (min(plats[-1].first_bytes, lat_x[-1]), "")
        if why:
            short.append(f"latency {why}")
        mem_lat = _window_value(lat_x, lat_y, lo, np.inf, margin=1.0)
    if short:
        notes.append(f"memory plateau short of {MEMORY_FROM:g}x the last cache (pmac probe goes to "
                     f"8x by default): " + "; ".join(short))
    memory = MemoryLevel(latency_s=mem_lat, bandwidth_1core_bytes_per_s=mem1, bandwidth_allcores_bytes_per_s=memall)
    return NodeFit(caches=tuple(caches), memory=memory, notes=tuple(notes), plateaus=tuple(plats))


def _ending(v: np.ndarray, window: int, rule: str, larger_is_better: bool) -> np.ndarray:
    """The repetitions that end a point under the probe's stop rule (see probes/memory.py)."""
    if rule == "last":
        return v[-window:]
    if rule != "best":
        raise ValueError(f"unknown stop rule {rule!r} (best, last)")
    s = np.sort(v)
    return s[::-1][:window] if larger_is_better else s[:window]


def at_slow_quantile(values, q: float, *, larger_is_better: bool) -> float:
    """The value that a share ``q`` of the repetitions is at least as fast as (0.5: the median; a
    rate at its 1 - q quantile, a time at its q quantile): the machine's speed at the q-th slowest
    moment of a probe on a shared host."""
    return float(np.quantile(np.asarray(values, dtype=float), 1.0 - q if larger_is_better else q))


def slow_quantile_of(statistic: str | float) -> float | None:
    """The slow quantile a statistic names: None for ``best`` (pmac probe's rule: the median of the
    fastest repetitions), 0.5 for ``median``, q for a number q in (0, 1) (the value a share q of the
    repetitions is at least as fast as, :func:`at_slow_quantile`); InputError otherwise."""
    if statistic == "best":
        return None
    if statistic == "median":
        return 0.5
    try:
        q = float(statistic)
    except (TypeError, ValueError):
        q = None
    if q is None or not 0.0 < q < 1.0:
        raise InputError(f"unknown statistic {statistic!r} (best, median, or a quantile between 0 and 1)")
    return q


def curves_from_raw(bandwidth: pd.DataFrame, *, window: int = 5, rule: str = "best",
                    slow_quantile: float | None = None) -> list[BandwidthCurve]:
    """Curves from the raw ``bandwidth`` table: per point the median (and relative spread) of
    the ``window`` repetitions that ended it under the stop rule (``best``: the fastest); with
    ``slow_quantile``, each point at that quantile of all its repetitions (:func:`at_slow_quantile`)
    and the spread of all of them."""
    out = []
    for (access, k), g in bandwidth.groupby(["access", "n_cores"], sort=False):
        xs, ys, sp = [], [], []
        for ws, gg in g.groupby("working_set_bytes", sort=True):
            v = gg.sort_values("rep")["bandwidth_bytes_per_s"].to_numpy()
            tail = v if slow_quantile is not None else _ending(v, window, rule, True)
            xs.append(float(ws))
            ys.append(float(np.median(tail)) if slow_quantile is None
                      else at_slow_quantile(v, slow_quantile, larger_is_better=True))
            sp.append(float((tail.max() - tail.min()) / np.median(tail)))
        out.append(BandwidthCurve(access=str(access), n_cores=int(k), working_set_bytes=tuple(xs),
                                  bandwidth_bytes_per_s=tuple(ys), spread_frac=tuple(sp)))
    order = {a: i for i, a in enumerate(ACCESS_KINDS)}
    return sorted(out, key=lambda c: (c.n_cores, order.get(c.access, 99)))


def latency_from_raw(latency: pd.DataFrame, *, window: int = 5, rule: str = "best",
                     slow_quantile: float | None = None) -> LatencyCurve:
    """Latency curve: per size the median of the repetitions that ended it (``best``: the shortest);
    with ``slow_quantile``, that quantile of all of them (:func:`at_slow_quantile`)."""
    xs, ys = [], []
    for ws, g in latency.groupby("working_set_bytes", sort=True):
        v = g.sort_values("rep")["latency_s"].to_numpy()
        xs.append(float(ws))
        ys.append(float(np.median(_ending(v, window, rule, False))) if slow_quantile is None
                  else at_slow_quantile(v, slow_quantile, larger_is_better=False))
    return LatencyCurve(working_set_bytes=tuple(xs), latency_s=tuple(ys))

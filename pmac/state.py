"""Is this machine, now, the machine its profile describes? (``pmac check``)

A profile is measured at one time. A shared host moves between states (another guest on its
cores, the cores' clock): on pmac's EPYC VM of 27 Nov 2026 the same program ran 1.8x slower for
minutes at a time (``bench/host_modes``), and an accuracy run whose native runs met the host in
its fast state was predicted to 4.6 % by its own probes and to 11.2 % (every case predicted slower
than it ran) by a profile probed two hours before in the slow state (docs/accuracy.md). The check runs three of
the probe's own kernels on every CPU, a few seconds in all, and compares them with the profile's
raw repetitions:

- the unit-stride load bandwidth at :data:`STATE_WS_BYTES` (the probe's point there, inside every
  L2 pmac has met), one core;
- the scalar flop rate (the compute probe's ``flop_scalar`` kernel);
- the time of a loop's own work: the compute probe's branch kernel with its branch never taken
  (loads, a compare and branch, an add, one after another: what every loop pays per iteration).

Why the third: the first two see little of what slows ordinary scalar code on a shared host. In
the host's slow episodes on the EPYC VM (``bench/noise_sensitivity``, 27 Nov 2026) stream_mpi's C
triad ran 1.86 times its median, the branch loop 1.80, the scalar flop kernel 1.32 and the L2 load
1.13. A profile without repetitions of that kernel leaves its column empty, and the verdict rests
on the other two.

Each is the median of its repetitions, on each CPU the process may run on (pinned to each in
turn: one core of a VM can be slower than another), against the median of all the profile's
repetitions of the same point (not its best: the profile's fitted values are medians too).
Every ratio is a speed, now over probed: above 1 the machine runs faster now.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

#: working set of the L2 check: the probe's own point at 256 KiB (inside a 512 KiB L2)
STATE_WS_BYTES = 262144
#: the ratios within this of 1 say the machine runs as it was probed
STATE_TOLERANCE = 0.10


#: the branch kernel's array, as the compute probe sweeps it (its value: seconds an element)
BRANCH_ELEMENTS = 1 << 20


def _loop_rows(comp: pd.DataFrame) -> pd.Series:
    """The rows of a raw ``compute`` table that are the loop kernel: ``branch`` at probability 0."""
    return (comp["probe"] == "branch") & (comp["param"] == 0.0)


def measure_state() -> dict[int, tuple[float, float, float]]:
    """One round of the check on every CPU the process may run on: {cpu: (L2 load bandwidth in
    bytes/s, scalar flop rate in flop/s, seconds per element of the never-taken branch loop)},
    each the median of its 9 repetitions."""
    from probes import compute as pc
    from probes import memory as pm

    p = pm.Params(threshold=0.0, min_reps=9, max_reps=9, window=9)
    x = np.linspace(0.5, 1.0, 512)
    never = np.zeros(BRANCH_ELEMENTS, dtype=np.uint8)
    sink = np.zeros(1024, dtype=np.int64)
    cpus = sorted(os.sched_getaffinity(0))
    out = {}
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            bw = float(np.median(pm.measure_point("load_unit", STATE_WS_BYTES, 1, p).bandwidth_bytes_per_s))
            flops = pc._timeit(lambda n: pc._flop_scalar(x, n, 0.999, 1e-4), 0.005, 9, 9, 0.0,
                               scale=lambda n, dt: pc.FLOP_PER_ELEMENT * x.size * n / dt)
            loop = pc._timeit(lambda n: pc._branchy(never, n, sink), 0.005, 9, 9, 0.0,
                              scale=lambda n, dt: dt / (n * never.size))
            out[cpu] = (bw, float(np.median(flops)), float(np.median(loop)))
    finally:
        os.sched_setaffinity(0, set(cpus))
    return out


def profile_state(raw: dict) -> tuple[float, float, float | None] | None:
    """The same medians from a profile's raw repetitions (pmac.profile.load_raw): the load point
    nearest :data:`STATE_WS_BYTES` (on a log scale), ``flop_scalar``, and the branch kernel at
    probability 0 (None when the profile has none); None without the first two."""
    if "bandwidth" not in raw or "compute" not in raw:
        return None
    b = raw["bandwidth"]
    b = b[(b["access"] == "load_unit") & (b["n_cores"] == 1)]
    ws = b["working_set_bytes"].to_numpy()
    comp = raw["compute"]
    fl = comp[comp["probe"] == "flop_scalar"]["value"]
    if len(ws) == 0 or len(fl) == 0:
        return None
    loop = comp[_loop_rows(comp)]["value"]
    near = ws[np.argmin(np.abs(np.log(ws / STATE_WS_BYTES)))]
    return (float(b[b["working_set_bytes"] == near]["bandwidth_bytes_per_s"].median()), float(fl.median()),
            float(np.median(loop)) if len(loop) else None)


def state_ratios(rounds: list[dict[int, tuple]], ref: tuple) -> pd.DataFrame:
    """Per CPU, now over the profile (``ref``, :func:`profile_state`), as speeds: the median,
    lowest and highest over ``rounds`` (:func:`measure_state` results) of the L2 load, the scalar
    flop and the loop ratios (the loop's: probed seconds over now's; NaN when ``ref`` has none)."""
    rows = []
    for cpu in sorted(rounds[0]):
        row = dict(cpu=cpu)
        for k, name in enumerate(("l2", "flop", "loop")):
            if k >= len(ref) or ref[k] is None or k >= len(rounds[0][cpu]):
                row.update({name: np.nan, f"{name}_lo": np.nan, f"{name}_hi": np.nan})
                continue
            r = np.array([ref[k] / x[cpu][k] if name == "loop" else x[cpu][k] / ref[k] for x in rounds])
            row.update({name: float(np.median(r)), f"{name}_lo": float(r.min()), f"{name}_hi": float(r.max())})
        rows.append(row)
    return pd.DataFrame(rows)


def verdict(ratios: pd.DataFrame, tolerance: float = STATE_TOLERANCE) -> str:
    """One sentence: whether every CPU's median ratios are within ``tolerance`` of 1 (a kernel the
    profile has no repetitions of, NaN, says nothing)."""
    cols = [c for c in ("l2", "flop", "loop") if c in ratios]
    worst = ratios[cols].to_numpy(dtype=np.float64)
    worst = worst[np.isfinite(worst)]
    off = np.abs(worst - 1.0).max()
    if off <= tolerance:
        return f"runs as probed: every ratio within {tolerance:.0%} of 1"
    lo, hi = float(worst.min()), float(worst.max())
    out = worst[np.abs(worst - 1.0) > tolerance]      # the ratios that say something
    how = ("faster" if (out > 1).all() else "slower" if (out < 1).all() else "faster in part and slower in part")
    return (f"runs {how} than probed (ratios {lo:.2f}-{hi:.2f}): predictions made with this profile price "
            "its bursts for another state of the machine; pmac probe measures the present one")


def synchronised_loop_s(rounds: list[dict[int, tuple]]) -> np.ndarray:
    """Per round of :func:`measure_state`, the loop's seconds per element on the slower of its CPUs:
    a run synchronised across one rank per CPU goes at its slower core, so that is the loop work
    such a run met in that round. Rounds without the loop (older checks) are left out."""
    return np.array([max(v[2] for v in r.values()) for r in rounds if r and all(len(v) > 2 for v in r.values())],
                    dtype=np.float64)


def with_loop_reps(raw: dict, seconds: np.ndarray) -> dict:
    """``raw`` (pmac.profile.load_raw) with the compute probe's branch kernel at probability 0 (a
    loop's own work) measured again: its repetitions replaced by ``seconds`` (e.g.
    :func:`synchronised_loop_s` of the checks taken between a program's runs); the other tables
    and points as they were. The profile refitted from it (pmac.pool.refit) prices loop work as
    those checks found it."""
    from .profile import RAW_TABLES

    seconds = np.asarray(seconds, dtype=np.float64)
    if seconds.size == 0 or not np.all(np.isfinite(seconds) & (seconds > 0)):
        raise ValueError("with_loop_reps: needs positive seconds per element")
    comp = raw["compute"]
    keep = comp[~_loop_rows(comp)]
    new = pd.DataFrame({"probe": "branch", "param": 0.0, "rep": np.arange(seconds.size), "value": seconds})
    out = dict(raw)
    out["compute"] = RAW_TABLES["compute"].coerce(pd.concat([keep, new], ignore_index=True))
    return out


#: a repetition this many times the time of its point's fastest tenth ran in a slow state
SLOW_STATE_RATIO = 1.3
#: the share of a kernel's repetitions in a slow state from which its probes met two states
SLOW_STATE_SHARE = 0.15


def slow_shares(comp: pd.DataFrame) -> dict[str, float]:
    """Of the two kernels that follow a shared host's slow state (the module docstring: the scalar
    flop loop and a loop's own work), the share of a raw ``compute`` table's repetitions that took
    :data:`SLOW_STATE_RATIO` times the time of the fastest tenth or more. A kernel without
    repetitions is left out."""
    out = {}
    for name, rows, larger_is_better in (("scalar flop", comp["probe"] == "flop_scalar", True),
                                         ("loop work", _loop_rows(comp), False)):
        v = comp.loc[rows, "value"].to_numpy(dtype=np.float64)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            t = 1.0 / v if larger_is_better else v
            out[name] = float(np.mean(t >= SLOW_STATE_RATIO * np.quantile(t, 0.1)))
    return out


def two_states_note(comp: pd.DataFrame) -> str | None:
    """One sentence when a profile's probes met the machine in two states (a kernel of
    :func:`slow_shares` with :data:`SLOW_STATE_SHARE` of its repetitions or more in a slow one),
    else None. Why it matters: a pooled profile's median lands in whichever state most of its
    repetitions ran in, and the predictions made with it are for that state (on pmac's EPYC VM of
    28 Nov 2026 one sitting of four probes priced a loop's work at 0.56 ns, 24 probes over two hours
    at 0.33: machines/README.md)."""
    slow = {k: s for k, s in slow_shares(comp).items() if s >= SLOW_STATE_SHARE}
    if not slow:
        return None
    which = ", ".join(f"{k} {100 * s:.0f} %" for k, s in slow.items())
    return (f"the probes met the machine in two states ({which} of the repetitions took "
            f"{SLOW_STATE_RATIO:g}x the fastest tenth's time or more): its figures are for the state most "
            "repetitions ran in; pmac check says which state the machine is in now, pmac predict --band "
            "spans both")


def two_states_of(profile, path) -> str | None:
    """:func:`two_states_note` of a profile's raw sidecar (``path``: the profile's YAML); None
    without a readable one (an imported or combined profile has none; a damaged one is for pmac pool
    or pmac predict --band to refuse, not for a note)."""
    from .errors import InputError
    from .profile import load_raw

    if not profile.raw_file:
        return None
    try:
        comp = load_raw(profile, path).get("compute")
    except InputError:
        return None
    return None if comp is None else two_states_note(comp)

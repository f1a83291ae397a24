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

- the same loop on every CPU at once, one thread pinned to each, each timing its own calls (the
  busy check), against the profile's ``all:branch`` repetitions (the compute probe's loop on every
  core at once; its value is the slower core's, as a synchronised job goes).

Why the third: the first two see little of what slows ordinary scalar code on a shared host. In
the host's slow episodes on the EPYC VM (``bench/noise_sensitivity``, 27 Nov 2026) stream_mpi's C
triad ran 1.86 times its median, the branch loop 1.80, the scalar flop kernel 1.32 and the L2 load
1.13. A profile without repetitions of that kernel leaves its column empty, and the verdict rests
on the other two.

Why the fourth: the first three run one CPU at a time, and a VM's host can keep each vCPU at full
speed alone and halve one when both are busy (two vCPUs on one physical core's threads, or one
core time-shared). On the Zen 4 VM of 2 Dec 2026 the compute probe's kernels ran alone at 10.8 G
independent flop/s and 0.31 ns a loop element while the same kernels on both vCPUs at once ran at
5.2-5.4 and 0.60-0.63 in stretches of a minute or more, and at 9.5 and 0.31 in others: a state an
MPI job with a rank on every core meets and the one-CPU checks cannot see.

Each is the median of its repetitions, on each CPU the process may run on (pinned to each in
turn: one core of a VM can be slower than another), against the median of all the profile's
repetitions of the same point (not its best: the profile's fitted values are medians too).
Every ratio is a speed, now over probed: above 1 the machine runs faster now.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pandas as pd

#: working set of the L2 check: the probe's own point at 256 KiB (inside a 512 KiB L2)
STATE_WS_BYTES = 262144
#: the ratios within this of 1 say the machine runs as it was probed
STATE_TOLERANCE = 0.10


#: the branch kernel's array, as the compute probe sweeps it (its value: seconds an element)
BRANCH_ELEMENTS = 1 << 20
#: timed calls of the busy check on each CPU (each about :data:`BUSY_CALL_S`)
BUSY_REPS = 9
BUSY_CALL_S = 0.005
#: the columns of :func:`state_ratios`, in the order of a check's values; the last two are times
STATE_COLUMNS = ("l2", "flop", "loop", "busy")


def _loop_rows(comp: pd.DataFrame) -> pd.Series:
    """The rows of a raw ``compute`` table that are the loop kernel: ``branch`` at probability 0."""
    return (comp["probe"] == "branch") & (comp["param"] == 0.0)


def busy_loop_s(cpus, *, reps: int = BUSY_REPS, call_s: float = BUSY_CALL_S) -> dict[int, float]:
    """Seconds per element of the never-taken branch loop on each CPU of ``cpus`` while every one of
    them runs it: a thread pinned to each CPU, all started together, each timing its own calls of
    about ``call_s``; the median of a thread's first ``reps`` calls, every one of them made while
    the other threads were still calling (a thread stops only once every thread has its ``reps``).
    {} for fewer than two CPUs."""
    from probes import compute as pc

    cpus = sorted(cpus)
    if len(cpus) < 2:
        return {}
    arrays = [(np.zeros(BRANCH_ELEMENTS, dtype=np.uint8), np.zeros(1024, dtype=np.int64)) for _ in cpus]
    r0, s0 = arrays[0]
    pc.branchy_nogil(r0, 1, s0)             # compiled (or loaded) before any timing
    n = 1
    while n < 1 << 20:                      # sweeps a call, chosen on this thread alone
        t0 = time.perf_counter()
        pc.branchy_nogil(r0, n, s0)
        if time.perf_counter() - t0 >= call_s:
            break
        n *= 2
    start = threading.Barrier(len(cpus))
    lock = threading.Lock()
    times = {cpu: [] for cpu in cpus}
    ready = [0]
    errors = []

    def work(cpu, r, sink):
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only (Linux: pid 0 is the calling thread)
            start.wait()
            own = times[cpu]
            while True:
                t0 = time.perf_counter()
                pc.branchy_nogil(r, n, sink)
                own.append((time.perf_counter() - t0) / (n * r.size))
                if len(own) == reps:
                    with lock:
                        ready[0] += 1
                with lock:
                    if ready[0] == len(cpus):
                        return
        except BaseException as exc:        # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)
            start.abort()
            with lock:
                ready[0] = len(cpus)

    threads = [threading.Thread(target=work, args=(cpu, r, sink), daemon=True)
               for cpu, (r, sink) in zip(cpus, arrays)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {cpu: float(np.median(v[:reps])) for cpu, v in times.items()}


def measure_state() -> dict[int, tuple[float, ...]]:
    """One round of the check on every CPU the process may run on: {cpu: (L2 load bandwidth in
    bytes/s, scalar flop rate in flop/s, seconds per element of the never-taken branch loop, the
    same with every CPU running it at once)}, each the median of its 9 repetitions; one CPU alone
    has no busy check (three values)."""
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
    busy = busy_loop_s(cpus)
    return {cpu: v + (busy[cpu],) if cpu in busy else v for cpu, v in out.items()}


def profile_state(raw: dict) -> tuple[float, float, float | None, float | None] | None:
    """The same medians from a profile's raw repetitions (pmac.profile.load_raw): the load point
    nearest :data:`STATE_WS_BYTES` (on a log scale), ``flop_scalar``, the branch kernel at
    probability 0 and its ``all:branch`` rows (every core at once; each None when the profile has
    none); None without the first two."""
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
    busy = comp[comp["probe"] == "all:branch"]["value"]
    near = ws[np.argmin(np.abs(np.log(ws / STATE_WS_BYTES)))]
    return (float(b[b["working_set_bytes"] == near]["bandwidth_bytes_per_s"].median()), float(fl.median()),
            float(np.median(loop)) if len(loop) else None, float(np.median(busy)) if len(busy) else None)


def state_ratios(rounds: list[dict[int, tuple]], ref: tuple) -> pd.DataFrame:
    """Per CPU, now over the profile (``ref``, :func:`profile_state`), as speeds: the median,
    lowest and highest over ``rounds`` (:func:`measure_state` results) of the L2 load, the scalar
    flop, the loop and the busy loop ratios (the loops': probed seconds over now's; NaN when ``ref``
    or the rounds have none). The busy ratio sets a CPU's own time with every CPU busy against the
    profile's ``all:branch`` time, the slower core's: below 1 on a CPU, it runs slower busy now than
    the slower core did while probed."""
    rows = []
    for cpu in sorted(rounds[0]):
        row = dict(cpu=cpu)
        for k, name in enumerate(STATE_COLUMNS):
            if k >= len(ref) or ref[k] is None or any(k >= len(x[cpu]) for x in rounds):
                row.update({name: np.nan, f"{name}_lo": np.nan, f"{name}_hi": np.nan})
                continue
            r = np.array([ref[k] / x[cpu][k] if name in ("loop", "busy") else x[cpu][k] / ref[k] for x in rounds])
            row.update({name: float(np.median(r)), f"{name}_lo": float(r.min()), f"{name}_hi": float(r.max())})
        rows.append(row)
    return pd.DataFrame(rows)


def verdict(ratios: pd.DataFrame, tolerance: float = STATE_TOLERANCE) -> str:
    """One sentence: whether every CPU's median ratios are within ``tolerance`` of 1 (a kernel the
    profile has no repetitions of, NaN, says nothing)."""
    cols = [c for c in STATE_COLUMNS if c in ratios]
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


def synchronised_busy_loop_s(rounds: list[dict[int, tuple]]) -> np.ndarray:
    """Per round of :func:`measure_state`, the busy check's seconds per element on the slower of its
    CPUs (what the profile's ``all:branch`` rows record: a call on every core ends with the slower
    one). Rounds without the busy check (older checks, one CPU) are left out."""
    return np.array([max(v[3] for v in r.values()) for r in rounds if r and all(len(v) > 3 for v in r.values())],
                    dtype=np.float64)


def _positive(seconds, what: str) -> np.ndarray:
    seconds = np.asarray(seconds, dtype=np.float64)
    if seconds.size == 0 or not np.all(np.isfinite(seconds) & (seconds > 0)):
        raise ValueError(f"with_loop_reps: needs positive seconds per element ({what})")
    return seconds


def with_loop_reps(raw: dict, seconds: np.ndarray, busy_seconds: np.ndarray | None = None) -> dict:
    """``raw`` (pmac.profile.load_raw) with the compute probe's branch kernel at probability 0 (a
    loop's own work) measured again: its repetitions replaced by ``seconds`` (e.g.
    :func:`synchronised_loop_s` of the checks taken between a program's runs); the other tables
    and points as they were. The profile refitted from it (pmac.pool.refit) prices loop work as
    those checks found it.

    With ``busy_seconds`` (e.g. :func:`synchronised_busy_loop_s` of the same checks) the loop's
    all-cores slowdown is measured again too: every probe's ``all:branch`` rows replaced by
    ``busy_seconds`` (at the cores the probe kept busy) and its ``alone:branch`` rows by
    ``seconds``, the two sides of the slowdown from the same checks. In a pooled table (column
    ``source``: the probe a row came from) they are rows of a source of their own, so the
    slowdown a pool derives within each probe (pmac.probe.within_probes) is theirs alone. Without
    it the probe's slowdown stays, priced on the new loop work."""
    from .profile import RAW_TABLES

    seconds = _positive(seconds, "loop")
    comp = raw["compute"]
    def rows(probe: str, param: float, values: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"probe": probe, "param": param, "rep": np.arange(values.size), "value": values})

    drop = _loop_rows(comp)
    new = [rows("branch", 0.0, seconds)]
    if busy_seconds is not None and (comp["probe"] == "all:branch").any():
        busy_seconds = _positive(busy_seconds, "busy loop")
        n_busy = float(comp.loc[comp["probe"] == "all:branch", "param"].max())
        drop |= comp["probe"].isin(("all:branch", "alone:branch"))
        extra = [rows("alone:branch", 1.0, seconds), rows("all:branch", n_busy, busy_seconds)]
        if "source" in comp.columns and comp["source"].nunique() > 1:
            extra = [e.assign(source=int(comp["source"].max()) + 1) for e in extra]
        new += extra
    out = dict(raw)
    out["compute"] = RAW_TABLES["compute"].coerce(pd.concat([comp[~drop]] + new, ignore_index=True))
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

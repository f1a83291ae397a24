#!/usr/bin/env python3
"""4 KiB-aliasing probe: what a load costs when it shares its low 12 address bits with a recent
store to another page, in a loop streaming from each cache level and from memory.

Runs on its own (numpy and numba)::

    python probes/alias.py --quick     # prints a table and the stall per aliased load

A core checks a load against the stores still in its store buffer by their low 12 address bits
before the full addresses are known; a match on another page (a *4 KiB alias*) holds the load back
until the store's address resolves. Arrays allocated page by page (mmap'ed, malloc'ed in large
blocks) start at the same 4 KiB phase, so a loop that stores ``v[i]`` and then loads ``u[i + 1]``
over two such arrays aliases on every element. pmac_vg counts these loads (``alias_loads``,
docs/tracing.md); this probe prices one.

The kernel is ``v[i & mask] = 0.5 * u[i] + 1.0`` (a load, a multiply, an add and a store an
element; the mask is all ones at run time, so the store's index is opaque to LLVM and the loop
stays scalar, one load instruction an element, as pmac_vg counts them) over two views of one
page-aligned buffer:

- ``aliased``: ``v`` starts one element past ``u``'s 4 KiB phase, so the load of ``u[i]`` matches
  the store to ``v[i - 1]``, one store back;
- ``apart``: ``v`` starts 512 elements (one page) later, so no recent store matches.

Both at a working set (the two arrays together) in each data cache level (half its size) and in
memory (four times the last level, at least 64 MiB), on one core and on all cores at once (one
numba thread a core, each sweeping its own pair of arrays; a shared level's working set split among
them), interleaved in rounds (each round times both placements of every working set and core count,
each the best of ``REPEATS`` timed calls of at least ``ELEMENTS_PER_CALL`` elements a core).

``pmac probe`` runs the rounds in chunks spread over the last part of its node probe, a fresh buffer
each (pmac.probe.ALIAS_ROUND_PLACES: one block of rounds samples a shared host's state once).

Why all cores: an MPI job runs a rank on every core, and the stall is not the same then. On a
Cascade Lake VM (28 Nov 2026, the ten passes of ``pmac probe --add-alias machines/clx-vm.yaml
--rounds 10 --gap 50``) an aliased load in L3 cost 0.16-0.32 ns with both cores sweeping and
0.11-0.26 ns with one, more with both in 9 of the 10 passes. (What the other core runs is not the
whole story: by hand, a busy loop on the other vCPU once went with 0.30 ns in L1 against 0.006 alone,
and a later run alone gave 0.12; the host's state moves the figure as much.)

The stall per aliased load at a working set is the median over the rounds of
``aliased / apart - 1``, times the fastest rounds' ``apart`` time an element (the median
of its ``BEST`` fastest; for a profile pooled at the median, the median of all): a ratio within a
round, so that a shared host's slow spells between rounds cancel, priced at the speed the profile's
other figures are taken at (pmac probe: best).

What it does not measure: a store further back than one (bench/alias_depth: on a Cascade Lake the
cost fades by about 8 stores back, where pmac_vg stops counting), and a load that only partly
overlaps the store's bytes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numba
import numpy as np

#: elements between ``u``'s 4 KiB phase and ``v``'s start: aliased, and apart (a page)
ALIASED_OFFSET = 1
APART_OFFSET = 512
#: each timed call sweeps at least this many elements (repeating small working sets)
ELEMENTS_PER_CALL = 4_000_000
#: timed calls per placement and round; the best is the round's figure
REPEATS = 3
#: rounds (quick, full)
ROUNDS = (5, 15)
#: the ``apart`` time an element: the median of this many fastest rounds
BEST = 5
#: memory's working set: this many times the last level, at least MEMORY_MIN_BYTES
MEMORY_FACTOR = 4
MEMORY_MIN_BYTES = 64 * 1024 * 1024
PLACEMENTS = ("aliased", "apart")
#: an all-ones mask the compiler cannot see through (a positive int64: indices stay non-negative)
_MASK = (1 << 62) - 1


@numba.njit(cache=True)
def _sweep(u, v, mask, reps):
    n = u.shape[0]
    for _ in range(reps):
        for i in range(n):
            v[i & mask] = 0.5 * u[i] + 1.0
    return v[0]


@numba.njit(cache=True, parallel=True)
def _sweep_par(buf, starts, v_off, n, mask, reps):
    out = np.zeros(starts.shape[0])
    for t in numba.prange(starts.shape[0]):
        u0 = starts[t]
        out[t] = _sweep(buf[u0:u0 + n], buf[u0 + v_off:u0 + v_off + n], mask, reps)
    return out.sum()


def working_sets(levels: list[tuple[str, int, int]], n_cores: int = 1) -> list[tuple[str, int]]:
    """(level, bytes of both arrays together a core) for each data cache level ``(name,
    size_bytes, shared_by_cores)`` (smallest first) and memory, with ``n_cores`` cores sweeping at
    once (module docstring)."""
    n = max(int(n_cores), 1)
    out = [(name, max(int(size) // min(max(int(shared), 1), n) // 2, 8192)) for name, size, shared in levels]
    last = levels[-1][1] if levels else 0
    out.append(("memory", max(MEMORY_FACTOR * int(last), MEMORY_MIN_BYTES) // n))
    return out


class _Buffer:
    """One region a core, page-aligned, big enough for the largest working set: ``u`` at its start,
    ``v`` past it at ``u``'s 4 KiB phase plus the placement's offset."""

    def __init__(self, max_bytes: int, n_cores: int):
        n = max_bytes // 16
        self.pages = (n * 8 + 4095) // 4096 + 1
        self.region = 2 * self.pages * 512 + 2 * APART_OFFSET + 512
        self.region += -self.region % 512
        raw = np.empty(n_cores * self.region + 512)
        base = (-raw.ctypes.data % 4096) // 8
        self.buf = raw[base:base + n_cores * self.region]
        self.buf[:] = 1.0

    def time_element(self, ws_bytes: int, offset: int, n_cores: int) -> float:
        """Best of REPEATS timed calls, seconds an element (of each core's sweep)."""
        n = ws_bytes // 16
        v_off = self.pages * 512 + offset
        reps = max(1, ELEMENTS_PER_CALL // n)
        if n_cores == 1:
            u, v = self.buf[:n], self.buf[v_off:v_off + n]

            def call(r):
                _sweep(u, v, _MASK, r)
        else:
            starts = np.arange(n_cores, dtype=np.int64) * self.region

            def call(r):
                _sweep_par(self.buf, starts, v_off, n, _MASK, r)
        call(1)   # warm: pages touched, lines where the level holds them
        best = float("inf")
        for _ in range(REPEATS):
            t0 = time.perf_counter_ns()
            call(reps)
            best = min(best, (time.perf_counter_ns() - t0) * 1e-9 / (reps * n))
        return best


def core_counts() -> tuple[int, ...]:
    """(1,) on one core, else (1, all the cores this process may run on) (numba's threads capped)."""
    import os
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = min(n, numba.config.NUMBA_NUM_THREADS)
    return (1,) if n < 2 else (1, n)


def run(levels: list[tuple[str, int, int]], *, quick: bool = False, progress=None,
        cores: tuple[int, ...] | None = None, rounds: int | None = None, first_round: int = 0) -> dict:
    """Rows (level, n_cores, working_set_bytes, round, placement, seconds_per_element_s) and the
    derived stall per aliased load, ``{(level, n_cores): seconds}``; plain data (module docstring).
    ``levels``: (name, size_bytes, shared_by_cores) of the data cache levels, smallest first.
    ``rounds``: how many (default :data:`ROUNDS`), numbered from ``first_round`` (a caller that runs
    the rounds in chunks spread over a longer probe, pmac.probe.measure_node, numbers them on)."""
    cores = cores or core_counts()
    if max(cores) > 1:
        numba.set_num_threads(max(cores))
    sets = {c: working_sets(levels, c) for c in cores}
    buf = _Buffer(max(b for c in cores for _, b in sets[c]), max(cores))
    rounds = (ROUNDS[0] if quick else ROUNDS[1]) if rounds is None else int(rounds)
    rows = []
    for k in range(rounds):
        if progress:
            progress(k / rounds, f"4 KiB aliasing {k + 1}/{rounds}")
        for c in cores:
            for level, ws in sets[c]:
                for placement, off in (("aliased", ALIASED_OFFSET), ("apart", APART_OFFSET)):
                    rows.append({"level": level, "n_cores": c, "working_set_bytes": ws, "round": first_round + k,
                                 "placement": placement, "seconds_per_element_s": buf.time_element(ws, off, c)})
    if progress:
        progress(1.0, "4 KiB aliasing done")
    return {"rows": rows, "stall_s": stalls(rows)}


def stalls(rows, statistic: str = "best") -> dict[tuple[str, int], float]:
    """Per (level, n_cores), in the rows' order: the stall of one aliased load, seconds (module
    docstring), floored at 0: the median ratio less one times the apart time at ``statistic``
    (``best``: the median of the BEST fastest rounds; otherwise the median of all, as a profile
    pooled at the median takes its figures). ``rows``: dicts or a DataFrame's records with the
    columns of :func:`run`."""
    by: dict[tuple[str, int, int], dict[str, float]] = {}
    order: list[tuple[str, int]] = []
    for r in rows:
        key = (r["level"], int(r["n_cores"]))
        if key not in order:
            order.append(key)
        by.setdefault(key + (int(r["round"]),), {})[r["placement"]] = float(r["seconds_per_element_s"])
    out = {}
    for level in order:
        pairs = [p for k, p in by.items() if k[:2] == level and len(p) == 2]
        if not pairs:
            continue
        ratio = statistics.median(p["aliased"] / p["apart"] for p in pairs)
        apart = sorted(p["apart"] for p in pairs)
        out[level] = max(ratio - 1.0, 0.0) * statistics.median(apart[:BEST] if statistic == "best" else apart)
    return out


def _os_levels() -> list[tuple[str, int, int]]:
    """The data cache levels of cpu0 from sysfs (name, size_bytes, shared_by_cores), smallest first."""
    try:
        from probes.memory import cache_indices, shared_cpu_count
    except ImportError:     # run as a script from a checkout: probes/ is sys.path[0]
        from memory import cache_indices, shared_cpu_count

    return sorted(((f"L{level}", size, shared_cpu_count(shared)) for level, size, shared in cache_indices(0)),
                  key=lambda x: x[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{ROUNDS[0]} rounds instead of {ROUNDS[1]}")
    a = ap.parse_args(argv)
    res = run(_os_levels(), quick=a.quick)
    print(f"{'level':>7} {'cores':>5} {'KiB':>8} {'apart_ns/el':>12} {'aliased_ns/el':>14} {'stall_ns':>9}")
    for level, c, ws in dict.fromkeys((r["level"], r["n_cores"], r["working_set_bytes"]) for r in res["rows"]):
        med = {p: statistics.median(r["seconds_per_element_s"] for r in res["rows"] if r["level"] == level
                                    and r["n_cores"] == c and r["placement"] == p) for p in PLACEMENTS}
        print(f"{level:>7} {c:>5} {ws // 1024:>8} {med['apart'] * 1e9:>12.3f} {med['aliased'] * 1e9:>14.3f} "
              f"{res['stall_s'].get((level, c), 0.0) * 1e9:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time-to-solution of a signature on machine profiles: convolve the bursts, replay the MPI events.

``predict(signature, profiles)`` returns a :class:`Prediction` of tidy DataFrames:

- ``summary``: one row per machine: ``total_s`` (the last rank's finish), and the mean over
  ranks of ``compute_s`` (bursts), ``comm_s`` (time inside MPI not blocked on a partner) and
  ``wait_s`` (blocked on a partner); ``burst_source`` says where the burst times came from and
  ``independent`` whether the prediction used no measured time of the application (see below).
- ``per_rank``: one row per (machine, rank): node, finish/compute/comm/wait seconds.
- ``critical_path``: per (machine, rank) the time the critical path spends on that rank
  (walked back from the last rank to finish, jumping to the partner a call waited for; sums to
  ``total_s``) and its fraction of ``total_s``.
- ``timeline``: with ``timeline=True``, one row per (machine, event): the burst before the call
  (``burst_start_s``) and the call itself (``start_s``, ``end_s``).

Burst times (``burst_source``):

- ``'memory'``: from the memory signature through the convolver (pmac.convolve) and the
  machine's node section: a prediction that uses no measured time of the application. Events
  whose rank was not memory-traced (a sample of ranks) take the burst of the traced rank
  ``traced[rank % n_traced]`` with the same ``seq`` (SPMD assumption; counted in the notes);
  an event with no burst row has no compute before it.
- ``'measured'``: the ``burst_s`` the tracer measured: only honest on the machine that was
  traced; the summary marks such rows ``independent = False``.
- ``'auto'``: ``'memory'`` when the signature has a memory signature, else ``'measured'``.

Pollution (``pollution=True``, pmac.pollution): a call after a burst that evicted the caches
pays what the profile's links measured for it (the network probe's ``pollution`` test), from the
burst's reuse histograms and the profile's caches; counted as communication (its messages leave
that much later; in the timeline the call's ``start_s`` includes it). Needs the memory
signature, whatever the burst source: without one nothing is added (a note says so when the
profile has the curves).

Interpreter (``interpreter=True``, pmac.interpreter): a program that calls MPI from Python (its
memory signature runs libpython, or its command python) pays on each call to a peer what the
profile's interpreter test measured beyond the same call compiled (the network probe's
``interpreter`` test); counted as communication, added to the call's start as the pollution is.
Profiles without the test price the calls as a C program's, and a note says so.

Noise (``noise=K``, pmac.noise): with K > 0 and a profile that has ``node.noise`` (the noise
probe's series of each core's slowdown), the bursts are stretched as K draws of that series
(seeds 0..K-1, a random moment per node) and replayed K times; the prediction is the draw with
the median makespan (the lower one for even K), and a note gives the range. A profile without
the series is predicted without noise, and a note says so.

Thread level: the replay prices the calls with the profile's network measured at the MPI
thread level the traced program ran at (``SignatureHeader.mpi_thread_level``; the profile's
``network_variants``): MPICH's collectives cost several times more at MPI_THREAD_MULTIPLE
(mpi4py's default) than at single (C's MPI_Init). A profile without that level prices with its
main network, and a note says so.

Placement: ranks fill nodes block-wise, ``ranks_per_node`` per node (default: the node's core
count, i.e. one rank per core), so rank ``r`` is on node ``r // ranks_per_node``. A prediction
that needs more nodes than the profile has (``n_nodes``) is still made and says so in a note.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from . import convolve as _convolve
from .convolve import BurstArrays, burst_arrays, event_bursts, machine_coeffs
from .errors import InputError, MissingSectionError
from .expand import collapse_timeline, expand_for_replay, unreplayed_note
from .phases import convolve_phases, phases_of
from .profile import MachineProfile
from .signature import Signature, huge_page_fraction
from .trace import Op, op_name
from .units import format_quantity

BURST_SOURCES = ("auto", "measured", "memory")

SUMMARY_COLUMNS = ("machine", "signature", "n_ranks", "ranks_per_node", "n_nodes", "burst_source",
                   "independent", "total_s", "compute_s", "comm_s", "wait_s", "critical_rank")
PER_RANK_COLUMNS = ("machine", "rank", "node", "finish_s", "compute_s", "comm_s", "wait_s")
CRITICAL_COLUMNS = ("machine", "rank", "critical_s", "critical_frac")
TIMELINE_COLUMNS = ("machine", "rank", "seq", "op", "burst_start_s", "start_s", "end_s")


@dataclass(frozen=True, kw_only=True)
class Prediction:
    signature: str
    summary: pd.DataFrame
    per_rank: pd.DataFrame
    critical_path: pd.DataFrame
    timeline: pd.DataFrame
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        for name, cols in (("summary", SUMMARY_COLUMNS), ("per_rank", PER_RANK_COLUMNS),
                           ("critical_path", CRITICAL_COLUMNS), ("timeline", TIMELINE_COLUMNS)):
            df = getattr(self, name)
            if tuple(df.columns) != cols:
                raise ValueError(f"Prediction.{name}: columns {tuple(df.columns)} != {cols}")


@dataclass(frozen=True, kw_only=True)
class ReplayOut:
    """What predict needs from a replay (adapter over pmac.replay's result)."""

    finish_s: np.ndarray
    compute_s: np.ndarray
    comm_s: np.ndarray
    wait_s: np.ndarray
    #: time the critical path spends on each rank (sums to the makespan), or None
    critical_rank_s: np.ndarray | None = None
    #: with timeline: one row per call (rank, seq, op, start_s, end_s), sorted by (rank, seq)
    timeline: pd.DataFrame | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def topology_for(profile: MachineProfile, n_nodes: int):
    """The profile's topology (``network.topology``: ``{'simgrid': FILE}`` or ``{'kind': 'fat_tree'|
    'torus'|'dragonfly'|'star', ...keyword arguments}``); without one, a star of ``n_nodes`` hosts
    on links of the inter-node bandwidth. Returns (topology, note or None)."""
    from . import topology as tp

    spec = dict(profile.network.topology or {})
    link = profile.network.inter_node or profile.network.intra_node
    if not spec:
        return (tp.star(max(n_nodes, 1), bandwidth_bytes_per_s=link.bandwidth_bytes_per_s),
                "no topology in the profile: contention on a star of inter-node links")
    if "simgrid" in spec:
        return tp.from_simgrid(spec["simgrid"]), None
    kind = spec.pop("kind", None)
    gens = {"fat_tree": tp.fat_tree, "torus": tp.torus, "dragonfly": tp.dragonfly, "star": tp.star}
    if kind not in gens:
        raise InputError(f"machine '{profile.name}': network.topology kind must be one of "
                         f"{', '.join(gens)} or a 'simgrid' file, got {kind!r}")
    spec.setdefault("bandwidth_bytes_per_s", link.bandwidth_bytes_per_s)
    if "dims" in spec:
        spec["dims"] = tuple(spec["dims"])
    return gens[kind](**spec), None


def _replay(replayer, burst_s: np.ndarray, placement: np.ndarray, profile: MachineProfile, *,
            contention: bool, timeline: bool, measured_collectives: bool = False,
            collective_excess: bool = True) -> ReplayOut:
    """Adapter over :class:`pmac.replay.Replayer` (one per signature: matched once for every machine)."""
    from .replay import ReplayOptions

    notes = []
    topo = None
    if contention:
        topo, note = topology_for(profile, int(placement.max()) + 1)
        if note:
            notes.append(note)
    opts = ReplayOptions(contention=contention, topology=topo, timeline=timeline,
                         measured_collectives=measured_collectives, collective_excess=collective_excess)
    res = replayer.replay(burst_s, placement, profile.network, opts)
    tl = None
    if timeline and res.start_s is not None:
        tl = pd.DataFrame(dict(rank=np.asarray(res.event_rank, dtype=np.int64),
                               seq=np.asarray(res.event_seq, dtype=np.int64),
                               op=np.asarray(res.event_op, dtype=np.int64),
                               start_s=np.asarray(res.start_s, dtype=np.float64),
                               end_s=np.asarray(res.end_s, dtype=np.float64)))
    return ReplayOut(finish_s=np.asarray(res.finish_s, dtype=np.float64),
                     compute_s=np.asarray(res.compute_s, dtype=np.float64),
                     comm_s=np.asarray(res.comm_s, dtype=np.float64), wait_s=np.asarray(res.wait_s, dtype=np.float64),
                     critical_rank_s=np.asarray(res.critical_rank_s, dtype=np.float64), timeline=tl,
                     notes=tuple(notes))


def has_memory(sig: Signature) -> bool:
    """Does the signature carry a memory signature with bursts."""
    return bool(sig.memory) and "bursts" in sig.memory and len(sig.memory["bursts"]) > 0


def resolve_burst_source(sig: Signature, burst_source: str = "auto") -> str:
    if burst_source not in BURST_SOURCES:
        raise InputError(f"burst source must be one of {', '.join(BURST_SOURCES)}, got '{burst_source}'")
    if burst_source == "auto":
        return "memory" if has_memory(sig) else "measured"
    if burst_source == "memory" and not has_memory(sig):
        raise MissingSectionError(f"signature '{sig.name}'", "memory.bursts", path=sig.path,
                                  needed_by="predict --bursts memory (trace it with pmac trace --memory)")
    if burst_source == "measured" and sig.header.burst_source != "measured":
        raise InputError(f"signature '{sig.name}' has no measured burst times "
                         f"(burst_source: {sig.header.burst_source})", path=sig.path)
    return burst_source


def unreplayed_starts(ev: pd.DataFrame, requests: pd.DataFrame | None = None) -> int:
    """MPI_Start / MPI_Startall calls the replay cannot price: a Start whose request has no
    Send_init/Recv_init earlier on that rank, a Startall with such a request among the ones it
    names (``requests`` rows ``req_offset .. + n_requests``), or any Startall without ``requests``."""
    op = ev["op"].to_numpy()
    inits = ev[np.isin(op, (int(Op.SEND_INIT), int(Op.RECV_INIT)))]
    first_init: dict[tuple[int, int], int] = {}
    for r, q, s in zip(inits["rank"].tolist(), inits["request"].tolist(), inits["seq"].tolist()):
        first_init[(r, q)] = min(s, first_init.get((r, q), s))

    def known(r, q, s):
        return first_init.get((r, q), s) < s

    starts = ev[op == int(Op.START)]
    n = sum(not known(r, q, s) for r, q, s in zip(starts["rank"].tolist(), starts["request"].tolist(),
                                                   starts["seq"].tolist()))
    alls = ev[op == int(Op.STARTALL)]
    if len(alls) and (requests is None or len(requests) == 0):
        return n + len(alls)
    if len(alls):
        handles = requests["request"].to_numpy()
        for r, s, off, cnt in zip(alls["rank"].tolist(), alls["seq"].tolist(), alls["req_offset"].tolist(),
                                  alls["n_requests"].tolist()):
            off, cnt = int(off), int(cnt)
            rows = handles[off:off + cnt] if 0 <= off and off + cnt <= handles.size else [None]
            n += not all(h is not None and known(r, int(h), s) for h in rows)
    return int(n)


def ranks_per_node_for(profile: MachineProfile, ranks_per_node: int | None) -> int:
    if ranks_per_node is not None:
        if ranks_per_node <= 0:
            raise InputError(f"ranks per node must be positive, got {ranks_per_node}")
        return int(ranks_per_node)
    if profile.ranks_per_node is not None:
        return profile.ranks_per_node
    return profile.node.n_cores if profile.node is not None else 1


def at_thread_level(profiles: Sequence[MachineProfile], thread_level: str
                    ) -> tuple[list[MachineProfile], list[str]]:
    """Each profile with the network measured at the application's MPI thread level as its
    ``network`` (:meth:`MachineProfile.network_for`), and the notes of those that have none there."""
    out, notes = [], []
    for p in profiles:
        net, note = p.network_for(thread_level)
        out.append(p if net is p.network else dataclasses.replace(p, network=net, network_variants=()))
        if note:
            notes.append(note)
    return out, notes


def needed_sections(profile: MachineProfile, sig: Signature, *, burst_source: str = "auto",
                    ranks_per_node: int | None = None) -> list[str]:
    """The sections ``profile`` lacks for predicting ``sig`` (empty: it can be predicted)."""
    src = resolve_burst_source(sig, burst_source)
    want = ["network.intra_node"]
    if src == "memory":
        want += ["node", "node.compute"]
    elif ranks_per_node is None:
        want += ["node"]
    lacking = profile.missing(tuple(want))
    if "node" not in lacking:
        rpn = ranks_per_node_for(profile, ranks_per_node)
        if sig.n_ranks > rpn:
            lacking += profile.missing(("network.inter_node",))
    return lacking


#: how predict sizes the cache levels (see predict)
CAPACITY_MODES = ("nominal", "curve")


_UNSET = object()


def active_cores_for(profiles: Sequence[MachineProfile], ranks_per_node: int | None, n_ranks: int) -> list[int]:
    """Per profile, the ranks sharing a node as :func:`predict` places them (block-wise)."""
    return [min(ranks_per_node_for(p, ranks_per_node), n_ranks) for p in profiles]


def coeffs_for(profiles: Sequence[MachineProfile], active_cores: Sequence[int], capacity: str = "nominal"):
    """The convolver's coefficients of each profile at its active cores and cache sizing."""
    return [machine_coeffs(p, active_cores=a, soft_capacity=capacity == "curve") for p, a in zip(profiles, active_cores)]


def memory_burst_times(sig: Signature, profiles: Sequence[MachineProfile], active_cores: Sequence[int],
                       ba: BurstArrays | None = None, capacity: str = "nominal", *,
                       phases=_UNSET) -> tuple[np.ndarray, dict]:
    """Convolved burst time before every event (machines x events) and diagnostics; ``ba``: the
    signature's bursts as arrays when already built, ``phases`` their pmac.phases.phases_of (which
    depends on the signature only); ``capacity``: one of CAPACITY_MODES."""
    ba = burst_arrays(sig.memory) if ba is None else ba
    ms = coeffs_for(profiles, active_cores, capacity)
    ph = phases_of(sig.memory, ba) if phases is _UNSET else phases
    res, _, _ = convolve_phases(ba, ph, ms)
    ev = sig.events
    idx, untraced = event_bursts(ba, ev)
    found = idx >= 0
    out = np.zeros((len(ms), len(ev)))
    out[:, found] = res.time_s[:, idx[found]]
    n_untraced = len(np.unique(ev["rank"].to_numpy()[untraced]))
    diag = dict(n_untraced_ranks=n_untraced, n_events_without_burst=int((~found).sum()),
                n_borrowed_hist=ba.n_borrowed_hist, n_bursts=ba.n_bursts,
                n_phased=0 if ph is None else len(np.unique(ph.burst)),
                split_recorded="burst_functions" in sig.memory,
                memory_s=res.memory_s.sum(axis=1), compute_s=res.compute_s.sum(axis=1),
                coeff_notes=[m.notes for m in ms])
    return out, diag


def _has_pollution_curve(p: MachineProfile) -> bool:
    net = p.network
    links = () if net is None else (net.intra_node, net.inter_node)
    return any(lk is not None and bool(lk.pollution_bytes) for lk in links)


def _pollution_s(sig: Signature, ex, ba: BurstArrays | None, p: MachineProfile,
                 placement: np.ndarray) -> np.ndarray | None:
    """Seconds each replayed event's call pays for its burst's pollution (pmac.pollution), or None
    when the signature has no memory or the profile no caches or curve."""
    if ba is None or p.node is None or not p.node.caches or not _has_pollution_curve(p):
        return None
    from .pollution import event_excess

    x = event_excess(sig.events, ba, p.node.caches, p.network.intra_node, p.network.inter_node, placement,
                     sig.comms)
    return _on_replayed(ex, x)


def _on_replayed(ex, x: np.ndarray) -> np.ndarray:
    """A per-event cost of the signature's events on the replayed events (pmac.expand): each
    signature event's on the first event it expanded to, 0 on the others."""
    return np.where(ex.first, x[ex.source_row], 0.0) if ex.changed else x


def _interpreter_s(sig: Signature, ex, p: MachineProfile, placement: np.ndarray) -> np.ndarray | None:
    """Seconds each replayed event's call pays for being made from an interpreter
    (pmac.interpreter), or None when the profile's network has no such figures."""
    from .interpreter import event_excess, has_figures

    net = p.network
    if not has_figures(net):
        return None
    return _on_replayed(ex, event_excess(sig.events, net, placement, sig.comms))


def _per_call(events: pd.DataFrame, x: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
    """A per-event cost of the replayed ``events`` summed per call (rank, seq) and read at the
    timeline's ``rows`` (0 where a call has none)."""
    by_call = pd.Series(x, index=pd.MultiIndex.from_arrays([events["rank"].to_numpy(), events["seq"].to_numpy()]))
    by_call = by_call.groupby(level=[0, 1]).sum()
    return by_call.reindex(pd.MultiIndex.from_arrays([rows["rank"].to_numpy(), rows["seq"].to_numpy()])
                           ).fillna(0.0).to_numpy()


def _sum_or_none(*xs: np.ndarray | None) -> np.ndarray | None:
    """The sum of the arrays given, None when all are None."""
    got = [x for x in xs if x is not None]
    return None if not got else sum(got[1:], got[0])


#: relative difference of a machine's compute between the two capacity modes beyond which predict
#: says that the prediction hangs on where a cache level's edge is
EDGE_NOTE_FRAC = 0.10


def edge_notes(sig: Signature, profiles: Sequence[MachineProfile], active_cores: Sequence[int],
               ba: BurstArrays | None, bursts: np.ndarray, capacity: str, *, phases=_UNSET) -> list[str]:
    """Notes for the machines whose convolved compute (summed over all calls) moves by more than
    :data:`EDGE_NOTE_FRAC` between nominal cache sizes and those read off the profile's load curve
    (pmac.capacity): the application's working set sits at a level's edge, and the prediction
    depends on where that edge really is. ``bursts``: the burst times with ``capacity`` (the mode
    predicted)."""
    if not any(p.node is not None and p.node.bandwidth_curves for p in profiles):
        return []      # no curve to read a capacity off: both sizings are the nominal one
    other = "nominal" if capacity == "curve" else "curve"
    alt, _ = memory_burst_times(sig, profiles, active_cores, ba, other, phases=phases)
    out = []
    for k, p in enumerate(profiles):
        a, b = float(bursts[k].sum()), float(alt[k].sum())
        if a > 0 and abs(b - a) > EDGE_NOTE_FRAC * a:
            out.append(f"{p.name}: a working set sits at a cache level's edge: the calls' compute sums to "
                       f"{a:.4g} s with {capacity} cache sizes, {b:.4g} s with the other's (pmac predict "
                       f"--capacity {other}; pmac.capacity)")
    return out


def pages_note(sig: Signature, profile: MachineProfile) -> str | None:
    """A note when the traced program's memory and the profile's memory probe were on different
    pages (huge or 4 KiB): beyond the L2 a probe on huge pages measures faster memory than a
    program on 4 KiB pages sees (docs/probing.md: 4-17 % for loads on the Xeon VM). None when they
    agree or either is not recorded (signatures traced before stop 32, profiles before stop 31)."""
    frac = huge_page_fraction(sig.header)
    pages = profile.provenance.get("pages")
    if frac is None or not isinstance(pages, dict) or not pages.get("in_effect"):
        return None
    probe_huge = str(pages["in_effect"]).startswith("huge") and "not asked for" not in str(pages["in_effect"])
    if probe_huge == (frac >= 0.5):
        return None
    return (f"{profile.name}: memory probed on {pages['in_effect']}, the traced program had {100 * frac:.0f} % "
            f"of its anonymous memory on huge pages: working sets beyond the L2 are priced for other pages "
            f"than it ran on (pmac probe --pages {'default' if probe_huge else 'huge'} probes them as it ran)")


def interpreter_note(sig: Signature, profiles: Sequence[MachineProfile] = (), *, priced: bool = True) -> str | None:
    """A note for a program that calls MPI from a Python interpreter (pmac.interpreter.python_program),
    None otherwise: the interpreter it runs in, its busiest rank's calls (Init and Finalize left
    out), and whether each profile prices the interpreter's cost to its calls (the network probe's
    ``interpreter`` test, pmac.interpreter) or not (profiles probed before 28 Nov 2026, or
    ``priced=False``: pmac predict --no-interpreter)."""
    from .interpreter import has_figures, python_program

    found = python_program(sig.memory, sig.header.command)
    if found is None:
        return None
    ev = sig.events
    calls = ev.loc[~ev["op"].isin((int(Op.INIT), int(Op.FINALIZE)))].groupby("rank").size()
    n = int(calls.max()) if len(calls) else 0
    head = f"the program calls MPI from a Python interpreter ({found}; {n} calls on its busiest rank)"
    why = ("what an interpreter between calls adds to each is not priced here (0-0.9 us an 8 B call on the EPYC VM, "
           "docs/probing.md, network probe)")
    if not priced:
        return head + f": its calls are priced as a C program's (--no-interpreter): {why}"
    lacking = [p.name for p in profiles if not has_figures(p.network)]
    if not lacking:
        return head + ": each call to a peer pays what the machine's interpreter test measured (pmac.interpreter)"
    return (head + f": {', '.join(lacking)} without the network probe's interpreter test (probed before 28 Nov "
            f"2026, or with the Python backend; pmac probe measures it): priced as a C program's calls, {why}")


def predict(sig: Signature, profiles: Sequence[MachineProfile], *, ranks_per_node: int | None = None,
            burst_source: str = "auto", contention: bool = False, timeline: bool = False,
            measured_collectives: bool = False, collective_excess: bool = True,
            pollution: bool = True, noise: int = 0, capacity: str | None = None,
            interpreter: bool = True) -> Prediction:
    """Predict ``sig`` on every profile (see module docstring).

    ``interpreter``: a Python program's calls pay what the profile's interpreter test measured
    (pmac.interpreter; off: priced as a C program's).

    ``capacity``: ``nominal`` (each cache level at its size), ``curve`` (a distribution read off
    the profile's load curve, pmac.capacity) or None (pmac.convolve.SOFT_CAPACITY decides).
    """
    if capacity not in (None,) + CAPACITY_MODES:
        raise InputError(f"predict: capacity must be one of {', '.join(CAPACITY_MODES)}, not {capacity!r}")
    capacity = capacity or ("curve" if _convolve.SOFT_CAPACITY else "nominal")
    if noise < 0:
        raise InputError(f"predict: noise draws must be >= 0, got {noise}")
    if not profiles:
        raise InputError("predict: no machine profiles given")
    src = resolve_burst_source(sig, burst_source)
    notes: list[str] = []
    for p in profiles:
        lacking = needed_sections(p, sig, burst_source=src, ranks_per_node=ranks_per_node)
        if lacking:
            raise MissingSectionError(f"machine '{p.name}'", lacking[0], needed_by=f"predict {sig.name}")
    profiles, level_notes = at_thread_level(profiles, sig.header.mpi_thread_level)
    notes += level_notes
    if (inote := interpreter_note(sig, profiles, priced=interpreter)) is not None:
        notes.append(inote)
    python = inote is not None
    rpns = [ranks_per_node_for(p, ranks_per_node) for p in profiles]
    n = sig.n_ranks
    ev = sig.events
    # the bursts as arrays: for the convolver, and for the pollution where a profile has its curves
    want_ba = src == "memory" or (pollution and any(_has_pollution_curve(p) for p in profiles))
    ba = burst_arrays(sig.memory) if has_memory(sig) and want_ba else None
    if src == "memory":
        actives = active_cores_for(profiles, ranks_per_node, n)
        ph = phases_of(sig.memory, ba)   # the signature's alone: once for both sizings
        bursts_all, diag = memory_burst_times(sig, profiles, actives, ba, capacity, phases=ph)
        notes += edge_notes(sig, profiles, actives, ba, bursts_all, capacity, phases=ph)
        if diag["n_untraced_ranks"]:
            notes.append(f"{diag['n_untraced_ranks']} rank(s) without a memory trace take the bursts of a traced rank")
        if diag["n_events_without_burst"]:
            notes.append(f"{diag['n_events_without_burst']} event(s) have no memory burst: no compute before them")
        if diag["n_borrowed_hist"]:
            notes.append(f"{diag['n_borrowed_hist']} burst(s) had an empty sampled histogram and use their rank's "
                         "whole histogram (pmac.convolve.burst_arrays)")
        if diag["n_phased"]:
            notes.append(f"{diag['n_phased']} of {diag['n_bursts']} burst(s) run several functions one after another: "
                         "priced function by function (pmac.phases)")
        elif not diag["split_recorded"]:
            notes.append("the memory signature does not split bursts by function (traced before signature version 4): "
                         "each burst is priced as one; pmac trace --memory again to split them")
        for p, cn in zip(profiles, diag["coeff_notes"]):
            notes += [f"{p.name}: {x}" for x in cn]
            if (pn := pages_note(sig, p)) is not None:
                notes.append(pn)
    else:
        measured = ev["burst_s"].to_numpy(np.float64)
        bursts_all = np.broadcast_to(measured, (len(profiles), len(ev)))
        notes.append("burst times measured on the traced machine: honest only for that machine")
    # neighbourhood collectives as their messages, persistent collectives' starts as the
    # non-blocking collective they run (pmac.expand); what stays unpriced is named
    ex = expand_for_replay(ev, sig.requests, sig.vcounts)
    sig_r = sig
    if ex.changed:
        bursts_all = np.where(ex.first, bursts_all[:, ex.source_row], 0.0)
        sig_r = dataclasses.replace(sig, events=ex.events, requests=ex.requests)
    notes += list(ex.notes)
    if (unpriced := unreplayed_note(ex.events)) is not None:
        notes.append(unpriced)
    n_started = unreplayed_starts(ex.events, ex.requests)
    if n_started:
        notes.append(f"{n_started} MPI_Start/Startall call(s) of persistent requests are not replayed "
                     "(their Send_init/Recv_init is not in the trace): their messages take no time")
    app = str(sig.header.parameters.get("app", sig.name))
    from .replay import Replayer

    replayer = Replayer(sig_r.events, requests=sig_r.requests, comms=sig_r.comms, n_ranks=sig_r.n_ranks)
    rows, per_rank, crit, tl = [], [], [], []
    runs: list = []   # the events of each rank in call order (pmac.noise.rank_runs), for --noise
    for k, p in enumerate(profiles):
        rpn = rpns[k]
        placement = (np.arange(n) // rpn).astype(np.int32)
        n_nodes = int(placement.max()) + 1
        if n_nodes > p.n_nodes:
            notes.append(f"{p.name}: {n_nodes} nodes needed at {rpn} ranks per node, the profile has {p.n_nodes}")
        if src == "memory" and p.overlap is not None and (app in p.overlap.calibrated_on
                                                          or sig.name in p.overlap.calibrated_on):
            notes.append(f"{p.name}: overlap model calibrated on '{app}' itself: not an independent prediction")
        burst = np.ascontiguousarray(bursts_all[k])
        pol_s = _pollution_s(sig, ex, ba, p, placement) if pollution else None
        int_s = _interpreter_s(sig, ex, p, placement) if python and interpreter else None
        if pol_s is None and pollution and _has_pollution_curve(p):
            notes.append(f"{p.name}: no memory signature (or no caches in the profile): calls after bursts "
                         "that evict the caches are not charged for it (pmac.pollution)")
        noisy = bool(noise) and p.node is not None and p.node.noise is not None
        if noise and not noisy:
            notes.append(f"{p.name}: no noise model in the profile (probed before profile version 11): "
                         "predicted without noise")

        # what the calls pay beyond the profile's price (inside the call: communication, not compute)
        call_s = _sum_or_none(pol_s, int_s)

        def bursts_of(seed: int | None, burst=burst, p=p, placement=placement, call_s=call_s) -> np.ndarray:
            b = burst
            if seed is not None:
                from .noise import perturb, rank_runs

                ev_rank, ev_seq = sig_r.events["rank"].to_numpy(), sig_r.events["seq"].to_numpy()
                if not runs:    # once per signature, for every draw and machine
                    runs.append(rank_runs(ev_rank, ev_seq))
                b = perturb(burst, ev_rank, ev_seq, placement, p.node.noise, np.random.default_rng(seed),
                            runs=runs[0])
            return b if call_s is None else b + call_s

        def replayed(seed: int | None, tl: bool, placement=placement, p=p) -> ReplayOut:
            return _replay(replayer, bursts_of(seed), placement, p, contention=contention, timeline=tl,
                           measured_collectives=measured_collectives, collective_excess=collective_excess)

        if noisy:   # every draw replayed without a timeline (memory stays one replay's)
            draws = [replayed(k, False) for k in range(noise)]
            totals = np.array([float(d.finish_s.max()) for d in draws])
            seed = int(np.argsort(totals, kind="stable")[(noise - 1) // 2])      # the median draw (lower)
            notes.append(f"{p.name}: noise (pmac.noise): the median of {noise} draw(s); they ranged "
                         f"{format_quantity(float(totals.min()), 's')} to {format_quantity(float(totals.max()), 's')}")
            r = replayed(seed, True) if timeline else draws[seed]      # its timeline: that draw again
        else:
            r = replayed(None, timeline)
        if call_s is not None:  # inside the call, not compute
            xr = np.bincount(sig_r.events["rank"].to_numpy(np.int64), weights=call_s, minlength=n)[:n]
            r = dataclasses.replace(r, compute_s=r.compute_s - xr, comm_s=r.comm_s + xr)
            for x, what, mod in ((pol_s, "calls after bursts that evicted the caches", "pmac.pollution"),
                                 (int_s, "calls made from the interpreter", "pmac.interpreter")):
                if x is not None and x.any():
                    notes.append(f"{p.name}: {what}: +{format_quantity(float(x.sum()) / n, 's')} of communication "
                                 f"a rank ({mod})")
        notes += [f"{p.name}: {x}" for x in r.notes]
        crit_rank = int(np.argmax(r.finish_s))
        rows.append(dict(machine=p.name, signature=sig.name, n_ranks=n, ranks_per_node=rpn, n_nodes=n_nodes,
                         burst_source=src, independent=(src == "memory"), total_s=float(r.finish_s.max()),
                         compute_s=float(r.compute_s.mean()), comm_s=float(r.comm_s.mean()),
                         wait_s=float(r.wait_s.mean()), critical_rank=crit_rank))
        per_rank.append(pd.DataFrame(dict(machine=p.name, rank=np.arange(n), node=placement, finish_s=r.finish_s,
                                          compute_s=r.compute_s, comm_s=r.comm_s, wait_s=r.wait_s)))
        if r.critical_rank_s is not None:
            tot = float(r.finish_s.max())
            crit.append(pd.DataFrame(dict(machine=p.name, rank=np.arange(n), critical_s=r.critical_rank_s,
                                          critical_frac=r.critical_rank_s / tot if tot > 0 else 0.0)))
        if timeline and r.timeline is not None:
            t = collapse_timeline(r.timeline, ev) if ex.changed else r.timeline
            t = t.sort_values(["rank", "seq"], kind="stable").reset_index(drop=True)
            if call_s is not None:      # the charges are inside the call: it starts that much earlier
                t = t.assign(start_s=t["start_s"] - _per_call(sig_r.events, call_s, t))
            prev_end = t.groupby("rank")["end_s"].shift(1).fillna(0.0)
            tl.append(pd.DataFrame(dict(machine=p.name, rank=t["rank"], seq=t["seq"],
                                        op=[op_name(o) for o in t["op"]], burst_start_s=prev_end,
                                        start_s=t["start_s"], end_s=t["end_s"])))
    empty = lambda cols: pd.DataFrame({c: [] for c in cols})  # noqa: E731
    return Prediction(
        signature=sig.name,
        summary=pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS)),
        per_rank=pd.concat(per_rank, ignore_index=True)[list(PER_RANK_COLUMNS)],
        critical_path=pd.concat(crit, ignore_index=True)[list(CRITICAL_COLUMNS)] if crit else empty(CRITICAL_COLUMNS),
        timeline=pd.concat(tl, ignore_index=True)[list(TIMELINE_COLUMNS)] if tl else empty(TIMELINE_COLUMNS),
        notes=tuple(dict.fromkeys(notes)))

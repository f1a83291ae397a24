"""Sensitivity sweeps: what a hardware change would buy (``pmac sweep``).

A *knob* names one attribute of a machine profile; a sweep predicts a signature on the profile as
it is and on copies with that attribute scaled by each factor (``dataclasses.replace``: the
profile is never changed in place), and reports each copy's predicted time against the
profile's own. Every copy of every knob is predicted in one :func:`pmac.predict.predict` call,
so the convolver prices all of them in one pass.

Knobs (``KNOBS``; ``LEVEL`` is a data cache level of the profile, e.g. ``L2``):

- ``network.mpi_latency``, ``network.latency``, ``network.bandwidth``, ``network.overhead``: every
  link of the network (intra- and inter-node, and the network of every MPI thread level the
  profile holds); ``network.intra.*`` and ``network.inter.*`` one of the two. ``mpi_latency`` is
  what an MPI latency figure quotes, a small message's one-way time in a ping-pong: the wire's
  latency and the send and receive overheads (LogGP's L + 2 o), all three scaled. ``latency``
  scales the wire's alone, the latency of each of the link's fitted segments (and its summary
  ``latency_s``): on the profiles shipped 0-0.4 us of a 1-9 us one-way time, the rest overheads
  (``pmac show``). ``overhead`` scales the send and receive overheads alone (the processor's time
  in a call). ``bandwidth`` scales the bandwidth of each segment, the summary and streaming
  bandwidths, or, for a link behind a token-bucket shaper (a cloud NIC's rate allowance, the
  emulated cluster's tbf), the shaper's rate, the line under it unchanged (the emulated
  cluster's what-if: halving a shaped link's rate predicted +100.0 %, measured +99.4 to +100.0 %,
  ``bench/validate_emulated``). The measured ping-pong table of a scaled link is dropped: it
  describes the link as it was. What the library costs beyond the messages (the collectives' and
  exchanges' excess, an interpreter's cost to a call, the pollution of the caches) stays:
  software, not the link. Collectives are priced by algorithm on the scaled links (the measured
  collective times describe the link as it was).
- ``memory.bandwidth``: main memory's bandwidths, one core and all cores, every access kind.
- ``LEVEL.size``: the level's capacity (the convolver's hit rates follow from the signature's
  reuse distances; the level's bandwidth curve is not stretched, so only nominal capacities, the
  default of ``pmac predict``, follow the knob). The copy keeps the size the probes met
  (``CacheLevel.probed_size_bytes``): a call after a burst pays for the share of the level the
  burst evicted at the new size, at what losing the level cost as probed (pmac.pollution).
- ``LEVEL.bandwidth``: the level's bandwidths, one core and all cores, every access kind.
- ``compute.flops``: the flop rates (scalar, SIMD) and the divider's rate. Latencies (a dependent
  chain's operation, a mispredicted branch, a loop's own work) stay: a wider or more numerous FP
  unit, not a faster clock.
- ``alias.stall``: the 4 KiB-aliasing probe's stalls (``node.alias``, every level, one core and
  all): a core that holds a load matching a recent store's low 12 address bits back for shorter
  or longer (its figure: the last level's stall with all cores busy). Only for profiles that have
  the probe; a core without the stall is a small factor (factors are positive).

A knob is scaled by factors, or set to values of the figure a specification quotes for it
(:func:`figure`: the factor is the value over the profile's figure); with ``together`` every
change goes into one copy (a candidate machine that differs in several ways).

The result is a table with one row per (signature, machine, knob, factor): the knob's figure in
the copy, predicted total, compute, communication and wait, and ``time_ratio`` (the copy's time
over the profile's own; below 1 the change buys time) with ``speedup_ratio`` its inverse. The
profile's own prediction is the row with knob ``base`` and factor 1.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from .errors import InputError, MissingSectionError
from .predict import predict
from .capacity import is_data_level
from .profile import LinkModel, MachineProfile, NetworkModel
from .signature import Signature
from .units import parse_quantity

#: the knobs that do not depend on the profile's cache names (``LEVEL.size``/``.bandwidth`` do)
LINK_ATTRIBUTES = ("mpi_latency", "latency", "bandwidth", "overhead")
NETWORK_KNOBS = tuple(f"network{scope}.{what}" for scope in ("", ".intra", ".inter") for what in LINK_ATTRIBUTES)
#: what ``pmac sweep`` varies when told nothing: the procurement questions of the module docstring
DEFAULT_FACTORS = (0.5, 2.0)
#: ``value``: the knob's figure in the copy (:func:`figure`, in ``unit``; NaN for the profile's own
#: row, a copy of several knobs, or a figure the profile does not have as one number)
SWEEP_COLUMNS = ("signature", "machine", "knob", "factor", "value", "unit", "total_s", "compute_s", "comm_s",
                 "wait_s", "time_ratio", "speedup_ratio")
_KNOB_RE = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)+$")


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One attribute of a profile and the factors to scale it by, or the values to set its figure
    to (:func:`figure`, in SI base units: ``values``); one of the two."""

    name: str
    factors: tuple[float, ...] = ()
    values: tuple[float, ...] = ()

    def __post_init__(self):
        if not _KNOB_RE.match(self.name):
            raise InputError(f"sweep: knob {self.name!r} is not of the form PART.ATTRIBUTE (e.g. network.latency)")
        if bool(self.factors) == bool(self.values):
            raise InputError(f"sweep: knob {self.name} needs factors or values, not {'both' if self.factors else 'neither'}")
        for f in self.factors + self.values:
            if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
                raise InputError(f"sweep: knob {self.name}: {'factors' if self.factors else 'values'} must be "
                                 f"positive numbers, got {f!r}")

    def factors_for(self, profile: MachineProfile) -> tuple[float, ...]:
        """The factors that take this profile's figure to ``values`` (or ``factors`` as given)."""
        if self.factors:
            return self.factors
        apply_knob(profile, self.name, 1.0)   # an unknown knob, or a section missing, said as apply_knob says it
        now = figure(profile, self.name)
        if now is None or not now > 0:
            raise InputError(f"sweep: {self.name} of machine '{profile.name}' is "
                             f"{'not one figure (its links differ: name the link, network.intra or network.inter)' if now is None else 'zero'}"
                             ": it cannot be set, only scaled")
        return tuple(v / now for v in self.values)


def parse_knob(text: str, *, set_values: bool = False) -> Knob:
    """``NAME=F1,F2,...`` (or ``NAME`` alone: the default factors 0.5 and 2) as a :class:`Knob`;
    with ``set_values``, ``NAME=V1,V2,...`` the figures to set (units allowed: 1.2us, 96MiB,
    200GB/s, 3Tflop/s; a bare number is in SI base units)."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep:
        if set_values:
            raise InputError(f"sweep: --set {text!r}: no value (NAME=VALUE, e.g. L3.size=96MiB)")
        return Knob(name=name, factors=DEFAULT_FACTORS)
    Knob(name=name, factors=(1.0,))   # the name, checked before the values
    out = []
    for part in rest.split(","):
        part = part.strip()
        if set_values:
            unit = FIGURE_UNITS.get(name.rpartition(".")[2])
            try:
                out.append(parse_quantity(part, unit))
            except InputError as exc:
                raise InputError(f"sweep: --set {text!r}: {exc}") from None
            continue
        try:
            out.append(float(part.removeprefix("x")))
        except ValueError:
            raise InputError(f"sweep: --vary {text!r}: {part!r} is not a number (NAME=F1,F2,..., e.g. "
                             "network.latency=0.5,2)") from None
    return Knob(name=name, values=tuple(out)) if set_values else Knob(name=name, factors=tuple(out))


#: each attribute's figure (:func:`figure`) and its unit
FIGURE_UNITS = {"mpi_latency": "s", "latency": "s", "overhead": "s", "stall": "s", "bandwidth": "bytes_per_s",
                "size": "bytes", "flops": "flop_per_s"}


def _link_figure(link: LinkModel, what: str) -> float:
    w0 = float(link.transfer_time_s(0.0))
    o = link.send_overhead_s + link.recv_overhead_s
    if what == "bandwidth":
        return link.shaper_rate_bytes_per_s if link.shaped else link.bandwidth_bytes_per_s
    return {"mpi_latency": w0 + o, "latency": w0, "overhead": o}[what]


def figure(profile: MachineProfile, knob: str) -> float | None:
    """The figure a specification quotes for what ``knob`` scales, as the profile has it (SI base
    units, :data:`FIGURE_UNITS`): ``mpi_latency`` a 0-byte message's one-way time, overheads
    included; ``latency`` its wire time; ``overhead`` send plus receive overhead; a link's
    ``bandwidth`` its large-message bandwidth (a shaped link's rate); ``memory.bandwidth`` and
    ``LEVEL.bandwidth`` the unit-stride load bandwidth of all cores together (of one core where
    the profile has no all-core figure); ``LEVEL.size`` its size; ``compute.flops`` a core's SIMD
    flop rate. None where the knob's links differ (``network.*`` over an intra- and an inter-node
    link of different figures) or the profile lacks the section. Scaling the knob by f scales
    its figure by f."""
    head, _, what = knob.rpartition(".")
    if head.startswith("network"):
        net = profile.network
        links = [getattr(net, f) for f in _links_of(net, head.partition(".")[2])] if net is not None else []
        vals = {_link_figure(lk, what) for lk in links} if what in LINK_ATTRIBUTES else set()
        return vals.pop() if len(vals) == 1 else None
    node = profile.node
    if node is None:
        return None
    if knob == "compute.flops":
        return node.compute.flop_per_s_simd if node.compute is not None else None
    if knob == "alias.stall":
        a = node.alias
        if a is None:
            return None
        caches = [x for x in a.levels if x != "memory"] or list(a.levels)
        return a.stall_at(caches[-1], a.n_cores_all)
    level = node.memory if head == "memory" else next((c for c in node.caches if c.name == head), None)
    if level is None:
        return None
    if what == "size":
        return float(level.size_bytes) if head != "memory" else None
    if what == "bandwidth":
        for d in (level.bandwidth_allcores_bytes_per_s, level.bandwidth_1core_bytes_per_s):
            if d:
                return float(d.get("load_unit", next(iter(d.values()))))
    return None


def data_levels(profile: MachineProfile) -> list[str]:
    return [lev.name for lev in (profile.node.caches if profile.node else ()) if is_data_level(lev.name)]


def knobs_of(profile: MachineProfile) -> list[str]:
    """The knobs this profile has the sections for, in the order of the module docstring."""
    out = []
    net = profile.network
    for name in NETWORK_KNOBS:
        scope = name.split(".")[1] if name.count(".") == 2 else ""
        if net is not None and _links_of(net, scope):
            out.append(name)
    if profile.node is not None:
        out.append("memory.bandwidth")
        for lev in data_levels(profile):
            out += [f"{lev}.size", f"{lev}.bandwidth"]
        if profile.node.compute is not None:
            out.append("compute.flops")
        if profile.node.alias is not None:
            out.append("alias.stall")
    return out


def default_knobs(profile: MachineProfile) -> list[Knob]:
    """Halve and double the network's MPI latency and bandwidth, memory's bandwidth, the last
    cache level's size and the flop rates: what the profile has of them."""
    have = knobs_of(profile)
    levels = data_levels(profile)
    wanted = ["network.mpi_latency", "network.bandwidth", "memory.bandwidth"]
    if levels:
        wanted.append(f"{levels[-1]}.size")
    wanted.append("compute.flops")
    return [Knob(name=k, factors=DEFAULT_FACTORS) for k in wanted if k in have]


def _links_of(net: NetworkModel, scope: str) -> list[str]:
    fields = {"": ("intra_node", "inter_node"), "intra": ("intra_node",), "inter": ("inter_node",)}[scope]
    return [f for f in fields if getattr(net, f) is not None]


def scale_link(link: LinkModel, what: str, factor: float) -> LinkModel:
    """The link with its latency, bandwidth or overheads scaled (module docstring)."""
    if what == "latency":
        segs = tuple(dataclasses.replace(s, latency_s=s.latency_s * factor) for s in link.segments)
        return dataclasses.replace(link, latency_s=link.latency_s * factor, segments=segs, msg_bytes=(), one_way_s=())
    if what == "bandwidth":
        if link.shaped:
            return dataclasses.replace(link, shaper_rate_bytes_per_s=link.shaper_rate_bytes_per_s * factor,
                                       msg_bytes=(), one_way_s=())
        segs = tuple(dataclasses.replace(s, bandwidth_bytes_per_s=s.bandwidth_bytes_per_s * factor)
                     for s in link.segments)
        stream = link.streaming_bandwidth_bytes_per_s
        return dataclasses.replace(link, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * factor, segments=segs,
                                   streaming_bandwidth_bytes_per_s=None if stream is None else stream * factor,
                                   msg_bytes=(), one_way_s=())
    if what == "overhead":
        return dataclasses.replace(link, send_overhead_s=link.send_overhead_s * factor,
                                   recv_overhead_s=link.recv_overhead_s * factor)
    if what == "mpi_latency":
        return scale_link(scale_link(link, "latency", factor), "overhead", factor)
    raise InputError(f"sweep: a link has no {what!r} ({', '.join(LINK_ATTRIBUTES)})")


def _scale_network(net: NetworkModel, scope: str, what: str, factor: float) -> NetworkModel:
    return dataclasses.replace(net, **{f: scale_link(getattr(net, f), what, factor) for f in _links_of(net, scope)})


def _scale_dicts(level, factor: float):
    return dataclasses.replace(
        level,
        bandwidth_1core_bytes_per_s={k: v * factor for k, v in level.bandwidth_1core_bytes_per_s.items()},
        bandwidth_allcores_bytes_per_s={k: v * factor for k, v in level.bandwidth_allcores_bytes_per_s.items()})


def variant_name(profile: MachineProfile, knob: str, factor: float) -> str:
    return f"{profile.name} {knob} x{factor:g}"


def apply_knob(profile: MachineProfile, knob: str, factor: float) -> MachineProfile:
    """A copy of ``profile`` with ``knob`` scaled by ``factor``, named after the change, its
    provenance listing the changes made to the measured profile (``what_if``: a copy saved to a
    file does not pass for a machine measured). An unknown knob, or one whose section the profile
    lacks, is an :class:`InputError` / :class:`MissingSectionError` naming the machine and what it
    has."""
    out = _scaled(profile, knob, factor)
    prov = dict(profile.provenance or {})
    prov["what_if"] = [*prov.get("what_if", []), f"{knob} x{factor:g}"]
    return dataclasses.replace(out, provenance=prov)


def _scaled(profile: MachineProfile, knob: str, factor: float) -> MachineProfile:
    Knob(name=knob, factors=(factor,))   # validates the name and the factor
    head, _, what = knob.rpartition(".")
    name = variant_name(profile, knob, factor)
    if head in ("network", "network.intra", "network.inter"):
        scope = head.partition(".")[2]
        if what not in LINK_ATTRIBUTES:
            raise InputError(f"sweep: unknown knob {knob!r}: a network has {', '.join(LINK_ATTRIBUTES)}")
        net = profile.network
        if net is None or not _links_of(net, scope):
            raise MissingSectionError(f"machine '{profile.name}'", "network" + (f".{scope}_node" if scope else ""),
                                      needed_by=f"sweep {knob}")
        variants = tuple(_scale_network(v, scope, what, factor) for v in profile.network_variants)
        return dataclasses.replace(profile, name=name, network=_scale_network(net, scope, what, factor),
                                   network_variants=variants)
    node = profile.node
    if node is None:
        raise MissingSectionError(f"machine '{profile.name}'", "node", needed_by=f"sweep {knob}")
    if knob == "memory.bandwidth":
        return dataclasses.replace(profile, name=name, node=dataclasses.replace(node, memory=_scale_dicts(node.memory, factor)))
    if knob == "compute.flops":
        comp = node.compute
        if comp is None:
            raise MissingSectionError(f"machine '{profile.name}'", "node.compute", needed_by=f"sweep {knob}")
        div = None if comp.divsqrt_per_s is None else comp.divsqrt_per_s * factor
        ind = None if comp.flop_per_s_scalar_independent is None else comp.flop_per_s_scalar_independent * factor
        fma = None if comp.flop_per_s_scalar_fma is None else comp.flop_per_s_scalar_fma * factor
        comp = dataclasses.replace(comp, flop_per_s_scalar=comp.flop_per_s_scalar * factor,
                                   flop_per_s_simd=comp.flop_per_s_simd * factor, divsqrt_per_s=div,
                                   flop_per_s_scalar_independent=ind, flop_per_s_scalar_fma=fma)
        return dataclasses.replace(profile, name=name, node=dataclasses.replace(node, compute=comp))
    if knob == "alias.stall":
        a = node.alias
        if a is None:
            raise MissingSectionError(f"machine '{profile.name}'", "node.alias", needed_by=f"sweep {knob}")
        a = dataclasses.replace(a, stall_s=tuple(x * factor for x in a.stall_s),
                                stall_allcores_s=tuple(x * factor for x in a.stall_allcores_s))
        return dataclasses.replace(profile, name=name, node=dataclasses.replace(node, alias=a))
    levels = data_levels(profile)
    if head in levels and what in ("size", "bandwidth"):
        caches = []
        for lev in node.caches:
            if lev.name == head:
                lev = (dataclasses.replace(lev, size_bytes=max(1, round(lev.size_bytes * factor)),
                                           probed_size_bytes=lev.probed_size_bytes or lev.size_bytes)
                       if what == "size" else _scale_dicts(lev, factor))
            caches.append(lev)
        return dataclasses.replace(profile, name=name, node=dataclasses.replace(node, caches=tuple(caches)))
    raise InputError(f"sweep: unknown knob {knob!r} for machine '{profile.name}' (its knobs: "
                     f"{', '.join(knobs_of(profile))})")


def apply_knobs(profile: MachineProfile, changes: Sequence[tuple[str, float]]) -> MachineProfile:
    """A copy of ``profile`` with every ``(knob, factor)`` applied in turn, named after all of them."""
    out = profile
    for knob, factor in changes:
        out = apply_knob(out, knob, factor)
    return dataclasses.replace(out, name=f"{profile.name} " + " + ".join(f"{k} x{f:g}" for k, f in changes))


def sweep(sig: Signature, profiles: Sequence[MachineProfile], knobs: Sequence[Knob] | None = None, *,
          together: bool = False, **options) -> tuple[pd.DataFrame, list[str]]:
    """Predict ``sig`` on every profile and on its copies with each knob at each factor or value
    (``knobs`` None: :func:`default_knobs` of each profile); ``together``: one copy per profile
    with every knob applied at once (each knob with one factor or value: a candidate machine that
    differs in several ways). ``options`` go to :func:`pmac.predict.predict`. Returns the table of
    :data:`SWEEP_COLUMNS` and the prediction's notes."""
    if not profiles:
        raise InputError("sweep: no machine profiles given")
    if options.get("measured_collectives"):
        raise InputError("sweep: collectives are priced by algorithm on the scaled links; "
                         "--measured-collectives would price them as the unscaled machine ran them")
    if together and (not knobs or any(len(k.factors) + len(k.values) != 1 for k in knobs)):
        raise InputError("sweep: applying knobs together needs one factor or value for each knob")
    plan: list[tuple[int, str, float, MachineProfile]] = []
    idle = []
    for i, prof in enumerate(profiles):
        plan.append((i, "base", 1.0, prof))
        chosen = default_knobs(prof) if knobs is None else knobs
        for k in chosen:
            if (why := scales_nothing(prof, k.name)) is not None:
                idle.append(f"{prof.name}: {k.name} scales nothing: {why}")
        if together:
            changes = [(k.name, k.factors_for(prof)[0]) for k in chosen]
            plan.append((i, " + ".join(f"{k} x{f:.4g}" for k, f in changes), math.nan, apply_knobs(prof, changes)))
            continue
        for k in chosen:
            for f in k.factors_for(prof):
                plan.append((i, k.name, float(f), apply_knob(prof, k.name, float(f))))
    names = [p.name for _, _, _, p in plan]
    if len(set(names)) != len(names):
        raise InputError("sweep: two machines share a name: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    pred = predict(sig, [p for _, _, _, p in plan], **options)
    s = pred.summary.set_index("machine")
    rows = []
    for i, knob, f, prof in plan:
        r = s.loc[prof.name]
        base = s.loc[profiles[i].name, "total_s"]
        single = knob != "base" and " + " not in knob
        unit = FIGURE_UNITS.get(knob.rpartition(".")[2], "") if single else ""
        value = figure(prof, knob) if single else None
        rows.append(dict(signature=sig.name, machine=profiles[i].name, knob=knob, factor=f,
                         value=math.nan if value is None else float(value), unit=unit,
                         total_s=float(r["total_s"]), compute_s=float(r["compute_s"]), comm_s=float(r["comm_s"]),
                         wait_s=float(r["wait_s"]), time_ratio=float(r["total_s"] / base),
                         speedup_ratio=float(base / r["total_s"])))
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)), idle + _variant_notes(pred.notes, plan, profiles)


def scales_nothing(profile: MachineProfile, knob: str) -> str | None:
    """Why scaling ``knob`` cannot change this profile's predictions (the quantities it scales are
    all 0), or None."""
    head, _, what = knob.rpartition(".")
    if not head.startswith("network") or profile.network is None or what not in ("latency", "overhead", "mpi_latency"):
        return None
    nets = (profile.network, *profile.network_variants)
    links = [getattr(n, f) for n in nets for f in _links_of(n, head.partition(".")[2])]
    if what == "latency" and all(lk.latency_s == 0 and all(sg.latency_s == 0 for sg in lk.segments) for lk in links):
        return "its links' fitted latency is 0 (the network probe's fit put a message's fixed cost in the overheads)"
    if what == "overhead" and all(lk.send_overhead_s == 0 and lk.recv_overhead_s == 0 for lk in links):
        return "its links have no send or receive overhead"
    if what == "mpi_latency" and all(lk.send_overhead_s == 0 and lk.recv_overhead_s == 0 and lk.latency_s == 0
                                     and all(sg.latency_s == 0 for sg in lk.segments) for lk in links):
        return "its links have neither latency nor overheads"
    return None


def _variant_notes(notes: Sequence[str], plan, profiles: Sequence[MachineProfile]) -> list[str]:
    """The prediction's notes, a copy's note dropped where its profile's own says the same (notes
    name a machine as ``NAME: ...`` or ``machine 'NAME' ...``)."""
    base_of = {p.name: profiles[i].name for i, _, _, p in plan}
    names = sorted(base_of, key=len, reverse=True)
    said, out = set(notes), []
    for n in notes:
        v = next((v for v in names if n.startswith(v + ": ") or f"'{v}'" in n), None)
        if v is not None and v != base_of[v]:
            own = (f"{base_of[v]}: {n[len(v) + 2:]}" if n.startswith(v + ": ")
                   else n.replace(f"'{v}'", f"'{base_of[v]}'"))
            if own in said:
                continue
        out.append(n)
    return out

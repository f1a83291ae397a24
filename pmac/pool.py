"""Refitting a profile from its raw repetitions, and pooling several probes of one machine.

A probed profile keeps every repetition in its raw sidecar (pmac.profile.RAW_TABLES); its YAML
holds what ``pmac probe`` fitted from them with one statistic: each memory and compute point at
the median of its fastest few repetitions (the probe's stop rule, ``best``). Two things here:

- :func:`refit`: the profile fitted again from a raw sidecar, with a statistic: ``best`` (as
  ``pmac probe``), ``median`` (each point at the median of ALL its repetitions: the machine as it
  typically ran during the probe, neighbours on a shared host included, rather than what its
  hardware does undisturbed) or a slow quantile q (the value a share q of the repetitions is at
  least as fast as; 0.5 is the median). Why a quantile: on a host whose cores are slowed one at a
  time for seconds to minutes, longer than a run, an n-rank run takes as long as its slowest rank,
  and the median of the slowest of n independent cores is each core's 0.5 ** (1 / n) quantile
  (0.71 for two ranks). Node (bandwidth and latency curves, cache levels and plateaus,
  compute rates, instruction-fetch and aliasing models), overlap model (its probe points at the same statistic)
  and network (links, overheads and collectives: at the lower quartile for ``best``, pmac probe's
  own rule there, and at the statistic's quantile otherwise, :func:`network_quantile_of`).
  An overlap model calibrated on applications' bursts too (bench/calibrate_overlap) is kept: the
  sidecar holds only the probe's points.
  The cache list comes from the profile's provenance (``os_caches``, what the OS said at probe
  time), so a profile refits on any machine.
- :func:`pool`: several probes of ONE machine (same host, CPU and core count; memory probed on the
  same pages, ``pmac probe --pages``, where the probes record it) taken at different
  times, their repetitions concatenated point by point and refitted: a profile that describes the
  machine over the whole span, e.g. probes interleaved with an application's runs on a shared
  host (``bench/accuracy --interleave``). ``pmac pool`` writes it with its own sidecar.
- :func:`standing_apart`: the probes among three or more whose figures (memory plateaus, compute
  rates, a link's smallest-message time and bandwidth) stand more than a factor
  (:data:`APART_FACTOR`) from the median of all the probes': a probe that met a disturbed host
  (a neighbour's burst of memory traffic through one probe). :func:`pool` names them in its warnings, or leaves them out when asked
  (``pmac pool --drop-apart``). A median statistic already bounds what one such probe among many
  moves; with a few probes, or at ``best``, one probe can set a point.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import pandas as pd

from .errors import InputError
from .fit import slow_quantile_of
from .profile import RAW_TABLES, MachineProfile, load_profile, load_raw


def describe(statistic: str | float) -> str:
    """What a statistic takes of a point's repetitions, in words (for a report's line)."""
    q = slow_quantile_of(statistic)
    if q is None:
        return "the median of its fastest repetitions"
    if statistic == "median":
        return "the median of all its repetitions"
    return f"the value a share {q:g} of its repetitions is at least as fast as"


def pool_raw(raws: Sequence[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """The raw tables of several probes as one: each table concatenated, and each point's
    repetitions numbered again (0, 1, ...) in the order of ``raws`` (a point is a row's values
    except ``rep``, the compute table's ``source`` and the measured value, the table's last column;
    the noise probe's chunks, the aliasing probe's rounds and the compute table's sources numbered
    on from one probe to the next). Tables only some probes have are pooled from those."""
    out: dict[str, pd.DataFrame] = {}
    names = list(dict.fromkeys(k for r in raws for k in r))
    for name in names:
        if name in ("noise", "alias"):
            # noise: a series, the chunks follow one another; alias: a round pairs its placements
            frames = [r[name] for r in raws if r.get(name) is not None and len(r[name])]
            if frames:
                col = "chunk" if name == "noise" else "round"
                out[name] = RAW_TABLES[name].coerce(pd.concat(_numbered_on(frames, col), ignore_index=True))
            continue
        frames = [r[name].sort_values("rep", kind="stable") for r in raws if r.get(name) is not None]
        if name == "compute":       # each probe's rows its own source (a pool may be pooled again)
            frames = _numbered_on(frames, "source")
        df = pd.concat(frames, ignore_index=True)
        spec = RAW_TABLES.get(name)
        cols = [c for c, _ in spec.columns] if spec else list(df.columns)
        point = [c for c in cols[:-1] if c not in ("rep", "source")]
        if "rep" in df.columns and len(df):
            df["rep"] = df.groupby(point, sort=False).cumcount()
        out[name] = spec.coerce(df) if spec else df
    return out


def _numbered_on(frames: list[pd.DataFrame], col: str) -> list[pd.DataFrame]:
    """``frames`` with ``col`` numbered on from one to the next: each frame's values less its
    smallest, plus one past the previous frame's largest (a frame without the column: all 0)."""
    out, k = [], 0
    for f in frames:
        own = f[col] - f[col].min() if col in f.columns and len(f) else 0
        out.append(f.assign(**{col: own + k}))
        if len(f):
            k = int(out[-1][col].max()) + 1
    return out


def _os_view(profile: MachineProfile):
    """The OS's cache list when the profile was probed (provenance ``os_caches``), with its source."""
    from .fit import OsCache, os_caches

    rec = profile.provenance.get("os_caches")
    if isinstance(rec, dict) and rec.get("levels") is not None:
        return [OsCache(**lv) for lv in rec["levels"]], str(rec.get("source", "sysfs"))
    from .profile import not_this_machine

    if (why := not_this_machine(profile)):
        raise InputError(f"profile '{profile.name}': its provenance has no os_caches to refit the cache levels "
                         f"with, and this machine's cache list does not describe it ({why})")
    return os_caches(profile.node.n_cores)


def refit(profile: MachineProfile, raw: dict[str, pd.DataFrame], *, statistic: str = "best") -> MachineProfile:
    """``profile`` fitted again from ``raw`` (its own sidecar, or pooled ones: :func:`pool_raw`)
    with ``statistic`` (module docstring). What ``raw`` lacks the profile keeps; the node needs
    the ``bandwidth`` and ``compute`` tables (InputError otherwise)."""
    from .fit import curves_from_raw, fit_node, latency_from_raw
    from .probe import COMPUTE_BEST, compute_model, fetch_model

    q = slow_quantile_of(statistic)
    node = profile.node
    if node is None or raw.get("bandwidth") is None or raw.get("compute") is None:
        raise InputError(f"profile '{profile.name}': no raw bandwidth and compute repetitions to refit from")
    mem = (profile.provenance.get("parameters") or {}).get("memory") or {}
    window, rule = int(mem.get("window", 5)), str(mem.get("stop_rule", "best"))
    curves = curves_from_raw(raw["bandwidth"], window=window, rule=rule, slow_quantile=q)
    latency = (latency_from_raw(raw["latency"], window=window, rule=rule, slow_quantile=q)
               if raw.get("latency") is not None else None)
    oc, src = _os_view(profile)
    fit = fit_node(curves, latency, n_cores=node.n_cores, os_view=oc, os_source=src)
    # the rates from the repetitions; what names the machine (ISA, clock) stays the node's
    comp = dataclasses.replace(compute_model(raw["compute"], {"cpu_name": "", "llvmlite": ""}, best=COMPUTE_BEST,
                                             slow_quantile=q),
                               isa=node.compute.isa, clock_hz=node.compute.clock_hz)
    fetch = node.fetch
    fp = profile.provenance.get("fetch_probe") or {}
    if fetch is not None and raw.get("fetch") is not None and "miss_footprint_bytes" in fp:
        fetch = fetch_model(raw["fetch"], {"size_bytes": fetch.l1i_size_bytes, "line_bytes": fetch.l1i_line_bytes,
                                           "ways": fetch.l1i_ways},
                            baseline_bytes=int(fp["baseline_footprint_bytes"]),
                            miss_bytes=int(fp["miss_footprint_bytes"]), source=fetch.source)
    noise = node.noise
    if raw.get("noise") is not None and len(raw["noise"]):
        from .noise import WINDOW_S, fit as fit_noise
        noise = fit_noise(raw["noise"], statistic=statistic, window_s=noise.window_s if noise else WINDOW_S)
    alias = node.alias
    if raw.get("alias") is not None and len(raw["alias"]):
        from .probe import alias_model
        alias = alias_model(raw["alias"], statistic) or alias
    out = dataclasses.replace(profile, node=dataclasses.replace(
        node, caches=fit.caches, memory=fit.memory, compute=comp, fetch=fetch, bandwidth_curves=tuple(curves),
        latency_curve=latency, noise=noise, alias=alias))
    probe_only = profile.overlap is None or all(k.startswith("probe:") for k in profile.overlap.calibrated_on)
    if raw.get("overlap") is not None and len(raw["overlap"]) and probe_only:
        from .overlap import calibrate, samples_from_probe

        out = dataclasses.replace(out, overlap=calibrate(samples_from_probe(
            MachineProfile(name=profile.name, node=out.node), raw["overlap"], slow_quantile=q)))
    # the statistic the rates are at, for whatever reads the raw repetitions beside them
    # (pmac.overlap.samples_from_probe)
    out = dataclasses.replace(out, provenance={**(profile.provenance or {}), "statistic": statistic})
    return refit_network(out, raw, network_quantile_of(statistic))


def network_quantile_of(statistic: str | float) -> float:
    """The quantile a statistic takes of each network point's repetitions: ``best`` is pmac probe's
    own rule there, the lower quartile (pmac.fit_network.QUANTILE); ``median`` and a number q, as
    for the node's points (0.5, q). Until 27 Nov 2026 the network stayed at the lower quartile
    whatever the statistic: a profile pooled at the median priced its calls faster than its
    bursts (docs/accuracy.md)."""
    from .fit_network import QUANTILE

    q = slow_quantile_of(statistic)
    return QUANTILE if q is None else q


def refit_network(profile: MachineProfile, raw: dict[str, pd.DataFrame], quantile: float) -> MachineProfile:
    """The main network and its thread-level variants fitted again from their raw tables (as
    pmac probe fits them: pmac.probe_network.model_from_record, at ``quantile`` of each point's
    repetitions); those without tables kept."""
    from .probe_network import model_from_record

    def again(net, suffix: str):
        pp = raw.get("pingpong" + suffix)
        if net is None or pp is None or pp.empty:
            return net
        tables = {"pingpong": pp}
        if raw.get("collective" + suffix) is not None:
            tables["collective"] = raw["collective" + suffix]
        new = model_from_record(tables, {"mpi_library": net.mpi_library, "thread_level": net.thread_level,
                                         "bcast_root": net.bcast_root, "collective_loop": net.collective_loop},
                                quantile)
        return dataclasses.replace(new, topology=net.topology)

    variants = tuple(again(v, f"_{v.thread_level}") for v in profile.network_variants)
    return dataclasses.replace(profile, network=again(profile.network, ""), network_variants=variants)


def _machine_of(profile: MachineProfile) -> tuple:
    return profile.provenance.get("host"), profile.cpu_model, profile.node.n_cores if profile.node else None


def _pages_of(profile: MachineProfile) -> str | None:
    """The page mode the profile's memory was probed with (pmac probe --pages), None if not recorded."""
    pages = profile.provenance.get("pages")
    return pages.get("mode") if isinstance(pages, dict) else None


def _collective_loop_of(profile: MachineProfile) -> str | None:
    """How the profile's collective rows were timed (NetworkModel.collective_loop), None without rows."""
    nets = [n for n in (profile.network, *profile.network_variants) if n is not None and n.collectives]
    return nets[0].collective_loop if nets else None


#: how far (a factor either way) a probe's figure may stand from the median of all the probes'
#: before :func:`standing_apart` names it. A host that flickers between a fast and a slow state
#: moves a probe's figures by up to some 2.3x (the Cascade Lake VM's state checks, 0.44-1.0); the
#: two probes of 29 Nov 04:44 that met a disturbed host stood at 0.23x and 2.6e-5x of it in some
#: all-cores plateaus (bench/results/README.md).
APART_FACTOR = 3.0


def figures(profile: MachineProfile) -> dict[str, float]:
    """The figures of a probed profile that :func:`standing_apart` compares, by name: each cache
    level's and memory's plateau bandwidth per access kind, one core and all cores; the compute
    rates (scalar, SIMD, divider); each link's one-way time of its smallest message (its fitted
    latency, what remains of that time beside the overheads, is a small difference that moves by
    10x from one probe to the next) and bandwidth. Only positive values."""
    out: dict[str, float] = {}
    node = profile.node
    if node is not None:
        levels = [(c.name, c) for c in node.caches] + [("memory", node.memory)]
        for level, lv in levels:
            for side, bws in (("1 core", lv.bandwidth_1core_bytes_per_s), ("all cores", lv.bandwidth_allcores_bytes_per_s)):
                out.update({f"{level} {kind} bandwidth, {side}": bw for kind, bw in bws.items()})
        if node.compute is not None:
            c = node.compute
            out.update({"scalar flop rate": c.scalar_rate, "SIMD flop rate": c.flop_per_s_simd,
                        "divider rate": c.divsqrt_per_s})
    net = profile.network
    for where in ("intra_node", "inter_node"):
        link = getattr(net, where, None) if net is not None else None
        if link is not None:
            small = link.one_way_s[0] if link.one_way_s else link.latency_s
            out.update({f"{where} smallest message's one-way time": small, f"{where} bandwidth": link.bandwidth_bytes_per_s})
    return {k: float(v) for k, v in out.items() if v is not None and v > 0}


def standing_apart(profiles: Sequence[MachineProfile], factor: float = APART_FACTOR) -> dict[int, list[str]]:
    """``{i: [what, ...]}``: the probes among ``profiles`` (three or more; two cannot say which is
    off) with a figure (:func:`figures`) more than ``factor`` times above or below the median of
    all the probes' (which holds while fewer than half are off; a yardstick of the others alone
    would, among four probes two of them off, name the two good ones too); ``what`` names the
    figure and its ratio, largest departures first."""
    if len(profiles) < 3:
        return {}
    import math
    import statistics

    figs = [figures(p) for p in profiles]
    out: dict[int, list[str]] = {}
    middle = {key: statistics.median(f[key] for f in figs if key in f) for key in {k for f in figs for k in f}}
    for i, own in enumerate(figs):
        far = []
        for key, v in own.items():
            if sum(key in f for f in figs) >= 3:
                r = v / middle[key]
                if r > factor or r < 1 / factor:
                    far.append((abs(math.log(r)), f"{key} {r:.3g}x"))
        if far:
            out[i] = [w for _, w in sorted(far, key=lambda t: (-t[0], t[1]))]
    return out


#: what :func:`pool`'s own warnings say (:func:`pool_notes` finds them by it)
_APART = " stands apart from the other"
_ALL_CORES = "all-cores compute"


def _has(raw: dict[str, pd.DataFrame], prefix: str) -> bool:
    return bool(raw["compute"]["probe"].str.startswith(prefix).any())


def _paired_all_cores(raws: list[dict[str, pd.DataFrame]], paths) -> tuple[list[dict[str, pd.DataFrame]], list[str]]:
    """(raws, notes): a kernel's slowdown with every core busy is its ``all:`` rows against its
    time alone, each probe's own (pmac.probe.within_probes): from ``alone:`` rows timed beside them
    where the probe has them, else from its one-core kernels. Where some probes have both and
    others ``all:`` rows only (probed before 29 Nov 2026 09:00), the latter's ``all:`` rows are left
    out, and a note says so: a time alone taken beside the busy one is the better measurement."""
    with_all = [i for i, r in enumerate(raws) if _has(r, "all:")]
    paired = [i for i in with_all if _has(raws[i], "alone:")]
    if not paired:
        return raws, []
    out = [r if i not in with_all or i in paired else
           {**r, "compute": r["compute"][~r["compute"]["probe"].str.startswith("all:")].reset_index(drop=True)}
           for i, r in enumerate(raws)]
    left = [str(paths[i]) for i in with_all if i not in paired]
    return out, ([f"{_ALL_CORES} rows of {', '.join(left)} left out: they have no alone: rows to pair "
                  "with (probed before 29 Nov 2026 09:00); the slowdowns come from the other probes"]
                 if left else [])


def pool_notes(profile: MachineProfile) -> list[str]:
    """The warnings :func:`pool` wrote into ``profile``'s provenance of its own: probes standing
    apart, all-cores rows left out or unpaired."""
    return [w for w in profile.provenance.get("warnings", []) if _APART in w or _ALL_CORES in w]


def pool(paths: Sequence[str | Path], *, name: str, statistic: str = "best",
         command: str | None = None, drop_apart: bool = False) -> tuple[MachineProfile, dict[str, pd.DataFrame]]:
    """(profile, raw tables) of the probes ``paths`` pooled (module docstring): every probe of one
    machine, each with its raw sidecar. The newest probe gives what is not refitted (description,
    provenance of the probe), the provenance records the inputs (file, sha256, probe time) and the
    statistic. InputError naming the file for a probe of another machine or without a sidecar.
    Probes standing apart from the others (:func:`standing_apart`) are named in the provenance's
    warnings, and with ``drop_apart`` left out (``dropped`` in the provenance; never all of them)."""
    from .schema import provenance, sha256_file

    if not paths:
        raise InputError("pool: no profiles given")
    profs, raws = [], []
    for p in paths:
        prof = load_profile(p)
        raw = load_raw(prof, p)
        if prof.node is None or raw.get("bandwidth") is None or raw.get("compute") is None:
            raise InputError("not a probed profile (no node with raw bandwidth and compute repetitions)", path=p)
        if profs and _machine_of(prof) != _machine_of(profs[0]):
            h, c, n = _machine_of(prof)
            h0, c0, n0 = _machine_of(profs[0])
            raise InputError(f"probed on host {h!r}, CPU {c!r}, {n} cores; {paths[0]} on host {h0!r}, CPU {c0!r}, "
                             f"{n0} cores: only probes of one machine pool", path=p)
        mode = _pages_of(prof)
        other = next((i for i, q in enumerate(profs) if _pages_of(q) not in (None, mode)), None)
        if mode is not None and other is not None:
            raise InputError(f"its memory was probed on {mode} pages (pmac probe --pages), {paths[other]}'s on "
                             f"{_pages_of(profs[other])}: only probes of one page mode pool", path=p)
        loop = _collective_loop_of(prof)
        other = next((i for i, q in enumerate(profs) if _collective_loop_of(q) not in (None, loop)), None)
        if loop is not None and other is not None:
            raise InputError(f"its collectives were timed in {loop} loops, {paths[other]}'s in "
                             f"{_collective_loop_of(profs[other])} (NetworkModel.collective_loop): only probes "
                             "whose collectives were timed alike pool", path=p)
        profs.append(prof)
        raws.append(raw)
    apart = standing_apart(profs)
    used = [i for i in range(len(profs)) if not (drop_apart and i in apart)] or list(range(len(profs)))
    notes = [f"probe {paths[i]}{_APART} {len(profs) - 1}: " + ", ".join(what[:4])
             + (f" and {len(what) - 4} more figure(s)" if len(what) > 4 else "")
             + (" (left out: --drop-apart)" if i not in used else
                " (kept: every probe stands apart in some figure)" if drop_apart else
                " (pmac pool --drop-apart leaves it out)")
             for i, what in apart.items()]
    dropped = [str(paths[i]) for i in range(len(profs)) if i not in used]
    paths, profs, raws = [paths[i] for i in used], [profs[i] for i in used], [raws[i] for i in used]
    raws, unpaired = _paired_all_cores(raws, paths)
    notes += unpaired
    newest = max(range(len(profs)), key=lambda i: str(profs[i].provenance.get("created_utc", "")))
    base = profs[newest]
    raw = pool_raw(raws)
    try:
        fitted = refit(dataclasses.replace(base, name=name), raw, statistic=statistic)
    except InputError as exc:      # name the file the user gave, not the new name
        raise InputError(str(exc).replace(f"profile '{name}': ", ""), path=paths[newest]) from None
    keep = {k: v for k, v in base.provenance.items()
            if k not in ("created_utc", "command", "pmac_version", "python", "inputs_sha256")}
    prov = provenance(command=command, **keep)
    prov["pooled_from"] = [{"file": str(p), "sha256": sha256_file(p), "probed_utc": pr.provenance.get("created_utc"),
                            "command": pr.provenance.get("command")} for p, pr in zip(paths, profs)]
    prov["statistic"] = statistic
    recorded = [pr.provenance["pages"] for pr in profs if _pages_of(pr)]
    if recorded:    # one mode (checked above), whichever probe is the newest
        prov["pages"] = recorded[0]
    if dropped:
        prov["dropped"] = dropped
    prov["warnings"] = list(dict.fromkeys([*(w for pr in profs for w in pr.provenance.get("warnings", [])), *notes]))
    fitted = dataclasses.replace(fitted, provenance=prov, raw_file=None, raw_sha256=None,
                                 description=f"{len(profs)} probe{'s' if len(profs) > 1 else ''} pooled ({statistic}): "
                                             f"{base.description}")
    return fitted, raw

"""A machine profile for people: ``format_profile`` (text) and ``plot_profile`` (PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InputError
from .profile import ACCESS_KINDS, LinkModel, MachineProfile
from .units import format_quantity as fq


def _bw(d: dict[str, float]) -> str:
    return ", ".join(f"{k} {fq(d[k], 'bytes_per_s')}" for k in ACCESS_KINDS if k in d) or "-"


def _link_lines(label: str, link: LinkModel) -> list[str]:
    out = [f"  {label}: latency {fq(link.latency_s, 's')}, bandwidth {fq(link.bandwidth_bytes_per_s, 'bytes_per_s')}"
           f", eager threshold {fq(link.eager_threshold_bytes, 'bytes')}"]
    extras = [f"send overhead {fq(link.send_overhead_s, 's')}", f"recv overhead {fq(link.recv_overhead_s, 's')}"]
    if link.streaming_bandwidth_bytes_per_s:
        extras.append(f"streaming {fq(link.streaming_bandwidth_bytes_per_s, 'bytes_per_s')}")
    if link.exchange_excess_s:
        extras.append(f"exchange +{fq(link.exchange_excess_s, 's')} a message")
    if link.fit_r2 is not None:
        extras.append(f"fit R^2 {link.fit_r2:.4f}")
    out.append("    " + ", ".join(extras))
    if link.shaped:
        out.append(f"    shaper: token bucket on each node's egress, rate "
                   f"{fq(link.shaper_rate_bytes_per_s, 'bytes_per_s')}, bucket {fq(link.shaper_burst_bytes, 'bytes')}"
                   + (f", {link.shaper_header_bytes:.0f} B of header tokens a message" if link.shaper_header_bytes
                      else "") + " (the segments below are the line under it)")
    if link.pollution_bytes:
        out.append("    after a burst that swept: " + ", ".join(
            f"{fq(w, 'bytes')} +{fq(e, 's')}" for w, e in zip(link.pollution_bytes, link.pollution_excess_s))
            + " a call (pmac.pollution)")
    for s in link.segments:
        hi = "inf" if s.max_bytes >= 2.0**60 else fq(s.max_bytes, "bytes")
        out.append(f"    [{fq(s.min_bytes, 'bytes')}, {hi}): {fq(s.latency_s, 's')} + bytes / "
                   f"{fq(s.bandwidth_bytes_per_s, 'bytes_per_s')}")
    return out


def format_profile(profile: MachineProfile) -> str:
    p = profile
    lines = [f"machine {p.name}" + (f" ({p.n_nodes} nodes)" if p.n_nodes > 1 else "")
             + (f", {p.ranks_per_node} rank(s) per node by default" if p.ranks_per_node else "")]
    if p.description:
        lines.append(f"  {p.description}")
    if p.node is not None:
        n = p.node
        lines.append(f"node: {n.cpu_model}, {n.n_cores} cores")
        for c in n.caches:
            lat = f", latency {fq(c.latency_s, 's')}" if c.latency_s else ""
            lines.append(f"  {c.name}: {fq(c.size_bytes, 'bytes')}, line {c.line_bytes} B, {c.ways}-way, "
                         f"shared by {c.shared_by_cores} core(s){', inclusive' if c.inclusive else ''}{lat}"
                         f" [{c.source}]")
            lines.append(f"    1 core: {_bw(c.bandwidth_1core_bytes_per_s)}")
            if c.bandwidth_allcores_bytes_per_s:
                lines.append(f"    all cores: {_bw(c.bandwidth_allcores_bytes_per_s)}")
        m = n.memory
        lat = f", latency {fq(m.latency_s, 's')}" if m.latency_s else ""
        size = f" {fq(m.size_bytes, 'bytes')}" if m.size_bytes else ""
        lines.append(f"  memory{size}{lat}")
        lines.append(f"    1 core: {_bw(m.bandwidth_1core_bytes_per_s)}")
        if m.bandwidth_allcores_bytes_per_s:
            lines.append(f"    all cores: {_bw(m.bandwidth_allcores_bytes_per_s)}")
        if n.compute is not None:
            c = n.compute
            clock = f", clock {fq(c.clock_hz, 'hz')}" if c.clock_hz else ""
            scalar = (f"scalar {fq(c.flop_per_s_scalar_independent, 'flop_per_s')} (a dependent chain's kernel "
                      f"{fq(c.flop_per_s_scalar, 'flop_per_s')})" if c.flop_per_s_scalar_independent
                      else f"scalar {fq(c.flop_per_s_scalar, 'flop_per_s')}")
            if c.flop_per_s_scalar_fma:
                scalar += f", scalar FMA code {fq(c.flop_per_s_scalar_fma, 'flop_per_s')}"
            lines.append(f"  compute ({c.isa}, {c.simd_width_bits}-bit SIMD{clock}): {scalar}, "
                         f"SIMD {fq(c.flop_per_s_simd, 'flop_per_s')} per core")
            if c.divsqrt_per_s:
                beside = (f"; beside the other work: max + {c.divider_beta:.3g} x min" if c.divider_beta is not None
                          else "")
                lines.append(f"    divide / square root: {c.divsqrt_per_s / 1e9:.3g} G/s per core (scalar){beside}")
            if c.chain_add_s or c.chain_mul_s:
                parts = [f"{k} {fq(v, 's')}" for k, v in (("add", c.chain_add_s), ("multiply-add", c.chain_mul_s))
                         if v]
                lines.append(f"    loop-carried chain, per operation: {', '.join(parts)}")
            if c.dependency_distance:
                pts = ", ".join(f"{d:g}: {fq(r, 'flop_per_s')}" for d, r in zip(c.dependency_distance, c.dependency_flop_per_s))
                lines.append(f"    dependency distance -> rate: {pts}")
            if c.branch_miss_frac:
                pts = ", ".join(f"{f:g}: {fq(s, 's')}" for f, s in zip(c.branch_miss_frac, c.branch_cost_s))
                lines.append(f"    branch miss fraction -> cost: {pts}")
            if c.all_cores_slowdown:
                pts = ", ".join(f"{k} x{v:.2f}" for k, v in zip(c.all_cores_kernels, c.all_cores_slowdown))
                lines.append(f"    {c.all_cores_n} cores busy, a kernel's time a core against one alone: {pts}")
        if n.fetch is not None:
            f = n.fetch
            seq = f", in order {fq(f.miss_sequential_s, 's')}" if f.miss_sequential_s is not None else ""
            lines.append(f"  instruction fetch: L1i {fq(f.l1i_size_bytes, 'bytes')}, a miss {fq(f.miss_s, 's')} "
                         f"(code in random order{seq})")
        if n.alias is not None:
            a = n.alias

            def stalls(vals):
                return ", ".join(f"{lv} {fq(v, 's')}" for lv, v in zip(a.levels, vals))
            lines.append(f"  4 KiB aliasing, a load's stall in a loop streaming from: {stalls(a.stall_s)} (1 core)")
            if a.stall_allcores_s:
                lines.append(f"    {a.n_cores_all} cores busy: {stalls(a.stall_allcores_s)}")
        if n.noise is not None:
            from .noise import describe as describe_noise
            lines += ["  " + x for x in describe_noise(n.noise)]
        if n.bandwidth_curves:
            lines.append("  curves: " + ", ".join(f"{c.access}/{c.n_cores} core(s) ({len(c.working_set_bytes)} points)"
                                                  for c in n.bandwidth_curves))
    for k, net in enumerate(() if p.network is None else (p.network, *p.network_variants)):
        level = f" at MPI_THREAD_{net.thread_level.upper()}" if net.thread_level else ""
        lines.append(("network" if k == 0 else "network variant") + level
                     + (f" ({net.mpi_library})" if net.mpi_library else "") + ":")
        for label in ("intra_node", "inter_node"):
            link = getattr(net, label)
            if link is not None:
                lines += _link_lines(label, link)
        if net.collectives:
            how = {"compiled": "timed in compiled loops", "mpi4py": "mpi4py loops less the one-rank floor"}
            lines.append(f"  collectives (time per call; {how[net.collective_loop]}):")
            keys = sorted({(c.placement, c.op, c.n_ranks) for c in net.collectives})
            for pl, op, nr in keys:
                pts = sorted((c.msg_bytes, c.time_s) for c in net.collectives
                             if (c.placement, c.op, c.n_ranks) == (pl, op, nr))
                lines.append(f"    {op:<10} {nr:>3} ranks {pl}: " +
                             ", ".join(f"{fq(b, 'bytes')} {fq(t, 's')}" for b, t in pts))
        if net.interpreter_collective_s is not None or net.interpreter_p2p_s is not None:
            got = [f"{what} {fq(x, 's')}" for what, x in (("collective", net.interpreter_collective_s),
                                                          ("point-to-point", net.interpreter_p2p_s)) if x is not None]
            lines.append(f"  a call from a Python interpreter, beyond the same call compiled: {', '.join(got)} "
                         "(8 B Allreduce / Sendrecv; pmac.interpreter)")
    if p.overlap is not None:
        lines.append(f"overlap model: {p.overlap.kind} {p.overlap.params}")
    missing = p.missing(("node", "node.compute", "node.latency_curve", "network", "network.intra_node",
                         "network.inter_node", "network.collectives"))
    missing = [m for m in missing if not any(m.startswith(x + ".") for x in missing)]
    lacks = p.provenance.get("lacks") if isinstance(p.provenance, dict) else None
    if missing or lacks:
        lines.append("missing: " + ", ".join(missing + [x for x in (lacks or []) if x not in missing]))
    prov = p.provenance or {}
    pages = prov.get("pages")
    if isinstance(pages, dict) and pages.get("in_effect"):
        lines.append(f"memory probed on {pages['in_effect']} (pmac probe --pages {pages.get('mode', '?')})")
    elif prov.get("transparent_hugepage"):
        lines.append(f"memory probed before pmac recorded its pages (numpy asks for huge pages unless "
                     f"NUMPY_MADVISE_HUGEPAGE=0; transparent huge pages: {prov['transparent_hugepage']})")
    pooled = prov.get("pooled_from")
    if isinstance(pooled, list) and pooled:
        times = sorted(str(x.get("probed_utc")) for x in pooled if isinstance(x, dict) and x.get("probed_utc"))
        from .pool import describe

        try:
            how = describe(prov.get("statistic", "best"))
        except InputError:      # a provenance edited by hand: say what it holds
            how = f"the statistic {prov.get('statistic')!r}"
        span = f" (finished {times[0]} to {times[-1]})" if len(times) > 1 else ""
        lines.append(f"pooled from {len(pooled)} probe(s){span}, each point at {how} (pmac pool, pmac probe --rounds)")
    if prov.get("created_utc"):
        lines.append(f"created {prov.get('created_utc')} on {prov.get('host', '?')} by pmac {prov.get('pmac_version', '?')}")
    return "\n".join(lines)


def plot_profile(profile: MachineProfile, path: str | Path) -> None:
    """Bandwidth curves with the cache levels marked, latency curve, ping-pong with fitted segments."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    node, net = profile.node, profile.network
    panels = []
    if node is not None and node.bandwidth_curves:
        panels.append("bandwidth")
    if node is not None and node.latency_curve is not None:
        panels.append("latency")
    links = [(k, getattr(net, k)) for k in ("intra_node", "inter_node")] if net is not None else []
    links = [(k, l) for k, l in links if l is not None and l.msg_bytes]
    if links:
        panels.append("network")
    if not panels:
        panels.append("empty")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, kind in zip(axes[0], panels):
        if kind == "bandwidth":
            for c in node.bandwidth_curves:
                ax.plot(c.working_set_bytes, np.asarray(c.bandwidth_bytes_per_s) / 1e9, marker=".",
                        label=f"{c.access}, {c.n_cores} core(s)")
            for cache in node.caches:
                ax.axvline(cache.size_bytes, color="grey", ls="--", lw=0.8)
                ax.text(cache.size_bytes, ax.get_ylim()[1] * 0.95, f" {cache.name}", fontsize=8, va="top")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("working set [bytes]")
            ax.set_ylabel("bandwidth [GB/s]")
            ax.set_title(f"{profile.name}: memory bandwidth")
            ax.legend(fontsize=7, loc="best", framealpha=0.6)
        elif kind == "latency":
            lc = node.latency_curve
            ax.plot(lc.working_set_bytes, np.asarray(lc.latency_s) * 1e9, marker=".")
            for cache in node.caches:
                ax.axvline(cache.size_bytes, color="grey", ls="--", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("working set [bytes]")
            ax.set_ylabel("load-to-use latency [ns]")
            ax.set_title("pointer chase")
        elif kind == "network":
            for label, link in links:
                m = np.asarray(link.msg_bytes)
                t = np.asarray(link.one_way_s)
                ok = m > 0
                ax.plot(m[ok], t[ok] * 1e6, "o", ms=3, label=f"{label} measured")
                mm = np.geomspace(max(1.0, m[ok].min()), m.max(), 200)
                fit = link.pingpong_one_way_s(mm)
                ax.plot(mm, fit * 1e6, "-", lw=1, label=f"{label} fit" + (" (shaped)" if link.shaped else ""))
                for s in link.segments[1:]:
                    ax.axvline(s.min_bytes, color="grey", ls=":", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message [bytes]")
            ax.set_ylabel("one-way time [us]")
            ax.set_title("ping-pong")
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, f"{profile.name}: no curves in this profile", ha="center", va="center")
            ax.set_axis_off()
    fig.tight_layout()
    from .schema import atomic_write_bytes
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())

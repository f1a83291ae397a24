"""pmac.sweep and ``pmac sweep``: scaled copies of a profile, predicted against hand-computed times
and against copies made by hand; errors by message."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pmac import pollution as pol
from pmac.cli import main
from pmac.profile import SCHEMA_VERSION as PROFILE_SCHEMA
from pmac.errors import InputError, MissingSectionError
from pmac.predict import predict
from pmac.profile import LinkModel, load_profile
from pmac.signature import load_signature
from pmac.sweep import (Knob, apply_knob, apply_knobs, default_knobs, figure, knobs_of, parse_knob, scale_link,
                        sweep)
from synth import pingpong_signature, two_level_profile

REPO = Path(__file__).resolve().parents[1]
STREAM = REPO / "signatures" / "stream_mpi-n2-2000000"
EPYC = REPO / "machines" / "epyc-vm.yaml"


def _with_overheads(prof, o_s=2e-7, o_r=3e-7):
    link = dataclasses.replace(prof.network.intra_node, send_overhead_s=o_s, recv_overhead_s=o_r)
    return dataclasses.replace(prof, network=dataclasses.replace(prof.network, intra_node=link, inter_node=link))


def test_ping_pong_times_by_hand():
    """Two ranks, 3 round trips of 1000 B with 1 ms bursts between the calls (measured): 7 bursts
    and 6 messages of o_s + L + m / B + o_r, L = 1 us, B = 1 GB/s, o_s = 0.2 us, o_r = 0.3 us."""
    sig = pingpong_signature(n_iter=3, msg_bytes=1000, burst_s=1e-3)
    prof = _with_overheads(two_level_profile())
    knobs = [Knob(name="network.latency", factors=(0.5, 3.0)), Knob(name="network.bandwidth", factors=(2.0,)),
             Knob(name="network.overhead", factors=(2.0,)), Knob(name="network.mpi_latency", factors=(0.5,))]
    df, _ = sweep(sig, [prof], knobs, burst_source="measured")
    t = {(r.knob, r.factor): r.total_s for r in df.itertuples()}

    def hand(lat=1e-6, wire=1e-6, o=5e-7):
        return 7e-3 + 6 * (lat + wire + o)

    assert t[("base", 1.0)] == pytest.approx(hand(), rel=1e-12)
    assert t[("network.latency", 0.5)] == pytest.approx(hand(lat=0.5e-6), rel=1e-12)
    assert t[("network.latency", 3.0)] == pytest.approx(hand(lat=3e-6), rel=1e-12)
    assert t[("network.bandwidth", 2.0)] == pytest.approx(hand(wire=0.5e-6), rel=1e-12)
    assert t[("network.overhead", 2.0)] == pytest.approx(hand(o=1e-6), rel=1e-12)
    assert t[("network.mpi_latency", 0.5)] == pytest.approx(hand(lat=0.5e-6, o=2.5e-7), rel=1e-12)
    r = df.set_index(["knob", "factor"]).loc[("network.latency", 0.5)]
    assert r.time_ratio == pytest.approx(hand(lat=0.5e-6) / hand(), rel=1e-12)
    assert r.speedup_ratio == pytest.approx(1 / r.time_ratio, rel=1e-12)
    assert list(df.columns) == ["signature", "machine", "knob", "factor", "value", "unit", "total_s", "compute_s",
                                "comm_s", "wait_s", "time_ratio", "speedup_ratio"]
    # each copy's figure at the factor: the wire's latency, the 0-byte one-way time with the overheads
    assert r.value == pytest.approx(0.5e-6, rel=1e-12) and r.unit == "s"
    assert df.set_index(["knob", "factor"]).loc[("network.mpi_latency", 0.5), "value"] == pytest.approx(
        0.5 * (1e-6 + 5e-7), rel=1e-12)
    assert set(df["machine"]) == {prof.name}


def test_copies_equal_those_made_by_hand():
    """memory.bandwidth x2 is the README's what-if; compute.flops and L2.bandwidth alike."""
    sig = load_signature(STREAM)
    base = load_profile(EPYC)
    node = base.node
    mem2 = dataclasses.replace(node.memory, **{f: {k: 2 * v for k, v in getattr(node.memory, f).items()}
                                               for f in ("bandwidth_1core_bytes_per_s", "bandwidth_allcores_bytes_per_s")})
    comp = node.compute
    comp3 = dataclasses.replace(comp, flop_per_s_scalar=3 * comp.flop_per_s_scalar,
                                flop_per_s_simd=3 * comp.flop_per_s_simd, divsqrt_per_s=3 * comp.divsqrt_per_s)
    caches = tuple(dataclasses.replace(c, bandwidth_1core_bytes_per_s={k: v / 2 for k, v in c.bandwidth_1core_bytes_per_s.items()},
                                       bandwidth_allcores_bytes_per_s={k: v / 2 for k, v in c.bandwidth_allcores_bytes_per_s.items()})
                   if c.name == "L2" else c for c in node.caches)
    by_hand = [dataclasses.replace(base, name="mem", node=dataclasses.replace(node, memory=mem2)),
               dataclasses.replace(base, name="flops", node=dataclasses.replace(node, compute=comp3)),
               dataclasses.replace(base, name="l2", node=dataclasses.replace(node, caches=caches))]
    want = predict(sig, by_hand).summary.set_index("machine")["total_s"]
    df, _ = sweep(sig, [base], [Knob(name="memory.bandwidth", factors=(2,)), Knob(name="compute.flops", factors=(3,)),
                                Knob(name="L2.bandwidth", factors=(0.5,))])
    got = df.set_index("knob")["total_s"]
    assert got["memory.bandwidth"] == pytest.approx(want["mem"], rel=1e-12)
    assert got["compute.flops"] == pytest.approx(want["flops"], rel=1e-12)
    assert got["L2.bandwidth"] == pytest.approx(want["l2"], rel=1e-12)
    # the DRAM-bound case: doubling memory's bandwidth buys much, tripling the flop rate little
    assert got["memory.bandwidth"] < 0.7 * got["base"] and got["compute.flops"] > 0.95 * got["base"]


def test_a_smaller_cache_is_never_faster():
    """stream_mpi-n2-2000000 (92 MiB) on the EPYC profile: the L3 at 1/4 .. 4x its size, the time
    never rises with the size; the copy's calls pay what losing the L3 cost as probed, for the
    share of it the bursts evicted at the new size."""
    sig = load_signature(STREAM)
    base = load_profile(EPYC)
    df, _ = sweep(sig, [base], [Knob(name="L3.size", factors=(0.25, 0.5, 2.0, 4.0))])
    t = df.sort_values("factor")["total_s"].to_numpy()   # factors 0.25, 0.5, base, 2, 4
    assert np.all(np.diff(t) <= 1e-15), t
    small = apply_knob(base, "L3.size", 0.5)
    l3, l3_0 = small.node.caches[-1], base.node.caches[-1]
    assert l3.size_bytes == l3_0.size_bytes // 2 and l3.probed_size_bytes == l3_0.size_bytes
    link = base.network.intra_node
    assert np.array_equal(pol.level_costs(link, small.node.caches), pol.level_costs(link, base.node.caches))
    # chained: the size probed stays the first one; the provenance lists every change
    again = apply_knob(small, "L3.size", 4.0)
    assert again.node.caches[-1].probed_size_bytes == l3_0.size_bytes
    assert again.provenance["what_if"] == ["L3.size x0.5", "L3.size x4"] and "what_if" not in base.provenance
    assert again.provenance["command"] == base.provenance["command"]


def test_links_scaled_and_their_measured_table_dropped():
    prof = load_profile(EPYC)
    link = prof.network.intra_node
    assert link.segments and link.one_way_s
    lat = scale_link(link, "latency", 0.5)
    assert lat.latency_s == link.latency_s / 2 and lat.one_way_s == () and lat.msg_bytes == ()
    assert [s.latency_s for s in lat.segments] == [s.latency_s / 2 for s in link.segments]
    assert [s.bandwidth_bytes_per_s for s in lat.segments] == [s.bandwidth_bytes_per_s for s in link.segments]
    bw = scale_link(link, "bandwidth", 2.0)
    assert [s.bandwidth_bytes_per_s for s in bw.segments] == [2 * s.bandwidth_bytes_per_s for s in link.segments]
    assert bw.pollution_excess_s == link.pollution_excess_s and bw.exchange_excess_s == link.exchange_excess_s
    shaped = LinkModel(latency_s=5e-5, bandwidth_bytes_per_s=1e9, eager_threshold_bytes=65536,
                       shaper_rate_bytes_per_s=2.5e6, shaper_burst_bytes=5000.0)
    half = scale_link(shaped, "bandwidth", 0.5)
    assert half.shaper_rate_bytes_per_s == 1.25e6 and half.bandwidth_bytes_per_s == 1e9 and half.shaper_burst_bytes == 5000
    # every thread level's network follows
    v = apply_knob(prof, "network.latency", 2.0)
    assert v.name == "epyc-vm network.latency x2"
    for old, new in zip(prof.network_variants, v.network_variants):
        assert new.intra_node.latency_s == 2 * old.intra_node.latency_s
    inter_only = apply_knob(two_level_profile(), "network.inter.latency", 2.0)
    assert inter_only.network.inter_node.latency_s == 2e-6 and inter_only.network.intra_node.latency_s == 1e-6


def test_knobs_and_errors_by_message():
    prof = load_profile(EPYC)
    assert knobs_of(prof) == ["network.mpi_latency", "network.latency", "network.bandwidth", "network.overhead",
                              "network.intra.mpi_latency", "network.intra.latency", "network.intra.bandwidth",
                              "network.intra.overhead", "memory.bandwidth", "L1.size", "L1.bandwidth", "L2.size",
                              "L2.bandwidth", "L3.size", "L3.bandwidth", "compute.flops"]
    assert [k.name for k in default_knobs(prof)] == ["network.mpi_latency", "network.bandwidth", "memory.bandwidth",
                                                      "L3.size", "compute.flops"]
    with pytest.raises(InputError, match="unknown knob 'network.jitter': a network has mpi_latency, latency, bandwidth, overhead"):
        apply_knob(prof, "network.jitter", 2)
    assert parse_knob("L3.size=0.5,x2") == Knob(name="L3.size", factors=(0.5, 2.0))
    assert parse_knob("network.latency") == Knob(name="network.latency", factors=(0.5, 2.0))
    assert parse_knob("L3.size=96MiB,64MiB", set_values=True) == Knob(name="L3.size", values=(96 * 2**20, 64 * 2**20))
    assert parse_knob("network.inter.mpi_latency=1.5us", set_values=True).values == (1.5e-6,)
    with pytest.raises(InputError, match=r"--set 'L3.size=2us': '2us' is in s, expected bytes"):
        parse_knob("L3.size=2us", set_values=True)
    with pytest.raises(InputError, match="needs factors or values, not both"):
        Knob(name="L3.size", factors=(2.0,), values=(1.0,))
    with pytest.raises(InputError, match="'a' is not a number"):
        parse_knob("network.latency=a")
    with pytest.raises(InputError, match="knob 'latency' is not of the form PART.ATTRIBUTE"):
        parse_knob("latency=2")
    with pytest.raises(InputError, match="factors must be positive numbers, got -1.0"):
        parse_knob("L3.size=-1")
    with pytest.raises(InputError, match=r"unknown knob 'L4.size' for machine 'epyc-vm' \(its knobs: network.mpi_latency, network.latency"):
        apply_knob(prof, "L4.size", 2)
    with pytest.raises(InputError, match="unknown knob 'network.foo.latency' for machine 'epyc-vm'"):
        Knob(name="network.foo.latency", values=(1e-6,)).factors_for(prof)
    with pytest.raises(MissingSectionError, match="inter_node"):
        Knob(name="network.inter.mpi_latency", values=(1e-6,)).factors_for(prof)
    imported = load_profile(REPO / "machines" / "skylakesp-gold6148.yaml")
    with pytest.raises(MissingSectionError, match="network"):
        apply_knob(imported, "network.latency", 2)
    with pytest.raises(MissingSectionError, match="inter_node"):
        apply_knob(prof, "network.inter.bandwidth", 2)


def test_cli_text_csv_json_and_errors(capsys):
    args = [str(STREAM), str(EPYC), "--vary", "network.latency=0.5", "--vary", "memory.bandwidth=2"]
    assert main(["sweep", *args, "--csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(df["knob"]) == ["base", "network.latency", "memory.bandwidth"]
    assert df["time_ratio"].to_numpy() == pytest.approx(df["total_s"].to_numpy() / df["total_s"].iloc[0], rel=1e-8)
    assert main(["sweep", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith("signature stream_mpi-n2-2000000 on epyc-vm: ")
    mem = df.set_index("knob").loc["memory.bandwidth"]
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("memory.bandwidth"))
    assert f"{100 * (mem.time_ratio - 1):+.1f} %" in line and f"{mem.speedup_ratio:.3f}x" in line
    assert main(["sweep", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["knob"] for r in doc["sweep"]] == ["base", "network.latency", "memory.bandwidth"]
    assert main(["sweep", str(EPYC), "--knobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "epyc-vm:" and lines[1].split()[0] == "network.mpi_latency"
    assert any(ln.split() == ["L3.size", "32", "MiB"] for ln in lines), lines
    assert main(["sweep", str(STREAM), str(EPYC), "--set", "L3.size=96MiB", "--vary", "compute.flops=2", "--together",
                 "--csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(df["knob"]) == ["base", "L3.size x3 + compute.flops x2"]   # in the order given
    assert main(["sweep", str(STREAM), str(EPYC), "--together"]) == 2
    assert "--together needs knobs to apply" in capsys.readouterr().err
    assert main(["sweep", str(STREAM), str(EPYC), "--vary", "L3.size=big"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'big' is not a number" in err[0]


def test_the_emulated_clusters_validated_what_if_is_the_sweeps_knob():
    """bench/validate_emulated's 'link rate halved' (predicted +100.0 %, measured +99.4 to +100.0 %)
    is network.inter.bandwidth at 0.5: on the shaped emulated link, the shaper's rate halved."""
    import runpy

    ns = runpy.run_path(str(REPO / "bench" / "validate_emulated"))
    prof = load_profile(REPO / "machines" / "emu-tcp-20mbit.yaml")
    half = ns["halve_inter_node"](prof)
    old, new = prof.network.inter_node, half.network.inter_node
    assert old.shaped and new.shaper_rate_bytes_per_s == old.shaper_rate_bytes_per_s / 2
    assert new.segments == old.segments and new.shaper_burst_bytes == old.shaper_burst_bytes
    assert half.network.intra_node == prof.network.intra_node


def test_a_knob_that_scales_nothing_is_said():
    """The emulated shaped link was fitted with no latency (its fixed cost in the overheads): halving
    it changes nothing, and the sweep says why; synth's (two_level_profile) links have no overheads."""
    sig = pingpong_signature(n_iter=2, msg_bytes=100, burst_s=1e-4)
    emu = load_profile(REPO / "machines" / "emu-tcp-200mbit.yaml")
    assert emu.network.inter_node.latency_s == 0
    df, notes = sweep(sig, [emu, two_level_profile()], [Knob(name="network.inter.latency", factors=(0.5,)),
                                                        Knob(name="network.overhead", factors=(2.0,))],
                      burst_source="measured")
    t = df.set_index(["machine", "knob"])["time_ratio"]
    # both change nothing: the emulated link has no latency, synth's two ranks share a node (no inter-
    # node message); only the first is the knob's doing, and only it is said
    assert t[("emu-tcp-200mbit", "network.inter.latency")] == 1.0 and t[("synth", "network.inter.latency")] == 1.0
    assert t[("synth", "network.overhead")] == 1.0
    assert "emu-tcp-200mbit: network.inter.latency scales nothing: its links' fitted latency is 0" in " ".join(notes)
    assert "synth: network.overhead scales nothing: its links have no send or receive overhead" in notes
    assert not any(n.startswith("emu-tcp-200mbit: network.overhead") or n.startswith("synth: network.inter.latency")
                   for n in notes)


def test_set_figures_and_knobs_together():
    """--set: the factor that takes the profile's figure to the value (and the copy's figure is the
    value); --together: one copy with every change, priced as the copy made by hand."""
    sig = load_signature(STREAM)
    base = load_profile(EPYC)
    assert figure(base, "L3.size") == 32 * 2**20
    assert figure(base, "memory.bandwidth") == base.node.memory.bandwidth_allcores_bytes_per_s["load_unit"]
    link = base.network.intra_node
    assert figure(base, "network.mpi_latency") == pytest.approx(
        link.segments[0].latency_s + link.send_overhead_s + link.recv_overhead_s, rel=1e-15)
    df, _ = sweep(sig, [base], [Knob(name="L3.size", values=(96 * 2**20,)),
                                Knob(name="memory.bandwidth", values=(100e9,))])
    r = df.set_index("knob")
    assert r.loc["L3.size", "factor"] == 3.0 and r.loc["L3.size", "value"] == 96 * 2**20
    assert r.loc["memory.bandwidth", "value"] == pytest.approx(100e9, rel=1e-12)
    assert r.loc["memory.bandwidth", "factor"] == pytest.approx(100e9 / figure(base, "memory.bandwidth"), rel=1e-12)
    both = [Knob(name="memory.bandwidth", factors=(2.0,)), Knob(name="compute.flops", values=(90e9,))]
    dt, _ = sweep(sig, [base], both, together=True)
    assert list(dt["knob"]) == ["base", f"memory.bandwidth x2 + compute.flops x{90e9 / figure(base, 'compute.flops'):.4g}"]
    copy = apply_knobs(base, [("memory.bandwidth", 2.0), ("compute.flops", 90e9 / figure(base, "compute.flops"))])
    assert figure(copy, "compute.flops") == pytest.approx(90e9, rel=1e-12)
    want = predict(sig, [copy]).summary["total_s"].iloc[0]
    assert dt["total_s"].iloc[1] == pytest.approx(want, rel=1e-12)
    with pytest.raises(InputError, match="one factor or value for each knob"):
        sweep(sig, [base], [Knob(name="memory.bandwidth", factors=(2.0, 4.0))], together=True)
    emu = load_profile(REPO / "machines" / "emu-tcp.yaml")
    assert figure(emu, "network.mpi_latency") is None
    with pytest.raises(InputError, match="network.mpi_latency of machine 'emu-tcp' is not one figure"):
        Knob(name="network.mpi_latency", values=(1e-6,)).factors_for(emu)


def test_cli_plot_writes_a_png(tmp_path, capsys):
    out = tmp_path / "sweep.png"
    assert main(["sweep", str(STREAM), str(EPYC), "--vary", "memory.bandwidth=0.5,2", "--plot", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_a_what_if_copy_round_trips_through_its_file(tmp_path):
    """Saved (profile schema 15), a copy keeps its cache's probed size and its list of changes."""
    from pmac.profile import save_profile

    base = load_profile(EPYC)
    copy = apply_knob(apply_knob(base, "L2.size", 2.0), "network.mpi_latency", 0.5)
    path = tmp_path / "what-if.yaml"
    save_profile(copy, path)
    back = load_profile(path)
    assert back.node.caches[1].size_bytes == 2 * 2**20 and back.node.caches[1].probed_size_bytes == 2**20
    assert back.provenance["what_if"] == ["L2.size x2", "network.mpi_latency x0.5"]
    assert back.network.intra_node.send_overhead_s == pytest.approx(base.network.intra_node.send_overhead_s / 2,
                                                                    rel=1e-15)
    assert f"schema_version: {PROFILE_SCHEMA}" in path.read_text()


def test_a_copys_notes_that_repeat_its_machines_are_dropped():
    from types import SimpleNamespace

    from pmac.sweep import _variant_notes

    base = SimpleNamespace(name="m")
    copy = SimpleNamespace(name="m network.bandwidth x2")
    notes = ["machine 'm' has no network measured at MPI_THREAD_SINGLE",
             "machine 'm network.bandwidth x2' has no network measured at MPI_THREAD_SINGLE",
             "m: calls after bursts that evicted the caches: +5 us",
             "m network.bandwidth x2: calls after bursts that evicted the caches: +5 us",
             "m network.bandwidth x2: calls after bursts that evicted the caches: +3 us"]
    assert _variant_notes(notes, [(0, "network.bandwidth", 2.0, copy)], [base]) == [notes[0], notes[2], notes[4]]

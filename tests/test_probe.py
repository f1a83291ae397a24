"""Real (small) probe runs: memory curves, latency, compute, the profile writer, interruption."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from pmac.cli import main
from pmac.errors import InputError
from pmac.probe import run_probe
from pmac.profile import RAW_TABLES, load_profile, raw_path, verify_raw
from pmac.table import load_tables
from probes import compute as pc
from probes import memory as pm

KiB, MiB = 1024, 1024 ** 2


def small_params(**kw):
    p = pm.Params(min_bytes=16 * KiB, max_bytes=64 * MiB, points_per_doubling=1, rep_s=0.002,
                  window=3, min_reps=3, max_reps=5, point_budget_s=0.2, latency_steps_min=50_000,
                  accesses=("load_unit",), core_counts=(1,))
    return dataclasses.replace(p, **kw)


@pytest.fixture(scope="module")
def memory_run():
    return pm.run(small_params())


def test_bandwidth_falls_from_l1_to_memory_and_latency_rises(memory_run):
    """Each point by its best repetition: a neighbour on a shared host only ever slows a
    repetition down (in one CI run the median of all the 16 KiB chase's repetitions was 31 ns a
    load, against the 10 ns bound; the shipped xeon-vm record has 14 of the 20 repetitions of its
    32 KiB load point at 7-43 GB/s and 6 at 84-88), so the fastest says what the hardware does."""
    bw, lat = memory_run
    curve = {r.working_set_bytes: max(r.bandwidth_bytes_per_s) for r in bw}
    l1, mem = curve[16 * KiB], curve[64 * MiB]
    assert l1 > 2 * mem > 0  # L1 vs main memory: at least 2x on any machine of the last 20 years
    lats = dict((ws, min(v)) for ws, v in lat)
    assert all(v > 0 for v in lats.values())
    assert lats[64 * MiB] > 3 * lats[16 * KiB]
    assert 0.1e-9 < lats[16 * KiB] < 10e-9


def test_every_repetition_is_kept(memory_run):
    bw, lat = memory_run
    t = pm.tables(bw, lat)
    assert len(t["bandwidth"]["rep"]) == sum(len(r.bandwidth_bytes_per_s) for r in bw)
    assert all(len(r.bandwidth_bytes_per_s) >= 3 for r in bw)
    assert t["latency"]["latency_s"].min() > 0


def test_point_that_never_stabilises_is_reported():
    # a zero threshold cannot be met: the point stops at the cap and says how far it was
    r = pm.measure_point("load_unit", 64 * KiB, 1, small_params(threshold=0.0, max_reps=4))
    assert not r.stable and len(r.bandwidth_bytes_per_s) == 4
    best3 = sorted(r.bandwidth_bytes_per_s)[1:]
    assert r.spread_frac == pytest.approx(pm.spread(best3)) and r.value == pytest.approx(np.median(best3))


def test_stop_rules():
    v = [10.0, 5.0, 9.9, 10.1, 2.0]
    assert pm.ending_reps(v, 3, "best") == [10.1, 10.0, 9.9]       # fastest: spread 2 %
    assert pm.ending_reps(v, 3, "last") == [9.9, 10.1, 2.0]
    assert pm.ending_reps(v, 2, "best", larger_is_better=False) == [2.0, 5.0]  # latencies: shortest
    assert pm.spread([10.1, 10.0, 9.9]) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="unknown stop rule"):
        pm.ending_reps(v, 3, "median")


def test_working_sets_have_points_per_doubling():
    sizes = pm.working_sets(pm.Params(max_bytes=128 * MiB))
    assert sizes[0] == 4 * KiB and sizes[-1] == 128 * MiB
    assert len(sizes) == 15 * 4 + 1
    assert pm.working_sets(pm.Params.quick())[-1] == 128 * MiB
    # the full probe: out to 8x this machine's last-level cache (128 MiB at least)
    want = pm.default_max_bytes(pm.last_level_bytes(), pm.available_bytes())
    assert pm.working_sets(pm.Params())[-1] == want == pm.Params().resolved().max_bytes
    assert pm.Params.quick().resolved().max_bytes == 128 * MiB


def test_working_sets_end_at_a_largest_size_off_the_grid():
    """8x a 35.75 MiB L3 (the Cascade Lake VM of 28 Nov 2026) is 286 MiB, between the grid's 256
    and 304 MiB: the list ends at 286 MiB (it had ended at 304, past the largest size the probe
    had set itself, which can be a quarter of the memory available); a size within half a step of
    a grid point replaces that point."""
    sizes = pm.working_sets(pm.Params(max_bytes=286 * MiB))
    assert sizes[-2:] == [256 * MiB, 286 * MiB] and len(sizes) == 16 * 4 + 2
    # 2^(1/8) above 256 MiB is 279.2 MiB: 270 MiB replaces the grid point of 256 MiB
    sizes = pm.working_sets(pm.Params(max_bytes=270 * MiB))
    assert sizes[-1] == 270 * MiB and 256 * MiB not in sizes and len(sizes) == 16 * 4 + 1
    assert sizes[-2] == round(4 * KiB * 2 ** (63 / 4) / 1024) * 1024


def test_largest_working_set_follows_the_last_level_cache(tmp_path):
    """8x the last level, every instance the probed CPUs use counted once: two CPUs sharing one
    32 MiB L3 -> 256 MiB; each with its own -> 512 MiB; at least 128 MiB, at most a quarter of the
    memory available and 4 GiB."""
    def cache(cpu, idx, level, typ, size, shared):
        d = tmp_path / f"cpu{cpu}" / "cache" / f"index{idx}"
        d.mkdir(parents=True)
        for k, v in dict(level=level, type=typ, size=size, shared_cpu_list=shared).items():
            (d / k).write_text(f"{v}\n")

    for cpu in (0, 1):
        cache(cpu, 0, 1, "Data", "32K", str(cpu))
        cache(cpu, 1, 1, "Instruction", "32K", str(cpu))
        cache(cpu, 2, 2, "Unified", "1024K", str(cpu))
        cache(cpu, 3, 3, "Unified", "32768K", "0-1")
    assert pm.last_level_bytes({0, 1}, root=str(tmp_path)) == 32 * MiB
    # the one sysfs reader both the memory and the aliasing probe use: the instruction cache left out
    assert pm.cache_indices(0, root=str(tmp_path)) == [(1, 32 * 1024, "0"), (2, MiB, "0"), (3, 32 * MiB, "0-1")]
    assert [pm.shared_cpu_count(x) for x in ("0", "0-1", "0-3,8,10-11")] == [1, 2, 7]
    assert pm.default_max_bytes(32 * MiB, 24 * 1024 * MiB) == 256 * MiB
    (tmp_path / "cpu1" / "cache" / "index3" / "shared_cpu_list").write_text("1\n")
    assert pm.last_level_bytes({0, 1}, root=str(tmp_path)) == 64 * MiB
    assert pm.last_level_bytes({0}, root=str(tmp_path)) == 32 * MiB
    assert pm.default_max_bytes(64 * MiB, None) == 512 * MiB
    assert pm.default_max_bytes(2 * MiB, 24 * 1024 * MiB) == 128 * MiB            # at least 128 MiB
    assert pm.default_max_bytes(300 * MiB, 4 * 1024 * MiB) == 1024 * MiB          # a quarter of 4 GiB
    assert pm.default_max_bytes(1024 * MiB, 64 * 1024 * MiB) == 4 * 1024 * MiB    # at most 4 GiB
    assert pm.last_level_bytes({0}, root=str(tmp_path / "none")) is None
    assert pm.default_max_bytes(None, None) == 128 * MiB
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   2000000 kB\n")
    assert pm.available_bytes(str(meminfo)) == 2000000 * 1024


def test_branch_and_dependency_probes_measure_something():
    rows = pc.run(quick=True)
    vals = {}
    for probe, param, _, v in rows:
        vals.setdefault((probe, param), []).append(v)
    # best repetition: robust against being descheduled on a shared machine
    med = {k: float(max(v) if k[0] not in ("branch", "divpar") else min(v)) for k, v in vals.items()}
    assert med[("branch_miss", 0.5)] == 0.5 and med[("branch_miss", 0.1)] == pytest.approx(0.18)
    # unpredictable branches cost more than never-taken ones
    assert med[("branch", 0.5)] > 1.3 * med[("branch", 0.0)]
    # 8 independent chains run faster than one dependent chain
    assert med[("dependency", 8.0)] > 2 * med[("dependency", 1.0)]
    assert med[("flop_simd", next(p for (n, p) in med if n == "flop_simd"))] > 0
    # the divider is slower than the multiply-add pipes on any core we know, and the kernel stays scalar
    div_rate = med[("divsqrt", 64.0)]
    assert 0 < div_rate < med[("flop_scalar", next(p for (n, p) in med if n == "flop_scalar"))] / 2
    # independent scalar work is never slower than the dependent kernel's (Cascade Lake 1.5x, Zen 4 about
    # 1x: a generous bound), and it stays scalar
    assert med[("flop_independent", 64.0)] > 0.9 * med[("flop_scalar", 64.0)]
    # an FMA is never dearer than a multiply and an add (Cascade Lake: 2x the flop rate of
    # uncontracted independent work, the one operation a port either way), and the kernel stays scalar
    assert med[("flop_fma", 64.0)] > 0.9 * med[("flop_independent", 64.0)]
    # the divider beside k multiply-adds (seconds an element), every k of the probe: twelve terms
    # (38 flop beside the divider) take longer than two, and than the divider kernel's element
    assert sorted(p for (n, p) in med if n == "divpar") == [float(k) for k in pc.DIVMIX_TERMS]
    assert med[("divpar", 12.0)] > med[("divpar", 2.0)] and med[("divpar", 12.0)] > pc.DIVSQRT_PER_ELEMENT / div_rate
    # every core at once: the five kernels, each with every core busy (param), in its one-core unit
    n = pc.busy_cores()
    if n > 1:
        assert sorted(k for (k, p) in med if k.startswith("all:")) == sorted(f"all:{k}" for k in pc.ALL_CORES_KERNELS)
        assert {p for (k, p) in med if k.startswith("all:")} == {float(n)}
        # a core is never much faster for its neighbours' work (a generous bound: the host moves)
        assert med[("all:divsqrt", float(n))] < 1.5 * div_rate
        assert med[("all:branch", float(n))] > 0.5 * med[("branch", 0.0)]
        # each beside the same kernel on one core, timed in the same round (param 1), in the same unit;
        # the bounds are generous: timed minutes apart, and a host's slow state takes loop code 1.6-1.9x
        # (docs/accuracy.md; CI of 29 Nov 09:19 met 2.0x here), which the pairing is there for
        assert sorted(k for (k, p) in med if k.startswith("alone:")) == sorted(f"alone:{k}" for k in pc.ALL_CORES_KERNELS)
        assert {p for (k, p) in med if k.startswith("alone:")} == {1.0}
        assert div_rate / 3 < med[("alone:divsqrt", 1.0)] < 3 * div_rate
        assert med[("branch", 0.0)] / 3 < med[("alone:branch", 1.0)] < 3 * med[("branch", 0.0)]


def test_all_cores_kernels_run_each_row_as_the_one_core_kernel():
    """on_all_cores(kernel)(rows, reps, ...) is the one-core kernel run on every row, summed: by
    hand against the kernels themselves, two rows (numba threads) of different data."""
    xs = np.stack([np.linspace(0.5, 1.0, 64), np.linspace(0.25, 0.75, 64)])
    c, e = 0.999, 1e-4
    for kernel, one in (("flop_independent", pc._flop_independent), ("flop_simd", pc._flop_simd)):
        assert pc.on_all_cores(kernel)(xs, 3, c, e) == pytest.approx(one(xs[0], 3, c, e) + one(xs[1], 3, c, e), rel=1e-12)
    for kernel, one in (("divsqrt", pc._divsqrt_scalar), ("chain", pc._chain_add)):
        assert pc.on_all_cores(kernel)(xs, 2) == pytest.approx(one(xs[0], 2) + one(xs[1], 2), rel=1e-12)
    r = np.zeros((2, 100), dtype=np.uint8)
    r[1, :10] = 1
    sinks = np.zeros((2, 1024), dtype=np.int64)
    # never taken: 3 an element; taken: 1 (the store's side)
    assert pc.on_all_cores("branch")(r, 2, sinks) == 2 * (100 * 3) + 2 * (10 * 1 + 90 * 3)
    assert sinks[1, 9] == 9 and sinks[0].sum() == 0
    # the calls the probe and bench/all_cores_compute time, and their values by hand (x of 64 elements)
    calls = pc.all_cores_calls(xs[0], 2, c, e)
    assert list(calls) == list(pc.ALL_CORES_KERNELS)
    assert calls["divsqrt"][2](3, 2.0) == pc.DIVSQRT_PER_ELEMENT * 64 * 3 / 2.0
    assert calls["chain"][2](3, 2.0) == 2.0 / (3 * 64) and calls["branch"][2](2, 1.0) == 1.0 / (2 * pc.BRANCH_ELEMENTS)
    assert calls["flop_independent"][1](2) == pytest.approx(2 * calls["flop_independent"][0](2), rel=1e-12)


def test_independent_flop_kernel_counts_its_flop():
    """flop_independent's 24 flop an element, by hand: its value at one element and one repetition
    (v = 1: every term c_k + e_k, the sum of the constants as the kernel derives them), and its
    assembly: eight scalar multiplies in the loop, no packed arithmetic."""
    assert pc.FLOP_PER_ELEMENT_INDEPENDENT == 24
    c, e = 0.5, 0.25
    cs = [c * f for f in (1, 0.5, 0.25, 0.75, 0.125, 0.375, 0.625, 0.875)]
    es = [e * f for f in (1, 2, 3, 4, 5, 6, 7, 8)]
    assert pc._flop_independent(np.ones(1), 1, c, e) == pytest.approx(sum(cs) + sum(es), rel=1e-15)
    x = np.linspace(0.5, 1.0, 64)
    assert pc._flop_independent(x, 2, c, e) == pytest.approx(2 * sum(sum(v * k + m for k, m in zip(cs, es)) for v in x),
                                                             rel=1e-12)
    assert pc.simd_width_bits(pc._flop_independent, x, 1, c, e) == 64


def test_fma_kernel_counts_its_fmas():
    """flop_fma's twelve multiply-adds an element, by hand: each accumulator ``s_k = s_k * c + v``
    from its start ``k / 10`` (at one element and one repetition: ``c * k / 10 + v``), and its
    assembly: twelve ``vfmadd`` in the loop where the ISA has FMA (a multiply and an add each
    without), no packed arithmetic."""
    import re

    assert pc.FMA_PER_ELEMENT == 12
    c = 0.5
    starts = [k / 10 for k in range(12)]
    assert pc._flop_fma(np.full(1, 3.0), 1, c) == pytest.approx(sum(s * c + 3.0 for s in starts), rel=1e-15)
    x = np.linspace(0.5, 1.0, 64)
    want = 0.0
    for s in starts:
        for v in list(x) * 2:
            s = s * c + v
        want += s
    assert pc._flop_fma(x, 2, c) == pytest.approx(want, rel=1e-12)
    assert pc.simd_width_bits(pc._flop_fma, x, 1, c) == 64
    asm = pc.compiled_asm(pc._flop_fma, x, 1, c)
    # twelve a loop body, however many bodies LLVM unrolls (znver4: 4 and a remainder loop, 60)
    if "fma" in pc.isa()["features"].split():
        n = len(re.findall(r"\tvfmadd\w*sd\t", asm))
        assert n >= 12 and n % 12 == 0, n
        assert not re.findall(r"\t\w*mulsd\t", asm)        # every multiply contracted into an FMA
    else:
        n = len(re.findall(r"\t\w*mulsd\t", asm))
        assert n >= 12 and n % 12 == 0, n


def test_compute_model_reads_the_fma_rate():
    """The flop_fma rows become ``flop_per_s_scalar_fma`` (median of the best repetitions, as the
    other rates) and an FMA's price is two flop at it; without them none, and an FMA is priced as
    two flop at the scalar rate."""
    import pandas as pd

    from pmac.probe import compute_model

    rs = 6e9
    rows = [("flop_scalar", 64.0, i, rs) for i in range(5)] + [("flop_simd", 256.0, i, 4 * rs) for i in range(5)]
    rows += [("dependency", 1.0, i, 1e9) for i in range(5)]
    rows += [("branch", 0.0, i, 5e-10) for i in range(5)] + [("branch_miss", 0.0, 0, 0.0)]
    df = pd.DataFrame(rows, columns=["probe", "param", "rep", "value"])
    isa = {"cpu_name": "x", "llvmlite": "y"}
    m = compute_model(df, isa)
    assert m.flop_per_s_scalar_fma is None and m.fma_op_s == 2.0 / rs
    fma = pd.DataFrame([("flop_fma", 64.0, i, 2 * rs) for i in range(5)], columns=df.columns)
    m = compute_model(pd.concat([df, fma], ignore_index=True), isa)
    assert m.flop_per_s_scalar_fma == 2 * rs and m.fma_op_s == 1.0 / rs


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    out = tmp_path_factory.mktemp("machines")
    msgs = []
    prof = run_probe("tiny", quick=True, out_dir=out, network=False,
                     progress=lambda f, m: msgs.append((f, m)),
                     memory_params=small_params(accesses=("load_unit", "store"), threshold=0.0, max_reps=3))
    return out, prof, msgs


def test_profile_written_and_reloaded(probed):
    out, prof, msgs = probed
    path = out / "tiny.yaml"
    back = load_profile(path)
    verify_raw(back, path)
    assert back.raw_file == "tiny.raw.npz"
    assert back.node.caches and back.node.memory.bandwidth_1core_bytes_per_s["load_unit"] > 0
    # L1 against memory on the raw repetitions, each point's fastest (the fitted values are medians of
    # three repetitions here, threshold 0: a slow spell over one point could invert them)
    raw_bw = load_tables(raw_path(back, path), RAW_TABLES)["bandwidth"]
    unit = raw_bw[(raw_bw["access"] == "load_unit") & (raw_bw["n_cores"] == 1)]
    best = unit.groupby("working_set_bytes")["bandwidth_bytes_per_s"].max()
    assert best.iloc[0] > best.iloc[-1] > 0
    assert back.node.compute.flop_per_s_simd > 0 and back.node.compute.divsqrt_per_s > 0
    assert back.node.compute.chain_add_s > 0 and back.node.compute.chain_mul_s > 0
    # the compute probe's two (quick) rounds run before and after the memory probe, their
    # repetitions numbered across both, and the model is fitted on all of them
    from pmac.probe import compute_model
    rounds = [m for _, m in msgs if "(round " in m]
    assert any("round 1, before the memory probe" in m for m in rounds)
    assert any("round 2, after the memory probe" in m for m in rounds)
    assert all(f == 0.0 for f, m in msgs if "round 1" in m)
    assert all(b >= a for (a, _), (b, _) in zip(msgs, msgs[1:]))     # the bar never runs back
    # the overlap model comes from the overlap probe's points, kept in the raw sidecar
    from pmac.profile import load_raw
    ov = load_raw(back, path)["overlap"]
    assert set(ov["chains"]) == {0, 1, 2, 4, 8, 16} and (ov["time_s"] > 0).all()
    assert back.overlap.kind == "max_beta_min" and 0.0 <= back.overlap.params["beta"] <= 1.0
    assert back.overlap.calibrated_on and all(a.startswith("probe:") for a in back.overlap.calibrated_on)
    assert back.network is None and "network.intra_node" in back.missing()
    # the fetch probe: its repetitions in the sidecar, the L1i from sysfs, miss_s from the medians
    cr = load_raw(back, path)["compute"]
    for _, g in cr.groupby(["probe", "param"]):
        assert sorted(g["rep"]) == list(range(len(g)))
    assert compute_model(cr, back.provenance["isa"]).flop_per_s_scalar == back.node.compute.flop_per_s_scalar
    # the noise probe: a chunk beside each compute round, every core's quanta, the series fitted
    nr = load_raw(back, path)["noise"]
    assert sorted(set(nr["chunk"])) == [0, 1] and sorted(set(nr["core"])) == list(range(back.node.n_cores))
    assert (nr["dt_ns"] > 0).all() and (nr.groupby(["chunk", "core"])["start_s"].nunique() == 1).all()
    nz = back.node.noise
    assert nz is not None and nz.reference == "best" and len(nz.slowdown) == back.node.n_cores
    assert nz.chunk_starts[0] == 0 and len(nz.chunk_starts) == 2
    from pmac.noise import fit as fit_noise
    assert fit_noise(nr) == nz
    fr = load_raw(back, path)["fetch"]
    assert set(fr["pattern"]) == {"sequential", "random"} and (fr["seconds_per_line_s"] > 0).all()
    f = back.node.fetch
    assert f.l1i_size_bytes > 0 and f.miss_s >= 0 and len(f.line_random_s) == len(f.footprint_bytes)
    med = fr[fr["pattern"] == "random"].groupby("footprint_bytes")["seconds_per_line_s"].median()
    assert f.line_random_s == tuple(float(med[int(x)]) for x in f.footprint_bytes)
    prov = back.provenance
    # the aliasing probe: its rounds in chunks after the memory, the overlap and the fetch probe
    # (quick: 2, 2 and 1), numbered on across them, and the model fitted on all of them
    from pmac.probe import alias_model
    ar = load_raw(back, path)["alias"]
    assert sorted(set(ar["round"])) == [0, 1, 2, 3, 4]
    places = [m.rsplit(" (", 1)[-1].rstrip(")") for _, m in msgs if m.startswith("4 KiB aliasing")]
    assert list(dict.fromkeys(places)) == ["after the memory probe", "after the overlap probe", "after the fetch probe"]
    assert prov["alias_probe"] == {"rounds_at": {"after the memory probe": 2, "after the overlap probe": 2,
                                                 "after the fetch probe": 1}}
    assert back.node.alias == alias_model(ar)
    for key in ("cpu_model", "n_cores", "mpi_library", "numba_version", "transparent_hugepage", "isa",
                "os_caches", "created_utc", "command", "parameters"):
        assert key in prov, key
    from pmac.probe import DEFAULT_PAGES
    assert prov["pages"] == {"mode": DEFAULT_PAGES, "in_effect": pm.pages_in_effect(DEFAULT_PAGES)}
    # threshold 0: every point is reported as unstable, with its spread
    assert any("did not stabilise: spread" in w for w in prov["warnings"])
    assert "network not probed (--no-network)" in prov["warnings"]
    assert msgs[-1][0] == 1.0 and all(0 <= f <= 1 for f, _ in msgs)


def test_interrupted_probe_leaves_previous_profile_intact(probed, tmp_path):
    src, _, _ = probed
    for f in ("tiny.yaml", "tiny.raw.npz"):
        (tmp_path / f).write_bytes((src / f).read_bytes())
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}

    class Stop(Exception):
        pass

    def progress(fraction, msg):
        if fraction > 0.3:
            raise Stop(msg)

    with pytest.raises(Stop):
        run_probe("tiny", quick=True, out_dir=tmp_path, network=False, progress=progress,
                  memory_params=small_params())
    after = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    assert after == before  # byte-identical, and no temporary files left behind


def test_cli_rejects_bad_name(capsys, tmp_path):
    assert main(["probe", "--name", "a/b", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pmac probe: error: invalid machine name 'a/b' (a plain file name, no '/')"]
    with pytest.raises(InputError):
        run_probe("", quick=True, out_dir=tmp_path)


def test_cli_rejects_an_unusable_output_directory_before_probing(capsys, tmp_path):
    """A directory the profile cannot be written to fails at once, not after minutes of probing
    (it used to end the whole probe with a NotADirectoryError)."""
    import time

    afile = tmp_path / "afile"
    afile.write_text("")
    t0 = time.monotonic()
    assert main(["probe", "--name", "x", "--out-dir", str(afile / "sub")]) == 2
    assert time.monotonic() - t0 < 10  # nothing was probed (a quick probe takes a minute or two)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pmac probe: error: {afile / 'sub'}: cannot create the output directory: Not a directory"]
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert main(["probe", "--name", "x", "--out-dir", str(ro)]) == 2
        assert "cannot write into the output directory: Permission denied" in capsys.readouterr().err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["afile"] + (["ro"] if os.geteuid() != 0 else [])


def test_all_cores_kernel_counts_every_core():
    if pm.n_cores_available() < 2:
        pytest.skip("single core machine")
    r = pm.measure_point("load_unit", 256 * KiB, 2, small_params(max_reps=3))
    assert r.n_cores == 2 and min(r.bandwidth_bytes_per_s) > 0


def test_single_core_machine_skips_network_with_a_note(monkeypatch, tmp_path):
    rows = [("flop_scalar", 64.0, 0, 1e9), ("flop_simd", 512.0, 0, 4e9), ("dependency", 1.0, 0, 5e8),
            ("dependency", 8.0, 0, 4e9), ("branch", 0.0, 0, 1e-9), ("branch", 0.5, 0, 4e-9),
            ("branch_miss", 0.0, 0, 0.0), ("branch_miss", 0.5, 0, 0.5)]
    monkeypatch.setattr(pm, "n_cores_available", lambda: 1)
    monkeypatch.setattr(pc, "run", lambda **kw: rows)
    prof = run_probe("one", quick=True, out_dir=tmp_path, network=True,
                     memory_params=small_params(min_bytes=64 * KiB, max_bytes=4 * MiB, max_reps=3))
    w = prof.provenance["warnings"]
    assert "single core: no all-cores bandwidth curves" in w
    assert "single core: intra-node ping-pong needs two cores; network section skipped" in w
    assert prof.network is None and {c.n_cores for c in prof.node.bandwidth_curves} == {1}
    comp = load_profile(tmp_path / "one.yaml").node.compute
    assert comp.flop_per_s_simd == 4e9 and comp.simd_width_bits == 512
    assert comp.dependency_distance == (1.0, 8.0) and comp.branch_cost_s == (1e-9, 4e-9)
    assert comp.branch_miss_frac == (0.0, 0.5)
    # its memory range (64 KiB..4 MiB) has no L1 point: the overlap kernels cannot be priced
    assert prof.overlap is None and any(x.startswith("overlap model not calibrated: machine 'one' has no "
                                                     "'node.caches[L1].bandwidth_1core_bytes_per_s") for x in w)


def test_compute_values_are_median_of_best_repetitions_over_rounds():
    """A disturbed round (a neighbour on the core) only lowers rates and raises branch costs:
    the profile takes the median of the COMPUTE_BEST best repetitions, not of all of them."""
    import pandas as pd
    from pmac.probe import COMPUTE_BEST, compute_model
    assert COMPUTE_BEST == 5
    good = [8.0e9, 8.1e9, 7.9e9, 8.05e9, 8.02e9]
    bad = [6.0e9, 6.1e9, 5.9e9, 6.2e9]          # one round at 75 %
    rows = [("flop_scalar", 64.0, i, v) for i, v in enumerate(good + bad)]
    rows += [("flop_simd", 256.0, i, 4 * v) for i, v in enumerate(good + bad)]
    rows += [("divsqrt", 64.0, i, v / 16) for i, v in enumerate(good + bad)]
    rows += [("dependency", 1.0, i, v / 4) for i, v in enumerate(good + bad)]
    costs = [0.37e-9, 0.38e-9, 0.36e-9, 0.375e-9, 0.372e-9, 0.6e-9, 0.7e-9]
    rows += [("branch", 0.0, i, v) for i, v in enumerate(costs)]
    rows += [("branch_miss", 0.0, 0, 0.0)]
    rows += [("chain", 0.0, i, 2 * v) for i, v in enumerate(costs)]   # times too: the cheapest five
    rows += [("chain", 1.0, i, 4 * v) for i, v in enumerate(costs)]
    df = pd.DataFrame(rows, columns=["probe", "param", "rep", "value"])
    m = compute_model(df, {"cpu_name": "x", "llvmlite": "y"})
    assert m.chain_add_s == pytest.approx(2 * 0.372e-9) and m.chain_mul_s == pytest.approx(4 * 0.372e-9)
    assert compute_model(df[df["probe"] != "chain"], {"cpu_name": "x", "llvmlite": "y"}).chain_add_s is None
    assert m.flop_per_s_scalar == pytest.approx(8.02e9)      # median of the five good ones
    assert m.flop_per_s_simd == pytest.approx(4 * 8.02e9)
    assert m.divsqrt_per_s == pytest.approx(8.02e9 / 16)
    assert m.dependency_flop_per_s == pytest.approx((8.02e9 / 4,))
    assert m.branch_cost_s == pytest.approx((0.372e-9,))     # median of the five cheapest


def test_compute_rounds_number_repetitions_across_rounds(monkeypatch):
    monkeypatch.setattr(pc, "_timeit", lambda *a, **kw: [1.0, 2.0])
    monkeypatch.setattr(pc, "simd_width_bits", lambda *a, **kw: 64)
    monkeypatch.setattr(pc, "chain_kernel", lambda d: (lambda n, c, e: None))
    rows = pc.run(quick=True, rounds=3)
    reps = sorted(r for p, q, r, _ in rows if p == "flop_scalar")
    assert reps == [0, 1, 2, 3, 4, 5]


def test_fetch_model_prices_a_miss_from_the_medians():
    """miss_s = median seconds per line of the random layout at the miss footprint minus at the
    baseline footprint (floored at 0); sequential alike; no model without the L1i size."""
    import pandas as pd

    from pmac.probe import fetch_model

    rows = pd.DataFrame([dict(pattern=p, footprint_bytes=fp, rep=r, seconds_per_line_s=v)
                         for p, fp, vals in (("random", 16384, (1e-9, 3e-9, 2e-9)),
                                             ("random", 131072, (5e-9, 4e-9, 9e-9)),
                                             ("sequential", 16384, (1e-9, 1e-9, 1e-9)),
                                             ("sequential", 131072, (0.5e-9, 0.9e-9, 0.8e-9)))
                         for r, v in enumerate(vals)])
    l1i = {"size_bytes": 32768, "ways": 8, "line_bytes": 64}
    f = fetch_model(rows, l1i, baseline_bytes=16384, miss_bytes=131072)
    assert f.miss_s == pytest.approx(5e-9 - 2e-9, rel=1e-12)
    assert f.miss_sequential_s == 0.0                       # 0.8 - 1.0 floored
    assert f.footprint_bytes == (16384.0, 131072.0) and f.line_random_s == pytest.approx((2e-9, 5e-9))
    assert (f.l1i_size_bytes, f.l1i_ways, f.l1i_line_bytes) == (32768, 8, 64)
    assert fetch_model(rows, None, baseline_bytes=16384, miss_bytes=131072) is None


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fetch probe runs x86-64 code")
def test_add_fetch_writes_node_fetch_into_an_existing_profile(probed, tmp_path):
    """pmac probe --add-fetch FILE: node.fetch and the sidecar's fetch table are replaced, the
    rest of the profile stays as it was, the pair still verifies."""
    from pmac.profile import load_raw

    src, _, _ = probed
    for f in ("tiny.yaml", "tiny.raw.npz"):
        (tmp_path / f).write_bytes((src / f).read_bytes())
    before = load_profile(tmp_path / "tiny.yaml")
    assert main(["probe", "--add-fetch", str(tmp_path / "tiny.yaml"), "--quick"]) == 0
    after = load_profile(tmp_path / "tiny.yaml")
    verify_raw(after, tmp_path / "tiny.yaml")
    assert after.node.fetch is not None and after.node.fetch.l1i_size_bytes == before.node.fetch.l1i_size_bytes
    assert dataclasses.replace(after.node, fetch=None) == dataclasses.replace(before.node, fetch=None)
    assert "fetch_added" in after.provenance and after.provenance["created_utc"] == before.provenance["created_utc"]
    raw_b, raw_a = load_raw(before, src / "tiny.yaml"), load_raw(after, tmp_path / "tiny.yaml")
    assert set(raw_a) == set(raw_b)
    assert raw_a["overlap"].equals(raw_b["overlap"]) and raw_a["bandwidth"].equals(raw_b["bandwidth"])


def _refused_for_another_machine(option, tmp_path, capsys, phrase):
    """``pmac probe OPTION FILE`` on a copy of another machine's shipped profile (devbox): exit 2,
    one line naming the file and ``phrase``, the file untouched."""
    import shutil

    other = tmp_path / "other"
    other.mkdir()
    for f in ("devbox.yaml", "devbox.raw.npz"):
        shutil.copy(Path(__file__).resolve().parents[1] / "machines" / f, other / f)
    was = (other / "devbox.yaml").read_bytes()
    assert main(["probe", option, str(other / "devbox.yaml"), "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "devbox.yaml" in err[0] and phrase in err[0]
    assert (other / "devbox.yaml").read_bytes() == was


def test_add_alias_writes_node_alias_into_an_existing_profile(probed, tmp_path, capsys):
    """pmac probe --add-alias FILE --rounds 2: two passes of the aliasing probe pooled (their
    rounds numbered across both), node.alias the model of that table, the rest as it was;
    refused for another machine's profile, naming the file and why, the file untouched."""
    from pmac.probe import alias_model
    from pmac.profile import load_raw

    src, prof, _ = probed
    levels = [c.name for c in prof.node.caches if c.name != "L1i"] + ["memory"]
    # the full probe ran it too (quick: 5 rounds), on one core and on all
    assert prof.node.alias is not None and list(prof.node.alias.levels) == levels
    assert all(s >= 0 and np.isfinite(s) for s in prof.node.alias.stall_s + prof.node.alias.stall_allcores_s)
    for f in ("tiny.yaml", "tiny.raw.npz"):
        (tmp_path / f).write_bytes((src / f).read_bytes())
    before = load_profile(tmp_path / "tiny.yaml")
    assert main(["probe", "--add-alias", str(tmp_path / "tiny.yaml"), "--quick", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote node.alias into {tmp_path / 'tiny.yaml'}: a 4 KiB-aliased load stalls, one core L1")
    after = load_profile(tmp_path / "tiny.yaml")
    verify_raw(after, tmp_path / "tiny.yaml")
    table = load_raw(after, tmp_path / "tiny.yaml")["alias"]
    cores = sorted(set(table["n_cores"]))
    assert sorted(set(table["round"])) == list(range(10))
    assert len(table) == 10 * len(cores) * len(levels) * 2
    assert after.node.alias == alias_model(table) and after.node.alias != before.node.alias
    assert dataclasses.replace(after.node, alias=None) == dataclasses.replace(before.node, alias=None)
    assert after.provenance["alias_added"]["parameters"]["passes"] == 2
    _refused_for_another_machine("--add-alias", tmp_path, capsys, "its aliasing cannot be measured here")


def test_add_noise_writes_node_noise_into_an_existing_profile(probed, tmp_path, capsys):
    """pmac probe --add-noise FILE: two chunks (quick) spread over --noise-span seconds; node.noise
    and the sidecar's noise table replaced, the rest as it was; refused for another machine's
    profile, naming the file and why."""
    from pmac.noise import fit as fit_noise
    from pmac.profile import load_raw

    src, _, _ = probed
    for f in ("tiny.yaml", "tiny.raw.npz"):
        (tmp_path / f).write_bytes((src / f).read_bytes())
    before = load_profile(tmp_path / "tiny.yaml")
    assert main(["probe", "--add-noise", str(tmp_path / "tiny.yaml"), "--quick", "--noise-span", "0.5"]) == 0
    assert "wrote node.noise into" in capsys.readouterr().out
    after = load_profile(tmp_path / "tiny.yaml")
    verify_raw(after, tmp_path / "tiny.yaml")
    table = load_raw(after, tmp_path / "tiny.yaml")["noise"]
    assert sorted(set(table["chunk"])) == [0, 1] and after.node.noise == fit_noise(table)
    assert not table.equals(load_raw(before, src / "tiny.yaml")["noise"])
    assert dataclasses.replace(after.node, noise=None) == dataclasses.replace(before.node, noise=None)
    assert after.provenance["noise_added"]["parameters"]["span_s"] == 0.5
    _refused_for_another_machine("--add-noise", tmp_path, capsys, "not a profile of this machine")


def test_divider_beta_from_the_divmix_kernels_by_hand():
    """pmac.probe.divider_beta prices each divmix kernel as the convolver prices a burst (divider
    2 / divsqrt_per_s an element; other work max(flop / flop rate, one chain add) + one predicted
    branch) and fits t = max + beta * min: kernels timed at exactly that with beta = 0.3 give 0.3
    back; compute_model takes the median of the five fastest repetitions of each k as for every
    timed probe, and a profile without divmix rows has none."""
    import pandas as pd

    from pmac.probe import compute_model, divider_beta

    rd, rs, c0, ch = 5e8, 7e9, 0.5e-9, 0.7e-9
    t_div = 2 / rd

    def timed(k, beta):
        other = max(pc.divmix_other_flop(k) / rs, ch) + c0
        return max(t_div, other) + beta * min(t_div, other)

    assert pc.divmix_other_flop(4) == 14 and pc.divmix_other_flop(12) == 38   # 2k + (k - 1) + 3
    mix = pd.Series({k: timed(k, 0.3) for k in pc.DIVMIX_TERMS})
    assert divider_beta(mix, divsqrt_per_s=rd, flop_per_s_scalar=rs, chain_add_s=ch, branch_s=c0) == pytest.approx(0.3, rel=1e-9)
    # every k's other side is flop-bound here (k = 2: 8 flop / 7e9 = 1.14 ns > the 0.7 ns chain add)
    assert pc.divmix_other_flop(2) / rs > ch
    # faster than side by side: clipped to 0
    assert divider_beta(mix * 0.5, divsqrt_per_s=rd, flop_per_s_scalar=rs, chain_add_s=ch, branch_s=c0) == 0.0
    rows = [("flop_scalar", 64.0, i, rs) for i in range(5)] + [("flop_simd", 256.0, i, 4 * rs) for i in range(5)]
    rows += [("divsqrt", 64.0, i, rd) for i in range(5)] + [("dependency", 1.0, i, 1e9) for i in range(5)]
    rows += [("branch", 0.0, i, c0) for i in range(5)] + [("branch_miss", 0.0, 0, 0.0)]
    rows += [("chain", 0.0, i, ch) for i in range(5)] + [("chain", 1.0, i, 2 * ch) for i in range(5)]
    for k in pc.DIVMIX_TERMS:      # five repetitions at the price, two slow ones (ignored)
        rows += [("divmix", float(k), i, timed(k, 0.3) * (1.0 if i < 5 else 1.5)) for i in range(7)]
    df = pd.DataFrame(rows, columns=["probe", "param", "rep", "value"])
    assert compute_model(df, {"cpu_name": "x", "llvmlite": "y"}).divider_beta == pytest.approx(0.3, rel=1e-9)
    assert compute_model(df[df["probe"] != "divmix"], {"cpu_name": "x", "llvmlite": "y"}).divider_beta is None
    # the divpar kernels (probes since 29 Nov 2026) are fitted where a table has them, divmix not
    par = df[df["probe"] == "divmix"].assign(probe="divpar", value=lambda d: [
        timed(int(k), 0.6) * (1.0 if i < 5 else 1.5) for k, i in zip(d["param"], d["rep"])])
    both = pd.concat([df, par], ignore_index=True)
    assert compute_model(both, {"cpu_name": "x", "llvmlite": "y"}).divider_beta == pytest.approx(0.6, rel=1e-9)
    # with the flop_independent kernel the flop_scalar rows no longer price the other work: the same
    # kernels timed at rs, the dependent kernel's rate halved, still give 0.3, and the model carries both
    dep = df.assign(value=np.where(df["probe"] == "flop_scalar", rs / 2, df["value"]))
    ind = pd.DataFrame([("flop_independent", 64.0, i, rs) for i in range(5)], columns=df.columns)
    m = compute_model(pd.concat([dep, ind], ignore_index=True), {"cpu_name": "x", "llvmlite": "y"})
    assert m.divider_beta == pytest.approx(0.3, rel=1e-9)
    assert m.flop_per_s_scalar == rs / 2 and m.flop_per_s_scalar_independent == rs and m.scalar_rate == rs
    assert compute_model(dep, {"cpu_name": "x", "llvmlite": "y"}).divider_beta != pytest.approx(0.3, abs=0.05)


def test_all_cores_slowdown_from_the_probe_rows_by_hand():
    """compute_model reads the all:KERNEL rows as each kernel's time a core with every core busy
    over its time alone, at the profile's statistic: rates (flop, divides) as alone / busy, times
    (branch at p = 0, chain adds) as busy / alone; a table without them has none."""
    import pandas as pd

    from pmac.probe import compute_model

    rs, rd, c0, ch = 6e9, 5e8, 1e-9, 1.3e-9
    rows = [("flop_scalar", 64.0, i, 4e9) for i in range(5)] + [("flop_simd", 256.0, i, 3e10) for i in range(5)]
    rows += [("flop_independent", 64.0, i, rs) for i in range(5)] + [("divsqrt", 64.0, i, rd) for i in range(5)]
    rows += [("dependency", 1.0, i, 1e9) for i in range(5)] + [("branch_miss", 0.0, 0, 0.0), ("branch_miss", 0.5, 0, 0.5)]
    rows += [("branch", 0.0, i, c0) for i in range(5)] + [("branch", 0.5, i, 7 * c0) for i in range(5)]
    rows += [("chain", 0.0, i, ch) for i in range(5)] + [("chain", 1.0, i, 1.1 * ch) for i in range(5)]
    base = pd.DataFrame(rows, columns=["probe", "param", "rep", "value"])
    busy = [("all:flop_independent", 2.0, i, rs / 1.4) for i in range(5)] + [("all:divsqrt", 2.0, i, rd / 1.6) for i in range(5)]
    busy += [("all:branch", 2.0, i, c0 * 1.1) for i in range(5)] + [("all:chain", 2.0, i, ch) for i in range(5)]
    busy += [("all:divsqrt", 2.0, 5 + i, rd / 3) for i in range(3)]     # three slow repetitions: not the best
    df = pd.concat([base, pd.DataFrame(busy, columns=base.columns)], ignore_index=True)
    m = compute_model(df, {"cpu_name": "x", "llvmlite": "y"})
    assert m.all_cores_n == 2
    got = dict(zip(m.all_cores_kernels, m.all_cores_slowdown))
    assert got == pytest.approx({"flop_independent": 1.4, "divsqrt": 1.6, "branch": 1.1, "chain": 1.0}, rel=1e-12)
    # at the median of all repetitions the slow ones count: 8 divider rows, the median between rd / 1.6 and rd / 3
    q = dict(zip(*[compute_model(df, {"cpu_name": "x", "llvmlite": "y"}, slow_quantile=0.5).__getattribute__(a)
                   for a in ("all_cores_kernels", "all_cores_slowdown")]))
    assert q["divsqrt"] == pytest.approx(rd / np.quantile([rd / 1.6] * 5 + [rd / 3] * 3, 0.5), rel=1e-12)
    none = compute_model(base, {"cpu_name": "x", "llvmlite": "y"})
    assert none.all_cores_n is None and none.all_cores_kernels == () and none.all_cores_slowdown == ()
    # alone:KERNEL rows (timed beside the busy ones) are the time alone where present: a pool whose
    # one-core rows came from other probes (here the branch 0.5x, flop 2x faster) takes them
    paired = [("alone:flop_independent", 1.0, i, rs / 2) for i in range(5)] + [("alone:branch", 1.0, i, 2 * c0) for i in range(5)]
    m = compute_model(pd.concat([df, pd.DataFrame(paired, columns=base.columns)], ignore_index=True),
                      {"cpu_name": "x", "llvmlite": "y"})
    got = dict(zip(m.all_cores_kernels, m.all_cores_slowdown))
    assert got == pytest.approx({"flop_independent": 0.7, "divsqrt": 1.6, "branch": 0.55, "chain": 1.0}, rel=1e-12)


@pytest.mark.parametrize("kernel", ["divpar_kernel", "divmix_kernel"])
def test_divider_mix_kernels_compile_scalar_and_scale_with_their_terms(kernel):
    """The divpar kernels (and the former divmix ones) stay scalar (no fastmath: the divides are
    not vectorised, the other work neither) and their work grows with k: the 12-term kernel runs
    more instructions than the 2-term."""
    x = np.linspace(0.5, 1.0, 64)
    k2, k12 = getattr(pc, kernel)(2), getattr(pc, kernel)(12)
    assert k2(x, 1) != k12(x, 1)
    assert pc.simd_width_bits(k2, x, 1) == 64 and pc.simd_width_bits(k12, x, 1) == 64
    asm2, asm12 = pc.compiled_asm(k2, x, 1), pc.compiled_asm(k12, x, 1)
    assert asm2.count("mulsd") < asm12.count("mulsd") and "divsd" in asm2 and "sqrtsd" in asm2


def test_divpar_kernel_computes_what_it_says():
    """divpar_kernel(k)(x, reps): reps times the sum over x of 1 / (v sqrt v) plus, per term j, of
    v (1 - 1e-3 (j + 1)) + 1e-4 (j + 1), each term in its own accumulator (computed here in numpy);
    divmix_kernel(k) sums the same terms another way, so the two agree to rounding."""
    x = np.linspace(0.5, 1.0, 37)
    want = 3 * (np.sum(1.0 / (x * np.sqrt(x))) + sum(np.sum(x * (1.0 - 1e-3 * (j + 1)) + 1e-4 * (j + 1))
                                                    for j in range(4)))
    assert pc.divpar_kernel(4)(x, 3) == pytest.approx(want, rel=1e-12)
    assert pc.divmix_kernel(4)(x, 3) == pytest.approx(want, rel=1e-12)



#: run in a fresh interpreter per mode: a buffer of 64 MiB allocated under ``pm.pages(mode)``;
#: prints whether its mapping was madvised for huge pages (VmFlags 'hg') and how many KiB of
#: anonymous huge pages the allocation brought
_PAGES_CHILD = r"""
import json, sys
from pathlib import Path
from probes import memory as pm

def anon_huge_kib():
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise SystemExit("no AnonHugePages in smaps_rollup")

def asked_for_huge_pages(buf):
    addr, inside = buf.ctypes.data, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0] if line else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and line.startswith("VmFlags:"):
            return "hg" in line.split()[1:]
    raise SystemExit(f"no mapping holds 0x{addr:x}")

with pm.pages(sys.argv[1]):
    k0 = anon_huge_kib()
    buf = pm.aligned_full(8 << 20, 1.0)      # 64 MiB, touched
    print(json.dumps([asked_for_huge_pages(buf), anon_huge_kib() - k0]))
"""


def test_pages_modes_reach_the_buffers_and_are_restored():
    """--pages: with transparent huge pages in 'madvise' mode, a probe buffer of 64 MiB gets huge
    pages only when asked for ('huge'), none by default; the setting is restored afterwards."""
    import json
    import subprocess
    import sys
    if pm.thp_setting() != "madvise" or not Path("/proc/self/smaps_rollup").exists():
        pytest.skip(f"transparent huge pages are {pm.thp_setting()!r}, not 'madvise': both modes give the same pages")
    from numpy._core import multiarray
    before = (multiarray._get_madvise_hugepage(), os.environ.get("NUMPY_MADVISE_HUGEPAGE"))
    for mode in ("default", "huge"):
        with pm.pages(mode):
            assert os.environ["NUMPY_MADVISE_HUGEPAGE"] == ("1" if mode == "huge" else "0")
            assert multiarray._get_madvise_hugepage() == (mode == "huge")
    assert (multiarray._get_madvise_hugepage(), os.environ.get("NUMPY_MADVISE_HUGEPAGE")) == before
    assert pm.pages_in_effect("default") == "4 KiB pages: huge pages not asked for (transparent huge pages: madvise)"
    # what the buffers get, each mode in a fresh interpreter: in this one, malloc may hand back memory
    # an earlier test had asked huge pages for (CI runs of 28 Nov 2026 twice found the flag on a
    # default buffer's mapping, even with three buffers held at once); the kernel may have no huge
    # page at hand for a moment (a CI run once got none), so 'huge' is given three tries
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [env.get("PYTHONPATH")] if p])
    got = {}
    for mode in ("default", "huge"):
        for _ in range(3):
            r = subprocess.run([sys.executable, "-c", _PAGES_CHILD, mode], capture_output=True, text=True,
                               env=env, timeout=120)
            assert r.returncode == 0, r.stderr
            got[mode] = tuple(json.loads(r.stdout))
            if mode == "default" or got[mode][1] >= 2048:
                break
    assert got["default"] == (False, 0)
    assert got["huge"][0] is True and got["huge"][1] >= 2048


def test_pages_in_words_and_a_bad_mode():
    assert pm.pages_in_effect("default", "always") == "huge pages (transparent huge pages: always)"
    assert pm.pages_in_effect("huge", "never") == "4 KiB pages (transparent huge pages: never)"
    assert pm.pages_in_effect("huge", "madvise") == "huge pages, asked for (transparent huge pages: madvise)"
    with pytest.raises(ValueError, match="pages must be one of default, huge, not 'big'"):
        with pm.pages("big"):
            pass


def test_cli_help_names_the_default_pages(capsys):
    from pmac.probe import DEFAULT_PAGES
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"default: {DEFAULT_PAGES} (pmac.probe.DEFAULT_PAGES)" in out


def test_bench_store_kernels_prints_both_loops_and_their_ratio():
    """bench/store_kernels: the probe's store loop compiled with and without LLVM's interleaving,
    timed alternately; each printed ratio is the second rate over the first."""
    import re
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[1] / "bench" / "store_kernels"
    r = subprocess.run([sys.executable, str(bench), "--reps", "3", "--sizes-kib", "16,64"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = re.findall(r"^\s+(\d+) KiB .*?: ([0-9.]+) GB/s .*?: ([0-9.]+) GB/s\s+ratio ([0-9.]+)$", r.stdout, re.M)
    assert [int(x[0]) for x in rows] == [16, 64]
    for _, plain, inter, ratio in rows:
        assert float(plain) > 0 and float(inter) > 0
        assert float(ratio) == pytest.approx(float(inter) / float(plain), abs=0.01 + 0.02 * float(ratio))


def test_store_and_copy_points_keep_the_faster_of_the_two_loops():
    """The two compilations of the store/copy loops write the same values; faster_loop keeps the
    loop whose best alternated repetition is faster; a measured point records the loop it ran (the
    gather too, of its two loops)."""
    from probes import memory as pm

    pm._compile_plain()
    a1, a2 = pm.aligned_full(1000, 0.0), pm.aligned_full(1000, 0.0)
    assert pm._store(a1, 3) == pm._store_il(a2, 3) == 2.0 and np.array_equal(a1, a2)
    b1, b2 = pm.aligned_full(1000, 0.0), pm.aligned_full(1000, 0.0)
    src = np.arange(1000.0)
    pm._copy_par(src, b1, 2, 2)
    pm._copy_par_il(src, b2, 2, 2)
    assert np.array_equal(b1, src) and np.array_equal(b2, src)

    class Fake:
        """times per loop, in call order; the interleaved loop is faster at its best"""
        def __init__(self):
            self.access, self.loop = "store", ""
            self.times = {"one_store": [1.0, 0.9, 1.1], "interleaved": [1.2, 0.8, 1.3]}

        def run(self, sweeps):
            return self.times[self.loop].pop(0)

    assert pm.faster_loop(Fake(), 1) == "interleaved"
    fake = Fake()
    fake.times["interleaved"] = [0.95, 0.95, 0.95]
    assert pm.faster_loop(fake, 1) == "one_store"
    p = pm.Params.quick()
    r = pm.measure_point("store", 64 * 1024, 1, p)
    assert r.loop in pm.STORE_LOOPS and r.value > 0
    assert pm.measure_point("load_unit", 64 * 1024, 1, p).loop == ""
    # the gather's two loops (AVX-512 gathers / scalar loads) sum the same elements: exact on
    # integers, one core and two; a point records which ran it
    a, idx = pm.aligned_full(4096, 0.0), pm.aligned_full(4096, 0, np.uint32)
    a[:] = np.arange(4096.0)
    pm._permutation_in_slices(idx, 2, 3)
    want = 3 * 4095 * 4096 / 2
    assert pm._load_random(a, idx, 3) == pm._load_random_scalar(a, idx, 3) == want
    assert pm._load_random_par(a, idx, 3, 2) == pm._load_random_par(a, idx, 3, 2, True) == want
    g = pm.measure_point("load_random", 64 * 1024, 1, p)
    assert g.loop in pm.GATHER_LOOPS and g.value > 0


def test_rounds_probe_k_times_and_pool_them_at_the_median(probed, tmp_path, monkeypatch, capsys):
    """pmac probe --rounds K: K probes, each into OUT/NAME.rounds/round-I, pooled into OUT/NAME.yaml
    at the median of every repetition (the default with --rounds), its provenance naming the
    rounds; each round here is the module's real tiny probe, copied."""
    import shutil

    import pmac.probe
    from pmac.pool import pool
    from pmac.profile import load_raw

    src, _, _ = probed
    calls = []

    def fake_run_probe(name, *, quick, out_dir, progress=None, network=True, command=None, pages=None):
        calls.append((name, Path(out_dir), quick, network, pages))
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for f in ("tiny.yaml", "tiny.raw.npz"):
            shutil.copy(src / f, Path(out_dir) / f)
        return load_profile(Path(out_dir) / "tiny.yaml")

    monkeypatch.setattr(pmac.probe, "run_probe", fake_run_probe)
    out = tmp_path / "m"
    assert main(["probe", "--name", "tiny", "--quick", "--no-network", "--rounds", "3", "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "pooled 3 round(s)" in printed and "the median of all its repetitions" in printed
    assert [c[1] for c in calls] == [out / "tiny.rounds" / f"round-{i}" for i in (1, 2, 3)]
    assert all(c[0] == "tiny" and c[2] is True and c[3] is False for c in calls)
    pooled = load_profile(out / "tiny.yaml")
    verify_raw(pooled, out / "tiny.yaml")
    assert pooled.provenance["statistic"] == "median"
    assert [Path(p["file"]) for p in pooled.provenance["pooled_from"]] == \
        [out / "tiny.rounds" / f"round-{i}" / "tiny.yaml" for i in (1, 2, 3)]
    one = load_raw(load_profile(src / "tiny.yaml"), src / "tiny.yaml")["compute"]
    three = load_raw(pooled, out / "tiny.yaml")["compute"]
    assert len(three) == 3 * len(one)
    # the same as pooling the three rounds by hand, and a point's rate the median of its repetitions
    by_hand, _ = pool(list(out.glob("tiny.rounds/round-*/tiny.yaml")), name="tiny", statistic="median")
    assert pooled.node.compute.flop_per_s_scalar == by_hand.node.compute.flop_per_s_scalar
    assert pooled.node.compute.flop_per_s_scalar == pytest.approx(
        float(np.median(three[three["probe"] == "flop_scalar"]["value"])), rel=1e-12)
    assert sorted(p.name for p in out.glob("*.yaml")) == ["tiny.yaml"]   # the rounds stay out of OUT/*.yaml
    assert main(["show", str(out / "tiny.yaml")]) == 0
    assert "pooled from 3 probe(s)" in capsys.readouterr().out


def test_rounds_bad_arguments_are_refused_before_probing(probed, tmp_path, monkeypatch, capsys):
    import pmac.probe

    monkeypatch.setattr(pmac.probe, "run_probe", lambda *a, **k: pytest.fail("probed"))
    src, _, _ = probed
    for argv, msg in ((["--rounds", "0"], "--rounds must be 1 or more, not 0"),
                      (["--rounds", "2", "--gap", "-1"], "--gap must be 0 or more seconds"),
                      (["--rounds", "2", "--statistic", "fastest"], "fastest"),
                      (["--add-noise", str(src / "tiny.yaml"), "--rounds", "2"], "--rounds and --gap are for a new probe or --add-alias, not with --add-noise"),
                      (["--add-alias", str(src / "tiny.yaml"), "--statistic", "median"], "--statistic is for a new probe, not with --add-alias"),
                      (["--add-alias", str(src / "tiny.yaml"), "--add-noise", str(src / "tiny.yaml")], "one probe at a time: --add-noise and --add-alias given")):
        name = [] if {"--add-noise", "--add-alias"} & set(argv) else ["--name", "x", "--out-dir", str(tmp_path)]
        assert main(["probe", *name, *argv]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_check_compares_this_machine_with_its_profile(probed, capsys, tmp_path):
    """pmac check on a quick probe of this machine: a row per CPU the process may run on, with
    positive ratios, and the verdict; refused, by name, for a profile of another host and for one
    without raw repetitions."""
    import re

    from pmac.profile import save_profile

    out, prof, _ = probed
    assert main(["check", str(out / "tiny.yaml"), "--rounds", "1"]) == 0
    text = capsys.readouterr().out
    cell = r"\s+([\d.]+) \(([\d.]+)-([\d.]+)\)"
    # L2 load, scalar flop, loop work, and the loop with every CPU busy ("-" on one CPU)
    rows = re.findall(r"^\s+(\d+)" + cell * 3 + r"(?:" + cell + r"|\s+-)$", text, re.M)
    assert sorted(int(r[0]) for r in rows) == sorted(os.sched_getaffinity(0))
    assert all(float(x) > 0 for r in rows for x in r[1:10])
    if len(rows) > 1:           # the quick probe ran its all: kernels: the busy column is measured
        assert all(float(x) > 0 for r in rows for x in r[10:])
        assert "(loop, all busy: each CPU's loop with every CPU running it at once" in text
    assert re.search(r"^  runs (as probed|faster|slower)", text, re.M), text
    other = dataclasses.replace(load_profile(out / "tiny.yaml"),
                                provenance=dict(prof.provenance, host="elsewhere"))
    save_profile(other, tmp_path / "other.yaml")
    assert main(["check", str(tmp_path / "other.yaml")]) == 2
    assert "probed on host 'elsewhere'" in capsys.readouterr().err
    bare = dataclasses.replace(load_profile(out / "tiny.yaml"), raw_file=None)
    save_profile(bare, tmp_path / "bare.yaml")
    assert main(["check", str(tmp_path / "bare.yaml")]) == 2
    assert "no raw load-bandwidth or flop_scalar repetitions to compare with" in capsys.readouterr().err
    assert main(["check", str(out / "tiny.yaml"), "--rounds", "0"]) == 2
    assert "--rounds must be at least 1, not 0" in capsys.readouterr().err

"""pmac.pool and ``pmac pool``: profiles refitted from their raw repetitions, probes of one machine
pooled. The shipped probed profiles (machines/xeon-vm.yaml, machines/devbox.yaml, with their
sidecars) are the data: refitting with pmac probe's own statistic must give back what pmac probe
wrote, and the median statistic is checked against medians computed here from the raw rows."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pmac.errors import InputError
from pmac.overlap import samples_from_probe
from pmac.pool import pool, pool_raw, refit
from pmac.profile import load_profile, load_raw

REPO = Path(__file__).resolve().parents[1]
MACHINES = REPO / "machines"


def _load(name: str):
    path = MACHINES / f"{name}.yaml"
    prof = load_profile(path)
    return prof, load_raw(prof, path)


def _copy(name: str, to: Path) -> Path:
    to.mkdir(parents=True, exist_ok=True)
    for suffix in (".yaml", ".raw.npz"):
        shutil.copy(MACHINES / f"{name}{suffix}", to / f"{name}{suffix}")
    return to / f"{name}.yaml"


def _same(a, b) -> bool:
    """Equal dataclasses, floats to 1e-12 relative (a least-squares fit over the same rows in
    another order differs in the last bits)."""
    from pmac.schema import to_dict

    def flat(x):
        if isinstance(x, dict):
            return [f for key in sorted(x) for f in [key] + flat(x[key])]
        if isinstance(x, (list, tuple)):
            return [f for y in x for f in flat(y)]
        return [x]
    fa, fb = flat(to_dict(a)), flat(to_dict(b))
    return len(fa) == len(fb) and all(
        (isinstance(u, float) and isinstance(v, float) and v == pytest.approx(u, rel=1e-12)) or u == v
        for u, v in zip(fa, fb))


@pytest.mark.parametrize("name", ["xeon-vm", "devbox"])
def test_refit_with_the_probes_statistic_gives_back_the_probed_profile(name):
    """refit at the profile's own statistic from the sidecar (best for the devbox's single probe,
    median for xeon-vm's four pooled rounds, pmac probe --rounds): node (curves, caches, plateaus,
    compute, fetch, noise) and network (links, collectives, the thread-level variant) exactly as
    they were fitted; the devbox (a Zen 3 this machine is not) from the cache list in its
    provenance (its memory plateau as the present rule fits it). The shipped overlap models were
    calibrated on applications too (bench/calibrate_overlap): kept."""
    prof, raw = _load(name)
    assert prof.provenance.get("statistic", "best") == {"xeon-vm": "median", "devbox": "best"}[name]
    again = refit(prof, raw, statistic=prof.provenance.get("statistic", "best"))
    assert again.node == dataclasses.replace(prof.node, memory=again.node.memory)
    if name == "xeon-vm":      # 128 MiB probed, below twice its 300 MiB L3: the largest point, as fitted
        assert again.node.memory == prof.node.memory
    else:
        # devbox.yaml (24 Nov) took memory from twice its 32 MiB L3 on (64-128 MiB); pmac.fit takes it
        # from 4x on since 27 Nov (MEMORY_FROM): its largest point, 128 MiB, each curve's own
        from pmac.fit import MEMORY_FROM, curves_from_raw
        assert MEMORY_FROM == 4.0
        mem = again.node.memory
        for c in curves_from_raw(raw["bandwidth"], window=5, rule="best"):
            assert c.working_set_bytes[-1] == pytest.approx(128 * 2**20, rel=1e-6)
            got = (mem.bandwidth_1core_bytes_per_s if c.n_cores == 1 else mem.bandwidth_allcores_bytes_per_s)[c.access]
            assert got == c.bandwidth_bytes_per_s[-1]
        was = prof.node.memory.bandwidth_allcores_bytes_per_s["load_unit"]
        assert mem.bandwidth_allcores_bytes_per_s["load_unit"] < was
    assert _same(again.network, prof.network) and again.network != dataclasses.replace(prof.network, mpi_library="x")
    assert len(again.network_variants) == 1 and _same(again.network_variants[0], prof.network_variants[0])
    assert any(not k.startswith("probe:") for k in prof.overlap.calibrated_on) and again.overlap == prof.overlap


def test_refit_at_the_median_takes_every_repetition():
    """refit(statistic='median'): each compute rate the median of all its rows, each curve point the
    median of all its repetitions (hand-computed here), rates never above the best-of ones, times
    never below; ISA and clock kept; a probe-only overlap model recalibrated on the overlap points
    at the median of all their repetitions (samples_from_probe(slow_quantile=0.5))."""
    prof, raw = _load("xeon-vm")
    med = refit(prof, raw, statistic="median")
    comp = raw["compute"]
    assert med.node.compute.flop_per_s_scalar == pytest.approx(
        float(np.median(comp[comp["probe"] == "flop_scalar"]["value"])), rel=1e-12)
    best = refit(prof, raw, statistic="best")
    assert med.node.compute.flop_per_s_scalar < best.node.compute.flop_per_s_scalar
    assert med.node.compute.chain_add_s > best.node.compute.chain_add_s
    bw = raw["bandwidth"]
    unit = bw[(bw["access"] == "load_unit") & (bw["n_cores"] == 1)]
    curve = next(c for c in med.node.bandwidth_curves if c.access == "load_unit" and c.n_cores == 1)
    want = unit.groupby("working_set_bytes")["bandwidth_bytes_per_s"].median()
    assert np.allclose(curve.bandwidth_bytes_per_s, want.to_numpy(), rtol=1e-12)
    assert med.node.compute.isa == prof.node.compute.isa and med.node.compute.clock_hz == prof.node.compute.clock_hz
    assert med.provenance["statistic"] == "median"         # what the rates are at (samples_from_probe reads it)
    assert refit(prof, raw, statistic="0.7").provenance["statistic"] == "0.7"
    assert med.name == prof.name and med.overlap == prof.overlap       # calibrated on applications: kept
    # a profile whose overlap model came from the probe alone (as pmac probe writes it): refitted
    probe_only = refit(dataclasses.replace(prof, overlap=None), raw, statistic="median")
    assert all(k.startswith("probe:") for k in probe_only.overlap.calibrated_on)
    ov = raw["overlap"]
    s = samples_from_probe(probe_only, ov, slow_quantile=0.5).set_index("case")
    g = ov[(ov["working_set_bytes"] == 1048576) & (ov["chains"] == 4)]["time_s"]
    assert s.loc["probe:1048576B:4chains", "measured_s"] == pytest.approx(float(np.median(g)), rel=1e-12)
    # without slow_quantile: the profile's own statistic (its provenance), best-of when it names none
    bare = dataclasses.replace(probe_only, provenance={})
    assert samples_from_probe(bare, ov).set_index("case").loc["probe:1048576B:4chains", "measured_s"] == \
        pytest.approx(float(np.median(np.sort(g)[:5])), rel=1e-12)
    pooled = dataclasses.replace(probe_only, provenance={"statistic": "median"})
    assert samples_from_probe(pooled, ov).set_index("case").loc["probe:1048576B:4chains", "measured_s"] == \
        pytest.approx(float(np.median(g)), rel=1e-12)
    with pytest.raises(InputError, match="no raw bandwidth and compute repetitions to refit from"):
        refit(prof, {}, statistic="median")
    for bad in ("mean", "1.5", "0"):
        with pytest.raises(InputError, match=f"unknown statistic '{bad}' \\(best, median, or a quantile between 0 "):
            refit(prof, raw, statistic=bad)
    # without the OS's cache list in its provenance, only this machine's list can serve, and only
    # for a profile of this machine
    bare = dataclasses.replace(prof, provenance={k: v for k, v in prof.provenance.items() if k != "os_caches"})
    foreign = dataclasses.replace(bare, provenance={**bare.provenance, "host": "elsewhere"})
    with pytest.raises(InputError, match="no os_caches to refit the cache levels with, and this machine's cache list "
                                         "does not describe it \\(probed on host 'elsewhere'"):
        refit(foreign, raw)


def test_refit_at_a_slow_quantile():
    """refit(statistic='0.75'): each point at the value three quarters of its repetitions are at
    least as fast as: a rate at its 25th percentile, a time (the chain's add, the latency curve) at
    its 75th, the overlap points' times at their 75th (hand-computed with numpy here); slower than
    the median refit, which is the quantile 0.5."""
    from pmac.pool import slow_quantile_of

    prof, raw = _load("xeon-vm")
    q75 = refit(prof, raw, statistic="0.75")
    med = refit(prof, raw, statistic="median")
    comp = raw["compute"]
    rate = comp[comp["probe"] == "flop_scalar"]["value"].to_numpy()
    add = comp[(comp["probe"] == "chain") & (comp["param"] == 0.0)]["value"].to_numpy()
    assert q75.node.compute.flop_per_s_scalar == pytest.approx(float(np.percentile(rate, 25)), rel=1e-12)
    assert q75.node.compute.chain_add_s == pytest.approx(float(np.percentile(add, 75)), rel=1e-12)
    assert q75.node.compute.flop_per_s_scalar <= med.node.compute.flop_per_s_scalar
    lat = raw["latency"]
    first = lat[lat["working_set_bytes"] == lat["working_set_bytes"].min()]["latency_s"].to_numpy()
    assert q75.node.latency_curve.latency_s[0] == pytest.approx(float(np.percentile(first, 75)), rel=1e-12)
    bw = raw["bandwidth"]
    unit = bw[(bw["access"] == "store") & (bw["n_cores"] == 1)]
    curve = next(c for c in q75.node.bandwidth_curves if c.access == "store" and c.n_cores == 1)
    want = unit.groupby("working_set_bytes")["bandwidth_bytes_per_s"].quantile(0.25)
    assert np.allclose(curve.bandwidth_bytes_per_s, want.to_numpy(), rtol=1e-12)
    ov = raw["overlap"]
    g = ov[(ov["working_set_bytes"] == 1048576) & (ov["chains"] == 0)]["time_s"]
    s = samples_from_probe(q75, ov, slow_quantile=0.75).set_index("case")
    assert s.loc["probe:1048576B:0chains", "measured_s"] == pytest.approx(float(np.percentile(g, 75)), rel=1e-12)
    assert [slow_quantile_of(x) for x in ("best", "median", "0.71", 0.25)] == [None, 0.5, 0.71, 0.25]


def test_refit_fits_the_network_at_the_statistics_quantile():
    """The network follows the statistic as the node does (pmac.pool.network_quantile_of): ``best``
    at pmac probe's lower quartile, ``median`` at 0.5, q at q: a 2-rank 8 B allreduce at that
    quantile of its repetitions, less the one-rank call's at the same quantile where the probe timed
    the collectives in mpi4py loops (xeon-vm), as they are where it timed them in compiled loops
    (epyc-vm, probed since 28 Nov) (hand-computed here from the sidecars,
    pmac.fit_network.fit_collectives); the thread-level variant from its own tables alike."""
    from pmac.pool import network_quantile_of

    assert [network_quantile_of(s) for s in ("best", "median", "0.7")] == [0.25, 0.5, 0.7]
    for name, loop in (("xeon-vm", "mpi4py"), ("epyc-vm", "compiled")):
        prof, raw = _load(name)
        assert prof.network.collective_loop == loop
        got = {}
        for stat, q in (("best", 0.25), ("median", 0.5), ("0.75", 0.75)):
            fitted = refit(prof, raw, statistic=stat)
            for net, table in ((fitted.network, "collective"), (fitted.network_variants[0], "collective_multiple")):
                c = raw[table]
                ar = c[(c.op == "allreduce") & (c.placement == "intra_node")]
                one = ar[ar.n_ranks == 1]
                floor = one[one.msg_bytes == one.msg_bytes.min()].time_s.quantile(q) if loop == "mpi4py" else 0.0
                low = ar[(ar.n_ranks == 2) & (ar.msg_bytes == 8)].time_s.quantile(q)
                cost = next(x for x in net.collectives if (x.op, x.msg_bytes, x.n_ranks, x.placement) ==
                            ("allreduce", 8, 2, "intra_node"))
                assert cost.time_s == pytest.approx(max(low - floor, 0.05 * low), rel=1e-12), (name, stat, table)
                got[stat, table] = cost.time_s
        for table in ("collective", "collective_multiple"):   # (not monotone: the floor moves with q too)
            assert len({got[s, table] for s in ("best", "median", "0.75")}) == 3, (name, table)


def test_describe_names_each_statistic_and_refuses_an_unknown_one():
    """pmac.pool.describe: the words pmac pool and bench/accuracy print for a statistic."""
    from pmac.pool import describe

    assert describe("best") == "the median of its fastest repetitions"
    assert describe("median") == "the median of all its repetitions"
    assert describe("0.7071") == "the value a share 0.7071 of its repetitions is at least as fast as"
    with pytest.raises(InputError, match="unknown statistic 'fastest'"):
        describe("fastest")
    with pytest.raises(InputError, match="unknown statistic '1.5'"):
        describe("1.5")


def test_pool_raw_numbers_each_points_repetitions_again():
    """pool_raw: tables concatenated, each point's repetitions numbered 0.. in the probes' order
    (the first probe's first), a table only one probe has kept as it is."""
    a = {"compute": pd.DataFrame({"probe": ["flop_scalar"] * 2 + ["divsqrt"], "param": [64.0, 64.0, 64.0],
                                  "rep": [1, 0, 0], "value": [2.0, 1.0, 5.0]})}
    b = {"compute": pd.DataFrame({"probe": ["flop_scalar"], "param": [64.0], "rep": [0], "value": [3.0]}),
         "latency": pd.DataFrame({"working_set_bytes": [4096], "rep": [0], "latency_s": [1e-9]})}
    out = pool_raw([a, b])
    c = out["compute"]
    fs = c[c["probe"] == "flop_scalar"].sort_values("rep")
    assert fs["value"].tolist() == [1.0, 2.0, 3.0] and fs["rep"].tolist() == [0, 1, 2]
    assert c[c["probe"] == "divsqrt"]["rep"].tolist() == [0]
    assert out["latency"]["latency_s"].tolist() == [1e-9] and str(c["rep"].dtype) == "int32"
    # each probe's compute rows their own source; a pool pooled again keeps its sources apart
    assert fs["source"].tolist() == [0, 0, 1] and str(c["source"].dtype) == "int32"
    again = pool_raw([{"compute": b["compute"].assign(source=5)}, out])["compute"]
    assert sorted(again["source"].tolist()) == [0, 1, 1, 1, 2]
    assert again[again["source"] == 2]["value"].tolist() == [3.0]


def test_pool_of_two_probes(tmp_path):
    """pool: the same probe twice at the median gives the single probe's median refit (the median
    of a list doubled is its median); at the probe's statistic each compute point is the median of
    the five fastest of the doubled repetitions (hand-computed). The provenance names both inputs,
    keeps the machine's host and CPU (so it still describes this machine) and the statistic."""
    a, b = _copy("xeon-vm", tmp_path / "a"), _copy("xeon-vm", tmp_path / "b")
    prof, raw = _load("xeon-vm")
    pooled, praw = pool([a, b], name="both", statistic="median")
    one = refit(prof, raw, statistic="median").node
    assert dataclasses.replace(pooled.node, noise=None) == dataclasses.replace(one, noise=None)
    assert pooled.name == "both"
    # the noise series: the probe's chunks twice over, against the same median
    n = len(one.noise.slowdown[0])
    assert pooled.node.noise.slowdown == tuple(row + row for row in one.noise.slowdown)
    assert pooled.node.noise.chunk_starts == one.noise.chunk_starts + tuple(n + k for k in one.noise.chunk_starts)
    assert len(praw["compute"]) == 2 * len(raw["compute"])
    best, _ = pool([a, b], name="both")
    v = raw["compute"][raw["compute"]["probe"] == "flop_scalar"]["value"].to_numpy()
    assert best.node.compute.flop_per_s_scalar == pytest.approx(
        float(np.median(np.sort(np.concatenate([v, v]))[::-1][:5])), rel=1e-12)
    prov = pooled.provenance
    assert [p["file"] for p in prov["pooled_from"]] == [str(a), str(b)] and prov["statistic"] == "median"
    assert prov["pooled_from"][0]["probed_utc"] == prof.provenance["created_utc"]
    assert (prov["host"], prov["cpu_model"]) == (prof.provenance["host"], prof.provenance["cpu_model"])
    assert prov["os_caches"] == prof.provenance["os_caches"]


def test_pool_refuses_probes_of_two_machines(tmp_path):
    """The Xeon VM and the Zen 3 devbox (same host name, another CPU) do not pool: the error names
    the file and both machines; a profile without a sidecar is named too."""
    x, d = _copy("xeon-vm", tmp_path), _copy("devbox", tmp_path)
    with pytest.raises(InputError) as err:
        pool([x, d], name="mixed")
    msg = str(err.value)
    assert msg.startswith(str(d)) and "only probes of one machine pool" in msg and "AMD EPYC" in msg
    bare = tmp_path / "bare.yaml"
    shutil.copy(MACHINES / "skylakesp-gold6148.yaml", bare)
    with pytest.raises(InputError, match="not a probed profile"):
        pool([x, bare], name="mixed")
    # a probe of another host without the OS's cache list in its provenance: named by its file
    from pmac.profile import save_profile

    prof = load_profile(x)
    old = tmp_path / "old" / "xeon-vm.yaml"
    _copy("xeon-vm", old.parent)
    save_profile(dataclasses.replace(prof, provenance={**{k: v for k, v in prof.provenance.items()
                                                           if k != "os_caches"}, "host": "elsewhere"}), old)
    with pytest.raises(InputError) as err:
        pool([old], name="renamed")
    assert str(err.value).startswith(f"{old}: its provenance has no os_caches to refit the cache levels with")


def test_pool_refuses_probes_of_two_page_modes(tmp_path):
    """Probes whose memory ran on different pages (pmac probe --pages) are two measurements of two
    things: refused, naming both files; a probe that predates the record pools with either."""
    from pmac.profile import save_profile

    paths = []
    for mode in ("huge", "default", None):
        p = _copy("xeon-vm", tmp_path / str(mode))
        prof = load_profile(p)
        prov = {k: v for k, v in prof.provenance.items() if k != "pages"}
        if mode:
            prov["pages"] = {"mode": mode, "in_effect": f"{mode} (test)"}
        save_profile(dataclasses.replace(prof, provenance=prov), p)
        paths.append(p)
    huge, default, legacy = paths
    with pytest.raises(InputError) as err:
        pool([huge, legacy, default], name="mixed")
    assert str(err.value) == (f"{default}: its memory was probed on default pages (pmac probe --pages), {huge}'s "
                              "on huge: only probes of one page mode pool")
    prof, _ = pool([legacy, default], name="one-mode")
    assert prof.provenance["pages"] == {"mode": "default", "in_effect": "default (test)"}


def test_pool_refuses_collectives_timed_two_ways(tmp_path):
    """Collective rows timed in mpi4py loops (the floor taken off when refitted) and in compiled
    ones (kept whole: NetworkModel.collective_loop) would be refitted one way: refused, naming both."""
    from pmac.profile import save_profile

    old, new = _copy("xeon-vm", tmp_path / "old"), _copy("xeon-vm", tmp_path / "new")
    prof = load_profile(new)
    nets = [dataclasses.replace(n, collective_loop="compiled") for n in (prof.network, *prof.network_variants)]
    save_profile(dataclasses.replace(prof, network=nets[0], network_variants=tuple(nets[1:])), new)
    with pytest.raises(InputError) as err:
        pool([old, new], name="mixed")
    assert str(err.value) == (f"{new}: its collectives were timed in compiled loops, {old}'s in mpi4py "
                              "(NetworkModel.collective_loop): only probes whose collectives were timed alike pool")
    pooled, _ = pool([new, new], name="compiled")
    assert pooled.network.collective_loop == "compiled"


def _pmac(*args):
    return subprocess.run([sys.executable, "-m", "pmac", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


def test_pmac_pool_writes_a_profile_with_its_sidecar(tmp_path):
    """pmac pool writes NAME.yaml and NAME.raw.npz (sha256 recorded and checked on loading), pmac
    show reads it; bad input is one line naming the file, exit 2, the existing output untouched;
    an output that is one of the inputs is refused."""
    a, b = _copy("xeon-vm", tmp_path / "a"), _copy("xeon-vm", tmp_path / "b")
    out = tmp_path / "out"
    r = _pmac("pool", str(a), str(b), "--name", "both", "--statistic", "median", "--out-dir", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out / 'both.yaml'} and both.raw.npz: 2 probe(s) pooled, each point at the "
                               "median of all its repetitions")
    prof = load_profile(out / "both.yaml")
    raw = load_raw(prof, out / "both.yaml")
    assert prof.raw_file == "both.raw.npz" and len(raw["bandwidth"]) == 2 * len(_load("xeon-vm")[1]["bandwidth"])
    assert _pmac("show", str(out / "both.yaml")).returncode == 0
    before = (out / "both.yaml").read_bytes()
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: pmac.machine\nschema_version: [\n")
    r = _pmac("pool", str(a), str(broken), "--name", "both", "--out-dir", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and str(broken) in r.stderr
    assert (out / "both.yaml").read_bytes() == before
    r = _pmac("pool", str(a), str(b), "--name", "xeon-vm", "--out-dir", str(a.parent))
    assert r.returncode == 2 and "would overwrite one of its inputs" in r.stderr


def test_show_names_a_pooled_profiles_probes_and_statistic():
    """pmac show of the shipped xeon-vm (four rounds pooled at the median): how many probes, when
    they finished, and the statistic; a statistic edited by hand is shown as it is, not an error."""
    from pmac.report_profile import format_profile

    prof, _ = _load("xeon-vm")
    text = format_profile(prof)
    assert "pooled from 4 probe(s) (finished " in text and "each point at the median of all its repetitions" in text
    odd = dataclasses.replace(prof, provenance={**prof.provenance, "statistic": "fastest"})
    assert "each point at the statistic 'fastest'" in format_profile(odd)
    assert "pooled from" not in format_profile(_load("devbox")[0])


def test_pmac_pool_says_which_added_sections_the_replaced_profile_loses(tmp_path):
    """Re-pooling clx-vm's rounds over machines/clx-vm.yaml: the shipped profile has node.alias
    (pmac probe --add-alias), its rounds do not measure it, so the new profile has none and pmac
    pool says so, naming the flag that measures it again; both have node.noise (the rounds measure
    it), and no note names noise. Over no existing file there is no note."""
    out = tmp_path / "out"
    _copy("clx-vm", out)
    shipped = load_profile(out / "clx-vm.yaml").node
    assert shipped.alias is not None and shipped.noise is not None
    rounds = [str(MACHINES / "clx-vm.rounds" / r / "clx-vm.yaml") for r in ("T1331-round-0", "T1331-round-1")]
    r = _pmac("pool", *rounds, "--name", "clx-vm", "--statistic", "median", "--out-dir", str(out))
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stdout.splitlines() if "none of the pooled probes measured" in ln]
    assert notes == [f"  note: the {out / 'clx-vm.yaml'} this replaced had node.alias (pmac probe --add-alias), which "
                     "none of the pooled probes measured: the new profile has none; pmac probe --add-alias "
                     f"{out / 'clx-vm.yaml'} measures it again"]
    assert load_profile(out / "clx-vm.yaml").node.alias is None and load_profile(out / "clx-vm.yaml").node.noise
    r = _pmac("pool", *rounds, "--name", "again", "--statistic", "median", "--out-dir", str(out))
    assert r.returncode == 0 and "none of the pooled probes measured" not in r.stdout


def _scaled(prof, *, mem_allcores: dict[str, float] | None = None, simd: float = 1.0):
    """``prof`` with some all-cores memory plateaus and its SIMD rate multiplied by the factors given."""
    node = prof.node
    bws = {k: v * (mem_allcores or {}).get(k, 1.0) for k, v in node.memory.bandwidth_allcores_bytes_per_s.items()}
    return dataclasses.replace(prof, node=dataclasses.replace(
        node, memory=dataclasses.replace(node.memory, bandwidth_allcores_bytes_per_s=bws),
        compute=dataclasses.replace(node.compute, flop_per_s_simd=node.compute.flop_per_s_simd * simd)))


def test_standing_apart_names_the_probe_far_from_the_others():
    """standing_apart: the third probe's all-cores memory load plateau at 0.1x and copy at 0.2x of
    the other two's, its SIMD rate 4x: named, largest departure first, ratios against the median of
    the three (the other two's value). A 2.5x probe is not named; two probes cannot say which is
    off; among four, two of them off by 0.1x and 1e-5x, only those two are named."""
    from pmac.pool import figures, standing_apart

    prof, _ = _load("xeon-vm")
    odd = _scaled(prof, mem_allcores={"load_unit": 0.1, "copy": 0.2}, simd=4.0)
    assert standing_apart([prof, prof, odd]) == {2: ["memory load_unit bandwidth, all cores 0.1x",
                                                     "memory copy bandwidth, all cores 0.2x", "SIMD flop rate 4x"]}
    assert standing_apart([prof, prof, _scaled(prof, simd=2.5)]) == {}
    assert standing_apart([prof, odd]) == {}
    worse = _scaled(prof, mem_allcores={"load_unit": 1e-5})
    assert sorted(standing_apart([prof, prof, odd, worse])) == [2, 3]
    f = figures(prof)
    assert f["L2 load_unit bandwidth, 1 core"] == prof.node.caches[1].bandwidth_1core_bytes_per_s["load_unit"]
    assert f["intra_node smallest message's one-way time"] == prof.network.intra_node.one_way_s[0]
    assert f["scalar flop rate"] == prof.node.compute.scalar_rate


def test_pool_names_a_probe_standing_apart_and_leaves_it_out_when_asked(tmp_path):
    """pool of three probes, one with its all-cores memory plateau at 0.1x: its file named in the
    provenance's warnings; with drop_apart it is left out (``dropped``) and the pool is the two
    others' (equal to pooling those two alone). pmac pool --drop-apart prints the warning."""
    from pmac.profile import save_profile

    a, b = _copy("xeon-vm", tmp_path / "a"), _copy("xeon-vm", tmp_path / "b")
    odd = _copy("xeon-vm", tmp_path / "odd")
    save_profile(_scaled(load_profile(odd), mem_allcores={"load_unit": 0.1}), odd)
    kept, _ = pool([a, b, odd], name="three", statistic="median")
    assert len(kept.provenance["pooled_from"]) == 3 and "dropped" not in kept.provenance
    assert (f"probe {odd} stands apart from the other 2: memory load_unit bandwidth, all cores 0.1x "
            "(pmac pool --drop-apart leaves it out)") in kept.provenance["warnings"]
    left, _ = pool([a, b, odd], name="three", statistic="median", drop_apart=True)
    assert [p["file"] for p in left.provenance["pooled_from"]] == [str(a), str(b)]
    assert left.provenance["dropped"] == [str(odd)]
    assert any(w.endswith("(left out: --drop-apart)") for w in left.provenance["warnings"])
    two, _ = pool([a, b], name="three", statistic="median")
    assert left.node == two.node
    r = _pmac("pool", str(a), str(b), str(odd), "--name", "two", "--drop-apart", "--out-dir", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "2 probe(s) pooled" in r.stdout
    assert f"  warning: probe {odd} stands apart from the other 2: memory load_unit bandwidth, all cores 0.1x" in r.stdout


def _with_rows(src: Path, to: Path, rows: list[tuple]) -> Path:
    """A copy of the probe ``src`` (profile and sidecar) at ``to``, compute rows added to its sidecar."""
    from pmac.probe import write_pair

    prof = load_profile(src)
    raw = load_raw(prof, src)
    extra = pd.DataFrame(rows, columns=["probe", "param", "rep", "value"]).assign(source=0).astype(
        raw["compute"].dtypes.to_dict())
    raw = {**raw, "compute": pd.concat([raw["compute"], extra], ignore_index=True)}
    write_pair(prof, raw, to / src.name)
    return to / src.name


def test_pool_pairs_the_all_cores_rows_with_the_times_alone_beside_them(tmp_path):
    """A probe with alone:flop_simd rows and all:flop_simd rows 1.2x slower beside one with all:
    rows only, 3x slower: the latter's all: rows are left out (named in a note) and the pooled
    slowdown is 1.2, not what the one-core rows of both against the all: rows of both would say.
    Without any alone: rows, a pool where only some probes have all: rows says so."""
    src = _copy("xeon-vm", tmp_path / "src")
    v = float(load_raw(load_profile(src), src)["compute"].query("probe == 'flop_simd'")["value"].median())
    new = _with_rows(src, tmp_path / "new", [("alone:flop_simd", 1.0, i, v) for i in range(5)]
                     + [("all:flop_simd", 2.0, i, v / 1.2) for i in range(5)])
    old = _with_rows(src, tmp_path / "old", [("all:flop_simd", 2.0, i, v / 3) for i in range(5)])
    prof, raw = pool([new, old], name="paired", statistic="median")
    c = prof.node.compute
    assert dict(zip(c.all_cores_kernels, c.all_cores_slowdown)) == pytest.approx({"flop_simd": 1.2}, rel=1e-12)
    assert len(raw["compute"].query("probe == 'all:flop_simd'")) == 5
    assert (f"all-cores compute rows of {old} left out: they have no alone: rows to pair with (probed before "
            "29 Nov 2026 09:00); the slowdowns come from the other probes") in prof.provenance["warnings"]
    # without alone: rows, a probe's all: rows against its own one-core rows (3x), not against the
    # pool's, here half its own rows and half a faster probe's
    fast = _kernel_scaled(src, tmp_path / "fast", "flop_simd", 2.0)
    mixed, _ = pool([old, fast], name="mixed", statistic="median")
    c = mixed.node.compute
    assert dict(zip(c.all_cores_kernels, c.all_cores_slowdown)) == pytest.approx({"flop_simd": 3.0}, rel=1e-12)
    assert not [w for w in mixed.provenance["warnings"] if "all-cores" in w]
    both, _ = pool([new, new], name="both", statistic="median")
    assert not [w for w in both.provenance["warnings"] if "all-cores" in w]


def _kernel_scaled(src: Path, to: Path, kernel: str, factor: float, *, drop: tuple[str, ...] = ()) -> Path:
    """A copy of the probe ``src`` at ``to``, its ``kernel`` rows' values times ``factor`` (a host in
    another state) and the kernels ``drop`` left out (a probe from before they were written)."""
    from pmac.probe import write_pair

    prof = load_profile(src)
    raw = load_raw(prof, src)
    c = raw["compute"]
    c = c[~c["probe"].isin(drop)].reset_index(drop=True)
    c.loc[c["probe"] == kernel, "value"] *= factor
    write_pair(prof, {**raw, "compute": c}, to / src.name)
    return to / src.name


def test_pool_derives_divider_beta_within_the_probes_that_ran_its_kernels(tmp_path):
    """divider_beta prices the divmix kernels against the divider's rate: pooled with a probe of a
    host whose divider ran at half the rate, and which has no divmix kernels, it is the first
    probe's own (the pooled rate against its kernels alone would say otherwise). Each row keeps
    its probe's number in the pooled sidecar, so a refit of the pool (a band, another statistic)
    derives it the same way."""
    from pmac.probe import compute_model, write_pair

    src = _copy("clx-vm", tmp_path / "src")
    prof, raw = _load("clx-vm")
    own = refit(prof, raw, statistic="median").node.compute.divider_beta
    assert own > 0.05           # a beta the test can see move
    half = _kernel_scaled(src, tmp_path / "half", "divsqrt", 0.5, drop=("divmix", "divpar"))
    pooled, praw = pool([src, half], name="two", statistic="median")
    assert pooled.node.compute.divider_beta == pytest.approx(own, rel=1e-12)
    assert pooled.node.compute.divsqrt_per_s < refit(prof, raw, statistic="median").node.compute.divsqrt_per_s
    mixed = compute_model(praw["compute"].drop(columns="source"), {"cpu_name": "", "llvmlite": ""}, slow_quantile=0.5)
    assert abs(mixed.divider_beta - own) > 0.05     # what the pooled rates alone would give
    again = refit(pooled, praw, statistic="median").node.compute.divider_beta
    assert again == pytest.approx(own, rel=1e-12)
    # a probe with the divpar kernels (since 29 Nov 2026), here the divmix ones renamed and run
    # slower: each probe's beta from its own kernels, the pool's the median of the two
    newer = _kernel_scaled(src, tmp_path / "newer", "divmix", 1.3)
    raw_newer = load_raw(load_profile(newer), newer)
    raw_newer["compute"]["probe"] = raw_newer["compute"]["probe"].replace("divmix", "divpar")
    write_pair(load_profile(newer), raw_newer, newer)
    theirs = refit(prof, load_raw(load_profile(newer), newer), statistic="median").node.compute.divider_beta
    assert abs(theirs - own) > 0.05
    both, _ = pool([src, newer], name="two", statistic="median")
    assert both.node.compute.divider_beta == pytest.approx((own + theirs) / 2, rel=1e-12)

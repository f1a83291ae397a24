"""4 KiB aliasing: the probe's figures from its rounds, the profile's model, and the convolver's
price of a signature's aliased loads, against hand-computed values."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from pmac.convolve import alias_stalls, burst_arrays, combine_overlap, convolve, machine_coeffs
from pmac.phases import convolve_phases
from pmac.profile import AliasModel, load_profile, save_profile
from probes import alias as pa
from synth import memory_tables, two_level_profile

ONE = (1e-10, 4e-10, 2e-10)          # L1d, L2, memory: one core
ALL = (3e-10, 8e-10, 6e-10)          # both cores busy


def _model(**kw):
    return AliasModel(**{**dict(levels=("L1d", "L2", "memory"), working_set_bytes=(16384, 524288, 1 << 26),
                                stall_s=ONE, n_cores_all=2, working_set_allcores_bytes=(16384, 524288, 1 << 25),
                                stall_allcores_s=ALL), **kw})


def _profile(model=None, beta=0.5):
    prof = two_level_profile(beta=beta, dep=False, branch=False)
    return dataclasses.replace(prof, node=dataclasses.replace(prof.node, alias=model))


def _burst(alias_loads, load_counts, store_counts, *, loads=1000, stores=1000, store_bytes=8000):
    b = dict(rank=0, seq=1, loads=loads, stores=stores, load_bytes=8 * loads, store_bytes=store_bytes,
             fp_scalar=1000, flop=1000.0, alias_loads=alias_loads)
    hists = [dict(rank=0, seq=1, access=0, counts=load_counts), dict(rank=0, seq=1, access=1, counts=store_counts)]
    return burst_arrays(memory_tables([b], hists), line_sizes=(64,))


def test_stalls_from_rounds_are_the_median_ratio_times_the_fastest_apart_time():
    # three rounds on one core in L1: ratios 1.1, 1.1, 1.2 -> 0.1 x the median of the (three)
    # fastest apart times, 1.1 ns; in L2 aliased runs faster than apart: floored at 0
    rows = []
    for k, (apart, aliased) in enumerate(((1.0, 1.1), (1.1, 1.21), (1.2, 1.44))):
        rows += [dict(level="L1", n_cores=1, round=k, placement="apart", seconds_per_element_s=apart * 1e-9),
                 dict(level="L1", n_cores=1, round=k, placement="aliased", seconds_per_element_s=aliased * 1e-9),
                 dict(level="L2", n_cores=1, round=k, placement="apart", seconds_per_element_s=2e-9),
                 dict(level="L2", n_cores=1, round=k, placement="aliased", seconds_per_element_s=1.9e-9)]
    rows.append(dict(level="L1", n_cores=2, round=0, placement="apart", seconds_per_element_s=1e-9))
    st = pa.stalls(rows)
    assert list(st) == [("L1", 1), ("L2", 1)]       # a (level, cores) with no pair of placements: none
    assert st[("L1", 1)] == pytest.approx(0.1 * 1.1e-9, rel=1e-9)
    assert st[("L2", 1)] == 0.0


def test_working_sets_halve_each_level_and_split_shared_ones_among_busy_cores():
    levels = [("L1", 32768, 1), ("L2", 1 << 20, 1), ("L3", 36 << 20, 2)]
    assert pa.working_sets(levels) == [("L1", 16384), ("L2", 1 << 19), ("L3", 18 << 20), ("memory", 144 << 20)]
    assert pa.working_sets(levels, 2) == [("L1", 16384), ("L2", 1 << 19), ("L3", 9 << 20), ("memory", 72 << 20)]
    assert pa.working_sets([("L1", 32768, 1)])[-1] == ("memory", pa.MEMORY_MIN_BYTES)


def test_alias_model_from_the_raw_table():
    from pmac.probe import alias_model

    rows = []
    for c, per in ((1, {"L1": (1.0, 1.1), "memory": (2.0, 2.5)}), (2, {"L1": (1.0, 1.3), "memory": (2.0, 2.2)})):
        for level, (apart, aliased) in per.items():
            for k in range(3):
                rows += [dict(level=level, n_cores=c, working_set_bytes=1000 * c, round=k, placement="apart",
                              seconds_per_element_s=apart * 1e-9),
                         dict(level=level, n_cores=c, working_set_bytes=1000 * c, round=k, placement="aliased",
                              seconds_per_element_s=aliased * 1e-9)]
    m = alias_model(pd.DataFrame(rows))
    assert m.levels == ("L1", "memory") and m.n_cores_all == 2
    assert m.working_set_bytes == (1000, 1000) and m.working_set_allcores_bytes == (2000, 2000)
    assert np.allclose(m.stall_s, (0.1e-9, 0.5e-9)) and np.allclose(m.stall_allcores_s, (0.3e-9, 0.2e-9))
    # all cores measured at some levels only: not used
    part = pd.DataFrame([r for r in rows if not (r["n_cores"] == 2 and r["level"] == "memory")])
    m = alias_model(part)
    assert m.stall_allcores_s == () and m.n_cores_all == 1
    assert alias_model(pd.DataFrame(columns=list(rows[0]))) is None


def test_model_is_checked_and_round_trips(tmp_path):
    for kw, msg in ((dict(stall_s=(1e-10,)), "one entry each per level"),
                    (dict(stall_allcores_s=(1e-10,)), "or none"),
                    (dict(levels=("L1d", "L1d", "memory")), "named twice"),
                    (dict(stall_s=(1e-10, -1e-10, 0.0)), "alias.stall_s")):
        with pytest.raises(ValueError, match=msg):
            _model(**kw)
    prof = _profile(_model())
    save_profile(prof, tmp_path / "a.yaml")
    assert load_profile(tmp_path / "a.yaml").node.alias == _model()


def test_coefficients_by_level_and_busy_cores():
    m = _model()
    assert alias_stalls(m, ("L1d", "L2")) == ONE
    assert alias_stalls(m, ("L1d", "L2"), active_cores=2) == ALL
    # a level the probe did not measure takes the next one out's; memory unmeasured: 0
    short = _model(levels=("L2", "memory"), working_set_bytes=(1, 2), stall_s=(4e-10, 2e-10),
                   working_set_allcores_bytes=(), stall_allcores_s=())
    assert alias_stalls(short, ("L1d", "L2"), active_cores=2) == (4e-10, 4e-10, 2e-10)
    nomem = _model(levels=("L1d", "L2"), working_set_bytes=(1, 2), stall_s=(1e-10, 4e-10),
                   working_set_allcores_bytes=(), stall_allcores_s=())
    assert alias_stalls(nomem, ("L1d", "L2")) == (1e-10, 4e-10, 0.0)
    assert machine_coeffs(_profile(m)).alias_stall_s == ONE
    assert machine_coeffs(_profile(m), active_cores=2).alias_stall_s == ALL
    assert machine_coeffs(_profile(None)).alias_stall_s == ()
    with pytest.raises(ValueError, match="alias_stall_s"):
        dataclasses.replace(machine_coeffs(_profile(m)), alias_stall_s=(1e-10,))


def test_aliased_loads_stall_as_the_probe_loop_streaming_stores_from_where_the_burst_streams():
    """Each aliased load costs the stall of the level the burst's store bytes stream from (the
    share of them whose lines a level brings), the rest at L1's; added after the overlap."""
    prof, bare = _profile(_model()), _profile(None)
    m1, m2, m0 = machine_coeffs(prof), machine_coeffs(prof, active_cores=2), machine_coeffs(bare)
    # the probe's own loop over L2: 1000 stores of 8 B, one in eight brings a 64 B line from L2
    # (8000 bytes: all of them), 1000 aliased loads -> 1000 x the L2 stall
    l2 = _burst(1000, {0: 875, 2000: 125}, {0: 875, 2000: 125})
    res = convolve(l2, [m1, m2, m0])
    assert res.alias_s[:, 0] == pytest.approx([1000 * 4e-10, 1000 * 8e-10, 0.0], rel=1e-6)
    assert np.allclose(res.time_s, combine_overlap(res.memory_s, res.compute_s, 0.5) + res.alias_s, rtol=1e-12)
    # the term alone: memory and compute as without a model
    assert np.allclose(res.memory_s[:2], res.memory_s[2]) and np.allclose(res.compute_s[:2], res.compute_s[2])
    # 50 of 1000 stores cold: 3200 of 8000 bytes from memory (0.4), the rest L1 (0.6); 500 aliased
    mix = _burst(500, {0: 1000}, {0: 950, -1: 50})
    assert convolve(mix, [m1]).alias_s[0, 0] == pytest.approx(500 * (0.4 * 2e-10 + 0.6 * 1e-10), rel=1e-6)
    # more bytes moved than stored (scattered stores): every aliased load at the far level's price
    far = _burst(100, {0: 1000}, {-1: 100}, stores=100, store_bytes=800)
    assert convolve(far, [m1]).alias_s[0, 0] == pytest.approx(100 * 2e-10, rel=1e-6)
    # at most every load aliases; none counted (0) or not counted (-1, before signature 9): no term
    over = _burst(5000, {0: 875, 2000: 125}, {0: 875, 2000: 125})
    assert convolve(over, [m1]).alias_s[0, 0] == pytest.approx(1000 * 4e-10, rel=1e-6)
    for n in (0, -1):
        res = convolve(_burst(n, {0: 875, 2000: 125}, {0: 875, 2000: 125}), [m1, m0])
        assert res.alias_s[0, 0] == 0.0 and res.time_s[0, 0] == res.time_s[1, 0]
    assert _burst(-1, {0: 1}, {0: 1}).alias_loads is None


def test_phase_totals_carry_the_stalls():
    """pmac.overlap fits beta on max + beta * min: the stalls are in the max side it is given."""
    prof = _profile(_model(), beta=0.0)
    ba = _burst(1000, {0: 875, 2000: 125}, {0: 875, 2000: 125})
    res, mx, mn = convolve_phases(ba, None, [machine_coeffs(prof)])
    assert mx[0, 0] == pytest.approx(max(res.memory_s[0, 0], res.compute_s[0, 0]) + 1000 * 4e-10, rel=1e-9)
    assert res.time_s[0, 0] == pytest.approx(mx[0, 0] + 0.0 * mn[0, 0], rel=1e-12)


def _rows(per_round, *, level="L1", cores=1, rounds=3):
    return pd.DataFrame([dict(level=level, n_cores=cores, working_set_bytes=1000, round=k, placement=pl,
                              seconds_per_element_s=t * 1e-9)
                         for k in range(rounds) for pl, t in zip(("apart", "aliased"), per_round[k])])


def test_pooled_probes_number_their_rounds_on_and_refit_at_the_statistic():
    """pmac.pool: two probes' alias tables pooled keep every round (numbered on, so that a round
    still pairs its own placements), and refit takes the stall at the pool's statistic: the median
    ratio less one times the fastest five apart times (best) or all of them (median)."""
    from pmac.pool import pool_raw
    from pmac.probe import alias_model

    a = _rows([(1.0, 1.1), (1.0, 1.1), (1.0, 1.1)])
    b = _rows([(2.0, 2.4), (2.0, 2.4), (2.0, 2.4)])
    pooled = pool_raw([{"alias": a}, {"alias": b}])["alias"]
    assert sorted(pooled["round"].unique()) == list(range(6)) and len(pooled) == 12
    # ratios 1.1 x3 and 1.2 x3: median 1.15; apart 1.0 x3, 2.0 x3
    assert alias_model(pooled, "best").stall_s[0] == pytest.approx(0.15 * 1.0e-9, rel=1e-9)   # 1, 1, 1, 2, 2
    assert alias_model(pooled, "median").stall_s[0] == pytest.approx(0.15 * 1.5e-9, rel=1e-9)
    # ratios 1.1 x3 and 1.2 x4: 1.2; apart 1 x3 and 3 x4: five fastest 1, 1, 1, 3, 3 -> 1, all -> 3
    c = _rows([(1.0, 1.1)] * 3 + [(3.0, 3.6)] * 4, rounds=7)
    assert alias_model(c, "best").stall_s[0] == pytest.approx(0.2 * 1.0e-9, rel=1e-9)
    assert alias_model(c, "median").stall_s[0] == pytest.approx(0.2 * 3.0e-9, rel=1e-9)


def test_the_shipped_profiles_aliasing_is_its_table_at_its_statistic():
    """machines/*.yaml with node.alias: the model is what pmac.probe.alias_model makes of the raw
    table the sidecar ships, at the profile's statistic (so anyone can check the figures)."""
    from pathlib import Path

    from pmac.probe import alias_model
    from pmac.profile import load_raw

    shipped = [p for p in sorted((Path(__file__).resolve().parents[1] / "machines").glob("*.yaml"))
               if load_profile(p).node and load_profile(p).node.alias]
    assert shipped, "no shipped profile has node.alias"
    for path in shipped:
        prof = load_profile(path)
        table = load_raw(prof, path)["alias"]
        assert prof.node.alias == alias_model(table, prof.provenance.get("statistic", "best")), path.name


def test_sweep_scales_the_aliasing_stall():
    """pmac sweep's alias.stall knob: every stall of the copy scaled, its figure the last cache
    level's stall with all cores busy; refused by name for a profile without the probe. On the
    shipped stencil2d-n2-1024 and clx-vm, the term adds after the overlap, so the prediction moves
    linearly in the factor: t(2) - t(1) = 2 (t(1) - t(0.5))."""
    from pathlib import Path

    from pmac.errors import MissingSectionError
    from pmac.signature import load_signature
    from pmac.sweep import Knob, apply_knob, figure, knobs_of, sweep

    prof = _profile(_model())
    twice = apply_knob(prof, "alias.stall", 2.0)
    assert twice.node.alias.stall_s == pytest.approx([2 * x for x in ONE], rel=1e-12)
    assert twice.node.alias.stall_allcores_s == pytest.approx([2 * x for x in ALL], rel=1e-12)
    assert figure(prof, "alias.stall") == 8e-10 and figure(twice, "alias.stall") == pytest.approx(1.6e-9, rel=1e-12)
    assert "alias.stall" in knobs_of(prof) and "alias.stall" not in knobs_of(_profile(None))
    with pytest.raises(MissingSectionError, match="node.alias"):
        apply_knob(_profile(None), "alias.stall", 2.0)
    root = Path(__file__).resolve().parents[1]
    df, _ = sweep(load_signature(root / "signatures" / "stencil2d-n2-1024"), [load_profile(root / "machines" / "clx-vm.yaml")],
                  [Knob(name="alias.stall", factors=(0.5, 2.0))])
    t = {float(r.factor): float(r.total_s) for r in df.itertuples()}
    assert t[2.0] > t[1.0] > t[0.5]
    assert t[2.0] - t[1.0] == pytest.approx(2 * (t[1.0] - t[0.5]), rel=0.02)

"""Capacity distributions read off bandwidth curves (pmac.capacity) and the convolver's use of them."""

import dataclasses

import numpy as np
import pytest

from pmac.capacity import capacity_ratios, level_quantiles, survival_quantiles
from pmac.convolve import convolve, machine_coeffs
from pmac.profile import BandwidthCurve
from synth import two_level_profile
from test_convolve import L1_LINES, one_burst

MIB = 2 ** 20


def test_survival_quantiles_hand_computed():
    # S falls 1 -> 0.5 between 1 and 2, stays to 4, falls to 0 at 8; quantiles at S = 0.75, 0.25
    q = survival_quantiles(np.array([1.0, 2.0, 4.0, 8.0]), np.array([1.0, 0.5, 0.5, 0.0]), 2)
    assert q == pytest.approx([np.sqrt(2.0), np.sqrt(32.0)], rel=1e-12)


def _curve_of(ws, lo, hi, b_level, b_next):
    """bandwidth of a sweep of ``ws`` when the capacity is log-uniform on [lo, hi]."""
    s = np.clip(np.log(hi / ws) / np.log(hi / lo), 0.0, 1.0)
    return 1.0 / (s / b_level + (1.0 - s) / b_next)


def test_level_quantiles_recover_a_known_capacity_distribution():
    ws = 2.0 ** np.arange(18, 27.01, 0.25)          # 256 KiB .. 128 MiB, 4 points an octave
    bw = _curve_of(ws, 4 * MIB, 16 * MIB, 40e9, 10e9)
    q = level_quantiles(ws, bw, 1 * MIB, np.inf, 32 * MIB, 40e9, 10e9, n=4)
    # log-uniform on [4, 16] MiB: the quantile (k + 1/2) / 4 is 4 MiB * 4 ** ((k + 1/2) / 4)
    assert q == pytest.approx(4 * MIB * 4.0 ** ((np.arange(4) + 0.5) / 4), rel=1e-9)
    # noise above the level's plateau and a dip below the next one leave it bounded and monotone
    noisy = bw * np.where(np.arange(ws.size) % 2, 1.06, 0.94)
    qn = level_quantiles(ws, noisy, 1 * MIB, np.inf, 32 * MIB, 40e9, 10e9, n=4)
    assert np.all(np.diff(qn) >= 0) and qn[0] > 2 * MIB and qn[-1] < 32 * MIB
    # plateaus too close to tell the share from noise, or too few points: no distribution
    assert level_quantiles(ws, bw, 1 * MIB, np.inf, 32 * MIB, 11e9, 10e9) is None
    assert level_quantiles(ws, bw, 1 * MIB, 1.5 * MIB, 32 * MIB, 40e9, 10e9) is None


def _profile_with_curve(lo, hi):
    """two_level_profile (L1 32 KiB at 100 GB/s, L2 1 MiB at 50, memory at 10) whose one-core load
    curve falls from L2 to memory with the L2's capacity log-uniform on [lo, hi]."""
    prof = two_level_profile(beta=0.0, dep=False, branch=False)
    ws = 2.0 ** np.arange(14, 26.01, 0.25)         # 16 KiB .. 64 MiB
    bw = np.where(ws < 40 * 1024, 100e9, _curve_of(ws, lo, hi, 50e9, 10e9))   # L1 until 38 KiB
    curve = BandwidthCurve(access="load_unit", n_cores=1, working_set_bytes=tuple(ws),
                           bandwidth_bytes_per_s=tuple(bw))
    return dataclasses.replace(prof, node=dataclasses.replace(prof.node, bandwidth_curves=(curve,)))


def test_machine_coeffs_scale_the_ratios_with_the_nominal_capacity():
    prof = _profile_with_curve(0.5 * MIB, 2 * MIB)
    nominal = L1_LINES + MIB / 64                    # L2 non-inclusive: its lines plus L1's
    r = capacity_ratios(prof.node, 1)
    # the L1 falls between the curve's points at 38 and 45 KiB, of the nominal 32 KiB
    assert len(r[0]) == 8 and 2 ** 0.25 <= min(r[0]) and max(r[0]) <= 2 ** 0.5
    m = machine_coeffs(prof, soft_capacity=True)
    expect = 0.5 * MIB * 4.0 ** ((np.arange(8) + 0.5) / 8) / 64   # log-uniform quantiles, in lines
    assert m.capacity_quantile_lines[1] == pytest.approx(tuple(expect), rel=1e-9)
    assert machine_coeffs(prof).quantile_lines(1) == (nominal,)   # off by default: the nominal size
    # a what-if with twice the L2 must stretch the curve past L1 alike: then the quantiles double
    stretch = [w * (2 if w > 40 * 1024 else 1) for w in prof.node.bandwidth_curves[0].working_set_bytes]
    curve = dataclasses.replace(prof.node.bandwidth_curves[0], working_set_bytes=tuple(stretch))
    big = dataclasses.replace(prof, node=dataclasses.replace(prof.node, bandwidth_curves=(curve,), caches=(
        prof.node.caches[0], dataclasses.replace(prof.node.caches[1], size_bytes=2 * MIB))))
    assert machine_coeffs(big, soft_capacity=True).capacity_quantile_lines[1] == pytest.approx(tuple(2 * expect), rel=1e-9)
    # without the curve's stretch only the ratio moves: the curve says where the capacity is
    size_only = dataclasses.replace(big, node=dataclasses.replace(big.node, bandwidth_curves=prof.node.bandwidth_curves))
    assert machine_coeffs(size_only, soft_capacity=True).capacity_quantile_lines[1] == pytest.approx(tuple(expect), rel=1e-9)
    # an L2 shared by two cores, both active, no all-core curve: the one-core curve's ratios on a
    # core's share (half the L2, plus its L1)
    shared = dataclasses.replace(prof, node=dataclasses.replace(prof.node, caches=(
        prof.node.caches[0], dataclasses.replace(prof.node.caches[1], shared_by_cores=2))))
    two = machine_coeffs(shared, active_cores=2, soft_capacity=True)
    assert two.capacity_quantile_lines[1] == pytest.approx(tuple(expect * (L1_LINES + MIB / 128) / nominal), rel=1e-9)


def test_last_level_needs_the_curve_past_its_residue():
    """The last level's share is read against memory's plateau, which the fit takes from
    pmac.fit.MEMORY_FROM (4x) the level's capacity on: a curve stopping short of that leaves the level
    its nominal size; one reaching it (within 1 %, as the fit counts) gives the distribution."""
    from pmac.fit import MEMORY_FROM
    assert MEMORY_FROM == 4.0
    prof = _profile_with_curve(0.5 * MIB, 2 * MIB)
    cum = 32 * 1024 + MIB                 # L2 (the last level) non-inclusive: its capacity plus L1's
    full = prof.node.bandwidth_curves[0]
    want = capacity_ratios(prof.node, 1)[1]
    assert len(want) == 8

    def cut(limit):
        keep = [i for i, w in enumerate(full.working_set_bytes) if w <= limit]
        c = dataclasses.replace(full, working_set_bytes=tuple(full.working_set_bytes[i] for i in keep),
                                bandwidth_bytes_per_s=tuple(full.bandwidth_bytes_per_s[i] for i in keep))
        return dataclasses.replace(prof.node, bandwidth_curves=(c,))

    # the curve's points are 4 an octave: 2**22.0 = 4 MiB < 4 x 1.03 MiB <= 2**22.25
    assert capacity_ratios(cut(2 ** 22.0), 1)[1] == ()             # ends at 3.9x: nominal
    assert capacity_ratios(cut(2 ** 22.0), 1)[0] != ()             # the L1's (not last) still read
    assert 2 ** 22.0 * 1.01 < 4 * cum <= 2 ** 22.25
    assert capacity_ratios(cut(2 ** 22.25), 1)[1] == pytest.approx(want, rel=1e-9)   # its plateau is past 2 MiB
    m = machine_coeffs(dataclasses.replace(prof, node=cut(2 ** 22.0)), soft_capacity=True)
    assert m.quantile_lines(1) == (cum / 64,)


@pytest.mark.parametrize("ws_mib, share", [(0.25, 1.0), (1.0, 0.5), (4.0, 0.0)])
def test_a_sweep_is_priced_as_the_curve_measured_it(ws_mib, share):
    # a load sweep over ws: 7 of 8 accesses at distance 0, one a line at distance ws. With the L2's
    # capacity log-uniform on [0.5, 2] MiB, half the lines of a 1 MiB sweep come from L2 and half
    # from memory (the curve's value there); the 8 copies price it in steps of 1/8, and the
    # histogram's log bin spreads the distance, so 1 MiB is checked within one step
    prof = _profile_with_curve(0.5 * MIB, 2 * MIB)
    n_lines = ws_mib * MIB / 64
    bursts = one_burst({0: 7 * n_lines, n_lines: n_lines}, load_bytes=ws_mib * MIB, loads=8 * n_lines)
    t = convolve(bursts, [machine_coeffs(prof, soft_capacity=True)]).memory_s[0, 0]
    t_curve = ws_mib * MIB * (share / 50e9 + (1 - share) / 10e9)
    tol = 1e-6 if share in (0.0, 1.0) else (1 / 8) * ws_mib * MIB * (1 / 10e9 - 1 / 50e9) / t_curve
    assert t == pytest.approx(t_curve, rel=tol)
    # on the plateaus the nominal (hard) capacity prices it alike
    if share in (0.0, 1.0):
        hard = convolve(bursts, [machine_coeffs(prof, soft_capacity=False)]).memory_s[0, 0]
        assert hard == pytest.approx(t, rel=1e-6)


def test_predict_capacity_option(monkeypatch, capsys):
    """pmac predict --capacity curve: the convolved compute of every rank is the convolver's with
    the distribution (and not the nominal one's); a bad mode is refused by name."""
    import pmac.convolve
    import pmac.predict as pp
    from pmac.cli import main
    from pmac.convolve import burst_arrays
    from pmac.errors import InputError
    from pmac.profile import save_profile
    from pmac.signature import save_signature
    from synth import memory_tables, pingpong_signature

    prof = _profile_with_curve(0.5 * MIB, 2 * MIB)
    n_lines = MIB / 64     # each burst a 1 MiB load sweep: half its lines from L2 on the curve
    bursts = [dict(rank=r, seq=s, load_bytes=MIB, loads=8 * n_lines) for r in (0, 1) for s in (1, 2, 3, 4)]
    hists = [dict(rank=b["rank"], seq=b["seq"], access=0, counts={0: 7 * n_lines, n_lines: n_lines}) for b in bursts]
    mem = memory_tables(bursts, hists)
    sig = pingpong_signature(memory=mem)
    curve, nominal = (pp.predict(sig, [prof], capacity=c) for c in ("curve", "nominal"))
    for pred, soft in ((curve, True), (nominal, False)):
        t = convolve(burst_arrays(mem), [machine_coeffs(prof, active_cores=2, soft_capacity=soft)]).time_s[0]
        assert pred.per_rank["compute_s"].sum() == pytest.approx(t.sum(), rel=1e-12)
    # (here the nominal step prices most of the 1 MiB bin beyond L1 + L2 at memory, the curve half)
    assert curve.summary.iloc[0].total_s < 0.85 * nominal.summary.iloc[0].total_s
    monkeypatch.setattr(pmac.convolve, "SOFT_CAPACITY", True)   # the module's default decides None
    assert pp.predict(sig, [prof]).summary.iloc[0].total_s == curve.summary.iloc[0].total_s
    with pytest.raises(InputError, match="capacity must be one of nominal, curve, not 'soft'"):
        pp.predict(sig, [prof], capacity="soft")
    monkeypatch.undo()
    # the command line
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        save_signature(sig, Path(d) / "sig")
        save_profile(prof, Path(d) / "m.yaml")
        assert main(["predict", str(Path(d) / "sig"), str(Path(d) / "m.yaml"), "--capacity", "curve", "--csv"]) == 0
    out = capsys.readouterr().out
    total = float(out.splitlines()[1].split(",")[7])
    assert total == pytest.approx(curve.summary.iloc[0].total_s, rel=1e-9)


def test_machine_coeffs_refuse_bad_capacities_and_bandwidths():
    m = machine_coeffs(_profile_with_curve(0.5 * MIB, 2 * MIB), soft_capacity=True)
    with pytest.raises(ValueError, match="capacity_quantile_lines needs one tuple of positive capacities a level"):
        dataclasses.replace(m, capacity_quantile_lines=m.capacity_quantile_lines[:1])
    with pytest.raises(ValueError, match="capacity_quantile_lines needs one tuple"):
        dataclasses.replace(m, capacity_quantile_lines=((1.0,), (0.0, 5.0)))
    # the checks after the capacities' still run
    with pytest.raises(ValueError, match="bandwidths must be positive"):
        dataclasses.replace(m, load_bandwidth_bytes_per_s=(1e9, -1.0, 1e9))
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got 2"):
        dataclasses.replace(m, beta=2.0)


def test_predict_notes_a_working_set_at_a_levels_edge():
    """The 1 MiB sweeps of test_predict_capacity_option sit inside the L2's edge on the curve: predict
    says so, with both compute sums; a profile without curves (nominal both ways) gets no such note."""
    import pmac.predict as pp
    from pmac.convolve import burst_arrays
    from synth import memory_tables, pingpong_signature, two_level_profile

    prof = _profile_with_curve(0.5 * MIB, 2 * MIB)
    n_lines = MIB / 64
    bursts = [dict(rank=r, seq=s, load_bytes=MIB, loads=8 * n_lines) for r in (0, 1) for s in (1, 2, 3, 4)]
    hists = [dict(rank=b["rank"], seq=b["seq"], access=0, counts={0: 7 * n_lines, n_lines: n_lines}) for b in bursts]
    mem = memory_tables(bursts, hists)
    sig = pingpong_signature(memory=mem)
    sums = {}
    for soft, mode in ((False, "nominal"), (True, "curve")):
        t = convolve(burst_arrays(mem), [machine_coeffs(prof, active_cores=2, soft_capacity=soft)]).time_s[0]
        sums[mode] = t.sum()
    assert abs(sums["curve"] - sums["nominal"]) > 0.1 * sums["nominal"]
    for mode, other in (("nominal", "curve"), ("curve", "nominal")):
        notes = [n for n in pp.predict(sig, [prof], capacity=mode).notes if "cache level's edge" in n]
        assert notes == [f"synth: a working set sits at a cache level's edge: the calls' compute sums to "
                         f"{sums[mode]:.4g} s with {mode} cache sizes, {sums[other]:.4g} s with the other's "
                         f"(pmac predict --capacity {other}; pmac.capacity)"]
    plain = two_level_profile(beta=0.0, dep=False, branch=False)
    assert not [n for n in pp.predict(sig, [plain]).notes if "edge" in n]

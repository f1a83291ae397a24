"""Convolver numbers against hand-computed values, the reference formula and monotonicity."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from pmac.convolve import (burst_arrays, combine_overlap, convolve, edge_position,
                           machine_coeffs)
from pmac.errors import MissingSectionError
from pmac.memsig import COLD_BIN, REUSE_BIN_EDGES_LINES, hit_fraction, reuse_bin
from synth import memory_tables, two_level_profile

L1_LINES = 32 * 1024 / 64            # 512
L2_CUM_LINES = L1_LINES + 1024 * 1024 / 64  # non-inclusive: 16896


def one_burst(load_counts, store_counts=None, **cols):
    b = dict(rank=0, seq=1, **cols)
    hists = [dict(rank=0, seq=1, access=0, counts=load_counts)]
    if store_counts:
        hists.append(dict(rank=0, seq=1, access=1, counts=store_counts))
    return burst_arrays(memory_tables([b], hists), line_sizes=(64,))


def test_hand_computed_two_level():
    # 500 loads at distance 10 (< 512: L1), 300 at 2000 (L2), 200 cold (memory)
    bursts = one_burst({10: 500, 2000: 300, -1: 200}, {3000: 100}, load_bytes=8000, store_bytes=800,
                       fp_scalar=10_000, flop=10_000.0, branches=0)
    assert reuse_bin(np.array([10]))[0] < reuse_bin(np.array([512]))[0]  # bins do not straddle capacities
    prof = two_level_profile(beta=0.5, dep=False, branch=False)
    m = machine_coeffs(prof)
    assert m.capacity_lines == (L1_LINES, L2_CUM_LINES)
    res = convolve(bursts, [m])
    # 1000 loads of 8 B: 300 bring a 64 B line from L2, 200 from memory; that is more than the
    # 8000 bytes loaded, so L1 serves nothing more
    t_load = 300 * 64 / 50e9 + 200 * 64 / 10e9
    t_store = 100 * 64 / 25e9             # 100 stores at distance 3000 -> L2 lines, store bw = 50e9 / 2
    t_mem = t_load + t_store
    t_flop = 10_000 / 1e9
    assert res.memory_s[0, 0] == pytest.approx(t_mem, rel=1e-6)
    assert res.compute_s[0, 0] == pytest.approx(t_flop, rel=1e-12)
    assert res.time_s[0, 0] == pytest.approx(t_flop + 0.5 * t_mem, rel=1e-6)


def test_unit_stride_sweep_costs_its_bytes_at_the_level_it_streams_from():
    # 8 B loads sweeping an array far larger than the caches: per 64 B line, 7 accesses at stack
    # distance 0 and one cold miss. The probe measures exactly this pattern at 10 GB/s, and the
    # convolver must give load_bytes / 10 GB/s (not 1/8 of it, as pricing accesses would)
    bursts = one_burst({0: 7000, -1: 1000}, load_bytes=64_000, loads=8000)
    m = machine_coeffs(two_level_profile(dep=False, branch=False))
    assert convolve(bursts, [m]).memory_s[0, 0] == pytest.approx(64_000 / 10e9, rel=1e-6)
    # the same sweep inside L1 (all at distance 0 or 10) costs its bytes at the L1 rate
    bursts = one_burst({0: 7000, 10: 1000}, load_bytes=64_000, loads=8000)
    assert convolve(bursts, [m]).memory_s[0, 0] == pytest.approx(64_000 / 100e9, rel=1e-6)


def test_dependency_and_branch_probes():
    # dep distance 1.5 -> flop/s interpolated between 1/4 and 1/2 of peak: slowdown 4 + 0.5*(2-4) = 3
    bursts = one_burst({10: 100}, load_bytes=0, fp_scalar=1000, flop=1000.0, branches=200,
                       dep_distance_mean=1.5, branch_miss_frac=0.25)
    m = machine_coeffs(two_level_profile(), dependency=True)
    res = convolve(bursts, [m])
    t_flop = 1000 / 1e9 * 3.0
    t_br = 200 * (1e-9 + 0.5 * 5e-9)   # cost interpolated at miss 0.25 between 1 ns and 6 ns
    assert res.compute_s[0, 0] == pytest.approx(t_flop + t_br, rel=1e-12)
    # by default the dependency slowdown is not applied (see pmac.convolve): flops at the plain rate
    res = convolve(bursts, [machine_coeffs(two_level_profile())])
    assert res.compute_s[0, 0] == pytest.approx(1000 / 1e9 + t_br, rel=1e-12)


def test_simd_share_uses_lanes():
    # 100 scalar instr + 100 256-bit instr: lanes 100 and 400 -> flop split 1:4
    bursts = one_burst({10: 1}, fp_scalar=100, fp_256=100, flop=500.0)
    m = machine_coeffs(two_level_profile(dep=False, branch=False))
    res = convolve(bursts, [m])
    assert res.compute_s[0, 0] == pytest.approx(100 / 1e9 + 400 / 4e9, rel=1e-12)


def test_matches_hit_fraction_reference():
    rng = np.random.default_rng(1)
    n = 50
    bursts, hists = [], []
    for i in range(n):
        bursts.append(dict(rank=i % 2, seq=i, load_bytes=int(rng.integers(1, 10**6)),
                           store_bytes=int(rng.integers(0, 10**5)), fp_scalar=10, flop=10.0))
        d = rng.integers(0, 10**5, size=5)
        hists.append(dict(rank=i % 2, seq=i, access=0, counts={int(x): int(rng.integers(1, 100)) for x in d}))
        hists.append(dict(rank=i % 2, seq=i, access=1, counts={int(x) * 3: 5 for x in d[:2]}))
    mem = memory_tables(bursts, hists)
    ba = burst_arrays(mem, line_sizes=(64,))
    prof = two_level_profile(dep=False, branch=False)
    m = machine_coeffs(prof)
    res = convolve(ba, [m])
    r = mem["reuse"]
    for i in range(n):
        want = 0.0
        for access, bytes_col, bw in ((0, "load_bytes", (100e9, 50e9, 10e9)), (1, "store_bytes", (50e9, 25e9, 5e9))):
            h = np.zeros(COLD_BIN + 1)
            sel = r[(r["seq"] == i) & (r["access"] == access)]
            np.add.at(h, sel["bin"].to_numpy(), sel["count"].to_numpy())
            h1, h2 = hit_fraction(h, L1_LINES), hit_fraction(h, L2_CUM_LINES)
            nbytes = bursts[i][bytes_col]
            n = nbytes / 8.0                     # no access counts given: 8 B per access
            moved = n * 64 * (h2 - h1), n * 64 * (1 - h2)
            want += moved[0] / bw[1] + moved[1] / bw[2] + max(nbytes - sum(moved), 0) / bw[0]
        assert res.memory_s[0, i] == pytest.approx(want, rel=1e-5)


def test_monotone_in_bandwidth_and_flops():
    rng = np.random.default_rng(2)
    bursts, hists = [], []
    for i in range(30):
        bursts.append(dict(rank=0, seq=i, load_bytes=int(rng.integers(1, 10**7)),
                           store_bytes=int(rng.integers(0, 10**6)), fp_scalar=int(rng.integers(0, 10**6)),
                           fp_256=int(rng.integers(0, 10**5)), flop=float(rng.integers(0, 10**6)),
                           branches=int(rng.integers(0, 10**5)), dep_distance_mean=float(rng.uniform(0, 10)),
                           branch_miss_frac=float(rng.uniform(0, 0.5))))
        hists.append(dict(rank=0, seq=i, access=0, counts={int(x): 1 for x in rng.integers(0, 10**6, 8)}))
    ba = burst_arrays(memory_tables(bursts, hists), line_sizes=(64,))
    base = two_level_profile(beta=0.3)
    variants = [two_level_profile(name=f"v{k}", beta=0.3, **kw) for k, kw in enumerate(
        [dict(l1_bw=200e9), dict(l2_bw=80e9), dict(mem_bw=20e9), dict(flops=2e9), dict(simd=8e9)])]
    ms = [machine_coeffs(p) for p in [base] + variants]
    t = convolve(ba, ms).time_s
    for k in range(1, len(ms)):
        assert np.all(t[k] <= t[0] * (1 + 1e-12)), ms[k].name
    # a bigger cache never predicts slower either
    big = dataclasses.replace(base, name="big", node=dataclasses.replace(
        base.node, caches=(base.node.caches[0], dataclasses.replace(base.node.caches[1], size_bytes=8 * 2**20))))
    t2 = convolve(ba, [machine_coeffs(base), machine_coeffs(big)]).time_s
    assert np.all(t2[1] <= t2[0] * (1 + 1e-12)) and np.any(t2[1] < t2[0])


def test_shared_cache_share_and_allcores_bandwidth():
    prof = two_level_profile()
    l2 = dataclasses.replace(prof.node.caches[1], shared_by_cores=2)
    mem = dataclasses.replace(prof.node.memory, bandwidth_allcores_bytes_per_s={"load_unit": 12e9, "store": 6e9})
    prof = dataclasses.replace(prof, node=dataclasses.replace(prof.node, caches=(prof.node.caches[0], l2), memory=mem))
    one, two = machine_coeffs(prof, active_cores=1), machine_coeffs(prof, active_cores=2)
    assert one.capacity_lines[1] == L1_LINES + 16384 and two.capacity_lines[1] == L1_LINES + 8192
    assert one.load_bandwidth_bytes_per_s[2] == 10e9 and two.load_bandwidth_bytes_per_s[2] == 6e9


def test_overlap_and_edges():
    assert combine_overlap(np.array([2.0]), np.array([1.0]), 0.25)[0] == 2.25
    i, f = edge_position(512)
    assert REUSE_BIN_EDGES_LINES[i] <= 512 < REUSE_BIN_EDGES_LINES[i + 1]
    assert f == pytest.approx((512 - REUSE_BIN_EDGES_LINES[i]) / (REUSE_BIN_EDGES_LINES[i + 1] - REUSE_BIN_EDGES_LINES[i]))


def test_empty_histogram_borrows_rank_aggregate():
    mem = memory_tables([dict(rank=0, seq=1, load_bytes=100), dict(rank=0, seq=2, load_bytes=100)],
                        [dict(rank=0, seq=1, access=0, counts={10: 4})])
    ba = burst_arrays(mem, line_sizes=(64,))
    assert ba.n_borrowed_hist == 1
    assert np.array_equal(ba.cum[0, 0, 0], ba.cum[0, 0, 1])


def test_missing_sections():
    with pytest.raises(MissingSectionError, match="bursts"):
        burst_arrays({})
    prof = dataclasses.replace(two_level_profile(), node=None)
    with pytest.raises(MissingSectionError, match="'node'"):
        machine_coeffs(prof)


def test_branch_curves_on_shared_or_different_knots_agree():
    # machines probed at the same miss fractions take the one-lookup path, others the general
    # one: each machine's result must not depend on which machines it is convolved with
    rng = np.random.default_rng(5)
    bursts = [dict(rank=0, seq=i, load_bytes=1000, fp_scalar=100, flop=100.0, branches=int(rng.integers(1, 10**5)),
                   branch_miss_frac=float(x)) for i, x in enumerate(rng.uniform(-0.1, 0.6, 40))]
    ba = burst_arrays(memory_tables(bursts, [dict(rank=0, seq=i, access=0, counts={10: 1}) for i in range(40)]),
                      line_sizes=(64,))
    m1 = machine_coeffs(two_level_profile(dep=False))
    m2 = dataclasses.replace(m1, name="other", branch_miss_frac=(0.0, 0.1, 0.5), branch_cost_s=(1e-9, 4e-9, 5e-9))
    alone = [convolve(ba, [m]).compute_s[0] for m in (m1, m2)]
    both = convolve(ba, [m1, m2]).compute_s
    assert np.allclose(both[0], alone[0], rtol=1e-12) and np.allclose(both[1], alone[1], rtol=1e-12)
    # hand-computed on m2: miss 0.3 lies half-way between 0.1 and 0.5 -> 4.5 ns per branch
    one = burst_arrays(memory_tables([dict(rank=0, seq=1, branches=1000, branch_miss_frac=0.3)],
                                     [dict(rank=0, seq=1, access=0, counts={10: 1})]), line_sizes=(64,))
    assert convolve(one, [m2]).compute_s[0, 0] == pytest.approx(1000 * 4.5e-9, rel=1e-12)
    assert convolve(one, [m1, m2]).compute_s[1, 0] == pytest.approx(1000 * 4.5e-9, rel=1e-12)


def test_out_buffer_receives_the_times_and_is_checked():
    bursts = one_burst({10: 500, 2000: 300, -1: 200}, {3000: 100}, load_bytes=8000, store_bytes=800,
                       fp_scalar=10_000, flop=10_000.0, branches=0)
    m = machine_coeffs(two_level_profile())
    fast = dataclasses.replace(m, name="fast", flop_per_s_scalar=2 * m.flop_per_s_scalar)
    ref = convolve(bursts, [m, fast], detail=False).time_s
    out = np.full((2, 1), np.nan)
    res = convolve(bursts, [m, fast], detail=False, out=out)
    assert res.time_s is out and np.array_equal(out, ref) and out[1, 0] < out[0, 0]
    with pytest.raises(ValueError, match="C-contiguous float64 array of shape"):
        convolve(bursts, [m, fast], detail=False, out=np.empty((1, 2)))


def test_divides_run_on_the_divider_beside_the_other_flop():
    """t_flop = max(other flop / flop rate, divsqrt / divider rate) when the profile has the rate;
    without it divides are flop like any other."""
    base = one_burst({10: 100}, load_bytes=800, store_bytes=0, fp_scalar=1000, flop=1000.0, branches=0)
    ba = dataclasses.replace(base, divsqrt=np.array([200.0]))
    m = machine_coeffs(two_level_profile())
    rs = m.flop_per_s_scalar
    assert convolve(ba, [m]).compute_s[0, 0] == pytest.approx(1000 / rs, rel=1e-12)
    slow_div = dataclasses.replace(m, divsqrt_per_s=rs / 10)     # divider-bound: 200 * 10 / rs
    fast_div = dataclasses.replace(m, divsqrt_per_s=rs * 10)     # the other 800 flop dominate
    c = convolve(ba, [slow_div, fast_div]).compute_s[:, 0]
    assert c[0] == pytest.approx(2000 / rs, rel=1e-12) and c[1] == pytest.approx(800 / rs, rel=1e-12)
    # a signature without divide counts: priced as before whatever the machine's divider
    assert convolve(base, [slow_div]).compute_s[0, 0] == pytest.approx(1000 / rs, rel=1e-12)


def test_predicted_branches_run_beside_the_divider():
    """compute = max(divider, other flop + branches * cost(0)) + branches * (cost(miss) - cost(0)):
    a predicted branch is loop work beside the divider; its mispredictions stall everything. The
    divider probe's own kernel (s += 1 / (v * sqrt(v)): per element two divider operations, a
    multiply and an add, one branch) is priced at the probe's rate; the sum that came before
    priced it a predicted branch dearer (+15 % on the Xeon of 26 Nov, and nbody with it)."""
    m = machine_coeffs(two_level_profile())
    m = dataclasses.replace(m, divsqrt_per_s=m.flop_per_s_scalar / 20)
    c0, c1 = m.branch_cost_s[0], m.branch_cost_s[-1]      # at miss fraction 0 and 0.5
    rs, rd = m.flop_per_s_scalar, m.divsqrt_per_s
    n = 1000
    probe = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=4 * n, flop=4.0 * n, fp_divsqrt=2 * n, branches=n,
                      branch_miss_frac=0.0)
    assert 2 * n / rd > 2 * n / rs + n * c0           # divider-bound, as on every core we know
    assert convolve(probe, [m]).compute_s[0, 0] == pytest.approx(2 * n / rd, rel=1e-12)
    # mispredicted: their extra price adds whatever the divider does
    missed = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=4 * n, flop=4.0 * n, fp_divsqrt=2 * n, branches=n,
                       branch_miss_frac=0.5)
    assert convolve(missed, [m]).compute_s[0, 0] == pytest.approx(2 * n / rd + n * (c1 - c0), rel=1e-12)
    # without divides, flop and branches add up as before
    plain = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=4 * n, flop=4.0 * n, branches=n, branch_miss_frac=0.5)
    assert convolve(plain, [m]).compute_s[0, 0] == pytest.approx(4 * n / rs + n * c1, rel=1e-12)


def test_loop_carried_chains_bound_the_flop_time():
    """t_flop = max(t_flop, fp_recurrence * t_chain_op), t_chain_op = 1 / the dependency probe's
    rate at its shortest distance; not counted (-1, older signatures) changes nothing."""
    m = machine_coeffs(two_level_profile())
    comp = two_level_profile().node.compute
    t_op = 1.0 / comp.dependency_flop_per_s[int(np.argmin(comp.dependency_distance))]
    assert m.chain_op_s == pytest.approx(t_op, rel=1e-15)
    rs = m.flop_per_s_scalar
    # 1000 scalar flop, of which 600 on a chain: chain-bound when 600 * t_op > 1000 / rs
    chained = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=600)
    assert chained.recurrence.tolist() == [600.0]
    assert convolve(chained, [m]).compute_s[0, 0] == pytest.approx(max(1000 / rs, 600 * t_op), rel=1e-12)
    assert 600 * t_op > 1000 / rs     # the case tests the chain term, not the throughput one
    short = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=1)
    assert convolve(short, [m]).compute_s[0, 0] == pytest.approx(1000 / rs, rel=1e-12)
    uncounted = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=-1)
    assert uncounted.recurrence is None
    assert convolve(uncounted, [m]).compute_s[0, 0] == pytest.approx(1000 / rs, rel=1e-12)
    # a profile without the dependency probe does not price chains
    nodep = dataclasses.replace(m, chain_op_s=None)
    assert convolve(chained, [nodep]).compute_s[0, 0] == pytest.approx(1000 / rs, rel=1e-12)


def test_a_chain_hides_the_loops_other_work():
    """t_other = max(t_flop + branches * c0, t_chain): the predicted branches' loop work runs in a
    loop-carried chain's shadow as its flop does; mispredictions still add. Two cases that tell it
    from the sum max(t_flop, t_chain) + branches * c0 it replaced (27 Nov 2026)."""
    m = machine_coeffs(two_level_profile())
    rs, t_op = m.flop_per_s_scalar, m.chain_op_s
    c0, c1 = m.branch_cost_s[0], m.branch_cost_s[-1]      # at miss fraction 0 and 0.5
    n_b = 100
    # chain-bound: 600 chain operations outlast 1000 flop and 100 predicted branches
    bound = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=600, branches=n_b,
                      branch_miss_frac=0.0)
    assert 600 * t_op > 1000 / rs + n_b * c0
    assert convolve(bound, [m]).compute_s[0, 0] == pytest.approx(600 * t_op, rel=1e-12)
    # between: the chain outlasts the flop alone but not the flop and the loop work together
    k = 260
    mid = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=k, branches=n_b,
                    branch_miss_frac=0.0)
    assert 1000 / rs < k * t_op < 1000 / rs + n_b * c0
    assert convolve(mid, [m]).compute_s[0, 0] == pytest.approx(1000 / rs + n_b * c0, rel=1e-12)
    # mispredicted branches stall everything: their extra price adds to the chain-bound time
    missed = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=600, branches=n_b,
                       branch_miss_frac=0.5)
    assert convolve(missed, [m]).compute_s[0, 0] == pytest.approx(600 * t_op + n_b * (c1 - c0), rel=1e-12)


def test_chain_adds_and_multiplies_at_their_own_prices():
    """With fp_recurrence_mul (signature version 7) and the chain probe (profile schema 9):
    t_chain = (rec - rec_mul) * chain_add_s + rec_mul * chain_mul_s; a profile without the chain
    probe prices both kinds at chain_op_s; a signature without the split prices all at chain_op_s."""
    m = machine_coeffs(two_level_profile())
    rs = m.flop_per_s_scalar
    t_add, t_mul = 1.5e-9, 4e-9
    split = dataclasses.replace(m, chain_add_s=t_add, chain_mul_s=t_mul)
    b = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=600, fp_recurrence_mul=200)
    assert b.recurrence_mul.tolist() == [200.0]
    assert 400 * t_add + 200 * t_mul > 1000 / rs       # chain-bound: the case tests the chain term
    assert convolve(b, [split]).compute_s[0, 0] == pytest.approx(400 * t_add + 200 * t_mul, rel=1e-12)
    assert convolve(b, [m]).compute_s[0, 0] == pytest.approx(600 * m.chain_op_s, rel=1e-12)
    unsplit = one_burst({10: 100}, load_bytes=800, fp_scalar=1000, flop=1000.0, fp_recurrence=600,
                        fp_recurrence_mul=-1)
    assert unsplit.recurrence_mul is None
    assert convolve(unsplit, [split]).compute_s[0, 0] == pytest.approx(600 * m.chain_op_s, rel=1e-12)
    # machine_coeffs takes the probe's prices from the profile
    prof = two_level_profile()
    prof = dataclasses.replace(prof, node=dataclasses.replace(prof.node, compute=dataclasses.replace(
        prof.node.compute, chain_add_s=t_add, chain_mul_s=t_mul)))
    assert convolve(b, [machine_coeffs(prof)]).compute_s[0, 0] == pytest.approx(400 * t_add + 200 * t_mul, rel=1e-12)


def test_instruction_cache_misses_are_priced_at_the_profile_fetch_price():
    """compute += misses(L1i lines) * miss_s, the sampled fetches (access 2, scaled) beyond the
    profile's L1i size; no term for a profile without node.fetch or a signature whose
    fetches are not counted (-1, before version 6)."""
    from pmac.memsig import ACCESS_FETCH
    from pmac.profile import FetchModel

    def burst(fetches, fetch_counts):
        b = dict(rank=0, seq=1, load_bytes=800, fp_scalar=1000, flop=1000.0, fetches=fetches)
        hists = [dict(rank=0, seq=1, access=0, counts={10: 100}),
                 dict(rank=0, seq=1, access=ACCESS_FETCH, counts=fetch_counts)]
        return burst_arrays(memory_tables([b], hists), line_sizes=(64,))

    prof = two_level_profile()
    fetch = FetchModel(l1i_size_bytes=32768, l1i_line_bytes=64, miss_s=2e-9)
    with_fetch = dataclasses.replace(prof, node=dataclasses.replace(prof.node, fetch=fetch))
    m, mf = machine_coeffs(prof), machine_coeffs(with_fetch)
    assert (mf.l1i_capacity_lines, mf.fetch_miss_s, m.fetch_miss_s) == (512.0, 2e-9, None)
    t_flop = 1000 / m.flop_per_s_scalar
    # 600 fetches at distance 10 lines (< 512: L1i hits), 400 first touches: 400 misses
    ba = burst(1000, {10: 600, -1: 400})
    assert ba.fetches.tolist() == [1000.0] and ba.fetch_cum.shape == (1, 1, ba.cum.shape[3])
    c = convolve(ba, [m, mf]).compute_s[:, 0]
    assert c[0] == pytest.approx(t_flop, rel=1e-12)
    assert c[1] == pytest.approx(t_flop + 400 * 2e-9, rel=1e-6)
    # at distance 2000 lines (beyond the 512-line L1i) every fetch misses; a 128 KiB L1i holds them
    far = burst(1000, {2000: 600, -1: 400})
    big = dataclasses.replace(mf, l1i_capacity_lines=4096.0)
    c = convolve(far, [mf, big]).compute_s[:, 0]
    assert c[0] == pytest.approx(t_flop + 1000 * 2e-9, rel=1e-6)
    assert c[1] == pytest.approx(t_flop + 400 * 2e-9, rel=1e-6)
    # misses are counted, not a share: a sample of 100 (scaled) of the 1000 fetches with 40 first
    # touches is 40 misses (the unsampled 900 are code whose blocks were not sampled), and a burst
    # with no sampled fetch has none
    few = burst(1000, {10: 60, -1: 40})
    assert convolve(few, [mf]).compute_s[0, 0] == pytest.approx(t_flop + 40 * 2e-9, rel=1e-6)
    none = burst(1000, {})
    assert convolve(none, [mf]).compute_s[0, 0] == pytest.approx(t_flop, rel=1e-12)
    # more sampled than counted (noise): at most every fetch misses
    over = burst(1000, {-1: 1500})
    assert convolve(over, [mf]).compute_s[0, 0] == pytest.approx(t_flop + 1000 * 2e-9, rel=1e-6)
    # not counted: no term whatever the profile says
    old = burst(-1, {10: 600, -1: 400})
    assert old.fetches is None and old.fetch_cum is None
    assert convolve(old, [mf]).compute_s[0, 0] == pytest.approx(t_flop, rel=1e-12)


def test_divider_beta_adds_a_share_of_the_shorter_side():
    """compute = max(t_div, t_other) + divider_beta * min(t_div, t_other) + stalls, t_other the other
    flop plus the predicted branches' loop work: by hand for beta 0.25 on a burst whose divider and
    other work are both known; beta 0 (profiles before schema 10) is the max as before, and a burst
    without divides does not see it."""
    m = machine_coeffs(two_level_profile())
    m = dataclasses.replace(m, divsqrt_per_s=m.flop_per_s_scalar / 20)
    c0 = m.branch_cost_s[0]
    rs, rd = m.flop_per_s_scalar, m.divsqrt_per_s
    n = 1000
    b = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=12 * n, flop=12.0 * n, fp_divsqrt=2 * n, branches=n,
                  branch_miss_frac=0.0)
    t_div, t_other = 2 * n / rd, 10 * n / rs + n * c0
    mb = dataclasses.replace(m, divider_beta=0.25)
    c = convolve(b, [m, mb]).compute_s[:, 0]
    assert c[0] == pytest.approx(max(t_div, t_other), rel=1e-12)
    assert c[1] == pytest.approx(max(t_div, t_other) + 0.25 * min(t_div, t_other), rel=1e-12)
    assert min(t_div, t_other) > 0.2 * max(t_div, t_other)       # the case tests the share, not noise
    plain = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=12 * n, flop=12.0 * n, branches=n, branch_miss_frac=0.0)
    p = convolve(plain, [m, mb]).compute_s[:, 0]
    assert p[0] == p[1] == pytest.approx(12 * n / rs + n * c0, rel=1e-12)


def test_scalar_flop_priced_at_the_independent_rate_where_measured():
    """A profile with the flop_independent kernel's rate prices a burst's scalar flop at it (by
    hand: flop / rate + predicted branches' loop work), the dependent kernel's rate left for what
    it measured; without it, at flop_per_s_scalar as before. SIMD flop are untouched; the
    compute.flops what-if scales both rates."""
    from pmac.sweep import apply_knob

    p = two_level_profile()
    comp = p.node.compute
    q = dataclasses.replace(p, node=dataclasses.replace(p.node, compute=dataclasses.replace(
        comp, flop_per_s_scalar_independent=1.5 * comp.flop_per_s_scalar)))
    n = 1000
    b = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=12 * n, flop=12.0 * n, branches=n, branch_miss_frac=0.0)
    mp, mq = machine_coeffs(p), machine_coeffs(q)
    c0 = mp.branch_cost_s[0]
    got = convolve(b, [mp, mq]).compute_s[:, 0]
    assert got[0] == pytest.approx(12 * n / comp.flop_per_s_scalar + n * c0, rel=1e-12)
    assert got[1] == pytest.approx(12 * n / (1.5 * comp.flop_per_s_scalar) + n * c0, rel=1e-12)
    assert mq.flop_per_s_simd == mp.flop_per_s_simd
    fast = apply_knob(q, "compute.flops", 2.0).node.compute
    assert fast.flop_per_s_scalar_independent == 3.0 * comp.flop_per_s_scalar
    assert fast.flop_per_s_scalar == 2.0 * comp.flop_per_s_scalar


def test_scalar_fmas_priced_at_the_fma_rate_where_measured():
    """A burst's scalar fused multiply-adds (pmac_vg counts each one instruction of two flop) are
    priced at the flop_fma kernel's rate where a profile has it, two flop an FMA; its other scalar
    operations at the scalar rate; by hand. Without the rate an FMA is two flop at the scalar rate,
    as before, and a burst without FMAs is priced alike either way. The compute.flops what-if
    scales the FMA rate too."""
    from pmac.sweep import apply_knob

    p = two_level_profile()
    comp = p.node.compute
    rs = comp.scalar_rate
    q = dataclasses.replace(p, node=dataclasses.replace(p.node, compute=dataclasses.replace(
        comp, flop_per_s_scalar_fma=2 * rs)))
    n = 1000
    # per element: 2 FMAs and 3 other operations: 5 instructions, 7 flop
    b = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=5 * n, flop=7.0 * n, branches=n, branch_miss_frac=0.0)
    mp, mq = machine_coeffs(p), machine_coeffs(q)
    c0 = mp.branch_cost_s[0]
    assert mp.fma_op_s is None and mq.fma_op_s == 1.0 / rs
    got = convolve(b, [mp, mq]).compute_s[:, 0]
    assert got[0] == pytest.approx(7 * n / rs + n * c0, rel=1e-12)
    assert got[1] == pytest.approx(2 * n / rs + 3 * n / rs + n * c0, rel=1e-12)
    plain = one_burst({10: 100}, load_bytes=8 * n, fp_scalar=5 * n, flop=5.0 * n, branches=n, branch_miss_frac=0.0)
    same = convolve(plain, [mp, mq]).compute_s[:, 0]
    assert same[0] == same[1] == pytest.approx(5 * n / rs + n * c0, rel=1e-12)
    assert apply_knob(q, "compute.flops", 2.0).node.compute.flop_per_s_scalar_fma == 4 * rs


def test_flop_split_tells_fmas_apart_only_where_lanes_were_counted():
    """``_flop_split``: the flop beyond the counted lanes are FMAs, shared between scalar and SIMD
    as the flop are; a burst with flop but no counted lanes (a counter import) has none."""
    from pmac.convolve import _flop_split

    b = pd.DataFrame({"flop": [7.0, 12.0, 8.0], "fp_scalar": [5, 4, 0], "fp_128": [0, 2, 0], "fp_256": [0, 0, 0],
                      "fp_512": [0, 0, 0]})
    s, v, f = _flop_split(b)
    assert list(s) == [7.0, 6.0, 8.0] and list(v) == [0.0, 6.0, 0.0]
    # row 1: 8 lanes (4 scalar, 4 in two 128-bit), 12 flop: 4 FMA lanes, half of them scalar
    assert list(f) == [2.0, 2.0, 0.0]


def test_memory_lines_moved_both_ways_pair_off_at_the_copy_plateau():
    """Where memory has a copy plateau, the lines a burst loads from and stores to memory pair off
    and go at it (bytes counted both ways), the rest at the one-way plateaus; by hand. Without it
    (the synthetic profile as it is) loads and stores go apart, as before; cache levels never pair."""
    p = two_level_profile(beta=0.0, dep=False, branch=False)          # memory: load 10, store 5 GB/s
    mem = p.node.memory
    q = dataclasses.replace(p, node=dataclasses.replace(p.node, memory=dataclasses.replace(
        mem, bandwidth_1core_bytes_per_s={**mem.bandwidth_1core_bytes_per_s, "copy": 16e9})))
    mp, mq = machine_coeffs(p), machine_coeffs(q)
    assert mp.copy_bandwidth_bytes_per_s is None and mq.copy_bandwidth_bytes_per_s == 16e9
    # 300 cold loads and 100 cold stores: 300 and 100 lines from and to memory
    b = one_burst({-1: 300}, {-1: 100}, load_bytes=300 * 8, store_bytes=100 * 8, fp_scalar=0, flop=0.0, branches=0)
    got = convolve(b, [mp, mq]).memory_s[:, 0]
    assert got[0] == pytest.approx(300 * 64 / 10e9 + 100 * 64 / 5e9, rel=1e-6)
    assert got[1] == pytest.approx(2 * 100 * 64 / 16e9 + 200 * 64 / 10e9, rel=1e-6)
    # loads only: nothing to pair
    lo = one_burst({-1: 300}, load_bytes=300 * 8, fp_scalar=0, flop=0.0, branches=0)
    assert convolve(lo, [mp, mq]).memory_s[1, 0] == pytest.approx(300 * 64 / 10e9, rel=1e-6)
    # an L2 copy plateau changes nothing: 300 loads and 100 stores at distance 2000 (L2)
    l2 = q.node.caches[1]
    r = dataclasses.replace(q, node=dataclasses.replace(q.node, caches=(q.node.caches[0], dataclasses.replace(
        l2, bandwidth_1core_bytes_per_s={**l2.bandwidth_1core_bytes_per_s, "copy": 1e12}))))
    c = one_burst({2000: 300}, {2000: 100}, load_bytes=300 * 8, store_bytes=100 * 8, fp_scalar=0, flop=0.0,
                  branches=0)
    a, bb = convolve(c, [mq, machine_coeffs(r)]).memory_s[:, 0]
    assert a == bb == pytest.approx(300 * 64 / 50e9 + 100 * 64 / 25e9, rel=1e-6)

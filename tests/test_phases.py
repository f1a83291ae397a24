"""pmac.phases: a burst's functions priced one after another, against hand-computed times."""

import numpy as np
import pandas as pd
import pytest

from pmac.convolve import burst_arrays, convolve, machine_coeffs
from pmac.memsig import BURST_FUNCTIONS, OTHER_FUNCTIONS, REUSE, check_tables, reuse_bin
from pmac.phases import convolve_phases, phases_of
from synth import memory_tables, two_level_profile

US = 1e-6
STREAM = {-1: 1000, 0: 7000}     # 8000 loads of 8 B sweeping memory: 64,000 B at 10 GB/s = 6.4 us
IN_L1 = {10: 8000}               # 8000 loads at distance 10: 64,000 B at the L1's 100 GB/s = 0.64 us


def _fn_rows(rank, fn, counts):
    return [dict(rank=rank, seq=-1, function=fn, line_bytes=64, access=0, bin=int(reuse_bin(np.array([d]))[0]),
                 count=float(c)) for d, c in counts.items()]


def _split(rows):
    cols = {c: [r.get(c, 0) for r in rows] for c in BURST_FUNCTIONS.names}
    return BURST_FUNCTIONS.coerce(pd.DataFrame(cols))


def _memory():
    """Burst (0, 1): a memory sweep ('sweep', 1,000 flop) then an L1-resident chain of 20,000 flop
    ('chain'); burst (0, 2) the same counters without rows."""
    both = {**STREAM, **IN_L1}
    cols = dict(load_bytes=128_000, loads=16_000, fp_scalar=21_000, flop=21_000.0)
    mem = memory_tables([dict(rank=0, seq=1, **cols), dict(rank=0, seq=2, **cols)],
                        [dict(rank=0, seq=1, access=0, counts=both), dict(rank=0, seq=2, access=0, counts=both)])
    mem["reuse"] = REUSE.coerce(pd.concat([mem["reuse"], pd.DataFrame(_fn_rows(0, "sweep", STREAM)),
                                           pd.DataFrame(_fn_rows(0, "chain", IN_L1))], ignore_index=True))
    mem["burst_functions"] = _split([
        dict(rank=0, seq=1, function="sweep", load_bytes=64_000, loads=8000, fp_scalar=1000, flop=1000.0),
        dict(rank=0, seq=1, function="chain", load_bytes=64_000, loads=8000, fp_scalar=20_000, flop=20_000.0)])
    check_tables(mem)
    return mem


def test_functions_of_a_burst_overlap_each_on_its_own():
    mem = _memory()
    ba = burst_arrays(mem, line_sizes=(64,))
    m = machine_coeffs(two_level_profile(beta=0.5, dep=False, branch=False))
    res, mx, mn = convolve_phases(ba, phases_of(mem, ba), [m])
    whole = convolve(ba, [m])
    # the burst's memory time stays its own (7.04 us), split 6.4 / 0.64 by the functions' histograms
    assert res.memory_s[0, 0] == pytest.approx(7.04 * US, rel=1e-6)
    assert res.compute_s[0, 0] == pytest.approx(21 * US, rel=1e-12)
    # sweep: max(6.4, 1) + 0.5 * 1; chain: max(0.64, 20) + 0.5 * 0.64
    assert res.time_s[0, 0] == pytest.approx(6.9 * US + 20.32 * US, rel=1e-6)
    assert mx[0, 0] == pytest.approx(26.4 * US, rel=1e-6) and mn[0, 0] == pytest.approx(1.64 * US, rel=1e-6)
    # as one burst: max(7.04, 21) + 0.5 * 7.04
    assert whole.time_s[0, 0] == pytest.approx(24.52 * US, rel=1e-6)
    # the burst without rows is convolved as one
    assert res.time_s[0, 1] == pytest.approx(whole.time_s[0, 1], rel=1e-12)
    assert mx[0, 1] == pytest.approx(21 * US) and mn[0, 1] == pytest.approx(7.04 * US, rel=1e-6)


def test_rows_without_their_own_histograms_take_the_bursts():
    mem = _memory()
    mem["reuse"] = mem["reuse"][mem["reuse"]["function"] != "chain"]
    bf = mem["burst_functions"].copy()
    bf.loc[bf["function"] == "chain", "function"] = OTHER_FUNCTIONS
    mem["burst_functions"] = bf
    ba = burst_arrays(mem, line_sizes=(64,))
    ph = phases_of(mem, ba)
    m = machine_coeffs(two_level_profile(beta=0.0, dep=False, branch=False))
    raw = convolve(ph.rows, [m]).memory_s[0]
    # sweep priced with its own histogram; the other row with the burst's: 1 load in 16 misses,
    # 500 lines from memory (3.2 us), the other 32,000 B from L1 (0.32 us)
    assert raw[0] == pytest.approx(6.4 * US, rel=1e-6)
    assert raw[1] == pytest.approx(3.52 * US, rel=1e-6)
    res, _, _ = convolve_phases(ba, ph, [m])
    share = raw / raw.sum()
    assert res.time_s[0, 0] == pytest.approx(max(7.04 * US * share[0], 1 * US) + max(7.04 * US * share[1], 20 * US),
                                             rel=1e-6)


def test_each_function_misses_the_instruction_cache_at_its_own_counted_rate():
    """A row's L1i misses: its fetches in the burst at its function's whole-run counted miss rate
    (sampled fetches beyond the L1i, scaled, over the function's fetches); a function none of whose
    code was sampled has none, though its burst misses; the other code takes the burst's rate."""
    import dataclasses

    from pmac.memsig import ACCESS_FETCH, FUNCTIONS
    from pmac.profile import FetchModel

    mem = _memory()
    b = mem["bursts"].copy()
    b["fetches"] = 3000
    mem["bursts"] = b
    burst_fetch = [dict(rank=0, seq=s, function="", line_bytes=64, access=ACCESS_FETCH,
                        bin=int(reuse_bin(np.array([d]))[0]), count=c) for s in (1, 2) for d, c in ((-1, 1000.0),
                                                                                                  (10, 2000.0))]
    sweep_fetch = [dict(r, access=ACCESS_FETCH) for r in _fn_rows(0, "sweep", {-1: 500, 10: 500})]
    mem["reuse"] = REUSE.coerce(pd.concat([mem["reuse"], pd.DataFrame(burst_fetch + sweep_fetch)], ignore_index=True))
    bf = mem["burst_functions"]
    bf = pd.concat([bf, bf.iloc[[1]].assign(function=OTHER_FUNCTIONS)], ignore_index=True)
    bf["fetches"] = 1000
    mem["burst_functions"] = BURST_FUNCTIONS.coerce(bf)
    mem["functions"] = FUNCTIONS.coerce(pd.DataFrame({c: [0, 0] for c in FUNCTIONS.names}).assign(
        function=["sweep", "chain"], object="app", fetches=[1000, 4000]))
    check_tables(mem)
    ba = burst_arrays(mem, line_sizes=(64,))
    ph = phases_of(mem, ba)
    prof = two_level_profile(beta=0.0, dep=False, branch=False)
    fetch = FetchModel(l1i_size_bytes=32768, l1i_line_bytes=64, miss_s=2e-9)
    m = machine_coeffs(prof)
    mf = machine_coeffs(dataclasses.replace(prof, node=dataclasses.replace(prof.node, fetch=fetch)))
    extra = convolve(ph.rows, [mf]).compute_s[0] - convolve(ph.rows, [m]).compute_s[0]
    # sweep: half its fetches miss (500 of 1000); chain: 4000 fetches, none sampled: none; the
    # other code: its burst's 1000 of 3000
    assert ph.rows.fetches.tolist() == [1000.0, 1000.0, 1000.0]
    np.testing.assert_allclose(extra, [500 * 2e-9, 0.0, 1000 / 3 * 2e-9], rtol=1e-6, atol=1e-15)


def test_rows_of_a_burst_not_in_the_signature_are_refused():
    mem = _memory()
    bf = mem["burst_functions"].copy()
    bf.loc[0, "seq"] = 7
    mem["burst_functions"] = bf
    with pytest.raises(ValueError, match=r"burst_functions.*burst \(rank 0, seq 7\) is not in table 'bursts'"):
        check_tables(mem)
    mem["burst_functions"] = pd.concat([bf, bf.iloc[[1]]], ignore_index=True)
    with pytest.raises(ValueError, match="function 'chain' of burst .* appears twice"):
        check_tables(mem)


def test_predict_says_how_many_bursts_it_priced_by_function():
    from pmac.predict import predict
    from synth import pingpong_signature

    mem = _memory()
    sig = pingpong_signature(n_iter=1, memory=mem)
    prof = two_level_profile(beta=0.5, dep=False, branch=False)
    notes = predict(sig, [prof]).notes
    assert "1 of 2 burst(s) run several functions one after another: priced function by function (pmac.phases)" in notes
    old = pingpong_signature(n_iter=1, memory={k: v for k, v in mem.items() if k != "burst_functions"})
    assert any(n.startswith("the memory signature does not split bursts by function") for n in predict(old, [prof]).notes)
    # each rank's compute: the burst before its SEND (seq 1, by function: 27.22 us) and before
    # its RECV (seq 2, whole: 24.52 us); rank 1, untraced, takes rank 0's
    pr = predict(sig, [prof]).per_rank.set_index("rank")
    assert pr.loc[0, "compute_s"] == pytest.approx((27.22 + 24.52) * US, rel=1e-6)
    assert pr.loc[1, "compute_s"] == pytest.approx((27.22 + 24.52) * US, rel=1e-6)


def test_overlap_calibration_fits_beta_on_the_sums_over_functions():
    """pmac.overlap.fit_beta takes a burst's max_s / min_s (summed over its functions) where the
    samples carry them: one application whose bursts sum to max 10, min 4, measured 12 gives
    beta = (12 - 10) / 4 = 0.5; from memory_s and compute_s alone (max 7, min 6) it would be
    (12 - 7) / 6."""
    from pmac.overlap import fit_beta

    df = pd.DataFrame(dict(app="a", case="a", rank=0, seq=[1, 2], memory_s=[4.0, 3.0], compute_s=[3.0, 3.0],
                           max_s=[6.0, 4.0], min_s=[1.0, 3.0], measured_s=[7.0, 5.0]))
    assert fit_beta(df)[0] == pytest.approx(0.5, rel=1e-12)
    assert fit_beta(df.drop(columns=["max_s", "min_s"]))[0] == pytest.approx(5 / 6, rel=1e-12)

"""pmac.scaling (model fit, cross-validation, ranking) and pmac.cluster, on tables whose answers are
known by construction."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from pmac.cluster import cluster_metrics, correlate, observations
from pmac.errors import InputError
from pmac.scaling import ScalingModel, fit_model, fit_models, rank_at, reduce_ranks, smape_pct

P = np.array([2.0, 4.0, 8.0, 16.0, 32.0])


@pytest.mark.parametrize("c0, c1, i, j", [
    (3.0, 2.0, Fraction(1), 1),          # p log p
    (100.0, 5e6, Fraction(-1), 0),       # work divided among ranks
    (0.0, 7.0, Fraction(1, 2), 0),       # sqrt(p)
    (10.0, 1.5, Fraction(0), 2),         # log^2 p
    (1.0, 0.25, Fraction(2), 0),         # p^2
])
def test_fit_recovers_the_hypothesis_that_made_the_data(c0, c1, i, j):
    y = c0 + c1 * P ** float(i) * np.log2(P) ** j
    m = fit_model(P, y)
    assert (m.exponent, m.log_exponent) == (i, j)
    assert m.c0 == pytest.approx(c0, rel=1e-9, abs=1e-9 * abs(c1))
    assert m.c1 == pytest.approx(c1, rel=1e-9)
    assert m.loo_smape_pct == pytest.approx(0.0, abs=1e-7)
    assert float(m(1024.0)) == pytest.approx(c0 + c1 * 1024.0 ** float(i) * 10.0 ** j, rel=1e-9)


def test_constant_data_gives_the_constant_model():
    m = fit_model([1, 2, 4], [40.0, 40.0, 40.0])
    assert m.constant and m.c0 == 40.0 and m.loo_smape_pct == 0.0
    assert m.formula() == "40"


def test_smape_by_hand():
    assert smape_pct([100.0], [110.0]) == pytest.approx(100 * 2 * 10 / 210)
    assert smape_pct([0.0, 50.0], [0.0, 50.0]) == 0.0
    assert smape_pct([1.0], [0.0]) == pytest.approx(200.0)


def test_leave_one_out_is_what_refitting_without_each_run_predicts():
    # noisy data: check the cross-validation figure against fits made by hand without each run
    y = np.array([51.0, 26.5, 12.0, 7.1, 3.3])
    m = fit_model(P, y)
    g = P ** float(m.exponent) * np.log2(P) ** m.log_exponent
    loo = []
    for k in range(len(P)):
        keep = np.arange(len(P)) != k
        c = np.polyfit(g[keep], y[keep], 1)
        loo.append(np.polyval(c, g[k]))
    assert m.loo_smape_pct == pytest.approx(smape_pct(y, np.array(loo)), rel=1e-9)
    assert m.smape_pct == pytest.approx(smape_pct(y, m(P)), rel=1e-12)


def test_a_model_that_goes_negative_before_the_target_is_not_taken():
    # falling as -p would fit three points exactly but predicts negative counts at p = 64
    y = np.array([30.0, 20.0, 0.5])
    m = fit_model([1.0, 2.0, 4.0], y, up_to=64)
    assert (m(np.geomspace(1, 64, 50)) >= -1e-9).all()


def test_fit_needs_three_distinct_runs():
    with pytest.raises(InputError, match="needs 3 or more runs at distinct process counts, got 1, 2"):
        fit_model([1, 2], [1.0, 2.0])
    with pytest.raises(InputError, match="distinct"):
        fit_model([1, 2, 2], [1.0, 2.0, 2.0])


def test_formula_text():
    assert ScalingModel(c0=3.0, c1=2.0, exponent=Fraction(1), log_exponent=1).formula() == "3 + 2 * p * log2(p)"
    assert ScalingModel(c0=5.0, c1=-4.0, exponent=Fraction(-3, 2)).formula() == "5 - 4 * p^(-3/2)"
    assert ScalingModel(c0=1e-20, c1=40.0, exponent=Fraction(0), log_exponent=1).formula() == "40 * log2(p)"
    assert ScalingModel(c0=0.0, c1=2.0, exponent=Fraction(-1)).formula() == "2 * p^-1"


def _table():
    """Two ranks per run at p = 2, 4, 8: 'kernel' = 800/p on rank 0 and 400/p on rank 1; 'halo'
    = 10 p on both; 'io' only on rank 0, constant 5."""
    rows = []
    for p in (2, 4, 8):
        rows += [(p, 0, "kernel", "instructions", 800.0 / p), (p, 1, "kernel", "instructions", 400.0 / p),
                 (p, 0, "halo", "instructions", 10.0 * p), (p, 1, "halo", "instructions", 10.0 * p),
                 (p, 0, "io", "instructions", 5.0)]
    return pd.DataFrame(rows, columns=["n_ranks", "rank", "function", "metric", "value"])


def test_reduce_over_ranks_by_hand():
    t = _table()
    mx = reduce_ranks(t, "max").set_index(["n_ranks", "function"])["value"]
    mean = reduce_ranks(t, "mean").set_index(["n_ranks", "function"])["value"]
    total = reduce_ranks(t, "sum").set_index(["n_ranks", "function"])["value"]
    assert mx[(4, "kernel")] == 200.0 and mean[(4, "kernel")] == 150.0 and total[(4, "kernel")] == 300.0
    assert mean[(2, "io")] == 2.5  # the rank that ran none of it counts 0
    with pytest.raises(InputError, match="over_ranks must be one of max, mean, sum"):
        reduce_ranks(t, "median")


def test_ranking_at_scale_puts_the_growing_function_first():
    models = fit_models(reduce_ranks(_table(), "max"), up_to=64)
    assert set(models["function"]) == {"kernel", "halo", "io"}
    k = models.set_index("function").loc["kernel"]
    assert k["exponent"] == -1.0 and k["c1"] == pytest.approx(800.0)
    r = rank_at(models, "instructions", 64).set_index("function")
    # at p = 8: kernel 100, halo 80, io 5; at p = 64: halo 640, kernel 12.5, io 5
    assert r.loc["kernel", "rank_now"] == 1 and r.loc["halo", "rank_now"] == 2
    assert r.loc["halo", "rank_at"] == 1 and r.loc["kernel", "rank_at"] == 2 and r.loc["io", "rank_at"] == 3
    assert r.loc["halo", "value_at"] == pytest.approx(640.0, rel=1e-9)
    assert r.loc["halo", "growth_ratio"] == pytest.approx(8.0, rel=1e-9)
    assert r.loc["kernel", "share_at"] == pytest.approx(12.5 / (640 + 12.5 + 5), rel=1e-9)
    with pytest.raises(InputError, match="no metric 'cycles' in the counters"):
        rank_at(models, "cycles", 64)


def test_a_metric_is_fitted_over_the_runs_that_have_it():
    t = reduce_ranks(_table(), "max")
    p8 = pd.DataFrame([(p, "kernel", "cycles", 1e6 / p) for p in (4, 8)] + [(1, "x", "ipc", 2.0)],
                      columns=["n_ranks", "function", "metric", "value"])
    extra = pd.DataFrame([(p, "kernel", "PAPI_TOT_CYC", 1e6 / p + 10.0) for p in (2, 4, 8)],
                         columns=["n_ranks", "function", "metric", "value"])
    m = fit_models(pd.concat([t, extra, p8], ignore_index=True))
    row = m[(m["function"] == "kernel") & (m["metric"] == "PAPI_TOT_CYC")].iloc[0]
    assert row["c1"] == pytest.approx(1e6, rel=1e-9) and row["c0"] == pytest.approx(10.0, rel=1e-6)
    # the instructions' runs (2, 4, 8) are all there; "cycles" has two runs and "ipc" one: left out, named
    assert m.attrs["skipped"] == ["cycles (runs at 4, 8)", "ipc (runs at 1)"]
    assert np.isnan(row["at_1"]) and row["at_8"] == pytest.approx(1e6 / 8 + 10.0)


def test_fit_models_needs_three_process_counts():
    t = _table()
    with pytest.raises(InputError, match="runs at 3 or more process counts, got 2, 4"):
        fit_models(reduce_ranks(t[t["n_ranks"] < 8], "max"))


def test_correlation_and_groups_by_construction():
    rng = np.random.default_rng(7)
    a = rng.uniform(1, 10, 12)
    d = rng.uniform(1, 10, 12)
    obs = pd.DataFrame({"a": a, "b": 2 * a + 1, "c": -3 * a, "d": d, "e": np.full(12, 4.0)})
    corr, const = correlate(obs)
    assert const == ["e"]
    assert corr.loc["a", "b"] == pytest.approx(1.0) and corr.loc["a", "c"] == pytest.approx(-1.0)
    assert corr.loc["a", "d"] == pytest.approx(np.corrcoef(a, d)[0, 1], rel=1e-12)
    g = cluster_metrics(corr, 0.9)
    big = g[g["cluster"] == 1]
    assert list(big["metric"]) == ["a", "b", "c"] and list(big["representative"]) == [True, False, False]
    assert big["mean_abs_corr"].to_numpy() == pytest.approx([1.0, 1.0, 1.0])
    lone = g[g["metric"] == "d"].iloc[0]
    assert lone["cluster"] == 2 and lone["size"] == 1 and bool(lone["representative"])
    with pytest.raises(InputError, match=r"min_abs_corr must be in \(0, 1\]"):
        cluster_metrics(corr, 0.0)


def test_a_looser_threshold_merges_the_groups():
    x = np.arange(10.0)
    obs = pd.DataFrame({"a": x, "b": x + np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1]) * 3.0})
    corr, _ = correlate(obs)
    r = corr.loc["a", "b"]
    assert 0.5 < r < 0.95
    assert cluster_metrics(corr, min(1.0, r + 0.01))["cluster"].nunique() == 2
    assert cluster_metrics(corr, r - 0.01)["cluster"].nunique() == 1


def test_observations_by_rank_and_by_function():
    t = _table()
    by_rank = observations(t.assign(metric="instructions"), "rank")
    assert by_rank.loc[(4, 0), "instructions"] == 200.0 + 40.0 + 5.0
    t2 = pd.concat([t, t.assign(metric="loads", value=t["value"] * 2)])
    by_fn = observations(t2, "function")
    assert by_fn.loc[(8, "halo"), "loads"] == 2 * 160.0
    with pytest.raises(InputError, match="needs 3 or more observations, got 2"):
        correlate(by_rank.iloc[:2])

"""The noise model (pmac.noise, probes/noise.py): fit from a probe's quanta, replay as stretched bursts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import pmac.predict as pp
from pmac.errors import InputError
from pmac.noise import fit, perturb, rank_runs
from pmac.profile import RAW_TABLES, NoiseModel, load_profile, save_profile
from synth import pingpong_signature, two_level_profile


def quanta(chunk: int, per_core_dt: list[np.ndarray]) -> pd.DataFrame:
    """A noise table of one chunk: core c's quanta took per_core_dt[c][k] seconds, back to back from 0."""
    rows = []
    for c, dt in enumerate(per_core_dt):
        dt = np.round(np.asarray(dt, dtype=np.float64) * 1e9).astype(np.int64)
        rows.append(pd.DataFrame(dict(chunk=chunk, core=c, quantum=np.arange(len(dt)), start_s=0.0, dt_ns=dt)))
    return RAW_TABLES["noise"].coerce(pd.concat(rows, ignore_index=True))


class At:
    """A stand-in for numpy's Generator: every node starts at the same moment ``x`` of the series."""

    def __init__(self, x: float):
        self.x = x

    def uniform(self, lo, hi, size):
        return np.full(size, self.x)


def test_fit_gives_each_windows_slowdown_against_the_statistic():
    """Core 0: 10 us quanta throughout; core 1: 10 us for 2 ms, then 20 us for 2 ms. Windows of
    0.1 ms: core 1's factors are 1 then 2 against the best (the 10 us windows); against the 0.9
    slow quantile (a 20 us window) they are 0.5 and 1; chunks follow one another."""
    t = quanta(0, [np.full(400, 10e-6), np.r_[np.full(200, 10e-6), np.full(100, 20e-6)]])
    m = fit(t, statistic="best", window_s=1e-4)
    f = np.array(m.slowdown)
    assert f.shape == (2, 40) and m.chunk_starts == (0,) and m.reference == "best"
    assert m.quantum_s == pytest.approx(10e-6, rel=1e-9)
    assert np.allclose(f[0], 1.0) and np.allclose(f[1, :20], 1.0) and np.allclose(f[1, 20:], 2.0)
    slow = fit(t, statistic="0.9", window_s=1e-4)
    assert np.allclose(np.array(slow.slowdown)[1, 20:], 1.0) and np.allclose(np.array(slow.slowdown)[0], 0.5)
    # two chunks: the second's windows after the first's; a chunk shorter than a window is skipped
    t2 = pd.concat([t, quanta(1, [np.full(50, 10e-6)] * 2), quanta(2, [np.full(3, 10e-6)] * 2)], ignore_index=True)
    m2 = fit(t2, statistic="best", window_s=1e-4)
    assert m2.chunk_starts == (0, 40) and len(m2.slowdown[0]) == 45
    with pytest.raises(InputError, match="no quanta recorded"):
        fit(t.iloc[:0])
    with pytest.raises(InputError, match="lacks a core"):
        fit(pd.concat([t, quanta(1, [np.full(50, 10e-6)])], ignore_index=True), window_s=1e-4)


def test_perturb_by_hand():
    """Core 0's series: 1 ms at full speed, 1 ms at a third (work per cycle 4/3 ms in 2 ms of wall
    time). From wall 0.5 ms, a burst of 1 ms of work ends at wall 2.1667 ms (0.5 ms of work, then
    1 ms of wall time doing 1/3 ms, then 1/6 ms in the next cycle): 1.6667 ms. Core 1 runs at half
    speed throughout: its bursts double. A rank follows the core of its place on its node."""
    m = NoiseModel(window_s=1e-3, quantum_s=1e-5, slowdown=((1.0, 3.0), (2.0, 2.0)))
    burst = np.array([1e-3, 1e-4, 0.0, 1e-3, 5e-4])
    rank = np.array([0, 0, 0, 1, 1])
    seq = np.array([1, 2, 3, 1, 2])
    out = perturb(burst, rank, seq, np.array([0, 0]), m, At(0.5e-3))
    # rank 0's second burst starts at work 1.5 ms = 1/6 ms into the second cycle, at full speed
    assert out[:3] == pytest.approx([5e-3 / 3, 1e-4, 0.0], rel=1e-12)
    assert out[3:] == pytest.approx([2e-3, 1e-3], rel=1e-12)
    # the events in another order: the same per event (a rank's bursts follow its seq)
    p = np.array([4, 2, 0, 3, 1])
    again = perturb(burst[p], rank[p], seq[p], np.array([0, 0]), m, At(0.5e-3))
    assert again == pytest.approx(out[p], rel=1e-12)
    # the ranks' call order computed once for several draws: the same result
    runs = rank_runs(rank[p], seq[p])
    assert [list(r) for r in runs] == [[2, 4, 1], [3, 0]]
    assert perturb(burst[p], rank[p], seq[p], np.array([0, 0]), m, At(0.5e-3), runs=runs) == pytest.approx(
        out[p], rel=1e-12)
    # one rank per node: both ranks on core 0's series
    out1 = perturb(burst, rank, seq, np.array([0, 1]), m, At(0.5e-3))
    assert out1[3] == pytest.approx(5e-3 / 3, rel=1e-12)
    # no slowdown: the bursts as they were
    flat = NoiseModel(window_s=1e-3, quantum_s=1e-5, slowdown=((1.0, 1.0, 1.0),))
    rng = np.random.default_rng(3)
    assert perturb(burst, rank, seq, np.array([0, 0]), flat, rng) == pytest.approx(burst, rel=1e-12, abs=1e-18)


def test_predict_with_noise_takes_the_median_draw():
    """predict(noise=3): the draw with the median makespan of three, each the replay of the
    bursts as perturb stretches them with seeds 0, 1, 2 (checked against predictions of those
    bursts as measured); a series that halves every core doubles every burst exactly."""
    sig = pingpong_signature(n_iter=3, msg_bytes=1000, burst_s=1e-3)
    prof = two_level_profile()
    halved = dataclasses.replace(prof, node=dataclasses.replace(prof.node, noise=NoiseModel(
        window_s=1e-3, quantum_s=1e-5, slowdown=((2.0, 2.0), (2.0, 2.0)))))
    base = pp.predict(sig, [prof], burst_source="measured").summary.iloc[0].total_s
    two = pp.predict(sig, [halved], burst_source="measured", noise=2).summary.iloc[0].total_s
    assert base == pytest.approx(7e-3 + 6 * 2e-6, rel=1e-12) and two == pytest.approx(14e-3 + 6 * 2e-6, rel=1e-12)
    varied = dataclasses.replace(prof, node=dataclasses.replace(prof.node, noise=NoiseModel(
        window_s=1e-3, quantum_s=1e-5, slowdown=((1.0, 3.0, 1.0, 1.5), (1.0, 1.0, 4.0, 1.0)))))
    pred = pp.predict(sig, [varied], burst_source="measured", noise=3)
    ev = sig.events
    totals = []
    for seed in range(3):
        b = perturb(ev["burst_s"].to_numpy(), ev["rank"].to_numpy(), ev["seq"].to_numpy(), np.array([0, 0]),
                    varied.node.noise, np.random.default_rng(seed))
        s = dataclasses.replace(sig, events=ev.assign(burst_s=b))
        totals.append(pp.predict(s, [prof], burst_source="measured").summary.iloc[0].total_s)
    assert len(set(np.round(totals, 12))) == 3          # the draws differ
    assert pred.summary.iloc[0].total_s == pytest.approx(sorted(totals)[1], rel=1e-12)
    assert any("the median of 3 draw(s)" in n for n in pred.notes)
    # a profile without the series: predicted without noise, and said
    plain = pp.predict(sig, [prof], burst_source="measured", noise=3)
    assert plain.summary.iloc[0].total_s == base and any("no noise model" in n for n in plain.notes)
    with pytest.raises(InputError, match="noise draws must be >= 0"):
        pp.predict(sig, [prof], noise=-1)


def test_noise_section_round_trips_and_bad_ones_are_named(tmp_path):
    prof = two_level_profile()
    m = NoiseModel(window_s=5e-4, quantum_s=2e-5, reference="median", chunk_starts=(0, 2),
                   slowdown=((1.0, 1.25, 0.9), (1.5, 1.0, 2.0)))
    p = dataclasses.replace(prof, node=dataclasses.replace(prof.node, noise=m))
    save_profile(p, tmp_path / "n.yaml")
    assert load_profile(tmp_path / "n.yaml").node.noise == m
    # pmac show: per core the median, 90 and 99 % windows and the slowest core at each moment
    from pmac.report_profile import format_profile
    shown = format_profile(p)
    assert "noise: 3 windows of 0.5 ms per core in 2 chunk(s); slowdown against the median speed" in shown
    assert "core 1: median 1.50" in shown and "slowest core at each moment: median 1.50" in shown
    text = (tmp_path / "n.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(text.replace("- [1.5, 1.0, 2.0]", "- [1.5, 1.0]"))
    with pytest.raises(InputError, match="bad.yaml.*the cores' series differ in length"):
        load_profile(tmp_path / "bad.yaml")
    (tmp_path / "neg.yaml").write_text(text.replace("- [1.5, 1.0, 2.0]", "- [1.5, 0.0, 2.0]"))
    with pytest.raises(InputError, match="every factor must be > 0"):
        load_profile(tmp_path / "neg.yaml")


def test_pool_raw_puts_the_probes_chunks_one_after_another():
    from pmac.pool import pool_raw

    a = quanta(0, [np.full(20, 1e-5)] * 2)
    b = pd.concat([quanta(0, [np.full(20, 2e-5)] * 2), quanta(1, [np.full(20, 3e-5)] * 2)], ignore_index=True)
    p = pool_raw([{"noise": a}, {"noise": b}])["noise"]
    assert sorted(set(p["chunk"])) == [0, 1, 2] and len(p) == len(a) + len(b)
    assert (p[p["chunk"] == 2]["dt_ns"] == 30000).all()


def test_refit_fits_the_noise_at_the_statistic():
    """pmac pool's refit: the noise series fitted again at the pool's statistic; a sidecar without
    the series leaves the profile's (or its absence) as it was. The shipped xeon-vm is pooled at the
    median (pmac probe --rounds)."""
    from pathlib import Path

    from pmac.pool import refit
    from pmac.profile import load_raw

    path = Path(__file__).resolve().parents[1] / "machines" / "xeon-vm.yaml"
    prof = load_profile(path)
    raw = load_raw(prof, path)
    own = prof.provenance.get("statistic", "best")     # pmac probe --add-noise fits at the profile's statistic
    assert prof.node.noise is not None and prof.node.noise == fit(raw["noise"], statistic=own)
    assert refit(prof, raw, statistic="median").node.noise == fit(raw["noise"], statistic="median")
    without = {k: v for k, v in raw.items() if k != "noise"}
    assert refit(prof, without, statistic="median").node.noise == prof.node.noise
    bare = dataclasses.replace(prof, node=dataclasses.replace(prof.node, noise=None))
    assert refit(bare, without, statistic="median").node.noise is None
    raw["noise"] = quanta(0, [np.full(400, 10e-6), np.r_[np.full(200, 10e-6), np.full(100, 20e-6)]])
    med = refit(prof, raw, statistic="median")
    assert med.node.noise == fit(raw["noise"], statistic="median") and med.node.noise.reference == "median"


@pytest.mark.requires("mpi")
def test_bench_noise_check_runs_the_bsp_loop_and_predicts_it():
    """bench/noise_check: the native loop of the noise probe's quantum runs under mpiexec (2 ranks)
    and prints its wall time; pmac predicts the same calls without noise at no less than the work
    itself (steps x grain x the quantum at the median) and with the noise series measured there;
    each error column is the prediction against the measured median."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench" / "noise_check"
    r = subprocess.run([sys.executable, str(bench), "--reps", "1", "--run-s", "0.01", "--grains", "1,20",
                        "--draws", "3"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    q_us = float(re.search(r"quantum \d+ sweeps, ([0-9.]+) us at the median", r.stdout).group(1))
    lines = [ln.split() for ln in r.stdout.splitlines() if re.match(r"\s+(1|20)\s+[0-9.]+\s+\d+\s", ln)]
    assert [int(x[0]) for x in lines] == [1, 20]
    for g, step_us, steps, meas, _rng, pred, err, noisy, nerr, *_ in lines:
        meas, pred, noisy = float(meas), float(pred), float(noisy)
        assert float(step_us) == pytest.approx(int(g) * q_us, abs=0.06 + int(g) * 0.006)   # q printed to 0.01 us
        assert pred >= int(steps) * int(g) * q_us * 1e-6 * (1 - 1e-3) and meas > 0 and noisy > 0
        assert float(err) == pytest.approx(100 * (pred - meas) / meas, abs=0.06)
        assert float(nerr) == pytest.approx(100 * (noisy - meas) / meas, abs=0.06)

"""Overlap calibration (closed-form beta, leave-one-application-out) and the shared error table."""

import numpy as np
import pandas as pd
import pytest

from pmac.errors import InputError
from pmac.overlap import calibrate, fit_beta, leave_one_out, samples_from_signature
from pmac.validate import case_errors, error_table
from synth import memory_tables, pingpong_signature, two_level_profile


def synthetic_samples(betas):
    rng = np.random.default_rng(3)
    rows = []
    for app, beta in betas.items():
        for case in (f"{app}-s", f"{app}-l"):
            m = rng.uniform(1e-4, 1e-3, 20)
            c = rng.uniform(1e-4, 1e-3, 20)
            for i in range(20):
                rows.append(dict(app=app, case=case, rank=0, seq=i, memory_s=m[i], compute_s=c[i],
                                 measured_s=max(m[i], c[i]) + beta * min(m[i], c[i])))
    return pd.DataFrame(rows)


def test_fit_recovers_beta():
    s = synthetic_samples({"a": 0.3, "b": 0.3, "c": 0.3})
    beta, rms = fit_beta(s)
    assert beta == pytest.approx(0.3, abs=1e-12) and rms < 1e-12
    m = calibrate(s, exclude=["b"])
    assert m.kind == "max_beta_min" and m.calibrated_on == ("a", "c") and m.params["beta"] == pytest.approx(0.3)


def test_leave_one_out_never_sees_the_app():
    s = synthetic_samples({"a": 0.2, "b": 0.2, "odd": 0.9})
    loo = leave_one_out(s).set_index("case")
    assert loo.loc["odd-s", "beta"] == pytest.approx(0.2, abs=1e-12)   # fitted on a and b only
    assert loo.loc["odd-s", "error_pct"] < -5                           # so it under-predicts odd
    assert 0.2 < loo.loc["a-s", "beta"] < 0.9
    with pytest.raises(InputError, match="no application left"):
        calibrate(s, exclude=["a", "b", "odd"])


def test_beta_clipped_to_unit_interval():
    s = synthetic_samples({"a": 0.0, "b": 0.0})
    s["measured_s"] *= 0.5          # faster than perfect overlap: beta would be negative
    assert fit_beta(s)[0] == 0.0


def test_samples_join_measured_bursts():
    bursts = [dict(rank=r, seq=s, load_bytes=64000, loads=1000, fp_scalar=1000, flop=1000.0)
              for r in (0, 1) for s in range(1, 8)]
    hists = [dict(rank=r, seq=s, access=0, counts={-1: 1000}) for r in (0, 1) for s in range(1, 8)]
    sig = pingpong_signature(n_iter=3, burst_s=2e-3, memory=memory_tables(bursts, hists))
    every = samples_from_signature(sig, two_level_profile(), steady=False)
    assert len(every) == 14 and np.all(every["measured_s"] == 2e-3)
    # steady state: per rank not the bursts before seq 0 (INIT) and 1 (set-up), nor before FINALIZE (7)
    df = samples_from_signature(sig, two_level_profile())
    assert sorted(set(df["seq"])) == [2, 3, 4, 5, 6] and len(df) == 10
    assert df["memory_s"].iloc[0] == pytest.approx(64000 / 10e9) and df["compute_s"].iloc[0] == pytest.approx(1e-6)


def test_error_table_numbers():
    df = pd.DataFrame(dict(app=["x", "x", "y"], measured_s=[1.0, 2.0, 4.0], predicted_s=[1.1, 1.6, 4.0]))
    t = error_table(df, by="app").set_index("group")
    assert t.loc["x", "mean_abs_error_pct"] == pytest.approx(15.0)
    assert t.loc["x", "mean_signed_error_pct"] == pytest.approx(-5.0)
    assert t.loc["x", "std_error_pct"] == pytest.approx(np.std([10.0, -20.0], ddof=1))
    assert t.loc["all", "n_cases"] == 3 and t.loc["all", "within_15pct_frac"] == pytest.approx(2 / 3)
    assert t.loc["all", "max_abs_error_pct"] == pytest.approx(20.0)
    with pytest.raises(InputError, match="measured_s"):
        error_table(pd.DataFrame(dict(predicted_s=[1.0])))


def test_median_ci_is_the_binomial_order_statistic_interval():
    """pmac.validate.median_ci by hand: 15 values at 90 %: P(B <= 3) = (1 + 15 + 105 + 455) / 2^15 =
    576 / 32768, so x_(4)..x_(12) covers 1 - 2 * 576 / 32768 = 96.48 %; the next pair (x_(5), x_(11))
    would cover 1 - 2 * 1941 / 32768 = 88.2 % < 90 %. Order of the input does not matter; too few
    values give the whole range with its own (lower) coverage."""
    from pmac.validate import median_ci

    rng = np.random.default_rng(5)
    x = np.arange(1.0, 16.0) ** 2
    lo, hi, cov = median_ci(rng.permutation(x), 0.9)
    assert (lo, hi) == (16.0, 144.0) and cov == pytest.approx(1 - 2 * 576 / 32768, rel=1e-15)
    lo, hi, cov = median_ci(x, 0.85)           # 88.2 % >= 85 %: one pair further in
    assert (lo, hi) == (25.0, 121.0) and cov == pytest.approx(1 - 2 * 1941 / 32768, rel=1e-15)
    assert median_ci([3.0, 1.0, 2.0, 4.0], 0.9) == (1.0, 4.0, 0.875)
    with pytest.raises(InputError, match="no values"):
        median_ci([])


def test_error_against_the_median_interval():
    """error_vs_ci_pct: 0 inside the measured median's interval, else against its nearest end;
    error_table counts cases within 15 % of it beside the plain within-15 % share."""
    df = pd.DataFrame(dict(app=["x", "x", "y"], measured_s=[1.0, 1.0, 1.0], measured_lo_s=[0.9, 0.9, 0.95],
                           measured_hi_s=[1.2, 1.2, 1.05], predicted_s=[1.1, 1.5, 0.76]))
    e = case_errors(df)
    assert e["error_vs_ci_pct"].tolist() == pytest.approx([0.0, 25.0, -20.0])
    assert e["error_pct"].tolist() == pytest.approx([10.0, 50.0, -24.0])
    t = error_table(df, by="app").set_index("group")
    assert t.loc["all", "within_15pct_frac"] == pytest.approx(1 / 3)
    assert t.loc["all", "within_15pct_of_ci_frac"] == pytest.approx(1 / 3)
    assert t.loc["x", "within_15pct_of_ci_frac"] == pytest.approx(0.5)
    assert "within_15pct_of_ci_frac" not in error_table(df.drop(columns=["measured_lo_s"])).columns


def test_overlap_probe_samples_by_hand():
    """samples_from_probe prices each (working set, chains) point's memory as the convolver prices
    a unit-stride sweep of the level it fits in, and its compute as the same kernel's time an
    element at the smallest working set (the L1 point, then not a sample); measured times made as
    max + b * min give back beta = b. With a single working set the compute is its flop at the
    SIMD rate, as before 29 Nov 2026."""
    from pmac.convolve import machine_coeffs
    from pmac.overlap import samples_from_probe

    prof = two_level_profile()
    mc = machine_coeffs(prof, active_cores=1, beta=0.0)
    l1_bytes = int(mc.capacity_lines[0] * mc.level_line_bytes[0])
    far = 64 * l1_bytes                                    # beyond every cache
    m_far = 8 * 4000 / mc.load_bandwidth_bytes_per_s[2] + 8 * 4000 / mc.store_bandwidth_bytes_per_s[2]
    per_chain = {0: 0.05e-9, 2: 0.7e-9, 8: 9e-9}          # the kernel's measured time an element in L1
    rows = []

    def add(ws, r, n, t):
        for rep, noise in enumerate((1.0, 1.0, 1.5, 1.0, 1.0, 1.0)):   # the slow one is ignored
            rows.append(dict(working_set_bytes=ws, chains=r, n_elements=n, rep=rep, time_s=t * noise))

    for r, per in per_chain.items():
        add(l1_bytes // 2, r, 1000, per * 1000)
        c = per * 4000 if r else 0.0
        add(far, r, 4000, max(m_far, c) + 0.3 * min(m_far, c))
    s = samples_from_probe(prof, pd.DataFrame(rows))
    assert sorted(s["app"]) == sorted(f"probe:{far}B:{r}chains" for r in per_chain)
    two = s[s["app"] == f"probe:{far}B:2chains"].iloc[0]
    assert two["memory_s"] == pytest.approx(m_far, rel=1e-12)
    assert two["compute_s"] == pytest.approx(0.7e-9 * 4000, rel=1e-12)
    assert s[s["app"] == f"probe:{far}B:0chains"].iloc[0]["compute_s"] == 0.0
    beta, rms = fit_beta(s)
    assert beta == pytest.approx(0.3, rel=1e-9) and rms == pytest.approx(0.0, abs=1e-9)
    # one working set: its flop at the SIMD rate
    rows, n = [], 1000
    for r in (0, 2, 8):
        c = (16 * r + r - 1 if r else 0) * n / mc.flop_per_s_simd
        add(far, r, n, max(m_far / 4, c) + 0.3 * min(m_far / 4, c))
    s = samples_from_probe(prof, pd.DataFrame(rows))
    assert len(s) == 3
    assert s[s["app"] == f"probe:{far}B:2chains"].iloc[0]["compute_s"] == pytest.approx(33 * n / mc.flop_per_s_simd)
    beta, rms = fit_beta(s)
    assert beta == pytest.approx(0.3, rel=1e-9) and rms == pytest.approx(0.0, abs=1e-9)
    # two working sets, neither in L1: nothing to measure the compute side with, priced too
    add(2 * far, 2, n, 1e-6)
    s = samples_from_probe(prof, pd.DataFrame(rows))
    assert len(s) == 4 and (s["compute_s"][s["app"].str.endswith(":2chains")] == 33 * n / mc.flop_per_s_simd).all()
    with pytest.raises(InputError, match="no overlap-probe repetitions"):
        samples_from_probe(prof, pd.DataFrame(rows).iloc[:0])


def test_timed_compute_s_is_the_max_over_ranks_of_bursts_between_barrier_and_reduce():
    """pmac.validate.timed_compute_s: per rank, the bursts after the first BARRIER up to the last
    REDUCE (the examples' timed loop), the larger of the ranks'."""
    from pmac.trace import Op
    from pmac.validate import timed_compute_s

    rows = []
    for r, bursts in ((0, (5.0, 1.0, 2.0, 3.0, 7.0)), (1, (5.0, 2.0, 2.5, 3.0, 7.0))):
        ops = (Op.INIT, Op.BARRIER, Op.SEND if r == 0 else Op.RECV, Op.REDUCE, Op.FINALIZE)
        for seq, (op, b) in enumerate(zip(ops, bursts)):
            rows.append(dict(rank=r, seq=seq, op=int(op), burst_s=b))
    ev = pd.DataFrame(rows)
    # rank 0: 2.0 + 3.0 (the RECV/SEND burst and the REDUCE's); rank 1: 2.5 + 3.0
    assert timed_compute_s(ev) == pytest.approx(5.5)
    assert timed_compute_s(ev[ev["op"] != int(Op.REDUCE)]) == 0.0
    # the ranks' rows interleaved, under another index: positions within a rank, not labels
    mixed = ev.sort_values(["seq", "rank"], kind="stable").set_index(np.arange(10)[::-1] * 7)
    assert timed_compute_s(mixed) == pytest.approx(5.5)


def _trace_of(calls: dict) -> pd.DataFrame:
    """Events of ``{rank: ((op, t_start_s, t_end_s), ...)}``, each burst the gap before its call."""
    rows = []
    for r, cs in calls.items():
        prev = 0.0
        for seq, (op, t0, t1) in enumerate(cs):
            rows.append(dict(rank=r, seq=seq, op=int(op), t_start_s=t0, t_end_s=t1, burst_s=t0 - prev))
            prev = t1
    return pd.DataFrame(rows)


def test_traced_region_s_is_the_max_over_ranks_from_first_barrier_end_to_last_reduce_start():
    """pmac.validate.traced_region_s: the traced run's own timed region, per rank from the end of
    the first BARRIER to the start of the last REDUCE, the larger of the ranks', without the
    tracer's own time (a burst shorter than its gap: pmac.rawtrace.tracer_own_s)."""
    from pmac.trace import Op
    from pmac.validate import traced_region_s

    calls = {0: ((Op.INIT, 0.0, 1.0), (Op.BARRIER, 1.5, 2.0), (Op.BARRIER, 3.0, 3.5), (Op.REDUCE, 6.0, 6.5),
                 (Op.REDUCE, 7.0, 7.25), (Op.FINALIZE, 8.0, 8.5)),
             1: ((Op.INIT, 0.0, 1.0), (Op.BARRIER, 1.0, 2.5), (Op.SEND, 3.0, 3.1), (Op.REDUCE, 9.0, 9.5),
                 (Op.FINALIZE, 10.0, 10.5))}
    ev = _trace_of(calls)
    # rank 0: 7.0 - 2.0 = 5.0 (first BARRIER, last REDUCE); rank 1: 9.0 - 2.5 = 6.5
    assert traced_region_s(ev) == pytest.approx(6.5)
    assert traced_region_s(ev[ev["rank"] == 0]) == pytest.approx(5.0)
    assert traced_region_s(ev[ev["op"] != int(Op.BARRIER)]) == 0.0
    # 0.75 s of tracer time before rank 1's SEND, 0.25 s before its REDUCE (inside the region),
    # 2 s before its FINALIZE (outside): 6.5 - 1.0
    own = ev.copy()
    for seq, dt in ((2, 0.75), (3, 0.25), (4, 2.0)):
        own.loc[(own["rank"] == 1) & (own["seq"] == seq), "burst_s"] -= dt
    assert traced_region_s(own) == pytest.approx(5.5)
    assert traced_region_s(own[own["rank"] == 1]) == pytest.approx(5.5)
    assert traced_region_s(own[own["rank"] == 0]) == pytest.approx(5.0)


def test_timeline_region_s_cuts_a_predicted_timeline_and_says_when_it_cannot():
    """pmac.validate.timeline_region_s (bench/accuracy, bench/validate_emulated): the same region
    on pmac.predict's timeline (op names, start_s / end_s); a rank without the calls is an error."""
    from pmac.errors import InputError
    from pmac.validate import timeline_region_s

    tl = pd.DataFrame(dict(rank=[0, 0, 0, 1, 1, 1], op=["BARRIER", "SEND", "REDUCE", "BARRIER", "RECV", "REDUCE"],
                           start_s=[0.0, 1.0, 4.0, 0.0, 1.0, 6.0], end_s=[0.5, 2.0, 4.5, 1.5, 2.0, 6.5]))
    assert timeline_region_s(tl) == pytest.approx(4.5)   # rank 1: 6.0 - 1.5; rank 0: 4.0 - 0.5
    with pytest.raises(InputError, match="lacks the BARRIER / REDUCE"):
        timeline_region_s(tl[~((tl["rank"] == 1) & (tl["op"] == "REDUCE"))])


def test_call_costs_compare_traced_and_replayed_calls_inside_the_timed_region():
    """pmac.validate.call_costs: per operation inside the timed region (BARRIER and REDUCE
    themselves and the calls outside left out), the traced and replayed time of a call and the
    difference per rank as a share of the traced region, by hand; several machines or no common
    call are errors."""
    from pmac.errors import InputError
    from pmac.trace import Op
    from pmac.validate import call_costs

    calls = {0: ((Op.INIT, 0.0, 1.0), (Op.BARRIER, 1.0, 2.0), (Op.SEND, 3.0, 4.0), (Op.ALLREDUCE, 5.0, 7.0),
                 (Op.REDUCE, 8.0, 9.0)),
             1: ((Op.INIT, 0.0, 1.0), (Op.BARRIER, 1.0, 2.0), (Op.RECV, 2.5, 4.0), (Op.ALLREDUCE, 5.0, 7.0),
                 (Op.REDUCE, 8.0, 9.0))}
    ev = _trace_of(calls)
    # the replay: SEND 0.5 s, RECV 1.0 s, ALLREDUCE 1.0 and 3.0 s; INIT 5 s (outside the region)
    rep = {(0, 0): 5.0, (0, 2): 0.5, (0, 3): 1.0, (1, 2): 1.0, (1, 3): 3.0}
    tl = pd.DataFrame([dict(machine="m", rank=r, seq=q, op="X", start_s=10.0, end_s=10.0 + rep.get((r, q), 0.25))
                       for r in (0, 1) for q in range(5)])
    got = call_costs(ev, tl).set_index("op")
    assert list(got.index) == ["ALLREDUCE", "RECV", "SEND"] and got["calls"].tolist() == [2, 1, 1]
    # the traced region: 6 s on both ranks (from the BARRIER's end at 2.0 to the REDUCE's start at 8.0)
    assert got.loc["SEND", "traced_us"] == pytest.approx(1e6) and got.loc["SEND", "replayed_us"] == pytest.approx(5e5)
    assert got.loc["SEND", "diff_pct"] == pytest.approx(100 * -0.5 / 2 / 6.0)
    assert got.loc["RECV", "diff_pct"] == pytest.approx(100 * -0.5 / 2 / 6.0)
    assert got.loc["ALLREDUCE", "replayed_us"] == pytest.approx(2e6) and got.loc["ALLREDUCE", "diff_pct"] == 0.0
    assert got.loc["ALLREDUCE", "replayed_median_us"] == pytest.approx(2e6)
    with pytest.raises(InputError, match="several machines"):
        call_costs(ev, pd.concat([tl, tl.assign(machine="n")]))
    with pytest.raises(InputError, match="none of the trace's calls"):
        call_costs(ev, tl.assign(seq=tl["seq"] + 100))
    with pytest.raises(InputError, match="lacks the BARRIER / REDUCE"):
        call_costs(ev[ev["op"] != int(Op.REDUCE)], tl)
    with pytest.raises(InputError, match="region must be 'timed' or 'all', not 'some'"):
        call_costs(ev, tl, region="some")


def test_calibrate_overlap_by_call_table():
    """bench/calibrate_overlap --by-call: medians per case and ending call, by hand."""
    import runpy
    from pathlib import Path

    import pandas as pd

    from pmac.trace import Op

    by_call = runpy.run_path(str(Path(__file__).resolve().parents[1] / "bench" / "calibrate_overlap"),
                             run_name="bench")["by_call"]
    us = 1e-6
    samples = pd.DataFrame(dict(app="a", case="c", rank=[0, 0, 1], seq=[1, 2, 1],
                                memory_s=[1 * us, 3 * us, 5 * us], compute_s=[2 * us, 1 * us, 5 * us],
                                measured_s=[2.5 * us, 4 * us, 9 * us]))
    ops = {"c": pd.DataFrame(dict(rank=[0, 0, 1], seq=[1, 2, 1],
                                  op=[int(Op.ALLREDUCE), int(Op.ALLREDUCE), int(Op.SENDRECV)]))}
    t = by_call(samples, ops, 0.5).set_index("call")
    assert t.loc["ALLREDUCE", "bursts"] == 2 and t.loc["SENDRECV", "bursts"] == 1
    a = t.loc["ALLREDUCE"]
    assert a["traced_us"] == pytest.approx(3.25) and a["memory_us"] == pytest.approx(2.0)
    assert a["compute_us"] == pytest.approx(1.5)
    assert a["overlap_us"] == pytest.approx(3.0)   # max + 0.5 min: 2.5 and 3.5
    assert a["sum_us"] == pytest.approx(3.5)       # 3 and 4
    assert t.loc["SENDRECV", "overlap_us"] == pytest.approx(7.5) and t.loc["SENDRECV", "sum_us"] == pytest.approx(10)


def test_not_traced_on_names_host_and_cpu():
    """A signature's measured bursts are samples of a machine only when traced on its host with the
    CPU its node names; the host name alone is not enough (a VM keeps its name on other hardware)."""
    import dataclasses

    from pmac.overlap import not_traced_on

    prof = two_level_profile()
    prof = dataclasses.replace(prof, provenance={"host": "vm"},
                               node=dataclasses.replace(prof.node, cpu_model="Xeon (family 6, model 207)"))

    def traced(hosts, cpu):
        sig = pingpong_signature()
        prov = {"host": hosts[0]} | ({"cpu_model": cpu} if cpu else {})
        return dataclasses.replace(sig, header=dataclasses.replace(sig.header, rank_hosts=hosts, provenance=prov))

    assert not_traced_on(traced(("vm", "vm"), "Xeon (family 6, model 207)"), prof) is None
    assert not_traced_on(traced(("vm", "vm"), "AMD EPYC (family 25, model 1)"), prof) == \
        "traced on CPU 'AMD EPYC (family 25, model 1)'; the profile describes 'Xeon (family 6, model 207)'"
    assert not_traced_on(traced(("vm", "other"), "Xeon (family 6, model 207)"), prof) == "traced on other, vm, not on vm"
    assert "names no CPU" in not_traced_on(traced(("vm", "vm"), None), prof)


def test_cpu_model_names_family_and_model(monkeypatch, tmp_path):
    """pmac.schema.cpu_model reads the first processor's block of /proc/cpuinfo."""
    import pmac.schema as schema

    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
            "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\n\nprocessor\t: 1\nmodel name\t: other\n")
    real = schema.Path

    def fake_path(p, *a):
        return real(tmp_path / "cpuinfo") if str(p) == "/proc/cpuinfo" else real(p, *a)

    (tmp_path / "cpuinfo").write_text(text)
    monkeypatch.setattr(schema, "Path", fake_path)
    assert schema.cpu_model() == "Intel(R) Xeon(R) Processor (family 6, model 207, stepping 2)"
    assert schema.provenance(command="x")["cpu_model"] == schema.cpu_model()

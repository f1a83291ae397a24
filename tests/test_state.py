"""pmac.state (pmac check): the profile's reference medians, the ratios per CPU and the verdict,
by hand; the command on a quick probe of this machine and on profiles it must refuse."""


import numpy as np
import pandas as pd
import pytest

from pmac.state import STATE_WS_BYTES, profile_state, state_ratios, verdict


def test_profile_state_takes_the_nearest_point_and_the_medians():
    bw = pd.DataFrame({"access": ["load_unit"] * 5 + ["store", "load_unit"],
                       "n_cores": [1, 1, 1, 1, 1, 1, 2],
                       "working_set_bytes": [131072, 229376, 229376, 229376, 524288, 262144, 262144],
                       "bandwidth_bytes_per_s": [9.0, 3.0, 5.0, 4.0, 1.0, 100.0, 100.0]})
    comp = pd.DataFrame({"probe": ["flop_scalar"] * 4 + ["flop_simd"] + ["branch"] * 4,
                         "param": [0.0] * 5 + [0.0, 0.0, 0.0, 0.5],
                         "value": [2.0, 8.0, 4.0, 6.0, 99.0, 3e-9, 1e-9, 2e-9, 7e-9]})
    # 229376 B is nearer 256 KiB than 131072 or 524288 on a log scale; store and 2-core rows ignored;
    # the branch kernel at probability 0 only (its 0.5 row is another point)
    assert STATE_WS_BYTES == 262144
    assert profile_state({"bandwidth": bw, "compute": comp}) == (4.0, 5.0, 2e-9, None)
    assert profile_state({"bandwidth": bw, "compute": comp[comp["probe"] != "branch"]}) == (4.0, 5.0, None, None)
    # the loop on every core at once: the median of the all:branch rows (alone:branch is another point)
    busy = pd.DataFrame({"probe": ["all:branch"] * 3 + ["alone:branch"], "param": [2.0] * 3 + [1.0],
                         "value": [6e-9, 4e-9, 9e-9, 1e-9]})
    assert profile_state({"bandwidth": bw, "compute": pd.concat([comp, busy])}) == (4.0, 5.0, 2e-9, 6e-9)
    assert profile_state({"bandwidth": bw}) is None
    assert profile_state({"bandwidth": bw, "compute": comp[comp["probe"] == "flop_simd"]}) is None


def test_ratios_per_cpu_and_verdict_by_hand():
    # the loop's value is seconds an element: its ratio is probed over now (a speed, as the others)
    rounds = [{0: (2.0, 4.0, 2.0), 1: (1.8, 2.0, 1.0)}, {0: (4.0, 2.0, 4.0), 1: (2.0, 2.0, 1.0)},
              {0: (3.0, 3.0, 1.0), 1: (2.2, 2.2, 1.0)}]
    t = state_ratios(rounds, (2.0, 2.0, 1.0)).set_index("cpu")
    busy = ["busy", "busy_lo", "busy_hi"]     # no busy check in these rounds (nor a reference): empty
    assert np.isnan(t[busy].to_numpy()).all()
    t = t.drop(columns=busy)
    assert t.loc[0].to_dict() == pytest.approx(dict(l2=1.5, l2_lo=1.0, l2_hi=2.0, flop=1.5, flop_lo=1.0, flop_hi=2.0,
                                                    loop=0.5, loop_lo=0.25, loop_hi=1.0))
    assert t.loc[1].to_dict() == pytest.approx(dict(l2=1.0, l2_lo=0.9, l2_hi=1.1, flop=1.0, flop_lo=1.0, flop_hi=1.1,
                                                    loop=1.0, loop_lo=1.0, loop_hi=1.0))
    assert verdict(t) == ("runs faster in part and slower in part than probed (ratios 0.50-1.50): predictions made "
                          "with this profile price its bursts for another state of the machine; pmac probe "
                          "measures the present one")
    assert verdict(t.loc[[1]]) == "runs as probed: every ratio within 10% of 1"
    assert not np.isnan(t.to_numpy()).any()
    # a profile without the branch kernel: its column empty, the verdict from the other two
    t2 = state_ratios(rounds, (2.0, 2.0, None)).set_index("cpu")
    assert np.isnan(t2["loop"]).all() and t2.loc[0, "l2"] == pytest.approx(1.5)
    assert verdict(t2) == ("runs faster than probed (ratios 1.00-1.50): predictions made with this profile price "
                           "its bursts for another state of the machine; pmac probe measures the present one")
    slow = pd.DataFrame(dict(cpu=[0], l2=[0.55], flop=[0.95]))
    assert verdict(slow).startswith("runs slower than probed (ratios 0.55-0.95)")
    assert verdict(pd.DataFrame(dict(cpu=[0, 1], l2=[0.5, 1.3], flop=[1.0, 1.0]))).startswith(
        "runs faster in part and slower in part than probed (ratios 0.50-1.30)")


def test_busy_ratios_per_cpu_by_hand():
    """The fourth value of a check, each CPU's loop with every CPU busy, against the profile's
    all:branch median (a time: probed over now); rounds of an older check (three values) or a
    profile without all:branch rows leave the column empty, and the verdict then rests on the rest."""
    rounds = [{0: (2.0, 2.0, 1.0, 2.0), 1: (2.0, 2.0, 1.0, 4.0)}, {0: (2.0, 2.0, 1.0, 2.0), 1: (2.0, 2.0, 1.0, 8.0)}]
    t = state_ratios(rounds, (2.0, 2.0, 1.0, 2.0)).set_index("cpu")
    assert t.loc[0, ["busy", "busy_lo", "busy_hi"]].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert t.loc[1, ["busy", "busy_lo", "busy_hi"]].tolist() == pytest.approx([0.375, 0.25, 0.5])
    assert verdict(t).startswith("runs slower than probed (ratios 0.38-1.00)")
    assert verdict(t.loc[[0]]) == "runs as probed: every ratio within 10% of 1"
    assert np.isnan(state_ratios(rounds, (2.0, 2.0, 1.0, None))["busy"]).all()
    older = [rounds[0], {0: (2.0, 2.0, 1.0), 1: (2.0, 2.0, 1.0)}]
    t3 = state_ratios(older, (2.0, 2.0, 1.0, 2.0))
    assert np.isnan(t3["busy"]).all() and verdict(t3) == "runs as probed: every ratio within 10% of 1"


def test_busy_loop_times_every_cpu_while_the_others_run(monkeypatch):
    """pmac.state.busy_loop_s with the kernel replaced by one that sleeps (CPU 0's calls 2 ms, the
    next CPU's 5 ms) and records when each call ran: each CPU's median is its own calls' (seconds
    per element of the array the kernel sweeps), and every call it counts ended while the other
    thread was still calling. One CPU alone: nothing to run beside it, {}."""
    import os
    import threading
    import time

    from probes import compute as pc
    from pmac.state import BRANCH_ELEMENTS, busy_loop_s

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to run the busy check on (this machine lets the process run on one)")
    cpus = cpus[:2]
    calls = []
    sleep_s = {cpus[0]: 0.002, cpus[1]: 0.005}
    main_thread = threading.main_thread()

    def fake(r, n, sink):
        if threading.current_thread() is main_thread:
            return 0                        # choosing the sweeps a call: one sweep is enough here
        cpu = next(iter(os.sched_getaffinity(0)))
        t0 = time.perf_counter()
        time.sleep(sleep_s[cpu])
        calls.append((cpu, t0, time.perf_counter()))
        return 0

    monkeypatch.setattr(pc, "branchy_nogil", fake)
    out = busy_loop_s(cpus, reps=5, call_s=0.0)
    assert set(out) == set(cpus)
    for cpu in cpus:
        own = [c for c in calls if c[0] == cpu]
        assert len(own) >= 5
        per_element = sorted((e - s) / BRANCH_ELEMENTS for _, s, e in own[:5])
        assert out[cpu] == pytest.approx(per_element[2], rel=0.05)
        assert out[cpu] * BRANCH_ELEMENTS >= sleep_s[cpu]
        other_end = max(e for c, _, e in calls if c != cpu)
        assert all(e <= other_end for _, _, e in own[:5])
    assert busy_loop_s(cpus[:1]) == {}


def test_state_loop_replaces_the_busy_rows_and_the_slowdown_follows(tmp_path):
    """pmac.state.with_loop_reps with the busy loop too: every probe's all:branch rows become the
    checks' busy seconds and their alone:branch rows the checks' loop alone, so the refitted
    profile's loop slowdown is the checks' (median busy over median alone, by hand) and its loop
    work the checks' loop; in a pooled table they are a source of their own, and the slowdown is
    theirs alone. A profile without all:branch rows has nothing to replace."""
    from pmac.probe import compute_model
    from pmac.state import synchronised_busy_loop_s, with_loop_reps

    rounds = [{0: (1.0, 1.0, 3e-10, 6e-10), 1: (1.0, 1.0, 4e-10, 9e-10)},
              {0: (1.0, 1.0, 5e-10, 5e-10), 1: (1.0, 1.0, 3e-10, 7e-10)},
              {0: (1.0, 1.0, 2e-10), 1: (1.0, 1.0, 2e-10)}]      # an older round: no busy loop
    assert synchronised_busy_loop_s(rounds) == pytest.approx([9e-10, 7e-10])
    assert synchronised_busy_loop_s([]).size == 0
    rows = [("flop_scalar", 64.0, 10e9), ("flop_simd", 256.0, 40e9), ("dependency", 1.0, 1e9),
            ("branch", 0.0, 3e-10), ("branch", 0.5, 3e-9), ("branch_miss", 0.0, 0.0), ("branch_miss", 0.5, 0.5),
            ("alone:branch", 1.0, 3e-10), ("all:branch", 2.0, 9e-10)]
    comp = pd.DataFrame([dict(probe=p, param=q, rep=i, value=v) for p, q, v in rows for i in range(3)])
    isa = {"cpu_name": "", "llvmlite": ""}
    before = compute_model(comp, isa, slow_quantile=0.5)
    assert dict(zip(before.all_cores_kernels, before.all_cores_slowdown)) == pytest.approx({"branch": 3.0})
    loop, busy = np.array([4e-10, 5e-10]), np.array([6e-10, 8e-10])
    c = with_loop_reps({"compute": comp}, loop, busy)["compute"]
    assert sorted(c[c.probe == "all:branch"]["value"]) == pytest.approx([6e-10, 8e-10])
    assert set(c[c.probe == "all:branch"]["param"]) == {2.0}
    assert sorted(c[c.probe == "alone:branch"]["value"]) == pytest.approx([4e-10, 5e-10])
    after = compute_model(c, isa, slow_quantile=0.5)
    assert dict(zip(after.all_cores_kernels, after.all_cores_slowdown)) == pytest.approx({"branch": 7.0 / 4.5})
    assert after.branch_cost_s[0] == pytest.approx(4.5e-10)
    # pooled: two probes, their own busy rows 3x and 2x; the checks' rows a third source, theirs alone
    other = comp.assign(value=np.where(comp.probe == "all:branch", 6e-10, comp["value"]))
    pooled = pd.concat([comp.assign(source=0), other.assign(source=1)], ignore_index=True)
    assert compute_model(pooled, isa, slow_quantile=0.5).all_cores_slowdown == pytest.approx((2.5,))
    pc = with_loop_reps({"compute": pooled}, loop, busy)["compute"]
    assert set(pc[pc.probe.isin(["all:branch", "alone:branch"])]["source"]) == {2}
    assert compute_model(pc, isa, slow_quantile=0.5).all_cores_slowdown == pytest.approx((7.0 / 4.5,))
    # without all:branch rows the busy seconds replace nothing; without busy seconds the probe's stay
    bare = comp[~comp.probe.isin(["all:branch", "alone:branch"])]
    c2 = with_loop_reps({"compute": bare}, loop, busy)["compute"]
    assert not c2.probe.isin(["all:branch", "alone:branch"]).any()
    kept = with_loop_reps({"compute": comp}, loop)["compute"]
    assert sorted(kept[kept.probe == "all:branch"]["value"]) == pytest.approx([9e-10] * 3)
    with pytest.raises(ValueError, match=r"needs positive seconds per element \(busy loop\)"):
        with_loop_reps({"compute": comp}, loop, np.array([0.0]))


def test_synchronised_loop_takes_the_slower_cpu_and_replaces_the_kernels_reps():
    from pmac.state import synchronised_loop_s, with_loop_reps

    rounds = [{0: (1.0, 1.0, 2e-9), 1: (1.0, 1.0, 3e-9)}, {0: (1.0, 1.0, 5e-9), 1: (1.0, 1.0, 1e-9)},
              {0: (1.0, 1.0)}]                       # a round of an older check, without the loop: left out
    assert synchronised_loop_s(rounds) == pytest.approx([3e-9, 5e-9])
    assert synchronised_loop_s([]).size == 0
    comp = pd.DataFrame({"probe": ["branch", "branch", "branch", "flop_scalar"], "param": [0.0, 0.0, 0.5, 64.0],
                         "rep": [0, 1, 0, 0], "value": [1e-9, 1e-9, 7e-9, 5.0]})
    raw = {"compute": comp, "bandwidth": "kept as it is"}
    out = with_loop_reps(raw, np.array([3e-9, 5e-9]))
    c = out["compute"]
    p0 = c[(c["probe"] == "branch") & (c["param"] == 0.0)]
    assert sorted(p0["value"]) == pytest.approx([3e-9, 5e-9]) and sorted(p0["rep"]) == [0, 1]
    assert len(c) == 4 and set(c["probe"]) == {"branch", "flop_scalar"}
    assert c[c["param"] == 0.5]["value"].tolist() == [7e-9]
    assert out["bandwidth"] == "kept as it is" and len(raw["compute"]) == 4 and raw["compute"] is comp
    with pytest.raises(ValueError, match="needs positive seconds"):
        with_loop_reps(raw, np.array([]))
    with pytest.raises(ValueError, match="needs positive seconds"):
        with_loop_reps(raw, np.array([1e-9, np.nan]))


def _comp(flops, loop_s):
    rows = [dict(probe="flop_scalar", param=64.0, rep=i, value=v) for i, v in enumerate(flops)]
    rows += [dict(probe="branch", param=0.0, rep=i, value=v) for i, v in enumerate(loop_s)]
    rows += [dict(probe="branch", param=0.5, rep=0, value=9e-9)]      # another point: not the loop
    return pd.DataFrame(rows)


def test_two_states_by_hand():
    """pmac.state.slow_shares / two_states_note: 80 repetitions of the scalar flop at 10 Gflop/s and
    20 at 7 (1.43x the time: slow), the loop work 100 at 0.31 ns and 5 at 0.6 (4.8 %): the flop's
    20 % names two states, the loop's 4.8 % does not; one state (a spread of 5 %) gives no note."""
    from pmac.state import slow_shares, two_states_note

    comp = _comp([10e9] * 80 + [7e9] * 20, [0.31e-9] * 100 + [0.6e-9] * 5)
    shares = slow_shares(comp)
    assert shares["scalar flop"] == pytest.approx(0.20)
    assert shares["loop work"] == pytest.approx(5 / 105)
    note = two_states_note(comp)
    assert note.startswith("the probes met the machine in two states (scalar flop 20 % of the repetitions took "
                           "1.3x the fastest tenth's time or more): ")
    assert "loop work" not in note
    steady = _comp(np.linspace(9.5e9, 10e9, 50), np.linspace(0.31e-9, 0.325e-9, 50))
    assert slow_shares(steady) == {"scalar flop": 0.0, "loop work": 0.0}
    assert two_states_note(steady) is None
    assert slow_shares(_comp([], [])) == {}


def test_pool_and_show_say_the_probes_met_two_states(tmp_path, capsys):
    """pmac pool prints the note of its pooled repetitions, pmac show the note of a profile's raw
    sidecar: the four probes of the shipped EPYC VM profile taken at 05:50 on 28 Nov 2026 met the
    host in both its states (the note names the shares computed here from the pooled repetitions),
    the four of 04:03 in one (no note), and a profile without a sidecar has none."""
    from pathlib import Path

    from pmac.cli import main
    from pmac.profile import load_profile, load_raw
    from pmac.state import SLOW_STATE_RATIO, SLOW_STATE_SHARE

    repo = Path(__file__).resolve().parents[1]
    rounds = repo / "machines" / "epyc-vm.rounds"
    assert main(["pool", "--name", "one", "--statistic", "median", "--out-dir", str(tmp_path)]
                + [str(r) for r in sorted(rounds.glob("T0403-round-*/epyc-vm.yaml"))]) == 0
    assert "two states" not in capsys.readouterr().out
    assert main(["show", str(tmp_path / "one.yaml")]) == 0
    assert "two states" not in capsys.readouterr().out
    assert main(["pool", "--name", "two", "--statistic", "median", "--out-dir", str(tmp_path)]
                + [str(r) for r in sorted(rounds.glob("T0550-round-*/epyc-vm.yaml"))]) == 0
    out = capsys.readouterr().out
    prof = load_profile(tmp_path / "two.yaml")
    comp = load_raw(prof, tmp_path / "two.yaml")["compute"]
    by_hand = {}
    for name, t in (("scalar flop", 1.0 / comp[comp.probe == "flop_scalar"].value.to_numpy()),
                    ("loop work", comp[(comp.probe == "branch") & (comp.param == 0.0)].value.to_numpy())):
        by_hand[name] = float(np.mean(t >= SLOW_STATE_RATIO * np.quantile(t, 0.1)))
    named = {k: v for k, v in by_hand.items() if v >= SLOW_STATE_SHARE}
    assert set(named) == {"scalar flop", "loop work"}, by_hand      # these four probes met both states
    lines = [x for x in out.splitlines() if x.startswith("  note: the probes met the machine in two states")]
    assert len(lines) == 1
    assert lines[0].startswith("  note: the probes met the machine in two states (" +
                               ", ".join(f"{k} {100 * v:.0f} %" for k, v in named.items()) + " of the repetitions")
    assert main(["show", str(tmp_path / "two.yaml")]) == 0
    assert lines[0].strip() in capsys.readouterr().out.splitlines()
    assert main(["show", str(repo / "machines" / "skylakesp-gold6148.yaml")]) == 0     # no sidecar
    assert "two states" not in capsys.readouterr().out

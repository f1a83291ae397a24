"""pmac.state (pmac check): the profile's reference medians, the ratios per CPU and the verdict,
by hand; the command on a quick probe of this machine and on profiles it must refuse."""

import dataclasses

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
    assert profile_state({"bandwidth": bw, "compute": comp}) == (4.0, 5.0, 2e-9)
    assert profile_state({"bandwidth": bw, "compute": comp[comp["probe"] != "branch"]}) == (4.0, 5.0, None)
    assert profile_state({"bandwidth": bw}) is None
    assert profile_state({"bandwidth": bw, "compute": comp[comp["probe"] == "flop_simd"]}) is None


def test_ratios_per_cpu_and_verdict_by_hand():
    # the loop's value is seconds an element: its ratio is probed over now (a speed, as the others)
    rounds = [{0: (2.0, 4.0, 2.0), 1: (1.8, 2.0, 1.0)}, {0: (4.0, 2.0, 4.0), 1: (2.0, 2.0, 1.0)},
              {0: (3.0, 3.0, 1.0), 1: (2.2, 2.2, 1.0)}]
    t = state_ratios(rounds, (2.0, 2.0, 1.0)).set_index("cpu")
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

"""bench/price_terms: the convolver's terms of a shipped signature on shipped profiles, checked
against what the model says of them by hand (the aliasing stalls add after the overlap; every
compute price scales with an all-cores slowdown), its output and its one-line refusals."""

from __future__ import annotations

import dataclasses
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "price_terms"
SIG = REPO / "signatures" / "stencil2d-n2-128"
CLX = REPO / "machines" / "clx-vm.yaml"


@pytest.fixture(scope="module")
def bench():
    return runpy.run_path(str(SCRIPT), run_name="price_terms")


def test_terms_add_up_as_the_model_says(bench):
    """On the Cascade Lake's profile (aliasing measured, no all-cores rows): the total without the
    aliasing stalls is the total less their sum (they add after the overlap), the slowdowns leave
    nothing to take out; with every all-cores slowdown set to 2 (and the instruction fetch, priced
    apart, left out) the compute side doubles exactly and the memory side stays."""
    from pmac.profile import load_profile
    from pmac.signature import load_signature

    sig = load_signature(SIG)
    prof = load_profile(CLX)
    t = bench["terms"](sig, prof, beta=0.2)
    assert t["active_cores"] == 2 and t["beta"] == 0.2
    assert t["alias_s"] > 0
    assert t["total_no_alias_s"] == pytest.approx(t["total_s"] - t["alias_s"], rel=1e-9)
    assert t["total_no_busy_s"] == pytest.approx(t["total_s"], rel=1e-12)
    assert t["total_neither_s"] == pytest.approx(t["total_no_alias_s"], rel=1e-12)
    assert t["total_s"] >= max(t["memory_s"], t["compute_s"])
    kernels = ("flop_independent", "flop_simd", "divsqrt", "chain", "branch")
    node = dataclasses.replace(prof.node, fetch=None)
    one = dataclasses.replace(prof, node=node)
    two = dataclasses.replace(one, node=dataclasses.replace(node, compute=dataclasses.replace(
        node.compute, all_cores_n=2, all_cores_kernels=kernels, all_cores_slowdown=(2.0,) * 5)))
    a, b = bench["terms"](sig, one, beta=0.2), bench["terms"](sig, two, beta=0.2)
    assert b["compute_s"] == pytest.approx(2 * a["compute_s"], rel=1e-6)
    assert b["memory_s"] == pytest.approx(a["memory_s"], rel=1e-12)
    assert b["total_no_busy_s"] == pytest.approx(a["total_s"], rel=1e-9)
    assert b["total_s"] > a["total_s"]


def test_prints_a_line_a_profile_and_refuses_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), str(SIG), str(CLX), str(REPO / "machines" / "epyc-vm.yaml"),
                        "--beta", "0.1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == ("stencil2d-n2-128: the convolver's terms, summed over every burst of its 2 ranks, ms")
    rows = [x.split() for x in lines if x.strip().startswith("machines/")]
    assert [x[0] for x in rows] == ["machines/clx-vm.yaml", "machines/epyc-vm.yaml"]
    assert all(x[1] == "2" and x[2] == "0.100" for x in rows)
    assert float(rows[1][5]) == 0.0          # the EPYC profile has no aliasing probe: no stalls priced
    assert "all-cores slowdowns: none;" in r.stdout
    for args, msg in (([str(SIG), str(tmp_path / "none.yaml")], "none.yaml"),
                      ([str(tmp_path), str(CLX)], "price_terms: ")):
        bad = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and msg in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1

"""The README's Python example (section "From Python, and a what-if") runs as written, and what it
prints is what pmac.predict gives: the base machine as predicted on its own, the what-if faster but
by less than its factor (the burst's cache and flop work keep their time)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _readme_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("### From Python, and a what-if", 1)
    assert len(section) == 2, "README: no section 'From Python, and a what-if'"
    m = re.search(r"```python\n(.*?)```", section[1], re.S)
    assert m, "README: the section has no python block"
    return m.group(1)


def test_readme_python_example_runs_and_matches_predict():
    from pmac.predict import predict
    from pmac.profile import load_profile
    from pmac.signature import load_signature

    code = _readme_block()
    scope: dict = {}
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), scope)
    finally:
        os.chdir(cwd)
    summary = scope["pred"].summary.set_index("machine")
    assert list(summary.index) == ["epyc-vm", "epyc-vm, 2x memory bandwidth"]
    assert "epyc-vm, 2x memory bandwidth" in out.getvalue()

    alone = predict(load_signature(REPO / "signatures" / "stream_mpi-n2-2000000"),
                    [load_profile(REPO / "machines" / "epyc-vm.yaml")]).summary.set_index("machine")
    assert summary.loc["epyc-vm", "total_s"] == pytest.approx(alone.loc["epyc-vm", "total_s"], rel=1e-12)
    base, fast = summary["compute_s"]
    assert base / 2 < fast < 0.75 * base        # DRAM-bound: most, not all, of its time halves
    # the network was not touched: the calls cost the same (to 1e-7: the replay's split of a call into
    # communication and wait follows the ranks' arrival skew, which the faster bursts change)
    assert summary["comm_s"].iloc[1] == pytest.approx(summary["comm_s"].iloc[0], rel=1e-6)

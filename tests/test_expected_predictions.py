"""Stored predictions for every shipped signature on every shipped machine (deterministic: 1e-6).

Regenerate with ``python bench/regen_expected`` when signatures/* or machines/* change.
"""

import json
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPECTED = REPO / "tests" / "data" / "expected_predictions.json"


def test_shipped_predictions_match_stored():
    regen = runpy.run_path(str(REPO / "bench" / "regen_expected"))
    current = regen["compute"]()
    stored = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {"entries": []}
    tol = stored.get("tolerance_rel", 1e-6)
    old = {(e["signature"], e["machine"]): e for e in stored["entries"]}
    stale, wrong = [], []
    for e in current["entries"]:
        key = (e["signature"], e["machine"])
        s = old.get(key)
        if s is None or s["signature_sha"] != e["signature_sha"] or s["machine_sha"] != e["machine_sha"]:
            stale.append(key)
            continue
        if ("lacking" in e) != ("lacking" in s):
            wrong.append((key, "lacking", e.get("lacking"), s.get("lacking")))
            continue
        for k in ("total_s", "compute_s", "comm_s", "wait_s"):
            if k in e and e[k] != pytest.approx(s[k], rel=tol, abs=1e-15):
                wrong.append((key, k, e[k], s[k]))
        if e.get("burst_source") != s.get("burst_source"):
            wrong.append((key, "burst_source", e.get("burst_source"), s.get("burst_source")))
    assert not stale, f"shipped files changed, run bench/regen_expected: {stale}"
    assert not wrong, f"predictions differ from the stored ones (tolerance {tol}): {wrong}"

"""Every shipped machine profile loads, validates, and its raw sidecar matches its hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmac.profile import load_profile, raw_path, verify_raw

MACHINES = sorted((Path(__file__).resolve().parents[1] / "machines").glob("*.yaml"))


def test_there_are_shipped_profiles():
    assert MACHINES, "machines/ ships no profile"


@pytest.mark.parametrize("path", MACHINES, ids=[p.stem for p in MACHINES])
def test_shipped_profile_loads_and_sidecar_matches(path):
    prof = load_profile(path)
    assert prof.name == path.stem
    verify_raw(prof, path)
    if prof.raw_file is not None:
        assert prof.raw_sha256, "a sidecar without a recorded hash cannot be checked"
        from pmac.profile import RAW_TABLES
        from pmac.table import load_tables
        tables = load_tables(raw_path(prof, path), RAW_TABLES)
        if prof.node is not None and prof.node.bandwidth_curves:
            assert "bandwidth" in tables and len(tables["bandwidth"]) > 0


def test_probed_devbox_is_complete():
    path = Path(__file__).resolve().parents[1] / "machines" / "devbox.yaml"
    if not path.exists():
        pytest.skip("machines/devbox.yaml not produced yet")
    prof = load_profile(path)
    assert prof.missing(("node", "node.compute", "network.intra_node")) == []
    node = prof.node
    l1 = node.caches[0].bandwidth_1core_bytes_per_s["load_unit"]
    assert l1 > node.memory.bandwidth_1core_bytes_per_s["load_unit"]
    assert node.memory.latency_s > node.caches[0].latency_s > 0

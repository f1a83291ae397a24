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


def test_a_profile_describes_this_machine_by_host_and_cpu(tmp_path, monkeypatch):
    """pmac.profile.not_this_machine: the host name and the CPU (pmac.schema.cpu_model) must both
    match; this_machines_profile picks the first such file of a directory, skipping unreadable
    ones; bench/accuracy refuses to compare another machine's profile with runs measured here."""
    import dataclasses
    import socket
    import subprocess
    import sys

    import re

    from pmac.errors import InputError
    from pmac.profile import default_profile_of_this_machine, not_this_machine, save_profile, this_machines_profile
    from pmac.schema import cpu_model

    base = load_profile(MACHINES[0])
    here = dataclasses.replace(base, name="here", raw_file=None, raw_sha256=None,
                               provenance={**base.provenance, "host": socket.gethostname(), "cpu_model": cpu_model()},
                               node=dataclasses.replace(base.node, cpu_model=cpu_model()))
    assert not_this_machine(here) is None
    other_cpu = dataclasses.replace(here, name="b-other", node=dataclasses.replace(here.node, cpu_model="Some CPU"))
    assert not_this_machine(other_cpu) == f"probed on CPU 'Some CPU', this machine has {cpu_model()!r}"
    other_host = dataclasses.replace(here, name="a-other", provenance={**here.provenance, "host": "elsewhere"})
    assert not_this_machine(other_host) == f"probed on host 'elsewhere', this is {socket.gethostname()!r}"
    (tmp_path / "0-broken.yaml").write_text("kind: [")
    # a variant built on this machine's node (bench/emulated_profiles) comes first by name, but a
    # probe of the machine is preferred to it
    variant = dataclasses.replace(here, name="emu-here", provenance={**here.provenance, "node_profile": "here"})
    for prof in (other_host, other_cpu, here, variant):
        save_profile(prof, tmp_path / f"{prof.name}.yaml")
    assert this_machines_profile(tmp_path) == tmp_path / "here.yaml"
    assert default_profile_of_this_machine(tmp_path) == tmp_path / "here.yaml"
    (tmp_path / "here.yaml").unlink()
    assert this_machines_profile(tmp_path) == tmp_path / "emu-here.yaml"   # no probe left: the variant
    (tmp_path / "emu-here.yaml").unlink()
    assert this_machines_profile(tmp_path) is None
    with pytest.raises(InputError, match=rf"^no profile in {tmp_path} was probed on this machine \({re.escape(cpu_model())}\): "
                                         r"pmac probe --name NAME, then --machine machines/NAME\.yaml$"):
        default_profile_of_this_machine(tmp_path)
    bench = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
    r = subprocess.run([sys.executable, str(bench), "--machine", str(tmp_path / "a-other.yaml")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"accuracy: {tmp_path / 'a-other.yaml'} does not describe this machine (probed on host 'elsewhere', this is "
        f"{socket.gethostname()!r}): its predictions cannot be compared with runs measured here (--probe-now DIR "
        "probes this one)")

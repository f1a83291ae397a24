import dataclasses
import math
import os

import pytest

from pmac.errors import InputError, SchemaVersionError
from pmac.profile import SCHEMA_VERSION as PROFILE_VERSION
from pmac.profile import FetchModel, combine, load_profile, save_profile
from pmac.schema import dump_yaml, read_yaml

from synth import small_profile


def test_profile_round_trip(tmp_path):
    p = small_profile()
    path = tmp_path / "m1.yaml"
    save_profile(p, path)
    assert load_profile(path) == p
    text = path.read_text()
    assert text.startswith(f"kind: pmac.machine\nschema_version: {PROFILE_VERSION}\n")


def test_version_1_profile_loads_without_a_divider_rate(tmp_path):
    """Version 2 added node.compute.divsqrt_per_s (optional): a version-1 file loads as before."""
    import dataclasses

    p = small_profile()
    path = tmp_path / "m1.yaml"
    save_profile(p, path)
    old = path.read_text().replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 1")
    assert "schema_version: 1" in old
    (tmp_path / "v1.yaml").write_text(old)
    back = load_profile(tmp_path / "v1.yaml")
    assert back == p and back.node.compute.divsqrt_per_s is None
    with_rate = dataclasses.replace(p, node=dataclasses.replace(
        p.node, compute=dataclasses.replace(p.node.compute, divsqrt_per_s=4.5e8)))
    save_profile(with_rate, tmp_path / "v2.yaml")
    assert load_profile(tmp_path / "v2.yaml").node.compute.divsqrt_per_s == 4.5e8


def test_version_2_profile_loads_unshaped(tmp_path):
    """Version 3 added the links' token-bucket shaper (optional): a version-2 file (no shaper
    keys) loads with unshaped links."""
    p = small_profile()
    save_profile(p, tmp_path / "v3.yaml")
    text = (tmp_path / "v3.yaml").read_text()
    assert "shaper_rate_bytes_per_s" in text
    v2 = "".join(line for line in text.splitlines(keepends=True)
                 if "shaper_" not in line and "exchange_excess" not in line)
    (tmp_path / "v2.yaml").write_text(v2.replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 2"))
    back = load_profile(tmp_path / "v2.yaml")
    links = [ln for ln in (back.network.intra_node, back.network.inter_node) if ln is not None]
    assert back == p and links and not any(ln.shaped for ln in links)


def test_version_3_profile_loads_without_exchange_excess(tmp_path):
    """Version 4 added the links' exchange_excess_s (default 0): a version-3 file loads."""
    p = small_profile()
    links = {k: dataclasses.replace(getattr(p.network, k), exchange_excess_s=2.5e-6)
             for k in ("intra_node", "inter_node") if getattr(p.network, k) is not None}
    p4 = dataclasses.replace(p, network=dataclasses.replace(p.network, **links))
    save_profile(p4, tmp_path / "v4.yaml")
    assert load_profile(tmp_path / "v4.yaml") == p4
    text = (tmp_path / "v4.yaml").read_text()
    v3 = "".join(line for line in text.splitlines(keepends=True) if "exchange_excess_s" not in line)
    (tmp_path / "v3.yaml").write_text(v3.replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 3"))
    assert load_profile(tmp_path / "v3.yaml") == p


def test_version_4_profile_loads_without_collective_excess(tmp_path):
    """Version 5 added network.collectives[].excess_s (optional, None: no excess): a version-4
    file loads, and a version-5 file keeps the values."""
    from pmac.profile import CollectiveCost

    p = small_profile()
    rows = (CollectiveCost(op="allreduce", msg_bytes=8, n_ranks=2, time_s=2e-5, placement="inter_node"),
            CollectiveCost(op="barrier", msg_bytes=0, n_ranks=4, time_s=3e-5, placement="inter_node"))
    p4 = dataclasses.replace(p, network=dataclasses.replace(p.network, collectives=rows))
    p5 = dataclasses.replace(p, network=dataclasses.replace(p.network, collectives=(
        dataclasses.replace(rows[0], excess_s=7.5e-6), rows[1])))
    save_profile(p5, tmp_path / "v5.yaml")
    assert load_profile(tmp_path / "v5.yaml") == p5
    body = read_yaml(tmp_path / "v5.yaml")
    assert [c["excess_s"] for c in body["network"]["collectives"]] == [7.5e-6, None]
    for c in body["network"]["collectives"]:
        del c["excess_s"]
    (tmp_path / "v4.yaml").write_text(dump_yaml(dict(body, schema_version=4)))
    assert load_profile(tmp_path / "v4.yaml") == p4
    body["network"]["collectives"][0]["excess_s"] = float("nan")
    (tmp_path / "bad.yaml").write_text(dump_yaml(dict(body, schema_version=5)))
    with pytest.raises(InputError, match="collective excess_s must be finite"):
        load_profile(tmp_path / "bad.yaml")


def test_profile_v5_loads_without_pollution_curves_and_v6_keeps_them(tmp_path):
    """Schema 6 added LinkModel.pollution_bytes / pollution_excess_s (pmac.pollution): a version-5
    file (no such keys) loads with empty curves (no such cost); a bad curve is a one-line error."""
    p = small_profile()
    link = dataclasses.replace(p.network.intra_node, pollution_bytes=(65536.0, 1048576.0),
                               pollution_excess_s=(1e-6, 3e-6))
    p6 = dataclasses.replace(p, network=dataclasses.replace(p.network, intra_node=link))
    save_profile(p6, tmp_path / "v6.yaml")
    assert load_profile(tmp_path / "v6.yaml") == p6
    body = read_yaml(tmp_path / "v6.yaml")
    assert body["network"]["intra_node"]["pollution_excess_s"] == [1e-6, 3e-6]
    for k in ("pollution_bytes", "pollution_excess_s"):
        del body["network"]["intra_node"][k]
    (tmp_path / "v5.yaml").write_text(dump_yaml(dict(body, schema_version=5)))
    assert load_profile(tmp_path / "v5.yaml") == p
    body["network"]["intra_node"].update(pollution_bytes=[1.0, 2.0], pollution_excess_s=[3e-6, 1e-6])
    (tmp_path / "bad.yaml").write_text(dump_yaml(dict(body, schema_version=6)))
    with pytest.raises(InputError, match="bad.yaml.*non-decreasing"):
        load_profile(tmp_path / "bad.yaml")


def test_floats_without_dot_read_back_as_floats(tmp_path):
    text = dump_yaml({"a": 1e9, "b": 1e-7, "c": 5.0, "d": math.inf})
    assert "1.0e+" in text or "1000000000.0" in text
    (tmp_path / "x.yaml").write_text(text)
    back = read_yaml(tmp_path / "x.yaml")
    assert back == {"a": 1e9, "b": 1e-7, "c": 5.0, "d": math.inf}
    assert all(isinstance(v, float) for v in back.values())


def test_unknown_key_is_an_error_naming_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    save_profile(small_profile(), path)
    path.write_text(path.read_text().replace("cpu_model:", "cpu_modle:"))
    with pytest.raises(InputError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and "cpu_modle" in str(err.value)


def test_newer_schema_version_refused(tmp_path):
    path = tmp_path / "new.yaml"
    save_profile(small_profile(), path)
    path.write_text(path.read_text().replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 99"))
    with pytest.raises(SchemaVersionError, match="newer than this pmac"):
        load_profile(path)


def test_malformed_yaml_one_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: pmac.machine\nschema_version: 1\nname: [unclosed\n")
    with pytest.raises(InputError) as err:
        load_profile(path)
    assert "malformed YAML" in str(err.value) and "\n" not in str(err.value)


def test_wrong_kind(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text("kind: pmac.signature\nschema_version: 1\n")
    with pytest.raises(InputError, match="expected kind 'pmac.machine'"):
        load_profile(path)


def test_invalid_value_from_post_init(tmp_path):
    path = tmp_path / "neg.yaml"
    save_profile(small_profile(), path)
    path.write_text(path.read_text().replace("n_cores: 2", "n_cores: -2"))
    with pytest.raises(InputError, match="n_cores must be positive"):
        load_profile(path)


def test_failed_write_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "keep.yaml"
    save_profile(small_profile(), path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(RuntimeError):
        save_profile(dataclasses.replace(small_profile(), description="new"), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.yaml"]


def test_missing_sections_and_combine():
    node_only = dataclasses.replace(small_profile("node"), network=None)
    net_only = dataclasses.replace(small_profile("net"), node=None)
    assert node_only.missing() == ["network.intra_node", "network.inter_node"]
    assert net_only.missing()[0] == "node"
    with pytest.raises(Exception, match="has no 'node' section"):
        net_only.require("node", needed_by="predict")
    both = combine(node_only, net_only, name="both")
    assert both.node == node_only.node and both.network == net_only.network
    assert both.missing() == ["network.inter_node"]
    assert "pages" not in both.provenance
    # how the node's memory was probed stays readable at the top (pmac predict's pages note)
    pages = {"mode": "default", "in_effect": "4 KiB pages (transparent huge pages: madvise)"}
    node_only = dataclasses.replace(node_only, provenance={"pages": pages, "transparent_hugepage": "madvise",
                                                           "host": "a", "statistic": "median"})
    net_only = dataclasses.replace(net_only, provenance={"pages": {"mode": "huge"}, "host": "b",
                                                         "statistic": "best"})
    both = combine(node_only, net_only, name="both")
    assert both.provenance["pages"] == pages and both.provenance["transparent_hugepage"] == "madvise"
    assert both.provenance["statistic"] == "median"     # the node's rates (pmac.overlap.samples_from_probe)
    assert "host" not in both.provenance
    assert both.provenance["node_provenance"]["host"] == "a" and both.provenance["network_provenance"]["host"] == "b"


def test_link_segments_transfer_time():
    link = small_profile().network.intra_node
    t = link.transfer_time_s([0, 1000, 65536, 1 << 20])
    assert t[0] == pytest.approx(1e-7)
    assert t[1] == pytest.approx(1e-7 + 1000 / 5e9)
    assert t[2] == pytest.approx(2e-6 + 65536 / 1e10)
    assert t[3] == pytest.approx(2e-6 + (1 << 20) / 1e10)


def test_version_7_profile_loads_without_fetch_and_fetch_round_trips(tmp_path):
    """Version 8 added node.fetch (optional, the fetch probe): a version-7 file has none; a
    profile with it reads back equal."""
    p = small_profile()
    save_profile(p, tmp_path / "v7.yaml")
    path = tmp_path / "v7.yaml"
    path.write_text(path.read_text().replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 7"))
    assert load_profile(path).node.fetch is None
    f = FetchModel(l1i_size_bytes=32768, l1i_ways=8, miss_s=4.2e-10, miss_sequential_s=4.0e-10,
                   footprint_bytes=(16384.0, 131072.0), line_random_s=(8e-10, 1.2e-9),
                   line_sequential_s=(8e-10, 1.2e-9), source="sysfs")
    q = dataclasses.replace(p, node=dataclasses.replace(p.node, fetch=f))
    save_profile(q, tmp_path / "f.yaml")
    assert load_profile(tmp_path / "f.yaml") == q
    with pytest.raises(ValueError, match="differ in length"):
        FetchModel(l1i_size_bytes=32768, miss_s=1e-9, footprint_bytes=(1.0,), line_random_s=())


def test_atomic_write_gives_the_usual_mode(tmp_path):
    """A file written through a temporary one has the mode open() would give it (0666 less the
    umask), not mkstemp's 0600; an existing file keeps its own mode."""
    import os
    import stat

    from pmac.schema import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.yaml", "a: 1\n")
        assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o644
        (tmp_path / "kept.yaml").write_text("a: 0\n")
        os.chmod(tmp_path / "kept.yaml", 0o640)
        atomic_write_text(tmp_path / "kept.yaml", "a: 1\n")
        assert stat.S_IMODE((tmp_path / "kept.yaml").stat().st_mode) == 0o640
        assert (tmp_path / "kept.yaml").read_text() == "a: 1\n"
    finally:
        os.umask(old)


def test_version_15_profile_loads_without_the_independent_flop_rate(tmp_path):
    """Version 16 added node.compute.flop_per_s_scalar_independent (optional): a version-15 file
    loads with none, and the convolver prices scalar flop at flop_per_s_scalar as before; a value
    round-trips and becomes the convolver's scalar rate; a negative one is refused with the file
    named."""
    from pmac.convolve import machine_coeffs
    from synth import two_level_profile

    p = two_level_profile()
    save_profile(p, tmp_path / "v15.yaml")
    text = (tmp_path / "v15.yaml").read_text()
    assert "flop_per_s_scalar_independent" in text      # written, null
    (tmp_path / "v15.yaml").write_text(text.replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 15")
                                       .replace("    flop_per_s_scalar_independent: null\n", "")
                                       .replace("    flop_per_s_scalar_fma: null\n", ""))
    back = load_profile(tmp_path / "v15.yaml")
    assert back == p and back.node.compute.flop_per_s_scalar_independent is None
    assert machine_coeffs(back).flop_per_s_scalar == p.node.compute.flop_per_s_scalar
    rate = 3 * p.node.compute.flop_per_s_scalar
    q = dataclasses.replace(p, node=dataclasses.replace(
        p.node, compute=dataclasses.replace(p.node.compute, flop_per_s_scalar_independent=rate)))
    save_profile(q, tmp_path / "v16.yaml")
    back = load_profile(tmp_path / "v16.yaml")
    assert back == q and machine_coeffs(back).flop_per_s_scalar == rate
    (tmp_path / "bad.yaml").write_text((tmp_path / "v16.yaml").read_text().replace(
        f"flop_per_s_scalar_independent: {rate!r}", "flop_per_s_scalar_independent: -1.0"))
    with pytest.raises(InputError, match=r"bad\.yaml.*flop_per_s_scalar_independent"):
        load_profile(tmp_path / "bad.yaml")


def test_version_16_profile_loads_without_the_fma_rate(tmp_path):
    """Version 17 added node.compute.flop_per_s_scalar_fma (optional): a version-16 file loads with
    none, and the convolver prices an FMA as two flop at the scalar rate as before; a value
    round-trips and sets the convolver's price of an FMA (two flop at that rate); a zero is refused
    with the file named."""
    from pmac.convolve import machine_coeffs
    from synth import two_level_profile

    p = two_level_profile()
    save_profile(p, tmp_path / "v16.yaml")
    text = (tmp_path / "v16.yaml").read_text()
    assert "    flop_per_s_scalar_fma: null\n" in text      # written, null
    (tmp_path / "v16.yaml").write_text(text.replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 16")
                                       .replace("    flop_per_s_scalar_fma: null\n", ""))
    back = load_profile(tmp_path / "v16.yaml")
    assert back == p and back.node.compute.flop_per_s_scalar_fma is None
    assert machine_coeffs(back).fma_op_s is None
    assert back.node.compute.fma_op_s == 2.0 / p.node.compute.scalar_rate
    rate = 4 * p.node.compute.flop_per_s_scalar
    q = dataclasses.replace(p, node=dataclasses.replace(
        p.node, compute=dataclasses.replace(p.node.compute, flop_per_s_scalar_fma=rate)))
    save_profile(q, tmp_path / "v17.yaml")
    back = load_profile(tmp_path / "v17.yaml")
    assert back == q and machine_coeffs(back).fma_op_s == 2.0 / rate
    from pmac.report_profile import format_profile

    shown = [ln for ln in format_profile(back).splitlines() if "compute (" in ln][0]
    assert f"scalar FMA code {rate / 1e9:.3g} Gflop/s" in shown
    assert "FMA" not in format_profile(p)
    (tmp_path / "bad.yaml").write_text((tmp_path / "v17.yaml").read_text().replace(
        f"flop_per_s_scalar_fma: {rate!r}", "flop_per_s_scalar_fma: 0.0"))
    with pytest.raises(InputError, match=r"bad\.yaml.*flop_per_s_scalar_fma"):
        load_profile(tmp_path / "bad.yaml")


def test_version_18_profile_loads_without_all_cores_and_busy_cores_slow_the_compute(tmp_path):
    """Version 19 added node.compute.all_cores_n / all_cores_kernels / all_cores_slowdown (optional):
    a version-18 file loads with none and the convolver prices compute at one core's rates however
    many cores are busy; measured, they round-trip, ``pmac show`` prints them, and with the node's
    cores busy each rate follows its kernel's slowdown (by hand below; the SIMD rate, not measured
    here, stays); two busy of four take a third of it (linear between one core and all_cores_n);
    kernels and slowdowns of different lengths are refused with the file named."""
    from pmac.convolve import compute_when_busy, machine_coeffs
    from pmac.report_profile import format_profile
    from synth import two_level_profile

    p = two_level_profile()
    c = p.node.compute
    save_profile(p, tmp_path / "v18.yaml")
    text = (tmp_path / "v18.yaml").read_text()
    assert "    all_cores_n: null\n" in text
    (tmp_path / "v18.yaml").write_text(text.replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 18")
                                       .replace("    all_cores_n: null\n", "").replace("    all_cores_kernels: []\n", "")
                                       .replace("    all_cores_slowdown: []\n", ""))
    back = load_profile(tmp_path / "v18.yaml")
    assert back == p and back.node.compute.all_cores_slowdown == ()
    one, two = machine_coeffs(back, active_cores=1), machine_coeffs(back, active_cores=2)
    assert (two.flop_per_s_scalar, two.branch_cost_s) == (one.flop_per_s_scalar, one.branch_cost_s)
    comp = dataclasses.replace(c, divsqrt_per_s=5e8, chain_add_s=1e-9, chain_mul_s=2e-9, all_cores_n=2,
                               all_cores_kernels=("flop_independent", "divsqrt", "branch", "chain"),
                               all_cores_slowdown=(1.5, 2.0, 1.25, 1.1))
    q = dataclasses.replace(p, node=dataclasses.replace(p.node, compute=comp))
    save_profile(q, tmp_path / "v19.yaml")
    back = load_profile(tmp_path / "v19.yaml")
    assert back == q
    assert "2 cores busy, a kernel's time a core against one alone: flop_independent x1.50, divsqrt x2.00, " \
           "branch x1.25, chain x1.10" in format_profile(back)
    one, two = machine_coeffs(back, active_cores=1), machine_coeffs(back, active_cores=2)
    assert one.flop_per_s_scalar == c.flop_per_s_scalar and one.divsqrt_per_s == 5e8
    assert two.flop_per_s_scalar == pytest.approx(c.flop_per_s_scalar / 1.5, rel=1e-12)
    assert two.divsqrt_per_s == pytest.approx(2.5e8, rel=1e-12)
    assert two.branch_cost_s == pytest.approx(tuple(1.25 * b for b in one.branch_cost_s), rel=1e-12)
    assert (two.chain_add_s, two.chain_mul_s) == pytest.approx((1.1e-9, 2.2e-9), rel=1e-12)
    assert two.flop_per_s_simd == one.flop_per_s_simd
    assert two.dep_slowdown_ratio == pytest.approx(one.dep_slowdown_ratio, rel=1e-12)     # ratios stay
    four = compute_when_busy(dataclasses.replace(comp, all_cores_n=4), 2)
    assert four.divsqrt_per_s == pytest.approx(5e8 / (1 + 1.0 / 3), rel=1e-12)
    assert compute_when_busy(dataclasses.replace(comp, all_cores_n=4), 9).divsqrt_per_s == pytest.approx(2.5e8)
    (tmp_path / "bad.yaml").write_text((tmp_path / "v19.yaml").read_text().replace(", chain]", "]", 1))
    with pytest.raises(InputError, match=r"bad\.yaml.*all_cores_kernels and all_cores_slowdown differ in length"):
        load_profile(tmp_path / "bad.yaml")


def test_version_9_profile_loads_without_divider_beta_and_it_round_trips(tmp_path):
    """Version 10 added node.compute.divider_beta (optional, in [0, 1]): a version-9 file loads
    with none (the convolver's 0); a value round-trips and reaches the convolver; out of [0, 1]
    is refused with the file named."""
    from pmac.convolve import machine_coeffs
    from synth import two_level_profile

    p = two_level_profile()
    save_profile(p, tmp_path / "v9.yaml")
    text = (tmp_path / "v9.yaml").read_text().replace(f"schema_version: {PROFILE_VERSION}", "schema_version: 9")
    (tmp_path / "v9.yaml").write_text(text)
    back = load_profile(tmp_path / "v9.yaml")
    assert back == p and back.node.compute.divider_beta is None and machine_coeffs(back).divider_beta == 0.0
    q = dataclasses.replace(p, node=dataclasses.replace(
        p.node, compute=dataclasses.replace(p.node.compute, divider_beta=0.125)))
    save_profile(q, tmp_path / "v10.yaml")
    back = load_profile(tmp_path / "v10.yaml")
    assert back.node.compute.divider_beta == 0.125 and machine_coeffs(back).divider_beta == 0.125
    (tmp_path / "bad.yaml").write_text((tmp_path / "v10.yaml").read_text().replace("divider_beta: 0.125",
                                                                                  "divider_beta: 1.5"))
    with pytest.raises(InputError, match=r"bad\.yaml.*divider_beta must lie in \[0, 1\], not 1\.5"):
        load_profile(tmp_path / "bad.yaml")

"""Importers: every shared kerncraft file, hand-written STREAM and OSU outputs, and combine."""

from pathlib import Path

import pytest

from pmac.cli import main
from pmac.errors import InputError, MissingSectionError
from pmac.importers import import_kerncraft, import_osu, import_stream, parse_stream
from pmac.profile import load_profile, save_profile

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]


def kerncraft_files(shared):
    files = sorted((shared / "data/kerncraft/examples/machine-files").glob("*.yml"))
    assert files, "no kerncraft machine files in shared/"
    return files


@pytest.mark.requires("shared")
def test_every_kerncraft_file_imports_and_names_what_it_lacks(shared_dir, tmp_path):
    for f in kerncraft_files(shared_dir):
        prof = import_kerncraft(f, name=f.stem.lower())
        assert prof.network is None
        assert prof.missing()[:1] == ["network.intra_node"] or "node.compute" in prof.missing()
        lacks = prof.provenance["lacks"]
        assert lacks[0].startswith("network") and "random-access (gather) bandwidth" in lacks
        assert "AGPL-3.0" in prof.description and "AGPL-3.0" in prof.provenance["licence"]
        n = prof.node
        sizes = [c.size_bytes for c in n.caches]
        assert sizes == sorted(sizes) and len(sizes) >= 2
        mem = n.memory.bandwidth_1core_bytes_per_s["load_unit"]
        l1 = n.caches[0].bandwidth_1core_bytes_per_s["load_unit"]
        assert l1 > mem > 1e9  # bandwidth falls from L1 to memory
        out = tmp_path / f"{f.stem}.yaml"
        save_profile(prof, out)
        assert load_profile(out) == prof
        with pytest.raises(MissingSectionError, match="network.inter_node"):
            prof.require("network.inter_node", needed_by="pmac predict")


@pytest.mark.requires("shared")
def test_kerncraft_skylake_numbers(shared_dir):
    f = shared_dir / "data/kerncraft/examples/machine-files/SkylakeSP_Gold-6148.yml"
    n = import_kerncraft(f, name="skx").node
    assert n.n_cores == 40 and n.cpu_model.startswith("Intel(R) Xeon(R) Gold 6148")
    l1, l2, l3 = n.caches
    assert (l1.size_bytes, l1.ways, l1.shared_by_cores) == (32768, 8, 1)
    assert (l2.size_bytes, l2.ways) == (1 << 20, 16)
    assert (l3.size_bytes, l3.ways, l3.shared_by_cores) == (40960 * 11 * 64, 11, 20)
    assert l1.bandwidth_1core_bytes_per_s["load_unit"] == pytest.approx(255.89e9)
    assert n.memory.bandwidth_1core_bytes_per_s["copy"] == pytest.approx(13.08e9)
    # the 20-core (one socket) figure times two sockets
    assert n.memory.bandwidth_allcores_bytes_per_s["load_unit"] == pytest.approx(2 * 117.82e9, rel=2e-3)
    c = n.compute
    assert c.clock_hz == 2.4e9 and c.simd_width_bits == 512
    assert c.flop_per_s_simd == pytest.approx(32 * 2.4e9) and c.flop_per_s_scalar == pytest.approx(4 * 2.4e9)


@pytest.mark.requires("shared")
def test_a64fx_lacks_compute(shared_dir):
    prof = import_kerncraft(shared_dir / "data/kerncraft/examples/machine-files/A64FX_qpace4.yml", name="a64fx")
    assert prof.node.compute is None and "node.compute" in prof.missing()
    assert "compute rates (FLOPs per cycle not given)" in prof.provenance["lacks"]
    assert prof.node.caches[0].line_bytes == 256 and prof.node.n_cores == 48


def test_stream_output():
    s = parse_stream(DATA / "stream_4threads.txt")
    assert s["n_threads"] == 4 and s["array_elements"] == 80_000_000
    assert s["rates_bytes_per_s"]["triad"] == pytest.approx(18810.0e6)
    prof = import_stream(DATA / "stream_4threads.txt", name="box", cpu_model="Some CPU")
    mem = prof.node.memory
    assert mem.bandwidth_allcores_bytes_per_s == {"copy": pytest.approx(24512.3e6)}
    assert mem.bandwidth_1core_bytes_per_s == {}
    assert prof.node.n_cores == 4 and prof.node.caches == ()
    assert "network" in prof.provenance["lacks"] and "caches" in prof.description


def test_osu_output_fits_a_link():
    prof = import_osu(DATA / "osu_latency.txt", DATA / "osu_bw.txt", name="ib")
    assert prof.node is None and prof.network.intra_node is None
    link = prof.network.inter_node
    assert link.eager_threshold_bytes == 32768
    assert link.latency_s == pytest.approx(1.5e-6, rel=0.05)
    assert link.bandwidth_bytes_per_s == pytest.approx(5.13e9, rel=0.02)
    assert link.streaming_bandwidth_bytes_per_s == pytest.approx(12011.07e6)
    assert any("overheads" in x for x in prof.provenance["lacks"])


def test_bad_inputs_name_the_file(tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("hello\n")
    with pytest.raises(InputError, match=r"x.txt: no STREAM result table"):
        import_stream(bad, name="x")
    with pytest.raises(InputError, match=r"x.txt: cannot read line 'hello'"):
        import_osu(bad, name="x")
    bad.write_text("a: 1\n")
    with pytest.raises(InputError, match=r"x.txt: not a kerncraft machine file"):
        import_kerncraft(bad, name="x")


@pytest.mark.requires("shared")
def test_cli_import_and_combine(shared_dir, tmp_path, capsys):
    kf = shared_dir / "data/kerncraft/examples/machine-files/Zen2_EPYC-7452.yml"
    node_yaml, net_yaml, out = tmp_path / "zen2.yaml", tmp_path / "ib.yaml", tmp_path / "zen2-ib.yaml"
    assert main(["import", "kerncraft", str(kf), "--name", "zen2", "-o", str(node_yaml)]) == 0
    assert "lacks: network" in capsys.readouterr().out
    assert main(["import", "osu", str(DATA / "osu_latency.txt"), str(DATA / "osu_bw.txt"),
                 "--name", "ib", "-o", str(net_yaml)]) == 0
    assert main(["import", "stream", str(DATA / "stream_4threads.txt"), "--name", "s",
                 "-o", str(tmp_path / "s.yaml")]) == 0
    capsys.readouterr()
    assert main(["combine", "--node", str(node_yaml), "--network", str(net_yaml), "--name", "zen2-ib",
                 "--n-nodes", "16", "-o", str(out)]) == 0
    assert "still lacks: network.intra_node" in capsys.readouterr().out
    prof = load_profile(out)
    assert prof.n_nodes == 16 and prof.node.n_cores == 32
    assert prof.network.inter_node.eager_threshold_bytes == 32768
    assert prof.missing() == ["network.intra_node"]
    assert prof.provenance["combined_from"] == {"node": "zen2", "network": "ib"}
    # combining with a profile that lacks a network refuses, naming the section
    assert main(["combine", "--node", str(node_yaml), "--network", str(node_yaml), "--name", "z"]) == 2
    assert "has no 'network' section (needed by combine)" in capsys.readouterr().err


def test_shipped_imported_profile_loads():
    path = REPO / "machines" / "skylakesp-gold6148.yaml"
    prof = load_profile(path)
    assert prof.network is None and "AGPL-3.0" in prof.description
    assert [c.name for c in prof.node.caches] == ["L1", "L2", "L3"]

"""pmac show on machine profiles: readable text and a plot."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pmac.cli import main
from pmac.fit_network import fit_link
from pmac.profile import (BandwidthCurve, CacheLevel, CollectiveCost, ComputeModel, LatencyCurve,
                          MachineProfile, MemoryLevel, NetworkModel, NodeModel, load_profile, save_profile)
from pmac.report_profile import format_profile, plot_profile

REPO = Path(__file__).resolve().parents[1]


def full_profile() -> MachineProfile:
    ws = tuple(float(2**k) for k in range(12, 28))
    bw = tuple(100e9 if w <= 32768 else (50e9 if w <= 1 << 20 else 10e9) for w in ws)
    m = np.array([0] + [2**k for k in range(25)], dtype=float)
    t = np.where(m < 65536, 1e-6 + m / 4e9, 6e-6 + m / 10e9)
    node = NodeModel(
        cpu_model="Test CPU", n_cores=8,
        caches=(CacheLevel(name="L1", size_bytes=32768, latency_s=1.2e-9,
                           bandwidth_1core_bytes_per_s={"load_unit": 100e9}, source="measured+os"),
                CacheLevel(name="L2", size_bytes=1 << 20, ways=16, shared_by_cores=2,
                           bandwidth_1core_bytes_per_s={"load_unit": 50e9})),
        memory=MemoryLevel(latency_s=90e-9, bandwidth_1core_bytes_per_s={"load_unit": 10e9, "copy": 8e9},
                           bandwidth_allcores_bytes_per_s={"load_unit": 40e9}),
        compute=ComputeModel(isa="x86-64-v4", flop_per_s_scalar=4e9, flop_per_s_simd=32e9, simd_width_bits=512,
                             clock_hz=3e9, dependency_distance=(1.0, 4.0), dependency_flop_per_s=(1e9, 4e9)),
        bandwidth_curves=(BandwidthCurve(access="load_unit", n_cores=1, working_set_bytes=ws,
                                         bandwidth_bytes_per_s=bw),),
        latency_curve=LatencyCurve(working_set_bytes=ws[:3], latency_s=(1.2e-9, 1.3e-9, 4e-9)))
    link = fit_link(m, t, send_overhead_s=0.2e-6, recv_overhead_s=0.3e-6, streaming_bandwidth_bytes_per_s=11e9)
    net = NetworkModel(intra_node=link, mpi_library="MPICH Version: 5.0.2",
                       collectives=(CollectiveCost(op="allreduce", msg_bytes=8, n_ranks=2, time_s=2e-6),
                                    CollectiveCost(op="allreduce", msg_bytes=1024, n_ranks=2, time_s=3e-6)))
    return MachineProfile(name="testbox", node=node, network=net)


def test_format_profile_reads_well():
    text = format_profile(full_profile())
    for expected in ("machine testbox", "node: Test CPU, 8 cores",
                     "L1: 32 KiB, line 64 B, 8-way, shared by 1 core(s), latency 1.2 ns [measured+os]",
                     "1 core: load_unit 100 GB/s", "L2: 1 MiB, line 64 B, 16-way, shared by 2 core(s)",
                     "memory, latency 90 ns", "all cores: load_unit 40 GB/s",
                     "compute (x86-64-v4, 512-bit SIMD, clock 3 GHz): scalar 4 Gflop/s, SIMD 32 Gflop/s",
                     "network (MPICH Version: 5.0.2):", "eager threshold 64 KiB",
                     "send overhead 200 ns, recv overhead 300 ns, streaming 11 GB/s",
                     "bytes / 10 GB/s", "allreduce    2 ranks intra_node: 8 B 2 us, 1 KiB 3 us",
                     "missing: network.inter_node"):
        assert expected in text, f"{expected!r} not in\n{text}"


def test_format_profile_shows_each_thread_level():
    p = full_profile()
    single = dataclasses.replace(p.network, thread_level="single")
    multiple = dataclasses.replace(p.network, thread_level="multiple", collectives=(
        CollectiveCost(op="allreduce", msg_bytes=8, n_ranks=2, time_s=7e-6),))
    text = format_profile(dataclasses.replace(p, network=single, network_variants=(multiple,)))
    main_part, variant = text.split("network variant at MPI_THREAD_MULTIPLE (MPICH Version: 5.0.2):")
    assert "network at MPI_THREAD_SINGLE (MPICH Version: 5.0.2):" in main_part
    assert "allreduce    2 ranks intra_node: 8 B 2 us, 1 KiB 3 us" in main_part
    assert "allreduce    2 ranks intra_node: 8 B 7 us" in variant and "eager threshold 64 KiB" in variant


def test_plot_profile_writes_png(tmp_path):
    out = tmp_path / "p.png"
    plot_profile(full_profile(), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20000
    bare = dataclasses.replace(full_profile(), node=None, network=None)
    plot_profile(bare, tmp_path / "bare.png")
    assert (tmp_path / "bare.png").exists()


def test_pmac_show_cli(tmp_path, capsys):
    path = tmp_path / "testbox.yaml"
    save_profile(full_profile(), path)
    assert load_profile(path) == full_profile()
    png = tmp_path / "t.png"
    assert main(["show", str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "machine testbox" in out and f"wrote {png}" in out and png.exists()


@pytest.mark.parametrize("path", sorted((REPO / "machines").glob("*.yaml")), ids=lambda p: p.name)
def test_pmac_show_on_shipped_profiles(path, capsys):
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"machine {load_profile(path).name}")


def test_pmac_show_missing_file(capsys):
    assert main(["show", "no/such.yaml"]) == 2
    assert "no/such.yaml: no such file" in capsys.readouterr().err


def test_format_profile_shows_the_fetch_probe():
    import dataclasses

    from pmac.profile import FetchModel

    p = full_profile()
    f = FetchModel(l1i_size_bytes=32768, miss_s=4.2e-10, miss_sequential_s=4e-10)
    text = format_profile(dataclasses.replace(p, node=dataclasses.replace(p.node, fetch=f)))
    assert "instruction fetch: L1i 32 KiB, a miss 420 ps (code in random order, in order 400 ps)" in text
    assert "instruction fetch" not in format_profile(p)


def test_format_profile_shows_the_aliasing_probe():
    import dataclasses

    from pmac.profile import AliasModel

    p = full_profile()
    a = AliasModel(levels=("L1", "memory"), working_set_bytes=(16384, 1 << 26), stall_s=(5e-12, 1.5e-10),
                   n_cores_all=2, working_set_allcores_bytes=(16384, 1 << 25), stall_allcores_s=(2e-11, 2.5e-10))
    text = format_profile(dataclasses.replace(p, node=dataclasses.replace(p.node, alias=a)))
    assert "4 KiB aliasing, a load's stall in a loop streaming from: L1 5 ps, memory 150 ps (1 core)\n" in text
    assert "    2 cores busy: L1 20 ps, memory 250 ps\n" in text
    assert "aliasing" not in format_profile(p)
    one = dataclasses.replace(a, n_cores_all=1, working_set_allcores_bytes=(), stall_allcores_s=())
    assert "cores busy" not in format_profile(dataclasses.replace(p, node=dataclasses.replace(p.node, alias=one)))


def test_format_profile_says_which_pages_the_memory_was_probed_on():
    p = dataclasses.replace(full_profile(), provenance={
        "pages": {"mode": "default", "in_effect": "4 KiB pages: huge pages not asked for (transparent huge pages: "
                                                  "madvise)"}, "transparent_hugepage": "madvise"})
    assert ("memory probed on 4 KiB pages: huge pages not asked for (transparent huge pages: madvise) "
            "(pmac probe --pages default)") in format_profile(p).splitlines()
    old = dataclasses.replace(full_profile(), provenance={"transparent_hugepage": "always"})
    assert ("memory probed before pmac recorded its pages (numpy asks for huge pages unless "
            "NUMPY_MADVISE_HUGEPAGE=0; transparent huge pages: always)") in format_profile(old).splitlines()
    assert "memory probed" not in format_profile(full_profile())

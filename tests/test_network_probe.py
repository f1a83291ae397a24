"""A quick real two-rank network probe: positive latency, bandwidth growing with message size."""

import numpy as np
import pytest

from pmac.errors import ToolMissingError
from pmac.probe_network import measure_network, read_record


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("net")
    seen = []
    model, tables = measure_network(quick=True, workdir=work, progress=lambda f, m: seen.append(f))
    return model, tables, work, seen


@pytest.mark.requires("mpi")
def test_quick_probe_gives_a_sane_link(quick_run):
    model, tables, work, seen = quick_run
    link = model.intra_node
    assert link is not None and model.inter_node is None  # one machine: no other node
    assert "MPICH" in model.mpi_library or "Open MPI" in model.mpi_library
    pp = tables["pingpong"]
    med = pp[pp.test == "pingpong"].groupby("msg_bytes").time_s.median()
    assert med.index.min() == 0 and med.index.max() == 16 << 20
    assert med.loc[8] > 0 and link.one_way_s[0] > 0
    bw = med.index.to_numpy()[1:] / med.to_numpy()[1:]
    # bandwidth grows with size: compare decades, not neighbours (the machine is shared)
    assert bw[med.index[1:] == 1 << 20][0] > 2 * bw[med.index[1:] == 1024][0] > 100 * bw[0]
    assert link.bandwidth_bytes_per_s > 1e8 and link.fit_r2 > 0.5
    assert 0 < link.send_overhead_s < 1e-4 and 0 < link.recv_overhead_s < 1e-4
    assert link.streaming_bandwidth_bytes_per_s > 1e8
    # every repetition kept; collectives for 1 and 2 ranks
    assert (pp[pp.test == "pingpong"].groupby("msg_bytes").size() >= 5).all()
    ops = {(c.op, c.n_ranks) for c in model.collectives}
    assert {("barrier", 2), ("bcast", 2), ("allreduce", 2), ("alltoall", 2)} <= ops
    assert all(c.time_s > 0 for c in model.collectives)
    # the record on disk reads back; progress was reported up to the end
    t2, meta = read_record(work / "network.npz")
    assert len(t2["pingpong"]) == len(pp) and meta["n_ranks"] == 2
    assert seen and seen[-1] == 1.0


@pytest.mark.requires("mpi")
def test_node_map_places_the_partner_on_another_node(tmp_path):
    model, tables = measure_network(quick=True, workdir=tmp_path, node_map=[0, 1], timeout_s=120)
    assert model.intra_node is None and model.inter_node is not None
    assert set(tables["pingpong"].placement) == {"inter_node"}
    assert {c.placement for c in model.collectives if c.n_ranks == 2} == {"inter_node"}


def test_no_mpi_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PMAC_MPIEXEC", str(tmp_path / "no-such-mpiexec"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match="no MPI found"):
        measure_network(quick=True, workdir=tmp_path, in_job=False)

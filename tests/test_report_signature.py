"""pmac show for signatures: tables, communication matrix/graph, text and heat map, checked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pmac.cli import main
from pmac.report_signature import (communication_graph, communication_matrix, format_signature, op_table,
                                   plot_signature, rank_table)
from pmac.signature import SignatureHeader, make_signature, save_signature
from pmac.simgrid import read_simgrid
from pmac.trace import NONE, Op


def _ev(rank, seq, op, t0, t1, burst, dest=NONE, source=NONE, sb=0, rb=0, request=NONE, off=NONE, k=0):
    return dict(rank=rank, seq=seq, op=int(op), t_start_s=t0, t_end_s=t1, burst_s=burst, comm=0, dest=dest,
                source=source, send_tag=0 if dest >= 0 else NONE, recv_tag=0 if source >= 0 else NONE,
                send_bytes=sb, recv_bytes=rb, root=NONE, request=request, req_offset=off, n_requests=k,
                new_comm=NONE)


@pytest.fixture(scope="module")
def ring3():
    """Three ranks; rank r sends (r+1)*1000 bytes to r+1 (mod 3) twice with Isend, receives with
    Recv, then waits. Times chosen so per-rank compute and MPI totals are known."""
    rows, reqs = [], []
    for r in range(3):
        left = (r - 1) % 3
        t = 0.0
        seq = 0
        rows.append(_ev(r, seq, Op.INIT, 0.0, 0.5, 0.0)); seq += 1
        t = 0.5
        for it in range(2):
            # compute 1 s (r+1 times), isend 0.1 s, recv 0.2 s, wait 0.05 s
            b = 1.0 * (r + 1)
            rows.append(_ev(r, seq, Op.ISEND, t + b, t + b + 0.1, b, dest=(r + 1) % 3, sb=(r + 1) * 1000,
                            request=it + 1)); seq += 1
            t = t + b + 0.1
            rows.append(_ev(r, seq, Op.RECV, t, t + 0.2, 0.0, source=left, rb=(left + 1) * 1000)); seq += 1
            t += 0.2
            rows.append(_ev(r, seq, Op.WAIT, t, t + 0.05, 0.0, off=len(reqs), k=1)); seq += 1
            reqs.append(dict(rank=r, request=it + 1, completed=1, source=NONE, recv_bytes=0))
            t += 0.05
        rows.append(_ev(r, seq, Op.FINALIZE, t, t + 0.25, 0.0))
    header = SignatureHeader(name="ring3", n_ranks=3, source_format="synthetic", command="mpiexec -n 3 ./ring",
                             parameters={"n": 1000}, rank_hosts=("a", "a", "b"))
    return make_signature(header, pd.DataFrame(rows), requests=pd.DataFrame(reqs))


def test_op_table_counts_bytes_and_time(ring3):
    t = op_table(ring3).set_index("op")
    assert t.loc["ISEND", "n_calls"] == 6
    assert t.loc["ISEND", "send_bytes"] == 2 * (1000 + 2000 + 3000)
    assert t.loc["RECV", "recv_bytes"] == 2 * (3000 + 1000 + 2000)
    assert t.loc["ISEND", "time_s"] == pytest.approx(6 * 0.1)
    assert t.loc["WAIT", "time_s"] == pytest.approx(6 * 0.05)
    assert t.loc["INIT", "time_s"] == pytest.approx(3 * 0.5)
    assert list(t.index) == ["INIT", "FINALIZE", "RECV", "ISEND", "WAIT"]  # by op code


def test_rank_table_compute_versus_mpi(ring3):
    t = rank_table(ring3)
    assert t["n_calls"].tolist() == [8, 8, 8]
    assert t["compute_s"].tolist() == pytest.approx([2.0, 4.0, 6.0])
    mpi = 0.5 + 2 * (0.1 + 0.2 + 0.05) + 0.25
    assert t["mpi_s"].tolist() == pytest.approx([mpi] * 3)
    assert t["mpi_frac"].tolist() == pytest.approx([mpi / (mpi + c) for c in (2.0, 4.0, 6.0)])
    assert np.isnan(t["flop"]).all()


def test_communication_matrix_and_graph(ring3):
    m, msgs = communication_matrix(ring3)
    assert m.tolist() == [[0, 2000, 0], [0, 0, 4000], [6000, 0, 0]]
    assert msgs.tolist() == [[0, 2, 0], [0, 0, 2], [2, 0, 0]]
    g = communication_graph(ring3)
    assert sorted(g.edges()) == [(0, 1), (1, 2), (2, 0)]
    assert g[2][0]["bytes"] == 6000 and g[2][0]["messages"] == 2


def test_graph_includes_vector_collectives(shared_dir):
    sig = read_simgrid(shared_dir / "data/simgrid/examples/smpi/replay/actions_alltoallv.txt")
    g = communication_graph(sig)
    # rank 0 sends 40 to 1 and 30 to 2; rank 1 sends 80 to 0 ...
    assert g[0][1]["coll_bytes"] == 40 and g[0][2]["coll_bytes"] == 30 and g[1][0]["coll_bytes"] == 80
    assert g[0][1]["bytes"] == 0
    m, _ = communication_matrix(sig)
    assert m.sum() == 0


def test_format_signature_text(ring3):
    text = format_signature(ring3)
    assert text.splitlines()[0] == "signature ring3: 3 ranks, 24 MPI calls, source synthetic, bursts measured"
    assert "command: mpiexec -n 3 ./ring" in text
    assert "hosts: a (2 ranks), b (1 rank)" in text
    assert "3 directed pairs, 6 messages, 11.7 KiB" in text  # 12000 B
    assert "heaviest: 2->0 5.86 KiB (2 msgs)" in text
    isend = next(ln for ln in text.splitlines() if ln.strip().startswith("ISEND"))
    assert isend.split()[1] == "6" and "11.7 KiB" in isend


def test_format_signature_names_the_tracers_own_time(ring3):
    """pmac trace keeps the tracer's own time per rank (pmac.rawtrace.tracer_own_s); show gives the
    largest; a signature without it (older traces, imports) shows no such line."""
    import dataclasses

    assert "tracer's own time" not in format_signature(ring3)
    h = dataclasses.replace(ring3.header, provenance=dict(ring3.header.provenance, tracer_own_s=[0.0012, 0.0045, 0.0]))
    text = format_signature(dataclasses.replace(ring3, header=h))
    assert ("  tracer's own time between calls, left out of the bursts: up to 4.5 ms a rank (its memory samples "
            "and buffer flushes)") in text.splitlines()


def test_show_cli_and_plot(ring3, tmp_path, capsys):
    folder = save_signature(ring3, tmp_path / "ring3")
    png = tmp_path / "m.png"
    assert main(["show", str(folder), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("signature ring3: 3 ranks")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.shape[0] > 100 and img.shape[1] > 100


def test_plot_without_point_to_point(shared_dir, tmp_path):
    sig = read_simgrid(shared_dir / "data/simgrid/examples/smpi/replay/actions_allreduce.txt")
    plot_signature(sig, tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 1000
    text = format_signature(sig)
    assert "flop" in text and "1e+09" in text  # 5e8 + 5e8 flops per rank


def test_memory_columns(ring3):
    import dataclasses

    from pmac.memsig import BURSTS

    rows = {c: np.zeros(3, dtype=d) for c, d in BURSTS.columns}
    rows["rank"] = np.array([0, 0, 2], np.int32)
    rows["seq"] = np.array([1, 4, 1], np.int64)
    rows["flop"] = np.array([1e6, 2e6, 5e5])
    rows["load_bytes"] = np.array([4096, 1024, 0], np.int64)
    rows["store_bytes"] = np.array([1024, 0, 2048], np.int64)
    sig = dataclasses.replace(ring3, memory={"bursts": BURSTS.coerce(rows)})
    t = rank_table(sig)
    assert t["flop"].tolist() == [3e6, 0.0, 5e5]
    assert t["mem_bytes"].tolist() == [6144.0, 0.0, 2048.0]
    text = format_signature(sig)
    row0 = next(ln for ln in text.splitlines() if ln.split()[:2] == ["0", "8"])
    assert row0.split()[-3:] == ["3e+06", "6", "KiB"]


def test_show_prints_the_share_of_loads_that_alias(ring3):
    """A memory signature that counts 4 KiB aliasing (schema 9) gets a line: the share of all
    loads, and the functions with most aliased loads and their own share; one that does not count
    it (-1) gets none."""
    import dataclasses

    from pmac.memsig import BURSTS, FUNCTIONS

    def mem(alias):
        b = BURSTS.coerce(pd.DataFrame([{c: 0 for c in BURSTS.names} | dict(rank=0, seq=1, loads=800, alias_loads=alias,
                                                                               sample_frac=1.0)]))
        f = FUNCTIONS.coerce(pd.DataFrame([{c: 0 for c in FUNCTIONS.names} | dict(rank=r, function=fn, object="a.out",
                                                                                   loads=ld, alias_loads=al)
                                           for r, fn, ld, al in ((0, "sweep", 400, 200), (1, "sweep", 100, 0),
                                                                 (0, "halo", 300, 0 if alias < 0 else 30))]))
        return {"bursts": b, "functions": f}

    text = format_signature(dataclasses.replace(ring3, memory=mem(230)))
    line = [ln for ln in text.splitlines() if "4 KiB aliasing" in ln]
    assert line == ["  4 KiB aliasing: 28.7% of the loads share their low 12 address bits with a recent store on "
                    "another page (pmac_vg, sampled); most in sweep (40% of its loads), halo (10% of its loads)"]
    assert "4 KiB aliasing" not in format_signature(dataclasses.replace(ring3, memory=mem(-1)))

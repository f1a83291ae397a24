"""predict(): burst sources, placement, tables; the CLI's text, JSON, CSV, timeline and missing sections."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pmac.predict as pp
from pmac.cli import main
from pmac.convolve import burst_arrays, convolve, machine_coeffs
from pmac.errors import MissingSectionError, PmacError
from pmac.profile import save_profile
from pmac.signature import save_signature
from pmac.trace import Op
from synth import memory_tables, pingpong_signature, two_level_profile


def memory_for_pingpong(n_iter=3, ranks=(0, 1)):
    bursts, hists = [], []
    for r in ranks:
        for s in range(1, 2 * n_iter + 2):
            bursts.append(dict(rank=r, seq=s, load_bytes=80_000 * (r + 1), store_bytes=8000, fp_scalar=10_000 * s,
                               flop=10_000.0 * s, branches=100))
            hists.append(dict(rank=r, seq=s, access=0, counts={10: 500, 5000: 300, -1: 200}))
            hists.append(dict(rank=r, seq=s, access=1, counts={-1: 100}))
    return memory_tables(bursts, hists)


def test_measured_bursts():
    sig = pingpong_signature(n_iter=3, msg_bytes=1000, burst_s=1e-3)
    pred = pp.predict(sig, [two_level_profile()], burst_source="measured")
    row = pred.summary.iloc[0]
    # 7 bursts of 1 ms after INIT, 6 calls of 1 us + 1000 B / 1 GB/s each
    assert row.total_s == pytest.approx(7e-3 + 6 * (1e-6 + 1e-6), rel=1e-12)
    assert row.compute_s == pytest.approx(7e-3)
    pr = pred.per_rank
    assert np.allclose(pr["compute_s"] + pr["comm_s"] + pr["wait_s"], pr["finish_s"], rtol=1e-12)
    cp = pred.critical_path
    assert cp["critical_s"].sum() == pytest.approx(row.total_s, rel=1e-12)
    assert row.burst_source == "measured" and not row.independent
    assert any("honest only" in n for n in pred.notes)
    assert list(pred.per_rank["rank"]) == [0, 1] and list(pred.per_rank["node"]) == [0, 0]


def test_memory_bursts_are_convolved():
    mem = memory_for_pingpong()
    sig = pingpong_signature(memory=mem)
    prof = two_level_profile(beta=0.25)
    pred = pp.predict(sig, [prof])
    assert pred.summary.iloc[0].burst_source == "memory" and pred.summary.iloc[0].independent
    t = convolve(burst_arrays(mem), [machine_coeffs(prof, active_cores=2)]).time_s[0]
    assert pred.per_rank["compute_s"].sum() == pytest.approx(t.sum(), rel=1e-12)
    # both ranks on one node of 2 cores; with 1 rank per node the second rank is on node 1
    pred1 = pp.predict(sig, [prof], ranks_per_node=1)
    assert list(pred1.per_rank["node"]) == [0, 1] and pred1.summary.iloc[0].n_nodes == 2
    assert any("2 nodes needed" in n for n in pred1.notes)


def test_untraced_rank_borrows_traced_bursts():
    sig = pingpong_signature(memory=memory_for_pingpong(ranks=(0,)))
    pred = pp.predict(sig, [two_level_profile()])
    pr = pred.per_rank
    assert pr.loc[pr["rank"] == 1, "compute_s"].iloc[0] == pytest.approx(pr.loc[pr["rank"] == 0, "compute_s"].iloc[0])
    assert any("without a memory trace" in n for n in pred.notes)


def test_more_bandwidth_never_slower():
    sig = pingpong_signature(memory=memory_for_pingpong())
    profs = [two_level_profile(name="slow", beta=0.5), two_level_profile(name="fast", beta=0.5, mem_bw=40e9, l2_bw=90e9)]
    s = pp.predict(sig, profs).summary.set_index("machine")
    assert s.loc["fast", "total_s"] < s.loc["slow", "total_s"]


def test_missing_sections_and_bad_source():
    sig = pingpong_signature()
    no_net = dataclasses.replace(two_level_profile(), network=None)
    assert pp.needed_sections(no_net, sig) == ["network.intra_node"]
    with pytest.raises(MissingSectionError, match="network.intra_node"):
        pp.predict(sig, [no_net])
    with pytest.raises(MissingSectionError, match="memory.bursts"):
        pp.predict(sig, [two_level_profile()], burst_source="memory")


@pytest.fixture
def files(tmp_path):
    save_signature(pingpong_signature(memory=memory_for_pingpong(), name="pp"), tmp_path / "sigs" / "pp")
    save_profile(two_level_profile(name="a", beta=0.2), tmp_path / "a.yaml")
    save_profile(two_level_profile(name="b", mem_bw=20e9), tmp_path / "b.yaml")
    save_profile(dataclasses.replace(two_level_profile(name="nonet"), network=None), tmp_path / "nonet.yaml")
    return tmp_path


def test_cli_text_and_missing_listing(files, capsys):
    assert main(["predict", str(files / "sigs" / "pp"), str(files / "a.yaml"), str(files / "b.yaml"),
                 str(files / "nonet.yaml"), "--per-rank", "--critical-path"]) == 0
    out = capsys.readouterr().out
    assert "signature pp" in out and "per rank on a" in out and "critical path on b" in out and "critical" in out
    assert "nonet for pp: lacks network.intra_node" in out


def test_cli_json_csv_timeline(files, capsys):
    args = [str(files / "sigs" / "pp"), str(files / "a.yaml"), str(files / "b.yaml")]
    assert main(["predict", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    s = doc["predictions"][0]["summary"]
    assert [r["machine"] for r in s] == ["a", "b"] and s[0]["total_s"] > 0
    assert len(doc["predictions"][0]["per_rank"]) == 4
    assert main(["predict", *args, "--csv"]) == 0
    import io

    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert tuple(df.columns) == pp.SUMMARY_COLUMNS and len(df) == 2
    assert df["total_s"].iloc[0] == pytest.approx(s[0]["total_s"], rel=1e-8)
    assert main(["predict", *args, "--csv", "--per-rank"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert tuple(df.columns) == ("signature",) + pp.PER_RANK_COLUMNS
    png = files / "t.png"
    assert main(["predict", *args, "--timeline", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_calls_compares_traced_and_replayed_calls(files, capsys):
    """pmac predict --calls (pmac.validate.call_costs over every call but Init/Finalize), by hand on
    the ping-pong (3 round trips of 1000 B, 1 ms bursts, each traced call 1 us) on profile a (1 us
    latency, 1 GB/s, no overheads) with the traced bursts: a SEND is eager and returns at once; rank
    1's first RECV waits 2 us (its message posted with it), every later RECV 4 us (posted 2 us
    after the partner's send, the other rank's burst having started 2 us later). The traced span
    is from Init's end to Finalize's start, 7.006 ms; a signature without call times is refused."""
    args = [str(files / "sigs" / "pp"), str(files / "a.yaml"), "--bursts", "measured", "--calls"]
    assert main(["predict", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (entry,) = doc["calls"]
    assert (entry["signature"], entry["machine"]) == ("pp", "a")
    rows = {r["op"]: r for r in entry["rows"]}
    assert set(rows) == {"SEND", "RECV"} and rows["SEND"]["calls"] == rows["RECV"]["calls"] == 6
    assert rows["SEND"]["traced_us"] == pytest.approx(1.0) and rows["SEND"]["replayed_us"] == pytest.approx(0.0, abs=1e-9)
    assert rows["RECV"]["replayed_us"] == pytest.approx(22 / 6) and rows["RECV"]["replayed_median_us"] == pytest.approx(4.0)
    span = 8.007e-3 - 1.001e-3
    assert rows["SEND"]["diff_pct"] == pytest.approx(100 * (-6e-6) / 2 / span)
    assert rows["RECV"]["diff_pct"] == pytest.approx(100 * (22e-6 - 6e-6) / 2 / span)
    assert main(["predict", *args]) == 0
    out = capsys.readouterr().out
    assert "calls on a against the traced run" in out and "RECV" in out and "+0.1%" in out
    assert main(["predict", *args, "--csv"]) == 0
    import io

    df = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("op")
    assert list(df.columns[:2]) == ["signature", "machine"] and set(df["machine"]) == {"a"}
    assert df.loc["RECV", "diff_pct"] == pytest.approx(rows["RECV"]["diff_pct"], rel=1e-8)
    bare = pingpong_signature(name="bare")
    bare = dataclasses.replace(bare, events=bare.events.assign(t_end_s=bare.events["t_start_s"]))
    save_signature(bare, files / "sigs" / "bare")
    assert main(["predict", str(files / "sigs" / "bare"), str(files / "a.yaml"), "--calls"]) == 2
    assert "signature bare: its events carry no traced call times" in capsys.readouterr().err


def _split_pingpong():
    """memory_for_pingpong with rank 0's burst 3 split into f (its bytes, no flop) and g (flop only)."""
    from pmac.memsig import BURST_FUNCTIONS

    mem = memory_for_pingpong()
    b = mem["bursts"]
    i = b.index[(b["rank"] == 0) & (b["seq"] == 3)][0]
    f = dict(load_bytes=80_000, store_bytes=8000, loads=10_000, stores=1000, branches=100)
    g = dict(fp_scalar=30_000, flop=30_000.0)
    for c in ("load_bytes", "store_bytes", "loads", "stores", "branches", "fp_scalar", "flop"):
        b.loc[i, c] = f.get(c, 0) + g.get(c, 0)
    rows = [{c: (0 if c not in ("rank", "seq", "function") else None) for c in BURST_FUNCTIONS.names} | d
            | dict(rank=0, seq=3, function=name) for name, d in (("f", f), ("g", g))]
    mem["burst_functions"] = BURST_FUNCTIONS.coerce(pd.DataFrame(rows))
    return mem


def test_function_times_by_hand():
    """pmac.predict_functions on a split burst, against the plain convolver: g (flop only) has no
    memory time and costs its compute; f takes the burst's whole memory time m and its own compute
    c (max(m, c) + beta min(m, c)); every other burst is one '(unsplit bursts)' row; the rows sum to
    the replay's compute and the traced burst times (1 ms each) to the trace's."""
    from pmac.predict_functions import UNSPLIT, function_times

    mem = _split_pingpong()
    sig = pingpong_signature(memory=mem)
    prof = two_level_profile(beta=0.25)
    mc = machine_coeffs(prof, active_cores=2)
    ft = function_times(sig, [prof]).set_index("function")
    assert list(ft.index[:1]) == [UNSPLIT] and set(ft.index) == {UNSPLIT, "f", "g"}
    ba = burst_arrays(mem)
    whole = convolve(ba, [mc])
    k = int(np.flatnonzero((ba.rank == 0) & (ba.seq == 3))[0])

    def alone(counters):
        one = memory_tables([dict(rank=0, seq=3, **counters)], [dict(rank=0, seq=3, access=0, counts={10: 1})])
        return convolve(burst_arrays(one), [mc]).compute_s[0, 0]

    m, c_f, c_g = whole.memory_s[0, k], alone(dict(load_bytes=80_000, store_bytes=8000, loads=10_000, stores=1000,
                                                   branches=100)), alone(dict(fp_scalar=30_000, flop=30_000.0))
    assert ft.loc["g", "memory_s"] == 0 and ft.loc["g", "time_s"] == pytest.approx(c_g, rel=1e-12)
    assert ft.loc["f", "memory_s"] == pytest.approx(m, rel=1e-12)
    assert ft.loc["f", "time_s"] == pytest.approx(max(m, c_f) + 0.25 * min(m, c_f), rel=1e-12)
    assert ft.loc["g", "bound"] == "compute" and ft.loc["f", "flop"] == 0 and ft.loc["g", "bytes"] == 0
    others = np.delete(np.arange(ba.n_bursts), k)
    assert ft.loc[UNSPLIT, "time_s"] == pytest.approx(whole.time_s[0, others].sum(), rel=1e-12)
    assert ft.loc[UNSPLIT, "bursts"] == len(others) and ft.loc[UNSPLIT, "traced_s"] == pytest.approx(13e-3)
    assert ft.loc["f", "traced_s"] + ft.loc["g", "traced_s"] == pytest.approx(1e-3, rel=1e-12)
    assert ft.loc["f", "traced_s"] / ft.loc["g", "traced_s"] == pytest.approx(
        ft.loc["f", "time_s"] / ft.loc["g", "time_s"], rel=1e-9)
    assert ft["share"].sum() == pytest.approx(1.0)
    pred = pp.predict(sig, [prof])
    assert ft["time_s"].sum() == pytest.approx(pred.per_rank["compute_s"].sum(), rel=1e-12)
    # a signature without function rows: one row; without a memory signature: refused
    whole_only = function_times(pingpong_signature(memory=memory_for_pingpong()), [prof])
    assert list(whole_only["function"]) == [UNSPLIT]
    with pytest.raises(PmacError, match="pp: no memory signature: per-function times need one"):
        function_times(pingpong_signature(), [prof])


def test_function_times_names_lone_bursts():
    """A signature with burst_names (version 8): a burst without function rows counts for the
    function that ran most of it; the split burst keeps its rows; bursts it does not name (here
    rank 1's) stay '(unsplit bursts)'. The times are the same bursts' convolved times."""
    from pmac.memsig import BURST_NAMES
    from pmac.predict_functions import UNSPLIT, function_times

    mem = _split_pingpong()
    b = mem["bursts"]
    r0 = b[b["rank"] == 0]
    mem["burst_names"] = BURST_NAMES.coerce(pd.DataFrame({
        "rank": r0["rank"], "seq": r0["seq"], "function": np.where(r0["seq"] == 3, "f", "kernel"), "share": 1.0}))
    sig = pingpong_signature(memory=mem)
    prof = two_level_profile(beta=0.25)
    ft = function_times(sig, [prof]).set_index("function")
    assert set(ft.index) == {UNSPLIT, "kernel", "f", "g"}
    ba = burst_arrays(mem)
    whole = convolve(ba, [machine_coeffs(prof, active_cores=2)])
    kern = (ba.rank == 0) & (ba.seq != 3)
    assert ft.loc["kernel", "bursts"] == kern.sum() and ft.loc[UNSPLIT, "bursts"] == (ba.rank == 1).sum()
    assert ft.loc["kernel", "time_s"] == pytest.approx(whole.time_s[0, kern].sum(), rel=1e-12)
    assert ft.loc[UNSPLIT, "time_s"] == pytest.approx(whole.time_s[0, ba.rank == 1].sum(), rel=1e-12)
    before = function_times(pingpong_signature(memory=_split_pingpong()), [prof]).set_index("function")
    for f in ("f", "g"):   # the split burst is priced by its rows, whatever burst_names says
        assert ft.loc[f, "time_s"] == pytest.approx(before.loc[f, "time_s"], rel=1e-12)


def test_cli_functions(files, capsys):
    """pmac predict --functions in text, CSV and JSON; refused where the bursts are the traced ones."""
    import io

    save_signature(pingpong_signature(memory=_split_pingpong(), name="split"), files / "sigs" / "split")
    args = [str(files / "sigs" / "split"), str(files / "a.yaml"), str(files / "b.yaml"), "--functions"]
    assert main(["predict", *args, "--csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(df.columns[:3]) == ["signature", "machine", "function"] and len(df) == 6
    assert set(df["machine"]) == {"a", "b"} and set(df["function"]) == {"f", "g", "(unsplit bursts)"}
    assert main(["predict", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (entry,) = doc["functions"]
    pred = {r["machine"]: r["compute_s"] for r in doc["predictions"][0]["summary"]}
    for m in ("a", "b"):
        assert sum(r["time_s"] for r in entry["rows"] if r["machine"] == m) == pytest.approx(2 * pred[m], rel=1e-9)
    assert main(["predict", *args]) == 0
    out = capsys.readouterr().out
    assert "functions on a (compute summed over the ranks" in out and "\n    g " in out
    assert main(["predict", *args, "--bursts", "measured"]) == 2
    err = capsys.readouterr().err
    assert "signature split: --functions prices the memory signature's bursts" in err and len(err.splitlines()) == 1


def test_interpreter_note_names_a_python_caller():
    """pmac.predict.interpreter_note: a program whose memory signature runs libpython, or whose
    traced command runs python, gets a note with its busiest rank's calls (Init/Finalize left out);
    a C program's command, and words that only look like python, get none."""
    from pathlib import Path

    from pmac.signature import load_signature

    pp_sig = pingpong_signature()
    for cmd, want in (("mpiexec -n 2 /usr/bin/python3.11 app.py", "(python3.11; 6 calls on its busiest rank)"),
                      ("mpiexec -n 2 python app.py", "(python; 6 calls"),
                      ("mpiexec -n 2 ./a.out --python-config", None), ("mpiexec -n 2 pythonista", None)):
        sig = dataclasses.replace(pp_sig, header=dataclasses.replace(pp_sig.header, command=cmd))
        note = pp.interpreter_note(sig, [two_level_profile()])
        assert (note is None) if want is None else (want in note and "not priced here" in note), (cmd, note)
        assert (want is None) == all("Python interpreter" not in n for n in pp.predict(sig, [two_level_profile()]).notes)
    root = Path(__file__).resolve().parents[1] / "signatures"
    cg = load_signature(root / "cg_mpi4py-n2-3000")
    ev = cg.events
    n = int(ev[~ev["op"].isin((int(Op.INIT), int(Op.FINALIZE)))].groupby("rank").size().max())
    assert f"(libpython3.11.so.1.0; {n} calls on its busiest rank)" in pp.interpreter_note(cg)
    assert pp.interpreter_note(load_signature(root / "stencil2d-n2-128")) is None


def test_interpreter_cost_added_to_a_python_programs_calls(files, capsys):
    """pmac.interpreter: a Python program's calls to a peer pay the profile's interpreter figure
    (point-to-point here), at the call's start. In the measured ping-pong (bursts of 1 ms, 3
    iterations) the receives are posted long before their message, so only the sends' cost is on the
    path: the makespan grows by 2 x 3 x the figure, each rank's communication by 6 x (its 6 calls);
    a C program, ``interpreter=False`` and a profile without the figure move nothing; the notes say
    which."""
    x = 0.7e-6
    base = pingpong_signature()
    py = dataclasses.replace(base, header=dataclasses.replace(base.header, command="mpiexec -n 2 python app.py"))
    plain = two_level_profile()
    priced = dataclasses.replace(plain, network=dataclasses.replace(plain.network, interpreter_collective_s=5e-6,
                                                                     interpreter_p2p_s=x))

    def run(sig, prof, **kw):
        pr = pp.predict(sig, [prof], burst_source="measured", **kw)
        return pr.summary.iloc[0], pr.per_rank, pr.notes

    s0, r0, _ = run(py, plain)
    s1, r1, notes = run(py, priced)
    assert s1.total_s - s0.total_s == pytest.approx(6 * x, rel=1e-6)
    assert (r1.comm_s - r0.comm_s).to_numpy() == pytest.approx([6 * x, 6 * x], rel=1e-9)
    assert (r1.compute_s.to_numpy() == r0.compute_s.to_numpy()).all()
    assert "synth: calls made from the interpreter: +4.2 us of communication a rank (pmac.interpreter)" in notes
    assert any("each call to a peer pays what the machine's interpreter test measured" in n for n in notes)
    assert run(base, priced)[0].total_s == s0.total_s                       # a C program
    s2, _, notes2 = run(py, priced, interpreter=False)
    assert s2.total_s == s0.total_s
    assert any("priced as a C program's (--no-interpreter)" in n and "not priced here" in n for n in notes2)
    assert not any("calls made from the interpreter" in n for n in notes2)
    assert any("synth without the network probe's interpreter test" in n for n in run(py, plain)[2])
    # the CLI's switch
    save_profile(priced, files / "priced.yaml")
    save_signature(py, files / "sigs" / "py")
    args = ["predict", str(files / "sigs" / "py"), str(files / "priced.yaml"), "--bursts", "measured", "--json"]
    totals = []
    for extra in ([], ["--no-interpreter"]):
        assert main(args + extra) == 0
        totals.append(json.loads(capsys.readouterr().out)["predictions"][0]["summary"][0]["total_s"])
    assert totals[0] - totals[1] == pytest.approx(6 * x, rel=1e-6)



def test_timeline_puts_the_interpreters_charge_inside_the_call():
    """The charges at a call's start (pmac.interpreter, pmac.pollution) are communication: in the
    timeline they lengthen the call, not the burst before it. With the interpreter's figure x on
    the measured ping-pong (bursts of 1 ms): every burst (``start_s - burst_start_s``) is the one
    without the figure, each send is x longer, and per rank the calls add up to its communication
    and wait, as without the figure."""
    x = 0.7e-6
    base = pingpong_signature()
    py = dataclasses.replace(base, header=dataclasses.replace(base.header, command="mpiexec -n 2 python app.py"))
    plain = two_level_profile()
    priced = dataclasses.replace(plain, network=dataclasses.replace(plain.network, interpreter_p2p_s=x))
    got = {}
    for name, prof in (("plain", plain), ("priced", priced)):
        pr = pp.predict(py, [prof], burst_source="measured", timeline=True)
        t = pr.timeline.sort_values(["rank", "seq"]).reset_index(drop=True)
        calls = (t.end_s - t.start_s).groupby(t["rank"]).sum().to_numpy()
        assert calls == pytest.approx((pr.per_rank.comm_s + pr.per_rank.wait_s).to_numpy(), rel=1e-12, abs=1e-15)
        got[name] = t
    a, b = got["plain"], got["priced"]
    assert (b.start_s - b.burst_start_s).to_numpy() == pytest.approx((a.start_s - a.burst_start_s).to_numpy(),
                                                                       rel=0, abs=1e-12)
    sends = (a.op == "SEND").to_numpy()
    assert sends.sum() == 6
    assert ((b.end_s - b.start_s) - (a.end_s - a.start_s)).to_numpy()[sends] == pytest.approx([x] * 6, rel=1e-6)

def test_cli_errors(files, capsys):
    assert main(["predict", str(files / "nothere.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["predict", str(files / "sigs" / "pp"), str(files / "nonet.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no machine has the sections" in err


def test_contention_uses_a_star_without_topology():
    sig = pingpong_signature(n_iter=2, msg_bytes=100_000)
    prof = two_level_profile()
    plain = pp.predict(sig, [prof], burst_source="measured", ranks_per_node=1)
    cont = pp.predict(sig, [prof], burst_source="measured", ranks_per_node=1, contention=True)
    # one flow at a time: contention changes nothing, and says which topology it used
    assert cont.summary.iloc[0].total_s == pytest.approx(plain.summary.iloc[0].total_s, rel=1e-12)
    assert any("star" in n for n in cont.notes)


def test_profile_default_ranks_per_node(tmp_path):
    # a machine that runs one rank per node by default (the emulated TCP clusters) places the two
    # ranks of the ping-pong on two nodes, so the inter-node link prices the messages
    sig = pingpong_signature(n_iter=3, msg_bytes=1000, burst_s=1e-3)
    prof = dataclasses.replace(two_level_profile(), n_nodes=2, ranks_per_node=1)
    pred = pp.predict(sig, [prof], burst_source="measured")
    assert list(pred.per_rank["node"]) == [0, 1] and pred.summary.iloc[0].ranks_per_node == 1
    told = pp.predict(sig, [prof], burst_source="measured", ranks_per_node=2)
    assert list(told.per_rank["node"]) == [0, 0]
    save_profile(prof, tmp_path / "m.yaml")
    from pmac.profile import load_profile
    assert load_profile(tmp_path / "m.yaml").ranks_per_node == 1
    text = (tmp_path / "m.yaml").read_text().replace("ranks_per_node: 1", "ranks_per_node: 0")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(PmacError, match=r"bad\.yaml.*ranks_per_node must be positive"):
        load_profile(tmp_path / "bad.yaml")


def test_persistent_requests_are_named_as_not_replayed():
    sig = pingpong_signature(n_iter=3, msg_bytes=1000, burst_s=1e-3)
    ev = sig.events.copy()
    ev.loc[(ev["rank"] == 0) & (ev["seq"] == 1), "op"] = int(pp.Op.START)   # rank 0's first send
    ev.loc[(ev["rank"] == 1) & (ev["seq"] == 1), "op"] = int(pp.Op.START)   # rank 1's first receive
    pred = pp.predict(dataclasses.replace(sig, events=ev), [two_level_profile()], burst_source="measured")
    assert any(n.startswith("2 MPI_Start/Startall call(s) of persistent requests are not replayed") for n in pred.notes)
    # with their Send_init/Recv_init in the trace they are replayed (tests/test_replay.py) and not named
    ev2 = pd.concat([ev, pd.DataFrame([dict(ev.iloc[0]) | dict(seq=-1, op=int(pp.Op.SEND_INIT))])], ignore_index=True)
    assert pp.unreplayed_starts(ev2) == 1
    # a Startall is replayed when every request it names has its *_init earlier on the rank
    rows = pd.DataFrame([dict(rank=0, seq=10, op=int(pp.Op.SEND_INIT), request=5),
                         dict(rank=0, seq=11, op=int(pp.Op.STARTALL), req_offset=0, n_requests=2),
                         dict(rank=0, seq=12, op=int(pp.Op.STARTALL), req_offset=1, n_requests=1)])
    reqs = pd.DataFrame(dict(rank=[0, 0], request=[5, 9]))
    assert pp.unreplayed_starts(rows, reqs) == 2      # both name handle 9, which has no init
    assert pp.unreplayed_starts(rows.iloc[[0, 2]], reqs.assign(request=[9, 5])) == 0   # names handle 5 only
    assert pp.unreplayed_starts(rows.iloc[[0, 2]], reqs.iloc[:1]) == 1   # its row is outside the table
    assert pp.unreplayed_starts(rows, None) == 2     # no requests table: cannot tell what they start
    assert not any("persistent" in n for n in pp.predict(sig, [two_level_profile()], burst_source="measured").notes)


def test_measured_collectives_price_calls_from_the_profile_table(tmp_path, capsys):
    """stream_mpi-n2-20000 makes 2000 allreduces of 8 B; on emu-tcp (one rank per node) with
    --measured-collectives each takes the probe's measured 2-rank inter-node time, so the
    communication and waiting add up to at least 2000 of them; by algorithm alone they cost less,
    and with the excess calibrated from that row (the default) as much, the ranks' bursts made
    equal. The profile's inter-node allreduce rows are made 20 us dearer and their excess
    recalibrated (pmac.calibrate_collectives): a library whose call costs more than its messages, as
    MPICH's over the Zen 3's emulated TCP did (8 B: 22.6 us measured, 13.1 us of messages; on the
    Xeon's of 27 Nov the two agree). (With the traced bursts as they are, the ranks arrive unevenly:
    a measured call costs its whole row after the last arrival while the algorithm's messages start
    as each partner arrives.)"""
    import dataclasses
    from pathlib import Path

    from pmac.calibrate_collectives import calibrate_collectives
    from pmac.profile import load_profile, save_profile
    from pmac.signature import load_signature

    repo = Path(__file__).resolve().parents[1]
    sig = load_signature(repo / "signatures" / "stream_mpi-n2-20000")
    ev = sig.events.copy()
    ev["burst_s"] = ev.groupby("seq")["burst_s"].transform("mean")
    even = dataclasses.replace(sig, events=ev)
    prof = load_profile(repo / "machines" / "emu-tcp.yaml")
    rows = tuple(dataclasses.replace(c, time_s=c.time_s + 20e-6)
                 if (c.op, c.placement) == ("allreduce", "inter_node") else c for c in prof.network.collectives)
    prof = dataclasses.replace(prof, network=calibrate_collectives(dataclasses.replace(prof.network, collectives=rows)),
                               raw_file=None, raw_sha256=None)
    prof_path = tmp_path / "emu-tcp.yaml"
    save_profile(prof, prof_path)
    table = {(c.op, c.msg_bytes, c.n_ranks, c.placement): c.time_s for c in prof.network.collectives}
    t8 = table[("allreduce", 8, 2, "inter_node")]
    meas = pp.predict(even, [prof], burst_source="measured", measured_collectives=True).summary.iloc[0]
    algo = pp.predict(even, [prof], burst_source="measured", collective_excess=False).summary.iloc[0]
    dflt = pp.predict(even, [prof], burst_source="measured").summary.iloc[0]
    assert meas.comm_s + meas.wait_s >= 2000 * t8 * (1 - 1e-9)
    assert algo.comm_s + algo.wait_s < 0.7 * (meas.comm_s + meas.wait_s)
    assert dflt.comm_s + dflt.wait_s == pytest.approx(meas.comm_s + meas.wait_s, rel=0.01)
    # the CLI gives the library's figures (the signature as shipped)
    meas = pp.predict(sig, [prof], burst_source="measured", measured_collectives=True).summary.iloc[0]
    algo = pp.predict(sig, [prof], burst_source="measured", collective_excess=False).summary.iloc[0]
    assert main(["predict", str(repo / "signatures" / "stream_mpi-n2-20000"), str(prof_path),
                 "--bursts", "measured", "--measured-collectives", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["predictions"][0]["summary"][0]
    assert row["total_s"] == pytest.approx(meas.total_s, rel=1e-12)
    assert main(["predict", str(repo / "signatures" / "stream_mpi-n2-20000"), str(prof_path),
                 "--bursts", "measured", "--no-collective-excess", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["predictions"][0]["summary"][0]
    assert row["total_s"] == pytest.approx(algo.total_s, rel=1e-12)


def test_notes_said_once_for_several_machines():
    """pmac predict's text output: a note that says the same of several machines is printed once,
    where the first was; one that differs in a single quantity lists it per machine; notes of no
    machine and notes that differ otherwise stay as they were, in order."""
    from pmac.cli.predict import group_notes

    notes = ["a: on huge pages, the program 0 % of its L2", "general note", "b: on huge pages, the program 0 % of its L2",
             "a: evicted: +703 us of comm", "c: on huge pages, the program 0 % of its L2", "b: evicted: +1.51 ms of comm",
             "c: two values 1 s and 2 s", "a: two values 3 s and 4 s", "zz: not a machine", "a: cache L2 edge",
             "b: cache L3 edge"]
    assert group_notes(notes, ["a", "b", "c"]) == [
        "every machine (3): on huge pages, the program 0 % of its L2", "general note",
        "evicted: a +703 us, b +1.51 ms of comm", "c: two values 1 s and 2 s", "a: two values 3 s and 4 s",
        "zz: not a machine", "a: cache L2 edge", "b: cache L3 edge"]
    assert group_notes(notes[:3], ["a", "b"]) == ["a, b: on huge pages, the program 0 % of its L2", "general note"]
    assert group_notes(["a: x", "a: x"], ["a"]) == ["a: x"]
    assert group_notes(["a: edge at 1 s", "b: edge at 2 s", "a: edge at 3 s"], ["a", "b"]) == [
        "a: edge at 1 s", "b: edge at 2 s", "a: edge at 3 s"]


def test_skipped_machines_said_once_per_reason():
    """pmac predict's 'not predicted' list: a machine that lacks the same for several signatures
    is one line; another reason, or another machine, is a line of its own."""
    from pmac.cli.predict import skipped_lines

    skipped = [("s1", "m", ["network.intra_node"]), ("s2", "m", ["network.intra_node"]),
               ("s3", "m", ["network.intra_node"]), ("s1", "k", ["caches", "memory"]),
               ("s2", "k", ["memory"])]
    assert skipped_lines(skipped) == ["m for every signature (3): lacks network.intra_node",
                                      "k for s1: lacks caches, memory", "k for s2: lacks memory"]
    assert skipped_lines(skipped[:2]) == ["m for s1, s2: lacks network.intra_node"]


def test_bench_burst_check(files, capsys):
    """bench/burst_check: the measured side is the trace's steady bursts (seq 2..6 of each rank,
    1 ms each: 10 ms); a trace with every burst doubled doubles measured / convolved; a trace of
    other calls is refused by name."""
    import runpy

    script = Path(__file__).resolve().parents[1] / "bench" / "burst_check"
    main_ = runpy.run_path(str(script), run_name="bench")["main"]
    sig = pingpong_signature(memory=memory_for_pingpong())
    save_signature(sig, files / "s")
    save_signature(dataclasses.replace(sig, events=sig.events.assign(burst_s=2 * sig.events["burst_s"]), memory={}),
                   files / "t2")
    ratios = []
    for tr in ("s", "t2"):
        assert main_([str(files / "s"), str(files / tr), str(files / "a.yaml")]) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if "rank all" in x)
        assert f"measured {10 * (2 if tr == 't2' else 1):.3f} ms" in line, out
        ratios.append(float(line.split("measured / convolved ")[1].split()[0]))
    assert ratios[1] / ratios[0] == pytest.approx(2.0, rel=2e-3)
    save_signature(pingpong_signature(n_iter=2), files / "other")
    assert main_([str(files / "s"), str(files / "other"), str(files / "a.yaml")]) == 2
    assert "its calls (rank, seq, op) differ from those of" in capsys.readouterr().err

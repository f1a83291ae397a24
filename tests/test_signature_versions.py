"""Signature schema versions: a version-1 signature (memory.npz without fp_divsqrt) loads with the
column at -1 ('not counted'), saves as the current version, and prices its divides as flop; a
version-2 one (without fp_recurrence) loads with its divides and chains 'not counted'."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pmac.convolve import burst_arrays
from pmac.errors import SchemaVersionError
from pmac.memsig import BURSTS, FUNCTIONS, memory_tables_of_version
from pmac.signature import SCHEMA_VERSION, load_signature, save_signature
from pmac.table import save_tables
from synth import memory_tables, pingpong_signature, two_level_profile

import dataclasses


def _v1_copy(sig, folder: Path) -> Path:
    """``sig`` written as a version-1 signature: memory.npz without the version-2 columns."""
    save_signature(sig, folder)
    v1 = memory_tables_of_version(1)
    save_tables(folder / "memory.npz", {k: v[list(v1[k].names)] for k, v in sig.memory.items()}, v1, compress=True)
    y = folder / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 1"))
    return folder


def test_version_1_memory_tables_load_with_divides_not_counted(tmp_path):
    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, fp_scalar=5, flop=5.0, fp_divsqrt=2),
                         dict(rank=1, seq=1, loads=10, load_bytes=80)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10}), dict(rank=1, seq=1, access=0, counts={0: 10})])
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    folder = _v1_copy(sig, tmp_path / "v1")
    old = load_signature(folder)
    b = old.memory["bursts"]
    assert list(b.columns) == list(BURSTS.names) and (b["fp_divsqrt"] == -1).all()
    assert (b["loads"] == 10).all() and burst_arrays(old.memory).divsqrt is None
    assert (b["fp_recurrence"] == -1).all() and burst_arrays(old.memory).recurrence is None
    # saved again it is a current-version signature that keeps 'not counted'
    save_signature(old, tmp_path / "v2")
    assert f"schema_version: {SCHEMA_VERSION}" in (tmp_path / "v2" / "signature.yaml").read_text()
    again = load_signature(tmp_path / "v2")
    assert (again.memory["bursts"]["fp_divsqrt"] == -1).all()
    # a version-2 signature with counts keeps them, and the convolver sees them
    save_signature(sig, tmp_path / "new")
    new = load_signature(tmp_path / "new")
    assert new.memory["bursts"]["fp_divsqrt"].tolist() == [2, 0]
    np.testing.assert_array_equal(burst_arrays(new.memory).divsqrt, [2.0, 0.0])
    assert "fp_divsqrt" in FUNCTIONS.names


def test_unknown_signature_version_is_refused_by_name(tmp_path):
    save_signature(pingpong_signature(), tmp_path / "s")
    y = tmp_path / "s" / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 99"))
    with pytest.raises(SchemaVersionError, match=r"signature\.yaml.*schema_version 99 is newer"):
        load_signature(tmp_path / "s")


def test_version_2_memory_tables_load_with_chains_not_counted(tmp_path):
    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, fp_scalar=5, flop=5.0, fp_divsqrt=2,
                              fp_recurrence=4)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10})])
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    folder = tmp_path / "v2"
    save_signature(sig, folder)
    v2 = memory_tables_of_version(2)
    assert "fp_recurrence" not in v2["bursts"].names and "fp_divsqrt" in v2["bursts"].names
    save_tables(folder / "memory.npz", {k: v[list(v2[k].names)] for k, v in sig.memory.items()}, v2, compress=True)
    y = folder / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 2"))
    old = load_signature(folder)
    b = old.memory["bursts"]
    assert b["fp_divsqrt"].tolist() == [2] and b["fp_recurrence"].tolist() == [-1]
    ba = burst_arrays(old.memory)
    assert ba.recurrence is None and ba.divsqrt.tolist() == [2.0]
    # the current version keeps the count and the convolver sees it
    save_signature(sig, tmp_path / "v3")
    assert burst_arrays(load_signature(tmp_path / "v3").memory).recurrence.tolist() == [4.0]


def test_memory_tables_with_impossible_values_are_refused_by_name(tmp_path):
    """load_signature checks memory.npz beyond column types (pmac.memsig.check_tables): one line
    naming the file and the problem."""
    from pmac.errors import InputError

    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, sample_frac=1.0)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10})])
    mem["reuse"].loc[0, "count"] = -5.0
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    save_signature(sig, tmp_path / "s")
    with pytest.raises(InputError, match=r"memory\.npz.*table 'reuse': negative or non-finite count"):
        load_signature(tmp_path / "s")


@pytest.mark.parametrize("column, value, msg", [
    ("burst_s", -1e-6, r"1 burst\(s\) not finite and >= 0 \(the first: rank 0, seq 1, burst_s -1e-06\)"),
    ("burst_s", float("nan"), r"1 burst\(s\) not finite and >= 0 \(the first: rank 0, seq 1, burst_s nan\)"),
    ("rank", 5, r"1 event\(s\) name a rank outside 0\.\.1 \(the first: rank 5, seq 1\)"),
    ("seq", 0, r"1 call\(s\) repeat a \(rank, seq\) of another \(the first: rank 0, seq 0\)"),
    ("dest", 2, r"1 call\(s\) name a dest outside the 2 ranks \(the first: rank 0, seq 1, dest 2\)"),
])
def test_events_with_impossible_values_are_refused_by_name(tmp_path, column, value, msg):
    """load_signature checks the events every consumer relies on: one line naming events.npz (a
    negative burst used to reach the replay, whose error named no file)."""
    from pmac.errors import InputError

    sig = pingpong_signature(n_iter=2)
    ev = sig.events.copy()
    assert list(ev.loc[1, ["rank", "seq"]]) == [0, 1]
    ev.loc[1, column] = value
    save_signature(dataclasses.replace(sig, events=ev), tmp_path / "s")
    with pytest.raises(InputError, match=r"events\.npz: " + msg):
        load_signature(tmp_path / "s")
    save_signature(sig, tmp_path / "ok")
    assert len(load_signature(tmp_path / "ok").events) == len(ev)  # the clean one loads


def test_version_3_signature_has_no_burst_functions_and_convolves_bursts_whole(tmp_path):
    """Version 4 adds memory.npz's burst_functions; a version-3 file (without) loads, its bursts
    are convolved as one (pmac.phases finds no rows), and saved again it is the current version."""
    from pmac.phases import phases_of

    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, fp_scalar=5, flop=5.0)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10})])
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    save_signature(sig, tmp_path / "v3")
    v3 = memory_tables_of_version(3)
    save_tables(tmp_path / "v3" / "memory.npz", {k: v[list(v3[k].names)] for k, v in sig.memory.items()
                                                 if k != "burst_functions"}, v3, compress=True)
    y = tmp_path / "v3" / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 3"))
    old = load_signature(tmp_path / "v3")
    assert "burst_functions" not in old.memory
    assert phases_of(old.memory, burst_arrays(old.memory)) is None
    save_signature(old, tmp_path / "again")
    assert f"schema_version: {SCHEMA_VERSION}" in (tmp_path / "again" / "signature.yaml").read_text()


def test_version_5_signature_loads_with_fetches_not_counted(tmp_path):
    """Version 6 adds the fetches column (and reuse access 2): a version-5 memory.npz loads with
    fetches at -1, and the convolver has no instruction-cache term for it."""
    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, fetches=500)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10}), dict(rank=0, seq=1, access=2, counts={0: 500})])
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    folder = tmp_path / "v5"
    save_signature(sig, folder)
    v5 = memory_tables_of_version(5)
    assert "fetches" not in v5["bursts"].names and "fetches" in BURSTS.names
    save_tables(folder / "memory.npz", {k: v[list(v5[k].names)] for k, v in sig.memory.items()}, v5, compress=True)
    y = folder / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 5"))
    old = load_signature(folder)
    assert old.memory["bursts"]["fetches"].tolist() == [-1] and burst_arrays(old.memory).fetches is None
    save_signature(sig, tmp_path / "v6")
    new = load_signature(tmp_path / "v6")
    ba = burst_arrays(new.memory)
    assert ba.fetches.tolist() == [500.0] and ba.fetch_cum[0, 0, 1] == 1.0   # all 500 at distance 0

def test_version_6_memory_has_no_chain_split():
    """memory.npz of schema 6 has no fp_recurrence_mul; upgraded, it reads -1 (not counted) and the
    convolver prices every chain operation at one price (BurstArrays.recurrence_mul is None)."""
    from pmac.convolve import burst_arrays
    from pmac.memsig import memory_tables_of_version, upgrade
    from synth import memory_tables

    for table in ("bursts", "functions", "burst_functions"):
        assert "fp_recurrence_mul" not in memory_tables_of_version(6)[table].names
        assert "fp_recurrence_mul" in memory_tables_of_version(7)[table].names
    new = memory_tables([dict(rank=0, seq=1, fp_recurrence=5, fp_recurrence_mul=2)],
                        [dict(rank=0, seq=1, access=0, counts={10: 1})])
    old = {"bursts": new["bursts"].drop(columns=["fp_recurrence_mul"]), "reuse": new["reuse"]}
    up = upgrade(old, 6)
    assert up["bursts"]["fp_recurrence_mul"].tolist() == [-1]
    assert burst_arrays(up, line_sizes=(64,)).recurrence_mul is None
    assert burst_arrays(new, line_sizes=(64,)).recurrence_mul.tolist() == [2.0]


def test_version_7_signature_has_no_burst_names_and_version_8_keeps_them(tmp_path):
    """Version 8 adds memory.npz's burst_names: saved and loaded, the table comes back as it was;
    a version-7 file (without it) loads, and pmac predict --functions shows its lone bursts as
    '(unsplit bursts)'."""
    from pmac.memsig import BURST_NAMES
    from pmac.predict_functions import UNSPLIT, function_times

    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, fp_scalar=5, flop=5.0)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10})])
    mem["burst_names"] = BURST_NAMES.coerce(pd.DataFrame({"rank": [0], "seq": [1], "function": ["triad"],
                                                          "share": [0.75]}))
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    save_signature(sig, tmp_path / "v8")
    back = load_signature(tmp_path / "v8")
    pd.testing.assert_frame_equal(back.memory["burst_names"], mem["burst_names"])
    assert list(function_times(back, [two_level_profile()])["function"]) == ["triad"]
    v7 = memory_tables_of_version(7)
    save_tables(tmp_path / "v8" / "memory.npz", {k: v[list(v7[k].names)] for k, v in sig.memory.items()
                                                 if k != "burst_names"}, v7, compress=True)
    y = tmp_path / "v8" / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 7"))
    old = load_signature(tmp_path / "v8")
    assert "burst_names" not in old.memory
    assert list(function_times(old, [two_level_profile()])["function"]) == [UNSPLIT]


def test_version_8_signature_loads_with_aliased_loads_not_counted(tmp_path):
    """Version 9 adds alias_loads (loads that 4 KiB-alias a recent store) to bursts, functions and
    burst_functions: saved and loaded it comes back; a version-8 file (without it) loads with -1
    there ('not counted'), and saves again as the current version."""
    mem = memory_tables([dict(rank=0, seq=1, loads=10, load_bytes=80, fp_scalar=5, flop=5.0, alias_loads=4)],
                        [dict(rank=0, seq=1, access=0, counts={0: 10})])
    sig = dataclasses.replace(pingpong_signature(n_iter=1), memory=mem)
    save_signature(sig, tmp_path / "v9")
    assert load_signature(tmp_path / "v9").memory["bursts"]["alias_loads"].tolist() == [4]
    v8 = memory_tables_of_version(8)
    assert "alias_loads" not in v8["bursts"].names and "alias_loads" not in v8["burst_functions"].names
    save_tables(tmp_path / "v9" / "memory.npz", {k: v[list(v8[k].names)] for k, v in sig.memory.items()}, v8,
                compress=True)
    y = tmp_path / "v9" / "signature.yaml"
    y.write_text(y.read_text().replace(f"schema_version: {SCHEMA_VERSION}", "schema_version: 8"))
    old = load_signature(tmp_path / "v9")
    assert old.memory["bursts"]["alias_loads"].tolist() == [-1]
    assert old.memory["bursts"]["loads"].tolist() == [10]
    save_signature(old, tmp_path / "again")
    assert f"schema_version: {SCHEMA_VERSION}" in (tmp_path / "again" / "signature.yaml").read_text()
    assert load_signature(tmp_path / "again").memory["bursts"]["alias_loads"].tolist() == [-1]

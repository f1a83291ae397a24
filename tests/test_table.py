"""Declared tables: round trip, dictionary-encoded string columns, old plain files, damage."""

import io

import numpy as np
import pandas as pd
import pytest

from pmac.errors import InputError
from pmac.table import TableSpec, load_tables, save_tables

SPEC = TableSpec(name="t", columns=(("k", "int64"), ("fn", "U16"), ("x", "float64")))


def frame(n):
    return pd.DataFrame({"k": np.arange(n), "fn": np.array(["main", "", "kernel"] * (n // 3)),
                         "x": np.linspace(0, 1, n)})


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_keeps_values_and_dtypes(tmp_path, compress):
    df = frame(3000)
    save_tables(tmp_path / "a.npz", {"t": df}, {"t": SPEC}, compress=compress)
    back = load_tables(tmp_path / "a.npz", {"t": SPEC})["t"]
    assert back.equals(SPEC.coerce(df))
    assert list(back["fn"][:4]) == ["main", "", "kernel", "main"] and back["x"].iloc[-1] == 1.0


def test_strings_are_stored_once(tmp_path):
    # 3000 rows x 16 chars x 4 bytes = 192 kB as a plain column; encoded: 12 kB of codes + 3 values
    save_tables(tmp_path / "a.npz", {"t": frame(3000)}, {"t": SPEC})
    with np.load(tmp_path / "a.npz") as z:
        assert sorted(z.files) == ["t/fn#codes", "t/fn#values", "t/k", "t/x"]
        assert list(z["t/fn#values"]) == ["", "kernel", "main"]
        assert z["t/fn#codes"].dtype == np.int32
    assert (tmp_path / "a.npz").stat().st_size < 3000 * (8 + 8 + 4) + 5000


def test_plain_string_column_of_older_files_still_loads(tmp_path):
    df = SPEC.coerce(frame(6))
    buf = io.BytesIO()
    np.savez(buf, **{f"t/{c}": df[c].to_numpy().astype(d) for c, d in SPEC.columns})
    (tmp_path / "old.npz").write_bytes(buf.getvalue())
    assert load_tables(tmp_path / "old.npz", {"t": SPEC})["t"].equals(df)


def test_codes_out_of_range_are_named(tmp_path):
    np.savez(tmp_path / "bad.npz", **{"t/k": np.arange(2), "t/x": np.zeros(2),
                                       "t/fn#codes": np.array([0, 5], dtype=np.int32),
                                       "t/fn#values": np.array(["a"], dtype="U16")})
    with pytest.raises(InputError, match=r"bad\.npz.*column 'fn' unreadable.*outside the 1 stored values"):
        load_tables(tmp_path / "bad.npz", {"t": SPEC})


def test_string_columns_coerce_as_numpy_would_through_their_distinct_values():
    """TableSpec.coerce converts a string column through its distinct values (pmac.table._as_strings)
    with numpy's result: cut to the declared width, missing values as 'nan', the declared order of
    rows; and a saved table loads back equal."""
    import numpy as np
    import pandas as pd

    from pmac.table import TableSpec

    spec = TableSpec(name="t", columns=(("f", "U4"), ("x", "int64")))
    vals = ["main", "a", "longername", None, np.nan, "", "a", "main"]
    got = spec.coerce({"f": vals, "x": range(len(vals))})
    assert got["f"].tolist() == ["main", "a", "long", "nan", "nan", "", "a", "main"]
    assert got["f"].tolist() == [str(v) for v in np.asarray(pd.Series(vals).to_numpy(), dtype="U4")]
    assert got["x"].dtype == np.int64 and got["x"].tolist() == list(range(len(vals)))
    assert spec.coerce({"f": [], "x": []})["f"].tolist() == []


def test_dictionary_encoded_strings_load_back_equal(tmp_path):
    import numpy as np
    import pandas as pd

    from pmac.table import TableSpec, load_tables, save_tables

    spec = TableSpec(name="t", columns=(("f", "U8"), ("x", "float64")))
    rng = np.random.default_rng(0)
    df = spec.coerce({"f": rng.choice(["", "dot", "matvec", "update_p"], 1000), "x": rng.random(1000)})
    save_tables(tmp_path / "t.npz", {"t": df}, {"t": spec})
    back = load_tables(tmp_path / "t.npz", {"t": spec})["t"]
    assert back.equals(df) and back["f"].dtype == df["f"].dtype
    assert (back["f"] == "").sum() == (df["f"] == "").sum() > 0
    assert isinstance(back, pd.DataFrame)


def test_a_column_added_since_a_file_was_written_takes_its_stated_value(tmp_path):
    """A table spec's ``added`` column: a file written without it loads with the stated value in
    every row (in the column's dtype and place); rows without it, concatenated with rows that have
    it, take the value in coerce; a column neither written nor added is still named as missing."""
    newer = TableSpec(name="t", columns=(("src", "int32"), *SPEC.columns), added=(("src", 7),))
    save_tables(tmp_path / "old.npz", {"t": frame(6)}, {"t": SPEC})
    back = load_tables(tmp_path / "old.npz", {"t": newer})["t"]
    assert list(back.columns) == ["src", "k", "fn", "x"]
    assert back["src"].tolist() == [7] * 6 and back["src"].dtype == np.int32
    assert back.drop(columns="src").equals(SPEC.coerce(frame(6)))
    mixed = newer.coerce(pd.concat([frame(3).assign(src=1), frame(3)], ignore_index=True))
    assert mixed["src"].tolist() == [1, 1, 1, 7, 7, 7]
    save_tables(tmp_path / "new.npz", {"t": mixed}, {"t": newer})
    assert load_tables(tmp_path / "new.npz", {"t": newer})["t"].equals(mixed)
    with pytest.raises(InputError, match=r"old\.npz: table 't' lacks column\(s\) y"):
        load_tables(tmp_path / "old.npz", {"t": TableSpec(name="t", columns=(*SPEC.columns, ("y", "int32")))})

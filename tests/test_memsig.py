"""pmac.memsig: bin edges, fully-associative hit fractions, value checks of the tables."""

import numpy as np
import pandas as pd
import pytest

from pmac.memsig import (BURSTS, COLD_BIN, N_REUSE_BINS, REUSE, REUSE_BIN_EDGES_LINES, check_tables, hit_fraction,
                         reuse_bin)


def test_bins_and_hit_fraction_by_hand():
    assert REUSE_BIN_EDGES_LINES[:8].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert N_REUSE_BINS == len(REUSE_BIN_EDGES_LINES) and COLD_BIN == N_REUSE_BINS - 1
    assert reuse_bin(np.array([-1, 0, 1, 4, 2 ** 40])).tolist() == [COLD_BIN, 0, 1, 4, COLD_BIN - 1]
    h = np.zeros(N_REUSE_BINS)
    h[0], h[3], h[COLD_BIN] = 6.0, 2.0, 2.0       # distances 0 (6x), 3 (2x), cold (2x)
    assert hit_fraction(h, 1) == pytest.approx(0.6)
    assert hit_fraction(h, 4) == pytest.approx(0.8)   # d = 3 < 4 lines
    assert hit_fraction(h, 1e12) == pytest.approx(0.8)  # cold misses stay misses


def _tables():
    bursts = BURSTS.coerce({c: np.zeros(2, d) for c, d in BURSTS.columns} | {"seq": np.array([0, 1]),
                                                                             "sample_frac": np.full(2, 1 / 16)})
    reuse = REUSE.coerce(pd.DataFrame({"rank": [0, 0], "seq": [0, -1], "function": ["", "main"],
                                       "line_bytes": [64, 32], "access": [0, 1], "bin": [3, COLD_BIN],
                                       "count": [16.0, 32.0]}))
    return {"bursts": bursts, "reuse": reuse}


@pytest.mark.parametrize("table, column, value, message", [
    ("reuse", "bin", 900, rf"table 'reuse': bin 900 outside 0..{COLD_BIN}"),
    ("reuse", "bin", -2, rf"table 'reuse': bin -2 outside 0..{COLD_BIN}"),
    ("reuse", "access", 3, r"table 'reuse': access 3 is none of 0 \(load\), 1 \(store\), 2 \(fetch\)"),
    ("reuse", "line_bytes", 48, r"table 'reuse': line_bytes 48 is not a power of two >= 32"),
    ("reuse", "count", -1.0, r"table 'reuse': negative or non-finite count"),
    ("reuse", "count", np.nan, r"table 'reuse': negative or non-finite count"),
    ("reuse", "seq", -5, r"table 'reuse': seq below -1"),
    ("bursts", "loads", -3, r"table 'bursts': negative loads"),
    ("bursts", "seq", 0, r"table 'bursts': burst \(rank 0, seq 0\) appears twice"),
    ("bursts", "sample_frac", 0.0, r"table 'bursts': sample_frac outside \(0, 1\]"),
])
def test_tables_with_unusable_values_are_refused(table, column, value, message):
    good = _tables()
    check_tables(good)
    bad = {k: v.copy() for k, v in good.items()}
    bad[table].loc[1, column] = value
    with pytest.raises(ValueError, match=message):
        check_tables(bad)


@pytest.mark.parametrize("column, value, message", [
    ("seq", 0, r"table 'burst_names': burst \(rank 0, seq 0\) appears twice"),
    ("seq", 7, r"table 'burst_names': burst \(rank 0, seq 7\) is not in table 'bursts'"),
    ("share", 0.0, r"table 'burst_names': share outside \(0, 1\]"),
    ("share", 1.5, r"table 'burst_names': share outside \(0, 1\]"),
])
def test_burst_names_with_unusable_values_are_refused(column, value, message):
    from pmac.memsig import BURST_NAMES

    good = _tables() | {"burst_names": BURST_NAMES.coerce(pd.DataFrame(
        {"rank": [0, 0], "seq": [0, 1], "function": ["main", "triad"], "share": [1.0, 0.6]}))}
    check_tables(good)
    bad = {k: v.copy() for k, v in good.items()}
    bad["burst_names"].loc[1, column] = value
    with pytest.raises(ValueError, match=message):
        check_tables(bad)

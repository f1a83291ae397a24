"""Declared tables: a fixed column set with dtypes, stored in a binary columnar .npz file.

Bulk data (events, bursts, histograms, raw probe repetitions) live beside the YAML in one
``.npz`` per file, one array per ``table/column``. Each table has a :class:`TableSpec`;
:func:`load_tables` checks the columns and dtypes on load and names the file when wrong.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InputError
from .schema import atomic_write_bytes


@dataclass(frozen=True, kw_only=True)
class TableSpec:
    name: str
    columns: tuple[tuple[str, str], ...]  # (column, numpy dtype string)
    #: columns added after files were written with the table: (column, its value in such a file).
    #: A table without one gets it filled in, on load and in :meth:`coerce`.
    added: tuple[tuple[str, int | float | str], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    def empty(self) -> pd.DataFrame:
        return pd.DataFrame({c: np.zeros(0, dtype=d) for c, d in self.columns})

    def coerce(self, df: pd.DataFrame | dict) -> pd.DataFrame:
        """Return a DataFrame with exactly the declared columns and dtypes (plain RangeIndex)."""
        if isinstance(df, dict):
            df = pd.DataFrame(df)
        added = dict(self.added)
        missing = [c for c in self.names if c not in df.columns and c not in added]
        if missing:
            raise ValueError(f"table '{self.name}' lacks column(s) {', '.join(missing)}")
        if added:       # absent, or missing in rows of a table concatenated with an older one
            df = df.assign(**{c: df[c].fillna(v) if c in df.columns else v for c, v in added.items()})
        extra = [c for c in df.columns if c not in self.names]
        if extra:
            raise ValueError(f"table '{self.name}' has undeclared column(s) {', '.join(map(str, extra))}")
        return pd.DataFrame({c: _as_strings(df[c], d) if np.dtype(d).kind == "U" else
                             np.asarray(df[c].to_numpy(), dtype=d) for c, d in self.columns})


#: Suffixes of a dictionary-encoded string column: int32 codes into a table of distinct values.
CODES, VALUES = "#codes", "#values"


def save_tables(path: str | Path, tables: dict[str, pd.DataFrame], specs: dict[str, TableSpec], *,
                compress: bool = False) -> None:
    """Write tables atomically to one .npz.

    String columns are stored dictionary-encoded (a fixed-width ``U64`` column of a million rows
    would take 256 MB; its few distinct values take almost nothing) and decoded on load, so readers
    see the declared dtype. ``compress`` zips the arrays (for bulky tables loaded once, such as
    memory signatures); by default they are stored plainly, since loading speed matters more.
    """
    arrays = {}
    for name, df in tables.items():
        spec = specs[name]
        df = spec.coerce(df)
        for col, dtype in spec.columns:
            arr = np.ascontiguousarray(df[col].to_numpy(), dtype=dtype)
            if arr.dtype.kind == "U":
                values, codes = np.unique(arr, return_inverse=True)
                arrays[f"{name}/{col}{CODES}"] = codes.astype(np.int32)
                arrays[f"{name}/{col}{VALUES}"] = values.astype(dtype)
            else:
                arrays[f"{name}/{col}"] = arr
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def _column(npz, name: str, col: str, keys: set[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """(the stored array, None), or for a dictionary-encoded column (its distinct values, codes)."""
    key = f"{name}/{col}"
    if key in keys:
        return npz[key], None
    codes, values = npz[key + CODES], npz[key + VALUES]
    if len(codes) and (codes.min() < 0 or codes.max() >= len(values)):
        raise ValueError(f"codes outside the {len(values)} stored values")
    return values, codes


def _as_strings(col: pd.Series, dtype: str):
    """A string column as ``pd.DataFrame`` makes ``np.asarray(col, dtype)`` (cut to the declared
    width, missing values as 'nan'), converting only its distinct values: a memory signature's
    tables repeat a few function names over many rows, and numpy and pandas convert element by
    element (``pmac predict`` spent 1.5 s of 11 in it)."""
    codes, uniques = pd.factorize(col, use_na_sentinel=False)
    return _decoded(np.asarray(np.asarray(uniques, dtype=object), dtype=dtype), codes)


def _decoded(values: np.ndarray, codes: np.ndarray):
    """The column of a dictionary-encoded string: pandas' string array of the few values, taken at
    the codes (what ``pd.DataFrame`` makes of ``values[codes]``, ~20x faster on a memory
    signature's reuse table: pandas converts every element of a numpy string array)."""
    return pd.array(values, dtype=pd.Series(values).dtype).take(codes)


def load_tables(path: str | Path, specs: dict[str, TableSpec], *, required: tuple[str, ...] = ()) -> dict[str, pd.DataFrame]:
    """Load the tables of ``specs`` present in ``path``; check column sets and dtypes."""
    path = Path(path)
    try:
        npz = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise InputError(f"not a readable table file ({exc})", path=path) from None
    with npz:
        keys = set(npz.files)
        out: dict[str, pd.DataFrame] = {}
        for name, spec in specs.items():
            present = {k.split("/", 1)[1].removesuffix(CODES) for k in keys
                       if k.startswith(name + "/") and not k.endswith(VALUES)}
            if not present:
                if name in required:
                    raise InputError(f"table '{name}' missing", path=path)
                continue
            added = dict(spec.added)
            missing = [c for c in spec.names if c not in present and c not in added]
            if missing:
                raise InputError(f"table '{name}' lacks column(s) {', '.join(missing)}", path=path)
            extra = sorted(present - set(spec.names))
            if extra:
                raise InputError(f"table '{name}' has undeclared column(s) {', '.join(extra)}", path=path)
            cols = {}
            n = None
            for col, dtype in spec.columns:
                if col not in present:      # a column added since the file was written
                    continue
                try:
                    arr, codes = _column(npz, name, col, keys)
                except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
                    raise InputError(f"table '{name}' column '{col}' unreadable ({exc})", path=path) from None
                if arr.dtype != np.dtype(dtype):
                    raise InputError(f"table '{name}' column '{col}' has dtype {arr.dtype}, expected {dtype}",
                                     path=path)
                rows = len(arr) if codes is None else len(codes)
                if n is None:
                    n = rows
                elif rows != n:
                    raise InputError(f"table '{name}' column '{col}' has {rows} rows, expected {n}", path=path)
                cols[col] = arr if codes is None else _decoded(arr, codes)
            for col, dtype in spec.columns:
                if col not in present:
                    cols[col] = np.full(n or 0, added[col], dtype=dtype)
            out[name] = pd.DataFrame({c: cols[c] for c in spec.names})
    return out

"""Units: SI base units everywhere in code; one parser and one formatter for people.

Quantities are floats in base units (s, bytes, Hz, bytes/s, flop/s). Prefixed strings such as
"3.6 GHz", "32 KiB", "10 Gbit/s" appear only at the edges (CLI input, display) and go through
:func:`parse_quantity` and :func:`format_quantity`.
"""

from __future__ import annotations

import math
import re

from .errors import InputError

# Decimal prefixes. Note 'T' is 1e12 (a peer once shipped 1e13).
SI_PREFIXES = {
    "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12,
}
BINARY_PREFIXES = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

# unit symbol -> (base unit name, factor to base)
_UNITS = {
    "s": ("s", 1.0),
    "B": ("bytes", 1.0),
    "byte": ("bytes", 1.0),
    "bytes": ("bytes", 1.0),
    "bit": ("bytes", 1.0 / 8.0),
    "b": ("bytes", 1.0 / 8.0),
    "Hz": ("hz", 1.0),
    "B/s": ("bytes_per_s", 1.0),
    "bit/s": ("bytes_per_s", 1.0 / 8.0),
    "bps": ("bytes_per_s", 1.0 / 8.0),
    "flop/s": ("flop_per_s", 1.0),
    "FLOP/s": ("flop_per_s", 1.0),
    "flops": ("flop_per_s", 1.0),
    "": ("", 1.0),
}

_QUANTITY_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/]*)\s*$")


def _split_prefix(symbol: str) -> tuple[float, str]:
    """Split 'KiB/s' into (1024, 'B/s'). Tries binary prefixes, then SI, then none."""
    if symbol in _UNITS:
        return 1.0, symbol
    for pre, fac in BINARY_PREFIXES.items():
        if symbol.startswith(pre) and symbol[len(pre):] in _UNITS:
            return fac, symbol[len(pre):]
    for pre, fac in SI_PREFIXES.items():
        if pre and symbol.startswith(pre) and symbol[len(pre):] in _UNITS and symbol[len(pre):]:
            return fac, symbol[len(pre):]
    raise InputError(f"unknown unit '{symbol}'")


def parse_quantity(text: str | float | int, unit: str | None = None) -> float:
    """Parse '3.6 GHz', '32KiB', '1 Gbit/s', '7us' to a float in base units.

    ``unit`` names the expected base unit ('s', 'bytes', 'hz', 'bytes_per_s', 'flop_per_s');
    a bare number is taken as already in base units. A mismatch raises :class:`InputError`.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = _QUANTITY_RE.match(str(text))
    if not m:
        raise InputError(f"cannot read '{text}' as a quantity")
    value = float(m.group(1))
    symbol = m.group(2)
    if symbol == "":
        return value
    factor, base_symbol = _split_prefix(symbol)
    base, to_base = _UNITS[base_symbol]
    if unit is not None and base != unit:
        raise InputError(f"'{text}' is in {base or 'no unit'}, expected {unit}")
    return value * factor * to_base


_FORMAT_SYMBOL = {"s": "s", "bytes": "B", "hz": "Hz", "bytes_per_s": "B/s", "flop_per_s": "flop/s", "": ""}


def format_quantity(value: float, unit: str, digits: int = 3, binary: bool | None = None) -> str:
    """Format a base-unit value for people: 3.2e-06 's' -> '3.20 us', 32768 'bytes' -> '32.0 KiB'.

    Byte sizes default to binary prefixes, rates and times to decimal ones.
    """
    symbol = _FORMAT_SYMBOL[unit]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if value == 0 or math.isinf(value):
        return f"{value:g} {symbol}".strip()
    if binary is None:
        binary = unit == "bytes"
    mag = abs(value)
    if binary:
        for pre in ("Pi", "Ti", "Gi", "Mi", "Ki"):
            if mag >= BINARY_PREFIXES[pre]:
                return f"{value / BINARY_PREFIXES[pre]:.{digits}g} {pre}{symbol}"
        return f"{value:.{digits}g} {symbol}"
    for pre, fac in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0),
                     ("m", 1e-3), ("u", 1e-6), ("n", 1e-9), ("p", 1e-12)):
        if mag >= fac * 0.9995:
            return f"{value / fac:.{digits}g} {pre}{symbol}".rstrip()
    return f"{value:.{digits}g} {symbol}"

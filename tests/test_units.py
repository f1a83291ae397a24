import math

import pytest

from pmac.errors import InputError
from pmac.units import format_quantity, parse_quantity


@pytest.mark.parametrize("text,unit,value", [
    ("3.6 GHz", "hz", 3.6e9),
    ("32KiB", "bytes", 32768.0),
    ("32 kB", "bytes", 32000.0),
    ("1 Gbit/s", "bytes_per_s", 1.25e8),
    ("7us", "s", 7e-6),
    ("2 TB/s", "bytes_per_s", 2e12),   # T is 1e12, not 1e13
    ("1.5e3 s", "s", 1500.0),
    ("12 GiB/s", "bytes_per_s", 12 * 2**30),
    (42, None, 42.0),
    ("0.5", None, 0.5),
])
def test_parse(text, unit, value):
    assert math.isclose(parse_quantity(text, unit), value, rel_tol=1e-12)


def test_parse_errors_name_the_problem():
    with pytest.raises(InputError, match="expected s"):
        parse_quantity("3 GHz", "s")
    with pytest.raises(InputError, match="unknown unit 'furlong'"):
        parse_quantity("3 furlong")
    with pytest.raises(InputError, match="cannot read"):
        parse_quantity("fast")


@pytest.mark.parametrize("value,unit,text", [
    (3.2e-6, "s", "3.2 us"),
    (32768, "bytes", "32 KiB"),
    (1.25e8, "bytes_per_s", "125 MB/s"),
    (3.6e9, "hz", "3.6 GHz"),
    (0.0, "s", "0 s"),
    (512, "bytes", "512 B"),
])
def test_format(value, unit, text):
    assert format_quantity(value, unit) == text


def test_round_trip():
    for v in (1e-9, 3.3e-3, 17.0, 2.5e10):
        assert math.isclose(parse_quantity(format_quantity(v, "s", digits=12), "s"), v, rel_tol=1e-9)

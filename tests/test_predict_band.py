"""pmac.predict_band and pmac predict --band: a prediction at a fast and a slow quantile of each
probe point's repetitions."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pmac.cli import main
from pmac.errors import InputError
from pmac.pool import refit
from pmac.predict import predict
from pmac.predict_band import band_profiles, contains, parse_band, predict_band
from pmac.probe import write_pair
from pmac.profile import load_profile, load_raw
from pmac.signature import load_signature

REPO = Path(__file__).resolve().parents[1]
MACHINE = REPO / "machines" / "epyc-vm.yaml"
IMPORTED = REPO / "machines" / "skylakesp-gold6148.yaml"
SIG = REPO / "signatures" / "stream_mpi-n2-20000"


def _flat(raw: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Every table with repetitions (a ``rep`` column) with each point's repetitions replaced by
    their median: any quantile of a point is then that median."""
    out = {}
    for name, df in raw.items():
        if "rep" not in df.columns:
            out[name] = df
            continue
        value = df.columns[-1]
        keys = [c for c in df.columns if c not in ("rep", value)]
        out[name] = df.assign(**{value: df.groupby(keys, sort=False)[value].transform("median")})
    return out


def test_parse_band():
    assert parse_band("0.1,0.9") == (0.1, 0.9)
    assert parse_band(" 0.25, 0.75") == (0.25, 0.75)
    for bad, why in (("0.9,0.1", "needs 0 < LO < HI < 1"), ("0,0.5", "needs 0 < LO < HI < 1"),
                     ("0.1", "two quantiles LO,HI"), ("a,b", "two quantiles LO,HI"),
                     ("0.1,0.5,0.9", "two quantiles LO,HI")):
        with pytest.raises(InputError, match=f"band '{bad}': {why}"):
            parse_band(bad)


def test_band_brackets_the_prediction_on_a_spread_profile():
    """The shipped EPYC profile (four probes pooled, each point at the median of its repetitions):
    its fast end predicts faster and its slow end slower than the median, for a memory-bound
    signature whose bursts sit in L2, and the fast end is the prediction on the profile refitted
    at 0.1 (pmac.pool.refit) itself."""
    sig = load_signature(SIG)
    prof = load_profile(MACHINE)
    table, notes = predict_band(sig, [prof], [MACHINE], band=(0.1, 0.9))
    r = table.iloc[0]
    assert notes == ()
    assert r.fast_s < r.total_s < r.slow_s
    assert r.total_s == pytest.approx(float(predict(sig, [prof]).summary["total_s"].iloc[0]), rel=1e-12)
    fast = refit(prof, load_raw(prof, MACHINE), statistic="0.1")
    assert r.fast_s == pytest.approx(float(predict(sig, [fast]).summary["total_s"].iloc[0]), rel=1e-12)
    assert contains(r, r.total_s) and not contains(r, 0.5 * r.fast_s) and not contains(r, 2 * r.slow_s)


def test_band_collapses_where_the_repetitions_agree(tmp_path):
    """A profile whose every point's repetitions are equal (the shipped ones replaced by their
    median) has no spread for the band to show: both ends are the prediction, to 1e-9."""
    prof = load_profile(MACHINE)
    flat = _flat(load_raw(prof, MACHINE))
    path = tmp_path / "flat.yaml"
    write_pair(refit(prof, flat, statistic="median"), flat, path)
    agreed = load_profile(path)
    sig = load_signature(SIG)
    table, _ = predict_band(sig, [agreed], [path], band=(0.1, 0.9))
    r = table.iloc[0]
    assert r.fast_s == pytest.approx(r.total_s, rel=1e-9) and r.slow_s == pytest.approx(r.total_s, rel=1e-9)


def test_no_band_without_repetitions_and_only_the_network_with_measured_bursts():
    """An imported profile (no sidecar) has no band, and a note says so; with the traced burst
    times the band is the network's alone: the ends are the prediction with the profile's links and
    collectives refitted at each quantile (pmac.pool.refit_network) and nothing else changed."""
    from pmac.pool import refit_network

    sig = load_signature(SIG)
    profs = [load_profile(MACHINE), load_profile(IMPORTED)]
    pairs, notes = band_profiles(profs, [MACHINE, IMPORTED])
    assert pairs[0] is not None and pairs[1] is None
    assert notes == [f"{profs[1].name}: no band: no raw repetitions (an imported profile, or one written without them)"]
    table, notes = predict_band(sig, profs[:1], [MACHINE], burst_source="measured")
    raw = load_raw(profs[0], MACHINE)
    for col, q in (("fast_s", 0.1), ("slow_s", 0.9)):
        net_only = refit_network(profs[0], raw, q)
        want = float(predict(sig, [net_only], burst_source="measured").summary["total_s"].iloc[0])
        assert table[col].iloc[0] == pytest.approx(want, rel=1e-12)
    assert table["fast_s"].iloc[0] != table["slow_s"].iloc[0]
    assert notes == ("band: the burst times are the traced ones; only the network's spread moves them",)


def test_cli_band(capsys):
    assert main(["predict", str(SIG), str(MACHINE), "--band"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("  band (every probe point at the 0.1 and the 0.9 "))
    assert "epyc-vm " in line and " .. " in line
    assert main(["predict", str(SIG), str(MACHINE), "--band", "--band-at", "0.25,0.75", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["band"][0]["rows"]
    assert [r["machine"] for r in rows] == ["epyc-vm"] and rows[0]["fast_quantile"] == 0.25
    assert rows[0]["fast_s"] < rows[0]["total_s"] < rows[0]["slow_s"]
    assert rows[0]["total_s"] == pytest.approx(doc["predictions"][0]["summary"][0]["total_s"], rel=1e-12)
    assert main(["predict", str(SIG), str(MACHINE), "--band", "--csv"]) == 0
    head = capsys.readouterr().out.splitlines()[0].split(",")
    assert head[-2:] == ["band_fast_s", "band_slow_s"]
    assert main(["predict", str(SIG), str(MACHINE), "--band", "--band-at", "0.9,0.1"]) == 2
    assert "band '0.9,0.1': needs 0 < LO < HI < 1" in capsys.readouterr().err

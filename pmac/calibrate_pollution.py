"""Add the pollution curves of the network probe's ``pollution`` test to an existing machine
profile (one probed before the test existed), in place: ``python -m pmac.calibrate_pollution
FILE.yaml --record REC.npz ...`` with records of ``probes/network.py --pollution-only``. What the
curves mean and how the replay uses them: :mod:`pmac.pollution`."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pandas as pd

from .errors import InputError, PmacError
from .fit_network import POLLUTION_TESTS, fit_pollution
from .probe_network import read_record
from .profile import RAW_TABLES, load_profile, load_raw, raw_path, save_profile
from .schema import sha256_file
from .table import save_tables


def format_curve(w, e) -> str:
    """'16 KiB +0.49 us, 64 KiB +0.51 us, ...' of a pollution curve."""
    return ", ".join(f"{x / 1024:g} KiB +{y * 1e6:.2f} us" for x, y in zip(w, e))


def add_to_profile(path, records) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Set the pollution curves of the profile at ``path`` from network probe records (e.g.
    ``probes/network.py --pollution-only``): each placement a record measured goes to that link
    (a later record wins); the rows join the profile's raw sidecar (its old pollution rows of
    those placements replaced). Both files are written atomically. Returns the curves by placement."""
    prof = load_profile(path)
    prof.require("network", needed_by="pmac.calibrate_pollution")
    rows = {}
    for rec in records:
        pp = read_record(rec)[0]["pingpong"]
        pp = pp[pp.test.isin(POLLUTION_TESTS)]
        if pp.empty:
            raise InputError("no pollution rows (probes/network.py --pollution-only writes them)", path=str(rec))
        rows.update({str(pl): g for pl, g in pp.groupby("placement")})
    curves, links = {}, {}
    for placement, g in rows.items():
        link = getattr(prof.network, placement, None)
        if link is None:
            raise InputError(f"the profile has no {placement} link for the record's pollution rows", path=str(path))
        curves[placement] = fit_pollution(g)
        links[placement] = dataclasses.replace(link, pollution_bytes=curves[placement][0],
                                               pollution_excess_s=curves[placement][1])
    prof = dataclasses.replace(prof, network=dataclasses.replace(prof.network, **links))
    raw_file = raw_path(prof, path)
    if raw_file is not None:
        raw = load_raw(prof, path)
        pp = raw.get("pingpong", pd.DataFrame(columns=[c for c, _ in RAW_TABLES["pingpong"].columns]))
        pp = pp[~(pp.test.isin(POLLUTION_TESTS) & pp.placement.isin(list(rows)))]
        raw["pingpong"] = pd.concat([pp] + list(rows.values()), ignore_index=True)
        save_tables(raw_file, raw, {k: RAW_TABLES[k] for k in raw})
        prof = dataclasses.replace(prof, raw_sha256=sha256_file(raw_file))
    prov = dict(prof.provenance or {})
    prov["pollution"] = "python -m pmac.calibrate_pollution " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save_profile(dataclasses.replace(prof, provenance=prov), Path(path))
    return curves


def main(argv: list[str] | None = None) -> int:
    """``python -m pmac.calibrate_pollution FILE.yaml --record REC.npz ...``: add the pollution
    curves measured by ``probes/network.py --pollution-only`` to a machine profile (in place), and
    print them."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m pmac.calibrate_pollution", description=main.__doc__)
    ap.add_argument("profile", metavar="FILE.yaml")
    ap.add_argument("--record", action="append", required=True, metavar="REC.npz",
                    help="a network probe record with pollution rows (repeatable; a later one wins)")
    args = ap.parse_args(argv)
    try:
        curves = add_to_profile(args.profile, args.record)
    except PmacError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for placement, (w, e) in sorted(curves.items()):
        print(f"{args.profile} {placement}: {format_curve(w, e)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Traces taken in the rounds of a measurement, and the one of median compute per case: shared by
bench/validate_emulated and bench/accuracy (``--trace-each-round``). On a host whose speed drifts
for minutes at a time (the 2-vCPU VM), bursts traced an hour before the runs miss them by the
drift; traced in the same rounds, they see what the runs see. A module, not a script."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from pmac.errors import PmacError
from pmac.memtrace import DEFAULT_NUMBA_CPU
from pmac.mpi import mpi_env
from pmac.signature import load_signature
from pmac.validate import timed_compute_s


def trace_round(cases, cases_mod, folder: Path, k: int) -> None:
    """``pmac trace`` of every case on this host (2 ranks, shared memory) into folder/k/<case>."""
    from pmac.mpi import find_mpi

    mpi = find_mpi()
    env = dict(mpi_env())
    env.setdefault("NUMBA_CPU_NAME", DEFAULT_NUMBA_CPU)  # as the measured runs and the memory tracer
    for c in cases:
        out = folder / str(k) / c["name"]
        cmd = [sys.executable, "-m", "pmac", "trace", "-o", str(out), "--param", f"app={c['app']}"]
        cmd += [x for kk, v in c["params"].items() for x in ("--param", f"{kk}={v}")]
        cmd += ["--", mpi.mpiexec, "-n", str(cases_mod["N_RANKS"])] + cases_mod["command"](c)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if res.returncode != 0:
            raise PmacError(f"tracing {c['name']} failed (exit {res.returncode}): {res.stderr.strip()[-300:]}")


def median_traces(cases, folder: Path) -> dict:
    """Per case, the signature of median compute in its timed loop among folder/*/<case>."""
    out = {}
    for c in cases:
        found = sorted(folder.glob(f"*/{c['name']}/signature.yaml"))
        if not found:
            raise PmacError(f"no trace of {c['name']} in {folder}")
        tries = sorted(((timed_compute_s(s.events), i, s) for i, s in
                        enumerate(load_signature(f.parent, with_memory=False) for f in found)),
                       key=lambda x: (x[0], x[1]))
        out[c["name"]] = tries[(len(tries) - 1) // 2][2]
    return out


def traced_signatures(cases, folder: Path, shipped: dict) -> dict:
    """Per case of ``shipped`` (name -> Signature), the median trace in ``folder`` (:func:`median_traces`)
    with the shipped signature's memory signature: the traces carry none (valgrind is slow), and the
    shipped one of the same case (the same calls, keyed by (rank, seq)) gives the bursts their counts
    and reuse."""
    med = median_traces([c for c in cases if c["name"] in shipped], folder)
    return {k: dataclasses.replace(v, memory=shipped[k].memory) for k, v in med.items()}

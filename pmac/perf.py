"""Hardware counters of an MPI program's ranks with ``perf stat`` (``pmac count``), for machines
that have them.

Each rank runs under ``perf stat -x , -o FILE -e EVENTS``, one file per rank named by the rank the
launcher gives it (MPICH's ``PMI_RANK``, Open MPI's ``OMPI_COMM_WORLD_RANK``); the counts come back
as rows of pmac.counters' counter CSV, one per rank and event, function ``(all)`` (perf stat counts
a whole process; per-function hardware counts would need sampling, ``perf record``). A machine
without counters (this development VM: :func:`pmac.counters.hardware_counter_status`) gets one
line saying so and what to use instead: the memory signatures' counts (``pmac trace --memory``),
which ``pmac scale`` reads with no counters at all.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import pandas as pd

from .counters import PERF_EVENTS, hardware_counter_status
from .errors import PmacError, ToolMissingError
from .mpi import launch_command, mpi_env, run_job

WHOLE = "(all)"
#: per rank: perf stat's output to $DIR/rank-<rank>.csv, the rank from the launcher's variables
_WRAPPER = ('r="${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}"; '
            'exec "$PMAC_PERF" stat -x , -o "$PMAC_PERF_DIR/rank-$r.csv" -e "$PMAC_PERF_EVENTS" -- "$@"')


def parse_perf_stat(text: str) -> dict[str, float]:
    """Event -> count from ``perf stat -x ,`` output; events perf did not count (``<not
    supported>``, ``<not counted>``) are left out."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or line.count(",") < 2:
            continue
        f = line.split(",")
        try:
            out[f[2]] = float(f[0])
        except ValueError:
            continue
    return out


def count_run(n_ranks: int, argv: Sequence[str], *, events: Sequence[str] = PERF_EVENTS, perf: str | None = None,
              timeout_s: float = 3600.0) -> pd.DataFrame:
    """Run ``argv`` (the program, without a launcher) at ``n_ranks`` under perf stat: rows
    ``n_ranks, rank, function, metric, value``. Raises ToolMissingError (one line) where this
    machine counts none of ``events``, PmacError where the run fails or a rank wrote nothing."""
    exe = perf or shutil.which("perf")
    ok, why = hardware_counter_status(exe) if exe else (False, "no perf on PATH (Debian: linux-perf)")
    if not ok:
        raise ToolMissingError(f"no hardware counters on this machine ({why}); pmac scale needs none: it reads the "
                               "counts of memory signatures (pmac trace --memory --scaling ...)")
    with tempfile.TemporaryDirectory(prefix="pmac-perf-") as tmp:
        env = mpi_env()
        env.update(PMAC_PERF=exe, PMAC_PERF_DIR=tmp, PMAC_PERF_EVENTS=",".join(events))
        cmd = launch_command(n_ranks, ["sh", "-c", _WRAPPER, "sh", *argv],
                             env_vars={k: env[k] for k in ("PMAC_PERF", "PMAC_PERF_DIR", "PMAC_PERF_EVENTS")})
        rc, _, err = run_job(cmd, env=env, what=f"count: the run at {n_ranks} ranks", timeout_s=timeout_s)
        if rc != 0:
            tail = (err.strip().splitlines() or ["no output"])[-1]
            raise PmacError(f"count: the run at {n_ranks} ranks exited with code {rc}: {tail}")
        rows = []
        for rank in range(n_ranks):
            f = Path(tmp) / f"rank-{rank}.csv"
            if not f.exists():
                raise PmacError(f"count: rank {rank} of {n_ranks} wrote no perf stat output (does the launcher set "
                                "PMI_RANK or OMPI_COMM_WORLD_RANK?)")
            for event, value in parse_perf_stat(f.read_text()).items():
                rows.append((n_ranks, rank, WHOLE, event, value))
    return pd.DataFrame(rows, columns=["n_ranks", "rank", "function", "metric", "value"])

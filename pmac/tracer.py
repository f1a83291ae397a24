"""Trace the MPI calls of an unmodified program: ``LD_PRELOAD`` the PMPI shim, run, read.

:func:`trace_mpi` builds (or reuses) the shim for the MPI library the program loads, runs the
command with ``LD_PRELOAD`` and ``PMAC_TRACE_DIR``, reads the per-rank raw files
(pmac.rawtrace) and saves ``signatures/NAME/`` (pmac.signature). A program that fails or is
killed still yields a signature of what it recorded; the result says what went wrong.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import InputError
from .mpi import stop_job
from .rawtrace import RawTrace, read_raw_dir
from .schema import provenance
from .shim_build import ShimBuild, shim_for
from .signature import Signature, SignatureHeader, make_signature, memory_pages, save_signature

TRACE_DIR_ENV = "PMAC_TRACE_DIR"


@dataclass(frozen=True, kw_only=True)
class TraceResult:
    signature: Signature
    path: Path
    returncode: int
    wall_s: float
    shim: ShimBuild
    raw: RawTrace

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.raw.warnings


def preload_env(shim: ShimBuild, trace_dir: str | Path | None, base: dict | None = None) -> dict:
    """Environment that loads the shim; without ``trace_dir`` it only counts calls (valgrind use)."""
    env = dict(os.environ if base is None else base)
    pre = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = shim.library + (" " + pre if pre else "")
    if trace_dir is not None:
        env[TRACE_DIR_ENV] = str(trace_dir)
    else:
        env.pop(TRACE_DIR_ENV, None)
    return env


def run_traced(argv: list[str], raw_dir: str | Path, *, shim: ShimBuild | None = None, env: dict | None = None,
               timeout_s: float | None = None) -> tuple[int, float, ShimBuild]:
    """Run the command with the shim; returns (exit code, wall seconds, shim)."""
    from .mpi import mpi_env

    base = mpi_env(env)
    shim = shim or shim_for(argv, base)
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    for old in raw_dir.glob("rank-*.pmr"):
        old.unlink()
    e = preload_env(shim, raw_dir, base)
    t0 = time.monotonic()
    try:
        # own process group: a timeout stops mpiexec *and* its ranks (SIGTERM first: the shim
        # writes what it buffered; SIGKILL after a grace period)
        proc = subprocess.Popen(argv, env=e, start_new_session=True)
    except FileNotFoundError:
        raise InputError(f"command not found: {argv[0]}") from None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_job(proc)
        rc = proc.returncode if proc.returncode is not None else -9
    except KeyboardInterrupt:
        stop_job(proc)
        raise
    return rc, time.monotonic() - t0, shim


def trace_mpi(argv: list[str], out: str | Path, *, parameters: dict[str, Any] | None = None,
              description: str = "", keep_raw: bool = False, timeout_s: float | None = None,
              progress: Callable[[float, str], None] | None = None) -> TraceResult:
    """Trace ``argv`` (e.g. ``mpiexec -n 4 ./app``) into the signature folder ``out``."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder: the signature is a folder (give a new name)", path=out)
    progress = progress or (lambda f, m: None)
    progress(0.0, "building the PMPI shim")
    raw_dir = Path(tempfile.mkdtemp(prefix=".raw-", dir=out.parent if out.parent.exists() else None))
    try:
        progress(0.1, "running the traced program")
        rc, wall, shim = run_traced(argv, raw_dir, timeout_s=timeout_s)
        progress(0.8, "reading the raw traces")
        raw = read_raw_dir(raw_dir)
        header = SignatureHeader(
            name=out.name, n_ranks=raw.n_ranks, source_format="pmpi", description=description,
            command=shlex.join(argv), parameters=dict(parameters or {}), rank_hosts=raw.rank_hosts,
            mpi_library=shim.libmpi, mpi_thread_level=raw.thread_level, traced_wall_s=float(wall),
            provenance=provenance(command=shlex.join(argv)) | {
                "shim_source_hash": shim.source_hash, "exit_code": int(rc),
                "valgrind_requests": bool(raw.has_valgrind), "fortran_library": shim.fortran_library,
                "n_large_count_calls": int(raw.stats.get("n_large_count_calls", 0)),
                "warnings": list(raw.warnings),
                # the tracer's own time per rank (its reads of smaps_rollup, its buffer flushes), left
                # out of the bursts (pmac.rawtrace.tracer_own_s)
                "tracer_own_s": [round(x, 9) for x in raw.tracer_own_s]} | memory_pages(raw.pages),
        )
        sig = make_signature(header, raw.events, requests=raw.requests, vcounts=raw.vcounts, comms=raw.comms)
        progress(0.9, "saving the signature")
        save_signature(sig, out)
        if keep_raw:
            dest = out / "raw"
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(raw_dir, dest)
        progress(1.0, "done")
        return TraceResult(signature=sig, path=out, returncode=rc, wall_s=wall, shim=shim, raw=raw)
    finally:
        shutil.rmtree(raw_dir, ignore_errors=True)

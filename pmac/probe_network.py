"""Run the network probe (``probes/network.py``) and fit a :class:`NetworkModel` from it.

Two ways in:

- **Launched** (the default, and what ``pmac probe`` on one machine does): pmac starts
  ``mpiexec -n 2 python probes/network.py`` itself (``pmac.mpi.launch_command``), or any
  launcher command you pass as ``mpiexec_prefix`` (e.g. ``["mpiexec", "-n", "4", "-hosts",
  "a,b"]`` or a wrapper that enters network namespaces); ``node_map`` (``[0, 0, 1, 1]``) says
  which ranks share a node where processor names mislead.
- **In the job**: when this process is itself one rank of an MPI job of two or more ranks
  (``mpiexec -n 4 pmac probe ...``), every rank calls :func:`measure_network` and the probe runs
  in-process over ``MPI.COMM_WORLD``; rank 0 fits and the model is broadcast to every rank
  (the raw tables only on rank 0; only rank 0 should write files).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .calibrate_exchange import calibrate_network
from .errors import ProbeError, ToolMissingError
from .fit_network import QUANTILE, fit_network
from .mpi import THREAD_CLASSES, find_mpi, launch_command, mpi_env, stop_job
from .profile import RAW_TABLES, NetworkModel
from .table import load_tables

Progress = Callable[[float, str], None]

#: the raw tables this probe fills
TABLES = ("pingpong", "collective")


def probe_script() -> Path:
    """Path of ``probes/network.py`` (found without importing it: importing starts MPI)."""
    spec = importlib.util.find_spec("probes.network")
    if spec is not None and spec.origin:
        return Path(spec.origin)
    path = Path(__file__).resolve().parents[1] / "probes" / "network.py"
    if not path.exists():
        raise ToolMissingError("probes/network.py not found (is pmac installed from its source tree?)")
    return path


def job_size() -> int:
    """Ranks of the MPI job this process belongs to (1 when not started by mpiexec)."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS"):
        if var == "SLURM_NTASKS" and "SLURM_STEP_ID" not in os.environ:
            continue
        v = os.environ.get(var)
        if v and v.isdigit():
            return int(v)
    return 1


def _check_mpi4py() -> None:
    if importlib.util.find_spec("mpi4py") is None:
        raise ToolMissingError("mpi4py is not installed: pip install mpi4py mpich")


def read_record(path: str | Path) -> tuple[dict[str, pd.DataFrame], dict]:
    """Tables and meta of a probe record written by ``probes/network.py``."""
    tables = load_tables(path, {k: RAW_TABLES[k] for k in TABLES}, required=("pingpong",))
    with np.load(path, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta/json"])) if "meta/json" in npz.files else {}
    return tables, meta


def model_from_record(tables: dict[str, pd.DataFrame], meta: dict, quantile: float = QUANTILE) -> NetworkModel:
    """The network model of a probe record, every point at ``quantile`` of its repetitions (pmac
    probe: the lower quartile, pmac.fit_network.QUANTILE; pmac.pool: the quantile of its statistic)."""
    if tables["pingpong"].empty:
        raise ProbeError("the network probe measured no pair of ranks")
    # a record without collective_loop is a probe's before 28 Nov 2026: mpi4py loops
    network = fit_network(tables, mpi_library=str(meta.get("mpi_library", "")), quantile=quantile,
                          collective_loop=str(meta.get("collective_loop", "mpi4py")))
    # a record without bcast_root is a probe's before 27 Nov 2026: root 0 every call
    network = dataclasses.replace(network, thread_level=str(meta.get("thread_level", "")),
                                  bcast_root=str(meta.get("bcast_root", "fixed")))
    return calibrate_network(network, tables["pingpong"], quantile)


def measure_networks(*, quick: bool, workdir: Path, progress: Progress | None = None,
                     thread_levels: tuple[str, ...] = THREAD_CLASSES, **kw
                     ) -> tuple[NetworkModel, tuple[NetworkModel, ...], dict[str, pd.DataFrame]]:
    """The network measured at each of ``thread_levels`` (one probe run each, launched): the first
    level's model, the others' (``MachineProfile.network_variants``) and the raw tables (the first
    level's as ``pingpong`` / ``collective``, the others' as ``pingpong_<level>`` ...)."""
    progress = progress or (lambda f, m: None)
    models, raw = [], {}
    for i, level in enumerate(thread_levels):
        def sub(f, m, i=i, level=level):
            progress((i + f) / len(thread_levels), f"{m} (MPI_THREAD_{level.upper()})")
        model, tables = measure_network(quick=quick, workdir=Path(workdir) / level, progress=sub,
                                        thread_level=level, in_job=False, **kw)
        models.append(model)
        raw |= {(t if i == 0 else f"{t}_{level}"): df for t, df in tables.items()}
    return models[0], tuple(models[1:]), raw


def measure_network(*, quick: bool, workdir: Path, progress: Progress | None = None,
                    mpiexec_prefix: list[str] | None = None, node_map: list[int] | None = None,
                    n_ranks: int = 2, backend: str = "auto", timeout_s: float | None = None,
                    in_job: bool | None = None, probe_args: list[str] = (),
                    fit: bool = True, thread_level: str | None = None
                    ) -> tuple[NetworkModel | None, dict[str, pd.DataFrame]]:
    """Measure the network and fit it; returns the model and the raw tables (every repetition);
    ``fit=False``: no model (None), e.g. for ``probe_args=["--pollution-only"]``.

    ``workdir`` receives ``network.npz`` (the probe record) and ``network.log``. ``probe_args``
    are passed on to ``probes/network.py`` (e.g. ``["--max-bytes", "65536", "--no-collectives"]``).
    ``thread_level``: the MPI thread level the probe initialises MPI at (None: the probe's
    default, multiple; in the job: the job's level, whatever this says).
    No MPI ->
    :class:`ToolMissingError`; a failed or timed-out run -> :class:`ProbeError`.
    """
    progress = progress or (lambda f, m: None)
    _check_mpi4py()
    if in_job is None:
        in_job = job_size() > 1 and mpiexec_prefix is None
    if in_job:
        return _measure_in_job(quick=quick, progress=progress, node_map=node_map, backend=backend)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "network.npz"
    if out.exists():
        out.unlink()
    argv = [sys.executable, str(probe_script()), "--out", str(out), "--progress", "--backend", backend]
    if quick:
        argv.append("--quick")
    if thread_level:
        argv += ["--thread-level", thread_level]
    argv += list(probe_args)
    if node_map is not None:
        argv += ["--node-map", ",".join(str(int(x)) for x in node_map)]
    if mpiexec_prefix is not None:
        cmd = list(mpiexec_prefix) + argv
    else:
        cmd = launch_command(n_ranks, argv, mpi=find_mpi())
    timeout_s = timeout_s if timeout_s is not None else (180.0 if quick else 1800.0)
    log = workdir / "network.log"
    try:
        _run_with_progress(cmd, log, progress, timeout_s)
    except FileNotFoundError as exc:
        raise ToolMissingError(f"cannot start the network probe: {exc}") from None
    if not out.exists():
        raise ProbeError(f"the network probe wrote no record (see {log})")
    tables, meta = read_record(out)
    return (model_from_record(tables, meta) if fit else None), tables


def _run_with_progress(cmd: list[str], log: Path, progress: Progress, timeout_s: float) -> None:
    import threading

    with open(log, "w") as logf:
        logf.write("$ " + " ".join(cmd) + "\n")
        logf.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=mpi_env(), start_new_session=True)
        timed_out = threading.Event()

        def stop():
            timed_out.set()
            stop_job(proc)

        timer = threading.Timer(timeout_s, stop)
        timer.start()
        tail: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("progress "):
                    parts = line.split(None, 2)
                    try:
                        progress(float(parts[1]), parts[2].strip() if len(parts) > 2 else "")
                    except ValueError:
                        pass
                    continue
                logf.write(line)
                if "Warning" not in line and line.strip() and "@numba" not in line:
                    tail = (tail + [line.strip()])[-3:]
            rc = proc.wait()
        except BaseException:
            stop_job(proc)
            raise
        finally:
            timer.cancel()
    if rc != 0 or timed_out.is_set():
        why = f"did not finish in {timeout_s:g} s (stopped with its ranks)" if timed_out.is_set() \
            else f"exited with code {rc}"
        last = tail[-1] if tail else "no output"
        raise ProbeError(f"the network probe {why}: {last} (log: {log})")


def _measure_in_job(*, quick: bool, progress: Progress, node_map: list[int] | None,
                    backend: str) -> tuple[NetworkModel, dict[str, pd.DataFrame]]:
    script = probe_script()
    spec = importlib.util.spec_from_file_location("pmac_probes_network", script)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    nm = None if node_map is None else ",".join(str(int(x)) for x in node_map)
    raw, meta = mod.run(comm, quick=quick, node_map=nm, backend=backend, report=progress)
    model, tables, err = None, {}, None
    if comm.Get_rank() == 0:
        tables = {k: RAW_TABLES[k].coerce(pd.DataFrame(raw[k])) for k in TABLES}
        try:
            model = model_from_record(tables, meta)
        except ProbeError as exc:
            err = str(exc)
    model, err = comm.bcast((model, err), root=0)
    if err:
        raise ProbeError(err)
    return model, tables

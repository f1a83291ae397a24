"""Finding and launching MPI: one place for mpiexec, its flags and its environment.

The project's MPI is the ``mpich`` wheel (its ``mpiexec`` sits beside the Python running
pmac). Open MPI (a system MPI) needs ``--oversubscribe`` beyond the core count and, as root,
``OMPI_ALLOW_RUN_AS_ROOT*``: without them it exits 0 having run nothing. Set here, not by hand.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import PmacError, ToolMissingError


#: MPI thread levels, by the code the tracer records for them (1..4; 0: not recorded)
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")


def check_thread_level(name: str, level: str) -> None:
    """ValueError unless ``level`` is one of THREAD_LEVELS or '' (not recorded)."""
    if level and level not in THREAD_LEVELS:
        raise ValueError(f"{name} must be one of {', '.join(THREAD_LEVELS)} or empty, got {level!r}")


#: the classes of thread level a library's costs differ by (thread_level_class), the main
#: network's first: C and Fortran programs calling MPI_Init run at single, mpi4py programs at
#: multiple (its default); ``pmac probe`` measures the network at each
THREAD_CLASSES = ("single", "multiple")


def thread_level_class(level: str) -> str:
    """The class of thread level a library's cost depends on: ``'multiple'`` or ``'single'``
    (single, funneled and serialized: MPICH and Open MPI take their locks only at
    MPI_THREAD_MULTIPLE; MPICH 4-5 also gives up its shared-memory collectives there, and a
    2-rank 8 B allreduce costs 1.7 us instead of 0.3 on devbox); ``''`` for an unknown level."""
    if level == "multiple":
        return "multiple"
    return "single" if level in THREAD_LEVELS else ""


@dataclass(frozen=True, kw_only=True)
class MpiInstall:
    mpiexec: str
    mpicc: str | None
    flavour: str  # 'mpich' or 'openmpi' or 'unknown'
    version_text: str


def _bindir_candidates() -> list[Path]:
    here = Path(sys.executable).parent
    return [here, Path(sys.prefix) / "bin"]


def find_mpi(mpiexec: str | None = None) -> MpiInstall:
    """Locate mpiexec (argument, then beside this Python, then PATH) and identify it."""
    exe = mpiexec or os.environ.get("PMAC_MPIEXEC")
    if not exe:
        for d in _bindir_candidates():
            if (d / "mpiexec").exists():
                exe = str(d / "mpiexec")
                break
    if not exe:
        exe = shutil.which("mpiexec")
    if not exe or not Path(exe).exists() and not shutil.which(exe):
        raise ToolMissingError("no MPI found: install the project's MPI with `pip install mpich mpi4py` "
                               "(or set PMAC_MPIEXEC to an mpiexec)")
    bindir = Path(exe).parent
    mpicc = bindir / "mpicc"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
        text = (out.stdout + out.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolMissingError(f"{exe} does not run: {exc}") from None
    low = text.lower()
    flavour = "openmpi" if ("open mpi" in low or "open-rte" in low or "openrte" in low) else (
        "mpich" if ("hydra" in low or "mpich" in low) else "unknown")
    return MpiInstall(mpiexec=exe, mpicc=str(mpicc) if mpicc.exists() else shutil.which("mpicc"),
                      flavour=flavour, version_text=text.splitlines()[0] if text else "")


def mpi_env(base: dict | None = None) -> dict:
    """Environment for launching: Open MPI's run-as-root permission, quiet MPICH warnings."""
    env = dict(os.environ if base is None else base)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def launch_command(n_ranks: int, argv: list[str], *, mpi: MpiInstall | None = None,
                   extra: list[str] | None = None, env_vars: dict[str, str] | None = None) -> list[str]:
    """``mpiexec -n N [flags] argv`` with the flags this MPI needs."""
    mpi = mpi or find_mpi()
    cmd = [mpi.mpiexec, "-n", str(n_ranks)]
    if mpi.flavour == "openmpi":
        if n_ranks > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        for k, v in (env_vars or {}).items():
            cmd += ["-x", f"{k}={v}"]
    else:
        for k, v in (env_vars or {}).items():
            cmd += ["-genv", k, v]
    return cmd + list(extra or []) + list(argv)


#: what every example program (examples/README.md) and benchmark program prints: its timed loop
WALL_S = re.compile(r"wall_s=([0-9.eE+-]+)")


def timed_run(argv: list[str], *, env: dict | None = None, what: str = "", timeout_s: float = 600) -> float:
    """Run a launch command (``launch_command``'s, or another launcher's) and return the
    ``wall_s=`` its program printed; a failed run, or one that printed none, is a one-line
    PmacError naming ``what`` with the exit code and the end of its standard error; one that
    outlasts ``timeout_s`` is stopped with its ranks (:func:`stop_job`) and is a PmacError too."""
    rc, out, err = run_job(argv, env=env, what=what, timeout_s=timeout_s)
    m = WALL_S.search(out)
    if rc != 0 or not m:
        why = err.strip()[-300:].replace("\n", " | ") or "no wall_s= in its output"
        raise PmacError(f"{what or argv[0]} failed (exit {rc}): {why}")
    return float(m.group(1))


def run_job(argv: list[str], *, env: dict | None = None, what: str = "", timeout_s: float = 600
            ) -> tuple[int, str, str]:
    """Run a launch command in a session of its own: ``(exit code, stdout, stderr)``. One that
    outlasts ``timeout_s`` (or is interrupted) is stopped with its ranks (:func:`stop_job`); the
    timeout is a PmacError naming ``what``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_job(proc)
        proc.communicate()
        raise PmacError(f"{what or argv[0]} did not finish in {timeout_s:g} s: stopped with its ranks") from None
    except BaseException:
        stop_job(proc)
        raise
    return proc.returncode, out, err


def stop_job(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """Stop a launch started with ``start_new_session=True`` and return once the launcher, the rest
    of its group *and* every process it started are gone (a traced rank writes its records on
    SIGTERM). MPICH's Hydra starts its proxy and each rank in a session of its own, outside the
    launcher's group: they are found by parentage (/proc) before any signal goes out. The launchers
    (the processes with children: mpiexec, Hydra's proxy) are stopped (SIGSTOP) first and the ranks
    get SIGTERM alone: a launcher that sees one rank die kills the others with SIGKILL (seen here: a
    rank cut off while writing its records), and mpiexec can exit while its ranks still write (seen
    in CI). Once the ranks are gone or ``grace_s`` has passed, the launchers get SIGTERM and
    SIGCONT, then everything left SIGKILL after another ``grace_s``."""
    started, parents = _descendants_and_parents(proc.pid)
    launchers = {proc.pid} | (parents & started)
    ranks = started - launchers
    _signal_all(launchers, signal.SIGSTOP)
    try:
        _signal_all(ranks, signal.SIGTERM)
        _wait_until(lambda: not any(map(_running, ranks)), grace_s)
    finally:
        _signal_all(launchers, signal.SIGTERM)
        _signal_all(launchers, signal.SIGCONT)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_all(started, sig)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        if _wait_until(lambda: proc.poll() is not None and not _group_alive(proc.pid)
                       and not any(map(_running, started)), grace_s):
            return
    proc.wait()


def _signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_until(done, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _stat_fields(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat after "pid (comm) ": state, ppid, pgrp, ... (None if gone)."""
    try:
        stat = (Path("/proc") / pid / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _proc_stats():
    """(pid, :func:`_stat_fields`) of every process in /proc (none without it)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for d in proc.iterdir():
        if d.name.isdigit():
            f = _stat_fields(d.name)
            if f is not None:
                yield int(d.name), f


def _running(pid: int) -> bool:
    """Is process ``pid`` there and not a zombie (which nobody may reap here)?"""
    f = _stat_fields(str(pid))
    return f is not None and f[0] != "Z"


def _descendants_and_parents(pid: int) -> tuple[set[int], set[int]]:
    """The processes below ``pid`` (children, theirs, ...), from /proc (empty without it), and the
    set of every process that has a child."""
    children: dict[int, list[int]] = {}
    for p, f in _proc_stats():
        if len(f) > 1:
            children.setdefault(int(f[1]), []).append(p)
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out, set(children)


def _group_alive(pgid: int) -> bool:
    """Does a process of group ``pgid`` still run (zombies, which nobody may reap here, do not
    count; from /proc, else any process at all)?"""
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    return any(len(f) > 2 and f[2] == str(pgid) and f[0] != "Z" for _, f in _proc_stats())

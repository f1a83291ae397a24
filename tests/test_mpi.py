"""pmac.mpi.timed_run: the wall_s= a launched program prints, and one-line errors otherwise."""

from __future__ import annotations

import sys

import pytest

from pmac.errors import PmacError
from pmac.mpi import launch_command, timed_run


def test_returns_the_printed_wall_time():
    argv = [sys.executable, "-c", "print('stream n=4 wall_s=0.012500 checksum=1.0')"]
    assert timed_run(argv, what="x") == 0.0125


def test_failed_run_names_what_exit_code_and_stderr():
    argv = [sys.executable, "-c", "import sys; print('wall_s=1'); sys.stderr.write('boom\\nbad input\\n'); "
                                  "sys.exit(3)"]
    with pytest.raises(PmacError) as exc:
        timed_run(argv, what="case-a")
    msg = str(exc.value)
    assert msg == "case-a failed (exit 3): boom | bad input"
    assert "\n" not in msg


def test_run_without_wall_time_is_an_error():
    with pytest.raises(PmacError, match=r"^case-b failed \(exit 0\): no wall_s= in its output$"):
        timed_run([sys.executable, "-c", "print('done')"], what="case-b")


@pytest.mark.requires("mpi")
def test_two_ranks_through_the_launcher():
    code = ("from mpi4py import MPI; c = MPI.COMM_WORLD; t = c.allreduce(c.rank + 1.5); "
            "print(f'wall_s={t}') if c.rank == 0 else None")
    assert timed_run(launch_command(2, [sys.executable, "-c", code]), what="allreduce") == 4.0


@pytest.mark.requires("mpi")
def test_a_run_past_its_timeout_is_stopped_with_its_ranks(tmp_path):
    """MPICH's Hydra starts each rank in a session of its own: killing mpiexec alone left them
    running. timed_run stops the launcher and every process below it, and says so in one line."""
    import time

    pids = tmp_path / "pids"
    code = f"import os, time; open({str(pids)!r} + str(os.getpid()), 'w').close(); time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(PmacError, match=r"^hang did not finish in 3 s: stopped with its ranks$"):
        timed_run(launch_command(2, [sys.executable, "-c", code]), what="hang", timeout_s=3)
    assert time.monotonic() - t0 < 20
    ranks = [int(p.name[len("pids"):]) for p in tmp_path.glob("pids*")]
    assert len(ranks) == 2

    def running(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    assert not any(running(p) for p in ranks)

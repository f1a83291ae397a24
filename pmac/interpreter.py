"""What an MPI call costs when a Python interpreter makes it.

A program that calls MPI from Python (mpi4py) runs the interpreter between its calls. The
interpreter's own instructions on the way to the library (mpi4py's wrapper, argument checks) are
in the program's memory signature, which counts every instruction of a burst, and are priced with
the burst. What the signature cannot see is what the interpreter does to the call itself: its
code and data evict the library's from the caches and the branch predictors, so the call runs
longer than the same call from C, which the network probe times (compiled loops).

The network probe's ``interpreter`` test (probes/network.py ``_interpreter_calls``) measures it:
an 8 B Allreduce and an 8 B Sendrecv between two ranks from an mpi4py loop, from the compiled
loop, and mpi4py's own part of each (the call on a one-rank communicator, or to MPI_PROC_NULL),
the three one after another in each repetition; ``mpi4py - own part - compiled`` is the cost
(pmac.fit_network.fit_interpreter; ``NetworkModel.interpreter_collective_s`` and
``interpreter_p2p_s``). The replay charges it to every call of a Python program that talks to
another rank: collectives the Allreduce's figure, point-to-point calls (sends, receives and their
non-blocking forms, Sendrecv) the Sendrecv's; added to the call's start as pmac.pollution's cost
is, and counted as communication. Waits, tests and local calls pay nothing.

Why: cg_mpi4py-n2-3000 on the EPYC VM (28 Nov 2026, ``python bench/accuracy``'s ``call_costs``)
traced its Allreduces at 1.72-3.25 us a call and its Sendrecvs at 1.45-2.75 us where the replay
priced 1.53-2.07 and 1.16-1.56 us from compiled loops; its independent prediction ran -10.8 to
-17.1 % short in six runs. With these figures (the test's, at MPI_THREAD_MULTIPLE: 0.22-0.32 us an
Allreduce, 0.74-0.88 us a Sendrecv) the five runs of 03:48-04:47 predicted it at -10.5 to +1.3 %,
where the same runs with ``--no-interpreter`` give -7.7 to -18.8 % (four of five beyond 15 %);
cg_mpi4py-n2-200000 (800 calls in 58 ms) moved by +0.5 points.

Limits: the test calls back to back, with only the loop's own interpreter work between the
calls. Its Sendrecv costs more from Python than cg_mpi4py's traced Sendrecvs show inside the call
(0.15-0.57 us above the replay's price in seven runs of 28 Nov, against the test's 0.74-0.88): the
test's figure may include what lands outside the call (mpi4py's wrapper running colder, which a
traced burst includes and a convolved one does not), not measured apart. One figure per kind of
call, taken at 8 B: a per-call cost, not a per-byte one (the interpreter does not touch the
payload). The cost is inside the call: ``pmac predict``'s timeline starts the call that much
earlier, so ``--calls`` and ``bench/accuracy``'s ``call_costs`` count it (since 28 Nov 2026 07:00;
before, they left out what is charged at a call's start, this cost and pmac.pollution's).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .profile import NetworkModel
from .trace import COLLECTIVE_OPS


def _file_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def is_interpreter(name: str) -> bool:
    """Whether a shared object's or a command word's file name is a Python interpreter's."""
    base = _file_name(name)
    return base.startswith("libpython") or re.fullmatch(r"python[0-9.]*[dmu]*", base) is not None


def python_program(memory: dict | None, command: str) -> str | None:
    """The file name of the interpreter a traced program ran in (its memory signature's functions
    run in libpython or a python executable, else its command runs python), None for a compiled
    program."""
    fn = memory.get("functions") if memory else None
    if fn is not None and "object" in fn:
        found = next((str(o) for o in fn["object"].astype(str).unique() if is_interpreter(str(o))), None)
        if found is not None:
            return _file_name(found)
    found = next((w for w in command.split() if is_interpreter(w)), None)
    return None if found is None else _file_name(found)


def has_figures(net: NetworkModel | None) -> bool:
    """Whether a network carries the interpreter test's figures (profiles probed since 28 Nov 2026
    with the numba backend)."""
    return net is not None and (net.interpreter_collective_s is not None or net.interpreter_p2p_s is not None)


def event_excess(events: pd.DataFrame, net: NetworkModel, node_of_rank: np.ndarray,
                 comms: pd.DataFrame | None = None) -> np.ndarray:
    """Seconds each event's call pays for being made from an interpreter (module doc): the
    collective figure for a collective, the point-to-point figure for a call to a peer, 0 for
    calls without a peer (waits, tests, local calls, MPI_PROC_NULL) and where the figure is None."""
    from .pollution import NO_LINK, event_links

    op = events["op"].to_numpy(np.int64)
    talks = event_links(events, node_of_rank, comms) != NO_LINK
    coll = np.isin(op, np.array(sorted(int(o) for o in COLLECTIVE_OPS)))
    x_coll = net.interpreter_collective_s or 0.0
    x_p2p = net.interpreter_p2p_s or 0.0
    return np.where(talks, np.where(coll, x_coll, x_p2p), 0.0)

#!/usr/bin/env python3
"""Network probe (maps_ping-like): ping-pong, streaming bandwidth, send/receive overheads, collectives.

Runs on its own under mpiexec (copy this file to a new system; it needs numpy and mpi4py, and
uses numba + numba-mpi when present to keep the interpreter out of the timed loops)::

    mpiexec -n 2 python probes/network.py --quick --out rec.npz
    mpiexec -n 4 python probes/network.py --node-map 0,0,1,1 --out rec.npz   # or PMAC_NODE_MAP=0,0,1,1

``--thread-level single|multiple`` (default multiple, mpi4py's) sets the MPI thread level MPI is
initialised at: MPICH and Open MPI lock only at MPI_THREAD_MULTIPLE, and MPICH then gives up its
shared-memory collectives, so the two levels are two networks (``pmac probe`` measures both).

Rank 0 writes ``rec.npz`` with one array per ``table/column`` (tables ``pingpong`` and
``collective``, the layout of ``pmac.profile.RAW_TABLES``; every repetition kept) and
``meta/json`` (MPI library version, backend, node names and map, parameters).

What is measured, between rank 0 and the first rank on the same node (``intra_node``) and the
first rank on another node (``inter_node``); placement from ``MPI.Get_processor_name()`` unless
``--node-map`` says otherwise (network namespaces keep the host's name):

- ``pingpong``: one-way time = round trip / 2, sizes 0 B and 1 B .. 16 MiB (powers of two; the
  full run adds the midpoints), OSU-style warm-up, a batch of iterations per repetition sized
  to take ``--batch-ms`` (many iterations for small messages, few for large); each repetition
  sweeps every size, so load from elsewhere spreads over sizes rather than spoiling one;
  sizes whose single round trip exceeds 0.25 s (full run: 1 s) are skipped (slow links);
- ``stream``: a window of 64 non-blocking sends, then a 1-byte acknowledgement (OSU bw); the
  time per message of the window;
- ``burst``: after ``--burst-idle-ms`` of silence (20 ms), one message and a 1-byte
  acknowledgement; the time of the pair (the fit takes half the 0-byte pair off). A link with a
  token-bucket shaper (a tc tbf, a cloud NIC's burst allowance) passes a message after idle at
  line speed and sustained traffic at its rate: the ping-pong, which never idles, cannot tell
  the line from the shaper; sizes up to about a quarter of the slow-size limit at the stream rate;
- ``exchange``: both ranks send each other a message at once and wait for both (MPI_Sendrecv;
  the numba loop posts Irecv + Isend + Waitall, as MPICH's Sendrecv does), sizes 0, 8, 64 and
  512 B; time per exchange. On TCP this costs more than a one-way hop (a message that arrives
  while its receiver is inside its own send waits for that send); the fit keeps the excess
  over what the rest of the link model prices (pmac.calibrate_exchange);
- ``pollution`` / ``pollution_pause``: an 8 B exchange after each rank swept ``msg_bytes`` bytes
  of a buffer of its own (one write per 64-byte line: what a compute burst streaming that much
  data does to the caches), against the same exchange after a pause of the same length without
  the sweep; sizes 16 KiB .. 64 MiB (powers of four), the two kinds alternating call by call; per
  repetition the median over calls, averaged over the pair. The difference is what the call pays
  for finding the library's and the kernel's code and data evicted (pmac.pollution);
- ``send_overhead``: time inside the send call of a small message (LogP o_s); ``recv_overhead``:
  time inside the receive call after delaying the receive well past the message's arrival (o_r);
  each repetition is the median over its calls;
- ``pycall`` (Python backend only): the interpreter's cost of one Send and one Recv (on
  ``MPI.PROC_NULL``), which a Python timed loop adds to every one-way time; the fit subtracts
  it ("corrected") and the raw values stay in the table;
- ``collective``: barrier, bcast, allreduce (float64 sum), alltoall on the first n ranks for n =
  1, 2, 4, .. and all ranks; ``msg_bytes`` is this rank's buffer (alltoall: the whole send
  buffer, n blocks); time per call is the slowest rank's; n = 1 gives the per-call floor. Bcast's
  root moves to the next rank every call (:func:`collective_call`). With the numba backend the
  loops are compiled (:func:`compiled_collectives`: numba calling the MPI library's C functions
  through ctypes, on the probe's sub-communicators) and time what a C program's call costs; with
  the Python backend they are mpi4py loops, whose interpreter share the fit estimates by the
  one-rank floor (``meta["collective_loop"]``: ``compiled`` or ``mpi4py``). The floor leaves part
  of it: on the EPYC VM (28 Nov 2026, MPI_THREAD_SINGLE) a 2-rank 8 B allreduce cost 0.25 us in C
  and in the compiled loop, 1.03 us in the mpi4py loop against a 0.65 us floor; in the host's
  slower spells 0.71, 0.71 and 1.5 us.
- ``interpreter`` (numba backend; rows in the ``collective`` table, ops :data:`INTERPRETER_OPS`):
  an 8 B Allreduce and Sendrecv of ranks 0 and 1 from an mpi4py loop, from the compiled loop,
  and mpi4py's own part of each (:func:`_interpreter_calls`): what a call from a Python program
  costs beyond the same call from C (pmac.interpreter prices it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

PP_COLUMNS = (("placement", "U16"), ("test", "U16"), ("msg_bytes", "int64"), ("rep", "int32"),
              ("time_s", "float64"))
COLL_COLUMNS = (("placement", "U16"), ("op", "U16"), ("msg_bytes", "int64"), ("n_ranks", "int32"),
                ("rep", "int32"), ("time_s", "float64"))
COLL_OPS = ("barrier", "bcast", "allreduce", "alltoall")
WINDOW = 64
#: silence before each ``burst`` message: refills a bucket of up to 20 ms at its rate
BURST_IDLE_MS = 20.0
MAX_BYTES = 16 << 20
EXCHANGE_SIZES = (0, 8, 64, 512)
#: bytes each rank sweeps before a ``pollution`` exchange
POLLUTION_SIZES = tuple(4**k for k in range(7, 14))  # 16 KiB .. 64 MiB


def aligned_buffer(n_bytes: int) -> np.ndarray:
    """A zeroed byte buffer starting on a 2 MiB boundary: numpy asks for transparent huge pages
    on large arrays (madvise), and the alignment lets them cover the whole buffer, as in the C
    reference (bench/probes/pingpong.c), so large-message bandwidth compares like with like."""
    huge = 2 << 20
    raw = np.zeros(n_bytes + huge, np.uint8)
    off = (-raw.ctypes.data) % huge
    return raw[off:off + n_bytes]


def pingpong_sizes(quick: bool, max_bytes: int = MAX_BYTES) -> list[int]:
    sizes = {0}
    k = 1
    while k <= max_bytes:
        sizes.add(k)
        if not quick and k >= 4:
            sizes.add(k + k // 2)
        k *= 2
    return sorted(s for s in sizes if s <= max_bytes)


def iterations(n_bytes: int, batch_s: float, cap: int = 5000) -> int:
    """Iterations per repetition: a batch of about ``batch_s`` on a conservative link guess."""
    guess = 3e-6 + n_bytes / 1e9
    return int(max(2, min(cap, batch_s / (2 * guess))))


# ---------------------------------------------------------------- timed loops (numba backend)

#: ints of room per MPI_Status in the kernels' MPI_Waitall (MPICH's status is 5 ints, Open MPI's 6:
#: numba-mpi's own waitall sizes its buffer for MPICH's, and under Open MPI the library wrote past
#: it, "double free or corruption" in the streaming test, 28 Nov 2026, Open MPI 5.0.11 wheel)
STATUS_INTS = 16


def _waitall_kernel():
    """MPI_Waitall on an array of numba-mpi requests, with room for any MPI's statuses."""
    import ctypes

    import numba
    from numba_mpi.common import libmpi

    mpi_waitall = libmpi.MPI_Waitall
    mpi_waitall.restype = ctypes.c_int
    mpi_waitall.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]

    @numba.njit
    def waitall(reqs):
        statuses = np.empty(reqs.size * STATUS_INTS, dtype=np.intc)
        return mpi_waitall(reqs.size, reqs.ctypes.data, statuses.ctypes.data)

    return waitall


def _numba_kernels():
    import numba
    import numba_mpi as nm

    waitall = _waitall_kernel()

    @numba.njit(cache=False)  # numba-mpi uses ctypes pointers: not cacheable
    def pingpong(buf, n_bytes, iters, first, peer):
        view = buf[:n_bytes]
        t0 = nm.wtime()
        for _ in range(iters):
            if first:
                nm.send(view, peer, 1)
                nm.recv(view, peer, 1)
            else:
                nm.recv(view, peer, 1)
                nm.send(view, peer, 1)
        return nm.wtime() - t0

    @numba.njit(cache=False)  # numba-mpi uses ctypes pointers: not cacheable
    def stream(buf, n_bytes, window, iters, first, peer, ack, reqs):
        t0 = nm.wtime()
        for _ in range(iters):
            for w in range(window):
                view = buf[w * n_bytes:(w + 1) * n_bytes]
                if first:
                    _, r = nm.isend(view, peer, 2)
                else:
                    _, r = nm.irecv(view, peer, 2)
                reqs[w] = r[0]
            waitall(reqs)
            if first:
                nm.recv(ack, peer, 3)
            else:
                nm.send(ack, peer, 3)
        return nm.wtime() - t0

    @numba.njit(cache=False)  # numba-mpi uses ctypes pointers: not cacheable
    def overhead(buf, n_bytes, iters, first, peer, ack, delay_s):
        # A two-way handshake before each message: the receiver's delay starts only once the
        # sender holds the go-ahead (a plain send may sit undelivered while its sender computes).
        view = buf[:n_bytes]
        samples = np.empty(iters)
        for i in range(iters):
            if first:
                nm.recv(ack, peer, 5)
                nm.send(ack, peer, 6)
                t0 = nm.wtime()
                nm.send(view, peer, 4)
                samples[i] = nm.wtime() - t0
            else:
                nm.send(ack, peer, 5)
                nm.recv(ack, peer, 6)
                t0 = nm.wtime()
                while nm.wtime() - t0 < delay_s:
                    pass
                t1 = nm.wtime()
                nm.recv(view, peer, 4)
                samples[i] = nm.wtime() - t1
        # median: a few calls wait for a descheduled partner on a shared machine
        return np.median(samples)

    @numba.njit(cache=False)  # numba-mpi uses ctypes pointers: not cacheable
    def burst(buf, n_bytes, first, peer, ack):
        view = buf[:n_bytes]
        t0 = nm.wtime()
        if first:
            nm.send(view, peer, 7)
            nm.recv(ack, peer, 8)
        else:
            nm.recv(view, peer, 7)
            nm.send(ack, peer, 8)
        return nm.wtime() - t0

    @numba.njit(cache=False)  # numba-mpi uses ctypes pointers: not cacheable
    def exchange(buf, rbuf, n_bytes, iters, peer, reqs):
        view = buf[:n_bytes]
        rview = rbuf[:n_bytes]
        t0 = nm.wtime()
        for _ in range(iters):
            _, r = nm.irecv(rview, peer, 14)
            reqs[0] = r[0]
            _, r = nm.isend(view, peer, 14)
            reqs[1] = r[0]
            waitall(reqs)
        return nm.wtime() - t0

    return pingpong, stream, overhead, burst, exchange


class NumbaBackend:
    name = "numba-mpi"

    def __init__(self, comm):
        from numba_mpi import RequestType

        self.comm = comm
        self._pp, self._st, self._oh, self._bu, self._ex = _numba_kernels()
        self.reqs = np.empty(WINDOW, dtype=RequestType)
        self.reqs2 = np.empty(2, dtype=RequestType)
        self.ack = np.zeros(1, np.uint8)

    def pingpong(self, buf, n, iters, first, peer):
        return self._pp(buf, n, iters, first, peer)

    def stream(self, buf, n, iters, first, peer):
        return self._st(buf, n, WINDOW, iters, first, peer, self.ack, self.reqs)

    def overhead(self, buf, n, iters, first, peer, delay_s):
        return self._oh(buf, n, iters, first, peer, self.ack, delay_s)

    def burst(self, buf, n, first, peer):
        return self._bu(buf, n, first, peer, self.ack)

    def exchange(self, buf, rbuf, n, iters, peer):
        return self._ex(buf, rbuf, n, iters, peer, self.reqs2)

    def pycall(self, iters):
        return None


class PythonBackend:
    """mpi4py loops; their per-call cost is measured separately (``pycall``)."""

    name = "mpi4py"

    def __init__(self, comm):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm
        self.ack = np.zeros(1, np.uint8)

    def pingpong(self, buf, n, iters, first, peer):
        c, B = self.comm, self.MPI.BYTE
        msg = [buf, n, B]
        send, recv = c.Send, c.Recv
        t0 = time.perf_counter()
        if first:
            for _ in range(iters):
                send(msg, peer, 1)
                recv(msg, peer, 1)
        else:
            for _ in range(iters):
                recv(msg, peer, 1)
                send(msg, peer, 1)
        return time.perf_counter() - t0

    def stream(self, buf, n, iters, first, peer):
        c, B = self.comm, self.MPI.BYTE
        views = [[buf[w * n:(w + 1) * n], n, B] for w in range(WINDOW)]
        t0 = time.perf_counter()
        for _ in range(iters):
            if first:
                reqs = [c.Isend(v, peer, 2) for v in views]
            else:
                reqs = [c.Irecv(v, peer, 2) for v in views]
            self.MPI.Request.Waitall(reqs)
            if first:
                c.Recv(self.ack, peer, 3)
            else:
                c.Send(self.ack, peer, 3)
        return time.perf_counter() - t0

    def overhead(self, buf, n, iters, first, peer, delay_s):
        c, B = self.comm, self.MPI.BYTE
        msg = [buf, n, B]
        samples = np.empty(iters)
        clock = time.perf_counter
        for i in range(iters):  # same handshake as the numba kernel
            if first:
                c.Recv(self.ack, peer, 5)
                c.Send(self.ack, peer, 6)
                t0 = clock()
                c.Send(msg, peer, 4)
                samples[i] = clock() - t0
            else:
                c.Send(self.ack, peer, 5)
                c.Recv(self.ack, peer, 6)
                t0 = clock()
                while clock() - t0 < delay_s:
                    pass
                t1 = clock()
                c.Recv(msg, peer, 4)
                samples[i] = clock() - t1
        return float(np.median(samples))

    def burst(self, buf, n, first, peer):
        c, B = self.comm, self.MPI.BYTE
        msg = [buf, n, B]
        t0 = time.perf_counter()
        if first:
            c.Send(msg, peer, 7)
            c.Recv(self.ack, peer, 8)
        else:
            c.Recv(msg, peer, 7)
            c.Send(self.ack, peer, 8)
        return time.perf_counter() - t0

    def exchange(self, buf, rbuf, n, iters, peer):
        c, B = self.comm, self.MPI.BYTE
        msg, into = [buf, n, B], [rbuf, n, B]
        sendrecv = c.Sendrecv
        t0 = time.perf_counter()
        for _ in range(iters):
            sendrecv(msg, peer, 14, into, peer, 14)
        return time.perf_counter() - t0

    def pycall(self, iters):
        """Seconds per (Send + Recv) pair on PROC_NULL: what the interpreter adds per one-way hop."""
        c, P = self.comm, self.MPI.PROC_NULL
        msg = [np.zeros(8, np.uint8), 8, self.MPI.BYTE]
        send, recv = c.Send, c.Recv
        t0 = time.perf_counter()
        for _ in range(iters):
            send(msg, P, 1)
            recv(msg, P, 1)
        return (time.perf_counter() - t0) / iters


def make_backend(comm, which: str, quick: bool = False):
    """``auto``: numba-mpi for a full run; for ``--quick`` the mpi4py loop (numba-mpi kernels
    cannot be cached, and compiling them costs ~10 s per run), corrected by its per-call cost."""
    if which == "auto" and quick:
        which = "python"
    if which in ("auto", "numba"):
        try:
            import numba_mpi  # noqa: F401

            return NumbaBackend(comm)
        except ImportError:
            if which == "numba":
                raise SystemExit("probes/network.py: --backend numba needs numba and numba-mpi "
                                 "(pip install numba-mpi)")
    return PythonBackend(comm)


# ---------------------------------------------------------------- placement

def node_ids(comm, node_map: str | None) -> tuple[list[int], list[str]]:
    from mpi4py import MPI

    names = comm.allgather(MPI.Get_processor_name())
    text = node_map if node_map is not None else os.environ.get("PMAC_NODE_MAP")
    if text:
        try:
            ids = [int(x) for x in text.replace(" ", "").split(",") if x != ""]
        except ValueError:
            raise SystemExit(f"probes/network.py: --node-map must be comma-separated integers, got {text!r}")
        if len(ids) != comm.Get_size():
            raise SystemExit(f"probes/network.py: --node-map lists {len(ids)} ranks, "
                             f"but {comm.Get_size()} are running")
        return ids, names
    seen: dict[str, int] = {}
    return [seen.setdefault(n, len(seen)) for n in names], names


def pairs(ids: list[int]) -> dict[str, int]:
    """placement -> partner of rank 0."""
    out = {}
    for r in range(1, len(ids)):
        key = "intra_node" if ids[r] == ids[0] else "inter_node"
        out.setdefault(key, r)
    return out


# ---------------------------------------------------------------- the probe

def run(comm, *, quick: bool, node_map: str | None = None, backend: str = "auto",
        batch_ms: float | None = None, max_bytes: int = MAX_BYTES, collectives: bool = True,
        burst_idle_ms: float = BURST_IDLE_MS, pollution_only: bool = False,
        report=None) -> tuple[dict, dict]:
    """Measure; returns (tables, meta) on rank 0 and ({}, meta) elsewhere.

    ``report(fraction, message)`` is called on rank 0 as work progresses. ``pollution_only``:
    the ``pollution`` test alone, for each placement (to add it to a profile probed before it
    existed: ``python -m pmac.calibrate_pollution``).
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    report = report if (report is not None and rank == 0) else (lambda f, m: None)
    ids, names = node_ids(comm, node_map)
    partners = pairs(ids)
    be = make_backend(comm, backend, quick)
    pol_be = pollution_backend(be, comm)
    compiled = compiled_collectives() if (be.name == "numba-mpi" and collectives and not pollution_only) else None
    batch_s = (batch_ms if batch_ms is not None else (2.0 if quick else 5.0)) * 1e-3
    reps = 9 if quick else 15
    # wall-time budget of the ping-pong sweeps: on a loaded machine (busy-polling ranks wait for
    # the scheduler) stop after the repetition that exceeds it, keeping at least 3
    budget_s = 8.0 if quick else 90.0
    max_call_s = 0.25 if quick else 1.0  # sizes slower than this per iteration are skipped
    sizes = pingpong_sizes(quick, max_bytes)
    buf = aligned_buffer(max(max_bytes, 1))
    sbuf = aligned_buffer(WINDOW * min(1 << 20, max_bytes))
    pp_rows: list[tuple] = []
    t_start = time.perf_counter()

    steps = max(1, len(partners)) * 4 + (1 if collectives else 0)
    step = 0
    for placement, peer in sorted(partners.items()):
        active = rank in (0, peer)
        first = rank == 0
        other = peer if first else 0
        if pollution_only:
            report(step / steps, f"pollution {placement}")
            if active:
                _pollution(pol_be, comm, buf, sbuf, pp_rows, placement, first, other,
                           reps=5 if quick else 9, budget_s=budget_s / 4)
            step += 4
            comm.Barrier()
            continue
        # compile / warm up with the smallest message, then every size
        if active:
            be.pingpong(buf, 1, 20, first, other)
        report(step / steps, f"ping-pong {placement}")
        pp_iters = _calibrate(be, comm, buf, sizes, batch_s, first, other, active,
                              lambda n, it: be.pingpong(buf, n, it, first, other), max_call_s=max_call_s)
        sweep = dict(comm=comm, rows=pp_rows, placement=placement, active=active, first=first, other=other,
                     reps=reps)
        _repetitions("pingpong", sizes, pp_iters, lambda n, it: be.pingpong(buf, n, it, first, other),
                     per_iter=2, warmup=lambda it: it // 10, budget_s=budget_s, **sweep)
        # exchanges: as many iterations as the ping-pong of the size
        ex_sizes = [n for n in EXCHANGE_SIZES if n in pp_iters]
        if active:
            for n in ex_sizes:
                be.exchange(buf, sbuf, n, 20, other)  # compile / warm up
        _repetitions("exchange", ex_sizes, pp_iters, lambda n, it: be.exchange(buf, sbuf, n, it, other),
                     per_iter=1, warmup=lambda it: it // 10, budget_s=budget_s / 8, **sweep)
        if active:
            _pollution(pol_be, comm, buf, sbuf, pp_rows, placement, first, other,
                       reps=5 if quick else 9, budget_s=budget_s / 4)
        step += 1
        report(step / steps, f"streaming {placement}")
        stream_sizes = [s for s in sizes if s >= 1024 and s * WINDOW <= sbuf.size and (s & (s - 1)) == 0][::2]
        st_iters = _calibrate(be, comm, sbuf, stream_sizes, batch_s, first, other, active,
                              lambda n, it: be.stream(sbuf, n, it, first, other), cap=200,
                              msgs_per_iter=WINDOW, max_call_s=max_call_s)
        _repetitions("stream", stream_sizes, st_iters, lambda n, it: be.stream(sbuf, n, it, first, other),
                     per_iter=WINDOW, warmup=lambda it: 1, budget_s=budget_s / 2, **sweep)
        step += 1
        report(step / steps, f"overheads {placement}")
        # latency estimate for the receive delay: exchanged between the pair only
        if active:
            if first:
                small = [row[4] for row in pp_rows if row[0] == placement and row[1] == "pingpong" and row[2] == 8]
                lat = float(np.median(small))
                comm.send(lat, dest=other, tag=9)
            else:
                lat = comm.recv(source=0, tag=9)
            delay = max(20e-6, 10 * lat)
            n_oh = 50 if quick else 200
            t0 = time.perf_counter()
            for n in (8, 1024):
                be.overhead(buf, n, 5, first, other, delay)
                for r in range(reps):
                    if not _go_on(comm, first, other, r, t0, budget_s / 4):
                        break
                    v = be.overhead(buf, n, n_oh, first, other, delay)
                    if first:
                        pp_rows.append((placement, "send_overhead", n, r, v))
                        pp_rows.append(comm.recv(source=other, tag=10))
                    else:
                        comm.send((placement, "recv_overhead", n, r, v), dest=0, tag=10)
        if active:
            _burst(be, comm, buf, pp_rows, placement, first, other, reps=3 if quick else 5,
                   idle_s=burst_idle_ms * 1e-3, max_call_s=max_call_s, max_bytes=max_bytes)
        step += 1
        if active and first:
            for r in range(reps):
                v = be.pycall(2000 if quick else 20000)
                if v is not None:
                    pp_rows.append((placement, "pycall", 0, r, v))
        step += 1
        comm.Barrier()

    coll_rows: list[tuple] = []
    if collectives and not pollution_only:
        report(step / steps, "collectives")
        coll_rows = _collectives(comm, ids, quick=quick, reps=reps, batch_s=batch_s, max_call_s=max_call_s,
                                 compiled=compiled)
        if compiled is not None:
            report(step / steps, "calls from the interpreter")
            coll_rows += _interpreter_calls(comm, ids, compiled, reps=reps, batch_s=batch_s)
    meta = {
        "mpi_library": " ".join(MPI.Get_library_version().strip().splitlines()[0].split()) if rank == 0 else "",
        "mpi_version": ".".join(map(str, MPI.Get_version())),
        "mpi4py": __import__("mpi4py").__version__,
        "backend": be.name,
        "pollution_backend": pol_be.name,
        "pollution_only": pollution_only,
        "n_ranks": size,
        "processor_names": names,
        "node_ids": ids,
        "node_map_source": "explicit" if (node_map or os.environ.get("PMAC_NODE_MAP")) else "processor_name",
        "partners": partners,
        "quick": quick,
        "batch_s": batch_s,
        "reps": reps,
        "burst_idle_ms": burst_idle_ms,
        "window": WINDOW,
        "elapsed_s": time.perf_counter() - t_start,
        "transparent_hugepage": _thp(),
        "thread_level": thread_level_name(MPI.Query_thread()),
        "bcast_root": "rotating",   # collective_call: the root moves every call
        "collective_loop": "compiled" if compiled is not None else "mpi4py",
    }
    if be.name == "numba-mpi":
        import numba
        import numba_mpi

        meta["numba"] = numba.__version__
        meta["numba_mpi"] = getattr(numba_mpi, "__version__", "")
    report(1.0, "done")
    if rank != 0:
        return {}, meta
    tables = {
        "pingpong": _columns(pp_rows, PP_COLUMNS),
        "collective": _columns(coll_rows, COLL_COLUMNS),
    }
    return tables, meta


def _repetitions(test, sizes, iters, call, *, per_iter, warmup, budget_s, comm, rows, placement, active, first,
                 other, reps) -> None:
    """Rows of ``test``: ``call(n, it)`` timed for each size of ``iters`` (after a warm-up of
    ``warmup(it)`` iterations when it >= 10), seconds per iteration / ``per_iter``.

    Repetitions outermost: each sweeps all sizes, so a burst of load from elsewhere spreads over
    sizes instead of spoiling every repetition of one size; after ``budget_s`` no repetition
    beyond the third starts (the first rank of the pair decides)."""
    t0 = time.perf_counter()
    for r in range(reps):
        if active and not _go_on(comm, first, other, r, t0, budget_s):
            break
        for n in sizes:
            if active and n in iters:
                it = iters[n]
                if it >= 10:
                    call(n, warmup(it))
                dt = call(n, it)
                if first:
                    rows.append((placement, test, n, r, dt / (it * per_iter)))


def _calibrate(be, comm, buf, sizes, batch_s, first, other, active, call, cap: int = 5000,
               msgs_per_iter: int = 1, max_call_s: float = 1.0) -> dict:
    """Iterations per size so that one repetition lasts about ``batch_s``, from a timed warm-up.

    Sizes from the first one whose single iteration takes longer than ``max_call_s`` on are
    dropped (a slow link: 16 MiB at 20 Mbit/s takes 7 s; the fit extrapolates). The first rank
    of the pair decides, size by size, and its partner follows (they must agree).
    """
    if not active:
        return {}
    iters = {}
    for n in sizes:
        guess = max(1, iterations(n * msgs_per_iter, batch_s * 0.2, cap=cap) // 2)
        dt = call(n, guess)
        per = max(dt / guess, 1e-9)
        if first:
            keep = per <= max_call_s
            comm.send(keep, dest=other, tag=11)
        else:
            keep = comm.recv(source=other, tag=11)
        if not keep:
            break
        iters[n] = int(max(1, min(cap, batch_s / per)))
    if first:
        comm.send(iters, dest=other, tag=11)
        return iters
    return comm.recv(source=other, tag=11)


def _burst(be, comm, buf, rows, placement, first, other, *, reps, idle_s, max_call_s, max_bytes) -> None:
    """The ``burst`` rows: message + 1-byte acknowledgement after ``idle_s`` of silence.

    Sizes 0, 16, 64, .. (powers of four) while the stream rate of this pair moves the message in
    under a quarter of ``max_call_s``; the first rank decides and tells its partner."""
    if first:
        st = [(row[2], row[4]) for row in rows if row[0] == placement and row[1] == "stream"]
        rate = 1e9
        if st:
            big = max(m for m, _ in st)
            rate = big / float(np.median([t for m, t in st if m == big]))
        sizes = [0] + [4**k for k in range(2, 13) if 4**k <= max_bytes and 4**k / rate <= max_call_s / 4]
        comm.send(sizes, dest=other, tag=13)
    else:
        sizes = comm.recv(source=other, tag=13)
    be.burst(buf, 1, first, other)  # compile / warm up
    for r in range(reps):
        for n in sizes:
            if first:  # spin, not sleep: a sleeping rank wakes up slowly (~80 us here)
                t_end = time.perf_counter() + idle_s
                while time.perf_counter() < t_end:
                    pass
            # two empty round trips wake the path up (the first message after a pause was
            # 20-40 us slower here even in shared memory) and take only headers from a bucket
            be.pingpong(buf, 0, 2, first, other)
            dt = be.burst(buf, n, first, other)
            if first:
                rows.append((placement, "burst", n, r, dt))


def pollution_backend(be, comm):
    """The numba-mpi backend when it is there (also in a ``--quick`` run: one kernel, ~1.5 s to
    compile): the ``pollution`` test measures the MPI library's and the kernel's path, not the
    interpreter's (an mpi4py loop's own code and objects would be evicted by the sweep too)."""
    if isinstance(be, NumbaBackend):
        return be
    try:
        return NumbaBackend(comm)
    except ImportError:
        return be


def _pollution(be, comm, buf, sbuf, rows, placement, first, other, *, reps, budget_s,
               sizes=POLLUTION_SIZES) -> None:
    """The ``pollution`` and ``pollution_pause`` rows (see the module doc).

    Each call of a size waits the same pause on both ranks (1.5 x the slower rank's sweep, at
    least 20 us, agreed once), with or without sweeping first, so the two kinds differ only in
    the sweep; a pause alone costs a little too (a path idle for a millisecond wakes up slower,
    bench/wake_latency), which the difference leaves out. Calls per size: about 0.1 s of pauses
    per repetition, 8 to 200."""
    sweep_buf = aligned_buffer(max(sizes))
    views = {w: sweep_buf[:w:64] for w in sizes}
    clock = time.perf_counter
    pause = {}
    for w in sizes:  # touch the pages, then time one sweep; the pair agrees on the slower one
        v = views[w]
        np.add(v, 1, out=v)
        t0 = clock()
        np.add(v, 1, out=v)
        mine = clock() - t0
        comm.send(mine, dest=other, tag=15)
        theirs = comm.recv(source=other, tag=15)
        pause[w] = max(20e-6, 1.5 * max(mine, theirs))
    be.exchange(buf, sbuf, 8, 20, other)  # warm up
    t_start = clock()
    for r in range(reps):
        if not _go_on(comm, first, other, r, t_start, budget_s):
            break
        for w in sizes:
            v, p = views[w], pause[w]
            n = int(max(8, min(200, 0.05 / p)))
            swept, paused = np.empty(n), np.empty(n)
            for i in range(n):
                for out, sweep in ((swept, True), (paused, False)):
                    t0 = clock()
                    if sweep:
                        np.add(v, 1, out=v)
                    while clock() - t0 < p:
                        pass
                    t1 = clock()
                    be.exchange(buf, sbuf, 8, 1, other)
                    out[i] = clock() - t1
            mine = (float(np.median(swept)), float(np.median(paused)))
            comm.send(mine, dest=other, tag=16)
            theirs = comm.recv(source=other, tag=16)
            if first:
                rows.append((placement, "pollution", w, r, (mine[0] + theirs[0]) / 2))
                rows.append((placement, "pollution_pause", w, r, (mine[1] + theirs[1]) / 2))


def _go_on(comm, first, other, rep, t0, budget_s) -> bool:
    """First rank of the pair decides whether another repetition fits the budget."""
    if first:
        go = rep < 3 or (time.perf_counter() - t0) < budget_s
        comm.send(go, dest=other, tag=12)
        return go
    return comm.recv(source=other, tag=12)


def _thp() -> str:
    """The transparent-huge-page mode (numpy buffers of 4 MiB and more ask for huge pages)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
        return text[text.index("[") + 1:text.index("]")]
    except (OSError, ValueError):
        return "unknown"


def _collectives(comm, ids, *, quick: bool, reps: int, batch_s: float, max_call_s: float = 1.0,
                 compiled=None) -> list[tuple]:
    """The ``collective`` rows: each op timed ``it`` calls back to back per repetition, the slowest
    rank's time per call; in mpi4py loops (:func:`collective_call`), or with ``compiled`` (from
    :func:`compiled_collectives`) in compiled ones."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    counts = sorted({1, size} | {2**k for k in range(1, 20) if 2**k <= size})
    sizes = [8, 1024, 65536] if quick else [8, 64, 512, 4096, 32768, 262144, 1 << 20]
    rows = []
    for n in counts:
        color = 0 if rank < n else MPI.UNDEFINED
        sub = comm.Split(color, rank)
        placement = "intra_node" if len(set(ids[:n])) == 1 else "inter_node"
        if sub != MPI.COMM_NULL:
            for op in COLL_OPS:
                for nb in ([0] if op == "barrier" else sizes):
                    count = max(1, nb // 8)
                    if op == "alltoall":
                        count = max(n, (count // n) * n)
                    a = np.ones(count, np.float64)
                    b = np.zeros(count, np.float64)
                    if compiled is None:
                        calls = _repeat(collective_call(op, sub, a, b, MPI.SUM))
                    else:
                        def calls(k, op=op, a=a, b=b):
                            compiled(op, sub, a, b, k)
                    guess = int(max(1, min(500, 0.2 * batch_s / (5e-6 * max(1, n) + 8 * count * n / 2e9))))
                    t0 = time.perf_counter()
                    calls(guess)  # warm-up, timed to size the repetitions
                    per = sub.allreduce((time.perf_counter() - t0) / guess, op=MPI.MAX)
                    if per > max_call_s:  # a slow link: skip this and larger sizes of the op
                        break
                    it = int(max(1, min(2000, batch_s / max(per, 1e-9))))
                    t_op = time.perf_counter()
                    for r in range(reps):
                        # keep at least 3 repetitions; rank 0 ends a point that overruns its budget
                        if r >= 3 and sub.bcast(time.perf_counter() - t_op > (2.0 if quick else 10.0), root=0):
                            break
                        sub.Barrier()
                        t0 = time.perf_counter()
                        calls(it)
                        dt = (time.perf_counter() - t0) / it
                        worst = sub.reduce(dt, op=MPI.MAX, root=0)
                        if rank == 0:
                            rows.append((placement, op, 0 if op == "barrier" else count * 8, n, r, worst))
            sub.Free()
        comm.Barrier()
    return rows


#: the interpreter test's rows in the ``collective`` table (:func:`_interpreter_calls`): the
#: call from an mpi4py loop (``n_ranks`` 2; 1: mpi4py's own part, on MPI.COMM_SELF or to
#: MPI.PROC_NULL) and from the compiled loop
INTERPRETER_OPS = ("py_allreduce", "c_allreduce", "py_sendrecv", "c_sendrecv")


def _repeat(call):
    """``calls(k)``: ``k`` calls of ``call()`` back to back, from the interpreter."""
    def calls(k):
        for _ in range(k):
            call()
    return calls


def _interpreter_calls(comm, ids, compiled, *, reps: int, batch_s: float) -> list[tuple]:
    """Rows of the ``interpreter`` test (ranks 0 and 1; rows on rank 0): an 8 B Allreduce and an
    8 B Sendrecv between the two, back to back, from an mpi4py loop and from the compiled loop
    (:func:`compiled_collectives`), and mpi4py's own part of each call (the Allreduce on
    MPI.COMM_SELF, the Sendrecv with MPI.PROC_NULL: the interpreter, mpi4py and the library's entry,
    no communication). The three kinds alternate within each repetition, so the host's spells
    (collectives several times dearer for minutes) hit all three alike. ``mpi4py - own part -
    compiled`` is what a call from an interpreter costs beyond its own instructions, which a
    memory signature counts in the burst: the interpreter's code and data evicting the library's
    from the caches and predictors between calls (pmac.interpreter)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    sub = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    rows: list[tuple] = []
    if sub != MPI.COMM_NULL:
        peer = 1 - rank
        placement = "intra_node" if ids[0] == ids[1] else "inter_node"
        a, b = np.ones(1), np.zeros(1)
        self_ = MPI.COMM_SELF

        def loops(name):
            if name == "allreduce":
                return {"py": (2, _repeat(lambda: sub.Allreduce(a, b, op=MPI.SUM))),
                        "own": (1, _repeat(lambda: self_.Allreduce(a, b, op=MPI.SUM))),
                        "c": (2, lambda k: compiled("allreduce", sub, a, b, k))}
            return {"py": (2, _repeat(lambda: sub.Sendrecv(a, peer, 0, b, peer, 0))),
                    "own": (1, _repeat(lambda: sub.Sendrecv(a, MPI.PROC_NULL, 0, b, MPI.PROC_NULL, 0))),
                    "c": (2, lambda k: compiled("sendrecv", sub, a, b, k, peer))}

        for name in ("allreduce", "sendrecv"):
            kinds = loops(name)
            its = {}
            for kind, (_, call) in kinds.items():
                call(20)   # warm-up, then sized as the collectives are
                sub.Barrier()
                t0 = time.perf_counter()
                call(100)
                per = sub.allreduce((time.perf_counter() - t0) / 100, op=MPI.MAX)
                its[kind] = int(max(10, min(5000, batch_s / max(per, 1e-9))))
            for r in range(reps):
                for kind, (n_ranks, call) in kinds.items():
                    sub.Barrier()
                    t0 = time.perf_counter()
                    call(its[kind])
                    worst = sub.reduce((time.perf_counter() - t0) / its[kind], op=MPI.MAX, root=0)
                    if rank == 0:
                        op = ("c_" if kind == "c" else "py_") + name
                        rows.append((placement, op, 8, n_ranks, r, worst))
        sub.Free()
    comm.Barrier()
    return rows


def compiled_collectives():
    """``timed(op, comm, a, b, k, peer=-1)``: ``k`` calls of ``op`` (``COLL_OPS``, float64 buffers ``a``
    / ``b``, sum, bcast's root moving every call as in :func:`collective_call`; or ``sendrecv``: ``a``
    to ``peer`` and ``b`` from it, tag 0) on the mpi4py communicator ``comm``, in a numba loop
    calling the MPI library's C functions through ctypes (the library mpi4py loaded): no
    interpreter between the calls, as in a C program. numba-mpi has no alltoall and works on
    MPI_COMM_WORLD only, hence our own bindings. Not cacheable (ctypes function pointers): one loop
    for the five, compiled once a probe, before it returns."""
    import ctypes

    import numba
    from mpi4py import MPI

    lib = ctypes.CDLL(MPI.__file__)   # the extension module; its libmpi resolves the symbols
    handle = ctypes.c_int if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_int) else ctypes.c_void_p
    ptr, c_int = ctypes.c_void_p, ctypes.c_int

    def fn(name, *argtypes):
        f = getattr(lib, name)
        f.restype, f.argtypes = c_int, list(argtypes)
        return f

    barrier = fn("MPI_Barrier", handle)
    bcast = fn("MPI_Bcast", ptr, c_int, handle, c_int, handle)
    allreduce = fn("MPI_Allreduce", ptr, ptr, c_int, handle, handle, handle)
    alltoall = fn("MPI_Alltoall", ptr, c_int, handle, ptr, c_int, handle, handle)
    sendrecv = fn("MPI_Sendrecv", ptr, c_int, handle, c_int, c_int, ptr, c_int, handle, c_int, c_int, handle, ptr)

    @numba.njit(cache=False)
    def loop(kind, a, b, count, n, k, dtype, op, comm, peer, status):
        err = 0
        for i in range(k):
            if kind == 0:
                err |= barrier(comm)
            elif kind == 1:
                err |= bcast(a.ctypes.data, count, dtype, i % n, comm)
            elif kind == 2:
                err |= allreduce(a.ctypes.data, b.ctypes.data, count, dtype, op, comm)
            elif kind == 3:
                err |= alltoall(a.ctypes.data, count // n, dtype, b.ctypes.data, count // n, dtype, comm)
            else:
                err |= sendrecv(a.ctypes.data, count, dtype, peer, 0, b.ctypes.data, count, dtype, peer, 0, comm,
                                status.ctypes.data)
        return err

    def h(obj):
        # the handle's value as the C type holds it: mpi4py reads MPICH's int handles back
        # sign-extended to 64 bits, unsigned (0xffffffff84000002)
        v = MPI._handleof(obj)
        if handle is not c_int:
            return v
        v &= 0xFFFFFFFF
        return v - (1 << 32) if v >= 1 << 31 else v

    dtype, op_sum = h(MPI.DOUBLE), h(MPI.SUM)
    kinds = {name: i for i, name in enumerate(COLL_OPS + ("sendrecv",))}
    # an MPI_Status of any library (MPICH's is 20 bytes, Open MPI's 24), written and not read
    status = np.zeros(16, np.int64)
    # compiled here, not in the first timed call: the warm-up that sizes a point's repetitions
    # would time the compilation (the first op, a one-rank barrier, then ran 1 call a repetition)
    one = np.zeros(1)
    loop(0, one, one, 1, 1, 0, dtype, op_sum, h(MPI.COMM_SELF), -1, status)

    def timed(op, comm, a, b, k, peer=-1):
        err = loop(kinds[op], a, b, a.size, comm.Get_size(), k, dtype, op_sum, h(comm), peer, status)
        if err:
            raise RuntimeError(f"probes/network.py: MPI_{op.capitalize()} failed in the compiled loop")
    timed.loop = loop
    return timed


def collective_call(op: str, comm, a: np.ndarray, b: np.ndarray, sum_op):
    """The call the collectives probe times back to back for ``op`` on ``comm`` (mpi4py).

    A rooted call (bcast) moves its root to the next rank every call, as IMB does: with one root
    the root runs ahead of the others and the loop times how fast a member drains messages already
    queued for it (the Xeon VM's 2-rank 8 B bcast at MPI_THREAD_SINGLE came out anywhere from 50 ns
    to 857 ns a call, probe to probe, 27 Nov 2026), not what a call costs when it has to wait for
    its data; with the root moving, each call's root is a member that had to receive the previous
    call's data first."""
    if op == "barrier":
        return comm.Barrier
    if op == "bcast":
        size = comm.Get_size()
        nxt = [0]

        def bcast():
            comm.Bcast(a, root=nxt[0])
            nxt[0] = nxt[0] + 1 if nxt[0] + 1 < size else 0
        return bcast
    if op == "allreduce":
        return lambda: comm.Allreduce(a, b, op=sum_op)
    if op == "alltoall":
        return lambda: comm.Alltoall(a, b)
    raise ValueError(f"collectives probe: unknown op {op!r}")


def thread_level_name(level: int) -> str:
    """``MPI.Query_thread()``'s value by name (single, funneled, serialized, multiple)."""
    from mpi4py import MPI

    names = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled", MPI.THREAD_SERIALIZED: "serialized",
             MPI.THREAD_MULTIPLE: "multiple"}
    return names.get(level, "")


def _columns(rows: list[tuple], spec) -> dict[str, np.ndarray]:
    return {name: np.array([r[i] for r in rows], dtype=dtype) for i, (name, dtype) in enumerate(spec)}


def save(path: str, tables: dict, meta: dict) -> None:
    """Write atomically (temporary file + rename) so an interrupted run leaves no half file."""
    arrays = {f"{t}/{c}": v for t, cols in tables.items() for c, v in cols.items()}
    arrays["meta/json"] = np.array(json.dumps(meta))
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output .npz (written by rank 0)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions and sizes (< 30 s)")
    p.add_argument("--node-map", default=None, help="rank-to-node map, e.g. 0,0,1,1 (or env PMAC_NODE_MAP)")
    p.add_argument("--backend", choices=("auto", "numba", "python"), default="auto",
                   help="timed loops in numba (numba-mpi) or in Python (mpi4py, per-call cost measured); "
                        "auto: numba for a full run, Python for --quick")
    p.add_argument("--batch-ms", type=float, default=None, help="target duration of one repetition")
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="largest ping-pong message")
    p.add_argument("--burst-idle-ms", type=float, default=BURST_IDLE_MS,
                   help="silence before each burst message (refills a token bucket of that many ms)")
    p.add_argument("--no-collectives", action="store_true")
    p.add_argument("--pollution-only", action="store_true",
                   help="only the pollution test (python -m pmac.calibrate_pollution adds it to an existing profile)")
    p.add_argument("--progress", action="store_true", help="print 'progress FRACTION MESSAGE' lines")
    p.add_argument("--thread-level", choices=("single", "multiple"), default="multiple",
                   help="the MPI thread level to initialise MPI at (mpi4py's default: multiple); "
                        "the library's costs differ between the two (MPICH: collectives several-fold)")
    args = p.parse_args(argv)
    import mpi4py

    mpi4py.rc.thread_level = args.thread_level  # before MPI is initialised
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        if comm.Get_rank() == 0:
            print("probes/network.py: needs at least 2 ranks (mpiexec -n 2 ...)", file=sys.stderr)
        return 2

    def report(f, m):
        if args.progress:
            print(f"progress {f:.3f} {m}", flush=True)

    tables, meta = run(comm, quick=args.quick, node_map=args.node_map, backend=args.backend,
                       batch_ms=args.batch_ms, max_bytes=args.max_bytes, burst_idle_ms=args.burst_idle_ms,
                       collectives=not args.no_collectives, pollution_only=args.pollution_only, report=report)
    if comm.Get_rank() == 0:
        meta["command"] = " ".join([sys.executable] + sys.argv)
        save(args.out, tables, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())

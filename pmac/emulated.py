"""An emulated cluster on one host: network namespaces as nodes, veth + bridge as the network.

Layout (all names start with :data:`PREFIX`)::

    root namespace:  bridge pmacemu-br 10.213.0.254/24  (mpiexec runs here)
                       |-- veth pmacemu-v0 <-> eth0 10.213.0.1 in namespace pmacemu-n0
                       |-- veth pmacemu-v1 <-> eth0 10.213.0.2 in namespace pmacemu-n1 ...

Each node namespace runs its MPI processes under its own UTS namespace, with the host name
set to the namespace's name, so ``MPI_Get_processor_name`` tells the nodes apart; the
namespace's ``/etc/hosts`` (``/etc/netns/<ns>/hosts``, bind-mounted by ``ip netns exec``)
names every node. A link rate is a ``tc`` token bucket filter (tbf) on each node's egress
(``eth0`` inside the namespace): each node sends at most at the rate, as a NIC would.

The MPI is the project's MPICH (hydra). hydra launches its proxies through
``-launcher ssh -launcher-exec SCRIPT``; SCRIPT runs them with ``ip netns exec NS unshare --uts``
instead of ssh. Trap (issue 6): by default MPICH/UCX moves data between namespaces by shared
memory and cross-memory attach, so the tbf limit changes nothing; ``UCX_TLS=tcp,self`` and
``MPIR_CVAR_NOLOCAL=1`` force TCP.

Only one emulated cluster exists at a time on a host: creation takes an exclusive lock
(:data:`LOCK_FILE`), then removes whatever an earlier killed run left behind (namespaces,
links and ``/etc/netns`` entries of the prefix), so a stale cluster never blocks a new one.
Teardown always runs: context manager, ``atexit`` and SIGTERM/SIGHUP handlers.

Library code: no printing. Raises :class:`ToolMissingError` when the host cannot do this
(not root, no iproute2, namespaces refused) and :class:`InputError` for bad arguments.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import InputError, PmacError, ToolMissingError
from .mpi import MpiInstall, find_mpi, mpi_env
from .units import parse_quantity

PREFIX = "pmacemu"
#: private /24 used only inside the bridge and the namespaces created here
SUBNET = "10.213.0"
BRIDGE_HOST = 254
LOCK_FILE = Path("/run/lock/pmacemu.lock")
NETNS_ETC = Path("/etc/netns")
#: hydra + UCX environment that forces TCP between the namespaces (see module docstring)
TCP_ENV = {"UCX_TLS": "tcp,self", "MPIR_CVAR_NOLOCAL": "1"}
#: tbf bucket: 1 ms at the rate, and at least 5000 B (three full frames). A token bucket passes
#: a burst up to its size at line speed, so a large bucket makes sporadic messages free and
#: only sustained traffic pays the rate (measured at 20 Mbit/s, 2 ranks: with 128 KiB, 1 KiB
#: one-way 17 us and stencil2d-n2-128 as fast as unlimited; with 5000 B, 1 KiB 130 us, 8 KiB
#: 2.8 ms). A bucket much below 1 ms starves TCP at high rates (1 Gbit/s with 64 KiB: 59 MB/s,
#: with 125 kB: 125 MB/s).
TBF_MIN_BURST_BYTES = 5000
#: tbf queue limit in time at the rate: long enough that TCP windows do not overflow it
TBF_LATENCY_S = 0.2
MAX_NODES = 200

_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(bit|bps|bit/s)\s*$", re.IGNORECASE)


def parse_rate(text: str | float | int) -> float:
    """A link rate in bytes/s from tc style ('1gbit', '200mbit') or pmac style ('1 Gbit/s', '125 MB/s').

    A bare number is bytes/s.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _RATE_RE.match(str(text))
        if m:
            value = float(m.group(1)) * {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2).lower()] / 8.0
        else:
            value = parse_quantity(text, "bytes_per_s")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"link rate must be positive, got {text!r}")
    return value


def capability() -> str | None:
    """None when this host can build an emulated cluster, else the reason it cannot."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if not shutil.which(tool):
            return f"'{tool}' not found (install iproute2 and util-linux)"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns does not work here: {r.stderr.strip()}"
    return None


def _run(cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise PmacError(f"emulated cluster: `{shlex.join(cmd)}` failed: {(r.stderr or r.stdout).strip()}")
    return r


# ---------------------------------------------------------------- inventory and cleanup

def list_namespaces(prefix: str = PREFIX) -> list[str]:
    """Namespaces whose name starts with ``prefix-`` (from ``ip netns list``)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix + "-"))


def list_links(prefix: str = PREFIX) -> list[str]:
    """Links of the root namespace whose name starts with ``prefix-``."""
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return sorted(n for n in names if n.startswith(prefix + "-"))


def _kill_namespace_processes(ns: str) -> None:
    """End processes left inside one of our namespaces (MPI ranks of an interrupted job)."""
    out = _run(["ip", "netns", "pids", ns], check=False).stdout
    for pid in (int(p) for p in out.split() if p.isdigit()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def remove_all(prefix: str = PREFIX) -> list[str]:
    """Remove every namespace, link and /etc/netns entry of ``prefix``; returns what was removed."""
    removed = []
    for ns in list_namespaces(prefix):
        _kill_namespace_processes(ns)
        _run(["ip", "netns", "delete", ns], check=False)
        removed.append(f"netns {ns}")
    for link in list_links(prefix):  # veths went with their namespace; the bridge remains
        _run(["ip", "link", "delete", link], check=False)
        removed.append(f"link {link}")
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.glob(prefix + "-*"):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(f"dir {d}")
    return removed


def _lock_holder(fd: int) -> str:
    """What the holder wrote into the lock file: "pid N: command" (or "unknown")."""
    try:
        text = os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "unknown"


@contextlib.contextmanager
def _host_lock(timeout_s: float, lock_file: Path | None = None) -> Iterator[None]:
    """One emulated cluster per host at a time: an exclusive flock on ``lock_file`` (default
    :data:`LOCK_FILE`), held while the cluster lives. The holder writes its pid and command into
    the file, so a second caller says on stderr whom it waits for (a stuck job of the first can
    otherwise keep it waiting silently for ``timeout_s``) and names it in the timeout error."""
    lock_file = lock_file or LOCK_FILE
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PmacError(f"another emulated cluster holds {lock_file} ({_lock_holder(fd)}; "
                                    f"waited {timeout_s:.0f} s)") from None
                if not told:
                    print(f"pmac: waiting up to {timeout_s:.0f} s for the emulated cluster of "
                          f"{_lock_holder(fd)} ({lock_file})", file=sys.stderr, flush=True)
                    told = True
                time.sleep(0.2)
        me = f"pid {os.getpid()}: {' '.join(sys.argv)[:400]}".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        yield
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------- the cluster

@dataclass(frozen=True, kw_only=True)
class EmulatedCluster:
    """A live emulated cluster: what a caller needs to launch MPI jobs on it."""

    prefix: str
    #: namespace names, which are also the nodes' host names
    nodes: tuple[str, ...]
    addresses: tuple[str, ...]
    bridge: str
    bridge_address: str
    #: the hydra launcher script (runs a command inside the namespace named by its host argument)
    launcher_script: str
    mpi: MpiInstall
    #: egress rate limit of every node, or None when unlimited
    rate_bytes_per_s: float | None = None

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    def rank_to_node(self, n_ranks: int, ranks_per_node: int | None = None) -> tuple[int, ...]:
        """Node index of each rank: block placement, ``ranks_per_node`` (default: spread evenly)."""
        if n_ranks <= 0:
            raise InputError(f"n_ranks must be positive, got {n_ranks}")
        ppn = ranks_per_node or math.ceil(n_ranks / self.n_nodes)
        if ppn <= 0 or ppn * self.n_nodes < n_ranks:
            raise InputError(f"{n_ranks} ranks do not fit on {self.n_nodes} nodes at {ppn} per node")
        return tuple(r // ppn for r in range(n_ranks))

    def rank_to_host(self, n_ranks: int, ranks_per_node: int | None = None) -> tuple[str, ...]:
        """Host name (= processor name reported by MPI) of each rank."""
        return tuple(self.nodes[i] for i in self.rank_to_node(n_ranks, ranks_per_node))

    def mpiexec_prefix(self, n_ranks: int, ranks_per_node: int | None = None,
                       env_vars: dict[str, str] | None = None) -> list[str]:
        """``mpiexec ... -n N`` placing ranks as :meth:`rank_to_node` says; append the command."""
        placement = self.rank_to_node(n_ranks, ranks_per_node)
        counts = [placement.count(i) for i in range(self.n_nodes)]
        hosts = ",".join(f"{a}:{c}" for a, c in zip(self.addresses, counts) if c > 0)
        cmd = [self.mpi.mpiexec, "-launcher", "ssh", "-launcher-exec", self.launcher_script,
               "-localhost", self.bridge_address, "-iface", self.bridge, "-hosts", hosts]
        for k, v in {**TCP_ENV, **(env_vars or {})}.items():
            cmd += ["-genv", k, v]
        return cmd + ["-n", str(n_ranks)]

    def run(self, n_ranks: int, argv: list[str], *, ranks_per_node: int | None = None,
            env_vars: dict[str, str] | None = None, timeout_s: float | None = None,
            capture: bool = True, cwd: str | None = None) -> subprocess.CompletedProcess:
        """Run an MPI job across the nodes; a timeout kills the job's processes in the nodes."""
        cmd = self.mpiexec_prefix(n_ranks, ranks_per_node, env_vars) + list(argv)
        try:
            return subprocess.run(cmd, env=mpi_env(), capture_output=capture, text=True,
                                  timeout=timeout_s, cwd=cwd)
        except subprocess.TimeoutExpired:
            for ns in self.nodes:
                _kill_namespace_processes(ns)
            raise PmacError(f"emulated cluster: job timed out after {timeout_s} s: {shlex.join(argv)}") from None

    def set_rate(self, rate: str | float | None) -> "EmulatedCluster":
        """Change (or remove, with None) the egress rate of every node; returns the updated view."""
        bps = None if rate is None else parse_rate(rate)
        for ns in self.nodes:
            _apply_rate(ns, bps)
        return dataclasses.replace(self, rate_bytes_per_s=bps)


def tbf_arguments(rate_bytes_per_s: float) -> list[str]:
    """``tc qdisc`` arguments of the tbf that limits a link to ``rate_bytes_per_s``."""
    rate_bit = int(round(rate_bytes_per_s * 8))
    burst = max(TBF_MIN_BURST_BYTES, int(rate_bytes_per_s * 1e-3))
    return ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst), "latency", f"{TBF_LATENCY_S * 1e3:g}ms"]


def _apply_rate(ns: str, rate_bytes_per_s: float | None) -> None:
    if rate_bytes_per_s is None:
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
    else:
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root"]
             + tbf_arguments(rate_bytes_per_s))


def qdisc_of(ns: str) -> str:
    """``tc qdisc show dev eth0`` inside a node (for checks and reports)."""
    return _run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"]).stdout.strip()


_LAUNCHER = """#!/bin/sh
# pmac emulated cluster: hydra calls this instead of ssh as: SCRIPT [-x ...] HOST COMMAND...
# It runs COMMAND inside the namespace of HOST, under its own host name.
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
host=$1; shift
case "$host" in
{cases}
  *) echo "pmac emulated cluster: unknown host $host" >&2; exit 255;;
esac
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
"""


def _write_launcher(workdir: Path, nodes: tuple[str, ...], addresses: tuple[str, ...]) -> Path:
    cases = "\n".join(f"  {a}|{n}) ns={n};;" for n, a in zip(nodes, addresses))
    path = workdir / "launch"
    path.write_text(_LAUNCHER.format(cases=cases))
    path.chmod(0o755)
    return path


def _build(prefix: str, n_nodes: int, workdir: Path) -> tuple[tuple[str, ...], tuple[str, ...], str, str]:
    bridge, bridge_addr = f"{prefix}-br", f"{SUBNET}.{BRIDGE_HOST}"
    nodes = tuple(f"{prefix}-n{i}" for i in range(n_nodes))
    addrs = tuple(f"{SUBNET}.{i + 1}" for i in range(n_nodes))
    _run(["ip", "link", "add", bridge, "type", "bridge"])
    _run(["ip", "addr", "add", f"{bridge_addr}/24", "dev", bridge])
    _run(["ip", "link", "set", bridge, "up"])
    hosts = "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in zip(nodes, addrs))
    for i, (ns, addr) in enumerate(zip(nodes, addrs)):
        veth = f"{prefix}-v{i}"
        (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
        (NETNS_ETC / ns / "hosts").write_text(hosts)
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        _run(["ip", "link", "set", veth, "master", bridge, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
    return nodes, addrs, bridge, bridge_addr


_active: set[str] = set()
_active_lock = threading.Lock()


def _teardown(prefix: str) -> None:
    with _active_lock:
        if prefix not in _active:
            return
        _active.discard(prefix)
    remove_all(prefix)


def _atexit_teardown() -> None:
    for prefix in list(_active):
        _teardown(prefix)


atexit.register(_atexit_teardown)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into SystemExit while the cluster lives, so ``finally`` runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        old[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            # None: the old handler was not installed from Python (e.g. pmac's tracer shim, when
            # ``pmac trace`` runs this launcher); Python cannot put it back, so ours stays (it
            # exits through SystemExit, so atexit handlers such as the shim's flush still run)
            if h is not None:
                signal.signal(s, h)


@contextlib.contextmanager
def emulated_cluster(n_nodes: int, rate: str | float | None = None, *, prefix: str = PREFIX,
                     mpi: MpiInstall | None = None, lock_timeout_s: float = 600.0) -> Iterator[EmulatedCluster]:
    """Create ``n_nodes`` namespace nodes on a bridge, optionally rate-limited; remove them on exit.

    Stale namespaces and links of ``prefix`` (a killed earlier run) are removed first.
    """
    if not isinstance(n_nodes, int) or not 1 <= n_nodes <= MAX_NODES:
        raise InputError(f"n_nodes must be an integer in 1..{MAX_NODES}, got {n_nodes!r}")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,9}", prefix):
        raise InputError(f"prefix must be 1-10 lower-case letters/digits (interface names are short), got {prefix!r}")
    bps = None if rate is None else parse_rate(rate)
    reason = capability()
    if reason:
        raise ToolMissingError(f"emulated cluster: {reason}")
    mpi = mpi or find_mpi()
    if mpi.flavour != "mpich":
        raise ToolMissingError(f"emulated cluster: needs MPICH's hydra mpiexec, found {mpi.flavour} "
                               f"({mpi.mpiexec})")
    with _host_lock(lock_timeout_s), _signals_raise():
        remove_all(prefix)
        workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        with _active_lock:
            _active.add(prefix)
        try:
            nodes, addrs, bridge, bridge_addr = _build(prefix, n_nodes, workdir)
            script = _write_launcher(workdir, nodes, addrs)
            cluster = EmulatedCluster(prefix=prefix, nodes=nodes, addresses=addrs, bridge=bridge,
                                      bridge_address=bridge_addr, launcher_script=str(script), mpi=mpi)
            if bps is not None:
                cluster = cluster.set_rate(bps)
            yield cluster
        finally:
            _teardown(prefix)
            shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------- machine variants

TRANSPORTS = ("shm", "tcp")


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One emulated machine: shared memory on the host, or TCP between namespace nodes.

    ``name`` is the machine profile's name (``machines/<name>.yaml``).
    """

    name: str
    transport: str
    rate_bytes_per_s: float | None = None
    n_nodes: int = 1

    def __post_init__(self):
        if self.transport not in TRANSPORTS:
            raise ValueError(f"variant {self.name}: transport must be one of {TRANSPORTS}, got {self.transport!r}")
        if self.transport == "shm" and (self.rate_bytes_per_s is not None or self.n_nodes != 1):
            raise ValueError(f"variant {self.name}: shared memory has one node and no link rate")
        if self.n_nodes < 1:
            raise ValueError(f"variant {self.name}: n_nodes must be >= 1")


#: the shipped variants: machines/<name>.yaml
VARIANTS = (
    Variant(name="emu-shm", transport="shm"),
    Variant(name="emu-tcp", transport="tcp", n_nodes=2),
    Variant(name="emu-tcp-1gbit", transport="tcp", rate_bytes_per_s=1.25e8, n_nodes=2),
    Variant(name="emu-tcp-200mbit", transport="tcp", rate_bytes_per_s=2.5e7, n_nodes=2),
    # slow enough that the examples' sustained traffic exceeds the rate (the tbf bucket passes
    # sporadic small messages at line speed): the base of the bandwidth what-if check
    Variant(name="emu-tcp-20mbit", transport="tcp", rate_bytes_per_s=2.5e6, n_nodes=2),
)


def variant(name: str) -> Variant:
    for v in VARIANTS:
        if v.name == name:
            return v
    raise InputError(f"unknown emulated variant '{name}' (known: {', '.join(v.name for v in VARIANTS)})")


@dataclass(frozen=True, kw_only=True)
class Launcher:
    """How to start ``n_ranks`` on one variant: mpiexec prefix and placement (one rank per node on TCP)."""

    variant: Variant
    cluster: EmulatedCluster | None = None
    mpi: MpiInstall | None = None

    def ranks_per_node(self, n_ranks: int) -> int:
        return n_ranks if self.variant.transport == "shm" else math.ceil(n_ranks / self.variant.n_nodes)

    def rank_to_node(self, n_ranks: int) -> tuple[int, ...]:
        rpn = self.ranks_per_node(n_ranks)
        return tuple(r // rpn for r in range(n_ranks))

    def prefix(self, n_ranks: int) -> list[str]:
        if self.variant.transport == "shm":
            mpi = self.mpi or find_mpi()
            return [mpi.mpiexec, "-n", str(n_ranks)]
        assert self.cluster is not None
        return self.cluster.mpiexec_prefix(n_ranks, self.ranks_per_node(n_ranks))


class VariantSwitch:
    """One emulated cluster serving several variants: :meth:`activate` sets the link rate.

    Switching is a ``tc`` call, so measurements of the variants can be interleaved.
    """

    def __init__(self, cluster: EmulatedCluster | None, mpi: MpiInstall):
        self._cluster = cluster
        self._mpi = mpi

    def activate(self, v: Variant) -> Launcher:
        if v.transport == "shm":
            return Launcher(variant=v, mpi=self._mpi)
        if self._cluster is None or self._cluster.n_nodes < v.n_nodes:
            raise InputError(f"variant {v.name} needs {v.n_nodes} nodes; the cluster was not built for it")
        if self._cluster.rate_bytes_per_s != v.rate_bytes_per_s:
            self._cluster = self._cluster.set_rate(v.rate_bytes_per_s)
        return Launcher(variant=v, cluster=self._cluster, mpi=self._mpi)


@contextlib.contextmanager
def variant_switch(variants: tuple[Variant, ...] | list[Variant], **cluster_kw) -> Iterator[VariantSwitch]:
    """Build the cluster the TCP variants need (if any) and yield a :class:`VariantSwitch`."""
    mpi = cluster_kw.pop("mpi", None) or find_mpi()
    n_nodes = max([v.n_nodes for v in variants if v.transport == "tcp"], default=0)
    if n_nodes == 0:
        yield VariantSwitch(None, mpi)
        return
    with emulated_cluster(n_nodes, mpi=mpi, **cluster_kw) as cluster:
        yield VariantSwitch(cluster, mpi)


# ---------------------------------------------------------------- network profiles of the variants

def probe_runs(variants) -> list[tuple[Variant, str]]:
    """The network probe runs the variants need: (variant, "shm" | "tcp-intra" | "inter")."""
    runs = [(v, "shm") for v in variants if v.transport == "shm"]
    tcp = [v for v in variants if v.transport == "tcp"]
    if tcp:
        runs.append((tcp[0], "tcp-intra"))
        runs += [(v, "inter") for v in tcp]
    return runs


def probe_with_switch(sw: VariantSwitch, runs, *, quick: bool, workdir: str | Path, progress=None,
                      timeout_s: float | None = None, probe_args: list[str] = (),
                      fit: bool = True) -> dict[tuple[str, str], tuple]:
    """Run the network probe for each of ``runs`` (:func:`probe_runs`) on an open
    :class:`VariantSwitch`; ``{(variant, what): (NetworkModel, raw tables, quick)}`` (the model
    None when not ``fit``; ``probe_args`` go to probes/network.py)."""
    from .probe_network import measure_network

    progress = progress or (lambda f, m: None)
    workdir = Path(workdir)
    done: dict[tuple[str, str], tuple] = {}
    for i, (v, what) in enumerate(runs):
        def sub(f, m, i=i, name=f"{v.name} {what}"):
            progress((i + f) / len(runs), f"{name}: {m}")
        kw = dict(quick=quick, workdir=workdir / f"{v.name}-{what}", progress=sub, timeout_s=timeout_s,
                  probe_args=probe_args, fit=fit)
        if what == "shm":
            done[(v.name, what)] = (*measure_network(n_ranks=2, **kw), quick)
        else:
            launcher = sw.activate(v)
            cl = launcher.cluster
            rpn = 2 if what == "tcp-intra" else 1
            done[(v.name, what)] = (*measure_network(mpiexec_prefix=cl.mpiexec_prefix(2, rpn),
                                                     node_map=list(cl.rank_to_node(2, rpn)), **kw), quick)
    return done


def pool_probes(rounds: list[dict[tuple[str, str], tuple]]) -> dict[tuple[str, str], tuple]:
    """One fit per probe run from the repetitions of several rounds of :func:`probe_with_switch`
    (raw tables concatenated, fitted again: the fit's quantile then spans every round)."""
    import pandas as pd

    from .probe_network import model_from_record

    out = {}
    for key in rounds[0]:
        parts = [r[key] for r in rounds]
        tables = {k: pd.concat([p[1][k] for p in parts if k in p[1]], ignore_index=True) for k in parts[0][1]}
        model = model_from_record(tables, {"mpi_library": parts[0][0].mpi_library})
        out[key] = (model, tables, all(p[2] for p in parts))
    return out


def assemble_networks(variants, done: dict[tuple[str, str], tuple]) -> dict[str, tuple]:
    """``{name: (NetworkModel, raw tables, {record: quick})}`` per variant from the probe runs:
    a TCP variant's intra_node is the one TCP-over-loopback run, its inter_node its own run."""
    import pandas as pd

    from .profile import NetworkModel

    tcp = [v for v in variants if v.transport == "tcp"]
    out = {}
    for v in variants:
        if v.transport == "shm":
            model, tables, q = done[(v.name, "shm")]
            out[v.name] = (model, tables, {f"{v.name}-shm": q})
            continue
        intra_model, intra_tables, q_intra = done[(tcp[0].name, "tcp-intra")]
        inter_model, inter_tables, q_inter = done[(v.name, "inter")]
        model = NetworkModel(intra_node=intra_model.intra_node, inter_node=inter_model.inter_node,
                             collectives=tuple(inter_model.collectives) + tuple(intra_model.collectives),
                             mpi_library=inter_model.mpi_library, bcast_root=inter_model.bcast_root,
                             collective_loop=inter_model.collective_loop,
                             # as pmac.fit_network.fit_interpreter refits the two runs' tables: the intra-node pair's
                             interpreter_collective_s=intra_model.interpreter_collective_s,
                             interpreter_p2p_s=intra_model.interpreter_p2p_s)
        tables = {k: pd.concat([intra_tables[k], inter_tables[k]], ignore_index=True)
                  for k in inter_tables if k in intra_tables}
        out[v.name] = (model, tables, {f"{tcp[0].name}-tcp-intra": q_intra, f"{v.name}-inter": q_inter})
    return out


def read_probe_rounds(dirs, runs, quick: bool = True) -> list[dict[tuple[str, str], tuple]]:
    """The probe records of :func:`probe_with_switch` rounds kept in ``dirs`` (one folder a round,
    ``<variant>-<what>/network.npz`` inside), fitted again: what :func:`pool_probes` takes."""
    from .probe_network import model_from_record, read_record

    out = []
    for d in dirs:
        one = {}
        for v, what in runs:
            tables, meta = read_record(Path(d) / f"{v.name}-{what}" / "network.npz")
            one[(v.name, what)] = (model_from_record(tables, meta), tables, bool(meta.get("quick", quick)))
        out.append(one)
    return out


def probe_variant_networks(variants: tuple[Variant, ...] | list[Variant], *, quick: bool, workdir: str | Path,
                           progress=None, timeout_s: float | None = None, reuse: bool = False,
                           rounds: int = 1) -> dict[str, tuple]:
    """Measure the network of every variant with pmac's network probe (two ranks per run).

    Returns ``{name: (NetworkModel, raw tables, {record: quick})}``. Shared memory: two ranks on the host
    (``intra_node``). TCP: two ranks on two nodes (``inter_node`` and its collectives) at the
    variant's rate, and two ranks in one node (``intra_node``: TCP over the node's loopback,
    as MPIR_CVAR_NOLOCAL makes it; no tbf there, so measured once for all TCP variants).
    Each run keeps its probe record in ``workdir/<variant>-<what>/network.npz``; ``reuse`` fits
    existing records again instead of measuring (no cluster is built then).

    ``rounds`` > 1: every variant is probed once a round, the variants in turn, and each is fitted
    on the repetitions of all rounds (:func:`pool_probes`; records in ``workdir/<round>/...``).
    Why: the variants share one host whose speed drifts for minutes (this 2-vCPU VM: the same
    back-to-back 8 B allreduce over TCP took 19.9 and 12.8 us a call in two runs of
    bench/call_interplay minutes apart, 24 Nov 00:06), so variants
    probed one after the other differ by the host's state as much as by their links; in turns,
    each sees the same spells, as the measured runs of bench/validate_emulated do.
    """
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    progress = progress or (lambda f, m: None)
    workdir = Path(workdir)
    runs = probe_runs(variants)
    dirs = [workdir] if rounds == 1 else [workdir / str(k) for k in range(rounds)]
    if reuse:
        done_rounds = read_probe_rounds(dirs, runs, quick)
    else:
        done_rounds = []
        with variant_switch(variants) as sw:
            for k, d in enumerate(dirs):
                def sub(f, m, k=k):
                    progress((k + f) / rounds, m if rounds == 1 else f"round {k + 1}/{rounds}: {m}")
                done_rounds.append(probe_with_switch(sw, runs, quick=quick, workdir=d, progress=sub,
                                                     timeout_s=timeout_s))
    done = done_rounds[0] if rounds == 1 else pool_probes(done_rounds)
    out = assemble_networks(variants, done)
    progress(1.0, "done")
    return out

"""Network topologies for the replay's contention model: networkx graphs and their routes.

A :class:`Topology` is an undirected networkx graph whose edges are links (attributes
``bandwidth_bytes_per_s`` and ``latency_s``) and a tuple ``hosts`` of the graph nodes that are
compute nodes: placement node ``i`` of a replay runs on ``hosts[i]``. Every link is full duplex
(one resource per direction). Routes are shortest paths in hops (networkx BFS, ties broken by
networkx's deterministic order), computed once for every host pair by :func:`routes`.

Generators: :func:`fat_tree` (two-level leaf/spine), :func:`torus` (k-ary n-cube, one host per
switch), :func:`dragonfly` (all-to-all groups of all-to-all routers), :func:`star` (one switch),
and :func:`from_simgrid` (SimGrid platform XML: ``<host>``/``<link>``/``<route>`` zones and
``<cluster>`` elements, FAT_TREE and TORUS clusters included).
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

from .errors import InputError
from .units import parse_quantity


@dataclass(frozen=True, kw_only=True, eq=False)
class Topology:
    graph: nx.Graph
    hosts: tuple[str, ...]
    name: str = ""
    #: explicit routes (host, host) -> list of edge keys (u, v) from a platform file; else BFS
    explicit_routes: dict = field(default_factory=dict)

    def __post_init__(self):
        missing = [h for h in self.hosts if h not in self.graph]
        if missing:
            raise ValueError(f"topology {self.name}: hosts not in the graph: {missing[:3]}")
        for u, v, d in self.graph.edges(data=True):
            bw = d.get("bandwidth_bytes_per_s")
            if bw is None or not bw > 0:
                raise ValueError(f"topology {self.name}: link {u}-{v} needs bandwidth_bytes_per_s > 0")
            if d.get("latency_s", 0.0) < 0:
                raise ValueError(f"topology {self.name}: link {u}-{v} has negative latency_s")

    @property
    def n_hosts(self) -> int:
        return len(self.hosts)


@dataclass(frozen=True, kw_only=True)
class Routes:
    """Routes of every host pair as directed link ids (CSR over ``src * n_hosts + dst``)."""

    n_hosts: int
    route_off: np.ndarray      # int64 [n_hosts**2 + 1]
    route_links: np.ndarray    # int64
    link_inv_bw: np.ndarray    # float64 [n_links], seconds per byte
    route_lat_s: np.ndarray    # float64 [n_hosts**2], sum of latencies
    route_inv_bw: np.ndarray   # float64 [n_hosts**2], 1 / bottleneck bandwidth
    link_names: tuple[str, ...] = ()


def routes(topo: Topology) -> Routes:
    g = topo.graph
    link_id: dict[tuple, int] = {}
    inv: list[float] = []
    lat: list[float] = []
    names: list[str] = []

    def directed(u, v):
        key = (u, v)
        if key not in link_id:
            d = g.edges[u, v]
            link_id[key] = len(inv)
            inv.append(1.0 / float(d["bandwidth_bytes_per_s"]))
            lat.append(float(d.get("latency_s", 0.0)))
            names.append(f"{u}->{v}")
        return link_id[key]

    h = len(topo.hosts)
    off = np.zeros(h * h + 1, np.int64)
    links: list[int] = []
    rlat = np.zeros(h * h)
    rinv = np.zeros(h * h)
    for i, src in enumerate(topo.hosts):
        paths = None
        for j, dst in enumerate(topo.hosts):
            k = i * h + j
            ids: list[int] = []
            if i != j:
                if (src, dst) in topo.explicit_routes:
                    ids = [directed(u, v) for u, v in topo.explicit_routes[(src, dst)]]
                else:
                    if paths is None:
                        paths = nx.single_source_shortest_path(g, src)
                    if dst not in paths:
                        raise InputError(f"topology {topo.name}: no route from {src} to {dst}")
                    p = paths[dst]
                    ids = [directed(u, v) for u, v in zip(p, p[1:])]
            links.extend(ids)
            off[k + 1] = len(links)
            if ids:
                rlat[k] = sum(lat[x] for x in ids)
                rinv[k] = max(inv[x] for x in ids)
    return Routes(n_hosts=h, route_off=off, route_links=np.asarray(links, np.int64),
                  link_inv_bw=np.asarray(inv, np.float64), route_lat_s=rlat, route_inv_bw=rinv,
                  link_names=tuple(names))


def _add(g, u, v, bw, lat):
    g.add_edge(u, v, bandwidth_bytes_per_s=float(bw), latency_s=float(lat))


def star(n_hosts: int, *, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> Topology:
    """Every host on its own link to one switch."""
    g = nx.Graph()
    hosts = tuple(f"h{i}" for i in range(n_hosts))
    for hname in hosts:
        _add(g, hname, "sw", bandwidth_bytes_per_s, latency_s)
    return Topology(graph=g, hosts=hosts, name=f"star{n_hosts}")


def fat_tree(n_hosts: int, *, hosts_per_leaf: int = 16, n_spines: int = 4, bandwidth_bytes_per_s: float,
             latency_s: float = 0.0, uplink_bandwidth_bytes_per_s: float | None = None) -> Topology:
    """Two-level fat tree: leaves of ``hosts_per_leaf`` hosts, each leaf linked to every spine."""
    g = nx.Graph()
    hosts = tuple(f"h{i}" for i in range(n_hosts))
    n_leaves = -(-n_hosts // hosts_per_leaf)
    up = uplink_bandwidth_bytes_per_s or bandwidth_bytes_per_s
    for i, hname in enumerate(hosts):
        _add(g, hname, f"leaf{i // hosts_per_leaf}", bandwidth_bytes_per_s, latency_s)
    if n_leaves > 1:
        for leaf in range(n_leaves):
            for s in range(n_spines):
                _add(g, f"leaf{leaf}", f"spine{s}", up, latency_s)
    return Topology(graph=g, hosts=hosts, name=f"fattree{n_hosts}")


def torus(dims: tuple[int, ...], *, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> Topology:
    """k-ary n-cube with wrap-around links; one host per switch (host link of the same speed)."""
    g = nx.Graph()
    coords = list(itertools.product(*[range(d) for d in dims]))
    hosts = []
    for c in coords:
        sw = "s" + "_".join(map(str, c))
        hname = "h" + "_".join(map(str, c))
        hosts.append(hname)
        _add(g, hname, sw, bandwidth_bytes_per_s, latency_s)
        for axis, d in enumerate(dims):
            if d < 2:
                continue
            n = list(c)
            n[axis] = (c[axis] + 1) % d
            other = "s" + "_".join(map(str, n))
            if other != sw:
                _add(g, sw, other, bandwidth_bytes_per_s, latency_s)
    return Topology(graph=g, hosts=tuple(hosts), name="torus" + "x".join(map(str, dims)))


def dragonfly(n_groups: int, routers_per_group: int, hosts_per_router: int, *, bandwidth_bytes_per_s: float,
              latency_s: float = 0.0, global_bandwidth_bytes_per_s: float | None = None) -> Topology:
    """Dragonfly: routers all-to-all inside a group; groups all-to-all, global link (a, b) attached
    to router ``b % routers_per_group`` of group a (and ``a % routers_per_group`` of group b)."""
    g = nx.Graph()
    hosts = []
    for gr in range(n_groups):
        for r in range(routers_per_group):
            rt = f"g{gr}r{r}"
            g.add_node(rt)
            for h in range(hosts_per_router):
                hname = f"g{gr}r{r}h{h}"
                hosts.append(hname)
                _add(g, hname, rt, bandwidth_bytes_per_s, latency_s)
            for r2 in range(r):
                _add(g, rt, f"g{gr}r{r2}", bandwidth_bytes_per_s, latency_s)
    gbw = global_bandwidth_bytes_per_s or bandwidth_bytes_per_s
    for a in range(n_groups):
        for b in range(a):
            _add(g, f"g{a}r{b % routers_per_group}", f"g{b}r{a % routers_per_group}", gbw, latency_s)
    return Topology(graph=g, hosts=tuple(hosts), name=f"dragonfly{n_groups}x{routers_per_group}x{hosts_per_router}")


# ------------------------------------------------------------------ SimGrid platforms

def _q(el, attr, what, path, default=None):
    v = el.get(attr)
    if v is None:
        if default is not None:
            return default
        raise InputError(f"<{el.tag} id='{el.get('id')}'> lacks '{attr}'", path=path)
    v = v.replace("Bps", "B/s").replace("bps", "bit/s")
    try:
        return parse_quantity(v, what)
    except Exception as exc:  # units module raises InputError/ValueError
        raise InputError(f"<{el.tag} id='{el.get('id')}'> {attr}={el.get(attr)!r}: {exc}", path=path) from None


def _radical(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def from_simgrid(path: str | Path) -> Topology:
    """Import a SimGrid platform file (zones with hosts, links and routes; clusters)."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise InputError(f"not a readable SimGrid platform ({exc})", path=path) from None
    g = nx.Graph()
    hosts: list[str] = []
    explicit: dict = {}
    links: dict[str, tuple[float, float]] = {}
    for el in root.iter("link"):
        links[el.get("id")] = (_q(el, "bandwidth", "bytes_per_s", path), _q(el, "latency", "s", path, 0.0))
    for el in root.iter("host"):
        hosts.append(el.get("id"))
        g.add_node(el.get("id"))
    for el in root.iter("route"):
        src, dst = el.get("src"), el.get("dst")
        ids = [c.get("id") for c in el.iter("link_ctn")]
        if src == dst:
            continue
        unknown = [i for i in ids if i not in links]
        if unknown:
            raise InputError(f"route {src}->{dst} uses unknown link {unknown[0]}", path=path)
        # a route is a chain of link nodes: src - L1 - L2 ... - dst; each SimGrid link becomes
        # an edge between two pseudo nodes so routes sharing a link share the resource
        hops = []
        for i in ids:
            a, b = f"{i}:a", f"{i}:b"
            bw, lat = links[i]
            _add(g, a, b, bw, lat)
            hops.append((a, b))
        # glue edges of infinite speed
        chain = [(src, hops[0][0])] + [(hops[k][1], hops[k + 1][0]) for k in range(len(hops) - 1)] + \
                [(hops[-1][1], dst)] if hops else [(src, dst)]
        for u, v in chain:
            if not g.has_edge(u, v):
                _add(g, u, v, 1e30, 0.0)
        edges = []
        for k, (a, b) in enumerate(hops):
            edges.append(chain[k])
            edges.append((a, b))
        edges.append(chain[-1])
        explicit[(src, dst)] = edges
        if el.get("symmetrical", "YES").upper() != "NO" and (dst, src) not in explicit:
            explicit[(dst, src)] = [(v, u) for u, v in reversed(edges)]
    for el in root.iter("cluster"):
        prefix, suffix = el.get("prefix", ""), el.get("suffix", "")
        names = [f"{prefix}{i}{suffix}" for i in _radical(el.get("radical", "0"))]
        bw = _q(el, "bw", "bytes_per_s", path)
        lat = _q(el, "lat", "s", path, 0.0)
        kind = el.get("topology", "FLAT").upper()
        params = el.get("topo_parameters", "")
        if kind == "TORUS":
            dims = tuple(int(x) for x in params.split(","))
            t = torus(dims, bandwidth_bytes_per_s=bw, latency_s=lat)
        elif kind == "FAT_TREE":
            parts = params.split(";")
            down = [int(x) for x in parts[1].split(",")]
            up = [int(x) for x in parts[2].split(",")]
            t = fat_tree(len(names), hosts_per_leaf=down[0], n_spines=max(1, up[-1] * (down[1] if len(down) > 1 else 1) // max(1, len(down))),
                         bandwidth_bytes_per_s=bw, latency_s=lat)
        else:
            t = star(len(names), bandwidth_bytes_per_s=bw, latency_s=lat)
        mapping = dict(zip(t.hosts, names))
        sub = nx.relabel_nodes(t.graph, {n: mapping.get(n, f"{el.get('id')}:{n}") for n in t.graph.nodes})
        g.update(sub)
        hosts.extend(names)
    if not hosts:
        raise InputError("no <host> or <cluster> in this platform", path=path)
    return Topology(graph=g, hosts=tuple(hosts), name=path.stem, explicit_routes=explicit)

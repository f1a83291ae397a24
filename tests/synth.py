"""Synthetic machine profiles and signatures for the convolver / predict tests (no files needed)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pmac.memsig import BURSTS, REUSE, reuse_bin
from pmac.profile import (CacheLevel, ComputeModel, LinkModel, LinkSegment, MachineProfile, MemoryLevel, NetworkModel,
                          NodeModel, OverlapModel)
from pmac.signature import SignatureHeader, make_signature
from pmac.trace import NONE, Op


def two_level_profile(name="synth", *, l1_bw=100e9, l2_bw=50e9, mem_bw=10e9, flops=1e9, simd=4e9,
                      beta=None, n_cores=2, network=True, dep=True, branch=True, latency_s=1e-6,
                      net_bw=1e9) -> MachineProfile:
    """L1 32 KiB (512 lines), L2 1 MiB private non-inclusive, then memory."""
    l1 = CacheLevel(name="L1d", size_bytes=32 * 1024, line_bytes=64, shared_by_cores=1,
                    bandwidth_1core_bytes_per_s={"load_unit": l1_bw, "store": l1_bw / 2})
    l2 = CacheLevel(name="L2", size_bytes=1024 * 1024, line_bytes=64, shared_by_cores=1,
                    bandwidth_1core_bytes_per_s={"load_unit": l2_bw, "store": l2_bw / 2})
    mem = MemoryLevel(bandwidth_1core_bytes_per_s={"load_unit": mem_bw, "store": mem_bw / 2})
    comp = ComputeModel(isa="x86-64-v3", flop_per_s_scalar=flops, flop_per_s_simd=simd,
                        dependency_distance=(1.0, 2.0, 4.0, 8.0) if dep else (),
                        dependency_flop_per_s=(flops / 4, flops / 2, flops, flops) if dep else (),
                        branch_miss_frac=(0.0, 0.5) if branch else (),
                        branch_cost_s=(1e-9, 6e-9) if branch else ())
    node = NodeModel(cpu_model="synthetic", n_cores=n_cores, caches=(l1, l2), memory=mem, compute=comp)
    net = None
    if network:
        link = LinkModel(latency_s=latency_s, bandwidth_bytes_per_s=net_bw, eager_threshold_bytes=65536)
        net = NetworkModel(intra_node=link, inter_node=link)
    ov = OverlapModel(kind="max_beta_min", params={"beta": beta}, calibrated_on=("x",)) if beta is not None else None
    return MachineProfile(name=name, node=node, network=net, overlap=ov)


def memory_tables(bursts: list[dict], hists: list[dict]) -> dict[str, pd.DataFrame]:
    """bursts: dicts of BURSTS columns (missing -> 0; sample_frac -> 1, nothing sampled away); hists: (rank, seq, access, {distance: count})."""
    rows = []
    for b in bursts:
        rows.append({c: b.get(c, 1.0 if c == "sample_frac" else 0) for c in BURSTS.names})
    rrows = []
    for h in hists:
        for d, cnt in h["counts"].items():
            rrows.append(dict(rank=h["rank"], seq=h["seq"], function="", line_bytes=h.get("line_bytes", 64),
                              access=h["access"], bin=int(reuse_bin(np.array([d]))[0]), count=float(cnt)))
    return {"bursts": BURSTS.coerce(pd.DataFrame(rows)), "reuse": REUSE.coerce(pd.DataFrame(rrows))}


def pingpong_signature(n_iter=3, msg_bytes=1000, burst_s=1e-3, memory=None, name="pp"):
    """Two ranks: INIT, n_iter x (rank0 SEND/RECV, rank1 RECV/SEND), FINALIZE."""
    rows = []
    for r in (0, 1):
        ops = [(Op.INIT, NONE, NONE)]
        for _ in range(n_iter):
            if r == 0:
                ops += [(Op.SEND, 1, NONE), (Op.RECV, NONE, 1)]
            else:
                ops += [(Op.RECV, NONE, 0), (Op.SEND, 0, NONE)]
        ops.append((Op.FINALIZE, NONE, NONE))
        t = 0.0
        for s, (op, dest, src) in enumerate(ops):
            send = msg_bytes if op == Op.SEND else 0
            recv = msg_bytes if op == Op.RECV else 0
            rows.append(dict(rank=r, seq=s, op=int(op), t_start_s=t + burst_s, t_end_s=t + burst_s + 1e-6,
                             burst_s=burst_s if s > 0 else 0.0, comm=0, dest=dest, source=src, send_tag=0,
                             recv_tag=0, send_bytes=send, recv_bytes=recv, root=NONE, request=NONE,
                             req_offset=NONE, n_requests=0, new_comm=NONE))
            t += burst_s + 1e-6
    header = SignatureHeader(name=name, n_ranks=2, source_format="synthetic",
                             memory_file="memory.npz" if memory else None)
    return make_signature(header, pd.DataFrame(rows), memory=memory)


def small_profile(name="m1"):
    """A two-cache node and an intra-node link of two segments (the schema tests' round trips)."""
    node = NodeModel(
        cpu_model="Test CPU", n_cores=2,
        caches=(CacheLevel(name="L1", size_bytes=32768, bandwidth_1core_bytes_per_s={"load_unit": 1e11}),
                CacheLevel(name="L2", size_bytes=1 << 20, ways=16, latency_s=4e-9)),
        memory=MemoryLevel(latency_s=9e-8, bandwidth_1core_bytes_per_s={"load_unit": 1e10}),
        compute=ComputeModel(isa="x86-64-v3", flop_per_s_scalar=1e9, flop_per_s_simd=8e9))
    net = NetworkModel(intra_node=LinkModel(
        latency_s=1e-7, bandwidth_bytes_per_s=1e10, eager_threshold_bytes=65536,
        segments=(LinkSegment(min_bytes=0, max_bytes=65536, latency_s=1e-7, bandwidth_bytes_per_s=5e9),
                  LinkSegment(min_bytes=65536, max_bytes=math.inf, latency_s=2e-6, bandwidth_bytes_per_s=1e10))))
    return MachineProfile(name=name, node=node, network=net, provenance={"command": "test"})

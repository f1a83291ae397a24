"""The instruction-fetch probe: generated x86-64 code, its checksum, its encoding, a real quick run."""

from __future__ import annotations

import mmap
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from probes import fetch as pf

REPO = Path(__file__).resolve().parents[1]
KiB = 1024

x86_64 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64")
                            or not sys.platform.startswith("linux"),
                            reason=f"the fetch probe runs x86-64 Linux code (this machine: {platform.machine()})")


# --- encoding: pure bytes, no execution ---------------------------------------------------------

def test_block_encoding_matches_hand_written_bytes():
    b = pf.encode_block([1, 2, 3, 4, 5, 6, 7, 0x0ABCDE], block_offset=128, target_offset=192)
    expected = bytes.fromhex(
        "4881C0 01000000"   # add rax, 1
        "4881C1 02000000"   # add rcx, 2
        "4881C2 03000000"   # add rdx, 3
        "4881C6 04000000"   # add rsi, 4
        "4981C0 05000000"   # add r8, 5
        "4981C1 06000000"   # add r9, 6
        "4981C2 07000000"   # add r10, 7
        "4981C3 DEBC0A00"   # add r11, 0x0ABCDE
        "E9 03000000"       # jmp +3: 192 - (128 + 61)
        "CCCCCC")           # int3 padding
    assert len(b) == 64 and b == expected


def test_jmp_rel32_backwards_and_add_encoding():
    b = pf.encode_block([9] * 8, block_offset=4096, target_offset=64)
    assert b[56] == 0xE9
    rel = int.from_bytes(b[57:61], "little", signed=True)
    assert rel == 64 - (4096 + 61) == -4093 and b[57:61] == bytes.fromhex("03F0FFFF")
    assert pf.encode_add(0, 0x12345) == bytes.fromhex("4881C0 45230100")
    assert pf.encode_add(7, 1) == bytes.fromhex("4981C3 01000000")
    with pytest.raises(ValueError):
        pf.encode_add(0, -1)


def _decode_chain(code: bytes, first: int, tail: int, n_blocks: int) -> list[int]:
    """Follow the jmp rel32 of each block from first until the tail; physical block numbers."""
    visited, at = [], first
    while at != tail:
        assert (at - 128) % 64 == 0 and 0 <= (at - 128) // 64 < n_blocks
        visited.append((at - 128) // 64)
        assert code[at + 56] == 0xE9
        at = at + 61 + int.from_bytes(code[at + 57:at + 61], "little", signed=True)
        assert len(visited) <= n_blocks, "chain loops without reaching the tail"
    return visited


@pytest.mark.parametrize("pattern", pf.PATTERNS)
@pytest.mark.parametrize("n_blocks", [1, 2, 7, 256])
def test_generated_code_is_the_documented_chain(pattern, n_blocks):
    code, order, imms, tail = pf.generate(n_blocks, pattern, seed=5)
    assert len(code) == 128 + 64 * n_blocks
    assert sorted(order.tolist()) == list(range(n_blocks))  # a permutation: every block once
    if pattern == "sequential":
        assert order.tolist() == list(range(n_blocks))
    # the loop tail (dec rdi; jnz rel32) goes back to the first block of the chain
    assert code[tail:tail + 5] == bytes.fromhex("48FFCF 0F85")
    first = tail + 9 + int.from_bytes(code[tail + 5:tail + 9], "little", signed=True)
    assert first == 128 + 64 * int(order[0])
    chain = _decode_chain(code, first, tail, n_blocks)
    assert chain == order.tolist()
    for i in range(n_blocks):  # each block is the hand-checked encoding with its immediates
        at = 128 + 64 * i
        nxt = chain.index(i) + 1
        target = 128 + 64 * chain[nxt] if nxt < n_blocks else tail
        assert code[at:at + 64] == pf.encode_block(imms[i].tolist(), at, target)
    assert (imms > 0).all() and (imms < 1 << 20).all()


def test_random_chain_is_a_real_shuffle():
    _, order, _, _ = pf.generate(1024, "random", seed=0)
    in_place = int(np.sum(np.diff(order) == 1))
    assert in_place < 20  # almost no jump lands on the next line
    _, again, _, _ = pf.generate(1024, "random", seed=0)
    assert (order == again).all()  # fixed seed, same chain


# --- execution -----------------------------------------------------------------------------------

@x86_64
@pytest.mark.parametrize("pattern", pf.PATTERNS)
@pytest.mark.parametrize("n_blocks", [1, 3, 64, 1000])
def test_kernel_returns_hand_computed_checksum(pattern, n_blocks):
    with pf.make_kernel(n_blocks, pattern, seed=2) as k:
        assert k.footprint_bytes == 64 * n_blocks
        total = int(k.immediates.sum())
        for n in (0, 1, 2, 17, 1000):
            assert k.call(n) == k.expected(n) == n * total
        assert k.call(-4) == 0  # n <= 0 skips the loop


@x86_64
def test_checksum_wraps_like_int64():
    with pf.make_kernel(16, "random") as k:
        n = (1 << 62) // int(k.immediates.sum()) * 3  # n x sum exceeds 2**63: wraps negative
        assert k.expected(n) < 0
        assert k.expected(n) == (n * int(k.immediates.sum()) + (1 << 63)) % (1 << 64) - (1 << 63)


@x86_64
def test_random_kernel_visits_every_block_each_iteration():
    with pf.make_kernel(500, "random", seed=11) as k:
        assert sorted(k.order.tolist()) == list(range(500))
        assert _decode_chain(k.code, k.block_offset(int(k.order[0])), k.tail_offset, 500) == k.order.tolist()
        # every immediate is positive, so a skipped block would make the sum fall short
        assert k.call(3) == 3 * int(k.immediates.sum())


@x86_64
def test_rw_then_mprotect_when_wx_mapping_is_refused(monkeypatch):
    real = mmap.mmap

    def no_wx(*a, prot=mmap.PROT_READ | mmap.PROT_WRITE, **kw):
        if prot & mmap.PROT_EXEC and prot & mmap.PROT_WRITE:
            raise PermissionError("W+X refused")
        return real(*a, prot=prot, **kw)

    monkeypatch.setattr(pf.mmap, "mmap", no_wx)
    with pf.make_kernel(32, "random") as k:
        assert k.call(5) == k.expected(5)


@pytest.fixture(scope="module")
def quick_run():
    return pf.run(quick=True)


@x86_64
def test_quick_run_returns_documented_data(quick_run):
    r = quick_run
    assert set(r) == {"rows", "l1i", "miss_s", "miss_sequential_s", "baseline_footprint_bytes",
                      "miss_footprint_bytes"}
    keys = {"pattern", "footprint_bytes", "rep", "seconds_per_line_s", "seconds_per_instruction_s"}
    assert r["rows"] and all(set(row) == keys for row in r["rows"])
    assert all(row["seconds_per_line_s"] > 0 and row["seconds_per_instruction_s"] > 0 for row in r["rows"])
    fps = {row["footprint_bytes"] for row in r["rows"]}
    assert {4 * KiB, 1024 * KiB} <= fps
    for p in pf.PATTERNS:
        for fp in fps:  # every repetition kept
            assert len([x for x in r["rows"] if x["pattern"] == p and x["footprint_bytes"] == fp]) >= 3
    assert r["miss_s"] >= 0 and r["miss_sequential_s"] >= 0
    assert r["baseline_footprint_bytes"] in fps and r["miss_footprint_bytes"] in fps
    assert r["baseline_footprint_bytes"] < r["miss_footprint_bytes"]
    if r["l1i"] is not None:
        assert set(r["l1i"]) == {"size_bytes", "ways", "line_bytes"}
        assert r["baseline_footprint_bytes"] <= r["l1i"]["size_bytes"] // 2
        assert r["miss_footprint_bytes"] >= 4 * r["l1i"]["size_bytes"]


@x86_64
def test_code_far_beyond_l1i_costs_at_least_as_much_per_line(quick_run):
    def med(fp):
        return np.median([x["seconds_per_line_s"] for x in quick_run["rows"]
                          if x["pattern"] == "random" and x["footprint_bytes"] == fp])

    assert med(1024 * KiB) >= 0.8 * med(4 * KiB)


@x86_64
def test_cli_quick_runs():
    p = subprocess.run([sys.executable, "probes/fetch.py", "--quick"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "footprint_KiB" in p.stdout and "miss_s" in p.stdout


# --- platform and sysfs (faked) --------------------------------------------------------------

def test_other_architectures_are_refused(monkeypatch, capsys):
    monkeypatch.setattr(pf.platform, "machine", lambda: "aarch64")
    with pytest.raises(pf.UnsupportedPlatform, match="x86-64 only"):
        pf.run(quick=True)
    assert pf.main(["--quick"]) == 2
    assert capsys.readouterr().out == "fetch probe: x86-64 only (this machine: aarch64)\n"


def _cache_dir(root: Path, name: str, **files):
    d = root / name
    d.mkdir(parents=True)
    for k, v in files.items():
        (d / k).write_text(v + "\n")


def test_l1i_geometry_from_a_fake_sysfs(tmp_path):
    _cache_dir(tmp_path, "index0", type="Data", level="1", size="48K", ways_of_associativity="12",
               coherency_line_size="64")
    _cache_dir(tmp_path, "index1", type="Instruction", level="1", size="32K", ways_of_associativity="8",
               coherency_line_size="64")
    _cache_dir(tmp_path, "index2", type="Unified", level="2", size="2048K", ways_of_associativity="16",
               coherency_line_size="64")
    assert pf.l1i_geometry(str(tmp_path)) == {"size_bytes": 32 * KiB, "ways": 8, "line_bytes": 64}
    assert pf.l1i_geometry(str(tmp_path / "absent")) is None


def test_derived_footprints_fall_back_when_l1i_is_unknown():
    fps = pf.sweep_footprints(True, None)
    assert pf._pick(fps, None) == (16 * KiB, 256 * KiB)
    fps = pf.sweep_footprints(True, 32 * KiB)  # quick grid gains L1i / 2 and 4 x L1i
    assert pf._pick(fps, 32 * KiB) == (16 * KiB, 128 * KiB)
    assert pf._pick(pf.sweep_footprints(False, 48 * KiB), 48 * KiB) == (24 * KiB, 192 * KiB)

#!/usr/bin/env python3
"""Instruction-fetch probe: the cost of one 64-byte line of code against the code footprint.

Runs on its own (copy it to a new system; it needs only numpy and the Python standard library,
no compiler: the kernel is x86-64 machine code written into an executable ``mmap``)::

    python probes/fetch.py --quick     # prints a table and the derived L1i miss prices

x86-64 Linux only; elsewhere ``run()`` raises ``UnsupportedPlatform`` and the CLI exits 2.

The kernel (``make_kernel``) is ``long f(long n)``: it zeroes eight caller-saved accumulators
(rax, rcx, rdx, rsi, r8-r11), runs an outer loop n times over a chain of K code blocks, then
returns the sum of the accumulators. Each block is one cache line (64 bytes, 64-byte aligned):
eight independent ``add r64, imm32`` (7 bytes each, one per accumulator, so no add waits for
another) and a ``jmp rel32`` to the next block of the chain; the padding after the jump is int3
and never runs. The last block jumps to the loop tail (``dec rdi; jnz first block``). Every
immediate is known, so the return value is exactly n x (sum of all immediates) mod 2**64: a
wrong encoding or a skipped block shows up as a wrong checksum. Footprint = K x 64 bytes.

Probes (one core; every repetition kept: rows of pattern, footprint_bytes, rep,
seconds_per_line_s, seconds_per_instruction_s; a line runs ``INSTRUCTIONS_PER_LINE`` = 9):

- ``sequential``: block i jumps to block i+1 in memory. The front end's next-line prefetch
  sees the stream coming, so this shows how much of a beyond-L1i footprint prefetch hides.
- ``random``: the chain is a random permutation of the blocks (fixed seed), so every jump
  lands on an unrelated line, as in an interpreter's dispatch or large object-oriented code
  calling all over its text. Next-line prefetch cannot help; only a front end that fetches
  ahead along predicted branches can (see ``miss_s`` below).

The footprint sweeps from 4 KiB to 2 MiB (points 2**k and 1.5 x 2**k; quick: 4, 16, 64, 256,
1024 KiB; both add L1i / 2 and 4 x L1i, the footprints the derived figures use). Small
footprints run from L1i (and the decoded-op cache); past L1i the lines come from L2, past L2
from L3. At large footprints the time also includes what real code of that
size pays besides the cache: branch-target-buffer misses (the jumps are resolved at decode)
and, for random, instruction-TLB misses (one 4 KiB page per 64 lines).

Derived figures (what pmac uses as the price of one L1 instruction-cache miss):

- ``miss_s``: random pattern, median seconds per line at the smallest swept footprint of at
  least 4 x L1i minus that at the largest footprint of at most L1i / 2 (256 KiB and 16 KiB when
  the L1i size is unknown), floored at 0: the extra time of a line fetched from beyond L1i when
  nothing hides it. The random pattern is the one priced because the code that misses L1i in
  MPI applications (interpreters, deep library stacks, virtual dispatch) jumps, it does not
  stream; a compiled loop nest fits in L1i and pays nothing.
  On a core whose branch predictor runs ahead of fetch (decoupled front end: recent AMD and
  Intel cores), the jumps here are direct and predictable, so it prefetches along the chain
  and hides much of an L2 hit for as long as the branch-target buffer and the iTLB cover the
  code; the curve then rises in a second step where they stop covering it (on a Zen 3 VM:
  about 0.5 ns per line at 4 x L1i = 128 KiB, about 8 ns at 256 KiB where random lines span
  more 4 KiB pages than a 64-entry L1 iTLB maps, presumably). Read ``miss_s`` with the table beside it.
- ``miss_sequential_s``: the same difference for the sequential pattern, the lower bound when
  the missed code is straight-line and prefetch hides most of the miss.

The L1i geometry (size, ways, line) is read from sysfs (``/sys/devices/system/cpu/cpu0/cache``)
and reported (None where it is absent).
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import platform
import sys
import time

import numpy as np

KiB, MiB = 1024, 1024 ** 2
LINE_BYTES = 64
#: instructions executed per block (8 adds and the jmp)
INSTRUCTIONS_PER_LINE = 9
PATTERNS = ("sequential", "random")
#: footprints swept (bytes)
FOOTPRINTS_FULL = tuple(sorted([2 ** k * KiB for k in range(2, 12)] + [3 * 2 ** k * KiB for k in range(1, 10)]))
FOOTPRINTS_QUICK = (4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1024 * KiB)
#: defaults when the L1i size is unknown
BASELINE_DEFAULT_BYTES = 16 * KiB
MISS_DEFAULT_BYTES = 256 * KiB

# accumulators: (name, REX prefix of `add r64, imm32`, ModRM of 81 /0 = 0xC0 + 3-bit register number)
_ACC = (("rax", 0x48, 0xC0), ("rcx", 0x48, 0xC1), ("rdx", 0x48, 0xC2), ("rsi", 0x48, 0xC6),
        ("r8", 0x49, 0xC0), ("r9", 0x49, 0xC1), ("r10", 0x49, 0xC2), ("r11", 0x49, 0xC3))
_ADD_BYTES = 7                      # REX.W 81 /0 imm32
_JMP_AT = 8 * _ADD_BYTES            # 56: offset of the jmp rel32 in a block
_JMP_END = _JMP_AT + 5              # 61: rel32 counts from here
_HEADER_BYTES = 2 * LINE_BYTES      # prologue, loop tail and epilogue; blocks start here
_IMM_LIMIT = 1 << 20


class UnsupportedPlatform(RuntimeError):
    """The probe writes x86-64 machine code; it cannot run on this machine."""


def check_platform() -> None:
    m = platform.machine()
    if m.lower() not in ("x86_64", "amd64"):
        raise UnsupportedPlatform(f"fetch probe: x86-64 only (this machine: {m})")
    if not sys.platform.startswith("linux"):
        raise UnsupportedPlatform(f"fetch probe: Linux only (this system: {sys.platform})")


# --- encoding --------------------------------------------------------------------------------

def encode_add(reg: int, imm: int) -> bytes:
    """``add r64, imm32`` for accumulator number reg (index into the eight), 7 bytes."""
    if not 0 <= imm < 1 << 31:
        raise ValueError(f"immediate {imm} does not fit a positive imm32")
    _, rex, modrm = _ACC[reg]
    return bytes((rex, 0x81, modrm)) + imm.to_bytes(4, "little")


def encode_block(imms, block_offset: int, target_offset: int) -> bytes:
    """One 64-byte block at block_offset: 8 adds (immediates imms, accumulators in order), then
    ``jmp rel32`` to target_offset (offsets from the start of the code), int3 padding."""
    if len(imms) != 8:
        raise ValueError("a block has 8 immediates")
    rel = target_offset - (block_offset + _JMP_END)
    b = b"".join(encode_add(j, int(v)) for j, v in enumerate(imms))
    b += b"\xE9" + rel.to_bytes(4, "little", signed=True)
    return b + b"\xCC" * (LINE_BYTES - len(b))


def _rel32(frm_end: int, to: int) -> bytes:
    return (to - frm_end).to_bytes(4, "little", signed=True)


def _header(first_block: int) -> tuple[bytes, int]:
    """Prologue, loop tail and epilogue (at most _HEADER_BYTES) and the tail's offset."""
    zero = bytes.fromhex("31C0 31C9 31D2 31F6 4531C0 4531C9 4531D2 4531DB")  # xor r32,r32 x 8
    test = bytes.fromhex("4885FF")                                              # test rdi, rdi
    # epilogue: add rax, rcx/rdx/rsi/r8/r9/r10/r11 ; ret
    epi = bytes.fromhex("4801C8 4801D0 4801F0 4C01C0 4C01C8 4C01D0 4C01D8 C3")
    jle_at = len(zero) + len(test)          # jle epilogue: 0F 8E rel32
    jmp_at = jle_at + 6                     # jmp first block: E9 rel32
    tail = jmp_at + 5                       # dec rdi ; jnz first block
    epi_at = tail + 3 + 6
    code = (zero + test + b"\x0F\x8E" + _rel32(jle_at + 6, epi_at)
            + b"\xE9" + _rel32(jmp_at + 5, first_block)
            + bytes.fromhex("48FFCF") + b"\x0F\x85" + _rel32(tail + 9, first_block) + epi)
    if len(code) > _HEADER_BYTES:
        raise RuntimeError("fetch probe: header code does not fit its lines")
    return code + b"\xCC" * (_HEADER_BYTES - len(code)), tail


def chain_order(n_blocks: int, pattern: str, seed: int = 0) -> np.ndarray:
    """The order in which the blocks run: physical for sequential, a permutation for random."""
    if pattern == "sequential":
        return np.arange(n_blocks, dtype=np.int64)
    if pattern == "random":
        return np.random.default_rng(seed).permutation(n_blocks).astype(np.int64)
    raise ValueError(f"pattern must be one of {PATTERNS}, not {pattern!r}")


def _block_offsets(idx) -> np.ndarray:
    return _HEADER_BYTES + LINE_BYTES * np.asarray(idx, dtype=np.int64)


def generate(n_blocks: int, pattern: str, seed: int = 0):
    """(code bytes, chain order, immediates (n_blocks, 8) indexed by physical block, offset of
    the loop tail the last block of the chain jumps to)."""
    if n_blocks < 1:
        raise ValueError("n_blocks must be at least 1")
    order = chain_order(n_blocks, pattern, seed)
    rng = np.random.default_rng([seed, n_blocks])
    imms = (rng.choice(_IMM_LIMIT - 1, size=8 * n_blocks, replace=n_blocks * 8 > _IMM_LIMIT // 2)
            + 1).astype(np.int64).reshape(n_blocks, 8)
    header, tail = _header(int(_block_offsets(order[0])))
    blocks = np.full((n_blocks, LINE_BYTES), 0xCC, dtype=np.uint8)
    for j, (_, rex, modrm) in enumerate(_ACC):
        at = j * _ADD_BYTES
        blocks[:, at:at + 3] = (rex, 0x81, modrm)
        blocks[:, at + 3:at + 7] = imms[:, j].astype("<u4").view(np.uint8).reshape(n_blocks, 4)
    # block order[i] jumps to order[i + 1]; the last one to the loop tail
    targets = np.empty(n_blocks, dtype=np.int64)
    targets[order[:-1]] = _block_offsets(order[1:])
    targets[order[-1]] = tail
    rel = targets - (_block_offsets(np.arange(n_blocks)) + _JMP_END)
    blocks[:, _JMP_AT] = 0xE9
    blocks[:, _JMP_AT + 1:_JMP_END] = rel.astype("<i4").view(np.uint8).reshape(n_blocks, 4)
    return header + blocks.tobytes(), order, imms, tail


# --- executable memory -----------------------------------------------------------------------

def _exec_map(code: bytes):
    """An anonymous mapping holding code, readable and executable (W+X, or RW then mprotect)."""
    size = -(-len(code) // mmap.PAGESIZE) * mmap.PAGESIZE
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    try:
        m = mmap.mmap(-1, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        m.write(code)
        return m, None
    except (PermissionError, OSError):
        pass
    m = mmap.mmap(-1, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    m.write(code)
    anchor = ctypes.c_char.from_buffer(m)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(ctypes.addressof(anchor), size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fetch probe: cannot make generated code executable: {os.strerror(err)}")
    return m, anchor


_FN_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)


class Kernel:
    """Generated fetch kernel: ``call(n)`` runs the chain n times and returns the checksum."""

    def __init__(self, n_blocks: int, pattern: str, seed: int = 0):
        check_platform()
        self.n_blocks = n_blocks
        self.pattern = pattern
        self.seed = seed
        self.code, self.order, self.immediates, self.tail_offset = generate(n_blocks, pattern, seed)
        self.footprint_bytes = n_blocks * LINE_BYTES
        self._map, anchor = _exec_map(self.code)
        self._anchor = anchor if anchor is not None else ctypes.c_char.from_buffer(self._map)
        self.address = ctypes.addressof(self._anchor)
        self._fn = _FN_TYPE(self.address)

    def block_offset(self, i: int) -> int:
        """Offset of physical block i from the start of the code."""
        return int(_block_offsets(i))

    def call(self, n: int) -> int:
        if self._fn is None:
            raise ValueError("kernel is closed")
        return int(self._fn(n))

    def expected(self, n: int) -> int:
        """The exact return value of call(n): n x sum of immediates, as a signed 64-bit int."""
        if n <= 0:
            return 0
        v = (n * int(self.immediates.sum())) % (1 << 64)
        return v - (1 << 64) if v >= 1 << 63 else v

    def close(self) -> None:
        self._fn = None
        self._anchor = None
        self._map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_kernel(n_blocks: int, pattern: str, seed: int = 0) -> Kernel:
    return Kernel(n_blocks, pattern, seed)


# --- cache geometry --------------------------------------------------------------------------

def _parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": KiB, "M": MiB, "G": 1024 * MiB}.get(t[-1:], 1)
    return int(t.rstrip("KMGB") or 0) * mult


def l1i_geometry(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict | None:
    """{size_bytes, ways, line_bytes} of the level-1 instruction cache, None when unknown."""
    try:
        names = sorted(d for d in os.listdir(root) if d.startswith("index"))
    except OSError:
        return None

    def read(d, f):
        with open(os.path.join(root, d, f)) as fh:
            return fh.read().strip()

    for d in names:
        try:
            if read(d, "type") != "Instruction" or read(d, "level") not in ("1",):
                continue
            return {"size_bytes": _parse_size(read(d, "size")),
                    "ways": int(read(d, "ways_of_associativity")),
                    "line_bytes": int(read(d, "coherency_line_size"))}
        except (OSError, ValueError):
            return None
    return None


# --- measurement -----------------------------------------------------------------------------

def measure(kernel: Kernel, target_s: float, n_reps: int) -> list[float]:
    """Seconds per line for n_reps timed calls of about target_s each (after a warm-up)."""
    lines = kernel.n_blocks
    n = max(1, int(2e5 // lines))
    while True:  # calibrate n so that one call takes target_s
        t0 = time.perf_counter_ns()
        got = kernel.call(n)
        dt = (time.perf_counter_ns() - t0) * 1e-9
        if got != kernel.expected(n):
            raise RuntimeError(f"fetch kernel returned {got}, expected {kernel.expected(n)}")
        if dt >= target_s / 4 or n >= 1 << 40:
            break
        n *= 2 if dt > target_s / 32 else 16
    n = max(1, int(n * target_s / dt))
    kernel.call(n)  # warm-up at the timed size
    out = []
    for _ in range(n_reps):
        t0 = time.perf_counter_ns()
        kernel.call(n)
        out.append((time.perf_counter_ns() - t0) * 1e-9 / (n * lines))
    return out


def sweep_footprints(quick: bool, l1i_bytes: int | None) -> tuple[int, ...]:
    """The swept footprints: the fixed grid plus L1i / 2 and 4 x L1i (when known and inside
    the grid's range), so quick and full runs derive the miss price at the same footprints."""
    fs = set(FOOTPRINTS_QUICK if quick else FOOTPRINTS_FULL)
    if l1i_bytes:
        for f in (l1i_bytes // 2, 4 * l1i_bytes):
            f -= f % LINE_BYTES
            if min(fs) <= f <= max(fs):
                fs.add(f)
    return tuple(sorted(fs))


def _pick(footprints, l1i_bytes):
    """(baseline footprint, miss footprint) among the swept ones."""
    fs = sorted(footprints)
    if l1i_bytes:
        base = [f for f in fs if f <= l1i_bytes // 2]
        miss = [f for f in fs if f >= 4 * l1i_bytes]
        return (base[-1] if base else fs[0]), (miss[0] if miss else fs[-1])
    base = min(fs, key=lambda f: abs(f - BASELINE_DEFAULT_BYTES))
    miss = min(fs, key=lambda f: abs(f - MISS_DEFAULT_BYTES))
    return base, miss


def run(*, quick: bool = False, progress=None, seed: int = 0) -> dict:
    """The sweep over footprints and both patterns; plain data (see the module docstring).
    ``progress(fraction, message)`` is called between points."""
    check_platform()
    l1i = l1i_geometry()
    footprints = sweep_footprints(quick, l1i["size_bytes"] if l1i else None)
    target_s, n_reps = (0.002, 3) if quick else (0.005, 7)
    rows = []
    steps = len(footprints) * len(PATTERNS)
    for i, fp in enumerate(footprints):
        for j, pattern in enumerate(PATTERNS):
            if progress:
                progress((i * len(PATTERNS) + j) / steps, f"fetch {pattern} {fp // KiB} KiB")
            with make_kernel(fp // LINE_BYTES, pattern, seed) as k:
                for rep, s in enumerate(measure(k, target_s, n_reps)):
                    rows.append({"pattern": pattern, "footprint_bytes": k.footprint_bytes, "rep": rep,
                                 "seconds_per_line_s": s,
                                 "seconds_per_instruction_s": s / INSTRUCTIONS_PER_LINE})
    if progress:
        progress(1.0, "fetch done")
    base, miss = _pick(footprints, l1i["size_bytes"] if l1i else None)

    def med(pattern, fp):
        return float(np.median([r["seconds_per_line_s"] for r in rows
                                if r["pattern"] == pattern and r["footprint_bytes"] == fp]))

    return {"rows": rows, "l1i": l1i,
            "miss_s": max(0.0, med("random", miss) - med("random", base)),
            "miss_sequential_s": max(0.0, med("sequential", miss) - med("sequential", base)),
            "baseline_footprint_bytes": base, "miss_footprint_bytes": miss}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer footprints and repetitions")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random chain and immediates")
    a = ap.parse_args(argv)
    try:
        res = run(quick=a.quick, seed=a.seed)
    except UnsupportedPlatform as exc:
        print(exc)
        return 2
    med: dict = {}
    for r in res["rows"]:
        med.setdefault((r["footprint_bytes"], r["pattern"]), []).append(r["seconds_per_line_s"])
    print(f"{'footprint_KiB':>13} {'seq_ns/line':>12} {'rand_ns/line':>13} {'seq_ns/instr':>13} "
          f"{'rand_ns/instr':>14}")
    for fp in sorted({f for f, _ in med}):
        s, r = (float(np.median(med[(fp, p)])) * 1e9 for p in PATTERNS)
        print(f"{fp / KiB:>13g} {s:>12.3f} {r:>13.3f} {s / INSTRUCTIONS_PER_LINE:>13.4f} "
              f"{r / INSTRUCTIONS_PER_LINE:>14.4f}")
    g = res["l1i"]
    print("# L1i: " + (f"{g['size_bytes'] // KiB} KiB, {g['ways']}-way, {g['line_bytes']} B lines"
                       if g else "unknown"))
    print(f"# baseline {res['baseline_footprint_bytes'] // KiB} KiB, miss footprint "
          f"{res['miss_footprint_bytes'] // KiB} KiB")
    print(f"# miss_s (random) = {res['miss_s'] * 1e9:.3f} ns per L1i miss; "
          f"miss_sequential_s = {res['miss_sequential_s'] * 1e9:.3f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())

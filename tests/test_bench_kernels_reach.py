"""bench/scheduler_reach, bench/array_offset and bench/stencil_kernel: their kernels' and rewrites'
text by hand, the assembly reading on a made-up loop, their errors, one small real run each."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
REACH = BENCH / "scheduler_reach"
OFFSET = BENCH / "array_offset"


def _refuses(script: Path, *cases: tuple[list[str], str]) -> None:
    """Each (arguments, message): the script exits 2 with the message on standard error, no traceback."""
    for args, msg in cases:
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def _lines(script: Path, *args: str) -> list[str]:
    """The script's output lines for a small real run with ``args`` (it must exit 0)."""
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_reach_kernel_source_and_its_operations():
    g = runpy.run_path(str(REACH), run_name="scheduler_reach")
    src = g["source"](2, 3)
    assert src.count("w = w * c + e") == 2
    assert "s += w + (((v * 0.5 + 0.25) + (v * 0.51 + 0.26)) + (v * 0.52 + 0.27))" in src
    # 2 x 2 chain, 3 terms of 2 and their 2 adds, the join, the sum
    assert g["ops_per_element"](2, 3) == 4 + 6 + 2 + 1 + 1
    assert g["ops_per_element"](8, 0) == 17
    fn = g["_compile_source"]("k", src)
    x = np.linspace(0.5, 1.0, 8)
    out = np.zeros_like(x)
    c, e = 0.5, 0.25
    want = sum((v * c + e) * c + e + ((v * 0.5 + 0.25) + (v * 0.51 + 0.26)) + (v * 0.52 + 0.27) for v in x)
    assert fn(x, out, 1, c, e) == pytest.approx(want, rel=1e-13) and out[0] == pytest.approx(want, rel=1e-13)


def test_reach_reads_the_loop_up_to_its_jump_back():
    """A loop of 10 instructions (4 FP operations, two elements of 2) followed by fall-through code:
    5 instructions an element; a block without a jump back to itself is not a loop."""
    loop = "\n".join(["\tvmovsd\t(%rdx), %xmm5", "\tvmulsd\t%xmm5, %xmm0, %xmm7", "\tvaddsd\t%xmm7, %xmm1, %xmm7",
                      "\tvmulsd\t%xmm5, %xmm0, %xmm6", "\tvaddsd\t%xmm6, %xmm1, %xmm6", "\tvmovsd\t8(%rdx), %xmm5",
                      "\taddq\t$2, %r8", "\tcmpq\t%r8, %r10", "\tnop", "\tjne\t.LBB0_3",
                      "\tvaddsd\t%xmm1, %xmm1, %xmm1", "\tje\t.LBB0_7"])
    asm = "f:\n\tpushq\t%rbp\n.LBB0_1:\n\tvaddsd\t%xmm1, %xmm1, %xmm1\n\tjmp\t.LBB0_2\n.LBB0_3:\n" + loop + "\n.LBB0_7:\n\tretq\n"
    read = runpy.run_path(str(REACH), run_name="scheduler_reach")["loop_instructions"]
    assert read(asm, 2) == pytest.approx(5.0)
    assert np.isnan(read("f:\n.LBB0_1:\n\tvaddsd\t%xmm1, %xmm1, %xmm1\n\tretq\n", 2))


def test_reach_bad_arguments_are_one_line_and_a_small_run_prints_its_table():
    _refuses(REACH, (["--depths", "a"], "comma-separated whole numbers"),
             (["--depths", "0"], "chains of 1 step or more"))
    lines = _lines(REACH, "--depths", "1,8", "--fillers", "0", "--rounds", "1")
    assert lines[0].startswith("chain latency") and lines[1].split()[:3] == ["D", "F", "ops"]
    rows = {int(ln.split()[0]): [float(v) for v in ln.split()[1:]] for ln in lines[2:]}
    assert set(rows) == {1, 8} and rows[8][1] == 17 and rows[8][2] > 17   # the loop's instructions
    # 16 dependent operations take longer than 2 on any core
    assert rows[8][3] > rows[1][3]


def test_offset_rewrites_the_allocation_of_v_only():
    g = runpy.run_path(str(OFFSET), run_name="array_offset")
    src = (BENCH.parent / "examples" / "stencil2d.c").read_text()
    out = g["variant"](src, 32)
    assert g["ALLOC"] not in out and "free(v);" not in out
    assert "double *v = (double *)malloc(sizeof(double) * ((size_t)w * (ny + 2) + 32)) + 32;" in out
    assert out.replace("double *v = (double *)malloc(sizeof(double) * ((size_t)w * (ny + 2) + 32)) + 32;",
                       g["ALLOC"]).replace("free(u); ", "free(u); free(v); ", 1) == src
    with pytest.raises(Exception, match="its allocation of v is not the line this bench rewrites"):
        g["variant"](src.replace(g["ALLOC"], ""), 8)


@pytest.mark.requires("mpi")
def test_offset_bad_arguments_and_a_small_run():
    _refuses(OFFSET, (["--offsets", "x"], "comma-separated whole numbers"))
    lines = _lines(OFFSET, "--n", "64", "--iters", "2", "--offsets", "8", "--rounds", "1")
    assert lines[0].startswith("stencil2d N=64 iters=2, 2 ranks")
    assert lines[1].split()[:2] == ["as", "shipped"] and "1.000 of as shipped" in lines[1]
    assert lines[2].split()[:3] == ["v", "+8", "doubles"]


KERNEL = BENCH / "stencil_kernel"


def test_stencil_kernel_is_the_examples_loop_with_and_without_its_chain():
    g = runpy.run_path(str(KERNEL), run_name="stencil_kernel")
    src = (BENCH.parent / "examples" / "stencil2d.c").read_text()
    loop = g["loop_of"](src, True)
    assert loop.startswith("double local = 0.0;") and loop.endswith("}")
    assert loop in src and loop.count("{") == loop.count("}") == 2           # the row loop and the point loop
    assert "vc[i] = x;" in loop and "local += d * d;" in loop and "MPI_Allreduce" not in loop
    bare = g["loop_of"](src, False)
    assert "local += d * d;" not in bare and "double d = x - uc[i];" not in bare
    assert bare.replace(" ", "").replace("\n", "") == \
        loop.replace("double d = x - uc[i];", "").replace("local += d * d;", "").replace(" ", "").replace("\n", "")
    prog = g["program"](src, True)
    assert loop in prog and "%" not in prog.replace("%.4f", "").replace("%.6e", "").replace("k % 1009", "")
    with pytest.raises(Exception, match="no single line 'double local = 0.0;'"):
        g["loop_of"](src.replace("double local = 0.0;", ""), True)
    with pytest.raises(Exception, match="no single line 'local \\+= d \\* d;'"):
        g["loop_of"](src.replace("local += d * d;", "local += d;"), False)


@pytest.mark.requires("mpi")
def test_stencil_kernel_bad_arguments_and_a_small_run():
    _refuses(KERNEL, (["--rows", "8,x"], "comma-separated whole numbers"),
             (["--rows", "2"], "--rows and --cols take 3 or more"))
    lines = _lines(KERNEL, "--rows", "8", "--cols", "62", "--rounds", "1", "--program", "16")
    import re

    prog = lines.pop()     # the example itself: its time a point of a rank (mostly its calls, at N = 16)
    m = re.search(r"([\d.]+) \(\s*([\d.]+)\)\s+([\d.]+)$", prog)
    assert prog.split()[:3] == ["stencil2d", "N=16,", "2"] and m and float(m.group(1)) >= float(m.group(2)) > 0
    assert lines[0].startswith("stencil2d's update loop, rows of 62 + 2 doubles, 1 rounds")
    rows = [ln.split() for ln in lines[1:]]
    # 2 x 10 x 64 doubles = 10 KiB a copy; alone: chain, no chain, aliased; pair: two more on 2 cores
    assert len(rows) in (3, 5) and all(r[:4] == ["8", "rows", "(", "10"] for r in rows)
    assert [r[7:10] for r in rows[:3]] == [["chain", "v", "+32"], ["no", "chain", "v"], ["chain", "v", "+0"]]
    assert rows[0][-1] == "1.000" and all(float(r[-4]) > 0 for r in rows)   # median (minimum) ratio


DEPTH = BENCH / "alias_depth"


@pytest.mark.requires("mpi")
def test_alias_depth_bad_arguments_and_a_small_run():
    _refuses(DEPTH, (["--depths", "1,x"], "comma-separated whole numbers"),
             (["--depths", "512"], "--depths take 1 to 511"))
    lines = _lines(DEPTH, "--depths", "1,2", "--sizes", "16", "--rounds", "1")
    rows = [ln.split() for ln in lines[2:]]
    assert [(int(x[0]), int(x[1])) for x in rows] == [(16, 512), (16, 1), (16, 2)]
    assert rows[0][3] == "1.000" and all(float(x[2]) > 0 for x in rows)


def test_alias_depth_places_v_at_the_phase_of_the_store_d_back():
    """The kernel's v[i - d] and u[i] share their low 12 address bits and lie on other pages."""
    import re

    src = runpy.run_path(str(DEPTH), run_name="alias_depth")["SOURCE"]
    m = re.search(r"\*v = buf \+ pages \* 512 \+ d;", src)
    assert m and "v[i] = 0.5 * u[i] + 1.0;" in src
    pages, n = 5, 2000                          # u: doubles 0..n-1; v = u + pages * 512 + d
    for d in (1, 3, 8):
        for i in (d, 700, n - 1):
            u_addr, v_addr = 8 * i, 8 * (pages * 512 + d + i - d)
            assert (u_addr - v_addr) % 4096 == 0 and u_addr // 4096 != v_addr // 4096


def test_overlap_points_reads_beta_off_the_probe_points_by_hand():
    """bench/overlap_points: per element, memory from the no-chain point at a working set, compute
    from the r-chain point at the smallest, and beta = (t - max) / min: at 1 MiB memory 2 ns, compute
    1 ns, measured 2.5 ns -> 0.5; compute 4 ns, measured 4 ns -> 0 (wholly hidden). The probe's
    rule (median of the five fastest) and a quantile read the repetitions as pmac does."""
    import pandas as pd

    g = runpy.run_path(str(BENCH / "overlap_points"), run_name="overlap_points")
    rows = []
    for ws, n, r, per in [(16384, 1000, 0, 0.1e-9), (16384, 1000, 1, 1e-9), (16384, 1000, 2, 4e-9),
                          (1 << 20, 4000, 0, 2e-9), (1 << 20, 4000, 1, 2.5e-9), (1 << 20, 4000, 2, 4e-9)]:
        rows += [dict(working_set_bytes=ws, chains=r, rep=k, n_elements=n, time_s=per * n * (1 + k)) for k in range(6)]
    pts = g["per_element"](pd.DataFrame(rows), None)
    assert pts[(1 << 20, 1)] == pytest.approx(2.5e-9 * 3, rel=1e-12)      # median of the five fastest: 1..5 -> 3
    b = g["betas"](pts)
    assert sorted(b) == [(1 << 20, 1), (1 << 20, 2)]
    assert b[(1 << 20, 1)][3] == pytest.approx(0.5, rel=1e-12)
    assert b[(1 << 20, 2)][3] == pytest.approx(0.0, abs=1e-12)
    q = g["per_element"](pd.DataFrame(rows), 0.5)
    assert q[(1 << 20, 1)] == pytest.approx(2.5e-9 * 3.5, rel=1e-12)       # the median of 1..6

"""Build the PMPI shim for the MPI library a program actually loads, and cache it.

- :func:`find_program` picks the program out of ``mpiexec [flags] prog args``;
- :func:`check_interposable` refuses statically linked programs (no ``PT_INTERP``);
- :func:`detect_libmpi` finds the MPI library: for Python programs by running a tiny probe
  that imports mpi4py (without initialising MPI) and reads its own ``/proc/self/maps``; for
  ELF programs from the dynamic loader's list of what the program loads;
- :func:`find_mpicc` finds the ``mpicc`` that links that library;
- :func:`build_shim` compiles the generated source (pmac.shim_gen) once per
  (library, source hash) under ``$PMAC_CACHE_DIR`` or ``~/.cache/pmac``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import shim_gen
from .errors import InputError, ToolMissingError
from .mpi import find_mpi

_LAUNCHERS = {"mpiexec", "mpirun", "mpiexec.hydra", "mpirun.openmpi", "mpiexec.openmpi", "mpirun.mpich",
              "mpiexec.mpich", "srun", "orterun", "prterun"}

_MAPS_PROBE = r"""
import sys
try:
    import mpi4py
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI
except Exception as exc:
    print("ERROR", exc)
    sys.exit(0)
seen = []
for line in open('/proc/self/maps'):
    parts = line.split()
    if len(parts) >= 6 and '/libmpi' in parts[-1] and parts[-1] not in seen:
        seen.append(parts[-1])
for s in seen:
    print("LIB", s)
"""


@dataclass(frozen=True, kw_only=True)
class ShimBuild:
    library: str      # the .so to LD_PRELOAD
    libmpi: str       # the MPI library it links (resolved path)
    mpicc: str
    source_hash: str
    #: the Fortran library whose mpi_*_ symbols are wrapped too ('' when none)
    fortran_library: str = ""


def fortran_library(libmpi: str) -> str:
    """Open MPI's Fortran layer (libmpi_mpifh) beside libmpi: it calls PMPI_* directly, so its
    mpi_*_ symbols need their own wrappers. MPICH's Fortran layer calls MPI_* (already wrapped)."""
    d = Path(libmpi).parent
    for cand in sorted(d.glob("libmpi_mpifh.so*"), key=lambda p: len(p.name)):
        return str(cand.resolve())
    return ""


def cache_dir() -> Path:
    d = os.environ.get("PMAC_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "pmac"


def find_program(argv: list[str]) -> str:
    """The program an ``mpiexec ... prog args`` command line runs (absolute path)."""
    if not argv:
        raise InputError("no command to trace (give it after --)")
    first = Path(argv[0]).name
    cands = argv[1:] if first in _LAUNCHERS else argv[:1]
    for tok in cands:
        if tok.startswith("-") or tok.isdigit() or ":" in tok:
            continue
        p = shutil.which(tok) if "/" not in tok else (tok if os.access(tok, os.X_OK) and os.path.isfile(tok) else None)
        if p:
            return os.path.abspath(p)
    raise InputError(f"cannot find the program to trace in: {' '.join(argv)}")


def _elf_interp(path: str) -> tuple[bool, str | None]:
    """(is_elf, PT_INTERP path or None) from the program headers."""
    with open(path, "rb") as f:
        ident = f.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF":
            return False, None
        is64 = ident[4] == 2
        end = "<" if ident[5] == 1 else ">"
        if is64:
            phoff, = struct.unpack(end + "Q", ident[32:40])
            phentsize, phnum = struct.unpack(end + "HH", ident[54:58])
        else:
            phoff, = struct.unpack(end + "I", ident[28:32])
            phentsize, phnum = struct.unpack(end + "HH", ident[42:46])
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(phentsize)
            p_type, = struct.unpack(end + "I", ph[:4])
            if p_type == 3:  # PT_INTERP
                off, size = (struct.unpack(end + "Q", ph[8:16])[0], struct.unpack(end + "Q", ph[32:40])[0]) if is64 \
                    else (struct.unpack(end + "I", ph[4:8])[0], struct.unpack(end + "I", ph[16:20])[0])
                f.seek(off)
                return True, f.read(size).rstrip(b"\0").decode(errors="replace")
        return True, None


def is_python_program(prog: str) -> bool:
    if re.match(r"python[\d.]*$", Path(prog).name):
        return True
    try:
        with open(prog, "rb") as f:
            head = f.read(128)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def check_interposable(prog: str) -> None:
    """Raise InputError when LD_PRELOAD cannot reach the program's MPI calls."""
    is_elf, interp = _elf_interp(prog)
    if is_elf and interp is None:
        raise InputError("statically linked: LD_PRELOAD cannot interpose its MPI calls; "
                         "relink it dynamically (mpicc without -static) to trace it", path=prog)


def _python_of(prog: str) -> str:
    if re.match(r"python[\d.]*$", Path(prog).name):
        return prog
    with open(prog, "rb") as f:
        line = f.readline().decode(errors="replace")[2:].strip().split()
    if line and Path(line[0]).name == "env" and len(line) > 1:
        return shutil.which(line[1]) or line[1]
    return line[0] if line else sys.executable


def _prefer_libmpi(paths: list[str]) -> str:
    """The C MPI library among libmpi*.so (not Open MPI's libmpi_mpifh, libmpi_cxx...)."""
    for p in paths:
        if re.match(r"libmpi\.so(\.|$)", Path(p).name):
            return p
    return paths[0]


def _project_libmpi(prog: str) -> str:
    mpi = find_mpi()
    if mpi.mpicc:
        libdir = Path(mpi.mpicc).resolve().parent.parent / "lib"
        libs = sorted(libdir.glob("libmpi.so*"), key=lambda p: (p.name == "libmpi.so", len(p.name)))  # the soname
        if libs:
            return str(libs[0].resolve())
    raise InputError("neither an ELF program nor a Python script, and the project's MPI library was not found: "
                     "trace the MPI program itself", path=prog)


def detect_libmpi(prog: str, env: dict | None = None) -> str:
    """Resolved path of the MPI library the program loads."""
    check_interposable(prog)
    if is_python_program(prog):
        py = _python_of(prog)
        r = subprocess.run([py, "-c", _MAPS_PROBE], capture_output=True, text=True, timeout=60, env=env)
        libs = [ln[4:] for ln in r.stdout.splitlines() if ln.startswith("LIB ")]
        if not libs:
            why = r.stdout.strip() or r.stderr.strip()[-300:]
            raise ToolMissingError(f"{py} does not load an MPI library through mpi4py ({why})")
        return os.path.realpath(_prefer_libmpi(libs))
    is_elf, _ = _elf_interp(prog)
    if not is_elf:  # a shell script or other wrapper: assume the project's MPI
        return _project_libmpi(prog)
    e = dict(os.environ if env is None else env)
    e["LD_TRACE_LOADED_OBJECTS"] = "1"  # the dynamic loader lists what it loads, runs nothing
    r = subprocess.run([prog], capture_output=True, text=True, timeout=60, env=e)
    libs = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(libmpi[\w.+-]*\.so[\w.]*)\s+=>\s+(\S+)", line)
        if m and m.group(2) != "not":
            libs.append(m.group(2))
    if libs:
        return os.path.realpath(_prefer_libmpi(libs))
    raise InputError("does not load an MPI library (libmpi*.so): nothing to interpose", path=prog)


def _mpicc_links(mpicc: str, libdir: str) -> bool:
    for flag in ("-show", "--showme"):
        try:
            r = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and libdir in r.stdout:
            return True
    return False


def find_mpicc(libmpi: str) -> str:
    libdir = os.path.dirname(libmpi)
    cands = [Path(libdir).parent / "bin" / "mpicc"]
    try:
        m = find_mpi()
        if m.mpicc:
            cands.append(Path(m.mpicc))
    except ToolMissingError:
        pass
    for name in ("mpicc", "mpicc.openmpi", "mpicc.mpich"):
        w = shutil.which(name)
        if w:
            cands.append(Path(w))
    for c in cands:
        if c.exists() and _mpicc_links(str(c), libdir):
            return str(c)
    raise ToolMissingError(f"no mpicc found that links {libmpi} (install the MPI's development package)")


def build_shim(libmpi: str, *, mpicc: str | None = None, force: bool = False) -> ShimBuild:
    """Compile (or reuse) the shim for this MPI library."""
    libmpi = os.path.realpath(libmpi)
    mpicc = mpicc or find_mpicc(libmpi)
    src = shim_gen.generate()
    sh = shim_gen.source_hash(src)
    fort = fortran_library(libmpi)
    key = hashlib.sha256(f"{libmpi}\n{mpicc}\n{sh}\n{fort}".encode()).hexdigest()[:16]
    d = cache_dir() / "shim" / key
    lib = d / "libpmacshim.so"
    if lib.exists() and not force:
        return ShimBuild(library=str(lib), libmpi=libmpi, mpicc=mpicc, source_hash=sh, fortran_library=fort)
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        c = Path(tmp) / "pmac_shim.c"
        c.write_text(src)
        out = Path(tmp) / "libpmacshim.so"
        cmd = [mpicc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-o", str(out), str(c),
               f"-Wl,-rpath,{os.path.dirname(libmpi)}"]
        if fort:
            cmd[1:1] = ["-DPMAC_FORTRAN"]
            cmd.append(fort)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise ToolMissingError(f"building the PMPI shim with {mpicc} failed: {r.stderr.strip()[-400:]}")
        shutil.copy2(c, d / "pmac_shim.c")
        os.replace(out, lib)
    return ShimBuild(library=str(lib), libmpi=libmpi, mpicc=mpicc, source_hash=sh, fortran_library=fort)


def shim_for(argv: list[str], env: dict | None = None) -> ShimBuild:
    """Find the program in the command line, check it, detect its MPI, build the shim."""
    prog = find_program(argv)
    return build_shim(detect_libmpi(prog, env))

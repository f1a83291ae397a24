"""Build pmac's valgrind tool (``pmac/vgtool/pmac_vg.c``) on first use, and cache it.

The tool is linked statically against the core libraries Debian's ``valgrind`` package ships
(``/usr/lib/x86_64-linux-gnu/valgrind``), into ``$PMAC_CACHE_DIR/vgtool/<source hash>/`` (or
``~/.cache/pmac``). valgrind loads tools from ``$VALGRIND_LIB``; that folder also needs the core
preload library, which is linked in beside the tool. :func:`valgrind_command` gives the command
prefix that runs a program under the tool.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import ToolMissingError

TOOL_NAME = "pmac_vg"
PLATFORM = "amd64-linux"
_HINT = "install it with `apt-get install valgrind` (listed in .ci/system-deps)"
_DEFINES = ["-DVGA_amd64=1", "-DVGO_linux=1", "-DVGP_amd64_linux=1", "-DVGPV_amd64_linux_vanilla=1"]


@dataclass(frozen=True, kw_only=True)
class VgTool:
    valgrind: str      # the valgrind launcher
    lib_dir: str       # VALGRIND_LIB: holds the tool and vgpreload_core
    source_hash: str


def cache_dir() -> Path:
    d = os.environ.get("PMAC_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "pmac"


def tool_source() -> str:
    return resources.files("pmac").joinpath("vgtool", "pmac_vg.c").read_text()


def _find_dirs() -> tuple[Path, Path, Path]:
    """(headers, static libraries, libexec with vgpreload_core)."""
    inc = Path("/usr/include/valgrind")
    libs = [Path("/usr/lib/x86_64-linux-gnu/valgrind"), Path("/usr/lib/valgrind"), Path("/usr/libexec/valgrind")]
    lib = next((p for p in libs if (p / f"libcoregrind-{PLATFORM}.a").exists()), None)
    pre = next((p for p in (Path("/usr/libexec/valgrind"), Path("/usr/lib/x86_64-linux-gnu/valgrind"),
                            Path("/usr/lib/valgrind")) if (p / f"vgpreload_core-{PLATFORM}.so").exists()), None)
    if not (inc / "pub_tool_basics.h").exists() or lib is None or pre is None:
        raise ToolMissingError(f"valgrind's tool headers or static libraries are missing; {_HINT}")
    return inc, lib, pre


def build_tool(*, force: bool = False) -> VgTool:
    """Compile (or reuse) the tool; raises ToolMissingError without valgrind or a C compiler."""
    vg = shutil.which("valgrind")
    if not vg:
        raise ToolMissingError(f"valgrind not found: memory tracing needs it; {_HINT}")
    inc, lib, pre = _find_dirs()
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if not cc:
        raise ToolMissingError("no C compiler (gcc) to build the valgrind tool; apt-get install gcc")
    src = tool_source()
    version = subprocess.run([vg, "--version"], capture_output=True, text=True).stdout.strip()
    key = hashlib.sha256(f"{src}\n{version}\n{lib}".encode()).hexdigest()[:16]
    d = cache_dir() / "vgtool" / key
    exe = d / f"{TOOL_NAME}-{PLATFORM}"
    if exe.exists() and not force:
        return VgTool(valgrind=vg, lib_dir=str(d), source_hash=key)
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        c = Path(tmp) / "pmac_vg.c"
        c.write_text(src)
        obj = Path(tmp) / "pmac_vg.o"
        out = Path(tmp) / exe.name
        steps = [
            [cc, "-O2", "-g", "-Wall", f"-I{inc}", *_DEFINES, "-fno-pic", "-fno-stack-protector", "-fno-builtin",
             "-c", str(c), "-o", str(obj)],
            [cc, "-o", str(out), str(obj), "-static", "-nodefaultlibs", "-nostartfiles", "-u", "_start",
             "-Wl,-Ttext=0x58000000", str(lib / f"libcoregrind-{PLATFORM}.a"), str(lib / f"libvex-{PLATFORM}.a"),
             "-lgcc", str(lib / f"libgcc-sup-{PLATFORM}.a")],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise ToolMissingError(f"building the valgrind tool failed: {r.stderr.strip()[-400:]}")
        preload = d / f"vgpreload_core-{PLATFORM}.so"
        if not preload.exists():
            os.symlink(pre / preload.name, preload)
        os.replace(out, exe)
    return VgTool(valgrind=vg, lib_dir=str(d), source_hash=key)


def valgrind_command(tool: VgTool, out_file: str | Path, *, sample_threshold: int | None = None,
                     fetch_sample_threshold: int | None = None) -> list[str]:
    """Command prefix running a program under the tool (set ``VALGRIND_LIB=tool.lib_dir``);
    thresholds of the data and code samples (None: the tool's defaults, 1/16 and 1/8)."""
    cmd = [tool.valgrind, "-q", f"--tool={TOOL_NAME}", f"--pmac-out={out_file}"]
    if sample_threshold is not None:
        cmd.append(f"--pmac-sample-threshold={int(sample_threshold)}")
    if fetch_sample_threshold is not None:
        cmd.append(f"--pmac-fetch-sample-threshold={int(fetch_sample_threshold)}")
    return cmd

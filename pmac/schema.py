"""Versioned YAML files, dataclass <-> dict conversion, provenance and atomic writes.

Every pmac file starts with ``kind:`` and an integer ``schema_version`` independent of the
package version. Each kind registers its current version, a short history, and migrations
from older versions (``register_kind``). Unknown keys are errors; keys are exactly the field
names of the dataclass they load into. Files are read with a safe loader only (libyaml's where present).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from . import __version__
from .errors import InputError, SchemaVersionError


@dataclass(frozen=True, kw_only=True)
class KindInfo:
    kind: str
    version: int
    history: dict[int, str]
    migrations: dict[int, Callable[[dict], dict]] = field(default_factory=dict)  # from v -> v+1


_KINDS: dict[str, KindInfo] = {}


def register_kind(kind: str, version: int, history: dict[int, str],
                  migrations: dict[int, Callable[[dict], dict]] | None = None) -> KindInfo:
    """Declare a file kind, its current schema version, the history of versions, migrations."""
    if set(history) != set(range(1, version + 1)):
        raise ValueError(f"history of {kind} must describe versions 1..{version}")
    info = KindInfo(kind=kind, version=version, history=dict(history), migrations=dict(migrations or {}))
    _KINDS[kind] = info
    return info


def kind_info(kind: str) -> KindInfo:
    return _KINDS[kind]


# ---------------------------------------------------------------- atomic writes

def ensure_folder(path: str | Path, what: str = "folder", *, try_write: bool = False) -> Path:
    """Make ``path`` (and its parents) a folder, or raise an InputError naming it: "exists and is
    not a folder (needed as the WHAT)", "cannot create the WHAT: <reason>". ``try_write``: also
    make and remove a trial folder in it (before a long run that writes there at its end; this
    also catches file systems such as /proc, which refuse new entries even to root)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"exists and is not a folder (needed as the {what})", path=path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the {what}: {exc.strerror}", path=path) from None
    if try_write:
        try:
            shutil.rmtree(tempfile.mkdtemp(prefix=".pmac-check-", dir=path))
        except OSError as exc:
            raise InputError(f"cannot write into the {what}: {exc.strerror}", path=path) from None
    return path


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0666 less the umask (mkstemp's files are 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _target_mode(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return new_file_mode()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path``. A place
    that cannot be written is an InputError naming ``path`` (not the temporary file)."""
    path = Path(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise InputError(f"cannot write here: {path.parent} is not a folder", path=path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write here: {exc.strerror}", path=path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            # mkstemp makes the file 0600: give it the mode a plain open() would (the existing
            # file's, else 0666 less the umask), or a profile written by one user is unreadable
            # to the rest of a site
            os.fchmod(f.fileno(), _target_mode(path))
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise InputError(f"cannot write here: {exc.strerror}", path=path) from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- YAML

class _Dumper(yaml.SafeDumper):
    pass


def _float_representer(dumper: yaml.SafeDumper, value: float) -> yaml.Node:
    # PyYAML reads '1e9' (no dot) back as a string; always write a form that reads as float.
    if math.isnan(value):
        text = ".nan"
    elif math.isinf(value):
        text = ".inf" if value > 0 else "-.inf"
    else:
        text = repr(float(value))
        if "e" in text and "." not in text.split("e")[0]:
            mant, exp = text.split("e")
            text = f"{mant}.0e{exp}"
        elif "e" not in text and "." not in text:
            text += ".0"
    return dumper.represent_scalar("tag:yaml.org,2002:float", text)


_Dumper.add_representer(float, _float_representer)
_Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))


def _np_scalar(dumper, value):
    return dumper.represent_data(value.item())


try:  # numpy scalars sneak into dicts easily
    import numpy as _np

    for _t in (_np.float64, _np.float32, _np.int64, _np.int32, _np.bool_):
        _Dumper.add_representer(_t, _np_scalar)
except ImportError:  # pragma: no cover
    pass


def dump_yaml(data: dict) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100,
                     allow_unicode=True)


#: libyaml's safe loader where PyYAML has it (the wheels do): the same documents, ~9x faster on a
#: machine profile (0.03 against 0.31 s for machines/xeon-vm.yaml: `pmac predict` reads every shipped
#: profile); its syntax errors word the problem in libyaml's terms
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    """safe_load a file; a syntax error becomes an InputError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError("is a folder, expected a YAML file", path=path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file", path=path) from None
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(f"malformed YAML{where}: {problem}", path=path) from None


def load_document(path: str | Path, kind: str) -> dict:
    """Read a versioned pmac file of ``kind`` and migrate it to the current version.

    Returns the body without ``kind`` and ``schema_version``.
    """
    data = read_yaml(path)
    return check_document(data, kind, path=path)


def check_document(data: Any, kind: str, *, path: str | Path | None = None) -> dict:
    info = _KINDS[kind]
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping with 'kind: {kind}', found {type(data).__name__}", path=path)
    found = data.get("kind")
    if found != kind:
        raise InputError(f"expected kind '{kind}', found {found!r}", path=path)
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"'schema_version' must be an integer, found {version!r}", path=path)
    if version > info.version:
        raise SchemaVersionError(
            f"schema_version {version} is newer than this pmac understands ({info.version}); upgrade pmac",
            path=path)
    if version < 1:
        raise SchemaVersionError(f"unknown schema_version {version}", path=path)
    body = {k: v for k, v in data.items() if k not in ("kind", "schema_version")}
    while version < info.version:
        migrate = info.migrations.get(version)
        if migrate is None:
            raise SchemaVersionError(f"no migration from schema_version {version}", path=path)
        body = migrate(body)
        version += 1
    return body


def document(kind: str, body: dict) -> dict:
    info = _KINDS[kind]
    return {"kind": kind, "schema_version": info.version, **body}


def save_document(path: str | Path, kind: str, body: dict) -> None:
    atomic_write_text(path, dump_yaml(document(kind, body)))


# ---------------------------------------------------------------- dataclasses <-> dicts

def to_dict(obj: Any) -> Any:
    """Dataclass (nested) to plain dicts/lists/scalars, keys exactly the field names."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return obj.item()
    return obj


def _convert(tp: Any, value: Any, where: str, path) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, where, path)
            except InputError as e:
                errors.append(e)
        raise errors[0] if errors else InputError(f"{where}: unexpected null", path=path)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path=path, where=where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{where}: expected a list, found {value!r:.60}", path=path)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{where}[{i}]", path) for i, v in enumerate(value))
        if len(args) != len(value):
            raise InputError(f"{where}: expected {len(args)} items, found {len(value)}", path=path)
        return tuple(_convert(a, v, f"{where}[{i}]", path) for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping, found {value!r:.60}", path=path)
        kt, vt = args if args else (Any, Any)
        return {_convert(kt, k, where, path): _convert(vt, v, f"{where}.{k}", path) for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise InputError(f"{where}: expected a list", path=path)
        return [_convert(args[0], v, f"{where}[{i}]", path) for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    return float(value)  # '1e9' written by hand loads as a string
                except ValueError:
                    pass
            raise InputError(f"{where}: expected a number, found {value!r:.60}", path=path)
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise InputError(f"{where}: expected an integer, found {value!r:.60}", path=path)
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(f"{where}: expected true or false, found {value!r:.60}", path=path)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise InputError(f"{where}: expected text, found {value!r:.60}", path=path)
        return value
    return value


def from_dict(cls: type, data: Any, *, path: str | Path | None = None, where: str = "") -> Any:
    """Build a (nested) dataclass from a dict; unknown or missing keys are InputErrors.

    Value errors raised by ``__post_init__`` become InputErrors naming the file.
    """
    label = where or cls.__name__
    if not isinstance(data, dict):
        raise InputError(f"{label}: expected a mapping, found {data!r:.60}", path=path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InputError(f"{label}: unknown key(s) {', '.join(unknown)} (known: {', '.join(fields)})",
                         path=path)
    kwargs = {}
    for name, f in fields.items():
        sub = f"{where}.{name}" if where else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{label}: missing key '{name}'", path=path)
            continue
        kwargs[name] = _convert(hints[name], data[name], sub, path)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{label}: {exc}", path=path) from None


# ---------------------------------------------------------------- provenance

def cpu_model() -> str:
    """This machine's CPU as /proc/cpuinfo names it, with its family, model and stepping where the
    name alone is generic (a KVM guest's "Intel(R) Xeon(R) Processor" is every Xeon since 2017)."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break                       # the first processor's block is enough
            key, _, val = line.partition(":")
            info[key.strip()] = val.strip()
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or platform.machine() or "unknown"
    ids = [f"{label} {info[key]}" for key, label in (("cpu family", "family"), ("model", "model"),
                                                        ("stepping", "stepping")) if key in info]
    return f"{name} ({', '.join(ids)})" if ids else name


def provenance(command: str | None = None, inputs: dict[str, str | Path] | None = None,
               parameters: dict | None = None, **extra: Any) -> dict:
    """The provenance block every generated file carries."""
    prov = {
        "pmac_version": __version__,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "command": command if command is not None else " ".join(sys.argv),
    }
    if parameters:
        prov["parameters"] = parameters
    if inputs:
        prov["inputs_sha256"] = {str(k): sha256_file(v) for k, v in inputs.items()}
    prov.update(extra)
    return prov

"""One family of exceptions; the CLI turns each into one line naming the file and the problem."""

from __future__ import annotations

from pathlib import Path


class PmacError(Exception):
    """Base of every error pmac reports to a user.

    ``path`` (optional) names the file concerned; ``str(err)`` is the one-line message.
    """

    def __init__(self, message: str, *, path: str | Path | None = None):
        self.path = None if path is None else str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class InputError(PmacError):
    """A file or argument is malformed: bad YAML, wrong kind, unknown key, bad value."""


class SchemaVersionError(InputError):
    """A file's schema_version is newer than this pmac, or has no migration."""


class TruncatedError(InputError):
    """A binary file ends inside a record."""


class MissingSectionError(PmacError):
    """A profile or signature lacks a section the requested command needs."""

    def __init__(self, what: str, section: str, *, path: str | Path | None = None, needed_by: str = ""):
        self.section = section
        suffix = f" (needed by {needed_by})" if needed_by else ""
        super().__init__(f"{what} has no '{section}' section{suffix}", path=path)


class ToolMissingError(PmacError):
    """An external tool (MPI, valgrind, iproute2, a compiler) is not available."""


class ProbeError(PmacError):
    """A probe failed or could not produce a usable measurement."""


class ReplayError(PmacError):
    """A trace cannot be replayed (deadlock, unmatched message)."""

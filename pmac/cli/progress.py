"""A small progress bar on stderr (no dependency); silent when stderr is not a terminal
unless forced, so logs stay clean."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, label: str, *, stream=None, enabled: bool | None = None, width: int = 30):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.t0 = time.monotonic()
        self._last = ""

    def __call__(self, fraction: float, message: str = "") -> None:
        """Library code calls this with the fraction done and what it is doing."""
        if not self.enabled:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        n = int(round(fraction * self.width))
        elapsed = time.monotonic() - self.t0
        line = f"\r{self.label} [{'#' * n}{'.' * (self.width - n)}] {fraction * 100:5.1f}% {elapsed:6.1f}s {message[:40]:<40}"
        if line != self._last:
            self.stream.write(line)
            self.stream.flush()
            self._last = line

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""A short progress line on stderr for long work (reading a big timeline, building a report)."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Rewrites one stderr line, at most a few times a second, only when the work takes a while."""

    def __init__(self, stream: TextIO | None = None, delay_s: float = 1.0, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self.delay_s = delay_s
        self.last = 0.0
        self.shown = False

    @classmethod
    def silent(cls) -> "Progress":
        """A Progress that prints nothing (library use, tests)."""
        return cls(enabled=False)

    def update(self, what: str, done: float, total: float) -> None:
        """Report `done` of `total` for `what`, if the work has been running long enough to care."""
        now = time.monotonic()
        if not self.enabled or now - self.started < self.delay_s or now - self.last < 0.25:
            return
        self.last = now
        pct = 100.0 * done / total if total else 100.0
        self.stream.write(f"\r{what}: {pct:5.1f}%  ({now - self.started:.1f} s)\x1b[K")
        self.stream.flush()
        self.shown = True

    def note(self, message: str) -> None:
        """A line that stays (a slow path taken, a choice made)."""
        if self.enabled:
            self.stream.write(("\r\x1b[K" if self.shown else "") + message + "\n")
            self.stream.flush()
            self.shown = False

    def done(self) -> None:
        """Clear the progress line."""
        if self.enabled and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

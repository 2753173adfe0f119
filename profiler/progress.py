"""A quiet progress reporter for long work: one updating line on stderr, only when the work is big."""
from __future__ import annotations

import sys
import time


class Progress:
    """`with Progress("analysing", enabled) as p: p.stage("reading raw store")`; prints stage and elapsed time."""

    def __init__(self, title: str, enabled: bool = True) -> None:
        self.title = title
        self.enabled = enabled
        self._t0 = time.perf_counter()
        self._tty = sys.stderr.isatty()

    def stage(self, what: str, done: int | None = None, total: int | None = None) -> None:
        if not self.enabled:
            return
        frac = f" {done}/{total}" if total else ""
        line = f"profview: {self.title}: {what}{frac} ({time.perf_counter() - self._t0:.1f} s)"
        if self._tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled and self._tty:
            sys.stderr.write("\n")
            sys.stderr.flush()

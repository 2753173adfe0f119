"""The one progress reporter for long work (analysing a big raw store, reading a big timeline,
building a report): one updating line on stderr, shown only once the work has taken a while."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional, TextIO


class Progress:
    """`with Progress("analysing") as p: p.stage("reading raw store", i, n)`.

    Prints `profview: <title>: <stage> <done>/<total> (<elapsed> s)` (a percentage when `total`
    is not a count of items), rewriting one line on a terminal and at most 4 times a second;
    nothing before `delay_s` has passed, nothing when disabled.
    """

    def __init__(
        self, title: str = "", enabled: bool = True, stream: Optional[TextIO] = None, delay_s: float = 0.0
    ) -> None:
        self.title = title
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.delay_s = delay_s
        self._t0 = time.monotonic()
        self._last = 0.0
        self._shown = False
        self._tty = self.stream.isatty()

    @classmethod
    def silent(cls) -> Progress:
        """A Progress that prints nothing (library use, tests)."""
        return cls(enabled=False)

    def stage(self, what: str, done: Optional[float] = None, total: Optional[float] = None) -> None:
        """Report a stage of the work and, optionally, how far into it (`done` of `total`)."""
        now = time.monotonic()
        finished = total is not None and done is not None and done >= total
        if (
            not self.enabled
            or now - self._t0 < self.delay_s
            or (self._tty and now - self._last < 0.25 and not finished)
        ):
            return
        self._last = now
        if total and isinstance(total, int) and isinstance(done, int) and total < 10_000:
            where = f" {done}/{total}"
        elif total:
            where = f" {100.0 * (done or 0) / total:5.1f}%"
        else:
            where = ""
        head = f"profview: {self.title}: " if self.title else "profview: "
        line = f"{head}{what}{where} ({now - self._t0:.1f} s)"
        self.stream.write("\r\x1b[K" + line if self._tty else line + "\n")
        self.stream.flush()
        self._shown = self._tty

    def note(self, message: str) -> None:
        """A line that stays (a slow path taken, a choice made)."""
        if self.enabled:
            self.stream.write(("\r\x1b[K" if self._shown else "") + message + "\n")
            self.stream.flush()
            self._shown = False

    def done(self) -> None:
        """Clear the progress line."""
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    @contextmanager
    def reporting(self) -> Iterator[Progress]:
        """Make this the reporter `current()` gives while the block runs: code deep in the work (a reader's
        chunks) reports to it without every caller passing it along."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


_CURRENT: ContextVar[Progress] = ContextVar("profview_progress")
_SILENT = Progress.silent()


def current() -> Progress:
    """The reporter of the work under way (`Progress.reporting`), else one that prints nothing (library use)."""
    return _CURRENT.get(_SILENT)

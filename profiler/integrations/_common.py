"""Pieces shared by the framework integrations (no framework imports here)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

from profiler import Profiler
from profiler.postprocess.recording import verdict_line


def missing_framework(module: str, package: str, extra: str) -> ImportError:
    """The ImportError an integration module raises when its framework is not installed."""
    return ImportError(
        f"{module} needs {package}, which is not installed: pip install 'profview[{extra}]' (or pip install {package})"
    )


def summary_lines(profiler: Profiler, outputs: Iterable[Path]) -> list[str]:
    """What an integration prints after analyse(quiet=True): the analysis's own line (outputs, verdict,
    next command), or nothing when no outputs were written."""
    if not list(outputs):
        return []
    return [verdict_line(profiler.output_path, profiler.rank)]


def end_recording(profiler: Profiler, analyse: bool, verbose: bool) -> tuple[list, list[str]]:
    """The end of training in a callback: stop, or analyse quietly and print the summary line
    (when `verbose`). Returns (outputs written, the summary lines)."""
    if not analyse:
        profiler.stop()
        return [], []
    outputs = profiler.analyse(quiet=True)  # on a rank left out by `ranks=`: [] (it still joins in)
    lines = summary_lines(profiler, outputs) if outputs else []
    if verbose:
        for line in lines:
            print(line, flush=True)
    return outputs, lines


class SpanStack:
    """Spans and phases opened in one framework hook and closed in a later one.

    The raw store pairs begin / end events by nesting on each thread, so spans opened across hooks
    must be closed in reverse order; this keeps them as a stack and closes whatever is above the
    one being closed (so a hook that never came cannot leave a span open forever).
    """

    def __init__(self) -> None:
        self._open: list[tuple[str, Any]] = []

    def open(self, key: str, span: Any) -> None:
        span.__enter__()
        self._open.append((key, span))

    def is_open(self, key: str) -> bool:
        return any(k == key for k, _ in self._open)

    @property
    def top(self) -> Optional[str]:
        return self._open[-1][0] if self._open else None

    def close(self, key: str) -> bool:
        """Close `key` (and anything opened after it); False when it is not open."""
        if not self.is_open(key):
            return False
        while self._open:
            k, span = self._open.pop()
            span.__exit__(None, None, None)
            if k == key:
                return True
        return True

    def close_all(self) -> None:
        while self._open:
            self._open.pop()[1].__exit__(None, None, None)

"""The loop's data wait, measured at the fetch: every `next()` on a loader as a `data` phase.

The step trace counts `data` phases on the stepping thread as data wait (`data_wait_ms`), so the
iteration gap splits into data wait and other host work (`gap_host_ms`) for any loader: a torch
DataLoader with or without workers (`ProfiledDataLoader` uses this), a generator, a MindSpore
dataset iterator, a DataLoader's own iterator (`profview run` wraps `DataLoader.__iter__` with
it). `profiler.iterate(loader)` is the public form.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional

from profiler.record.recorder import active_recorder, now_ns
from profiler.store.kinds import PHASE

#: Set on a thread while a TimedFetches fetches: what that fetch iterates (a ProfiledDataLoader's DataLoader,
#: which `profview run` also patches) is timed and probed once, by the outer one.
_INSIDE = threading.local()


def fetching() -> bool:
    """Whether this thread is inside a TimedFetches' fetch (a loader iterated there is timed already)."""
    return getattr(_INSIDE, "fetch", False)


class TimedFetches:
    """The items of `iterable`, each `next()` recorded as a `data` phase while a Profiler records.
    The first fetch includes iter() (a loader's worker start-up). `then(t0, t1)`, with the call and
    return times of a fetch, runs inside its phase (a probe's bookkeeping: the loop waits for it
    too). While `timing()`, when given, says no, fetches are plain next() calls. len() and every
    other attribute are the wrapped object's, so a wrapped DataLoader iterator still looks like one."""

    def __init__(
        self,
        iterable: Iterable,
        then: Optional[Callable[[int, int], None]] = None,
        timing: Optional[Callable[[], bool]] = None,
    ) -> None:
        self._iterable = iterable
        self._then = then
        self._timing = timing
        self._it: Optional[Iterator] = None

    def __iter__(self) -> TimedFetches:
        return self

    def __next__(self) -> Any:
        outer = fetching()
        timed = self._timing is None or self._timing()
        recorder = active_recorder() if timed and not outer else None  # inside another fetch: that one's phase
        fetch = recorder.span(PHASE, "data") if recorder is not None else contextlib.nullcontext()
        t0 = now_ns()
        with fetch:
            _INSIDE.fetch = True
            try:
                if self._it is None:
                    self._it = iter(self._iterable)
                item = next(self._it)
            finally:
                _INSIDE.fetch = outer
            if timed and self._then is not None:
                self._then(t0, now_ns())
        return item

    def __len__(self) -> int:
        return len(self._iterable)

    def __getattr__(self, name: str) -> Any:
        if name in ("_iterable", "_then", "_timing", "_it"):  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self._iterable, name)

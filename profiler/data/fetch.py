"""The loop's data wait, measured at the fetch: every `next()` on a loader as a `data` phase.

The step trace counts `data` phases on the stepping thread as data wait (`data_wait_ms`), so the
iteration gap splits into data wait and other host work (`gap_host_ms`) for any loader: a torch
DataLoader with or without workers (`ProfiledDataLoader` uses this), a generator, a MindSpore
dataset iterator. `profiler.iterate(loader)` is the public form.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Optional

from profiler.record.recorder import active_recorder, now_ns
from profiler.store.kinds import PHASE


def timed_fetches(iterable: Iterable, then: Optional[Callable[[int, int], None]] = None
                  ) -> Iterator[tuple[int, int, Any]]:
    """(call time, return time, item) for each next(), each recorded as a `data` phase while a
    Profiler records; the first call includes iter() (a loader's worker start-up). `then(t0, t1)`
    runs inside the phase (a probe's bookkeeping: the loop waits for it too)."""
    it = None
    while True:
        recorder = active_recorder()
        fetch = recorder.span(PHASE, "data") if recorder is not None else contextlib.nullcontext()
        t0 = now_ns()
        try:
            with fetch:
                if it is None:
                    it = iter(iterable)
                item = next(it)
                t1 = now_ns()
                if then is not None:
                    then(t0, t1)
        except StopIteration:
            return
        yield t0, t1, item


def measured(iterable: Iterable) -> Iterator[Any]:
    """The items of `iterable`, each fetch timed as data wait."""
    for _, _, item in timed_fetches(iterable):
        yield item

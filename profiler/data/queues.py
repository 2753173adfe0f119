"""`ProfiledQueue`: a `queue.Queue` that probes itself, and the names of the pipeline's queues.

The probe (profiler.capture.queues.QueueProbe) runs inside the queue's own mutex (in `_put` /
`_get`, where the size is exact), so probing takes no lock the queue does not already take.
"""

from __future__ import annotations

import queue
import threading
from threading import get_ident
from typing import Any, Optional

from profiler.capture.queues import GET, PUT, QueueProbe
from profiler.formats.columns import ARROW
from profiler.record.recorder import active_recorder, now_ns

POLL_S = 0.05  # how often a cancellable blocking put / get looks at its cancel event


class Cancelled(Exception):
    """A cancellable put / get gave up because its pipeline is shutting down."""


def connector_name(producer: str, consumer: str) -> str:
    """The name of the queue between two pipeline stages: `producer->consumer`."""
    for stage in (producer, consumer):
        if not stage or ARROW in stage:
            raise ValueError(f"stage name {stage!r} must be non-empty and must not contain {ARROW!r}")
    return f"{producer}{ARROW}{consumer}"


class _TimedCondition(threading.Condition):
    """A queue's not_empty / not_full condition that adds each waiting thread's blocked time to `waits`.

    Only threads that block run this; the put (not_full) / get (not_empty) that follows takes
    the total out of `waits` (so the waits of a thread's timed-out attempts add up).
    """

    def __init__(self, lock: Any, waits: dict[int, int]) -> None:
        super().__init__(lock)
        self._waits = waits

    def wait(self, timeout: Optional[float] = None) -> bool:
        t0 = now_ns()
        try:
            return super().wait(timeout)
        finally:
            ident = get_ident()
            self._waits[ident] = self._waits.get(ident, 0) + now_ns() - t0


class ProfiledQueue(queue.Queue):
    """A FIFO `queue.Queue` that records every put and get (size after it, wait) under its name.

    The sample is taken in `_put` / `_get`, which `queue.Queue` runs while holding its own
    mutex, so the recorded size is exact and no extra lock is taken. The wait of a put / get is
    the time it was blocked on a full / empty queue (its not_full / not_empty condition times
    its own waits; a put or get that does not block reads no clock for it).
    """

    def __init__(self, maxsize: int = 0, name: str = "queue") -> None:
        super().__init__(maxsize)
        self.probe = QueueProbe(name, maxsize)
        self._get_waits: dict[int, int] = {}  # thread ident -> ns blocked in its current get
        self._put_waits: dict[int, int] = {}  # ... in its current put
        self.not_empty = _TimedCondition(self.mutex, self._get_waits)
        self.not_full = _TimedCondition(self.mutex, self._put_waits)

    @property
    def name(self) -> str:
        return self.probe.name

    def _put(self, item: Any) -> None:  # runs under self.mutex
        self.queue.append(item)
        wait = self._put_waits.pop(get_ident(), 0) if self._put_waits else 0
        if active_recorder() is not None:
            self.probe.record(PUT, len(self.queue), wait)

    def _get(self) -> Any:  # runs under self.mutex
        item = self.queue.popleft()
        wait = self._get_waits.pop(get_ident(), 0) if self._get_waits else 0
        if active_recorder() is not None:
            self.probe.record(GET, len(self.queue), wait)
        return item

    def put_unless(self, item: Any, cancel: threading.Event) -> None:
        """Blocking put that raises `Cancelled` once `cancel` is set (its wait adds up over the retries)."""
        while True:
            try:
                return queue.Queue.put(self, item, True, POLL_S)
            except queue.Full:
                if cancel.is_set():
                    raise Cancelled(self.name) from None

    def get_unless(self, cancel: threading.Event) -> Any:
        """Blocking get that raises `Cancelled` once `cancel` is set and the queue is empty."""
        while True:
            try:
                return queue.Queue.get(self, True, POLL_S)
            except queue.Empty:
                if cancel.is_set():
                    raise Cancelled(self.name) from None

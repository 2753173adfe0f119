"""Data-queue probes: record the size of an input-pipeline queue at every put and get.

A probe writes one 4-word sample per event through the recording hot path:

    (t_ns, code, size_after_event, wait_ns)      code = descriptor (queue_put | queue_get, name, str(capacity))

so `analyse()` sees, per queue, the size step function (every change of size is an event) and how
long each put / get was blocked. A probe costs a clock read and one `hot.sample` call, well under
a microsecond; it records only while the Profiler records (the hot path drops samples otherwise).

Queue names carry the pipeline structure (docs/data-pipeline.md): `host_queue`, `device_queue`,
or `producer->consumer` for a connector between two named stages.

`ProfiledQueue` is a `queue.Queue` that probes itself from inside its own mutex (in `_put` /
`_get`, where the size is exact), so probing takes no lock the queue does not already take.
"""
from __future__ import annotations

import queue
import threading
from threading import get_ident
from typing import Any, Optional

from profiler import profiler as _api
from profiler.record.recorder import QUEUE_GET, QUEUE_PUT, hot, now_ns

PUT, GET = 0, 1          # event index for QueueProbe.record / record_at
ARROW = "->"             # connector queue names: "producer->consumer"
HOST_QUEUE = "host_queue"        # the host pipeline's output: batches ready on the host
DEVICE_QUEUE = "device_queue"    # batches already staged on the device, waiting for compute
POLL_S = 0.05            # how often a cancellable blocking put / get looks at its cancel event


class Cancelled(Exception):
    """A cancellable put / get gave up because its pipeline is shutting down."""


def connector_name(producer: str, consumer: str) -> str:
    """The name of the queue between two pipeline stages: `producer->consumer`."""
    for stage in (producer, consumer):
        if not stage or ARROW in stage:
            raise ValueError(f"stage name {stage!r} must be non-empty and must not contain {ARROW!r}")
    return f"{producer}{ARROW}{consumer}"


class QueueProbe:
    """Records the puts and gets of one named queue of a given capacity (0 = unbounded).

    Use it to instrument a queue of your own: after each put / get, where the queue's size is
    known (under the queue's own lock, if it has one), call `record(PUT or GET, size_after,
    wait_ns)`, or `record_at(event, t_ns, size_after, wait_ns)` when the event's time
    (`time.perf_counter_ns()`) is known already.
    """

    __slots__ = ("name", "capacity", "_recorder", "_codes")

    def __init__(self, name: str, capacity: int = 0) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a queue name must be a non-empty string, not {name!r}")
        self.name = name
        self.capacity = max(int(capacity), 0)
        self._recorder: Any = None
        self._codes = (0, 0)

    def _bound(self) -> bool:
        """Whether a Profiler records now; (re)intern the codes when the recording changed."""
        prof = _api._active_profiler
        rec = prof._recorder if prof is not None else None
        if rec is not self._recorder:
            self._recorder = rec
            if rec is not None:       # descriptors are per recording: intern them again
                extra = str(self.capacity)
                self._codes = (rec.point_code(QUEUE_PUT, self.name, extra), rec.point_code(QUEUE_GET, self.name, extra))
        return rec is not None

    def record(self, event: int, size: int, wait_ns: int = 0) -> None:
        """Record a put / get completing now that leaves `size` items, after being blocked `wait_ns`."""
        prof = _api._active_profiler
        if (prof is not None and prof._recorder is self._recorder) or self._bound():
            hot.sample(now_ns(), self._codes[event], size, wait_ns)

    def record_at(self, event: int, t_ns: int, size: int, wait_ns: int = 0) -> None:
        """Record a put / get that completed at `t_ns` (perf_counter_ns), leaving `size` items."""
        if self._bound():
            hot.sample(t_ns, self._codes[event], size, wait_ns)


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
        self._get_waits: dict[int, int] = {}      # thread ident -> ns blocked in its current get
        self._put_waits: dict[int, int] = {}      # ... in its current put
        self.not_empty = _TimedCondition(self.mutex, self._get_waits)
        self.not_full = _TimedCondition(self.mutex, self._put_waits)

    @property
    def name(self) -> str:
        return self.probe.name

    def _put(self, item: Any) -> None:        # runs under self.mutex
        self.queue.append(item)
        wait = self._put_waits.pop(get_ident(), 0) if self._put_waits else 0
        if _api._active_profiler is not None:
            self.probe.record(PUT, len(self.queue), wait)

    def _get(self) -> Any:                    # runs under self.mutex
        item = self.queue.popleft()
        wait = self._get_waits.pop(get_ident(), 0) if self._get_waits else 0
        if _api._active_profiler is not None:
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

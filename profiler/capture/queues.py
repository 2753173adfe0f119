"""Data-queue probes: record the size of an input-pipeline queue at every put and get.

A probe writes one 4-word sample per event through the recording hot path:

    (t_ns, code, size_after_event, wait_ns)      code = descriptor (queue_put | queue_get, name, str(capacity))

so `analyse()` sees, per queue, the size step function (every change of size is an event) and how
long each put / get was blocked. A probe costs a clock read and one `hot.sample` call, well under
a microsecond; it records only while a Profiler records (the hot path drops samples otherwise).

Queue names carry the pipeline structure (docs/data-pipeline.md, profiler.formats): `host_queue`,
`device_queue`, or `producer->consumer` for a connector between two named stages. The queues
that probe themselves (`ProfiledQueue`, the pipeline, the torch loader) are in profiler/data/.
"""

from __future__ import annotations

from typing import Any

from profiler.record.recorder import active_recorder, hot, now_ns
from profiler.store.kinds import QUEUE_GET, QUEUE_PUT

PUT, GET = 0, 1  # event index for QueueProbe.record / record_at


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
        rec = active_recorder()
        if rec is not self._recorder:
            self._recorder = rec
            if rec is not None:  # descriptors are per recording: intern them again
                extra = str(self.capacity)
                self._codes = (rec.point_code(QUEUE_PUT, self.name, extra), rec.point_code(QUEUE_GET, self.name, extra))
        return rec is not None

    def record(self, event: int, size: int, wait_ns: int = 0) -> None:
        """Record a put / get completing now that leaves `size` items, after being blocked `wait_ns`."""
        rec = active_recorder()
        if (rec is not None and rec is self._recorder) or self._bound():
            hot.sample(now_ns(), self._codes[event], size, wait_ns)

    def record_at(self, event: int, t_ns: int, size: int, wait_ns: int = 0) -> None:
        """Record a put / get that completed at `t_ns` (perf_counter_ns), leaving `size` items."""
        if self._bound():
            hot.sample(t_ns, self._codes[event], size, wait_ns)

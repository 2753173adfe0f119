"""The recorder: interned event codes, per-thread buffers, and the flusher that moves them to the raw store.

Every recorded thing has a *descriptor* (kind, name, extra) interned once to an integer id `d`;
a begin event carries code `2d`, an end event `2d + 1`. The hot path (C `_hotpath`, or the
pure-Python `buffers` fallback) only ever writes `(t, code)` integers; descriptors, thread names
and everything else reach the raw store from here, off the hot path.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Iterator
from typing import Callable, Optional

from profiler.kernels.native import native
from profiler.store.kinds import FLUSH
from profiler.store.raw import RawWriter


def _load_hot_path():
    """The C hot path when it is built and reads the same clock as time.perf_counter_ns, else Python."""
    _hotpath = native("profiler.record._hotpath")
    if _hotpath is not None:
        a = time.perf_counter_ns()
        c = _hotpath.now()
        b = time.perf_counter_ns()
        if a - 1_000_000 <= c <= b + 1_000_000:
            return _hotpath, "c"
    from profiler.record import buffers

    return buffers, "python"


hot, HOT_PATH_IMPL = _load_hot_path()


class Span(hot.Span):
    """A reusable span: `with span:` records its begin and end; `@span` wraps a function in it."""

    __slots__ = ()

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapper


now_ns: Callable[[], int] = time.perf_counter_ns


def clock_anchor() -> tuple[int, int]:
    """A (now_ns, Unix ns) pair read as close together as possible (best of 5): it puts recorded
    times on the wall clock, and other clocks (Kineto's, a device's) on the recording's."""
    best = None
    for _ in range(5):
        a = now_ns()
        u = time.time_ns()
        b = now_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2, u)
    return best[1], best[2]


_active: Optional[Recorder] = None  # the hot path is process-wide: one recording at a time


def active_recorder() -> Optional[Recorder]:
    """The recorder of the recording running in this process (started, not yet closed), else None."""
    return _active


class Recorder:
    """Owns the descriptor table, the thread registry and the flusher thread of one recording."""

    def __init__(self, writer: RawWriter, budget_bytes: int = 64 << 20, flush_interval_s: float = 0.2) -> None:
        self.writer = writer
        self.budget_bytes = budget_bytes
        self.flush_interval_s = flush_interval_s
        self._lock = threading.Lock()  # guards descriptors and the flush itself
        self._descriptors: list[tuple[str, str, str]] = []
        self._ids: dict[tuple[str, str, str], int] = {}
        self._written_descriptors = 0
        self._threads_seen: dict[int, tuple[str, int]] = {}  # ident -> (name, native id)
        self._threads_written: dict[int, tuple[str, int]] = {}  # what the raw store already has
        self._spans: dict[tuple[str, str, str], object] = {}
        self.events_recorded = 0
        self.samples_recorded = 0
        self.dropped = 0
        self.write_errors = 0
        self.flush_ns_total = 0
        self.buffer_peak_bytes = 0  # the most the recording buffers held at a flush: profview's own memory
        self._flush_code = self.point_code(FLUSH, "flush")
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        hot.drain()  # nothing of an earlier recording may leak into this one
        hot.set_budget(budget_bytes)
        hot.set_thread_callback(self._on_new_thread)

    # ---- interning -------------------------------------------------------------------------

    def intern(self, kind: str, name: str, extra: str = "") -> int:
        """The descriptor id of (kind, name, extra), created on first use."""
        key = (kind, name, extra)
        d = self._ids.get(key)
        if d is None:
            with self._lock:
                d = self._ids.get(key)
                if d is None:
                    d = len(self._descriptors)
                    self._descriptors.append(key)
                    self._ids[key] = d
        return d

    def span(self, kind: str, name: str, extra: str = ""):
        """A reusable context manager recording begin / end of (kind, name, extra)."""
        key = (kind, name, extra)
        s = self._spans.get(key)
        if s is None:
            d = self.intern(kind, name, extra)
            s = self._spans.setdefault(key, Span(2 * d, 2 * d + 1))
        return s

    def point_code(self, kind: str, name: str, extra: str = "") -> int:
        return 2 * self.intern(kind, name, extra)

    # ---- threads ---------------------------------------------------------------------------

    def _on_new_thread(self) -> None:
        """Runs in each thread the first time it records: remember its name while it is alive."""
        t = threading.current_thread()
        self._threads_seen[threading.get_ident()] = (t.name, t.native_id or 0)

    def _thread_table(self, drained_idents: list[int]) -> list[dict]:
        """Threads new or renamed since the last flush, with their current names."""
        live = {t.ident: t for t in threading.enumerate()}
        for ident in drained_idents:  # threads that registered with the hot path before this recorder
            self._threads_seen.setdefault(ident, (f"thread-{ident}", 0))
        changed = []
        for ident, seen in list(self._threads_seen.items()):
            t = live.get(ident)
            current = (t.name, t.native_id or 0) if t is not None else seen
            self._threads_seen[ident] = current
            if self._threads_written.get(ident) != current:
                self._threads_written[ident] = current
                changed.append({"ident": ident, "name": current[0], "native_id": current[1]})
        return changed

    # ---- flushing --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the flusher; from now on this is the process's active_recorder()."""
        global _active
        _active = self
        if self._flusher is None:
            self._stop.clear()
            self._flusher = threading.Thread(target=self._flush_loop, name="profview-flusher", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            self.flush()

    def flush(self) -> None:
        """Move every thread's records and any new descriptors / thread names to the raw store."""
        with self._lock:
            t0 = now_ns()
            self.buffer_peak_bytes = max(self.buffer_peak_bytes, hot.held_bytes())  # the buffers' high tide
            drained = hot.drain()
            try:
                new_desc = self._descriptors[self._written_descriptors :]
                if new_desc:
                    self.writer.append_json("descriptors", [list(k) for k in new_desc], first=self._written_descriptors)
                    self._written_descriptors += len(new_desc)
                threads = self._thread_table([d[0] for d in drained])
                if threads:
                    self.writer.append_json("threads", threads)
                for ident, events, samples, dropped in drained:
                    self.dropped += dropped
                    if events:
                        self.writer.append("events", events, thread=ident, words=2, dropped=dropped)
                        self.events_recorded += len(events) // 16
                    elif dropped:
                        self.writer.append("events", b"", thread=ident, words=2, dropped=dropped)
                    if samples:
                        self.writer.append("samples", samples, thread=ident, words=4)
                        self.samples_recorded += len(samples) // 32
            except OSError as exc:  # disk full, file removed: count what is lost, keep the run alive
                self.write_errors += 1
                self.dropped += sum(len(e) // 16 + len(s) // 32 for _, e, s, _ in drained)
                print(f"profview: could not write the raw store ({exc}); events are being dropped", file=sys.stderr)
            t1 = now_ns()
            self.flush_ns_total += t1 - t0
            # The flush's own cost is recorded like any sample (it lands in the next flush).
            hot.sample(t0, self._flush_code, t1 - t0, 0)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No flush appends to the raw store inside this block (it is being read)."""
        with self._lock:
            yield

    def close(self, final: dict) -> None:
        """Stop the flusher, flush what is left and write the end-of-recording chunk."""
        global _active
        if _active is self:
            _active = None
        self._stop.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        self._flusher = None
        self.flush()
        try:
            self.writer.append_json(
                "end",
                {
                    **final,
                    "events_recorded": self.events_recorded,
                    "samples_recorded": self.samples_recorded,
                    "dropped_events": self.dropped,
                    "write_errors": self.write_errors,
                    "flush_ms": self.flush_ns_total / 1e6,
                    "buffer_peak_bytes": self.buffer_peak_bytes,
                },
            )
            self.writer.sync()
        except OSError:
            pass
        self.writer.close()
        hot.set_thread_callback(None)

"""Pure-Python recording buffers: the same API as the C `_hotpath` module, used when it is not built.

Each recording thread appends to its own `array('q')` buffers (events: [t, code] pairs,
samples: [t, code, a, b] quads). A record is appended with one `extend` call, which holds the
GIL for its whole duration, so the flusher's `drain()` never sees half a record: it takes whole
records from the front of each buffer and deletes them in place (`del buf[:n]`), while the owner
keeps appending at the back.
"""

from __future__ import annotations

import struct
import threading
from array import array
from time import perf_counter_ns as now

_local = threading.local()
_buffers: list[_ThreadBuffer] = []  # every thread that ever recorded
_registry_lock = threading.Lock()
# room: bytes the budget still allows (budget minus what the buffers hold; drain() gives it back)
_state = {"enabled": False, "room": 64 << 20, "callback": None}
_double_bits = struct.Struct("<d")
_int_bits = struct.Struct("<q")


class _ThreadBuffer:
    __slots__ = ("ident", "events", "samples", "dropped")

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self.events = array("q")
        self.samples = array("q")
        self.dropped = 0


def _register() -> _ThreadBuffer:
    """Slow path: the calling thread records for the first time."""
    tb = _ThreadBuffer(threading.get_ident())
    with _registry_lock:
        _buffers.append(tb)
    _local.tb = tb
    callback = _state["callback"]
    if callback is not None:
        callback()
    return tb


def _buffer() -> _ThreadBuffer:
    """The calling thread's buffer (registered on first use)."""
    try:
        return _local.tb
    except AttributeError:
        return _register()


def _put_event(code: int) -> None:
    """Append one [t, code] event to the calling thread's buffer, or count it dropped when the
    budget has no room for it."""
    tb = _buffer()
    if _state["room"] < 16:
        tb.dropped += 1
        return
    _state["room"] -= 16
    tb.events.extend((now(), code))


class Span:
    """Span(begin_code, end_code): a reusable context manager recording begin / end events."""

    __slots__ = ("begin_code", "end_code")

    def __init__(self, begin_code: int, end_code: int) -> None:
        self.begin_code = begin_code
        self.end_code = end_code

    def __enter__(self) -> None:
        if _state["enabled"]:
            _put_event(self.begin_code)

    def __exit__(self, exc_type, exc, tb_) -> bool:
        if _state["enabled"]:
            _put_event(self.end_code)
        return False


class Emitter:
    """Emitter(code, then=None): calling it records the point event `code` now, then returns
    then(*args, **kwargs) (None without `then`): a hook, or a wrapper around e.g. a forward."""

    __slots__ = ("code", "then")

    def __init__(self, code: int, then=None) -> None:
        if then is not None and not callable(then):
            raise TypeError("Emitter: then must be callable or None")
        self.code, self.then = code, then

    def __call__(self, *args, **kwargs):
        emit(self.code)
        return self.then(*args, **kwargs) if self.then is not None else None


class Stepper:
    """Stepper(code, slow): calling it ends a step (fast path into steps below fast_until, else slow(t_ns))."""

    __slots__ = ("code", "step", "overhead", "owner", "fast_until", "slow")

    def __init__(self, code: int, slow) -> None:
        self.code, self.slow = code, slow
        self.step = self.overhead = self.owner = self.fast_until = 0

    def __call__(self, *_ignored) -> None:
        t0 = now()
        if self.step + 1 < self.fast_until and threading.get_ident() == self.owner:
            if _state["enabled"]:
                sample(t0, self.code, self.step, self.overhead)
            self.step += 1
            self.overhead = now() - t0
            return None
        return self.slow(t0)


def emit(code: int) -> None:
    """Record a point event now in the calling thread."""
    if _state["enabled"]:
        _put_event(code)


def sample(t: int, code: int, a: int, b) -> None:
    """Record a 4-word sample; a float `b` is stored as its IEEE-754 bits."""
    if not _state["enabled"]:
        return
    tb = _buffer()
    if _state["room"] < 32:
        tb.dropped += 1
        return
    _state["room"] -= 32
    if isinstance(b, float):
        b = _int_bits.unpack(_double_bits.pack(b))[0]
    tb.samples.extend((t, code, a, b))


def set_enabled(on: bool) -> None:
    _state["enabled"] = bool(on)


def is_enabled() -> bool:
    return _state["enabled"]


def set_budget(nbytes: int) -> None:
    _state["room"] = int(nbytes) - held_bytes()


def held_bytes() -> int:
    return sum((len(tb.events) + len(tb.samples)) * 8 for tb in list(_buffers))


def set_thread_callback(fn) -> None:
    _state["callback"] = fn


def drain() -> list[tuple[int, bytes, bytes, int]]:
    """Take every thread's whole records since the last drain: [(ident, events, samples, dropped)]."""
    out = []
    for tb in list(_buffers):
        n_ev = len(tb.events) & ~1
        n_sm = len(tb.samples) & ~3
        dropped = tb.dropped
        if not (n_ev or n_sm or dropped):
            continue
        events = tb.events[:n_ev].tobytes()
        del tb.events[:n_ev]
        samples = tb.samples[:n_sm].tobytes()
        del tb.samples[:n_sm]
        tb.dropped -= dropped
        _state["room"] += len(events) + len(samples)
        out.append((tb.ident, events, samples, dropped))
    return out

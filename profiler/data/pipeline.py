"""Probed input pipelines: `prefetch`, the device-queue stage and the multi-stage `Pipeline`.

    source -> map stage (N workers) -> ... -> batch -> consumer
          "src->decode"        "decode->batch"  "batch->host_queue"

Every queue between two stages is a `ProfiledQueue` named `producer->consumer`, so the analysis
rebuilds the stage order from the names alone (docs/data-pipeline.md). Items travel as
`(seq, payload)` pairs; a stage with several workers puts its outputs in `seq` order, so every
stage preserves the source order.

End of stream and failures travel in order too: a stage that ends, or fails at item `seq`, sends
an `_End` marker (carrying the exception) at that position, one copy per worker of the next
stage. The consumer receives every item before the failing one, then the exception. Shutdown
(`close()`, leaving a `for` loop early, or dropping the iterator) sets one stop event that every
blocking put / get / turn-wait of the pipeline polls, so no thread stays blocked.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from profiler.data.queues import POLL_S, Cancelled, ProfiledQueue, connector_name
from profiler.formats.columns import DEVICE_QUEUE, HOST_QUEUE

JOIN_TIMEOUT_S = 2.0  # close() waits this long for threads busy in user code, then leaves them (daemons)

Take = Callable[[], tuple]  # a stage's input: returns the next (seq, payload), may raise Cancelled


class _End:
    """End-of-stream marker; `error` is the exception that ended the stream early, if any."""

    __slots__ = ("error",)

    def __init__(self, error: Optional[BaseException] = None) -> None:
        self.error = error


class _Turns:
    """Lets workers put in `seq` order: the worker holding item k waits until item k - 1 was put."""

    def __init__(self) -> None:
        self._next = 0
        self._cond = threading.Condition()

    def wait(self, seq: int, *cancel: threading.Event) -> None:
        with self._cond:
            while self._next != seq:
                if any(e.is_set() for e in cancel):
                    raise Cancelled("turn")
                self._cond.wait(POLL_S)

    def advance(self) -> None:
        with self._cond:
            self._next += 1
            self._cond.notify_all()


class _Stage:
    """What the workers of one stage share: their output queue, put order and end-of-stream state."""

    def __init__(self, workers: int, out: ProfiledQueue, copies: int, stop: threading.Event) -> None:
        self.out = out
        self.copies = copies  # workers of the next stage: each needs its own end marker
        self.stop = stop
        self.halted = threading.Event()  # a worker of this stage failed: the others stop
        self._turns = _Turns() if workers > 1 else None
        self._lock = threading.Lock()
        self._alive = workers
        self._ended = False

    def put(self, seq: int, payload: Any) -> None:
        """Put one output in source order."""
        if self._turns is not None:
            self._turns.wait(seq, self.stop, self.halted)
        self.out.put_unless((seq, payload), self.stop)
        if self._turns is not None:
            self._turns.advance()

    def put_result(self, seq: int, fn: Callable[[Any], Any], arg: Any) -> bool:
        """Put fn(arg) in source order; when fn raises, send the exception instead and return False."""
        try:
            result = fn(arg)
        except BaseException as exc:  # re-raised in the consumer (SystemExit too: never hang it)
            self.fail(seq, exc)
            return False
        self.put(seq, result)
        return True

    def fail(self, seq: int, exc: BaseException) -> None:
        """Send `exc` at position `seq` (after every earlier output) and halt the stage."""
        if self._turns is not None:
            self._turns.wait(seq, self.stop, self.halted)
        self.halted.set()
        if self._claim_end():
            self._send_end(seq, _End(exc))

    def worker_done(self, seq: int, end: _End) -> None:
        """A worker reached the end of its input; the last one forwards it (every output is out by then)."""
        with self._lock:
            self._alive -= 1
            last = self._alive == 0
        if last and self._claim_end():
            self._send_end(seq, end)

    def _claim_end(self) -> bool:
        with self._lock:
            first, self._ended = not self._ended, True
        return first

    def _send_end(self, seq: int, end: _End) -> None:
        for _ in range(self.copies):
            self.out.put_unless((seq, end), self.stop)


# ---- stage bodies: run(take, stage) in each worker thread -----------------------------------


def _read_source(items: Iterable) -> Callable[[Take, _Stage], None]:
    """The source stage (one thread): the iterable's items in order, then the end marker."""

    def run(take: Take, stage: _Stage) -> None:
        n = 0
        try:
            for item in items:
                stage.put(n, item)
                n += 1
        except Cancelled:
            raise
        except BaseException as exc:  # re-raised in the consumer (SystemExit too: never hang it)
            stage.fail(n, exc)
            return
        stage.worker_done(n, _End())

    return run


def _apply(fn: Callable[[Any], Any]) -> Callable[[Take, _Stage], None]:
    """A map stage worker: fn on each input, outputs in input order."""

    def run(take: Take, stage: _Stage) -> None:
        while True:
            seq, payload = take()
            if stage.halted.is_set():
                return
            if type(payload) is _End:
                stage.worker_done(seq, payload)
                return
            if not stage.put_result(seq, fn, payload):
                return

    return run


def _batcher(size: int, collate: Callable[[list], Any], drop_last: bool) -> Callable[[Take, _Stage], None]:
    """The batch stage (one thread): `size` consecutive items -> collate(items)."""

    def run(take: Take, stage: _Stage) -> None:
        items: list = []
        n = 0
        while True:
            _, payload = take()
            end = payload if type(payload) is _End else None
            if end is None:
                items.append(payload)
            if items and (len(items) == size or (end is not None and end.error is None and not drop_last)):
                if not stage.put_result(n, collate, items):
                    return
                n, items = n + 1, []
            if end is not None:
                stage.worker_done(n, end)
                return

    return run


def _guarded(run: Callable[[Take, _Stage], None]) -> Callable[[Take, _Stage], None]:
    """A worker body that ends quietly when the pipeline shuts down."""

    def body(take: Take, stage: _Stage) -> None:
        try:
            run(take, stage)
        except Cancelled:
            pass

    return body


@dataclass
class _Spec:
    """One stage to start: its name, worker count, body, and (for a source of indices) its own input."""

    name: str
    workers: int
    run: Callable[[Take, _Stage], None]
    take: Optional[Take] = None


class PipelineIterator(Iterator):
    """A running pipeline: iterate it for the outputs; `close()` (or leaving the loop) shuts it down.

    `queues` maps each queue name to its `ProfiledQueue`, in pipeline order.
    """

    def __init__(
        self,
        specs: Sequence[_Spec],
        queue_names: Sequence[str],
        depth: int,
        ready: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, not {depth}")
        self._stop = threading.Event()
        self.queues = {name: ProfiledQueue(depth, name) for name in queue_names}
        self._out = self.queues[queue_names[-1]]
        self._ready = ready
        self._done = False
        self._threads = self._start(specs, list(self.queues.values()))
        # Threads hold the stop event, never this object: dropping the iterator stops them.
        weakref.finalize(self, self._stop.set)

    def _start(self, specs: Sequence[_Spec], queues: list[ProfiledQueue]) -> list[threading.Thread]:
        threads = []
        for i, spec in enumerate(specs):
            copies = specs[i + 1].workers if i + 1 < len(specs) else 1
            stage = _Stage(spec.workers, queues[i], copies, self._stop)
            take = spec.take or functools.partial(queues[i - 1].get_unless, self._stop)
            body = _guarded(spec.run)
            threads += [
                threading.Thread(target=body, args=(take, stage), daemon=True, name=f"profview-{spec.name}-{k}")
                for k in range(spec.workers)
            ]
        for t in threads:
            t.start()
        return threads

    def __iter__(self) -> PipelineIterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        try:
            _, payload = self._out.get_unless(self._stop)
        except Cancelled:  # closed from another thread
            self._done = True
            raise StopIteration from None
        if type(payload) is _End:
            self.close()
            if payload.error is not None:
                raise payload.error
            raise StopIteration
        return payload if self._ready is None else self._ready(payload)

    def close(self) -> None:
        """Stop every stage and wait (up to JOIN_TIMEOUT_S) for their threads; idempotent."""
        self._done = True
        self._stop.set()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(deadline - time.monotonic(), 0.0))

    def __enter__(self) -> PipelineIterator:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


class Pipeline:
    """A multi-stage input pipeline in the spirit of MindData: source -> map stages -> batch.

        pipe = (Pipeline(read_files(), name="read", depth=4)
                .map(decode, workers=4, name="decode")
                .map(augment, name="augment")
                .batch(32))
        for batch in pipe: ...

    Each stage runs in its own thread(s); the queue between stages A and B is a
    `ProfiledQueue(depth)` named "A->B", and the last stage feeds "<last>-><output>"
    (default output "host_queue"), the queue the consumer reads. Stage names must be unique
    and must not contain "->". Order is preserved. Iterating starts the threads; a Pipeline
    runs once (build a new one per epoch).
    """

    def __init__(self, source: Iterable, name: str = "source", depth: int = 4, output: str = HOST_QUEUE) -> None:
        self.depth = depth
        self.output = output
        self._specs = [_Spec(name, 1, _read_source(source))]
        self._started = False

    def map(self, fn: Callable[[Any], Any], workers: int = 1, name: Optional[str] = None) -> Pipeline:
        """Add a stage applying `fn` to every item with `workers` threads (outputs stay in order)."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        return self._add(_Spec(name or getattr(fn, "__name__", "map"), workers, _apply(fn)))

    def batch(
        self, size: int, name: str = "batch", collate: Callable[[list], Any] = list, drop_last: bool = False
    ) -> Pipeline:
        """Add a stage grouping `size` consecutive items into collate(items); a short last batch unless drop_last."""
        if size < 1:
            raise ValueError(f"batch size must be >= 1, not {size}")
        return self._add(_Spec(name, 1, _batcher(size, collate, drop_last)))

    def _add(self, spec: _Spec) -> Pipeline:
        if spec.name in {s.name for s in self._specs}:
            raise ValueError(f"stage name {spec.name!r} is used twice; stage names name the queues and must be unique")
        self._specs.append(spec)
        return self

    @property
    def queue_names(self) -> list[str]:
        """The connector queues, in pipeline order (the last one is what the consumer reads)."""
        names = [s.name for s in self._specs] + [self.output]
        return [connector_name(a, b) for a, b in zip(names, names[1:])]

    def __iter__(self) -> PipelineIterator:
        if self._started:
            raise RuntimeError("this Pipeline already ran; build a new one for another pass")
        self._started = True
        return PipelineIterator(self._specs, self.queue_names, self.depth)


def _is_map_style(source: Any) -> bool:
    return hasattr(source, "__len__") and hasattr(source, "__getitem__") and not isinstance(source, (str, bytes))


def _claim_indices(n: int) -> Take:
    """Input of a map-style prefetch: each call claims the next index (atomic under the GIL), then the end."""
    claims = itertools.count()

    def take() -> tuple:
        i = next(claims)
        return (i, i) if i < n else (n, _End())

    return take


def prefetch(source: Iterable, depth: int = 2, name: str = HOST_QUEUE, workers: int = 1) -> PipelineIterator:
    """Read `source` ahead of the consumer in background threads, through a probed queue `name`.

    A map-style source (`len()` and `[i]`, e.g. a torch Dataset) is read by index: each of the
    `workers` threads claims the next index and reads `source[i]`, and the outputs are put in
    index order, so the consumer sees exactly `source[0], ..., source[len - 1]`. Any other
    iterable is iterated by one thread (workers must be 1). At most `depth` items wait in the
    queue, plus one finished item per worker waiting for its turn. An exception in the producer
    is raised in the consumer after every item before it. Threads start now; `close()` or leaving
    the loop stops them.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    if _is_map_style(source):
        spec = _Spec(name, workers, _apply(source.__getitem__), take=_claim_indices(len(source)))
    elif workers == 1:
        spec = _Spec(name, 1, _read_source(source))
    else:
        raise ValueError(
            f"prefetch(workers={workers}) needs a map-style source (len() and [i]) to read in "
            f"parallel and keep the order; {type(source).__name__} can only be read by one thread "
            "(use workers=1, or Pipeline(...).map(fn, workers=N) for the per-item work)"
        )
    return PipelineIterator([spec], [name], depth)


def device_prefetch(
    batches: Iterable, to_device: Callable[[Any], Any], depth: int = 2, name: str = DEVICE_QUEUE
) -> PipelineIterator:
    """Stage batches on the device ahead of compute: a thread applies `to_device` and fills queue `name`.

    `to_device(batch)` runs in the stage's thread (a host->device copy, e.g.
    `torch_data.TorchDeviceCopy`). If it has a `ready(staged)` method, the consumer calls it on
    each batch before use (CUDA: make the compute stream wait for the side-stream copy).
    """
    return PipelineIterator(
        [_Spec(name, 1, _read_source(map(to_device, batches)))], [name], depth, ready=getattr(to_device, "ready", None)
    )

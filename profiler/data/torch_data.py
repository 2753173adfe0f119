"""PyTorch input pipelines: a DataLoader's worker prefetch as a probed queue, and a host->device copy stage.

`ProfiledDataLoader(loader)` is iterated instead of the loader. It measures, without touching
torch internals (only the public `collate_fn`, `num_workers`, `prefetch_factor` attributes and
`torch.utils.data.get_worker_info()`):

- put: a batch is ready in a worker process. The loader's `collate_fn` is wrapped so that, in the
  worker, right after collation, it writes `time.perf_counter_ns()` (CLOCK_MONOTONIC, shared by
  all processes) into that worker's slot of a shared-memory log (a per-worker counter and a ring
  of times; each worker writes only its own slot, the main process only reads: no lock).
- get: the main process's `next()` on the loader's iterator; its wait is how long `next()` took.

Every `next()` is also recorded as a `data` phase on the consuming thread, with workers or
without: the step trace's data wait (`data_wait_ms`) is the time the loop spent fetching batches,
so the iteration gap splits into data wait and other host work (`gap_host_ms`) in every mode.

Occupancy = batches finished by the workers and not yet returned to the main process, rebuilt at
each get from the log: a put per finished batch (at its worker's time), a get per returned batch.
Capacity = num_workers x prefetch_factor: the DataLoader never has more batches in flight
(dispatched to workers and not yet returned), so the occupancy stays within [0, capacity].
"""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Iterator
from typing import Any, Callable, Optional

import numpy as np

from profiler.capture.queues import GET, PUT, QueueProbe
from profiler.data.fetch import TimedFetches
from profiler.errors import ProfilerUsageWarning
from profiler.formats.columns import HOST_QUEUE
from profiler.record.recorder import now_ns

RING = 64  # finished-batch times kept per worker between two reads (a worker has <= prefetch_factor in flight)


class _CompletionLog:
    """Shared-memory log of finished batches: per worker [count, t_0 .. t_RING-1] (int64)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.slots = multiprocessing.RawArray("q", workers * (RING + 1))

    def mark(self, worker: int) -> None:
        """In a worker process: one more batch finished now (time first, then the count)."""
        base = worker * (RING + 1)
        count = self.slots[base]
        self.slots[base + 1 + count % RING] = now_ns()
        self.slots[base] = count + 1

    def counts(self) -> list[int]:
        return [self.slots[w * (RING + 1)] for w in range(self.workers)]

    def times(self, worker: int, first: int, stop: int) -> list[int]:
        """Finish times of batches first..stop-1 of `worker` (the ones the ring still holds)."""
        base = worker * (RING + 1) + 1
        return [self.slots[base + k % RING] for k in range(max(first, stop - RING), stop)]


class _TimedCollate:
    """collate_fn wrapper run in the workers: collate, then log the batch as finished."""

    def __init__(self, collate_fn: Callable[[Any], Any], log: _CompletionLog) -> None:
        self.collate_fn = collate_fn
        self.log = log

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is not None:
            self.log.mark(info.id)
        return batch


class _Occupancy:
    """Main-process side of one epoch: turns log reads and gets into put / get samples."""

    def __init__(self, log: _CompletionLog, probe: QueueProbe) -> None:
        self.log = log
        self.probe = probe
        self.seen = log.counts()  # batches finished before this epoch are not ours
        self.produced = 0
        self.consumed = 0

    def _new_times(self) -> np.ndarray:
        counts = self.log.counts()
        new = [t for w, c in enumerate(counts) for t in self.log.times(w, self.seen[w], c)]
        self.seen = counts
        return np.sort(np.asarray(new, dtype=np.int64))

    def _puts(self, times: np.ndarray) -> None:
        for t in times.tolist():
            self.produced += 1
            self.probe.record_at(PUT, t, self.produced - self.consumed)

    def got(self, t0: int, t1: int) -> bool:
        """Record the batches finished so far and the get that ran t0..t1; False when the log is not being written.

        The DataLoader takes the batch (and dispatches the next index) inside next(), before it
        returns at t1; batches finished after that moment belong after the get. At most
        consumed + capacity batches can be finished when the batch is taken (that many were
        dispatched), so finishes beyond that bound are put after the get, and the get is dated
        just before the first of them.
        """
        times = self._new_times()
        ready = int(np.searchsorted(times, t1, side="right"))
        before = min(ready, self.consumed + self.probe.capacity - self.produced)
        self._puts(times[:before])
        self.consumed += 1
        if self.produced < self.consumed:  # the returned batch was never logged: workers predate the wrap
            return False
        t_get = t1 if before == ready else max(int(times[before]) - 1, t0)
        self.probe.record_at(GET, t_get, self.produced - self.consumed, t_get - t0)
        self._puts(times[before:])
        return True


class ProfiledDataLoader:
    """Iterate a `torch.utils.data.DataLoader` and probe its worker prefetch as queue `name`.

    Wrap the loader before iterating it the first time (its workers must be started with the
    wrapped collate_fn; with persistent_workers, before the first epoch). With num_workers == 0
    batches are made in the main process: there is no prefetch queue to probe, and each fetch is
    timed as data wait.
    """

    def __init__(self, loader: Any, name: str = HOST_QUEUE) -> None:
        self.loader = loader
        workers = int(loader.num_workers)
        self.capacity = workers * int(loader.prefetch_factor or 0) if workers > 0 else 0
        self.probe = QueueProbe(name, self.capacity)
        self._log: Optional[_CompletionLog] = None
        if workers > 0:
            self._log = _CompletionLog(workers)
            loader.collate_fn = _TimedCollate(loader.collate_fn, self._log)

    def __len__(self) -> int:
        return len(self.loader)

    def epoch_probe(self, warn: bool = False) -> Optional[Callable[[int, int], None]]:
        """For one epoch: a function to call with each fetch's (call, return) times, which records the
        worker queue's puts and the get, until it finds that the workers predate the wrap (then,
        with `warn`, it says so once). None without workers. `profview run` gives it to the
        iterators of a loader made elsewhere (it wraps DataLoader.__iter__)."""
        if self._log is None:
            return None
        occupancy = _Occupancy(self._log, self.probe)
        probing = [True]

        def probe(t0: int, t1: int) -> None:
            if probing[0] and not occupancy.got(t0, t1):
                probing[0] = False
                if warn:
                    warnings.warn(
                        "ProfiledDataLoader: the loader's workers were started before it was wrapped; "
                        "wrap it before the first iteration to probe its occupancy",
                        ProfilerUsageWarning,
                        stacklevel=3,
                    )

        return probe

    def __iter__(self) -> Iterator:
        """The loader's batches; each next() (the probe's bookkeeping included) is the loop's data wait."""
        return TimedFetches(self.loader, then=self.epoch_probe(warn=True))


# ---- host -> device ---------------------------------------------------------------------------


def map_tensors(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """`batch` with fn applied to every tensor inside (nested tuples, lists and dicts)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: map_tensors(v, fn) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        out = [map_tensors(v, fn) for v in batch]
        return type(batch)(*out) if hasattr(batch, "_fields") else type(batch)(out)
    return batch


class _Staged:
    """A batch copied on the side stream, with the event that marks the copy's end."""

    __slots__ = ("batch", "event")

    def __init__(self, batch: Any, event: Any) -> None:
        self.batch = batch
        self.event = event


class TorchDeviceCopy:
    """`to_device` for `device_prefetch`: copy a batch's tensors to `device` in the stage's thread.

    CUDA: pinned host memory, `non_blocking` copy on a side stream; `ready()` (called by the
    consumer) makes the compute stream wait for the copy and hands the tensors to it. Other
    devices (CPU here): a real copy (`tensor.to(device, copy=True)`); `ready()` returns the batch.
    """

    def __init__(self, device: Any = None) -> None:
        import torch

        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def __call__(self, batch: Any) -> Any:
        if self._stream is None:
            return map_tensors(batch, lambda t: t.to(self.device, copy=True))
        import torch

        with torch.cuda.stream(self._stream):
            out = map_tensors(
                batch, lambda t: (t.pin_memory() if t.device.type == "cpu" else t).to(self.device, non_blocking=True)
            )
            event = torch.cuda.Event()
            event.record(self._stream)
        return _Staged(out, event)

    def ready(self, staged: Any) -> Any:
        """In the consumer: the batch, usable on the current stream."""
        if not isinstance(staged, _Staged):
            return staged
        import torch

        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(staged.event)
        map_tensors(staged.batch, lambda t: t.record_stream(stream))
        return staged.batch

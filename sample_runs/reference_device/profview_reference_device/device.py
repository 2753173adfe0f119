"""A reference Ascend-style device: real work on stream threads, reported through an Ascend JOB log.

For machines without an NPU. The device runs the callables the host launches (numpy kernels,
which release the GIL) on one thread per stream, in launch order per stream and asynchronously
to the host, and reports exactly as an Ascend device does (docs/ascend.md, "Reference device"):

* each kernel execution is a Start and an End record in the HWTS task log, stamped with a
  100 MHz system counter (`syscnt`, derived from `time.perf_counter_ns`), task ids >= 25000
  (one per distinct op: the ops launched form one graph, re-executed every iteration);
* `fp_start()`, `bp_end()`, `all_reduce()` and `iter_end()` are points in the training trace,
  stamped when the stream reaches them (HWTS Start / End of a task are written adjacent, when it
  ends, so the log pairs correctly when streams overlap);
* task_desc / graph_desc / point files describe the graph (names, types, tensor shapes);
* a clock-sync file pairs host time and syscnt, so analysis can put device time on the host's.

    dev = AscendReferenceDevice(profiler, device_id=0, streams=2)
    for batch in dev.data_queue(loader, depth=4):        # sink mode: batches staged ahead
        dev.fp_start()
        h = dev.launch("Default/MatMul-op1", "MatMul", np.matmul, batch, w)
        ...
        dev.bp_end()
        g = dev.all_reduce("Default/AllReduce-op9", average, grad, stream=1)
        dev.launch("Default/ApplyMomentum-op10", "ApplyMomentum", update, w, g)
        dev.iter_end().result()                          # the host waits for the iteration
        profiler.step()
    profiler.analyse()      # closes the device; its log is parsed and merged into the run

The log goes to `<output_path>/raw/r<rank>-p<pid>-ascend_dev<id>/`, a JOB directory that
`read_ascend_job` (and `profview import-ascend`) reads like a real one.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from profiler.capture.base import STEPS, Host, Source
from profiler.errors import ProfviewError
from profiler.importers.ascend.device_run import SYSCNT_TICK_NS
from profiler.importers.ascend.hwts import GLOBAL_TASK_ID_MIN
from profiler.importers.ascend.training_trace import BP_END_TAG, FP_START_TAG, ITER_END_TAGS
from profiler.model import Run
from profiler.record.recorder import now_ns
from profiler.store.load import Recording
from profview_reference_device.log_writer import (
    CLOCK_SYNC_FORMAT,
    SYSCNT_HZ,
    JobWriter,
    device_dir_name,
    graph_desc_line,
    point_line,
    task_desc_line,
    tensor_description,
)
from profview_reference_device.merge import merge_ascend_devices

if TYPE_CHECKING:
    from profiler.data.pipeline import PipelineIterator
    from profiler.record.recorder import Recorder

LAST_TASK_ID = 0xFFFF
#: The step marker's tag: a job id (tags 0 and > 255 mark the start of an iteration).
STEP_MARKER_TAG = 10000
ITER_END_TAG = ITER_END_TAGS[0]
#: All-reduce points: tag t (odd) starts an interval, t + 1 ends it; one pair per all-reduce op name.
FIRST_REDUCE_TAG, LAST_REDUCE_TAG = 3, 254
#: The op of a host -> device copy (`to_device`, `data_queue`), run on the data stream.
COPY_OP = ("MemcpyHtoD", "MemcpyAsync")


class Task:
    """A unit of work queued on a stream; `result()` waits for the device to run it.

    A Task passed as an argument of `launch` / `all_reduce` is replaced by its value when the
    device runs that op, after waiting for it if it belongs to another stream (an event wait).
    """

    __slots__ = ("name", "stream", "_done", "_value", "_error")

    def __init__(self, name: str, stream: int) -> None:
        self.name = name
        self.stream = stream
        self._done = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None

    def done(self) -> bool:
        """Whether the device has run it."""
        return self._done.is_set()

    def result(self, timeout: Optional[float] = None) -> Any:
        """The callable's return value; re-raises its exception. Blocks until the device ran it."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"task {self.name} on stream {self.stream} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    def _finish(self, value: Any = None, error: Optional[BaseException] = None) -> None:
        self._value, self._error = value, error
        self._done.set()


class _Op:
    """One op of the device graph: its task id and, after its first execution, its tensors."""

    __slots__ = ("name", "op_type", "task_id", "stream", "tensors", "written")

    def __init__(self, name: str, op_type: str, task_id: int, stream: int) -> None:
        self.name, self.op_type, self.task_id, self.stream = name, op_type, task_id, stream
        self.tensors: Optional[tuple[list, list]] = None  # (inputs, outputs) descriptions
        self.written = False


class _Log:
    """Records taken by the streams since the last flush, behind one lock.

    A task's Start and End are appended together when it ends, so they stay adjacent in the
    HWTS log even when streams overlap (the pairing rule of docs/ascend.md needs that); points of
    all streams share one list, so the training trace keeps the order in which they happened.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: list[int] = []  # task_id, stream_id, start, end
        self.points: list[int] = []  # tag, task_id, stream_id, syscnt

    def task(self, task_id: int, stream_id: int, start: int, end: int) -> None:
        with self.lock:
            self.tasks += (task_id, stream_id, start, end)

    def point(self, tag: int, stream_id: int, syscnt: int) -> None:
        with self.lock:
            self.points += (tag, 0, stream_id, syscnt)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The (n, 4) task and point arrays recorded since the last call."""
        with self.lock:
            tasks, points, self.tasks, self.points = self.tasks, self.points, [], []
        return np.array(tasks, dtype=np.int64).reshape(-1, 4), np.array(points, dtype=np.int64).reshape(-1, 4)


def _resolved(args: tuple) -> tuple:
    """The arguments with every Task replaced by its value (waiting for it)."""
    return tuple(a.result() if isinstance(a, Task) else a for a in args)


def _described(values: Iterable[Any]) -> list[tuple[int, str]]:
    return [d for d in map(tensor_description, values) if d is not None]


def _outputs(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def copy_tree(value: Any) -> Any:
    """A copy of `value` with every numpy array copied (inside tuples, lists and dicts too)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (tuple, list)):
        return type(value)(copy_tree(v) for v in value)
    if isinstance(value, dict):
        return {k: copy_tree(v) for k, v in value.items()}
    return value


class _Stream:
    """One device stream: a thread running its commands (callables) in submission order."""

    def __init__(self, device_id: int, stream_id: int) -> None:
        self.id = stream_id
        self.name = f"npu:{device_id} stream {stream_id}"
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"ascend-dev{device_id}-stream{stream_id}", daemon=True)
        self._thread.start()

    def submit(self, command: Callable[[], None]) -> None:
        """Queue a command; refused once the stream is closed (nothing would ever run it)."""
        with self._lock:
            if self._closed:
                raise ProfviewError(f"{self.name} is closed: the reference device was closed")
            self._commands.put(command)

    def event(self) -> Task:
        """A Task that completes when the stream has run everything submitted before it."""
        task = Task("event", self.id)
        self.submit(task._finish)
        return task

    def close(self) -> None:
        """Run what is queued, then stop the thread."""
        with self._lock:
            self._closed = True
            self._commands.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (command := self._commands.get()) is not None:
            command()


DEVICE_SOURCE = re.compile(r"ascend_dev\d+")  # the name a device records under: ascend_dev<id>


class AscendReferenceDevice(Source):
    """A reference Ascend-style device with `streams` compute streams and one data stream.

    Args:
        profiler: the Profiler whose run the device belongs to: its log goes to the Profiler's
            raw store, it is closed by `profiler.stop()` and merged by `profiler.analyse()`.
            Without one, give `job_dir` (a stand-alone JOB directory) or nothing (no log).
        device_id: the device number (`npu:<id>` in the outputs).
        streams: compute streams 0 .. streams-1; the data stream (copies) is stream `streams`.
        job_dir: where to write the log, instead of the Profiler's raw store.
        flush_interval_s: how often the log is written out (default: the Profiler's, else 0.2 s).
    """

    name = "ascend_dev"
    merge_stage = STEPS  # a device that recorded iterations gives the run its steps

    @classmethod
    def recorded_as(cls, name: str) -> bool:
        return DEVICE_SOURCE.fullmatch(name) is not None

    @classmethod
    def merge(cls, run: Run, recording: Recording) -> Run:
        """Every device's log parsed like a real one and put on the host clock (merge_ascend_devices)."""
        return merge_ascend_devices(run, recording.directory, recording.rank)

    def __init__(
        self,
        profiler: Optional[Host] = None,
        device_id: int = 0,
        streams: int = 1,
        *,
        job_dir: Optional[str | Path] = None,
        flush_interval_s: Optional[float] = None,
    ) -> None:
        super().__init__()
        if streams < 1:
            raise ValueError(f"streams must be >= 1, not {streams}")
        self.name = f"ascend_dev{device_id}"
        self.device_id = device_id
        self.streams = streams
        self.data_stream = streams
        self._profiler = profiler
        if job_dir is None and profiler is not None and profiler.active:
            job_dir = profiler.output_path / "raw" / device_dir_name(profiler.rank, os.getpid(), device_id)
        self._writer = JobWriter(Path(job_dir), device_id) if job_dir is not None else None
        self._epoch_ns = now_ns()  # the device counter reads 0 here
        self._log = _Log()
        self._ops: dict[str, _Op] = {}
        self._points: dict[int, str] = {}  # point-file tag -> op name
        self._points_written: set[int] = set()
        self._reduce_tags: dict[str, int] = {}
        self._last_op: dict[int, str] = {}  # stream -> last op launched on it
        self._fp_pending: set[int] = set()  # streams whose next launch is the FP-start op
        self._host_steps: list[int] = []  # per iteration, the host step that began it
        self._host_steps_written = 0
        self._errors: list[BaseException] = []  # kernel errors not yet raised by synchronize()
        self._failed = 0  # tasks that failed (their own error or an input's)
        self._lock = threading.Lock()  # op table (launches may come from several host threads)
        self._flush_lock = threading.Lock()
        self._closed = False
        self._streams = [_Stream(device_id, s) for s in range(streams + 1)]
        self.details.update(
            {
                "device": f"npu:{device_id}",
                "streams": streams,
                "data_stream": self.data_stream,
                "job_dir": str(job_dir) if job_dir is not None else None,
            }
        )
        if self._writer is not None:
            self._writer.clock_sync(
                format=CLOCK_SYNC_FORMAT,
                version=1,
                device_id=device_id,
                syscnt_hz=SYSCNT_HZ,
                host_clock="perf_counter_ns",
            )
            self._sync_pair()
        interval = flush_interval_s or (profiler.flush_interval_s if profiler is not None else 0.2)
        self._stop_flusher = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_loop, args=(interval,), daemon=True, name=f"ascend-dev{device_id}-log"
        )
        self._flusher.start()
        if profiler is not None:
            profiler.add_source(self)

    # ---- the device clock ------------------------------------------------------------------

    def syscnt(self) -> int:
        """The device's system counter now: 100 MHz ticks since the device was opened."""
        return (now_ns() - self._epoch_ns) // SYSCNT_TICK_NS

    def _sync_pair(self) -> None:
        """Write a host<->device clock pair: the host time at which the counter took its value.

        The counter is derived from the host clock, so the pair is exact: counter value s began
        at host time epoch + 10 * s.
        """
        s = self.syscnt()
        self._writer.clock_sync(host_monotonic_ns=self._epoch_ns + s * SYSCNT_TICK_NS, syscnt=s)

    # ---- launching work --------------------------------------------------------------------

    def launch(self, name: str, op_type: str, fn: Callable[..., Any], *args: Any, stream: int = 0) -> Task:
        """Queue `fn(*args)` as op `name` of type `op_type` on a compute stream; returns at once.

        Task arguments are replaced by their values when the op runs. The execution is one
        Start / End pair in the HWTS log; the op's first execution describes its tensors.
        """
        return self._kernel(name, op_type, fn, args, self._compute_stream(stream))

    def to_device(self, value: Any) -> Task:
        """Copy a batch (numpy arrays, possibly in tuples / lists / dicts) to the device, on the data stream."""
        return self._kernel(*COPY_OP, copy_tree, (value,), self.data_stream)

    def data_queue(self, batches: Iterable[Any], depth: int = 2) -> PipelineIterator:
        """Sink mode: a thread copies `batches` to the device ahead of compute, through the probed
        queue `device_queue` (at most `depth` staged batches). Iterate it for the staged batches."""
        from profiler.data.pipeline import device_prefetch

        return device_prefetch(batches, lambda batch: self.to_device(batch).result(), depth=depth)

    def fp_start(self, stream: int = 0) -> None:
        """Begin an iteration: a step marker and the FP_START point, stamped when `stream` reaches them."""
        stream = self._compute_stream(stream)
        profiler = self._profiler
        self._host_steps.append(profiler.step_num if profiler is not None else len(self._host_steps))
        self._fp_pending.add(stream)
        self._submit_point(stream, STEP_MARKER_TAG, FP_START_TAG)

    def bp_end(self, stream: int = 0) -> None:
        """The BP_END point: the end of the backward pass on `stream`."""
        stream = self._compute_stream(stream)
        if BP_END_TAG not in self._points and stream in self._last_op:
            self._points[BP_END_TAG] = self._last_op[stream]
        self._submit_point(stream, BP_END_TAG)

    def all_reduce(self, name: str, fn: Callable[..., Any], *args: Any, stream: Optional[int] = None) -> Task:
        """Run the collective `fn(*args)` between an all-reduce start and end point on `stream`
        (default: the last compute stream). Collectives are training-trace intervals, not HWTS tasks."""
        stream = self._compute_stream(self.streams - 1 if stream is None else stream)
        tag = self._reduce_tag(name)
        task = Task(name, stream)

        def run() -> None:
            try:
                values = _resolved(args)
            except BaseException as exc:
                return self._fail(task, exc)
            self._log.point(tag, stream, self.syscnt())
            try:
                value, error = fn(*values), None
            except Exception as exc:
                value, error = None, exc
            self._log.point(tag + 1, stream, self.syscnt())
            self._finish(task, value, error)

        self._streams[stream].submit(run)
        return task

    def iter_end(self, stream: int = 0) -> Task:
        """End the iteration: ITER_END on `stream` once every compute stream has run what was queued
        before (the data stream, busy staging later batches, is not waited for). The returned Task
        completes at ITER_END: `dev.iter_end().result()` waits for the whole iteration."""
        stream = self._compute_stream(stream)
        events = [s.event() for s in self._streams[: self.streams] if s.id != stream]
        task = Task("iter_end", stream)

        def run() -> None:
            for event in events:
                event.result()
            self._log.point(ITER_END_TAG, stream, self.syscnt())
            task._finish()

        self._streams[stream].submit(run)
        return task

    def synchronize(self) -> None:
        """Wait until every stream has run everything queued; raise the first kernel error since the last call."""
        for event in [s.event() for s in self._streams]:
            event.result()
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, recorder: Recorder) -> None:
        """Source hook: nothing to do, the device runs from its creation."""

    def stop(self) -> None:
        """Source hook (Profiler.stop): close the device."""
        self.close()

    def close(self) -> None:
        """Run what is queued, stop the stream threads and write the rest of the log (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for stream in self._streams:
            stream.close()
        self._stop_flusher.set()
        self._flusher.join()
        self._flush()
        self.details.update({"ops": len(self._ops), "iterations": len(self._host_steps)})
        if self._writer is not None:
            self.details["records"] = dict(self._writer.records)
        self.details["failed_tasks"] = self._failed

    def __enter__(self) -> AscendReferenceDevice:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals -------------------------------------------------------------------------

    def _compute_stream(self, stream: int) -> int:
        if not 0 <= stream < self.streams:
            raise ValueError(f"stream {stream} is not a compute stream of npu:{self.device_id} (0..{self.streams - 1})")
        return stream

    def _op(self, name: str, op_type: str, stream: int) -> _Op:
        op = self._ops.get(name)
        if op is None:
            with self._lock:
                op = self._ops.get(name)
                if op is None:
                    task_id = GLOBAL_TASK_ID_MIN + len(self._ops)
                    if task_id > LAST_TASK_ID:
                        raise ProfviewError(
                            f"npu:{self.device_id} has more distinct ops than task ids "
                            f"({LAST_TASK_ID - GLOBAL_TASK_ID_MIN + 1}); reuse op names"
                        )
                    op = self._ops[name] = _Op(name, op_type, task_id, stream)
        if op.op_type != op_type:
            raise ValueError(f"op {name!r} was launched as {op.op_type!r} before, now as {op_type!r}")
        return op

    def _kernel(self, name: str, op_type: str, fn: Callable[..., Any], args: tuple, stream: int) -> Task:
        op = self._op(name, op_type, stream)
        self._last_op[stream] = name
        if stream in self._fp_pending:
            self._fp_pending.discard(stream)
            self._points.setdefault(FP_START_TAG, name)
        task = Task(name, stream)

        def run() -> None:
            try:
                values = _resolved(args)
            except BaseException as exc:  # a failed input: the op does not run
                return self._fail(task, exc)
            start = self.syscnt()
            try:
                value, error = fn(*values), None
            except Exception as exc:
                value, error = None, exc
            end = self.syscnt()
            if op.tensors is None and error is None:
                op.tensors = (_described(values), _described(_outputs(value)))
            self._log.task(op.task_id, stream, start, end)
            self._finish(task, value, error)

        self._streams[stream].submit(run)
        return task

    def _fail(self, task: Task, error: BaseException) -> None:
        self._failed += 1
        self._errors.append(error)
        task._finish(error=error)

    def _finish(self, task: Task, value: Any, error: Optional[BaseException]) -> None:
        if error is not None:
            self._fail(task, error)
        else:
            task._finish(value)

    def _reduce_tag(self, name: str) -> int:
        with self._lock:
            tag = self._reduce_tags.get(name)
            if tag is None:
                tag = FIRST_REDUCE_TAG + 2 * len(self._reduce_tags)
                if tag + 1 > LAST_REDUCE_TAG:
                    raise ProfviewError(
                        f"npu:{self.device_id} has more all-reduce ops than training-trace tags "
                        f"({(LAST_REDUCE_TAG - FIRST_REDUCE_TAG + 1) // 2})"
                    )
                self._reduce_tags[name] = tag
                self._points[tag] = self._points[tag + 1] = name
        return tag

    def _submit_point(self, stream: int, *tags: int) -> None:
        def run() -> None:
            for tag in tags:
                self._log.point(tag, stream, self.syscnt())

        self._streams[stream].submit(run)

    def _flush_loop(self, interval_s: float) -> None:
        while not self._stop_flusher.wait(interval_s):
            self._flush()

    def _flush(self) -> None:
        """Write what was recorded since the last flush: descriptions first, then records and a clock pair.

        Records are taken before the descriptions are looked at: an op is described before its
        first record is logged, so every record written has its op described.
        """
        with self._flush_lock:
            tasks, points = self._log.take()
            writer = self._writer
            if writer is None:
                return
            ops = [op for op in list(self._ops.values()) if op.tensors is not None and not op.written]
            writer.lines("task_desc", [task_desc_line(op.name, 1, op.task_id, op.stream) for op in ops])
            writer.lines("graph_desc", [graph_desc_line(op.name, op.op_type, *op.tensors) for op in ops])
            for op in ops:
                op.written = True
            new_points = sorted(set(self._points) - self._points_written)
            writer.lines("point", [point_line(tag, self._points[tag]) for tag in new_points])
            self._points_written.update(new_points)
            host_steps = self._host_steps[self._host_steps_written :]
            for k, host_step in enumerate(host_steps, start=self._host_steps_written):
                writer.clock_sync(iteration=k, host_step=host_step)
            self._host_steps_written += len(host_steps)
            if len(tasks):
                writer.task_pairs(*tasks.T)
            if len(points):
                writer.trace_points(*points.T)
            self._sync_pair()

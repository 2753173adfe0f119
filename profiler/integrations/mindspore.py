"""MindSpore integration: `Model.train(..., callbacks=[ProfviewCallback()])`.

    from profiler.integrations.mindspore import ProfviewCallback
    model.train(epochs, dataset, callbacks=[ProfviewCallback("./profiler_data")])   # analyses at the end

What is recorded (docs/integrations.md, "MindSpore"):

- one profiler step per callback step (`on_train_step_begin` .. `on_train_step_end`: one batch;
  in sink mode on Ascend / GPU one sink of `sink_size` batches);
- fp start at `on_train_step_begin`, bp end at `on_train_step_end`: the network call between them
  (forward, backward and the optimizer: one graph) is forward + backward;
- `data` phase: the fetch of the next batch from the dataset iterator (non-sink mode, which the
  CPU backend always uses); a step ends when the next fetch begins, so the callbacks that run
  after its network call (loss monitor, checkpoints) are its tail; the fetch that finds the epoch
  exhausted, evaluation during training and the epoch callbacks belong to the tail of the epoch's
  last step;
- sink mode: the batches wait in the device queue, not on the host; its occupancy
  (`get_mbuf_queue_size`, Ascend) is a `device_queue_size` counter at each step begin;
- `epoch_begin` / `epoch_end` instants;
- `mindspore_profiler=True`: MindSpore's own profiler runs for the training and its op tables
  join the report (profiler.capture.mindspore).

The dataset iterator is found among MindSpore's live iterators (its `ITERATORS_LIST`) and its
`__next__` timed for the training; the step loop calls it explicitly (`_DatasetIterNormal`). When
it is not found (another MindSpore version), steps still end at the next step begin and the data
wait is not measured (a warning says so).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Optional

try:
    import mindspore
    from mindspore.train import Callback
except ImportError as exc:  # pragma: no cover - exercised only without MindSpore
    from profiler.integrations._common import missing_framework

    raise missing_framework("profiler.integrations.mindspore", "mindspore", "mindspore") from exc

from profiler import Profiler, ProfilerUsageWarning
from profiler.capture.mindspore import MindSporeCapture
from profiler.integrations._common import SpanStack, end_recording

__all__ = ["ProfviewCallback"]


class ProfviewCallback(Callback):
    """Profile `mindspore.train.Model.train` with profview.

    Args:
        output_path: where the raw store and the analysed outputs go (a `Profiler` argument).
        mindspore_profiler: True: also run MindSpore's own profiler for the training and merge its
            op tables into the report (its files go beside the raw store); a directory: your own
            MindSpore profiler writes there, merged when the run is analysed; False: neither.
        analyse: call `profiler.analyse()` at the end of training and print where the outputs went.
        verbose: print those lines (they are also in `self.summary`).
        **profiler_kwargs: passed on to `Profiler(...)`: `schedule`, `host_counters`, `advisor_thresholds`, ...

    After training, `self.profiler` is the Profiler, `self.outputs` the files analyse() wrote.
    """

    def __init__(
        self,
        output_path: str | os.PathLike = "./profiler_data",
        *,
        mindspore_profiler: bool | str | os.PathLike = False,
        analyse: bool = True,
        verbose: bool = True,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__()
        self.output_path = output_path
        self.mindspore_profiler = mindspore_profiler
        self.analyse = analyse
        self.verbose = verbose
        self.profiler_kwargs = dict(profiler_kwargs)
        self.profiler: Optional[Profiler] = None
        self.outputs: list = []
        self.summary: list[str] = []
        self._spans = SpanStack()
        self._restore: Optional[Callable[[], None]] = None  # puts the dataset iterator back
        self._step_pending = False  # a step's network call ended; profiler.step() not called yet
        self._epoch_steps = 0  # steps ended in this epoch
        self._fetches_per_epoch = 0  # batches the iterator gives an epoch (0: unknown)
        self._queue: Any = None  # sink mode: False once the device queue cannot be read
        self._training = False  # between on_train_begin and on_train_end

    # ---- MindSpore's callback hooks --------------------------------------------------------

    def on_train_begin(self, run_context: Any) -> None:
        cb = run_context.original_args()
        sink = bool(cb.get("dataset_sink_mode", False))
        run_profiler = self.mindspore_profiler is True
        source = MindSporeCapture(
            run_profiler=run_profiler,
            profiler_dir=None if isinstance(self.mindspore_profiler, bool) else self.mindspore_profiler,
            dataset_sink_mode=sink,
            sink_size=int(cb.get("sink_size", -1) or -1),
            mode="graph" if mindspore.get_context("mode") == mindspore.GRAPH_MODE else "pynative",
            device_target=str(mindspore.get_context("device_target")),
        )
        self._spans = SpanStack()
        self._step_pending, self._epoch_steps, self._queue = False, 0, None
        self.profiler = Profiler(output_path=self.output_path, sources=[source], **self.profiler_kwargs)
        self._training = True
        if not sink:
            dataset = cb.get("train_dataset", None)
            self._fetches_per_epoch = int(dataset.get_dataset_size()) if dataset is not None else 0
            self._restore = _time_fetches(dataset, self._before_fetch, self._after_fetch)
            source.details["data_wait"] = "dataset iterator" if self._restore is not None else "not measured"
            if self._restore is None:
                warnings.warn(
                    "profview: MindSpore's dataset iterator was not found, so the data wait is not measured "
                    "(steps are recorded)",
                    ProfilerUsageWarning,
                    stacklevel=2,
                )
        else:
            source.details["data_wait"] = "device queue"

    def on_train_epoch_begin(self, run_context: Any) -> None:
        if self._live():
            self._epoch_steps = 0
            self.profiler.instant("epoch_begin")

    def on_train_step_begin(self, run_context: Any) -> None:
        if not self._live():
            return
        self._spans.close("data")
        self._end_step()  # sink mode, or no timed iterator: the step ends here
        cb = run_context.original_args()
        if cb.get("dataset_sink_mode", False):
            self._read_queue(cb.get("dataset_helper", None))
        self.profiler.mark("fp_start")

    def on_train_step_end(self, run_context: Any) -> None:
        if not self._live():
            return
        self.profiler.mark("bp_end")
        self._step_pending = True
        self._epoch_steps += 1

    def on_train_epoch_end(self, run_context: Any) -> None:
        if self._live():
            self.profiler.instant("epoch_end")

    def on_train_end(self, run_context: Any) -> None:
        if not self._live():
            return
        profiler, self._training = self.profiler, False
        self._put_back()
        self._end_step()
        self._spans.close_all()
        self.outputs, self.summary = end_recording(profiler, self.analyse, self.verbose)

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        """Model.train leaves the callbacks' context on an exception: the iterator is put back, the step in
        progress ends if its network call did, and recording stops, so the raw store is complete
        (`profview analyse DIR` analyses the crashed run). A normal exit does nothing: Model.fit also
        enters and leaves the callbacks for each evaluation during training."""
        if exc_type is None or not self._training:
            return
        self._put_back()
        self._training = False
        self._spans.close_all()
        self._end_step()  # a step whose network call ended is a step; its tail ends here
        self.profiler.stop()

    # ---- the data wait ---------------------------------------------------------------------

    def _before_fetch(self) -> None:
        """The loop asks for the next batch: the step before ends, and the fetch is its successor's data wait;
        except the fetch that finds the epoch exhausted, which stays in the tail of the epoch's last step."""
        if self._fetches_per_epoch and self._epoch_steps >= self._fetches_per_epoch:
            return
        self._end_step()
        self._spans.open("data", self.profiler.phase("data"))

    def _after_fetch(self) -> None:
        self._spans.close("data")

    def _read_queue(self, helper: Any) -> None:
        """Sink mode: the device queue's occupancy as a counter (Ascend's mbuf queue; other targets give none)."""
        if helper is None or self._queue is False:
            return
        try:
            size = helper.get_mbuf_queue_size()
        except Exception:  # not supported on this target: stop asking
            self._queue = False
            return
        self.profiler.counter("device_queue_size", float(size))

    # ---- helpers ---------------------------------------------------------------------------

    def _end_step(self) -> None:
        if self._step_pending:
            self._step_pending = False
            self.profiler.step()

    def _put_back(self) -> None:
        restore, self._restore = self._restore, None
        if restore is not None:
            restore()

    def _live(self) -> bool:
        return self._training


def _time_fetches(dataset: Any, before: Callable[[], None], after: Callable[[], None]) -> Optional[Callable[[], None]]:
    """Wrap the `__next__` of the live iterator Model.train made over `dataset` with `before` / `after`;
    returns the function that puts it back, or None when no such iterator is found."""
    try:
        from mindspore.dataset.engine.iterators import ITERATORS_LIST
    except ImportError:
        return None
    iterators = [
        it
        for ref in ITERATORS_LIST
        if (it := ref()) is not None
        and getattr(it, "_Iterator__ori_dataset", None) is dataset
        and getattr(it, "_runtime_context", None)
    ]
    if dataset is None or not iterators:
        return None
    iterator = iterators[-1]  # the newest: Model.train creates it just before on_train_begin
    original = iterator.__next__

    def timed_next():
        before()
        try:
            return original()
        finally:
            after()

    iterator.__next__ = timed_next

    def restore() -> None:
        iterator.__dict__.pop("__next__", None)

    return restore

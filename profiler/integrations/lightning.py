"""PyTorch Lightning integration: `Trainer(profiler=ProfviewProfiler())` or `callbacks=[ProfviewCallback()]`.

    from profiler.integrations.lightning import ProfviewCallback, ProfviewProfiler
    trainer = lightning.Trainer(..., profiler=ProfviewProfiler("./profiler_data"))    # Lightning's profiler slot
    trainer = lightning.Trainer(..., callbacks=[ProfviewCallback("./profiler_data")])  # keeps your own profiler

Lightning times its own work by calling `trainer.profiler.start(action)` / `stop(action)` around it
(that is all its profiler interface is). Both entry points read those actions and record, from the
first training epoch to `on_train_end` (docs/integrations.md):

| Lightning action | profview |
|---|---|
| `[_TrainingEpochLoop].train_dataloader_next` (and the epoch's `iter()` before the first one) | \
`data` phase (the data wait) |
| `[Strategy]<S>.training_step` (up to the backward pass) | `forward` phase (fp start) |
| from the first `on_before_backward` hook to the first `on_after_backward` hook | `backward` phase (bp end) |
| from the first `on_before_optimizer_step` to the end of `[LightningModule]<M>.optimizer_step` \
(manual optimization: `optimizer_step`) | `optimizer` phase (tail) |
| validation inside fit: `on_validation_model_zero_grad` / `on_validation_model_eval` / \
`on_validation_start` up to the first `on_validation_end` hook | `evaluate` span |
| `save_checkpoint` (`Trainer.save_checkpoint`, which ModelCheckpoint calls) | `save_checkpoint` span |

One profiler step per optimizer step (`accumulate_grad_batches` micro-batches are one step): a
step ends when the loop asks for the next batch after an optimizer step (or when the next epoch
or `on_train_end` begins), so validation and checkpoint saving that follow an update are in its
tail, and the fetch of the next batch is the next step's data wait.

`ProfviewCallback` records the same by putting itself in front of `trainer.profiler` for the fit
(every action is passed on to the profiler you configured, whose summary is unchanged) and
putting it back at teardown.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

try:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger
    from lightning.pytorch.profilers import Profiler as LightningProfiler
except ImportError:
    try:  # the standalone package, same API
        from pytorch_lightning.callbacks import Callback
        from pytorch_lightning.loggers import MLFlowLogger, TensorBoardLogger
        from pytorch_lightning.profilers import Profiler as LightningProfiler
    except ImportError as exc:  # pragma: no cover - exercised only without Lightning
        from profiler.integrations._common import missing_framework

        raise missing_framework("profiler.integrations.lightning", "lightning", "lightning") from exc

from profiler import Profiler, ProfilerUsageWarning
from profiler.integrations._common import SpanStack, summary_lines
from profiler.integrations.trackers.streaming import LiveTrackers, mlflow_sink, tensorboard_sink

__all__ = ["ProfviewCallback", "ProfviewProfiler"]


# what a Lightning action is to the recording (see the module's documentation)
(
    _FETCH,
    _FORWARD,
    _BACKWARD,
    _AFTER_BACKWARD,
    _OPTIMIZER_HOOK,
    _OPTIMIZER_STEP,
    _MANUAL_STEP,
    _SAVE,
    _VALIDATION_START,
    _VALIDATION_END,
    _TRAIN_END,
    _BATCH_END,
) = range(12)
_OTHER = (-1,)


def _classify(action: str) -> tuple[int]:
    """The kind of a Lightning profiler action (classified once per distinct name, then cached)."""
    if action == "run_training_epoch" or action.endswith(".train_dataloader_next"):
        return (_FETCH,)
    if action.startswith("[Strategy]") and action.endswith(".training_step"):
        return (_FORWARD,)
    if action.endswith(".on_before_backward"):
        return (_BACKWARD,)
    if action.endswith(".on_after_backward"):
        return (_AFTER_BACKWARD,)
    if action.endswith(".on_before_optimizer_step"):
        return (_OPTIMIZER_HOOK,)
    if action.startswith("[LightningModule]") and action.endswith(".optimizer_step"):
        return (_OPTIMIZER_STEP,)
    if action == "optimizer_step":  # manual optimization
        return (_MANUAL_STEP,)
    if action == "save_checkpoint":
        return (_SAVE,)
    if action.endswith((".on_validation_model_zero_grad", ".on_validation_model_eval", ".on_validation_start")):
        return (_VALIDATION_START,)
    if action.endswith(".on_validation_end"):
        return (_VALIDATION_END,)
    if action.endswith(".on_train_end"):
        return (_TRAIN_END,)
    if action.startswith("[LightningModule]") and action.endswith(".on_train_batch_end"):
        return (_BATCH_END,)
    return _OTHER


class _Recording:
    """Turns Lightning's profiler actions into a profview recording (shared by both entry points)."""

    def __init__(self, output_path: str | os.PathLike, ops: bool, profiler_kwargs: dict[str, Any]) -> None:
        self.output_path = output_path
        self.ops = ops
        self.profiler_kwargs = dict(profiler_kwargs)
        self.profiler: Optional[Profiler] = None
        self.live = False  # from the first training epoch to on_train_end
        self.finished = False  # recorded and stopped, not analysed yet
        self._spans = SpanStack()
        self._stepped = False  # an optimizer step ran since the last profiler step
        self._kinds: dict[str, tuple[int]] = {}  # action name -> _classify(action)

    # ---- lifecycle -------------------------------------------------------------------------

    def begin(self) -> None:
        kw = dict(self.profiler_kwargs)
        if self.ops:
            kw.setdefault("framework", "torch")  # op capture through torch.profiler, no hooks needed
        self.profiler = Profiler(output_path=self.output_path, **kw)
        self._spans = SpanStack()
        self._stepped = False
        self.live, self.finished = True, False

    def end(self) -> None:
        """End the last step and stop recording (on_train_end, an exception, or teardown)."""
        if not self.live:
            return
        self._end_step()
        self._spans.close_all()
        self.live = False
        self.profiler.stop()
        self.finished = True

    def analyse(self) -> list[str]:
        """Analyse a finished recording once; the lines saying where the outputs went."""
        if not self.finished:
            return []
        self.finished = False
        outputs = self.profiler.analyse(quiet=True)
        return summary_lines(self.profiler, outputs) if outputs else []

    # ---- actions ---------------------------------------------------------------------------

    def kind_of(self, action: str):
        """The kind of a Lightning profiler action (classified once per action name); None when it is
        not one profview follows."""
        what = self._kinds.get(action)
        if what is None:
            what = self._kinds[action] = _classify(action)
        return None if what is _OTHER else what[0]

    def start(self, action: str) -> None:
        if not self.live:
            if action != "run_training_epoch" or self.finished:  # only the fit loop runs training epochs
                return
            self.begin()
        kind = self.kind_of(action)
        if kind is None:
            return
        if kind == _FETCH:
            self._end_step()
            self._open("data", "phase")
        elif kind == _FORWARD:
            self._open("forward", "phase")
        elif kind == _BACKWARD:
            self._spans.close("forward")  # manual optimization: backward inside training_step
            self._open("backward", "phase")
        elif kind == _AFTER_BACKWARD:
            self._spans.close("backward")
        elif kind == _OPTIMIZER_HOOK or kind == _MANUAL_STEP:
            self._open("optimizer", "phase")
        elif kind == _SAVE:
            self._open("save_checkpoint", "span")
        elif kind == _VALIDATION_START:
            self._open("evaluate", "span")
        elif kind == _VALIDATION_END:
            self._spans.close("evaluate")
        elif kind == _TRAIN_END:
            self.end()

    def stop(self, action: str) -> None:
        if not self.live:
            return
        kind = self.kind_of(action)
        if kind is None:
            return
        if kind == _FETCH:
            self._spans.close("data")
        elif kind == _FORWARD:
            self._spans.close("forward")
        elif kind == _OPTIMIZER_STEP or kind == _MANUAL_STEP:
            self._spans.close("optimizer")
            self._stepped = True
        elif kind == _SAVE:
            self._spans.close("save_checkpoint")

    def _open(self, name: str, kind: str) -> None:
        if not self._spans.is_open(name):
            self._spans.open(name, self.profiler.phase(name) if kind == "phase" else self.profiler.span(name))

    def _end_step(self) -> None:
        if self._stepped:
            self._spans.close_all()
            self.profiler.step()
            self._stepped = False


def _tracker_sinks(loggers: list) -> list:
    """Sinks into the runs of the Trainer's TensorBoard and MLflow loggers (their other loggers are not trackers
    profview writes to)."""
    sinks = []
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            sinks.append(tensorboard_sink(logger.log_dir))
        elif isinstance(logger, MLFlowLogger):
            sinks.append(mlflow_sink(logger.experiment.tracking_uri, logger.run_id))
    return [s for s in sinks if s is not None]


class _TrackerLog:
    """The `log_to_trackers` option of both entry points: the recording's steps into the Trainer's
    TensorBoard / MLflow loggers' runs every `log_every_n_steps` optimizer steps, then the verdict
    and top findings after the analysis (profiler.integrations.trackers.streaming)."""

    def __init__(self) -> None:
        self.trackers: Optional[LiveTrackers] = None
        self._logged_at = -1  # the trainer's global_step at the last update

    def open(self, trainer: Any) -> None:
        if trainer.is_global_zero:  # loggers log on rank 0
            self.trackers = LiveTrackers(_tracker_sinks(trainer.loggers))
            self._logged_at = -1

    def batch_end(self, trainer: Any, profiler: Optional[Profiler]) -> None:
        step = trainer.global_step
        if (
            self.trackers is not None
            and profiler is not None
            and step != self._logged_at
            and step % max(trainer.log_every_n_steps, 1) == 0
        ):
            self._logged_at = step
            self.trackers.update(profiler)

    def close(self, profiler: Optional[Profiler], analysed: bool) -> None:
        if self.trackers is not None:
            trackers, self.trackers = self.trackers, None
            trackers.finish(profiler, analysed)


class ProfviewProfiler(LightningProfiler):
    """A Lightning profiler that records with profview: `Trainer(profiler=ProfviewProfiler())`.

    Args:
        output_path: where the raw store and the analysed outputs go.
        ops: also capture per-operator timings through torch.profiler (`Profiler(framework="torch")`,
            on `ops_schedule`, else `schedule`); off by default.
        log_to_trackers: also log the per-step phases (every `log_every_n_steps` optimizer steps),
            the verdict and the top findings (at the end) into the Trainer's TensorBoard and MLflow
            loggers' runs, as `ProfviewCallback(log_to_trackers=True)` does; docs/integrations.md.
        **profiler_kwargs: passed on to `profiler.Profiler(...)` (`schedule`, `ops_schedule`,
            `host_counters`, `advisor_thresholds`, ...).

    Records `Trainer.fit` only (from its first training epoch to `on_train_end`); `summary()`
    (which Lightning logs at the end of fit) analyses the recording and says where the outputs
    are. `self.profiler` is the profview Profiler, `self.lines` what summary() reported.
    """

    def __init__(
        self,
        output_path: str | os.PathLike = "./profiler_data",
        *,
        ops: bool = False,
        log_to_trackers: bool = False,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath=None, filename=None)
        self._recording = _Recording(output_path, ops, profiler_kwargs)
        self.log_to_trackers = log_to_trackers
        self._log = _TrackerLog()
        self.lines: list[str] = []

    @property
    def profiler(self) -> Optional[Profiler]:
        return self._recording.profiler

    def start(self, action_name: str) -> None:
        began = not self._recording.live
        self._recording.start(action_name)
        if began and self._recording.live and self.log_to_trackers:
            trainer = self._trainer()
            if trainer is not None:
                self._log.open(trainer)
            else:
                warnings.warn(
                    "log_to_trackers: the Trainer running ProfviewProfiler was not found (it sets the "
                    "module on its profiler); nothing is logged",
                    ProfilerUsageWarning,
                    stacklevel=2,
                )

    def stop(self, action_name: str) -> None:
        self._recording.stop(action_name)
        if self._log.trackers is not None and self._recording.kind_of(action_name) == _BATCH_END:
            self._log.batch_end(self._trainer(), self.profiler)

    def summary(self) -> str:
        self._recording.end()
        lines = self._recording.analyse()
        if lines:
            self.lines = lines
        self._log.close(self.profiler, bool(lines))
        return os.linesep.join(lines)

    def _trainer(self) -> Any:
        """The Trainer running this profiler (through the module it set on it), else None."""
        try:
            return self._lightning_module.trainer
        except (AttributeError, ReferenceError, RuntimeError):
            return None


class _Chained(LightningProfiler):
    """The profiler ProfviewCallback puts in front of `trainer.profiler`: profview records every
    action, then the original profiler gets it (its own timings and summary are unchanged)."""

    def __init__(self, recording: _Recording, inner: LightningProfiler) -> None:
        super().__init__(dirpath=inner.dirpath, filename=inner.filename)
        self._recording, self._inner = recording, inner

    def start(self, action_name: str) -> None:
        self._recording.start(action_name)
        self._inner.start(action_name)

    def stop(self, action_name: str) -> None:
        self._inner.stop(action_name)
        self._recording.stop(action_name)

    def summary(self) -> str:
        return self._inner.summary()

    def describe(self) -> None:
        self._inner.describe()

    def setup(self, stage: str, local_rank: Optional[int] = None, log_dir: Optional[str] = None) -> None:
        self._inner.setup(stage, local_rank, log_dir)

    def teardown(self, stage: Optional[str]) -> None:
        self._inner.teardown(stage)

    def __del__(self) -> None:  # the base class tears down on deletion; the inner profiler is not ours
        pass

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


class ProfviewCallback(Callback):
    """Profile `lightning.Trainer.fit` with profview, keeping whatever `Trainer(profiler=...)` you use.

    Args:
        output_path, ops, **profiler_kwargs: as for `ProfviewProfiler`.
        analyse: analyse at the end of fit (teardown) and print where the outputs went.
        verbose: print those lines (they are also in `self.lines`).
        log_to_trackers: also log the per-step phases (every `log_every_n_steps` optimizer steps),
            the verdict and the top findings (at the end) into the Trainer's TensorBoard and MLflow
            loggers' runs; docs/integrations.md.

    Records the same as `ProfviewProfiler` (see the module's documentation): for the fit, it
    puts itself in front of `trainer.profiler` and passes every action on to it.
    """

    def __init__(
        self,
        output_path: str | os.PathLike = "./profiler_data",
        *,
        ops: bool = False,
        analyse: bool = True,
        verbose: bool = True,
        log_to_trackers: bool = False,
        **profiler_kwargs: Any,
    ) -> None:
        self._recording = _Recording(output_path, ops, profiler_kwargs)
        self.analyse = analyse
        self.verbose = verbose
        self.log_to_trackers = log_to_trackers
        self.lines: list[str] = []
        self._installed: Optional[_Chained] = None
        self._log = _TrackerLog()

    @property
    def profiler(self) -> Optional[Profiler]:
        return self._recording.profiler

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self._installed is not None:
            return
        if isinstance(trainer.profiler, (ProfviewProfiler, _Chained)):
            warnings.warn(
                "ProfviewCallback is not recording: the Trainer's profiler already records with "
                "profview (use one of ProfviewProfiler and ProfviewCallback)",
                ProfilerUsageWarning,
                stacklevel=2,
            )
            return
        self._installed = _Chained(self._recording, trainer.profiler)
        trainer.profiler = self._installed

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.log_to_trackers and self._installed is not None:
            self._log.open(trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log.batch_end(trainer, self.profiler)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._recording.end()  # the raw store is complete; `profview analyse DIR` analyses it
        self._uninstall(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        self._uninstall(trainer)
        self._recording.end()
        lines = self._recording.analyse() if self.analyse else []
        if lines:
            self.lines = lines
            if self.verbose:
                for line in lines:
                    print(line, flush=True)
        self._log.close(self.profiler, bool(lines))

    def _uninstall(self, trainer: Any) -> None:
        if self._installed is not None:
            if trainer.profiler is self._installed:
                trainer.profiler = self._installed._inner
            self._installed = None

"""Hugging Face `Trainer` integration: `Trainer(..., callbacks=[ProfviewCallback()])`.

    from profiler.integrations.transformers import ProfviewCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[ProfviewCallback("./profiler_data")])
    trainer.train()          # records the step trace; analyses at the end and prints where the outputs are

What is recorded (docs/integrations.md):

- one profiler step per **optimizer step** (gradient accumulation: the micro-batches of an update
  are one step), ending when the update's own follow-up work (logging, evaluation, checkpoint
  saving) is done, so a step's tail holds its optimizer, logging, evaluation and saving;
- `data` phase: from the end of the previous step to `on_step_begin`, i.e. the time the Trainer
  spends fetching the update's batches from its dataloader (`get_batch_samples`);
- fp start / bp end from `profiler.attach(model, optimizer)` hooks (first forward, end of the last
  backward pass; `optimizer.step()` is the `optimizer` phase), or with `attach=False` from the
  callbacks (`on_step_begin` / `on_pre_optimizer_step`);
- `log`, `evaluate` and `save_checkpoint` spans around the Trainer's logging, evaluation and
  checkpoint saving.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Optional

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised only without transformers
    from profiler.integrations._common import missing_framework

    raise missing_framework("profiler.integrations.transformers", "transformers", "transformers") from exc

from profiler import Profiler
from profiler.integrations._common import SpanStack, end_recording
from profiler.integrations.trackers.streaming import LiveTrackers, mlflow_sink, own_event_file_dir, tensorboard_sink

__all__ = ["ProfviewCallback"]

#: post-step work in the order `Trainer._maybe_log_save_evaluate` runs it, with the span it gets
POST_STEP = (("log", "log"), ("evaluate", "evaluate"), ("save", "save_checkpoint"))


class ProfviewCallback(TrainerCallback):
    """Profile a `transformers.Trainer` run with profview.

    Args:
        output_path: where the raw store and the analysed outputs go (a `Profiler` argument).
        ops: capture per-operator timings through torch.profiler (on `ops_schedule`, else
            `schedule`; off by default: with every step recorded torch keeps every op in memory).
        attach: take fp start / bp end / the optimizer phase from `profiler.attach()` hooks on the
            model and optimizer (precise); False: from the Trainer's callbacks only.
        analyse: call `profiler.analyse()` at the end of training and print where the outputs went.
        verbose: print those lines (they are also in `self.summary`).
        log_to_trackers: also log the per-step phases (at each of the Trainer's logging steps), the
            verdict and the top findings (at the end) into the trackers the Trainer reports to
            (`report_to`: TensorBoard's log directory, MLflow's active run); docs/integrations.md.
        **profiler_kwargs: passed on to `Profiler(...)`: `schedule`, `ops_schedule`,
            `record_shapes`, `host_counters`, `advisor_thresholds`, ...

    After training, `self.profiler` is the Profiler, `self.outputs` the files analyse() wrote.
    """

    def __init__(
        self,
        output_path: str | os.PathLike = "./profiler_data",
        *,
        ops: bool = False,
        attach: bool = True,
        analyse: bool = True,
        verbose: bool = True,
        log_to_trackers: bool = False,
        **profiler_kwargs: Any,
    ) -> None:
        self.output_path = output_path
        self.log_to_trackers = log_to_trackers
        self.ops = ops
        self.attach = attach
        self.analyse = analyse
        self.verbose = verbose
        self.profiler_kwargs = dict(profiler_kwargs)
        self.profiler: Optional[Profiler] = None
        self.outputs: list = []
        self.summary: list[str] = []
        self._reset()

    def _reset(self) -> None:
        self._spans = SpanStack()
        self._pending: list[str] = []  # post-step work still to come: log / evaluate / save
        self._step_pending = False  # an optimizer step finished; profiler.step() not called yet
        self._await_epoch_end = False  # on_epoch_end (and its own post-step work) comes before the next fetch
        self._final = False  # the last optimizer step of the run
        self._last_logged_step = -1
        self._save_if_best = False
        self._live = False  # between on_train_begin and on_train_end
        self._attach_to = None  # (model, optimizer) still to attach
        self._trackers: Optional[LiveTrackers] = None

    # ---- recording -------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._reset()
        kw = dict(self.profiler_kwargs)
        if self.ops and not self.attach:
            kw.setdefault("framework", "torch")  # op capture without hooks
        self.profiler = Profiler(output_path=self.output_path, **kw)
        self._live = True
        self._last_logged_step = state.global_step
        if self.log_to_trackers and state.is_world_process_zero:  # the Trainer reports from rank 0 only
            self._trackers = LiveTrackers(_tracker_sinks(args))
        self._attach_to = (model, optimizer) if self.attach and model is not None else None
        if getattr(args, "eval_on_start", False):
            # the evaluation before the first step: a span in step 0, and the hooks go on after it
            # (its forwards would otherwise mark step 0's fp start)
            self._pending = ["evaluate"]
            self._advance()
        else:
            self._attach_hooks()
            self._open_data()

    def on_step_begin(self, args, state, control, **kwargs):
        if not self._recording():
            return
        if self._pending or self._step_pending:  # normally done already: a hook that never came
            self._close_post_step()  # must not keep the step open
            self._end_step()
        self._spans.close("data")
        if not self.attach:
            self.profiler.mark("fp_start")

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._recording() and not self.attach:
            self.profiler.mark("bp_end")
            self._spans.open("optimizer", self.profiler.phase("optimizer"))

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._recording() and not self.attach:
            self._spans.close("optimizer")

    def on_step_end(self, args, state, control, **kwargs):
        if not self._recording():
            return
        self._spans.close("optimizer")
        self._step_pending = True
        self._final = bool(control.should_training_stop) or (
            state.max_steps > 0 and state.global_step >= state.max_steps
        )
        # the loop leaves the epoch after this update: on_epoch_end and its own log / evaluate /
        # save come before the next fetch, and belong to this step's tail
        self._await_epoch_end = (
            bool(control.should_epoch_stop) or bool(control.should_training_stop) or _whole(state.epoch)
        )
        self._plan(args, state, control)
        self._advance()

    def on_epoch_end(self, args, state, control, **kwargs):
        if not self._recording():
            return
        self._close_post_step()
        self._await_epoch_end = False
        # Normally the epoch's last step is still pending (on_step_end saw the epoch end coming) and
        # the epoch-end work joins its tail. Otherwise the step has ended and the data phase is open:
        # the epoch-end work then stays between the steps, outside the data phase.
        self._spans.close("data")
        self._plan(args, state, control)
        self._advance()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._recording() and self._pending[:1] == ["log"]:
            self._last_logged_step = state.global_step
            self._done("log")
            if self._trackers is not None:
                self._trackers.update(self.profiler)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not self._recording() or "evaluate" not in self._pending:
            return
        if self._save_if_best and "save" not in self._pending and _new_best(args, state, metrics):
            self._pending.append("save")  # save_strategy="best": the Trainer saves right after
        self._done("evaluate")

    def on_save(self, args, state, control, **kwargs):
        if self._recording() and "save" in self._pending:
            self._done("save")

    def on_train_end(self, args, state, control, **kwargs):
        if not self._recording():
            return
        profiler, self._live = self.profiler, False
        self._close_post_step()
        self._end_step()
        self._spans.close_all()
        self.outputs, self.summary = end_recording(profiler, self.analyse, self.verbose)
        if self._trackers is not None:
            self._trackers.finish(profiler, bool(self.outputs))

    # ---- post-step work: log -> evaluate -> save, then the step ends -------------------------

    def _plan(self, args, state, control) -> None:
        """The post-step work the Trainer is about to do, from the flags its callbacks just set."""
        todo = []
        if control.should_log and state.global_step > self._last_logged_step:
            todo.append("log")
        if control.should_evaluate:
            todo.append("evaluate")
        if control.should_save:
            todo.append("save")
        self._save_if_best = (
            control.should_evaluate
            and not control.should_save
            and str(getattr(args.save_strategy, "value", args.save_strategy)) == "best"
        )
        self._pending = todo

    def _advance(self) -> None:
        """Open the span of the next post-step item; with none left, end the step and expect the fetch."""
        if self._pending:
            head = self._pending[0]
            if not self._spans.is_open(head):
                self._spans.open(head, self.profiler.span(dict(POST_STEP)[head]))
            return
        if self._await_epoch_end:
            return
        self._finish_step()

    def _done(self, item: str) -> None:
        while self._pending:
            head = self._pending.pop(0)
            self._spans.close(head)
            if head == item:
                break
        self._advance()

    def _close_post_step(self) -> None:
        for item in self._pending:
            self._spans.close(item)
        self._pending = []

    def _finish_step(self) -> None:
        """The post-step work is done: end the step and time the fetch of the next update's batches."""
        self._close_post_step()
        self._await_epoch_end = False
        self._end_step()
        if not self._final:
            self._open_data()

    def _end_step(self) -> None:
        if self._step_pending:
            self.profiler.step()
            self._step_pending = False

    def _attach_hooks(self) -> None:
        if self._attach_to is not None:
            model, optimizer = self._attach_to
            self._attach_to = None
            self.profiler.attach(model, _torch_optimizer(optimizer), ops=self.ops, step_on_optimizer=False)

    def _open_data(self) -> None:
        self._attach_hooks()
        if not self._spans.is_open("data"):
            self._spans.open("data", self.profiler.phase("data"))

    def _recording(self) -> bool:
        return self._live


def _tracker_sinks(args) -> list:
    """Sinks into the trackers of `args.report_to` that profview writes to: TensorBoard (the directory
    where the Trainer's TensorBoardCallback has just opened its event file) and MLflow (the run its
    MLflowCallback has just started). Both callbacks run their on_train_begin before user callbacks."""
    report_to = set(args.report_to or [])
    sinks = []
    if "tensorboard" in report_to:
        env, runs = os.environ.get("TENSORBOARD_LOGGING_DIR"), Path(args.output_dir) / "runs"
        logdir = own_event_file_dir([Path(env)] if env else sorted(runs.iterdir()) if runs.is_dir() else [])
        sinks.append(tensorboard_sink(logdir) if logdir else None)
    if "mlflow" in report_to:
        import mlflow

        run = mlflow.active_run()
        sinks.append(mlflow_sink(mlflow.get_tracking_uri(), run.info.run_id) if run is not None else None)
    return [s for s in sinks if s is not None]


def _torch_optimizer(optimizer: Any) -> Any:
    """The torch optimizer whose step hooks fire: accelerate's AcceleratedOptimizer wraps it as `.optimizer`."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if inner is not None and hasattr(inner, "register_step_pre_hook") else optimizer


def _whole(epoch: Optional[float]) -> bool:
    """state.epoch = epoch + (micro-batch + 1) / micro-batches per epoch: whole after an epoch's last update."""
    return epoch is not None and epoch > 0 and math.isclose(epoch, round(epoch), rel_tol=0, abs_tol=1e-9)


def _new_best(args, state, metrics: Optional[dict]) -> bool:
    """Whether the Trainer will find `metrics` a new best (Trainer._determine_best_metric), for save_strategy="best"."""
    name = getattr(args, "metric_for_best_model", None)
    if not name or not metrics:
        return False
    name = name if name.startswith("eval_") else f"eval_{name}"
    value = metrics.get(name)
    if value is None:
        return False
    best = state.best_metric
    if args.greater_is_better:
        return best is None or value > best
    return best is None or value < best

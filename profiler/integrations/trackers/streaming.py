"""The trainer callbacks' `log_to_trackers` option: the step breakdown into the trainer's own trackers.

`LiveTrackers(sinks)` is driven by a callback: `update()` at the trainer's logging
moments logs the steps completed since the last update (the recording's recent window, analysed
by the same code as `profview watch`: postprocess.live.LiveRecording), and `finish()` after the
final analysis logs the steps not logged yet from step_trace_{rank}.csv, then the verdict and
top findings, and closes the sinks. A step is logged once; its figures are those analyse()
writes (the live window and the final analysis compute them from the same events).

The sinks come from the trainer's configuration (`tensorboard_sink` / `mlflow_sink` helpers here;
each integration knows where its trainer's trackers write).
"""

from __future__ import annotations

import glob
import os
import socket
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable, Optional

from profiler import Profiler, ProfilerUsageWarning
from profiler.errors import ProfviewError
from profiler.integrations.trackers.record import TrackerRecord, read_record, step_rows
from profiler.integrations.trackers.sink import TrackerSink

#: the live window: at most this many recent steps are analysed at an update
WINDOW_STEPS = 200


class LiveTrackers:
    """Logs one recording into `sinks` while it runs (see the module doc)."""

    def __init__(self, sinks: list[TrackerSink]) -> None:
        self.sinks = list(sinks)
        if not self.sinks:
            warnings.warn(
                "log_to_trackers: the trainer reports to no tracker profview writes to (TensorBoard, "
                "MLflow); nothing is logged",
                ProfilerUsageWarning,
                stacklevel=3,
            )
        self.logged: set[int] = set()
        self._live: Any = None

    def update(self, profiler: Profiler) -> None:
        """Log the steps of `profiler`'s recording completed since the last update (those still in the live window)."""
        if not self.sinks or not profiler.recording:
            return
        from profiler.postprocess.live import LiveRecording

        profiler.flush()
        if self._live is None:
            self._live = LiveRecording(
                profiler.output_path,
                window_steps=WINDOW_STEPS,
                rank=profiler.rank,
                analysis_duty=1.0,
                min_analysis_interval_s=0.0,
            )
        self._live.update(force=True)
        analysis = self._live.analysis(profiler.rank)
        if analysis is None:
            return
        self._log(step_rows(analysis.step_trace))  # device ops join the run at analysis: no device busy here

    def finish(self, profiler: Profiler, analysed: bool) -> None:
        """After `profiler`'s analysis (`analysed`: it wrote outputs): the steps not logged yet, then the
        verdict and findings; closes the sinks in any case."""
        if self._live is not None:
            self._live.close()
            self._live = None
        record = self._record(profiler) if analysed and self.sinks else None
        if record is not None:
            new = record.steps[~record.steps["step"].isin(self.logged)]
            self._each(lambda sink: sink.log_steps(new))
            self._each(lambda sink: sink.log_summary(record))
        self._each(lambda sink: sink.close())
        self.sinks = []

    def _record(self, profiler: Profiler) -> Optional[TrackerRecord]:
        try:
            return read_record(profiler.output_path, profiler.rank)
        except ProfviewError as exc:
            warnings.warn(f"profview logs no summary to the trackers: {exc}", ProfilerUsageWarning, stacklevel=3)
            return None

    def _log(self, rows) -> None:
        new = rows[~rows["step"].isin(self.logged)]
        if not len(new):
            return
        self._each(lambda sink: sink.log_steps(new))
        self.logged.update(int(s) for s in new["step"])

    def _each(self, call: Callable[[TrackerSink], None]) -> None:
        """`call` on every sink; a sink that fails (a tracker refusing a write, a full disk) is dropped with a
        warning: the training goes on, and the recording is not affected."""
        for sink in list(self.sinks):
            try:
                call(sink)
            except (ProfviewError, OSError) as exc:
                self.sinks.remove(sink)
                warnings.warn(f"profview stops logging to {sink.where}: {exc}", ProfilerUsageWarning, stacklevel=3)


def tensorboard_sink(logdir: str | Path) -> Optional[TrackerSink]:
    """A sink writing beside the trainer's TensorBoard event files in `logdir`; None (with a warning)
    when tensorboard cannot be imported."""
    try:
        from profiler.integrations.trackers.tensorboard import TensorBoardSink
    except ImportError as exc:
        warnings.warn(f"profview does not log to TensorBoard: {exc}", ProfilerUsageWarning, stacklevel=3)
        return None
    return TensorBoardSink(logdir)


def mlflow_sink(tracking_uri: str, run_id: str) -> Optional[TrackerSink]:
    """A sink writing into the trainer's MLflow run; None (with a warning) when it cannot."""
    try:
        from profiler.integrations.trackers.mlflow import MlflowSink

        return MlflowSink(tracking_uri, run_id=run_id)
    except (ImportError, ProfviewError) as exc:
        warnings.warn(f"profview does not log to MLflow run {run_id}: {exc}", ProfilerUsageWarning, stacklevel=3)
        return None


def own_event_file_dir(directories: Iterable[str | Path]) -> Optional[Path]:
    """The newest of `directories` holding an event file this process wrote (TensorBoard event files
    are named `events.out.tfevents.<time>.<host>.<pid>.<n>`); None when none does."""
    pattern = f"events.out.tfevents.*.{glob.escape(socket.gethostname())}.{os.getpid()}.*"
    found = [path for d in directories for path in Path(d).glob(pattern)]
    return max(found, key=lambda p: p.stat().st_mtime).parent if found else None

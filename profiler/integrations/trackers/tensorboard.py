"""TensorBoard: profview's record as scalars and text in an event file, through tensorboard's own writer.

Per-step metrics are scalars `profview/<column>` at global step = the profiler step; the verdict,
headline and top findings are text summaries (`profview/verdict`, `profview/headline`,
`profview/findings`, TensorBoard's Text tab) and the run-level figures scalars
(`profview/mean_steady_step_ms`, ...) at the last step. The event file goes into `logdir`, beside any
other event files there (TensorBoard shows a directory's files as one run).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

try:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.text.summary_v2 import text_pb
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError as exc:  # pragma: no cover - exercised only without tensorboard
    from profiler.integrations._common import missing_framework

    raise missing_framework("profiler.integrations.trackers.tensorboard", "tensorboard", "tensorboard") from exc

from profiler.integrations.trackers.record import PREFIX, TrackerRecord, finding_text

__all__ = ["TensorBoardSink"]

#: events the writer's queue holds before add_event waits for its thread (one event per step)
_QUEUE = 1 << 14


class TensorBoardSink:
    """Writes into a new event file in `logdir` (created when missing)."""

    def __init__(self, logdir: str | Path) -> None:
        self.logdir = Path(logdir)
        self.where = f"TensorBoard run {self.logdir}"
        # a queue that holds a whole update: the writer thread empties it while training goes on
        self._writer = EventFileWriter(str(self.logdir), max_queue_size=_QUEUE, filename_suffix=".profview")
        self._last_step = 0

    def log_steps(self, steps: pd.DataFrame) -> None:
        metrics = [c for c in steps.columns if c != "step"]
        now = time.time()
        for row in steps.itertuples(index=False):
            step = int(row.step)
            values = [  # a metric not measured in the step (NaN: a data wait op capture did not see) is not logged
                Summary.Value(tag=PREFIX + name, simple_value=value)
                for name in metrics
                if (value := float(getattr(row, name))) == value
            ]
            self._writer.add_event(Event(wall_time=now, step=step, summary=Summary(value=values)))
            self._last_step = max(self._last_step, step)

    def log_summary(self, record: TrackerRecord) -> None:
        now, step = time.time(), self._last_step
        texts: dict[str, Any] = {
            "verdict": record.verdict,
            "headline": record.headline,
            "findings": "\n\n".join(f"{i}. {finding_text(f)}" for i, f in enumerate(record.findings, start=1)),
        }
        for name, text in texts.items():
            if text:
                self._writer.add_event(Event(wall_time=now, step=step, summary=text_pb(PREFIX + name, text)))
        values = [Summary.Value(tag=PREFIX + name, simple_value=value) for name, value in record.summary.items()]
        if values:
            self._writer.add_event(Event(wall_time=now, step=step, summary=Summary(value=values)))

    def close(self) -> None:
        self._writer.close()

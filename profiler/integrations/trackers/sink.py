"""The contract of a tracker sink: one run of one tracker that receives steps, then a summary.

A sink is created for one destination (a TensorBoard log directory, an MLflow run) and receives
`log_steps` any number of times (the live option logs each window's new steps as it goes), then
`log_summary` once, then `close`. Each tracker has one sink class, registered in
`export.TRACKERS` under the name `profview export --to` takes.
"""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from profiler.integrations.trackers.record import TrackerRecord


class TrackerSink(Protocol):
    """One tracker run that profview writes into."""

    #: where the data went, for the line printed after an export ("TensorBoard run /x/rank0", ...)
    where: str

    def log_steps(self, steps: pd.DataFrame) -> None:
        """Per-step scalars: one row per step, a "step" column and one column per metric (ms)."""

    def log_summary(self, record: TrackerRecord) -> None:
        """The verdict, headline, top findings and run-level figures of `record`."""

    def close(self) -> None:
        """Write out everything pending; the sink is not used afterwards."""


def write_record(sink: TrackerSink, record: TrackerRecord) -> None:
    """All of `record` into `sink`, which is then closed."""
    try:
        sink.log_steps(record.steps)
        sink.log_summary(record)
    finally:
        sink.close()

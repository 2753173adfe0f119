"""data_queue_{rank}.csv: every queue probe sample, with its step, when the run probed queues."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from profiler.analysis.results import Analysis
from profiler.export.writers.base import CsvWriter
from profiler.formats.columns import DATA_QUEUE_COLUMNS
from profiler.kernels.intervals import assign_steps


def queue_table(a: Analysis) -> pd.DataFrame:
    q = a.run.queues
    return pd.DataFrame(
        {
            "queue": q["queue"],
            "time_ms": q["time_ns"] / 1e6,
            "event": q["event"],
            "size": q["size"],
            "capacity": q["capacity"],
            "wait_ms": q["wait_ns"] / 1e6,
            "step": assign_steps(q["time_ns"].to_numpy(), a.run.steps),
        },
        columns=DATA_QUEUE_COLUMNS,
    )


class DataQueue(CsvWriter):
    kind = "data_queue"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return queue_table(analysis) if len(analysis.run.queues) else None

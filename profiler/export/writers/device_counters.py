"""device_counters_{rank}.csv: every counter sample (host and device), when the run sampled any."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.memory import milliseconds
from profiler.analysis.results import Analysis
from profiler.export.writers.base import CsvWriter
from profiler.formats.columns import DEVICE_COUNTER_COLUMNS


def counter_table(a: Analysis) -> pd.DataFrame:
    """The run's counters with their times in ms: its own columns (no copy), the times made a chunk at a time."""
    c = a.run.counters
    return pd.DataFrame(
        {
            "source": c["source"],
            "device": c["device"],
            "metric": c["metric"],
            "time_ms": milliseconds(c["time_ns"].to_numpy(np.int64)),
            "value": c["value"],
        },
        columns=DEVICE_COUNTER_COLUMNS,
        copy=False,
    )


class DeviceCounters(CsvWriter):
    kind = "device_counters"
    na_rep = "nan"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return counter_table(analysis) if len(analysis.run.counters) else None

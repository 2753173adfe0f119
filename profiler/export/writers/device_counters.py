"""device_counters_{rank}.csv: every counter sample (host and device), when the run sampled any."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from profiler.analysis.results import Analysis
from profiler.export.writers.base import CsvWriter
from profiler.formats.columns import DEVICE_COUNTER_COLUMNS


def counter_table(a: Analysis) -> pd.DataFrame:
    c = a.run.counters
    return pd.DataFrame(
        {
            "source": c["source"],
            "device": c["device"],
            "metric": c["metric"],
            "time_ms": c["time_ns"] / 1e6,
            "value": c["value"],
        },
        columns=DEVICE_COUNTER_COLUMNS,
    )


class DeviceCounters(CsvWriter):
    kind = "device_counters"
    na_rep = "nan"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return counter_table(analysis) if len(analysis.run.counters) else None

"""step_trace_{rank}.csv: one row per step, its phases (docs/formats.md)."""

from __future__ import annotations

import pandas as pd

from profiler.analysis.results import Analysis
from profiler.export.writers.base import CsvWriter


class StepTrace(CsvWriter):
    kind = "step_trace"

    def table(self, analysis: Analysis) -> pd.DataFrame:
        return analysis.step_trace

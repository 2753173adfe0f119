"""op_type_{rank}.csv and op_detail_{rank}.csv: time per op type and per op, when the run has ops."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from profiler.analysis.results import Analysis
from profiler.export.writers.base import CsvWriter


class OpType(CsvWriter):
    kind = "op_type"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.op_type if len(analysis.run.ops) else None


class OpDetail(CsvWriter):
    kind = "op_detail"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.op_detail if len(analysis.run.ops) else None

"""op_type_{rank}.csv, op_detail_{rank}.csv, op_shapes_{rank}.csv and op_stacks_{rank}.csv: time per op type,
per op, per op and input shapes, per op and call stack, when the run has ops (and, for the last two,
recorded their shapes / their Python frames)."""

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


class OpShapes(CsvWriter):
    kind = "op_shapes"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.op_shapes if len(analysis.op_shapes) else None


class OpStacks(CsvWriter):
    kind = "op_stacks"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.op_stacks if len(analysis.op_stacks) else None

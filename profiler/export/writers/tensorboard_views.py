"""The TensorBoard plugin's views (docs/tensorboard.md), each written when the run has what it shows:
kernels_{rank}.csv (kernel view), step_activity_{rank}.csv (step breakdown), modules_{rank}.csv (module
view), memory_{rank}.csv, memory_events_{rank}.csv and op_memory_{rank}.csv (memory view), comm_split_{rank}.csv
comm_ops_{rank}.csv and comm_pieces_{rank}.csv (distributed view; the cluster files add the data transfer time)."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from profiler.analysis.memory import memory_curve
from profiler.analysis.results import Analysis
from profiler.export.writers.base import CsvWriter


class Kernels(CsvWriter):
    kind = "kernels"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.kernels if len(analysis.kernels) else None


class StepActivity(CsvWriter):
    kind = "step_activity"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.step_activity if len(analysis.step_activity) else None


class Modules(CsvWriter):
    kind = "modules"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.modules if len(analysis.modules) else None


class MemoryCurve(CsvWriter):
    kind = "memory"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return memory_curve(analysis.run.allocations) if len(analysis.run.allocations) else None


class MemoryEvents(CsvWriter):
    kind = "memory_events"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.memory_events if len(analysis.memory_events) else None


class OpMemory(CsvWriter):
    kind = "op_memory"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.op_memory if len(analysis.op_memory) else None


class CommSplit(CsvWriter):
    kind = "comm_split"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.comm_split if len(analysis.comm_split) else None


class CommOps(CsvWriter):
    kind = "comm_ops"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.comm_ops if len(analysis.comm_ops) else None


class CommPieces(CsvWriter):
    kind = "comm_pieces"

    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        return analysis.comm_pieces if len(analysis.comm_pieces) else None

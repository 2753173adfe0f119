"""kernels_{rank}.csv and step_activity_{rank}.csv: the TensorBoard plugin's kernel view and step breakdown
(docs/tensorboard.md), when the run has kernels / kernels tied to their launches."""

from __future__ import annotations

from typing import Optional

import pandas as pd

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

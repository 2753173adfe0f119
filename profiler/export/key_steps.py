"""The steps that matter in a run: its median step, its slowest step and its outlier steps, among the
steps the statistics use (warm-up left out) and by the report's outlier rule (advisor thresholds
as the run was recorded with). A timeline too large to open whole shows these (chrome_trace.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler.analysis.advisor import resolve_thresholds
from profiler.analysis.steps import analysed_steps, outlier_steps
from profiler.model import Run


@dataclass(frozen=True)
class KeySteps:
    """The median step (the lower middle one by time, the earliest on ties), the slowest step (the
    earliest on ties) and the outlier steps, slowest first; None / empty for a run without steps."""

    median: int | None = None
    slowest: int | None = None
    outliers: tuple[int, ...] = ()

    def in_priority(self) -> list[int]:
        """The distinct steps, median and slowest first, then the outliers slowest first."""
        ordered = [s for s in (self.median, self.slowest, *self.outliers) if s is not None]
        return list(dict.fromkeys(ordered))


def step_totals(steps: pd.DataFrame) -> pd.DataFrame:
    """`step` and `total_ms` of the run's steps (their start-to-end time)."""
    total = (steps["end_ns"].to_numpy(dtype=np.int64) - steps["start_ns"].to_numpy(dtype=np.int64)) / 1e6
    return pd.DataFrame({"step": steps["step"].to_numpy(dtype=np.int64), "total_ms": total})


def key_steps(run: Run) -> KeySteps:
    """The run's median, slowest and outlier steps."""
    return key_steps_of(step_totals(run.steps), run_thresholds(run))


def run_thresholds(run: Run) -> dict[str, float]:
    """The advisor thresholds the run was recorded with."""
    config = run.info.get("config") if isinstance(run.info.get("config"), dict) else {}
    return resolve_thresholds(config.get("advisor_thresholds"))


def key_steps_of(totals: pd.DataFrame, thresholds: dict[str, float]) -> KeySteps:
    """The median, slowest and outlier steps of `step`, `total_ms` rows (warm-up left out)."""
    steps, _ = analysed_steps(totals, int(thresholds["warmup_steps"]))
    if len(steps) == 0:
        return KeySteps()
    by_time = steps.sort_values(["total_ms", "step"], kind="stable")
    median = int(by_time["step"].iloc[(len(by_time) - 1) // 2])
    slowest = int(steps["step"].iloc[int(np.argmax(steps["total_ms"].to_numpy()))])
    slow = outlier_steps(steps, thresholds["outlier_min_pct"]).sort_values(
        ["total_ms", "step"], ascending=[False, True], kind="stable"
    )
    return KeySteps(median, slowest, tuple(int(s) for s in slow["step"]))

"""step_outliers where the data wait was measured in some steps only (analysis/findings/outliers.py): a slow step
without a measured wait keeps its excess (none of it taken out as the input rule's), one with a wait gives it up."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.advisor import DEFAULT_THRESHOLDS
from profiler.analysis.findings import outliers
from profiler.analysis.findings.base import Context, StepWindow


def steps_with(slow_wait: float) -> pd.DataFrame:
    """20 steps of 10 ms (a 2 ms gap); steps 5, 10, 15 take 40 ms (a 32 ms gap). The wait is measured in steps
    10-19 only (op capture's): 1 ms, and `slow_wait` ms in step 15."""
    n = 20
    gap = np.full(n, 2.0)
    gap[[5, 10, 15]] = 32.0
    wait = np.where(np.arange(n) >= 10, 1.0, np.nan)
    wait[15] = slow_wait
    return pd.DataFrame(
        {
            "step": np.arange(n),
            "iteration_gap_ms": gap,
            "fp_bp_ms": np.full(n, 7.0),
            "tail_ms": np.full(n, 1.0),
            "total_ms": gap + 8.0,
            "data_wait_ms": wait,
            "profiler_overhead_ms": np.zeros(n),
        }
    )


@pytest.mark.parametrize(
    "slow_wait, slow, excess",
    [
        (1.0, 3, 90.0 / 20),  # 30 ms above the 10 ms median each: step 5 (not measured) too, not left out
        (30.0, 2, 60.0 / 20),  # step 15's 40 ms are its wait: not an outlier (the input rule's), 5 and 10 are
    ],
)
def test_an_unmeasured_slow_step_keeps_its_excess(slow_wait, slow, excess) -> None:
    window = StepWindow(steps_with(slow_wait), 0, DEFAULT_THRESHOLDS["outlier_min_pct"])
    found = outliers.find(outliers.Needs(window), Context(0, "torch", DEFAULT_THRESHOLDS))
    assert len(found) == 1 and found[0].metrics["outliers"] == slow
    assert found[0].at_stake_ms == pytest.approx(excess)

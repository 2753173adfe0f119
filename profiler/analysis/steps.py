"""Steps: where they come from when a run's data has none, which the statistics use, which are outliers."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from profiler.errors import ProfilerUsageWarning, ProfviewError
from profiler.kernels.intervals import assign_steps
from profiler.model import STEP_COLUMNS, Run


def ensure_steps(run: Run) -> Run:
    """A run without any step() call is analysed as one step spanning the recording, with a warning."""
    if len(run.steps):
        return run
    times = np.concatenate([run.spans["start_ns"], run.spans["start_ns"] + run.spans["dur_ns"],
                            run.ops["start_ns"], run.ops["start_ns"] + run.ops["dur_ns"],
                            run.instants["time_ns"]]).astype(np.int64)
    if len(times) == 0:
        raise ProfviewError("nothing was recorded: no step, span or op (call profiler.step() at the end of "
                            "each iteration and mark phases with profiler.phase())")
    origin = run.info.get("data_origin", "profview")
    if origin == "profview":
        message = ("no profiler.step() call was recorded: the whole recording is analysed as one step "
                   "(call profiler.step() at the end of each iteration for a per-step breakdown)")
    else:
        message = (f"the {origin} capture has no step markers: it is analysed as one step "
                   f"spanning the whole capture")
    warnings.warn(message, ProfilerUsageWarning, stacklevel=3)
    run.info.setdefault("warnings", []).append(message)
    run.steps = pd.DataFrame({"step": [0], "start_ns": [times.min()], "end_ns": [times.max()],
                              "fp_start_ns": [-1], "bp_end_ns": [-1], "overhead_ns": [0]})[list(STEP_COLUMNS)]
    run.ops["step"] = assign_steps(run.ops["start_ns"].to_numpy(), run.steps)
    return run


def analysed_steps(steps: pd.DataFrame, warmup: int) -> tuple[pd.DataFrame, int]:
    """The steps the statistics use: without the first `warmup` ones when at least 3 steps remain."""
    warmup = max(int(warmup), 0)
    if len(steps) - warmup < 3:
        return steps, 0
    return steps.iloc[warmup:], warmup


def outlier_steps(steps: pd.DataFrame, min_pct: float) -> pd.DataFrame:
    """Steps above both Tukey's fence (Q3 + 1.5 IQR) and the median + `min_pct` %."""
    total = steps["total_ms"].to_numpy(dtype=np.float64)
    q1, median, q3 = np.percentile(total, [25, 50, 75])
    fence = max(q3 + 1.5 * (q3 - q1), median * (1 + min_pct / 100.0))
    return steps[total > fence]


def outlier_rule_text(min_pct: float) -> str:
    """The outlier rule in words, for every place that shows outlier steps."""
    return f"> median + {min_pct:g} % and Q3 + 1.5 IQR"

"""Does memory grow step after step? memory_growth: host RSS or device memory that grows steadily
across the analysed steps (a leak: references kept across steps), with when it reaches its limit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import MB, Context, Finding, Question, Rule, StepWindow, Threshold
from profiler.analysis.trend import BINS, MIN_SPAN_S, NOISE_RATIO, RISING_BINS, STRONG_GROWTH, sustained_growth
from profiler.kernels.intervals import in_windows
from profiler.kernels.nesting import positions_passing

THRESHOLDS = {
    "memory_growth_mb": Threshold(
        32.0,
        "growth of host RSS / device memory over the analysed steps (MB) that, when "
        "sustained (see memory_growth), makes a memory_growth finding",
    ),
    "memory_trend_s": Threshold(
        MIN_SPAN_S,
        "fewest seconds of analysed steps a memory trend is judged over; a shorter run is judged only when the "
        "counter grows by at least half of where it started",
    ),
}

FIX = {
    "torch": "something keeps references across steps: accumulate loss.item(), not loss (a tensor keeps its "
    "autograd graph), detach and move to the CPU what you keep for logging, clear lists of "
    "outputs; tracemalloc (host) or torch.cuda.memory._record_memory_history() (GPU) shows who allocates",
    "mindspore": "something keeps references across steps (outputs or losses kept in a list, a growing "
    "cache): keep scalars (asnumpy()) instead of tensors and clear what you keep for logging",
    "plain": "something keeps references across steps (a list or cache that only grows): keep only what you "
    "need, as plain numbers; tracemalloc shows who allocates",
}

#: memory counters watched for steady growth, and how each is named in a finding
MEMORY_METRICS = {"rss_bytes": "Host memory (RSS)", "mem_used_bytes": "Device memory"}
#: fewest steps (steady, without torch op capture) a memory trend is judged over
MEMORY_MIN_STEPS = 16


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    counters: Optional[pd.DataFrame]
    memory_limits: Mapping[str, float]  # "source|device" -> bytes
    buffering_steps: frozenset  # steps where torch.profiler held its events in memory


def find(data: Needs, ctx: Context) -> list[Finding]:
    """memory_growth: host RSS or device memory that grows for good across the analysed steps
    (profiler.analysis.trend)."""
    counters = data.counters
    steady = data.steps.steady
    steps = steady[~steady["step"].isin(data.buffering_steps)]  # not the profiler's own buffers
    if counters is None or not len(counters) or len(steps) < MEMORY_MIN_STEPS:
        return []
    lo = (steps["start_ms"] * 1e6).to_numpy()
    hi = ((steps["start_ms"] + steps["total_ms"]) * 1e6).to_numpy()
    watched = counters.iloc[_watched_rows(counters, lo, hi)]
    out = []
    for (source, device, metric), series in watched.groupby(["source", "device", "metric"], sort=True, observed=True):
        series = series.sort_values("time_ns", kind="stable")
        t, v = series["time_ns"].to_numpy(np.int64), series["value"].to_numpy(np.float64)
        trend = sustained_growth(t, v, ctx.thresholds["memory_growth_mb"] * MB, ctx.thresholds["memory_trend_s"])
        if trend is None:
            continue
        slope, grown_mb = trend.slope_per_s / 1e9, trend.grown / MB
        per_step_mb = slope * data.steps.mean_ms * 1e6 / MB
        limit = data.memory_limits.get(f"{source}|{device}")
        remaining_s = (limit - v[-1]) / (slope * 1e9) if limit else None
        if remaining_s is not None and remaining_s > 0:
            when = f": at this rate the {_bytes(limit)} limit is reached in {_duration(remaining_s)}"
            severity = "high" if remaining_s < 3600 else "medium" if remaining_s < 86400 else "low"
        else:
            when, severity = "", "medium"
        f = ctx.file("device_counters")
        out.append(
            Finding(
                kind="memory_growth",
                key=f"memory_growth:{device}:{metric}",
                at_stake_ms=0.0,
                at_stake_pct=0.0,
                title=f"{MEMORY_METRICS[metric]} on {device} grows {per_step_mb:.2f} MB per step{when}",
                evidence=(
                    f"{metric} {v[0] / MB:.0f} MB -> {v[-1] / MB:.0f} MB (+{grown_mb:.0f} MB) over "
                    f"{len(steps)} steps and {trend.span_s:.1f} s ({data.steps.note}, steps with torch op capture "
                    f"left out), rising throughout (Theil-Sen slope {trend.slope_per_s / MB:.2f} MB/s; the median of "
                    f"each 1/{BINS} of the span above the previous one's {trend.rising_bins} of {BINS - 1} times; "
                    f"spread around the trend {trend.spread / MB:.1f} MB) [{f}: {metric}]"
                ),
                threshold=(
                    f"growth of at least {ctx.thresholds['memory_growth_mb']:g} MB (memory_growth_mb) over "
                    f"at least {ctx.thresholds['memory_trend_s']:g} s (memory_trend_s; any span when it grows by "
                    f"{100 * STRONG_GROWTH:.0f} % of where it started) and {MEMORY_MIN_STEPS} "
                    f"steps, >= {NOISE_RATIO:g}x the spread around the trend, the median of each 1/{BINS} of the span "
                    f"above the previous one's >= {RISING_BINS} of {BINS - 1} times"
                ),
                suggestion=FIX[ctx.framework],
                files=[f],
                severity=severity,
                metrics={
                    "mb_per_step": per_step_mb,
                    "mb_per_s": slope * 1e9 / MB,
                    "grown_mb": grown_mb,
                    **({"seconds_to_limit": remaining_s} if remaining_s is not None and remaining_s > 0 else {}),
                },
            )
        )
    return out


def _watched_rows(counters: pd.DataFrame, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The positions of the counters' samples of MEMORY_METRICS inside the steps [lo, hi) (ns), found a chunk of
    rows at a time."""
    time, metric = counters["time_ns"].to_numpy(np.int64), counters["metric"]
    return positions_passing(
        len(counters), lambda at: metric.iloc[at].isin(list(MEMORY_METRICS)).to_numpy() & in_windows(time[at], lo, hi)
    )


def _bytes(n: float) -> str:
    return f"{n / (1 << 30):.1f} GB" if n >= 1 << 30 else f"{n / MB:.0f} MB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.0f} days"


QUESTION = Question(
    name="memory", page="counters", keys=("memory_growth",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

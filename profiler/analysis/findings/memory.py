"""Does memory grow step after step? memory_growth: host RSS or device memory that grows steadily
across the analysed steps (a leak: references kept across steps), with when it reaches its limit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import MB, Context, Finding, Question, Rule, StepWindow, Threshold

THRESHOLDS = {
    "memory_growth_mb": Threshold(32.0, "growth of host RSS / device memory over the analysed steps (MB) that, when "
                                        "steady, makes a memory_growth finding"),
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
#: fewest steps (steady, without torch op capture) a memory trend is judged on
MEMORY_MIN_STEPS = 8


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    counters: Optional[pd.DataFrame]
    memory_limits: Mapping[str, float]          # "source|device" -> bytes
    buffering_steps: frozenset                  # steps where torch.profiler held its events in memory


def theil_sen_slope(t: np.ndarray, v: np.ndarray) -> float:
    """Median of the pairwise slopes: a trend that one spike or a GC drop does not move."""
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt > 0
    return float(np.median((v[j] - v[i])[ok] / dt[ok])) if ok.any() else 0.0


def rank_correlation(t: np.ndarray, v: np.ndarray) -> float:
    """Spearman's rank correlation of v with t (1: v only ever rises)."""
    rt, rv = np.argsort(np.argsort(t)), pd.Series(v).rank().to_numpy()
    if rv.std() == 0:
        return 0.0
    return float(np.corrcoef(rt, rv)[0, 1])


def steady_growth(t_ns: np.ndarray, values: np.ndarray, max_points: int = 256) -> Optional[tuple[float, float]]:
    """(slope per ns, rank correlation) when `values` grow steadily over the window: a rising trend in
    rank order, still rising in the second half (not an allocator warm-up that has levelled off)."""
    if len(t_ns) < 8:
        return None
    keep = np.unique(np.linspace(0, len(t_ns) - 1, min(len(t_ns), max_points)).astype(np.int64))
    t, v = t_ns[keep].astype(np.float64), values[keep].astype(np.float64)
    slope, corr = theil_sen_slope(t, v), rank_correlation(t, v)
    half = len(t) // 2
    if slope <= 0 or corr < 0.8 or theil_sen_slope(t[half:], v[half:]) < 0.5 * slope:
        return None
    return slope, corr


def find(data: Needs, ctx: Context) -> list[Finding]:
    """memory_growth: host RSS or device memory that grows steadily across the analysed steps."""
    counters = data.counters
    steady = data.steps.steady
    steps = steady[~steady["step"].isin(data.buffering_steps)]    # not the profiler's own buffers
    if counters is None or not len(counters) or len(steps) < MEMORY_MIN_STEPS:
        return []
    lo = (steps["start_ms"] * 1e6).to_numpy()
    hi = ((steps["start_ms"] + steps["total_ms"]) * 1e6).to_numpy()
    t_all = counters["time_ns"].to_numpy(np.int64)
    slot = np.searchsorted(lo, t_all, side="right") - 1
    inside = (slot >= 0) & (t_all < hi[np.clip(slot, 0, None)])
    watched = counters[counters["metric"].isin(list(MEMORY_METRICS)).to_numpy() & inside]
    out = []
    for (source, device, metric), series in watched.groupby(["source", "device", "metric"], sort=True, observed=True):
        series = series.sort_values("time_ns", kind="stable")
        t, v = series["time_ns"].to_numpy(np.int64), series["value"].to_numpy(np.float64)
        trend = steady_growth(t, v)
        if trend is None:
            continue
        slope, corr = trend
        grown_mb = slope * (t[-1] - t[0]) / MB
        if grown_mb < ctx.thresholds["memory_growth_mb"]:
            continue
        per_step_mb = slope * data.steps.mean_ms * 1e6 / MB
        limit = data.memory_limits.get(f"{source}|{device}")
        remaining_s = (limit - v[-1]) / (slope * 1e9) if limit else None
        if remaining_s is not None and remaining_s > 0:
            when = f": at this rate the {_bytes(limit)} limit is reached in {_duration(remaining_s)}"
            severity = "high" if remaining_s < 3600 else "medium" if remaining_s < 86400 else "low"
        else:
            when, severity = "", "medium"
        f = ctx.file("device_counters")
        out.append(Finding(
            kind="memory_growth", key=f"memory_growth:{device}:{metric}", at_stake_ms=0.0, at_stake_pct=0.0,
            title=f"{MEMORY_METRICS[metric]} on {device} grows {per_step_mb:.2f} MB per step{when}",
            evidence=(f"{metric} {v[0] / MB:.0f} MB -> {v[-1] / MB:.0f} MB (+{grown_mb:.0f} MB) over "
                      f"{len(steps)} steps ({data.steps.note}, steps with torch op capture left out), rising "
                      f"steadily (rank correlation {corr:.2f}, Theil-Sen slope {slope * 1e9 / MB:.2f} MB/s) "
                      f"[{f}: {metric}]"),
            threshold=(f"steady growth (rank correlation >= 0.8, still rising in the second half) of at least "
                       f"{ctx.thresholds['memory_growth_mb']:g} MB (memory_growth_mb)"),
            suggestion=FIX[ctx.framework], files=[f], severity=severity,
            metrics={"mb_per_step": per_step_mb, "mb_per_s": slope * 1e9 / MB, "grown_mb": grown_mb,
                     **({"seconds_to_limit": remaining_s} if remaining_s is not None and remaining_s > 0 else {})}))
    return out


def _bytes(n: float) -> str:
    return f"{n / (1 << 30):.1f} GB" if n >= 1 << 30 else f"{n / MB:.0f} MB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.0f} days"


QUESTION = Question(name="memory", page="counters", keys=("memory_growth",), thresholds=THRESHOLDS,
                    rank=Rule(Needs, find))

"""Level of detail for the timeline: busy-ness per lane for the whole run, full detail for a few windows.

Ten million events cannot be drawn as ten million rectangles. The overview bins each lane's
time into a fixed number of columns and records how busy the lane was in each (the union of
its events, so nested events count once) and how many events started there. Detail is drawn
only for chosen step windows, and only up to a budget of events per window; what is left out
is counted and said on the page, never silently dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from profiler.kernels.intervals import covered_before, union
import pandas as pd

from viewer.trace import Trace

OVERVIEW_BINS = 1200


@dataclass
class Busy:
    """Busy fraction (0..1) and events started, per lane and time bin."""

    edges_ms: np.ndarray       # B + 1 bin edges
    busy: np.ndarray           # (lanes, B)
    started: np.ndarray        # (lanes, B) int

    @property
    def bin_ms(self) -> float:
        return float(self.edges_ms[1] - self.edges_ms[0])


def merged_intervals(lane: np.ndarray, start: np.ndarray, end: np.ndarray, stride: float):
    """Union of each lane's intervals, as sorted disjoint (start, end) on a shifted axis.

    Lanes are laid end to end (lane k shifted by k * stride) so one sort and one running max
    merge every lane at once.
    """
    return union(start + lane * stride, end + lane * stride)



def busy_bins(trace: Trace, t0_ms: float, t1_ms: float, bins: int = OVERVIEW_BINS) -> Busy:
    """Bin every lane of `trace` over [t0, t1] ms."""
    lanes = len(trace.lanes)
    edges = np.linspace(t0_ms, t1_ms, bins + 1)
    start = trace.ts_us / 1000.0
    end = start + np.maximum(trace.dur_us, 0) / 1000.0
    stride = (t1_ms - t0_ms) * 2 + 1.0
    s, e = merged_intervals(trace.lane.astype(np.float64), start - t0_ms, end - t0_ms, stride)
    x = (edges - t0_ms)[None, :] + (np.arange(lanes) * stride)[:, None]
    busy = np.diff(covered_before(s, e, x.ravel()).reshape(lanes, bins + 1), axis=1) / (edges[1] - edges[0])
    which = np.clip(((start - t0_ms) / (edges[1] - edges[0])).astype(np.int64), 0, bins - 1)
    started = np.bincount(trace.lane.astype(np.int64) * bins + which, minlength=lanes * bins).reshape(lanes, bins)
    return Busy(edges, np.clip(busy, 0.0, 1.0), started)


@dataclass
class Window:
    """A time window drawn in full detail, and what had to be left out of it."""

    label: str
    t0_ms: float
    t1_ms: float
    shown: np.ndarray          # event indices drawn
    total: int                 # events overlapping the window
    hidden_max_ms: float = 0.0  # the longest event left out
    hidden_ms: float = 0.0      # summed duration of the events left out


def window_events(trace: Trace, label: str, t0_ms: float, t1_ms: float, budget: int) -> Window:
    """The events overlapping [t0, t1]; the `budget` longest when there are more."""
    t0_us, t1_us = t0_ms * 1000.0, t1_ms * 1000.0
    inside = np.flatnonzero((trace.ts_us < t1_us) & (trace.ts_us + trace.dur_us > t0_us))
    if len(inside) <= budget:
        return Window(label, t0_ms, t1_ms, inside, len(inside))
    order = np.argsort(-trace.dur_us[inside], kind="stable")
    shown, hidden = np.sort(inside[order[:budget]]), inside[order[budget:]]
    return Window(label, t0_ms, t1_ms, shown, len(inside), float(trace.dur_us[hidden].max()) / 1000.0,
                  float(trace.dur_us[hidden].sum()) / 1000.0)


def step_windows(steps: Optional[pd.DataFrame], chosen: Optional[tuple]) -> list[tuple[str, float, float]]:
    """The windows to detail: the --steps range when given, else the median, slowest and fastest step."""
    if steps is None or not len(steps):
        return []
    start = steps["start_ms"].to_numpy()
    end = start + steps["total_ms"].to_numpy()
    number = steps["step"].to_numpy()
    if chosen is not None:
        first, last = chosen
        keep = np.ones(len(steps), dtype=bool)
        if first is not None:
            keep &= number >= first
        if last is not None:
            keep &= number <= last
        if keep.any():
            label = f"steps {number[keep].min()}–{number[keep].max()} (--steps)"
            return [(label, float(start[keep].min()), float(end[keep].max()))]
    total = steps["total_ms"].to_numpy()
    picks = [("median step", int(np.argsort(total, kind="stable")[len(total) // 2])),
             ("slowest step", int(np.argmax(total))), ("fastest step", int(np.argmin(total)))]
    windows, seen = [], set()
    for what, i in picks:
        if i not in seen:
            seen.add(i)
            windows.append((f"{what}: step {number[i]} ({total[i]:.1f} ms)", float(start[i]), float(end[i])))
    return windows


def depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting row of each event within its lane (0 = outermost), for a few thousand events."""
    depth = np.zeros(len(lane), dtype=np.int64)
    open_ends: dict[int, list[float]] = {}
    for i in np.lexsort((-end, start, lane)):
        stack = open_ends.setdefault(int(lane[i]), [])
        while stack and stack[-1] <= start[i]:
            stack.pop()
        depth[i] = len(stack)
        stack.append(end[i])
    return depth

"""Level of detail for the timeline: busy-ness per lane at several zoom levels over the whole run,
every event for chosen step windows.

Ten million events cannot be drawn as ten million rectangles. The whole run is binned per lane
at zoom levels of 1,200 x 2^L columns (L = 0 .. the finest the page's size allows): each cell is
the lane's busy fraction (the union of its events, so nested events count once) and the number
of events that started in it. The page swaps levels as the reader zooms, so every event of the
run is counted at every level; below the finest level the step windows draw events one by one,
up to a budget per window, and say what they left out. Nothing is dropped silently.

Everything is computed in one streaming pass over the event file's rows (sorted by lane and
start), a few million rows at a time, so memory stays bounded whatever the run's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.steps import median_position
from profiler.kernels.intervals import covered_before
from profiler.kernels.nesting import children_sums
from viewer.trace import Timeline

OVERVIEW_BINS = 1200
MAX_LEVELS = 7  # 1,200 .. 76,800 columns
CELL_BUDGET = 600_000  # cells over every lane and level kept in the page (~3 bytes each)
CHUNK_ROWS = 1 << 21


@dataclass
class Levels:
    """Busy time (ns) and events started per lane at the finest level; coarser levels are sums."""

    t0_ns: int
    t1_ns: int
    lanes: list[int]  # event-file lane of each row of the arrays
    covered_ns: np.ndarray  # (lanes, finest bins) float64
    started: np.ndarray  # (lanes, finest bins) int64
    levels: int
    ops_per_step: dict[int, int] = field(default_factory=dict)  # op events per step (every lane)

    @property
    def finest_bins(self) -> int:
        return self.covered_ns.shape[1]

    def bins(self, level: int) -> int:
        return OVERVIEW_BINS << level

    def bin_ms(self, level: int) -> float:
        return (self.t1_ns - self.t0_ns) / self.bins(level) / 1e6

    def level(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """(busy fraction 0..1, events started) per lane at `level`."""
        group = self.finest_bins // self.bins(level)
        shape = (len(self.lanes), self.bins(level), group)
        covered = self.covered_ns.reshape(shape).sum(axis=2)
        started = self.started.reshape(shape).sum(axis=2)
        width = (self.t1_ns - self.t0_ns) / self.bins(level)
        return np.clip(covered / width, 0.0, 1.0), started

    def edges_ms(self, level: int) -> np.ndarray:
        return np.linspace(self.t0_ns, self.t1_ns, self.bins(level) + 1) / 1e6


def level_count(lanes: int, t0_ns: int, t1_ns: int) -> int:
    """How many zoom levels fit the cell budget (finest bins no narrower than 1 µs)."""
    levels = 1
    while levels < MAX_LEVELS:
        cells = lanes * OVERVIEW_BINS * ((2 << levels) - 1)
        if cells > CELL_BUDGET or (t1_ns - t0_ns) / (OVERVIEW_BINS << levels) < 1000:
            break
        levels += 1
    return levels


def busy_levels(tl: Timeline, lanes: list[int], t0_ns: int, t1_ns: int, levels: Optional[int] = None) -> Levels:
    """Bin every lane in `lanes` over [t0, t1] at the finest level, streaming its rows; count op events per step."""
    levels = levels or level_count(len(lanes), t0_ns, t1_ns)
    bins = OVERVIEW_BINS << (levels - 1)
    span = max(t1_ns - t0_ns, 1)
    edges = np.linspace(0.0, float(span), bins + 1)
    covered = np.zeros((len(lanes), bins))
    started = np.zeros((len(lanes), bins), dtype=np.int64)
    op_codes = tl.op_category_codes()
    step_counts = np.zeros(0, dtype=np.int64)  # op events per step + 1 (index 0: outside every step)
    file = tl.file
    for lane in range(len(tl.lanes)):
        first, count, _ = file.lane_rows(lane)
        drawn = lane in lanes
        k = lanes.index(lane) if drawn else -1
        carry = np.iinfo(np.int64).min  # the latest end of the lane's events before this chunk
        for a in range(first, first + count, CHUNK_ROWS):
            b = min(first + count, a + CHUNK_ROWS)
            if len(op_codes):
                cat = file.column("category", a, b)
                is_op = np.isin(cat, op_codes)
                if is_op.any():
                    counts = np.bincount(file.column("step", a, b)[is_op].astype(np.int64) + 1)
                    if len(counts) > len(step_counts):
                        step_counts = np.concatenate([step_counts, np.zeros(len(counts) - len(step_counts), np.int64)])
                    step_counts[: len(counts)] += counts
            if not drawn:
                continue
            start = file.column("start_ns", a, b)
            end = start + np.maximum(file.column("dur_ns", a, b), 0)
            reach = np.maximum.accumulate(end)
            np.maximum(reach, carry, out=reach)
            before = np.empty_like(reach)
            before[0], before[1:] = carry, reach[:-1]
            # each event's share of the union: the part past everything before it (disjoint, sorted)
            cs = np.maximum(start, before) - t0_ns
            ce = np.maximum(end, before) - t0_ns
            carry = int(reach[-1])
            keep = ce > cs
            cov = covered_before(cs[keep].astype(np.float64), ce[keep].astype(np.float64), edges)
            covered[k] += np.diff(cov)
            which = np.clip(((start - t0_ns) * (bins / span)).astype(np.int64), 0, bins - 1)
            started[k] += np.bincount(which, minlength=bins)
    per_step = {int(i) - 1: int(c) for i in np.flatnonzero(step_counts) for c in [step_counts[i]]}
    return Levels(t0_ns, t1_ns, list(lanes), covered, started, levels, per_step)


@dataclass
class Window:
    """A time window drawn in full detail, and what had to be left out of it."""

    label: str
    t0_ms: float
    t1_ms: float
    events: pd.DataFrame  # the drawn events: lane, start_ns, dur_ns, name, category, step, args, self_ns
    total: int  # events overlapping the window
    hidden_max_ms: float = 0.0  # the longest event left out
    hidden_ms: float = 0.0  # summed duration of the events left out


COLUMNS = ("lane", "start_ns", "dur_ns", "name", "category", "step", "args")


def _clock_ns(ms: float) -> int:
    """A window edge in ms as ns on the event file's int64 clock (an edge beyond it, or NaN, is clamped)."""
    limit = float(np.iinfo(np.int64).max // 2)
    ns = float(ms) * 1e6
    return 0 if ns != ns else int(round(min(max(ns, -limit), limit)))


def window_events(tl: Timeline, label: str, t0_ms: float, t1_ms: float, budget: int) -> Window:
    """The complete events overlapping [t0, t1] on every lane; the `budget` longest when there are more.

    Each lane's rows are found with the file's lane index; self time (duration minus the events
    nested directly inside, same lane) is computed over all the window's events of the lane.
    """
    t0, t1 = _clock_ns(t0_ms), _clock_ns(t1_ms)
    file = tl.file
    parts = []
    for lane in range(len(tl.lanes)):
        first, count, longest = file.lane_rows(lane)
        if not count:
            continue
        a = file.lane_search(lane, t0 - longest, "left")
        b = file.lane_search(lane, t1, "left")
        if b <= a:
            continue
        for c0 in range(a, b, CHUNK_ROWS):
            c1 = min(b, c0 + CHUNK_ROWS)
            start = file.column("start_ns", c0, c1)
            dur = file.column("dur_ns", c0, c1)
            hit = np.flatnonzero(start + np.maximum(dur, 0) > t0) if t1 > t0 else np.flatnonzero(start >= t0)
            if len(hit):
                part = {name: file.column(name, c0, c1)[hit] for name in COLUMNS if name not in ("start_ns", "dur_ns")}
                part["start_ns"], part["dur_ns"] = start[hit], dur[hit]
                parts.append(pd.DataFrame(part))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in COLUMNS})
    frame = frame.astype(
        {
            "lane": np.int64,
            "start_ns": np.int64,
            "dur_ns": np.int64,
            "name": np.int64,
            "category": np.int64,
            "step": np.int64,
            "args": np.int64,
        }
    )
    frame["self_ns"] = self_times(
        frame["lane"].to_numpy(),
        frame["start_ns"].to_numpy(),
        frame["start_ns"].to_numpy() + frame["dur_ns"].to_numpy(),
    )
    total = len(frame)
    if total <= budget:
        return Window(label, t0_ms, t1_ms, frame, total)
    order = np.argsort(-frame["dur_ns"].to_numpy(), kind="stable")
    shown, hidden = np.sort(order[:budget]), order[budget:]
    dur = frame["dur_ns"].to_numpy()
    return Window(
        label,
        t0_ms,
        t1_ms,
        frame.iloc[shown].reset_index(drop=True),
        total,
        float(dur[hidden].max()) / 1e6,
        float(dur[hidden].sum()) / 1e6,
    )


def nesting(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each event's nesting row within its lane (0 = outermost) and its parent (-1 for none)."""
    n = len(lane)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    stacks: dict[int, list[int]] = {}
    for i in np.lexsort((-end, start, lane)).tolist():
        stack = stacks.setdefault(int(lane[i]), [])
        while stack and end[stack[-1]] <= start[i]:
            stack.pop()
        depth[i] = len(stack)
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return depth, parent


def depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting row of each event within its lane (0 = outermost)."""
    return nesting(lane, start, end)[0]


def self_times(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Duration minus the time of the events nested directly inside (same lane)."""
    _, parent = nesting(lane, start, end)
    own = (end - start).astype(np.int64)
    return own - children_sums(parent, own)


def captured_runs(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive step numbers as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for s in sorted(steps):
        if runs and s == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def step_windows(
    steps: Optional[pd.DataFrame],
    chosen: Optional[tuple],
    ops_per_step: Optional[dict[int, int]] = None,
    typical: Optional[pd.DataFrame] = None,
) -> list[tuple[str, float, float]]:
    """The windows to detail, the default first.

    The --steps range when given. Else, when ops were captured on some steps only (an
    `ops_schedule`), the median captured step, then every captured window; then the median step
    (`median_position` of the `typical` steps: the steady steps every figure is over; all steps
    when not given), the slowest and the fastest step.
    """
    if steps is None or not len(steps):
        return []
    start = steps["start_ms"].to_numpy()
    end = start + steps["total_ms"].to_numpy()
    number = steps["step"].to_numpy()
    total = steps["total_ms"].to_numpy()
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
    windows: list[tuple[str, float, float]] = []
    seen: set = set()
    ops = ops_per_step or {}
    with_ops = [int(s) for s in number if ops.get(int(s), 0) > 0]
    if with_ops and len(with_ops) < len(number):
        rows = np.flatnonzero(np.isin(number, with_ops))
        median = int(rows[np.argsort(total[rows], kind="stable")[len(rows) // 2]])
        windows.append(
            (
                f"median captured step: step {number[median]} ({total[median]:.1f} ms, "
                f"{ops.get(int(number[median]), 0):,} ops)",
                float(start[median]),
                float(end[median]),
            )
        )
        seen.add(("step", median))
        for a, b in captured_runs(with_ops):
            if a == b:
                continue
            keep = (number >= a) & (number <= b)
            windows.append(
                (
                    f"captured window: steps {a}–{b} ({sum(ops.get(s, 0) for s in range(a, b + 1)):,} ops)",
                    float(start[keep].min()),
                    float(end[keep].max()),
                )
            )
    typical_rows = np.flatnonzero(np.isin(number, (steps if typical is None else typical)["step"].to_numpy()))
    typical_rows = typical_rows if len(typical_rows) else np.arange(len(number))
    picks = [
        ("median step", int(typical_rows[median_position(total[typical_rows])])),
        ("slowest step", int(np.argmax(total))),
        ("fastest step", int(np.argmin(total))),
    ]
    for what, i in picks:
        if ("step", i) not in seen:
            seen.add(("step", i))
            note = "" if not ops or ops.get(int(number[i]), 0) else ", no ops captured"
            windows.append((f"{what}: step {number[i]} ({total[i]:.1f} ms{note})", float(start[i]), float(end[i])))
    return windows

"""Interval arithmetic on sorted numpy arrays: unions, coverage, and which interval (or step) holds each time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np
import pandas as pd

from profiler.spill import chunked, chunks, filled, paced

#: Intervals merged at a time by `union` (its copies: ~10 B per interval of a chunk, not of the whole input).
UNION_CHUNK = 1 << 18


def union(starts: np.ndarray, ends: np.ndarray, chunk: int = UNION_CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint, sorted ones (touching ones merge). Intervals already in start order (an
    op table's rows: millions) are merged `chunk` at a time with the running reach carried, with no sort and
    no copy of the whole input; others are sorted first."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if not in_order(starts, chunk):
        o = np.argsort(starts, kind="stable")
        starts, ends = starts[o], ends[o]
    heads, reach_before = [], []  # each merged interval's start, and the reach of the intervals before it
    reach = None
    for lo in range(0, len(starts), chunk):
        s, running = starts[lo : lo + chunk], np.maximum.accumulate(ends[lo : lo + chunk])
        before = np.empty(len(s), dtype=running.dtype)  # the reach of every interval before each one
        before[1:] = running[:-1]
        if reach is not None:
            before[0] = reach
            np.maximum(before, reach, out=before)
        new = s > before
        if reach is None:
            new[0] = True
        heads.append(s[new])
        reach_before.append(before[new])
        reach = max(running[-1], reach) if reach is not None else running[-1]
    first = np.concatenate(heads)
    return first, np.append(np.concatenate(reach_before)[1:], reach)


class SettledUnion:
    """`union` of intervals added a piece at a time, given back a settled piece at a time: the pieces `add` returns,
    one after the other, are the union of every interval added, so a union of millions of intervals (an op
    table's, chunk by chunk) is never held whole. Each piece added must start no earlier than the `later` given
    with the piece before."""

    def __init__(self) -> None:
        self._open = (np.empty(0, np.int64), np.empty(0, np.int64))  # merged intervals a later piece may still extend

    def add(self, starts: np.ndarray, ends: np.ndarray, later: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
        """Add intervals; the union's intervals they settle: those ending before `later`, where the next piece's
        intervals start at the earliest (all of them when `later` is None: the last piece)."""
        s, e = union(np.concatenate([self._open[0], starts]), np.concatenate([self._open[1], ends]))
        settled = len(e) if later is None else int(np.searchsorted(e, later, side="left"))  # ends never decrease
        self._open = (s[settled:], e[settled:])
        return s[:settled], e[:settled]


def in_order(values: np.ndarray, chunk: int = UNION_CHUNK) -> bool:
    """Whether `values` never decrease, checked `chunk` values at a time (no whole-array temporaries)."""
    for at in paced(chunks(max(len(values) - 1, 0), chunk)):  # the pages of a spilled column handed back as it goes
        piece = values[at.start : at.stop + 1]
        if not bool(np.all(piece[1:] >= piece[:-1])):
            return False
    return True


def covered_before(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Total length of the disjoint, sorted intervals [s, e) that lies before each t."""
    if len(s) == 0:
        return np.zeros(len(t), dtype=np.result_type(s, t))
    cum = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, side="right")  # intervals starting before t
    last = np.maximum(i - 1, 0)
    partial = np.clip(t - s[last], 0, e[last] - s[last])
    return np.where(i > 0, cum[last] + partial, 0)


def covered_ns(starts: np.ndarray, ends: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """For each query window [q_start, q_end), the length covered by the union of the intervals."""
    q_start = np.asarray(q_start, dtype=np.int64)
    q_end = np.asarray(q_end, dtype=np.int64)
    s, e = union(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
    return np.maximum(covered_before(s, e, q_end) - covered_before(s, e, q_start), 0)


MAX_SORTED_RUNS = 10_000  # beyond this many sorted runs, place each time by binary search


def sorted_run_breaks(times: np.ndarray) -> np.ndarray:
    """Where `times` steps backwards: recorded times come as sorted runs (one per thread or chunk)."""
    return np.flatnonzero(times[1:] < times[:-1]) + 1


def in_windows(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the windows [starts[k], ends[k]) (sorted by start, not overlapping): in the
    last window starting at or before it, if that one ends after it."""
    return _holding(times, starts, ends)[1]


def _holding(
    times: np.ndarray, starts: np.ndarray, ends: np.ndarray, end_inclusive: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per time, the last interval starting at or before it (0 when none does) and whether that one holds it (ends
    after it, or at it when `end_inclusive`): a binary search per time."""
    slot = np.searchsorted(starts, times, side="right") - 1
    last = np.maximum(slot, 0)
    return last, (slot >= 0) & ((times <= ends[last]) if end_inclusive else (times < ends[last]))


def place(
    times: np.ndarray, starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, end_inclusive: bool = False
) -> np.ndarray:
    """labels[k] of the interval k = [starts[k], ends[k]) holding each time ([..., ends[k]] when
    `end_inclusive`), -1 outside all; intervals sorted by start (the latest-starting one wins).

    Disjoint intervals and run-sorted times (the usual case) take a fast path: the interval edges
    are searched in each sorted run and the labels laid out between them, with no search per time.
    The result has the labels' dtype.
    """
    times = np.asarray(times, dtype=np.int64)
    labels = np.asarray(labels)
    if len(starts) == 0 or len(times) == 0:
        return np.full(len(times), -1, dtype=labels.dtype)
    side = "right" if end_inclusive else "left"
    breaks = sorted_run_breaks(times)
    if len(breaks) <= MAX_SORTED_RUNS and bool(
        np.all(ends[:-1] < starts[1:] if end_inclusive else ends[:-1] <= starts[1:])
    ):
        if not len(breaks):
            return _place_sorted(times, starts, ends, labels, side)
        out = np.empty(len(times), dtype=labels.dtype)  # each run's labels written in place, no concatenation
        for lo, hi in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(times)]])):
            out[lo:hi] = _place_sorted(times[lo:hi], starts, ends, labels, side)
        return out
    last, ok = _holding(times, starts, ends, end_inclusive)
    return np.where(ok, labels[last], -1).astype(labels.dtype)


def _place_sorted(run: np.ndarray, starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, side: str) -> np.ndarray:
    lo = np.searchsorted(run, starts, side="left")
    hi = np.searchsorted(run, ends, side=side)
    values = np.full(2 * len(labels) + 1, -1, dtype=labels.dtype)
    values[1::2] = labels  # -1, label 0, -1, label 1, ..., -1
    lengths = np.empty(len(values), dtype=np.int64)
    lengths[1::2] = hi - lo
    lengths[0], lengths[-1] = lo[0], len(run) - hi[-1]
    lengths[2:-1:2] = lo[1:] - hi[:-1]
    return np.repeat(values, lengths)


def count_per_interval(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many times fall in each of the sorted, disjoint intervals [start, end) (run-sorted times:
    the edges are searched in each run, not each time among the intervals)."""
    times = np.asarray(times, dtype=np.int64)
    breaks = sorted_run_breaks(times)
    if len(breaks) > MAX_SORTED_RUNS:
        k = place(times, starts, ends, np.arange(len(starts)))
        return np.bincount(k[k >= 0], minlength=len(starts))
    n = np.zeros(len(starts), dtype=np.int64)
    for run in np.split(times, breaks):
        n += np.searchsorted(run, ends, side="left") - np.searchsorted(run, starts, side="left")
    return n


def assign_steps(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose [start, end) contains each time, -1 outside every step; a chunk of times at a time into a spill
    file when big (a step per op of a big run)."""
    if len(steps) == 0 or len(times) == 0:
        return filled(len(times), np.int64, -1)  # spilled too: a run without steps has a -1 per op
    st = steps.sort_values("start_ns", kind="stable")
    bounds = [st[c].to_numpy(dtype=np.int64) for c in ("start_ns", "end_ns", "step")]
    return chunked(len(times), np.int64, lambda at: place(times[at], *bounds))


def start_ordered(start: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """The positions of `start` in stable start order, `rows` at a time (sorted only when not in order already),
    with the pages of spilled arrays read for each chunk handed back after it (`spill.paced`)."""
    order = None if in_order(start) else np.argsort(start, kind="stable")
    for at in paced(chunks(len(start), rows)):
        yield np.arange(at.start, at.stop) if order is None else order[at]


class RunningUnion:
    """The union of intervals given in start order a chunk at a time, the latest end carried: `union`'s merged
    intervals, measured as they close (not kept): where it breaks, its length and its length inside `windows`
    (disjoint, sorted)."""

    def __init__(self, windows: Optional[tuple[np.ndarray, np.ndarray]] = None) -> None:
        self.windows = windows
        self.reach: Optional[np.int64] = None  # the latest end so far
        self.open: Optional[np.int64] = None  # the start of the last merged interval (not closed yet)
        self.length = self.inside = 0  # of the merged intervals closed so far

    def add(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Add the next intervals (at least one): which of them start after every earlier one has ended (the
        first interval of all does not), and the latest end before each."""
        running = np.maximum.accumulate(end)
        before = np.empty_like(running)
        before[1:] = running[:-1]
        before[0] = start[0] if self.reach is None else self.reach
        if self.reach is not None:
            np.maximum(before, self.reach, out=before)
        self.reach = running[-1] if self.reach is None else max(running[-1], self.reach)
        new = start > before
        heads = start[new]
        closed_start = np.concatenate([[start[0] if self.open is None else self.open], heads[:-1]])
        self.length += int((before[new] - closed_start).sum())
        self.inside += self._inside(closed_start, before[new])
        self.open = heads[-1] if len(heads) else start[0] if self.open is None else self.open
        return new, before

    def totals(self) -> tuple[int, int]:
        """The length of the union of every interval added (the sum of its merged intervals, as `union` gives
        them), and of its part inside the windows."""
        if self.open is None:
            return 0, 0
        last = (np.array([self.open]), np.array([self.reach]))
        return self.length + int(self.reach - self.open), self.inside + self._inside(*last)

    def _inside(self, start: np.ndarray, end: np.ndarray) -> int:
        """The length of the (disjoint) intervals inside the windows."""
        if self.windows is None or not len(self.windows[0]) or not len(start):
            return 0
        return int(covered_ns(*self.windows, start, end).sum())


class WindowCoverage:
    """`covered_ns` of intervals given in start order a chunk at a time (an op table's executions): each chunk's
    settled union intervals (`SettledUnion`) are measured against every window as they close and not kept. A
    window's coverage is a sum over the union's intervals, so the int64 totals are covered_ns's exactly."""

    def __init__(self, q_start: np.ndarray, q_end: np.ndarray) -> None:
        self.q_start, self.q_end = np.asarray(q_start, dtype=np.int64), np.asarray(q_end, dtype=np.int64)
        self._union = SettledUnion()
        self._before_start = np.zeros(len(self.q_start), dtype=np.int64)  # covered_before of the windows' edges
        self._before_end = np.zeros(len(self.q_end), dtype=np.int64)

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """The next intervals, in start order, none starting before the last one added."""
        if len(starts):
            starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
            self._measure(*self._union.add(starts, ends, int(starts[-1])))

    def covered(self) -> np.ndarray:
        """For each window, the length covered by the union of every interval added; call once, at the end."""
        self._measure(*self._union.add(np.empty(0, np.int64), np.empty(0, np.int64), None))
        return np.maximum(self._before_end - self._before_start, 0)

    def _measure(self, s: np.ndarray, e: np.ndarray) -> None:
        if len(s):
            self._before_start += covered_before(s, e, self.q_start)
            self._before_end += covered_before(s, e, self.q_end)

"""Nesting of spans on a lane, from begin / end events (the raw store) or from complete intervals
(a Kineto trace): matching, nesting level, parent and self time.

`nest_spans` runs the C kernel (`_nesting.c`, one linear pass) when it is built, else the
vectorised numpy reference below; both give identical results (tests/test_core_kernels.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler.kernels.native import native

_kernel = native("profiler.kernels._nesting")


@dataclass
class Spans:
    """Matched begin / end pairs: the begin's index into the event arrays, the duration (end time
    minus begin time), nesting level and self time.

    Pairs are listed in the order their begins are visited: by group, then recording order.
    """

    begin: np.ndarray
    dur: np.ndarray
    level: np.ndarray
    self_ns: np.ndarray
    unmatched: int


def nest_spans(group: np.ndarray, code: np.ndarray, t: np.ndarray, select: Optional[np.ndarray] = None,
               use_kernel: bool = True) -> Spans:
    """Pair the span events of each group (a thread in one recording window) and time them.

    Within a group, a begin at nesting depth d is closed by the next event at depth d when that is
    an end of the same descriptor. Depth is the running count of begins minus ends; a leading end
    (its span began before the window) or a trailing begin (not ended when it closed) is unmatched.
    Self time is the duration minus that of the spans directly inside. Only the events at the
    increasing positions `select` take part (all when None); events must be in recording order
    within each group. begin is a position into the full arrays.
    """
    group = np.ascontiguousarray(group, dtype=np.int64)
    code = np.ascontiguousarray(code, dtype=np.int64)
    t = np.ascontiguousarray(t, dtype=np.int64)
    select = None if select is None else np.asarray(select, dtype=np.int64)
    n_visit = len(code) if select is None else len(select)
    if n_visit == 0:
        z = np.empty(0, np.int64)
        return Spans(z, z, z, z, 0)
    if select is None:
        order = stable_order(group)
    else:
        within = stable_order(group[select])
        order = select if within is None else select[within]
    if _kernel is not None and use_kernel:
        begin, dur, level, self_ns, unmatched = _kernel.nest(group, code, t, order, n_visit)
        as_int = lambda b: np.frombuffer(b, dtype=np.int64)     # noqa: E731 (zero-copy views)
        return Spans(as_int(begin), as_int(dur), as_int(level), as_int(self_ns), int(unmatched))
    return _nest_numpy(group, code, t, order)


def _nest_numpy(group: np.ndarray, code: np.ndarray, t: np.ndarray, order) -> Spans:
    """The numpy reference of `nest_spans`: sorts and an as-of merge instead of one walk."""
    begin, end, level, unmatched = _pair(group, code, order)
    start = t[begin]
    dur = t[end] - start
    self_ns = self_time(start, dur, group[begin], level)
    return Spans(begin, dur, level, self_ns, unmatched)


def _pair(group: np.ndarray, code: np.ndarray, order) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Begin / end pairs (event positions), their levels and the count of unpaired events;
    grouping events by (group, level) leaves sequences E? (B E)* B? that pair up by adjacency."""
    n = len(code) if order is None else len(order)
    sorted_key = group if order is None else group[order]
    step = (1 - 2 * (code & 1)).astype(np.int8)            # +1 begin, -1 end
    if order is not None:
        step = step[order]
    # 1. nesting level of every event, each group starting at depth 0
    firsts = np.flatnonzero(np.concatenate([[True], sorted_key[1:] != sorted_key[:-1]]))
    sizes = np.diff(np.append(firsts, n))
    depth_after = np.cumsum(step, dtype=np.int32)
    depth_after -= np.repeat(depth_after[firsts] - step[firsts], sizes)
    level = depth_after - (step > 0)                      # a begin sits at its depth before, an end after
    # ends of spans begun before the window make levels negative: shift each group to start at 0
    level -= np.repeat(np.minimum.reduceat(level, firsts), sizes)
    # 2. within each (group, level), recording order alternates begin, end
    group_id = np.repeat(np.arange(len(firsts), dtype=np.int32), sizes)
    level_key = group_id.astype(np.int64) * (int(level.max()) + 1) + level
    within = stable_order(level_key)
    pos = np.arange(n)                                      # visiting position of each event
    if within is not None:
        pos, level_key, level, step = pos[within], level_key[within], level[within], step[within]
    ev = pos if order is None else order[pos]
    desc = (code >> 1)[ev]
    pair = (step[:-1] > 0) & (step[1:] < 0) & (level_key[1:] == level_key[:-1])
    # an end right after a begin of another descriptor means corrupt nesting: do not pair it
    pair &= desc[1:] == desc[:-1]
    by_visit = np.argsort(pos[:-1][pair], kind="stable")
    begins = ev[:-1][pair][by_visit]
    return begins, ev[1:][pair][by_visit], level[:-1][pair][by_visit].astype(np.int64), n - 2 * len(begins)


def stable_order(key: np.ndarray):
    """Stable argsort, or None when already sorted; a radix sort when the keys fit in 16 bits."""
    if len(key) < 2 or bool(np.all(key[1:] >= key[:-1])):
        return None
    if key.min() >= 0 and key.max() < 2**15:
        key = key.astype(np.int16)          # numpy sorts <= 16-bit integers with a stable radix sort
    return np.argsort(key, kind="stable")


def self_time(start: np.ndarray, dur: np.ndarray, lane: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Duration minus the time of spans nested directly inside (same lane, one level deeper).

    A span's parent is the latest span one level up on its lane that started no later and ends
    no earlier than it: found for all spans at once with an as-of merge.
    """
    n = len(start)
    if n == 0:
        return np.empty(0, np.int64)
    df = pd.DataFrame({"start": start, "lane": lane, "level": level, "i": np.arange(n)})
    parents = (df.rename(columns={"i": "parent"}).assign(level=df["level"] + 1, parent_end=start + dur)
               .sort_values("start", kind="stable"))
    children = df[df["level"] > 0].sort_values("start", kind="stable")
    m = pd.merge_asof(children, parents, on="start", by=["lane", "level"], direction="backward",
                      allow_exact_matches=True)
    m = m.dropna(subset=["parent"])
    m = m[m["start"].to_numpy() + dur[m["i"].to_numpy()] <= m["parent_end"].to_numpy()]
    child_time = np.bincount(m["parent"].astype(np.int64), weights=dur[m["i"].to_numpy()], minlength=n)
    return dur - child_time.astype(np.int64)


# ---- complete intervals (a Kineto trace's host ops) -----------------------------------------
#
# Nesting of time intervals on lanes (threads, GPU streams), vectorised with numpy.
#
# A Kineto trace gives every host op as a complete interval, not as begin / end events, so the
# call tree has to be rebuilt from the intervals. A stack walk in Python would cost a few hundred
# nanoseconds per op; these functions do it on whole columns in O(n log n) instead:
#
# - `enclosing_parents`: sort by (lane, start, -end). The innermost interval that contains
#   interval i is then the *last* interval j before i (same lane) with end_j >= end_i: every
#   interval between that j and i ends before i does, so it cannot contain i. Finding "the
#   previous element with a value >= mine" is done by pointer jumping: each interval starts with
#   candidate i-1 and, while its candidate ends too early, jumps to the candidate's own candidate.
#   Everything skipped by a jump ends before the candidate, hence before i, so no container is
#   ever skipped; the jumps double in length, so ~log2(n) rounds over the unresolved intervals.
# - `self_times`: duration minus the summed durations of the direct children (`np.bincount`).
# - `nesting_depths`: distance to the root by pointer jumping over the parent array
#   (Wyllie's list ranking), also ~log2(depth) rounds.
#
# Containment, not mere overlap, makes a child: an interval that starts inside another but ends
# after it is its sibling. Host ops on one thread are properly nested (RAII scopes), so there the
# self times of a thread add up to the union of its top-level ops.


def enclosing_parents(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index (into the inputs) of each interval's innermost container on the same lane, or -1.

    `lane`, `start` and `end` are equal-length integer arrays in any order. Of two identical
    intervals the one listed first is the parent of the other.
    """
    order = np.lexsort((-end, start, lane))
    lane_s, end_s = lane[order], end[order]
    n = len(order)
    candidate = np.arange(-1, n - 1)
    parent_s = np.full(n, -1, dtype=np.int64)
    active = np.arange(1, n)
    while active.size:
        cand = candidate[active]
        same_lane = lane_s[cand] == lane_s[active]
        contains = same_lane & (end_s[cand] >= end_s[active])
        parent_s[active[contains]] = cand[contains]
        jumping = active[same_lane & ~contains]
        candidate[jumping] = candidate[candidate[jumping]]
        active = jumping[candidate[jumping] >= 0]
    parent = np.full(n, -1, dtype=np.int64)
    has_parent = parent_s >= 0
    parent[order[has_parent]] = order[parent_s[has_parent]]
    return parent


def self_times(parent: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Each interval's duration minus the durations of its direct children (int64, >= 0)."""
    child = parent >= 0
    children = np.bincount(parent[child], weights=dur[child], minlength=len(dur))
    return np.maximum(dur - np.rint(children).astype(np.int64), 0)


def nesting_depths(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each interval (0 = outermost)."""
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    pending = np.flatnonzero(up >= 0)
    while pending.size:
        above = up[pending]
        depth[pending] += depth[above]
        up[pending] = up[above]
        pending = pending[up[pending] >= 0]
    return depth

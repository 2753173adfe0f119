"""Nesting of spans on a lane: begin / end matching and self time, vectorised."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class Spans:
    """Matched begin / end pairs: indices into the event arrays, plus their nesting level."""

    begin: np.ndarray
    end: np.ndarray
    level: np.ndarray
    unmatched: int


def pair_spans(thread: np.ndarray, window: np.ndarray, code: np.ndarray) -> Spans:
    """Match span begins and ends per (thread, window), all at once.

    Within one thread and window, a begin at nesting depth d is closed by the next end that
    returns to depth d. Depth is a cumulative sum of +1 (begin) / -1 (end); grouping events by
    (thread, window, level) leaves sequences E? (B E)* B? where a leading E began before the
    window and a trailing B had not ended when it closed: those are counted as unmatched.
    Events must be given in recording order within each thread.
    """
    n = len(code)
    if n == 0:
        z = np.empty(0, np.int64)
        return Spans(z, z, z, 0)
    is_end = (code & 1).astype(bool)
    step = np.where(is_end, -1, 1)
    # a stable sort by (thread, window) keeps each thread's recording order
    n_win = int(window.max()) + 2
    key = _stable_order(thread * n_win + (window + 1))
    th, wi, st = thread[key], window[key], step[key]
    group_start = np.ones(n, dtype=bool)
    group_start[1:] = (th[1:] != th[:-1]) | (wi[1:] != wi[:-1])
    depth_after = np.cumsum(st)
    # depth before each group's first event, subtracted so each group starts at depth 0
    base = np.maximum.accumulate(np.where(group_start, np.arange(n), 0))
    start_depth = depth_after[base] - st[base]
    after = depth_after - start_depth
    before = after - st
    level = np.where(st > 0, before, after)
    # levels may be negative (ends of spans begun before the window): shift per group
    group_id = np.cumsum(group_start) - 1
    min_level = np.minimum.reduceat(level, np.flatnonzero(group_start))
    level = level - min_level[group_id]
    k2 = _stable_order(group_id * (int(level.max()) + 1) + level)   # recording order within a level
    ev = key[k2]
    lv = level[k2]
    gid = group_id[k2]
    b = ~is_end[ev]
    same = np.zeros(n, dtype=bool)
    same[:-1] = (gid[1:] == gid[:-1]) & (lv[1:] == lv[:-1])
    pair = np.zeros(n, dtype=bool)
    pair[:-1] = b[:-1] & ~b[1:] & same[:-1]
    # an end directly after a begin of another descriptor means corrupt nesting: do not pair it
    pair[:-1] &= (code[ev[:-1]] >> 1) == (code[ev[1:]] >> 1)
    begins = ev[:-1][pair[:-1]]
    ends = ev[1:][pair[:-1]]
    unmatched = n - 2 * len(begins)
    return Spans(begins, ends, lv[:-1][pair[:-1]], unmatched)


def _stable_order(key: np.ndarray) -> np.ndarray:
    """Stable argsort; skipped when already sorted, radix sort when the keys fit in 16 bits."""
    if len(key) < 2 or bool(np.all(key[1:] >= key[:-1])):
        return np.arange(len(key))
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

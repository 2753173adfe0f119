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
    # 1. order by (thread, window); a stable sort keeps each thread's recording order
    group_key = thread * (int(window.max()) + 2) + (window + 1)
    order = _stable_order(group_key)
    sorted_key = group_key if order is None else group_key[order]
    step = (1 - 2 * (code & 1)).astype(np.int8)            # +1 begin, -1 end
    if order is not None:
        step = step[order]
    # 2. nesting level of every event, each group starting at depth 0
    firsts = np.flatnonzero(np.concatenate([[True], sorted_key[1:] != sorted_key[:-1]]))
    sizes = np.diff(np.append(firsts, n))
    depth_after = np.cumsum(step, dtype=np.int32)
    depth_after -= np.repeat(depth_after[firsts] - step[firsts], sizes)
    level = depth_after - (step > 0)                      # a begin sits at its depth before, an end after
    # ends of spans begun before the window make levels negative: shift each group to start at 0
    level -= np.repeat(np.minimum.reduceat(level, firsts), sizes)
    # 3. within each (group, level), recording order alternates begin, end
    group_id = np.repeat(np.arange(len(firsts), dtype=np.int32), sizes)
    level_key = group_id.astype(np.int64) * (int(level.max()) + 1) + level
    within = _stable_order(level_key)
    ev = np.arange(n) if order is None else order
    if within is not None:
        ev, level_key, level, step = ev[within], level_key[within], level[within], step[within]
    desc = (code >> 1)[ev]
    pair = (step[:-1] > 0) & (step[1:] < 0) & (level_key[1:] == level_key[:-1])
    # an end right after a begin of another descriptor means corrupt nesting: do not pair it
    pair &= desc[1:] == desc[:-1]
    begins = ev[:-1][pair]
    return Spans(begins, ev[1:][pair], level[:-1][pair].astype(np.int64), n - 2 * len(begins))


def _stable_order(key: np.ndarray):
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

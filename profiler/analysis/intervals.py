"""Interval arithmetic on sorted numpy arrays: unions and how much of a window they cover."""
from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint, sorted ones."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    o = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[o], np.asarray(ends)[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last]


def covered_ns(starts: np.ndarray, ends: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """For each query window [q_start, q_end), the length covered by the union of the intervals."""
    q_start = np.asarray(q_start, dtype=np.int64)
    q_end = np.asarray(q_end, dtype=np.int64)
    s, e = union(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
    if len(s) == 0:
        return np.zeros(len(q_start), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right")        # intervals starting before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.maximum(i - 1, 0)
        partial = np.clip(t - s[last], 0, e[last] - s[last])
        return np.where(i > 0, full + partial, 0)

    return np.maximum(covered_before(q_end) - covered_before(q_start), 0)

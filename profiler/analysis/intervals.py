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


def covered_before(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Total length of the disjoint, sorted intervals [s, e) that lies before each t."""
    if len(s) == 0:
        return np.zeros(len(t), dtype=np.result_type(s, t))
    cum = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, side="right")            # intervals starting before t
    last = np.maximum(i - 1, 0)
    partial = np.clip(t - s[last], 0, e[last] - s[last])
    return np.where(i > 0, cum[last] + partial, 0)


def covered_ns(starts: np.ndarray, ends: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """For each query window [q_start, q_end), the length covered by the union of the intervals."""
    q_start = np.asarray(q_start, dtype=np.int64)
    q_end = np.asarray(q_end, dtype=np.int64)
    s, e = union(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
    return np.maximum(covered_before(s, e, q_end) - covered_before(s, e, q_start), 0)

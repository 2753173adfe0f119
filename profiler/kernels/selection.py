"""Order statistics of a big integer column read a chunk at a time: np.median's figure without its sorted copy of
the whole column (an op table's millions of durations, spilled; the device's gaps and executions). Partitioning a
spilled copy in its file (what the device findings did) also keeps the anonymous memory flat, but touches every page
of the column in one call:
8 M spilled int64 durations, 0.09 s and +64 MB resident; counted 2^18 values at a time, their pages handed back
after each chunk, 0.13 s and +3 MB (2026-11-29)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from profiler import spill

#: Value ranges a pass of `kth_smallest` counts into: each pass narrows the range this many times (int64: <= 4 passes).
SELECTION_BINS = 1 << 16


def kth_smallest(values: np.ndarray, k: int, rows: Optional[int] = None) -> int:
    """The k-th smallest (0-based) of the integers `values`, what np.partition(values, k)[k] gives: each pass counts
    the values per sub-range of the range holding it, `rows` (default spill.CHUNK_ROWS) values at a time, and keeps
    the sub-range holding it, until the range is one value (temporaries a chunk's size and the counts)."""
    lo, hi = _bounds(values, rows)
    while lo < hi:
        width = -(-(hi - lo + 1) // SELECTION_BINS)
        counts = np.zeros(SELECTION_BINS, dtype=np.int64)
        for at in spill.chunks(len(values), rows):
            counts += _counts_in(values[at], lo, hi, width)
            spill.drop_resident()  # the chunk's pages of a spilled column
        below = np.cumsum(counts)
        holding = int(np.searchsorted(below, k, side="right"))
        k -= int(below[holding - 1]) if holding else 0
        lo, hi = lo + holding * width, min(hi, lo + (holding + 1) * width - 1)
    return lo


def _bounds(values: np.ndarray, rows: Optional[int]) -> tuple[int, int]:
    """The least and the greatest of `values` (not empty), `rows` at a time."""
    lo, hi = [], []
    for at in spill.chunks(len(values), rows):
        lo.append(int(values[at].min()))
        hi.append(int(values[at].max()))
        spill.drop_resident()
    return min(lo), max(hi)


def _counts_in(values: np.ndarray, lo: int, hi: int, width: int) -> np.ndarray:
    """How many of `values` fall in each sub-range of `width` of [lo, hi] (their offsets from lo as uint64: a range
    wider than int64's half does not overflow)."""
    inside = values[(values >= lo) & (values <= hi)].astype(np.int64, copy=False).view(np.uint64)
    offsets = inside - np.uint64(lo % 2**64)
    offsets //= np.uint64(width)
    return np.bincount(offsets.view(np.int64), minlength=SELECTION_BINS)


def median(values: np.ndarray, rows: Optional[int] = None) -> float:
    """np.median(values) of integers, the same float (the mean of the two middle values, one twice when the count is
    odd), found by `kth_smallest` `rows` values at a time instead of partitioning a copy of the whole column."""
    n = len(values)
    if not n:
        return float(np.median(values))
    middle = np.array(
        [kth_smallest(values, (n - 1) // 2, rows), kth_smallest(values, n // 2, rows)], dtype=values.dtype
    )
    return float(np.median(middle))

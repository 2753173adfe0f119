"""The shared chunked sums: `grouping.code_sums` (per code, a count of rows and int64 sums of values over them),
`nesting.children_sums` (per interval, an int64 sum over its direct children, which `self_times` subtracts) and
`intervals.in_windows` / `place`'s search per time; chunked with a few rows a chunk, they are the whole-array
figures."""

from __future__ import annotations

import numpy as np
import pytest

from profiler import spill
from profiler.kernels.grouping import code_sums
from profiler.kernels.intervals import in_order, in_windows, place
from profiler.kernels.nesting import children_sums, self_times


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 3 rows: each code's rows and each parent's children are spread over several chunks."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 3)


def test_code_sums_counts_and_sums_each_code(small_chunks) -> None:
    codes = np.array([2, 0, 2, 1, 2, 0, 3, 2])
    values = [np.array([10, 20, 30, 40, 50, 60, 70, 80]), np.array([1, -1, 1, -1, 1, -1, 1, -1])]
    count, (first, second) = code_sums(codes, 5, values)
    assert count.tolist() == [2, 1, 4, 1, 0]
    assert first.tolist() == [80, 40, 170, 70, 0]
    assert second.tolist() == [-2, -1, 2, 1, 0]
    assert all(s.dtype == np.int64 for s in (count, first, second))


def test_code_sums_hand_the_pages_back_between_chunks(small_chunks, monkeypatch) -> None:
    """A drop once the chunks since the last one cover DROP_ROWS rows, and after the last (op_memory's sums read six
    whole-table spilled columns: 386 MB of file pages between two drops on a 16 GB trace)."""
    monkeypatch.setattr(spill, "DROP_ROWS", 6)
    drops = []
    monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(drops)))
    codes = np.arange(20) % 4
    count, (total,) = code_sums(codes, 4, [np.arange(20)])
    assert count.tolist() == [5] * 4 and total.tolist() == [40, 45, 50, 55]
    assert len(drops) == 4  # chunks of 3 rows: after 6, 12 and 18 rows, and after the last 2


def test_code_sums_of_the_kept_rows(small_chunks) -> None:
    codes = np.array([2, 0, 2, 1, 2, 0, 3, 2])
    value = np.array([10, 20, 30, 40, 50, 60, 70, 80])
    kept = value % 20 == 0  # rows 1, 3, 5, 7
    count, (total,) = code_sums(codes, 4, [value], lambda at: kept[at])
    assert count.tolist() == [2, 1, 1, 0]
    assert total.tolist() == [80, 40, 80, 0]
    count, sums = code_sums(codes, 4, [], lambda at: kept[at])
    assert count.tolist() == [2, 1, 1, 0] and sums == []


def test_code_sums_of_values_at_other_positions(small_chunks) -> None:
    codes = np.array([1, 0, 1, 1])
    value_rows = np.array([5, 0, 2, 9])  # each row's value is value[value_rows[row]]
    value = np.arange(10) * 100
    count, (total,) = code_sums(codes, 3, [value], value_rows=value_rows)
    assert count.tolist() == [1, 3, 0]
    assert total.tolist() == [0, 500 + 200 + 900, 0]
    kept = np.array([True, True, False, True])
    count, (total,) = code_sums(codes, 3, [value], lambda at: kept[at], value_rows)
    assert count.tolist() == [1, 2, 0]
    assert total.tolist() == [0, 1400, 0]


@pytest.mark.parametrize("seed", range(4))
def test_code_sums_a_chunk_at_a_time_are_the_whole_arrays(seed, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    n, n_codes = 1000, 37
    codes, value_rows = rng.integers(0, n_codes, n), rng.integers(0, 2 * n, n)
    values = [rng.integers(-(2**40), 2**40, 2 * n), rng.integers(0, 5, 2 * n)]
    kept = rng.random(n) < 0.6
    expected_count = np.bincount(codes[kept], minlength=n_codes)
    expected = []
    for value in values:
        total = np.zeros(n_codes, dtype=np.int64)
        np.add.at(total, codes[kept], value[value_rows[kept]])
        expected.append(total)
    for rows in (7, 1000, 1 << 20):
        monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
        count, sums = code_sums(codes, n_codes, values, lambda at: kept[at], value_rows)
        np.testing.assert_array_equal(count, expected_count)
        for got, want in zip(sums, expected):
            np.testing.assert_array_equal(got, want)


def test_children_sums_add_only_direct_children(small_chunks) -> None:
    # 0 holds 1 and 4; 1 holds 2 and 3; 5 is a root with no children; 6 a child of 5
    parent = np.array([-1, 0, 1, 1, 0, -1, 5])
    values = np.array([100, 40, 10, 5, 30, 7, 3])
    assert children_sums(parent, values).tolist() == [70, 15, 0, 0, 0, 3, 0]
    assert self_times(parent, values).tolist() == [30, 25, 10, 5, 30, 4, 3]
    assert self_times(np.array([-1, 0]), np.array([5, 9])).tolist() == [0, 9]  # never below 0


def test_children_sums_are_exact_above_the_float_range(small_chunks) -> None:
    parent = np.array([-1, 0, 0, 0])
    values = np.array([2**62, 2**53, 1, 1])  # as float64, 2**53 + 1 + 1 rounds to 2**53
    assert children_sums(parent, values).tolist() == [2**53 + 2, 0, 0, 0]
    assert self_times(parent, values).tolist() == [2**62 - 2**53 - 2, 2**53, 1, 1]


@pytest.mark.parametrize("seed", range(4))
def test_self_times_are_those_of_the_float_bincount_they_replace(seed, monkeypatch) -> None:
    """Below 2**53 the float sums of whole durations are exact: the int64 sums give the same self times."""
    rng = np.random.default_rng(seed)
    n = 2000
    parent = np.where(rng.random(n) < 0.2, -1, rng.integers(0, n, n))
    dur = rng.integers(0, 10**12, n)
    child = parent >= 0
    children = np.bincount(parent[child], weights=dur[child], minlength=n)
    expected = np.maximum(dur - np.rint(children).astype(np.int64), 0)
    for rows in (5, 1 << 20):
        monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
        np.testing.assert_array_equal(self_times(parent, dur), expected)


def test_in_windows_and_place_search_each_time_alike() -> None:
    starts, ends = np.array([10, 20, 40]), np.array([15, 30, 50])
    times = np.array([5, 10, 14, 15, 20, 30, 35, 40, 50, 60])
    assert in_windows(times, starts, ends).tolist() == [
        False,
        True,
        True,
        False,
        True,
        False,
        False,
        True,
        False,
        False,
    ]
    assert (
        in_windows(times.astype(float) / 1e3, starts / 1e3, ends / 1e3).tolist()
        == in_windows(times, starts, ends).tolist()
    )
    # overlapping intervals take `place`'s search per time: the latest-starting one holds a time
    starts, ends = np.array([0, 10, 12]), np.array([100, 20, 15])
    labels = np.array([7, 8, 9])
    times = np.array([5, 10, 13, 15, 16, 99, -1])  # after 12, the one starting at 12 alone counts
    assert place(times, starts, ends, labels).tolist() == [7, 8, 9, -1, -1, -1, -1]
    assert place(times, starts, ends, labels, end_inclusive=True).tolist() == [7, 8, 9, 9, -1, -1, -1]
    assert in_windows(times, starts, ends).tolist() == [True, True, True, False, False, False, False]


def test_in_order_hands_the_pages_back_as_it_checks(monkeypatch) -> None:
    """`in_order` reads a whole (spilled) column: a drop per DROP_ROWS values checked, and one when it stops early
    (on a 16 GB trace the step activity's check mapped ~100 MB of a start column between two drops)."""
    monkeypatch.setattr(spill, "DROP_ROWS", 20)
    drops = []
    monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(drops)))
    assert in_order(np.arange(101), chunk=10)
    assert len(drops) == 5  # 100 pairs: after 20, 40, 60, 80 and the last 20
    drops.clear()
    values = np.arange(101)
    values[55] = 0
    assert not in_order(values, chunk=10) and len(drops) == 3  # after 20, 40, and on stopping in the sixth chunk
    assert in_order(np.arange(1)) and in_order(np.arange(0))

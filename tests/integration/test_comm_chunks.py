"""Communication and busy figures computed a chunk at a time (the step trace's device columns: comm_in_windows and
busy_in_windows of analysis/device_time.py; the collectives' executions of comm_ops) are those of the whole-table
computation, exactly, for any chunk size, on real Kineto captures (nccl_data and the sampled ranks run NCCL)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis import comm_ops, device_time
from profiler.analysis.launches import launches
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.intervals import WindowCoverage, covered_ns, union

CAPTURES = ["sampled_rank-0", "nccl_data", "diff_test", "alexnet"]
WITH_COMM = {"sampled_rank-0", "nccl_data", "diff_test"}


def _ops(captures, capture: str) -> pd.DataFrame:
    return read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops


def _windows(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Made-up windows over the run: overlapping ones, and disjoint ones (steps) around them."""
    start = np.sort(start)
    steps = union(start[::40], start[::40] + 3_000_000)
    overlapping = (start[::7], start[::7] + np.arange(len(start[::7])) * 5_000)
    return tuple(np.concatenate(pair) for pair in zip(steps, overlapping))


def _whole_comm_in_windows(ex: pd.DataFrame, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, ...]:
    """comm_in_windows as it was computed whole: each union of every execution at once."""
    category = ex["category"].to_numpy(dtype=object)
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    comm, compute = category == "comm", category == "compute"
    either = comm | compute
    comm_ns = covered_ns(start[comm], end[comm], q_start, q_end)
    overlap = (
        comm_ns
        + covered_ns(start[compute], end[compute], q_start, q_end)
        - covered_ns(start[either], end[either], q_start, q_end)
    )
    return comm_ns, np.maximum(overlap, 0)


@pytest.mark.parametrize("capture", CAPTURES)
def test_comm_in_windows_a_chunk_at_a_time_is_the_whole_union(captures, capture) -> None:
    ops = _ops(captures, capture)
    shuffled = ops.iloc[np.random.default_rng(0).permutation(len(ops))].reset_index(drop=True)  # out of start order
    for table in (ops, shuffled):
        ex = device_time.device_executions(table)
        q_start, q_end = _windows(ex["start_ns"].to_numpy())
        expected = _whole_comm_in_windows(ex, q_start, q_end)
        if capture in WITH_COMM:
            assert expected[0].sum() > 0 and expected[1].sum() > 0  # not vacuous
        for rows in (97, len(ex) // 3 + 1, None):
            got = device_time.comm_in_windows(table, q_start, q_end, rows)
            for values, whole in zip(got, expected):
                assert values.dtype == whole.dtype and np.array_equal(values, whole)


@pytest.mark.parametrize("capture", CAPTURES)
def test_busy_in_windows_a_chunk_at_a_time_is_the_whole_union(captures, capture, monkeypatch) -> None:
    ex = device_time.device_executions(ops := _ops(captures, capture))
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    q_start, q_end = _windows(start)
    expected = covered_ns(start, end, q_start, q_end)
    assert expected.sum() > 0  # not vacuous
    monkeypatch.setattr(device_time, "GAP_CHUNK", 97)
    busy, _ = device_time.busy_in_windows(ops, q_start, q_end)
    assert busy.dtype == expected.dtype and np.array_equal(busy, expected)


def test_window_coverage_of_touching_and_nested_intervals_is_covered_ns() -> None:
    starts, ends = np.array([0, 0, 5, 10, 10, 12, 30]), np.array([5, 3, 10, 20, 11, 15, 30])
    q_start, q_end = np.array([-5, 0, 4, 11, 25, 40]), np.array([50, 7, 12, 25, 31, 45])
    for rows in (1, 2, 3):
        coverage = WindowCoverage(q_start, q_end)
        for at in spill.chunks(len(starts), rows):
            coverage.add(starts[at], ends[at])
        assert np.array_equal(coverage.covered(), covered_ns(starts, ends, q_start, q_end))


def _whole_executions_inside(ops: pd.DataFrame, launched, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """comm_ops._executions_inside as it was computed whole: every launched execution's call gathered at once."""
    executions = np.flatnonzero(launched.call >= 0)
    call = launched.call[executions]
    stream, _ = codes_and_labels(ops["stream"])
    start, dur = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    order = np.argsort(start[rows], kind="stable")
    sorted_rows = rows[order]
    at = np.searchsorted(start[sorted_rows], start[call], side="right") - 1
    inside = at >= 0
    holder = sorted_rows[np.maximum(at, 0)]
    inside &= (start[call] + dur[call] <= start[holder] + dur[holder]) & (stream[call] == stream[holder])
    return executions[inside], order[at[inside]]


@pytest.mark.parametrize("capture", sorted(WITH_COMM))
def test_collectives_executions_a_chunk_at_a_time_are_the_whole_tables(captures, capture, monkeypatch) -> None:
    ops = _ops(captures, capture)
    launched = launches(ops)
    rows = np.flatnonzero(comm_ops.collective_rows(ops))
    expected = _whole_executions_inside(ops, launched, rows)
    assert len(expected[0]) > 0  # not vacuous
    whole_ops, whole_pieces = comm_ops.comm_op_table(ops, launched), comm_ops.comm_pieces(ops, launched)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 97)
    monkeypatch.setattr(comm_ops, "EXECUTION_ROWS", 89)
    assert np.array_equal(np.flatnonzero(comm_ops.collective_rows(ops)), rows)
    got = comm_ops._executions_inside(ops, launched, rows)
    for values, whole in zip(got, expected):
        assert values.dtype == whole.dtype and np.array_equal(values, whole)
    pd.testing.assert_frame_equal(comm_ops.comm_op_table(ops, launched), whole_ops, check_exact=True)
    pd.testing.assert_frame_equal(comm_ops.comm_pieces(ops, launched), whole_pieces, check_exact=True)

"""The op and kernel tables summed a window of rows at a time (profiler/analysis/ops.py and kernels.py, on
`kernels.grouping.merged_groups` and `RunningSums`) are the tables of the whole run, exactly, on real Kineto
captures: windows of any size, with the launches' device columns, the distinct input shapes, the first op's
labels of each group and the kernels' duration-weighted means (float sums, carried in row order)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.kernels import kernel_table
from profiler.analysis.launches import launches
from profiler.analysis.ops import op_detail_table, op_shape_table, op_type_table
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.grouping import RunningSums, group_rows, merged_groups

TABLES = {
    "op_type": op_type_table,
    "op_detail": op_detail_table,
    "op_shape": op_shape_table,
    "kernels": kernel_table,
}


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_control", "nccl_data", "alexnet"])
def test_op_tables_summed_in_windows_are_the_whole_runs(captures, capture: str) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    launched = launches(ops)
    assert launched is not None
    for name, table in TABLES.items():
        whole = table(ops, launched, window_rows=len(ops))
        for rows in (len(ops) // 50 + 1, len(ops) // 3 + 1):  # windows of ~20 rows (alexnet) to ~25k
            pd.testing.assert_frame_equal(table(ops, launched, window_rows=rows), whole, check_exact=True, obj=name)
    detail = op_detail_table(ops, launched, window_rows=len(ops))
    assert detail["count"].sum() > 100 and (detail["device_self_ms"] > 0).any()  # not vacuous: ops with kernels
    if capture in ("sampled_rank-0", "diff_control"):
        assert detail["shapes"].str.contains(";").any()  # names with several shapes, first seen first


def test_merged_groups_add_up_and_keep_the_first_windows_labels() -> None:
    first = pd.DataFrame({"key": ["b", "a"], "label": ["b1", "a1"], "n": [1, 2], "lo": [5, 7], "hi": [5, 7]})
    second = pd.DataFrame({"key": ["c", "b"], "label": ["c2", "b2"], "n": [4, 8], "lo": [1, 3], "hi": [1, 9]})
    merged = merged_groups([first, second], ["key"], ["n"], ["lo"], ["hi"])
    assert merged["key"].tolist() == ["a", "b", "c"]  # sorted key order, as group_rows gives the whole
    assert merged["label"].tolist() == ["a1", "b1", "c2"]  # b's label from its first window
    assert merged["n"].tolist() == [2, 9, 4]
    assert merged["lo"].tolist() == [7, 3, 1] and merged["hi"].tolist() == [7, 9, 1]
    assert merged["n"].dtype == np.int64


def test_running_sums_are_one_pass_in_row_order_where_window_totals_round_differently() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 5, 20_000).astype(str)
    values = rng.random(20_000) * 10.0 ** rng.integers(-6, 9, 20_000)
    g = group_rows(keys)
    whole = np.bincount(g.of_row, weights=values)  # one pass in row order, by group
    running = RunningSums(["v"])
    window_totals = np.zeros(len(g))
    for lo in range(0, len(keys), 1500):
        running.add([keys[lo : lo + 1500]], {"v": values[lo : lo + 1500]})
        window_totals += np.bincount(g.of_row[lo : lo + 1500], weights=values[lo : lo + 1500], minlength=len(g))
    labels = g.values(keys)
    assert np.array_equal(running.of([labels])["v"], whole)  # bit for bit
    assert not np.array_equal(window_totals, whole)  # what merging the windows' own sums would give

"""The op tables summed a window of rows at a time (profiler/analysis/ops.py, `kernels.grouping.merged_groups`)
are the tables of the whole run, exactly, on real Kineto captures: windows of any size, with the launches'
device columns, the distinct input shapes and the first op's labels of each group."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.launches import launches
from profiler.analysis.ops import op_detail_table, op_shape_table, op_type_table
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.grouping import merged_groups

TABLES = {"op_type": op_type_table, "op_detail": op_detail_table, "op_shape": op_shape_table}


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

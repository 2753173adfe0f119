"""An op table whose text columns are not categorical (another source's) is coded TEXT_WINDOW rows at a time
(grouping.codes_and_labels): its codes are pd.factorize's of the whole column, and the timeline, kernel table and
op tables made from it are those of the categorical table, exactly, on real Kineto captures, whatever the window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.kernels import kernel_table
from profiler.analysis.launches import launches
from profiler.analysis.ops import op_detail_table, op_shape_table, op_type_table
from profiler.analysis.steps import ensure_steps
from profiler.export.event_file import write_run_events
from profiler.export.timeline_model import timeline_events
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels import grouping
from profiler.kernels.grouping import codes_and_labels

CAPTURES = ["sampled_rank-0", "nccl_data", "alexnet"]
TEXT = ["device", "stream", "name", "op_type", "category", "shapes"]
WINDOWS = [5, 997]


def _runs(captures, capture: str):
    """The capture's run as imported (categorical text) and with its text columns as objects."""
    run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    text = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    text.ops = text.ops.assign(**{column: text.ops[column].astype(object) for column in TEXT})
    return run, text


@pytest.mark.parametrize("capture", CAPTURES)
def test_text_columns_coded_in_windows_are_factorized_whole(captures, capture: str, monkeypatch) -> None:
    _, text = _runs(captures, capture)
    for column in TEXT:
        codes, uniques = pd.factorize(text.ops[column].to_numpy(), sort=False)
        for window in WINDOWS:
            monkeypatch.setattr(grouping, "TEXT_WINDOW", window)
            got, labels = codes_and_labels(text.ops[column])
            assert np.array_equal(got, codes) and labels.tolist() == uniques.tolist(), column
    assert len(pd.unique(text.ops["name"])) > 20  # not vacuous: names first met in many windows


def _assert_same_events(got, expected) -> None:
    for block in ("complete", "points"):
        g, e = getattr(got, block), getattr(expected, block)
        assert g.specs == e.specs, block
        for field in ("key", "ts_ns", "dur_ns", "step"):
            assert np.array_equal(getattr(g, field), getattr(e, field)), (block, field)
        assert np.array_equal(getattr(got, f"{block}_order"), getattr(expected, f"{block}_order")), block
    for field, values in vars(expected.flows).items():
        assert np.array_equal(getattr(got.flows, field), values), field
    assert got.lanes.meta == expected.lanes.meta and got.lane_pairs == expected.lane_pairs


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_timeline_of_text_columns_coded_in_windows_is_the_categoricals(captures, capture, monkeypatch) -> None:
    run, text = _runs(captures, capture)
    expected = timeline_events(run)
    for window in WINDOWS:
        monkeypatch.setattr(grouping, "TEXT_WINDOW", window)
        _assert_same_events(timeline_events(text), expected)
    assert len(expected.complete.specs) > 20


@pytest.mark.parametrize("capture", CAPTURES)
def test_kernel_and_op_tables_of_text_coded_in_windows_are_the_categoricals(captures, capture, monkeypatch) -> None:
    run, text = _runs(captures, capture)
    launched = launches(run.ops)
    tables = (kernel_table, op_type_table, op_detail_table, op_shape_table)
    expected = [table(run.ops, launched) for table in tables]
    for window in WINDOWS:
        monkeypatch.setattr(grouping, "TEXT_WINDOW", window)
        for table, want in zip(tables, expected):
            pd.testing.assert_frame_equal(table(text.ops, launched, window_rows=4099), want, check_dtype=False)
    assert len(expected[1]) > 10


@pytest.mark.parametrize("capture", ["nccl_data", "alexnet"])
def test_an_event_file_whose_flow_heads_are_counted_in_chunks_is_the_same_bytes(
    captures, capture, tmp_path, monkeypatch
):
    """event_file._flow_heads counts the lanes each flow phase uses a chunk of points at a time: with chunks of 7
    points the event file is the same bytes as with one chunk."""
    run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    assert len(timeline_events(run).flows.host_lane) > 7  # launches to flow from, over several chunks
    whole = write_run_events(run, tmp_path / "whole.arrow").read_bytes()
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    assert write_run_events(run, tmp_path / "chunks.arrow").read_bytes() == whole

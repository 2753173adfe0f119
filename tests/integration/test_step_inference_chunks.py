"""Step inference a chunk of launches at a time (profiler/analysis/steps.py): the lanes built into spill files, the
spans and ops of a thread merged as two start-ordered sequences, the running maxima carried across chunks. With
chunks of 7 launches and every array spilled, real captures without step markers get the steps and the sentence
that one chunk gives (and that the whole-array code gave: the numbers below)."""

from __future__ import annotations

import gzip
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.steps import (
    Launches,
    capture_extent,
    find_period,
    infer_steps,
    merged,
    work_reach,
)
from profiler.importers.kineto import read_kineto_trace
from profiler.importers.mindspore import read_mindspore_dir
from profiler.model import Run

WITH_STACK = Path("recorded") / "views" / "torch_memory_modules" / "raw" / "r0-p12781-torch-0.json.gz"

#: capture -> (lane, launches per period, what a period holds, steps, boundary, rule, partial first, partial last)
EXPECTED = {
    "with_stack": (
        "thread 12781 (python)",
        371,
        "2 spans + 373 ops",
        7,
        "nn.Module: Net_0",
        "after the optimizer step",
        False,
        False,
    ),
    "diff_control": (
        "thread 3113936 (python3.8)",
        4208,
        "36 spans + 4080 ops",
        7,
        "## wait_sparse_data_dist ##",
        "after the optimizer step",
        False,
        True,
    ),
    "mindspore": (
        "cpu thread 0",
        43,
        "43 ops",
        50,
        "Default/network-WithLossCell/_backbone-Net/features-SequentialCell/0-Conv2d/Conv2D-op0",
        "longest idle gap",
        False,
        False,
    ),
}


def _run(captures: Path, capture: str, tmp_path: Path) -> Run:
    """A real capture without step markers: the with_stack torch trace (recorded without a schedule), a Kineto trace
    with its ProfilerStep#N annotations taken out, the MindSpore graph-mode CPU capture."""
    if capture == "with_stack":
        return read_kineto_trace(captures / WITH_STACK)
    if capture == "mindspore":
        return read_mindspore_dir(captures / "mindspore_cpu" / "cnn_50steps_ascend_ms")[0]
    trace = json.loads(gzip.open(captures / "kineto" / f"{capture}.json.gz").read())
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if not re.match(r"ProfilerStep#\d+", str(e.get("name", "")))
    ]
    path = tmp_path / f"{capture}.json"
    path.write_text(json.dumps(trace))
    return read_kineto_trace(path)


def _figures(inference) -> tuple:
    return (
        inference.lane,
        inference.period,
        inference.composition,
        inference.steps,
        inference.boundary,
        inference.rule,
        inference.partial_first,
        inference.partial_last,
    )


@pytest.mark.parametrize("capture", sorted(EXPECTED))
def test_steps_inferred_seven_launches_at_a_time_are_the_whole_ones(captures, tmp_path, monkeypatch, capture):
    run = _run(captures, capture, tmp_path)
    extent = capture_extent(run)
    whole_steps, whole, _ = infer_steps(run, extent)
    assert _figures(whole) == EXPECTED[capture]
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    with spill.spilling(tmp_path, min_bytes=1):
        assert capture_extent(run) == extent
        steps, inference, lane = infer_steps(run, extent)
        assert spill.is_spilled(lane.codes) and spill.is_spilled(lane.end_ns)
    assert inference == whole
    pd.testing.assert_frame_equal(steps, whole_steps)
    assert len(steps) == EXPECTED[capture][3] and steps["start_ns"].iloc[0] == extent[0]


def test_a_table_out_of_start_order_is_sorted_first(captures, tmp_path, monkeypatch):
    """Ops and spans in shuffled rows (a table not in start order): the lanes are sorted by start,
    spans first on ties, and the steps are those of the table in start order."""
    run = _run(captures, "with_stack", tmp_path)
    extent = capture_extent(run)
    in_order, inference, _ = infer_steps(run, extent)
    rng = np.random.default_rng(0)
    run.ops = run.ops.iloc[rng.permutation(len(run.ops))].reset_index(drop=True)
    run.spans = run.spans.iloc[rng.permutation(len(run.spans))].reset_index(drop=True)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    shuffled, again, _ = infer_steps(run, capture_extent(run))
    assert again == inference and _figures(again) == EXPECTED["with_stack"]
    pd.testing.assert_frame_equal(shuffled, in_order)


def _thread_launches(run: Run) -> tuple[Launches, Launches, np.ndarray, np.ndarray]:
    """The with_stack trace's spans and ops (ops coded after the span names), and the main thread's rows of each."""
    spans, names = Launches.of(run.spans)
    ops, _ = Launches.of(run.ops, len(names))
    thread = run.spans["tid"].to_numpy()[0]
    stream = str(run.threads.set_index("tid")["name"].astype(str)[thread])  # its ops' host stream
    return (
        spans,
        ops,
        np.flatnonzero(run.spans["tid"].to_numpy() == thread),
        np.flatnonzero((run.ops["stream"].astype(str) == stream).to_numpy()),
    )


def test_spans_and_ops_merge_as_a_stable_sort_of_their_concatenation(captures, tmp_path, monkeypatch):
    """Merged 7 launches at a time, a thread's spans and ops (and a sequence with a copy of itself: every start tied)
    are in the order np.argsort(kind="stable") gives their concatenation: spans first on equal starts."""
    run = _run(captures, "with_stack", tmp_path)
    spans, ops, span_rows, op_rows = _thread_launches(run)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    first, second = spans.in_start_order(span_rows), ops.in_start_order(op_rows)
    assert len(first.codes) >= 10 and len(second.codes) > 1000
    for a, b in ((first, second), (second, first), (second, second._replace(codes=second.codes + 10_000))):
        together = merged(a, b)
        order = np.argsort(np.concatenate([a.start_ns, b.start_ns]), kind="stable")
        for column, one, other in zip(together, a, b):
            assert np.array_equal(column, np.concatenate([one, other])[order])
    tied = merged(second, second._replace(codes=second.codes + 10_000))
    assert np.array_equal(tied.codes[:2], [second.codes[0], second.codes[0] + 10_000])  # the first sequence first


def test_the_work_reach_carried_across_chunks_is_the_running_maximum(captures, tmp_path, monkeypatch):
    """The latest end of the regular work before each launch, read 7 launches at a time, is the whole lane's running
    maximum (np.maximum.accumulate) one launch back."""
    run = _run(captures, "with_stack", tmp_path)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    lane = infer_steps(run, capture_extent(run))[2]  # the periodic one
    assert lane.label == EXPECTED["with_stack"][0]
    period, why = find_period(lane.codes, len(lane.names), lane.role != "")
    assert period is not None, why
    reach = work_reach(lane, period)
    counted = reach.counted[lane.codes]
    assert 0 < counted.sum() < len(counted)
    whole = np.maximum.accumulate(np.where(counted, lane.end_ns, np.iinfo(np.int64).min))
    at = np.arange(len(lane.codes))
    expected = np.concatenate([[np.iinfo(np.int64).min], whole[:-1]])
    assert np.array_equal(reach.before(at), expected)
    assert np.array_equal(reach.before(at[5::13]), expected[5::13])
    assert np.array_equal(np.concatenate([before for _, before in reach.chunks()]), expected)


def test_capture_extent_in_chunks(captures, tmp_path, monkeypatch):
    """The first and last time of anything recorded, 7 rows at a time: the whole columns' minimum and maximum."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = _run(captures, "with_stack", tmp_path)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    ends = [t["start_ns"] + t["dur_ns"] for t in (run.spans, run.ops)]
    times = [run.spans["start_ns"], run.ops["start_ns"], run.instants["time_ns"], *ends]
    times = [t for t in times if len(t)]
    assert capture_extent(run) == (min(int(t.min()) for t in times), max(int(t.max()) for t in times))

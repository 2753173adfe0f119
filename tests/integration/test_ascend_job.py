"""Ascend JOB3 raw slices -> MindSpore-format files (byte-identical to the 2020 gold) and our schema."""

from __future__ import annotations

import csv
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.export.mindspore import write_mindspore_outputs
from profiler.importers.ascend import ascend_job_devices, is_ascend_job_dir, read_ascend_job, to_run
from profiler.model import OP_COLUMNS, SPAN_COLUMNS, STEP_COLUMNS

GOLD_FILES = [
    "step_trace_raw_1_detail_time.csv",
    "step_trace_point_info.json",
    "aicore_intermediate_1_type.csv",
    "aicore_intermediate_1_detail.csv",
    "framework_raw_1.csv",
    "output_op_compute_time_1.txt",
    "output_timeline_data_1.txt",
    "min_cycle_counter_1.txt",
    "timeline_display_1.json",
    "timeline_summary_1.json",
]


@pytest.fixture(scope="module")
def job(job3: Path):
    return read_ascend_job(job3)


@pytest.fixture(scope="module")
def run(job):
    return to_run(job)


def _gold_steps(gold: Path) -> tuple[list[dict], dict]:
    """The gold step-trace rows (as ints) and its average row."""
    with open(gold / "step_trace_raw_1_detail_time.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: int(v) for k, v in r.items()} for r in rows[:-1]], rows[-1]


@pytest.mark.parametrize("name", GOLD_FILES)
def test_mindspore_outputs_are_byte_identical_to_gold(job, gold: Path, tmp_path: Path, name: str):
    written = {p.name for p in write_mindspore_outputs(job, tmp_path)}
    assert written == set(GOLD_FILES)
    assert (tmp_path / name).read_bytes() == (gold / name).read_bytes()


def test_job_tables_have_the_documented_sizes(job):
    assert job.device_id == 1 and job.backend == "vm"
    assert len(job.hwts) == 62847
    assert (job.hwts["log_type"] == 0).sum() == 31462 and (job.hwts["log_type"] == 1).sum() == 31385
    assert len(job.tasks) == 199 and len(job.graph) == 199 and len(job.trace) == 8372
    assert len(job.executions) == 2817 and len(job.steps) == 322 and len(job.reduces) == 322 * 11
    assert job.points[1] == "Default/Cast-op6" and job.points[2] == "Default/TransData-op7"
    assert job.warnings == []


def test_run_ops_match_gold_counts(run, gold: Path):
    ops = run.ops
    assert list(ops.columns) == list(OP_COLUMNS)
    assert len(ops) == 2817
    assert ops["name"].nunique() == 199
    assert ops["op_type"].nunique() == 29
    assert set(ops["device"]) == {"npu:1"} and set(ops["source"]) == {"ascend"}
    assert set(ops["category"]) == {"compute"}  # JOB3's collectives are not HWTS-timed tasks
    assert (ops["self_ns"] == ops["dur_ns"]).all() and (ops["start_ns"] >= 0).all()
    gold_types = pd.read_csv(gold / "aicore_intermediate_1_type.csv")
    per_type = ops.groupby("op_type")["name"].nunique()
    assert per_type.to_dict() == dict(zip(gold_types["op_type"], gold_types["execution_frequency"]))
    # Per-op mean duration (ns) against the gold per-op average (ms): same executions, same values.
    gold_avg = pd.read_csv(gold / "aicore_intermediate_1_detail.csv").set_index("full_op_name")["execution_time"]
    mean_ms = ops.groupby("name")["dur_ns"].mean() / 1e6
    np.testing.assert_allclose(mean_ms.loc[gold_avg.index].to_numpy(), gold_avg.to_numpy(), rtol=1e-12)


def test_run_op_times_are_ticks_times_ten_from_the_origin(run, gold: Path):
    timeline = pd.read_csv(gold / "output_timeline_data_1.txt", skipinitialspace=True)
    origin_ns = run.info["clock"]["origin_device_ns"]
    expected_start = np.rint(timeline["start_time(ms)"].to_numpy() * 1e6).astype(np.int64) - origin_ns
    assert origin_ns == 43806841592 * 10  # the first op execution is the earliest device timestamp
    assert np.array_equal(np.sort(run.ops["start_ns"].to_numpy()), np.sort(expected_start))
    assert run.ops["dur_ns"].sum() == round(timeline["duration(ms)"].sum() * 1e6)
    assert run.info["clock"]["origin_unix_ns"] == 0


def test_run_steps_and_averages_match_gold(run, gold: Path):
    steps = run.steps
    assert list(steps.columns) == list(STEP_COLUMNS)
    assert len(steps) == 322 and steps["step"].tolist() == list(range(322))
    rows, average = _gold_steps(gold)
    origin_ticks = Fraction(run.info["clock"]["origin_device_ns"], 10)
    assert steps["start_ns"].tolist() == [(r["start_point"] - origin_ticks) * 10 for r in rows]
    assert steps["bp_end_ns"].tolist() == [(r["bp_point"] - origin_ticks) * 10 for r in rows]
    later = steps.iloc[1:]  # device steps 2..N, as the gold average row
    for column, start, end in (
        ("iteration_interval", "start_ns", "fp_start_ns"),
        ("fp_and_bp", "fp_start_ns", "bp_end_ns"),
        ("tail", "bp_end_ns", "end_ns"),
    ):
        mean_ticks = Fraction(int((later[end] - later[start]).sum()), 10 * len(later))
        assert round(mean_ticks) == int(average[column]), column  # round(Fraction) is half-to-even


def test_all_reduce_intervals_are_phase_spans_one_lane_per_stream(run, gold: Path):
    spans, threads = run.spans, run.threads
    assert list(spans.columns) == list(SPAN_COLUMNS)
    assert len(spans) == 3542 and set(spans["kind"]) == {"phase"} and set(spans["name"]) == {"all_reduce"}
    rows, _ = _gold_steps(gold)
    duration_columns = [c for c in rows[0] if c.startswith("stream_") and not c.endswith("_point")]
    assert spans["dur_ns"].sum() == 10 * sum(r[c] for r in rows for c in duration_columns)
    assert threads["os_tid"].tolist() == list(range(520, 541, 2))
    lane_of = dict(zip(threads["tid"], threads["os_tid"]))
    per_stream = spans.groupby(spans["tid"].map(lane_of))["dur_ns"].sum()
    for sid, total in per_stream.items():
        assert total == 10 * sum(r[f"stream_{sid}_parallel_0"] for r in rows)


def test_ops_are_assigned_to_the_step_containing_their_start(run):
    ops, steps = run.ops, run.steps.set_index("step")
    inside = ops[ops["step"] >= 0]
    assert (
        (inside["start_ns"].to_numpy() >= steps.loc[inside["step"], "start_ns"].to_numpy())
        & (inside["start_ns"].to_numpy() < steps.loc[inside["step"], "end_ns"].to_numpy())
    ).all()
    # The first ops start before the first step (whose start is its FP point): only those are outside.
    outside = ops[ops["step"] < 0]
    assert (outside["start_ns"] < steps["start_ns"].min()).all()
    assert ops["step"].max() == 14  # mapped executions cover only the first ~15 iterations


def test_detectors(job3: Path, gold: Path, tmp_path: Path):
    assert is_ascend_job_dir(job3) and ascend_job_devices(job3) == [1]
    assert not is_ascend_job_dir(gold) and not is_ascend_job_dir(tmp_path) and not is_ascend_job_dir(tmp_path / "x")


def _union_ticks(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Length of the union of [start, end) intervals clipped to [lo, hi)."""
    covered, reach = 0, lo
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, hi)
        if end > start:
            covered += end - start
            reach = end
    return covered


def test_step_trace_analysis_of_the_run_matches_the_device_step_trace(run, gold: Path):
    from profiler.analysis.step_trace import step_trace

    trace = step_trace(run.steps, run.spans, run.instants, run.ops, run.queues)
    rows, _ = _gold_steps(gold)
    blocks = [c for c in rows[0] if c.startswith("stream_") and not c.endswith("_point")]
    assert len(trace) == 322
    assert set(trace["fp_start_source"]) == {"marked"} and set(trace["bp_end_source"]) == {"marked"}
    for row, got in zip(rows, trace.itertuples()):
        assert got.iteration_gap_ms == pytest.approx(row["iteration_interval"] / 1e5, abs=1e-9)
        assert got.fp_bp_ms == pytest.approx(row["fp_and_bp"] / 1e5, abs=1e-9)
        assert got.tail_ms == pytest.approx(row["tail"] / 1e5, abs=1e-9)
        union = _union_ticks(
            [(row[f"{c}_start_point"], row[f"{c}_end_point"]) for c in blocks if row[c]],
            row["start_point"],
            row["end_point"],
        )
        assert got.all_reduce_ms == pytest.approx(union / 1e5, abs=1e-9)

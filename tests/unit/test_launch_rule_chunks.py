"""The launch-bound rule (findings/launch.py) reads the lane's ops a chunk at a time from spill files: its figures
(idle share, median op, ops per step) are those of the whole arrays, on profview's recordings of a launch-bound loop
(caught) and of a loop of few larger ops (not caught); and the exact median by counting is numpy's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from profiler import spill
from profiler.analysis.advisor import framework_of, resolve_thresholds
from profiler.analysis.findings import launch, question_of
from profiler.analysis.findings.base import Context
from profiler.analysis.results import RankData, analyse_run
from profiler.kernels.intervals import covered_ns
from profiler.kernels.selection import kth_smallest, median
from profiler.postprocess.recording import load_rank

from support.recorded import RECORDED

CAUGHT, NOT_CAUGHT = "host_bound_many_tiny_ops", "float64_batchnorm_detour"


def _tables(name: str) -> tuple[RankData, Context]:
    """The tables the rule reads of an advisor loop's recording (rank 0), as the report reads them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = load_rank(RECORDED / "advisor" / name, 0)
        analysis = analyse_run(run)
    thresholds = resolve_thresholds(None, {})
    return RankData(analysis, thresholds), Context(run.rank, framework_of(run.info), thresholds)


def _whole_figures(data: RankData) -> tuple[float, float, float]:
    """Idle share, median op (µs) and ops per step as whole-array numpy gives them (the lane: host ops of the
    stepping thread, as these CPU-only recordings have no device ops)."""
    ops = data.ops[(data.ops["source"] != "marker").to_numpy() & (data.ops["stream"] == data.step_lane).to_numpy()]
    steps = data.steps.captured
    fp = np.round((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy() * 1e6).astype(np.int64)
    bp = fp + np.round(steps["fp_bp_ms"].to_numpy() * 1e6).astype(np.int64)
    start = ops["start_ns"].to_numpy(np.int64)
    busy = covered_ns(start, start + ops["dur_ns"].to_numpy(np.int64), fp, bp).sum()
    per_step = float(np.isin(ops["step"].to_numpy(), steps["step"].to_numpy()).sum()) / len(steps)
    return 100.0 * (1.0 - busy / float((bp - fp).sum())), float(np.median(ops["dur_ns"].to_numpy())) / 1e3, per_step


@pytest.mark.parametrize("name", [CAUGHT, NOT_CAUGHT])
def test_figures_read_in_chunks_from_spill_files_are_the_whole_arrays(name, monkeypatch, tmp_path):
    data, ctx = _tables(name)
    assert not (data.ops["device"] != "cpu").any() and len(data.steps.captured) > 5  # the host-op lane, steps
    expected = _whole_figures(data)
    whole = launch.lane_figures(data)
    assert (whole.idle_share, whole.median_us, whole.per_step) == expected and not whole.on_device
    monkeypatch.setattr(spill, "CHUNK_ROWS", 500)
    monkeypatch.setattr(launch, "LANE_CHUNK", 500)
    with spill.spilling(tmp_path, min_bytes=0):
        assert launch.lane_figures(data) == whole
        rows, _ = launch.lane_rows(data.ops, data.step_lane)
        assert spill.is_spilled(rows) and len(rows) > 4 * 500  # many chunks, in files
        assert question_of("host_bound:launch").rank.answer(data, ctx) == launch.find(data, ctx)


def test_a_launch_bound_loop_is_caught_and_a_loop_of_larger_ops_is_not():
    data, ctx = _tables(CAUGHT)
    (finding,) = launch.find(data, ctx)
    assert finding.kind == "host_bound" and finding.metrics["median_op_us"] < 50
    assert finding.metrics["idle_share_pct"] >= 30 and finding.metrics["ops_per_step"] >= 50
    data, ctx = _tables(NOT_CAUGHT)
    figures = launch.lane_figures(data)
    assert launch.find(data, ctx) == [] and figures is not None
    assert figures.idle_share < ctx.thresholds["host_idle_pct"] or figures.median_us >= 50


@pytest.mark.parametrize("rows", [None, 3])
def test_the_median_by_counting_is_numpys(rows):
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 10, 11, 1000, 1001):
        for values in (
            rng.integers(0, 5, n),  # repeated values
            rng.lognormal(8, 2, n).astype(np.int64),  # durations: most short, a long tail
            rng.integers(-(2**62), 2**62, n),  # wider than a pass's bins several times over
            rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32),
        ):
            assert median(values, rows) == float(np.median(values))
            k = int(rng.integers(0, n))
            assert kth_smallest(values, k, rows) == np.partition(values, k)[k]
    extremes = np.array([np.iinfo(np.int64).min, 0, 5, np.iinfo(np.int64).max])
    assert median(extremes, rows) == float(np.median(extremes)) == 2.5

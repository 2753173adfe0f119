"""The device findings read the device timeline a device and a chunk of rows at a time (analysis/findings/device.py:
ROWS executions or gaps, the gaps and selections spooled into spill files a batch at a time, the kernels' family
and precision coded CLASSIFY_ROWS at a time): their findings are those of one chunk (the whole table) for any
chunk size, and the figures with float sums are the whole-table computations' bit for bit, on real captures."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis import kernel_families
from profiler.analysis.device_time import IDLE_CAUSES, idle_gaps
from profiler.analysis.findings import device as device_module
from profiler.analysis.findings.device import DeviceTimeline, causes_per_step, in_steps_ms, median, steady_windows
from profiler.analysis.findings.device_launch import host_gap_figures
from profiler.analysis.results import RankData, analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.intervals import covered_ns

GPU_TRACES = ["sampled_rank-0", "nccl_data", "alexnet", "diff_test"]
#: every device finding's threshold at 0, so each finding (and its evidence's listings) is made
EVERY_FINDING = dict.fromkeys(
    (
        "device_sync_pct",
        "device_host_wait_pct",
        "input_gap_pct",
        "device_dependency_pct",
        "memcpy_pct",
        "fp32_matrix_pct",
        "fp64_kernel_pct",
        "compute_bound_pct",
        "sm_underfill_pct",
        "comm_exposed_pct",
    ),
    0.0,
)
#: the device findings' kinds
DEVICE_KINDS = {"device_sync", "host_bound", "input_bound", "device_idle", "memcpy_bound", "device_precision"}
DEVICE_KINDS |= {"compute_bound", "low_occupancy", "comm_bound"}


def _run(captures, capture: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))


def _small_chunks(monkeypatch, rows: int) -> None:
    monkeypatch.setattr(device_module, "ROWS", rows)
    monkeypatch.setattr(device_module.Spool, "BATCH", rows + 1)
    monkeypatch.setattr(kernel_families, "CLASSIFY_ROWS", rows + 2)


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_device_findings_read_a_chunk_at_a_time_are_the_whole_tables(captures, capture, monkeypatch, tmp_path):
    run = _run(captures, capture)
    whole = analyse_run(run, EVERY_FINDING).extra_json["report"]["findings"]
    kinds = {f["kind"] for f in whole} & DEVICE_KINDS
    assert {"compute_bound", "host_bound", "device_precision"} <= kinds and len(kinds) >= 5, kinds  # not vacuous
    for rows in (3, 64):
        _small_chunks(monkeypatch, rows)
        with spill.spilling(tmp_path, min_bytes=64):  # the spooled batches and selections in spill files
            assert analyse_run(run, EVERY_FINDING).extra_json["report"]["findings"] == whole, rows


def _timeline(captures, capture: str) -> tuple[DeviceTimeline, RankData]:
    analysis = analyse_run(_run(captures, capture))
    data = RankData(analysis, analysis.extra_json["report"]["thresholds"])
    return data.device, data


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_causes_per_step_summed_from_spilled_gaps_are_the_whole_tables_bit_for_bit(captures, capture, monkeypatch):
    timeline, data = _timeline(captures, capture)
    gaps = idle_gaps(timeline._ops, timeline._data_wait)  # as the causes were summed from one table
    w_start, w_end = steady_windows(data.steps)
    start, end = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    inside = covered_ns(w_start, w_end, start, end) / np.maximum(end - start, 1)
    per = pd.DataFrame({c: gaps[f"{c}_ns"].to_numpy(float) * inside * 1e-6 / len(w_start) for c in IDLE_CAUSES})
    expected = per.groupby(gaps["device"].to_numpy()).sum()
    assert (expected.to_numpy() > 0).sum() >= 3  # not vacuous
    _small_chunks(monkeypatch, 5)
    pd.testing.assert_frame_equal(causes_per_step(timeline, data.steps), expected, check_exact=True)


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_host_gap_figures_are_the_whole_tables(captures, capture, monkeypatch):
    timeline, data = _timeline(captures, capture)
    gaps, ex = idle_gaps(timeline._ops, timeline._data_wait), timeline.executions
    w_start, w_end = steady_windows(data.steps)
    _small_chunks(monkeypatch, 7)
    for device in timeline.gaps:
        mine = gaps[(gaps["device"] == device) & ((gaps["host_ns"] + gaps["launch_ns"]) > 0)]
        g_start = mine["start_ns"].to_numpy()
        kept = covered_ns(w_start, w_end, g_start, g_start + 1) > 0
        lengths = (mine["end_ns"] - mine["start_ns"]).to_numpy()[kept]
        waited = (mine["host_ns"] + mine["launch_ns"]).to_numpy()[kept]
        executions = ex[(ex["device"] == device).to_numpy()]
        e_start = executions["start_ns"].to_numpy()
        durations = (executions["end_ns"].to_numpy() - e_start)[covered_ns(w_start, w_end, e_start, e_start + 1) > 0]
        assert len(lengths) > 10 and len(durations) > 10  # not vacuous
        n = len(w_start)
        assert host_gap_figures(timeline, device, data.steps, 100.0) == {
            "gaps_per_step": float(len(lengths)) / n,
            "median_gap_us": float(np.median(lengths)) / 1e3,
            "short_gap_share_pct": 100.0 * float(waited[lengths < 100_000].sum()) / max(float(waited.sum()), 1.0),
            "executions_per_step": float(len(durations)) / n,
            "median_execution_us": float(np.median(durations)) / 1e3,
        }


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_unions_in_the_steps_settled_a_chunk_at_a_time_are_the_whole_ones(captures, capture, monkeypatch):
    timeline, data = _timeline(captures, capture)
    ex = timeline.executions
    start, end = ex["start_ns"].to_numpy(np.int64), ex["end_ns"].to_numpy(np.int64)
    w_start, w_end = steady_windows(data.steps)
    shuffled = np.random.default_rng(0).permutation(len(start))
    for rows in (1, 4, 1000):
        monkeypatch.setattr(device_module, "ROWS", rows)
        for order in (np.arange(len(start)), shuffled):
            s, e = start[order], end[order]
            assert in_steps_ms(s, e, data.steps) == float(covered_ns(s, e, w_start, w_end).sum()) * 1e-6 / len(w_start)


def test_the_median_of_a_spilled_array_is_numpys(tmp_path):
    rng = np.random.default_rng(1)
    with spill.spilling(tmp_path, min_bytes=64):
        for n in (1, 2, 3, 10, 11, 1000, 1001):
            values = rng.integers(0, 50, n).astype(np.int64)  # repeated values
            copy = spill.spilled(values.copy())
            assert spill.is_spilled(copy) or n * 8 < 64
            assert median(copy) == float(np.median(values))
    assert median(np.empty(0, dtype=np.int64)) is None

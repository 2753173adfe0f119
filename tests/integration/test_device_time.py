"""The device time breakdown (profiler/analysis/device_time.py) beyond the comparison with HTA
(tests/integration/test_kineto_import.py): Ascend device logs, the reference device against what its host
did, the sync calls it recognises, and what reaches the output files."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler
from profiler.analysis.device_time import IDLE_CAUSES, device_time, idle_gaps, runtime_calls
from profiler.analysis.results import analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.formats.columns import REPORT_DEVICE_COLUMNS
from profiler.formats.tables import read_csv
from profiler.importers.ascend import read_ascend_job, to_run
from profiler.importers.kineto import read_kineto_trace
from profiler.postprocess.imported import import_kineto_trace
from profview_reference_device.device import AscendReferenceDevice

GPU_TRACES = ["alexnet", "diff_control", "diff_test", "nccl_data", "sampled_rank-0", "sampled_rank-1"]


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of intervals, by a plain sort-and-sweep: the independent reference."""
    total, reach_start, reach_end = 0, None, None
    for s, e in sorted(intervals):
        if reach_end is None or s > reach_end:
            total += (reach_end - reach_start) if reach_end is not None else 0
            reach_start, reach_end = s, e
        else:
            reach_end = max(reach_end, e)
    return total + ((reach_end - reach_start) if reach_end is not None else 0)


def test_ascend_job_breakdown(job3: Path):
    """The Ascend 910 log (JOB3): one device, every op a compute execution; busy is the union of its
    ops over its 11 streams; no launch is recorded, so idle time has no host-side cause but data."""
    run = to_run(read_ascend_job(job3))
    (row,) = device_time(run.ops).to_dict("records")
    ops = run.ops
    start, end = ops["start_ns"].to_numpy(), (ops["start_ns"] + ops["dur_ns"]).to_numpy()
    busy = _union_ns(list(zip(start.tolist(), end.tolist())))
    assert row["device"] == "npu:1" and row["executions"] == 2817 and row["streams"] == 11
    assert row["window_ms"] == pytest.approx((end.max() - start.min()) / 1e6, abs=1e-9)
    assert row["busy_ms"] == pytest.approx(busy / 1e6, abs=1e-9)
    assert row["compute_pct"] == pytest.approx(row["busy_pct"]) and row["non_compute_pct"] == pytest.approx(0)
    assert row["comm_compute_overlap_pct"] is None
    assert row["idle_other_ms"] == pytest.approx(row["idle_ms"], abs=1e-9)


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_idle_causes_add_up(captures: Path, trace: str):
    """Per device the causes tile the idle time, and per gap they tile the gap."""
    run = read_kineto_trace(captures / "kineto" / f"{trace}.json.gz")
    row = device_time(run.ops).iloc[0]
    assert row["busy_pct"] + row["idle_pct"] == pytest.approx(100.0)
    assert sum(row[f"idle_{c}_ms"] for c in IDLE_CAUSES) == pytest.approx(row["idle_ms"], abs=1e-6)
    gaps = idle_gaps(run.ops)
    assert (gaps[[f"{c}_ns" for c in IDLE_CAUSES]].sum(axis=1) == gaps["end_ns"] - gaps["start_ns"]).all()
    assert (gaps[[f"{c}_ns" for c in IDLE_CAUSES]] >= 0).all().all()


def test_sync_calls(captures: Path):
    """What blocks the host: synchronise calls by name, and the copies that involve pageable memory
    (alexnet's 16 `Memcpy HtoD (Pageable -> Device)`); an async device-to-device copy is a launch."""
    kinds = {}
    for trace in ("alexnet", "nccl_data"):
        calls = runtime_calls(read_kineto_trace(captures / "kineto" / f"{trace}.json.gz").ops)
        kinds[trace] = calls.groupby(["kind", "name"]).size().to_dict()
    assert {name: n for (kind, name), n in kinds["alexnet"].items() if kind == "sync"} == {
        "cudaStreamSynchronize": 16,
        "cudaDeviceSynchronize": 5,
        "cudaMemcpyAsync": 16,
    }
    assert {name: n for (kind, name), n in kinds["nccl_data"].items() if kind == "sync"} == {
        "cudaEventSynchronize": 24,
        "cudaDeviceSynchronize": 1,
    }
    assert kinds["nccl_data"][("launch", "cudaMemcpyAsync")] == 960  # Memcpy DtoD: asynchronous
    assert kinds["nccl_data"][("launch", "cudaLaunchKernel")] == 2550
    assert ("other", "cudaEventRecord") in kinds["nccl_data"]


def test_report_and_step_trace_of_an_imported_trace(captures: Path, tmp_path: Path):
    """import-kineto writes the breakdown into report_{rank}.json and per step into step_trace; a
    CPU-only trace gets an empty devices list and empty step cells, read back as NaN."""
    import_kineto_trace(captures / "kineto" / "nccl_data.json.gz", tmp_path / "gpu")
    report = json.loads((tmp_path / "gpu" / "report_0.json").read_text())
    (device,) = report["devices"]
    assert sorted(device) == sorted(REPORT_DEVICE_COLUMNS)
    assert device["device"] == "cuda:0" and device["idle_pct"] == pytest.approx(76.16, abs=0.005)
    trace = read_csv(tmp_path / "gpu" / "step_trace_0.csv", "step_trace")
    assert np.allclose(trace["device_busy_ms"] + trace["device_idle_ms"], trace["total_ms"], atol=2e-6)
    assert (trace["device_busy_ms"] > 0).all() and trace["device_busy_ms"].sum() <= device["busy_ms"]

    import_kineto_trace(captures / "kineto" / "cpu_only.json.gz", tmp_path / "cpu")
    assert json.loads((tmp_path / "cpu" / "report_34.json").read_text())["devices"] == []
    lines = (tmp_path / "cpu" / "step_trace_34.csv").read_text().splitlines()
    assert lines[0].endswith(",device_busy_ms,device_idle_ms") and lines[1].endswith(",,")
    assert read_csv(tmp_path / "cpu" / "step_trace_34.csv", "step_trace")["device_busy_ms"].isna().all()


def test_reference_device_waits_for_data(tmp_path: Path):
    """The reference device runs two 10 ms kernels per step; between steps the host loads data for
    20 ms (a `data` phase) after waiting for the device: the device is busy >= 20 ms a step and its
    idle time between steps is data wait (no launch is recorded, so the rest is `other`)."""
    steps, kernel_s, data_s = 5, 0.010, 0.020
    profiler = Profiler(tmp_path / "run", host_counters=False, gpu_counters=False)
    dev = AscendReferenceDevice(profiler, streams=1)
    for _ in range(steps):
        with profiler.phase("data"):
            time.sleep(data_s)
        for k in range(2):
            dev.launch(f"Default/Work-op{k}", "Work", time.sleep, kernel_s)
        dev.synchronize()
        profiler.step()
    profiler.analyse(progress=False)
    (row,) = json.loads((tmp_path / "run" / "report_0.json").read_text())["devices"]
    assert row["device"] == "npu:0" and row["executions"] == 2 * steps
    assert row["busy_ms"] >= steps * 2 * kernel_s * 1000
    assert row["idle_data_ms"] >= (steps - 1) * data_s * 1000 * 0.99
    assert row["idle_data_ms"] + row["idle_other_ms"] == pytest.approx(row["idle_ms"], abs=0.002)
    trace = pd.read_csv(tmp_path / "run" / "step_trace_0.csv")
    assert (trace["device_busy_ms"] >= 2 * kernel_s * 1000 * 0.99).all()


def test_busy_time_outside_every_step_is_counted_and_said():
    """Kernels before the first step, between two steps that leave a hole, and after the last: the
    breakdown counts them (busy), and outside_steps_ms says how much of busy lies outside every step
    (the time HTA's per-step breakdown drops); a kernel straddling a step edge counts its outside part."""
    from profiler.model import OP_COLUMNS, conform

    ms = 1_000_000
    kernels = [(0, 2), (10, 15), (18, 22), (26, 27), (40, 45)]  # [start, end) in ms
    ops = conform(
        {
            "device": ["cuda:0"] * len(kernels),
            "stream": ["7"] * len(kernels),
            "name": [f"k{i}" for i in range(len(kernels))],
            "op_type": ["k"] * len(kernels),
            "category": ["compute"] * len(kernels),
            "start_ns": [s * ms for s, _ in kernels],
            "dur_ns": [(e - s) * ms for s, e in kernels],
            "correlation": list(range(len(kernels))),
        },
        OP_COLUMNS,
    )
    steps = (np.array([10, 20]) * ms, np.array([20, 30]) * ms)  # two steps [10, 20) and [20, 30)
    (row,) = device_time(ops, steps=steps).to_dict("records")
    assert row["busy_ms"] == pytest.approx(2 + 5 + 4 + 1 + 5)
    assert row["outside_steps_ms"] == pytest.approx(2 + 5)  # (0, 2) before, (40, 45) after
    (row,) = device_time(ops, steps=(np.array([12]) * ms, np.array([21]) * ms)).to_dict("records")
    assert row["outside_steps_ms"] == pytest.approx(2 + 2 + 1 + 1 + 5)  # 10-12 and 21-22 straddle the edges
    assert np.isnan(device_time(ops).iloc[0]["outside_steps_ms"])  # no steps given: not said


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_outside_steps_is_the_device_work_outside_the_profiler_steps_of_the_raw_trace(captures, trace):
    """On the real traces, from the raw JSON with a plain sweep: the union of device events (kernel,
    gpu_memcpy, gpu_memset) minus its part inside the ProfilerStep#N windows (a trace without them is
    one step over the whole capture: nothing outside)."""
    import gzip

    doc = json.loads(gzip.decompress((captures / "kineto" / f"{trace}.json.gz").read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    device = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    windows = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    if windows:
        inside = [(max(s, ws), min(e, we)) for s, e in device for ws, we in windows if min(e, we) > max(s, ws)]
        outside_us = _union_us(device) - _union_us(inside)
    else:
        outside_us = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # steps inferred for a trace without ProfilerStep
        run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{trace}.json.gz"))
    (row,) = analyse_run(run).extra_json["report"]["devices"]
    assert row["outside_steps_ms"] == pytest.approx(outside_us / 1e3, abs=0.002)


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of float intervals (µs), by sort and sweep."""
    total, lo, hi = 0.0, None, None
    for s, e in sorted(intervals):
        if hi is None or s > hi:
            total += (hi - lo) if hi is not None else 0.0
            lo, hi = s, e
        else:
            hi = max(hi, e)
    return total + ((hi - lo) if hi is not None else 0.0)

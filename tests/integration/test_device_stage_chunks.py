"""The device stages find their rows a chunk of the op table at a time and gather them into spill files
(analysis/device_time.py, gpu_summary.py, modules.py, ops.op_rows: spill.CHUNK_ROWS rows at a time): their rows
are the whole-table filters', and the stages' tables are those of one chunk (the whole table) for any chunk
size, on real captures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis import device_time
from profiler.analysis.device_time import PAGEABLE_COPY, SYNC_CALL
from profiler.analysis.gpu_summary import gpu_summary
from profiler.analysis.launches import launches
from profiler.analysis.modules import MODULE_PREFIX, module_rows, module_table
from profiler.analysis.ops import op_rows
from profiler.analysis.results import analyse_run
from profiler.analysis.step_activity import device_aware_steps
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.model import DEVICE_WORK_CATEGORIES

from support.kineto_builder import Trace

GPU_TRACES = ["sampled_rank-0", "nccl_data", "alexnet", "diff_test"]


pytestmark = pytest.mark.filterwarnings("ignore")  # the captures' own warnings


def _ops_in_chunks_of(rows: int, monkeypatch) -> None:
    """spill.CHUNK_ROWS set to `rows`, the executions to be found again."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    monkeypatch.setattr(device_time, "_EXECUTIONS", {})


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_the_device_stages_read_a_chunk_at_a_time_are_the_whole_ones(captures, capture, monkeypatch, tmp_path):
    run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    whole = analyse_run(run)
    assert len(whole.devices) and whole.devices["utilization_pct"].notna().all()  # not vacuous: a GPU summary
    for rows in (257, 4096):
        _ops_in_chunks_of(rows, monkeypatch)
        with spill.spilling(tmp_path, min_bytes=64):  # the rows and gathered columns in spill files
            chunked = analyse_run(run)
        for table in ("step_trace", "devices", "modules"):
            pd.testing.assert_frame_equal(getattr(chunked, table), getattr(whole, table), check_exact=True)
        assert chunked.extra_json["report"] == whole.extra_json["report"]


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_rows_found_a_chunk_at_a_time_are_the_whole_table_filters(captures, capture, monkeypatch, tmp_path) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    category, runtime = ops["category"], (ops["category"] == "runtime").to_numpy()
    work = (ops["device"] != "cpu").to_numpy() & category.isin(DEVICE_WORK_CATEGORIES).to_numpy()
    frames = (ops["device"] == "cpu").to_numpy() & (category == "python").to_numpy()
    modules = frames & ops["name"].astype(str).str.startswith(MODULE_PREFIX).to_numpy()
    _ops_in_chunks_of(61, monkeypatch)
    with spill.spilling(tmp_path, min_bytes=64):
        ex = device_time.device_executions(ops)
        calls = device_time._runtime_calls(ops, ex)
        found = module_rows(ops)
    assert len(ex) > 50 and np.array_equal(ex["row"], np.flatnonzero(work))
    assert np.array_equal(calls["start_ns"], ops["start_ns"].to_numpy()[runtime])
    assert np.array_equal(found, modules)
    # each call's kind as it was found over the whole tables at once
    corr, ex_corr = ops["correlation"].to_numpy()[runtime], ex["correlation"].to_numpy()
    copies = (ex["category"] == "memcpy").to_numpy() & ex["name"].astype(str).str.contains(PAGEABLE_COPY).to_numpy()
    launch = (corr >= 0) & np.isin(corr, ex_corr[ex_corr >= 0])
    names = ops["name"].astype(str).to_numpy()[runtime]
    sync = np.array([SYNC_CALL.fullmatch(n) is not None for n in names], dtype=bool)
    sync |= (corr >= 0) & np.isin(corr, ex_corr[copies])
    kind = np.where(sync, "sync", np.where(launch, "launch", "other"))
    assert (kind == "launch").sum() > 50 and (kind == "sync").any()  # not vacuous
    assert np.array_equal(calls["kind"].astype(str).to_numpy(), kind)


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data"])
def test_rows_gathered_a_chunk_at_a_time_into_spill_files_are_the_row_filters(
    captures, capture, monkeypatch, tmp_path
) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    columns = ["device", "name", "start_ns", "dur_ns", "blocks_per_sm"]
    rows = np.flatnonzero((ops["device"] != "cpu").to_numpy()).astype(np.int32)  # as positions_where gives them
    assert len(rows) > 100  # not vacuous
    whole = ops[columns].iloc[rows]
    monkeypatch.setattr(spill, "CHUNK_ROWS", 97)
    with spill.spilling(tmp_path, min_bytes=64):
        gathered = op_rows(ops, columns, rows)
        assert spill.is_spilled(gathered["name"].array.codes) and spill.is_spilled(gathered["start_ns"].to_numpy())
        pd.testing.assert_frame_equal(gathered, whole, check_exact=True)


def _modules_on_two_devices() -> Trace:
    """Nested modules whose ops launch kernels, some on a second device (tests/unit's module trace)."""
    trace = Trace().step(1, 0, 200).module("Net_0", 1, 150)
    trace.module("Block_0", 2, 50).op("my.py(3): forward", 3, 40, cat="python_function").op("aten::linear", 4, 30)
    trace.launch(5, "sm80_xmma_gemm_f16f16_tensor", 100, 10).module("ReLU_0", 36, 10).op("aten::relu", 37, 5)
    trace.launch(38, "k2", 112, 4).module("Block_0", 60, 40).launch(61, "k3", 120, 6).op("aten::linear", 70, 20)
    trace.launch(71, "k4", 130, 2)
    return trace


@pytest.mark.parametrize("rows", [1, 2, 3, 5])
def test_modules_and_gpu_summary_of_two_devices_a_few_rows_at_a_time(rows, monkeypatch) -> None:
    run = _modules_on_two_devices().run()
    ops = run.ops
    kernel = np.flatnonzero((ops["device"] != "cpu").to_numpy())
    device = ops["device"].astype(object).to_numpy().copy()
    device[kernel[::2]] = "cuda:1"  # every other kernel on a second device
    ops["device"] = pd.Categorical(device)
    launched = launches(ops)
    steps = device_aware_steps(ops, run.steps, launched)
    whole = (module_table(ops, launched), gpu_summary(ops, launched, steps))
    assert len(whole[0]) == 3 and list(whole[1]["device"]) == ["cuda:0", "cuda:1"]  # not vacuous
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    pd.testing.assert_frame_equal(module_table(ops, launched), whole[0], check_exact=True)
    pd.testing.assert_frame_equal(gpu_summary(ops, launched, steps), whole[1], check_exact=True)

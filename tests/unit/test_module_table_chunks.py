"""The module view's table (analysis/modules.py) made a chunk (or a depth's chunk) of the tree's nodes at a time in
spill files is the table made whole: on the recorded views loop's torch trace (module and Python frames, CPU
only: most nodes are not modules) and on built steps whose modules launch kernels (device times, hand-summed)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.launches import launches
from profiler.analysis.modules import MODULE_PREFIX, module_table
from profiler.importers.kineto import read_kineto_trace

from support.kineto_builder import Trace
from support.recorded import RECORDED

TORCH_TRACE = RECORDED / "views" / "torch_memory_modules" / "raw" / "r0-p12781-torch-0.json.gz"


def test_the_table_of_a_real_trace_made_in_chunks_is_the_whole_one(monkeypatch, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inferred steps
        ops = read_kineto_trace(TORCH_TRACE).ops
    whole = module_table(ops, launches(ops))
    assert list(whole["path"][:3]) == ["Net_0", "Net_0/Block_0", "Net_0/Block_0/Linear_0"]  # not vacuous
    assert (whole["host_self_ms"] < whole["host_total_ms"]).any() and whole["device_total_ms"].isna().all()
    monkeypatch.setattr(spill, "CHUNK_ROWS", 500)
    with spill.spilling(tmp_path, min_bytes=0):
        assert len(ops) > 10 * 500  # many chunks
        pd.testing.assert_frame_equal(module_table(ops, launches(ops)), whole, check_exact=True)


def _steps_launching_kernels(steps: int) -> Trace:
    """`steps` steps of Net_0 > (Block_0 > Linear_0 > aten::linear launching a 10 µs kernel, ReLU_0 > aten::relu
    launching a 4 µs kernel), the Net launching a 2 µs kernel of its own (a runtime call directly in it)."""
    trace = Trace()
    for s in range(steps):
        t = 1000.0 * s
        trace.step(s + 1, t, 900).module("Net_0", t + 1, 800).module("Block_0", t + 2, 400)
        trace.module("Linear_0", t + 3, 100).op("aten::linear", t + 4, 50).launch(t + 5, "gemm", t + 500, 10)
        trace.module("ReLU_0", t + 200, 100).op("aten::relu", t + 201, 50).launch(t + 202, "relu", t + 520, 4)
        trace.launch(t + 600, "net_own", t + 700, 2)
    return trace


@pytest.mark.parametrize("rows", [1, 3, 7])
def test_device_times_summed_a_depth_chunk_at_a_time_are_the_whole_ones(rows, monkeypatch, tmp_path):
    ops = _steps_launching_kernels(20).run().ops
    whole = module_table(ops, launches(ops)).set_index("path")
    expected = {  # µs per call: (device total, device self)
        "Net_0": (16, 2),
        "Net_0/Block_0": (14, 0),
        "Net_0/Block_0/Linear_0": (10, 0),
        "Net_0/Block_0/ReLU_0": (4, 0),
    }
    assert list(whole.index) == list(expected) and (whole["occurrences"] == 20).all()
    for path, (total, own) in expected.items():
        assert whole.loc[path, ["device_total_ms", "device_self_ms"]].tolist() == pytest.approx(
            [20 * total / 1e3, 20 * own / 1e3]
        )
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    with spill.spilling(tmp_path, min_bytes=0):
        chunked = module_table(ops, launches(ops)).set_index("path")
    pd.testing.assert_frame_equal(chunked, whole, check_exact=True)
    assert np.all(chunked["host_self_ms"] <= chunked["host_total_ms"])


@pytest.mark.parametrize("rows", [3, 1 << 20])
def test_each_paths_calls_and_host_time_are_its_frames_integer_sums(rows, monkeypatch, tmp_path):
    """A path's figures are summed per path a chunk of module calls at a time, in integer ns: on the real trace
    (each module name at one place in the tree, so one path) its occurrences are its frames and its host total their
    summed durations, exactly, whatever the chunk size."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inferred steps
        ops = read_kineto_trace(TORCH_TRACE).ops
    names = ops["name"].astype(str)
    frames = ops[names.str.startswith(MODULE_PREFIX).to_numpy() & (ops["category"] == "python").to_numpy()]
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    with spill.spilling(tmp_path, min_bytes=0):
        table = module_table(ops, launches(ops)).set_index("name")
    assert len(frames) > 10 * 3 and len(table) == frames["name"].nunique() == 5  # many chunks of calls
    for name, calls in frames.groupby(frames["name"].astype(str)):
        row = table.loc[name[len(MODULE_PREFIX) :]]
        assert row["occurrences"] == len(calls)
        assert row["host_total_ms"] == calls["dur_ns"].sum() / 1e6

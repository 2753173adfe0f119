"""The TensorBoard plugin's definitions on hand-made Kineto traces, one edge case each: overlapping
kernels on two streams, kernels outside the steps, a step that launched nothing, the last step cut off,
an op launching through a nested op, tensor-core eligibility found through a child (docs/tensorboard.md)."""

from __future__ import annotations

import pytest

from profiler.analysis.gpu_summary import gpu_summary
from profiler.analysis.kernels import kernel_table
from profiler.analysis.launches import launches
from profiler.analysis.ops import op_detail_table
from profiler.analysis.step_activity import device_aware_steps, step_activity
from profiler.importers.kineto import run_from_kineto_trace


class Trace:
    """A Kineto trace built event by event (times in µs); `launch` adds a runtime call and its kernel."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.correlation = 0

    def op(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> Trace:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})
        return self

    def step(self, number: int, ts: float, dur: float) -> Trace:
        return self.op(f"ProfilerStep#{number}", ts, dur, cat="user_annotation")

    def launch(self, at: float, kernel: str, start: float, dur: float, stream: int = 7, **args) -> Trace:
        self.correlation += 1
        self.op("cudaLaunchKernel", at, 1.0, cat="cuda_runtime")
        self.events[-1]["args"] = {"correlation": self.correlation}
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": stream,
                "ts": start,
                "dur": dur,
                "args": {"correlation": self.correlation, "device": 0, "stream": stream, **args},
            }
        )
        return self

    def run(self):
        return run_from_kineto_trace({"traceEvents": self.events, "schemaVersion": 1})


def _views(trace: Trace):
    run = trace.run()
    launched = launches(run.ops)
    steps = device_aware_steps(run.ops, run.steps, launched)
    return run, launched, steps


def test_overlapping_kernels_on_two_streams() -> None:
    """Utilization counts an instant once however many kernels run; SM efficiency sums their blocks per SM
    and caps the sum at 1; occupancy weighs each kernel by its own time."""
    trace = Trace().step(1, 0, 100).op("aten::mm", 1, 10)
    trace.launch(2, "k_a", 20, 40, stream=7, **{"blocks per SM": 0.6, "est. achieved occupancy %": 50})
    trace.launch(4, "k_b", 40, 40, stream=8, **{"blocks per SM": 0.6, "est. achieved occupancy %": 100})
    run, launched, steps = _views(trace)
    assert steps[["start_ns", "end_ns"]].values.tolist() == [[0, 100_000]]
    device = gpu_summary(run.ops, launched, steps).iloc[0]
    assert device["utilization_pct"] == pytest.approx(60.0)  # 20..80 of 0..100
    # 20..40: 0.6, 40..60: min(1.2, 1) = 1, 60..80: 0.6 -> (12 + 20 + 12) / 100
    assert device["sm_efficiency_pct"] == pytest.approx(44.0)
    assert device["achieved_occupancy_pct"] == pytest.approx(75.0)
    activity = step_activity(run.ops, run.spans, steps).iloc[0]
    assert activity["kernel_ms"] == pytest.approx(0.060)
    assert activity["runtime_ms"] == pytest.approx(0.002)  # the two launches, ranked before the op around them
    assert activity["cpu_exec_ms"] == pytest.approx(0.008)
    assert activity["other_ms"] == pytest.approx(0.030)


def test_kernels_outside_the_steps_count_only_inside() -> None:
    """A kernel running before the first step is outside the window: neither utilization nor the
    tensor-core share counts it, and it delays the first step's start to its end (the plugin's rule)."""
    trace = Trace().op("aten::mm", 0, 10).launch(1, "early_s1688gemm", 50, 30)
    trace.step(1, 60, 100).op("aten::mm", 61, 10).launch(62, "volta_sgemm", 90, 20)
    run, launched, steps = _views(trace)
    assert steps[["start_ns", "end_ns"]].values.tolist() == [[80_000, 160_000]]
    device = gpu_summary(run.ops, launched, steps).iloc[0]
    assert device["utilization_pct"] == pytest.approx(25.0)  # 20 of 80
    assert device["tensor_core_pct"] == pytest.approx(0.0)  # the s1688 kernel ran before the window


def test_a_step_without_kernels_keeps_its_host_time_and_the_cut_last_step_is_left_out() -> None:
    """Step 2 launches nothing: it stays as the host wrote it. Step 4 launched less than 80 % of step 3's
    kernels (the trace ended before the rest): the plugin leaves it out, and so does profview."""
    trace = Trace().step(1, 0, 100).op("aten::mm", 1, 10).launch(2, "k", 50, 120)
    trace.step(2, 100, 100)
    trace.step(3, 200, 100).op("aten::mm", 201, 20).launch(202, "k", 210, 10).launch(205, "k", 230, 10)
    trace.step(4, 300, 100).op("aten::mm", 301, 10).launch(302, "k", 310, 10)
    run, launched, steps = _views(trace)
    assert steps["step"].tolist() == [1, 2, 3]
    assert steps[["start_ns", "end_ns"]].values.tolist() == [[0, 170_000], [170_000, 200_000], [200_000, 300_000]]


def test_an_op_owns_the_kernels_of_its_runtime_calls_and_its_children_add_up() -> None:
    """aten::linear holds aten::t (nothing launched) and aten::addmm (two kernels): addmm's device self
    time is both kernels', linear's self 0 and total the same; one kernel per (name, op) row; linear is
    eligible through its eligible child, and the tensor-core kernel's share shows in both."""
    trace = Trace().step(1, 0, 100).op("aten::linear", 1, 50).op("aten::t", 2, 3).op("aten::addmm", 10, 30)
    trace.launch(11, "sm80_xmma_gemm_f16f16_tensor", 60, 10).launch(20, "splitKreduce_kernel", 75, 5)
    trace.op("aten::relu", 60, 5).launch(61, "relu_kernel", 85, 5)
    run, launched, steps = _views(trace)
    detail = op_detail_table(run.ops, launched).set_index("name")
    assert detail.loc["aten::addmm", "device_self_ms"] == pytest.approx(0.015)
    assert detail.loc["aten::linear", "device_self_ms"] == 0
    assert detail.loc["aten::linear", "device_total_ms"] == pytest.approx(0.015)
    assert detail.loc["aten::t", "device_total_ms"] == 0
    assert detail.loc["aten::relu", "device_self_ms"] == pytest.approx(0.005)
    assert detail.loc["aten::linear", "tc_eligible"] == "true"  # aten::linear is in the list itself
    assert detail.loc["aten::relu", "tc_eligible"] == "false"
    assert detail.loc["aten::addmm", "tc_self_pct"] == pytest.approx(100 * 10 / 15)
    assert detail.loc["aten::linear", "tc_total_pct"] == pytest.approx(100 * 10 / 15)
    kernels = kernel_table(run.ops, launched).set_index("name")
    assert kernels.loc["splitKreduce_kernel", "op"] == "aten::addmm"
    assert kernels.loc["sm80_xmma_gemm_f16f16_tensor", "tensor_cores"] == "true"
    assert kernels.loc["relu_kernel", "tensor_cores"] == "false"
    device = gpu_summary(run.ops, launched, steps).iloc[0]
    assert device["tc_eligible_pct"] == pytest.approx(100 * 15 / 20)  # addmm's kernels of all launched


def test_eligibility_climbs_from_a_child_and_from_tensor_core_kernels() -> None:
    """A wrapper op not in the list is eligible when an op inside it is, or when it launched a
    tensor-core kernel itself; the innermost eligible op is the one the eligible share counts."""
    trace = Trace().step(1, 0, 100).op("my::block", 1, 40).op("aten::mm", 2, 10).launch(3, "volta_sgemm", 50, 10)
    trace.op("my::fused", 50, 10).launch(51, "h884gemm", 70, 10)
    run, launched, steps = _views(trace)
    detail = op_detail_table(run.ops, launched).set_index("name")
    assert detail.loc["my::block", "tc_eligible"] == "true"
    assert detail.loc["my::fused", "tc_eligible"] == "true"
    device = gpu_summary(run.ops, launched, steps).iloc[0]
    assert device["tc_eligible_pct"] == pytest.approx(100.0)  # aten::mm's and my::fused's kernels
    assert device["tensor_core_pct"] == pytest.approx(50.0)


def test_without_step_annotations_the_host_span_is_one_step() -> None:
    trace = Trace().op("aten::mm", 5, 10).launch(6, "k", 20, 30).op("aten::add", 40, 5)
    run, launched, steps = _views(trace)
    assert steps.values.tolist() == [[0, 0, 45_000]]  # from the first op (the trace's time 0) to the kernel's end


def test_a_trace_without_correlations_has_no_launches() -> None:
    trace = Trace().step(1, 0, 100).op("aten::mm", 1, 10).launch(2, "k", 20, 10)
    for event in trace.events:
        event.get("args", {}).pop("correlation", None)
    run = trace.run()
    assert launches(run.ops) is None
    detail = op_detail_table(run.ops, None)
    assert detail["device_self_ms"].isna().all() and set(detail["tc_eligible"]) == {""}
    kernels = kernel_table(run.ops, None)
    assert kernels["op"].tolist() == [""] and kernels["calls"].tolist() == [1]

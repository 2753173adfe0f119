"""The device findings that read the TensorBoard plugin's figures, on hand-made Kineto traces: the
precision finding's tensor-core eligible time, kernels that leave the SMs idle (low_occupancy), and a
step's memory peak against the device's memory (device_memory). Each rule is tested on the case it must
catch and on the neighbours it must leave alone."""

from __future__ import annotations

import pytest

from profiler.analysis.results import analyse_run

from support.kineto_builder import Trace

GIB = 1 << 30
V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16 * GIB, "computeMajor": 7, "computeMinor": 0}
STEPS = 4  # the first is warm-up: 3 analysed steps of 1 ms


def report(trace: Trace, **thresholds) -> dict:
    return analyse_run(trace.run(), thresholds or None).extra_json["report"]


def keyed(rep: dict, key: str) -> list[dict]:
    return [f for f in rep["findings"] if f["key"] == key]


def precision_trace() -> Trace:
    """Per 1 ms step: a tile-named GEMM (no precision in its name) launched by aten::mm (0.3 ms); the same
    kernel from an op that is not eligible (0.1 ms); a tensor-core GEMM from aten::mm (0.1 ms); cuDNN's
    float32 layout kernel from a convolution (0.1 ms); an sgemm from the ineligible op (0.05 ms)."""
    trace = Trace([V100])
    for n in range(STEPS):
        t = 1000.0 * n
        trace.step(n + 1, t, 1000)
        trace.op("aten::mm", t + 10, 20).launch(t + 12, "gemm_64x64_tile_kernel", t + 100, 300)
        trace.op("aten::my_op", t + 40, 20).launch(t + 42, "gemm_64x64_tile_kernel", t + 450, 100)
        trace.op("aten::mm", t + 70, 20).launch(t + 72, "ampere_s1688gemm_128x128_nn", t + 600, 100)
        trace.op("aten::cudnn_convolution", t + 200, 20)
        trace.launch(t + 202, "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", t + 750, 100)
        trace.op("aten::my_op", t + 300, 20).launch(t + 302, "volta_sgemm_64x64_nn", t + 880, 50)
    return trace


def test_the_precision_stake_adds_the_eligible_ops_matrix_kernels_off_the_tensor_cores() -> None:
    rep = report(precision_trace(), fp32_matrix_pct=0)
    (f,) = keyed(rep, "device_precision:fp32")
    # 0.3 ms (eligible op, matrix kernel, no tensor cores) + 0.05 ms (named sgemm); not the ineligible op's
    # tile GEMM, the tensor-core GEMM nor the layout kernel
    assert f["metrics"]["cause_ms"] == pytest.approx(0.35, abs=1e-6)
    assert f["metrics"]["tc_eligible_ms"] == pytest.approx(0.30, abs=1e-6)
    assert "launched by tensor-core eligible ops: aten::mm 1.20 ms" in f["evidence"]  # over the run: 4 steps
    assert "dtype=torch.float16" in f["suggestion"] and "need Ampere" in f["suggestion"]  # a V100: no TF32


def test_without_launches_the_precision_stake_is_the_named_kernels() -> None:
    """A trace whose kernels carry no correlation: only the names speak (the 0.05 ms sgemm)."""
    trace = precision_trace()
    for event in trace.events:
        event["args"].pop("correlation", None)
    (f,) = keyed(report(trace, fp32_matrix_pct=0), "device_precision:fp32")
    assert f["metrics"]["cause_ms"] == pytest.approx(0.05, abs=1e-6)
    assert "tc_eligible_ms" not in f["metrics"]


def occupancy_trace(small_blocks: float, reserved: int = 0) -> Trace:
    """Per 1 ms step: a kernel of `small_blocks` blocks per SM for 0.4 ms, one filling the SMs for 0.2 ms,
    and an NCCL all-reduce of 0.1 blocks per SM for 0.3 ms on another stream (collectives are built that way:
    never counted); with `reserved`, the allocator reserves that much in every step."""
    trace = Trace([V100])
    for n in range(STEPS):
        t = 1000.0 * n
        trace.step(n + 1, t, 1000)
        trace.op("aten::add", t + 10, 20)
        trace.launch(t + 12, "small_kernel", t + 100, 400, **{"blocks per SM": small_blocks})
        trace.op("aten::mul", t + 40, 20)
        trace.launch(t + 42, "full_kernel", t + 500, 200, **{"blocks per SM": 4.0, "est. achieved occupancy %": 60})
        trace.op("nccl:all_reduce", t + 60, 20)
        trace.launch(t + 62, "ncclKernel_AllReduce_RING_LL_Sum_float", t + 100, 300, stream=8, **{"blocks per SM": 0.1})
        if reserved:
            trace.memory(t + 15, 2 * GIB, 1 + n, 3 * GIB, device_type=1, reserved=reserved)
            trace.memory(t + 900, -2 * GIB, 1 + n, GIB, device_type=1, reserved=reserved)
    return trace


def test_kernels_that_leave_the_sms_idle_are_low_occupancy() -> None:
    rep = report(occupancy_trace(0.25))
    (f,) = keyed(rep, "low_occupancy")
    m = f["metrics"]
    assert m["kernel_ms"] == pytest.approx(0.6, abs=1e-6)  # the compute kernels, the collective left out
    assert m["sm_filled_ms"] == pytest.approx(0.3, abs=1e-6)  # 0.25 x 0.4 + 1 x 0.2
    assert m["cause_ms"] == pytest.approx(0.3, abs=1e-6) and f["at_stake_ms"] == pytest.approx(0.15, abs=1e-3)
    assert "small_kernel x4 1.60 ms, 0.25 blocks per SM" in f["evidence"]
    assert "allocates" not in f["suggestion"]  # no memory recorded: no room said


def test_kernels_that_fill_the_sms_are_not_low_occupancy() -> None:
    assert not keyed(report(occupancy_trace(1.0)), "low_occupancy")
    assert not keyed(report(occupancy_trace(0.5), sm_underfill_pct=25), "low_occupancy")  # 0.2 ms: 20 % < 25 %


def test_a_nearly_full_device_is_said_and_the_room_shapes_the_advice() -> None:
    full = report(occupancy_trace(0.25, reserved=int(15.5 * GIB)))
    (f,) = keyed(full, "device_memory")
    assert f["severity"] == "medium" and f["at_stake_ms"] == 0
    assert f["metrics"]["reserved_pct"] == pytest.approx(100 * 15.5 / 16)
    assert f["metrics"]["peak_allocated_bytes"] == 3 * GIB and f["metrics"]["total_bytes"] == 16 * GIB
    assert "97 % of its 16.0 GB" in f["title"]
    (low,) = keyed(full, "low_occupancy")
    assert "(the largest step allocates 3.0 of the device's 16.0 GB)" in low["suggestion"]
    half = report(occupancy_trace(0.25, reserved=8 * GIB))
    assert not keyed(half, "device_memory")
    assert keyed(report(occupancy_trace(0.25, reserved=8 * GIB), device_memory_pct=50), "device_memory")


def test_without_the_devices_memory_nothing_is_said_about_it() -> None:
    trace = occupancy_trace(0.25, reserved=int(15.5 * GIB))
    trace.device_properties = None
    rep = report(trace)
    assert not keyed(rep, "device_memory")
    (low,) = keyed(rep, "low_occupancy")
    assert "(the largest step allocates 3.0 GB of device memory)" in low["suggestion"]

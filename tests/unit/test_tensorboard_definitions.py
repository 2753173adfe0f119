"""The TensorBoard plugin's definitions on hand-made Kineto traces, one edge case each: overlapping
kernels on two streams, kernels outside the steps, a step that launched nothing, the last step cut off,
an op launching through a nested op, tensor-core eligibility found through a child, a module called twice
and nested modules, memory freed in a later step, allocations at an op's edges (docs/tensorboard.md)."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler.analysis.comm_ops import comm_op_table, comm_pieces, message_bytes, transfer_times
from profiler.analysis.gpu_summary import gpu_summary
from profiler.analysis.kernels import kernel_table
from profiler.analysis.launches import launches
from profiler.analysis.memory import allocating_ops, memory_curve, memory_events, op_memory, step_peaks
from profiler.analysis.modules import module_table
from profiler.analysis.ops import op_detail_table
from profiler.analysis.step_activity import comm_split, device_aware_steps, step_activity

from support.kineto_builder import Trace


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


def test_a_module_called_twice_and_nested_modules() -> None:
    """Block_0 called twice inside Net_0 is one path with 2 occurrences; its host self time is its frames
    minus the ops and module in them; device time comes from its ops' launches (self: launched by a
    runtime call directly in the module, outside its ops); Python frames that are not modules are see-through;
    the frames are not ops (not in the op tables)."""
    trace = Trace().step(1, 0, 200).module("Net_0", 1, 150)
    trace.module("Block_0", 2, 50).op("my.py(3): forward", 3, 40, cat="python_function").op("aten::linear", 4, 30)
    trace.launch(5, "k1", 100, 10).module("ReLU_0", 36, 10).op("aten::relu", 37, 5).launch(38, "k2", 112, 4)
    trace.module("Block_0", 60, 40).launch(61, "k3", 120, 6).op("aten::linear", 70, 20).launch(71, "k4", 130, 2)
    run, launched, _ = _views(trace)
    table = module_table(run.ops, launched).set_index("path")
    assert list(table.index) == ["Net_0", "Net_0/Block_0", "Net_0/Block_0/ReLU_0"]
    block = table.loc["Net_0/Block_0"]
    assert (block["name"], block["parent"], block["occurrences"]) == ("Block_0", "Net_0", 2)
    assert block["host_total_ms"] == pytest.approx(0.090)
    assert block["host_self_ms"] == pytest.approx((50 - 30 - 10) / 1e3 + (40 - 1 - 20) / 1e3)
    assert block["device_total_ms"] == pytest.approx((10 + 4 + 6 + 2) / 1e3)
    assert block["device_self_ms"] == pytest.approx(6 / 1e3)  # k3: launched in the module, outside its ops
    net = table.loc["Net_0"]
    assert net["parent"] == "" and net["host_self_ms"] == pytest.approx((150 - 50 - 40) / 1e3)
    assert net["device_total_ms"] == pytest.approx(block["device_total_ms"]) and net["device_self_ms"] == 0
    assert table.loc["Net_0/Block_0/ReLU_0", "device_total_ms"] == pytest.approx(0.004)
    assert not op_detail_table(run.ops, launched)["name"].str.startswith(("nn.Module", "my.py")).any()


def test_modules_of_a_run_without_launches_have_no_device_time() -> None:
    trace = Trace().step(1, 0, 100).module("Linear_0", 1, 20).op("aten::addmm", 2, 10)
    run = trace.run()
    table = module_table(run.ops, None)
    assert table["occurrences"].tolist() == [1] and table["device_total_ms"].isna().all()


def test_memory_freed_in_a_later_step_and_the_edges_of_an_op() -> None:
    """A block allocated in step 1 and freed in step 2 is one event whose life crosses the step; a block
    freed that was allocated before the trace has no allocation time, one never freed no free time; an
    allocation at the instant an op ends is not that op's ([start, end)); one directly in a module
    belongs to no op. Self figures are the op's own, the others add its children's."""
    trace = Trace().step(1, 0, 100).step(2, 100, 100).op("aten::ones", 10, 20).op("aten::empty", 11, 5)
    trace.memory(12, 1024, 0xA, 1024).memory(20, 256, 0xB, 1280).memory(25, -256, 0xB, 1024)  # in empty / ones
    trace.memory(30, 64, 0xC, 1088)  # at ones' end: outside it
    trace.module("Linear_0", 40, 20).memory(45, 32, 0xD, 1120)  # in the module, in no op
    trace.op("aten::add", 150, 10).memory(152, -1024, 0xA, 96).memory(155, -8, 0xE, 88)  # 0xE: before the trace
    run = trace.run()
    owner, parent = allocating_ops(run.ops, run.allocations, run.threads)
    names = run.ops["name"].astype(str).to_numpy()
    assert [names[o] if o >= 0 else "" for o in owner] == [
        "aten::empty",
        "aten::ones",
        "aten::ones",
        "",
        "",
        "aten::add",
        "aten::add",
    ]
    events = memory_events(run.ops, run.allocations, owner)
    block = events[events["bytes"] == 1024].iloc[0]
    assert (block["op"], block["alloc_ms"], block["free_ms"]) == ("aten::empty", 0.012, 0.152)
    assert block["lifetime_ms"] == pytest.approx(0.140)
    early = events[events["bytes"] == 8].iloc[0]
    assert early["op"] == "" and early["alloc_ms"] != early["alloc_ms"] and early["free_ms"] == 0.155
    kept = events[events["bytes"] == 64].iloc[0]
    assert kept["free_ms"] != kept["free_ms"] and kept["lifetime_ms"] != kept["lifetime_ms"]
    assert len(events) == 5
    stats = op_memory(run.ops, run.allocations, owner, parent).set_index("op")
    ones = stats.loc["aten::ones"]
    assert (ones["self_increase_bytes"], ones["self_alloc_bytes"], ones["self_alloc_count"]) == (0, 256, 1)
    assert (ones["increase_bytes"], ones["alloc_bytes"], ones["alloc_count"]) == (1024, 1280, 2)
    assert stats.loc["aten::add", "self_increase_bytes"] == -1032 and stats.loc["aten::add", "alloc_count"] == 0
    assert set(stats["device"]) == {"host"} and stats.loc["aten::empty", "calls"] == 1
    curve = memory_curve(run.allocations)
    assert curve["allocated_bytes"].max() == 1280
    peaks = step_peaks(curve, [0.0, 0.1], [0.1, 0.2])
    assert peaks["peak_bytes"].tolist() == [1280, 96]


def test_allocations_at_one_instant_and_an_op_of_no_duration_belong_to_the_op_around_them() -> None:
    """Two allocations and a free at one instant on one thread, and an op of no duration starting then: each
    allocation is its op's (an allocation [t, t + 1) nests none of them; an allocation nested in its twin raised
    IndexError), the op of no duration is aten::mm's child, and the twins pair with their frees as before."""
    trace = Trace().step(1, 0, 100).op("aten::mm", 10, 20).op("aten::view", 15, 0)
    trace.memory(15, 512, 0xA, 512).memory(15, 256, 0xB, 768).memory(15, -64, 0xC, 704)
    trace.memory(40, -512, 0xA, 192).memory(40, -256, 0xB, -64)
    run = trace.run()
    owner, parent = allocating_ops(run.ops, run.allocations, run.threads)
    names = run.ops["name"].astype(str).to_numpy()
    assert [names[o] if o >= 0 else "" for o in owner] == ["aten::mm"] * 3 + ["", ""]
    assert names[parent[names.tolist().index("aten::view")]] == "aten::mm"
    events = memory_events(run.ops, run.allocations, owner)
    assert events[["op", "bytes", "free_ms"]].values.tolist() == [
        ["", 64, 0.015],
        ["aten::mm", 512, 0.04],
        ["aten::mm", 256, 0.04],
    ]
    stats = op_memory(run.ops, run.allocations, owner, parent).set_index("op")
    assert stats.loc["aten::mm", "self_alloc_count"] == 2 and stats.loc["aten::mm", "self_increase_bytes"] == 704


def test_memory_of_two_devices_is_kept_apart() -> None:
    trace = (
        Trace().step(1, 0, 100).op("aten::to", 1, 50).memory(2, 512, 0xA, 512).memory(3, 512, 0xA, 512, device_type=1)
    )
    trace.memory(4, -512, 0xA, 0, device_type=1)
    run = trace.run()
    owner, parent = allocating_ops(run.ops, run.allocations, run.threads)
    events = memory_events(run.ops, run.allocations, owner).set_index("device")
    assert events.loc["cuda:0", "lifetime_ms"] == pytest.approx(0.001)
    assert events.loc["host", "free_ms"] != events.loc["host", "free_ms"]  # same address, other device: not freed
    assert sorted(op_memory(run.ops, run.allocations, owner, parent)["device"]) == ["cuda:0", "host"]


def test_an_nccl_collective_its_kernel_and_the_compute_it_overlaps() -> None:
    """nccl:all_reduce's host range launches its kernel, which runs on after the range returns: the
    call's latency covers both (10 µs .. 70 µs); its message is 1024 floats and 8 halves; a compute
    kernel overlapping the collective's kernel for 20 µs is the overlap of the step's split."""
    trace = Trace().step(1, 0, 100).op("aten::mm", 1, 5).launch(2, "volta_sgemm", 20, 30)
    trace.op(
        "nccl:all_reduce",
        10,
        20,
        cat="user_annotation",
        **{"Input Dims": [[1024], [8]], "Input type": ["float", "c10::Half"]},
    )
    trace.launch(12, "ncclKernel_AllReduce_RING_LL_Sum_float", 30, 40, stream=9)
    run, launched, steps = _views(trace)
    (row,) = comm_op_table(run.ops, launched).itertuples()
    assert (row.name, row.calls, row.total_bytes) == ("nccl:all_reduce", 1, 1024 * 4 + 8 * 2)
    assert row.total_ms == pytest.approx(0.060)  # [10, 70): the range and the kernel it launched
    (split,) = comm_split(run.ops, run.spans, steps).itertuples()
    communication = 0.060  # the host range [10, 30) and the kernel [30, 70)
    assert split.overlap_ms == pytest.approx(0.030)  # sgemm [20, 50) under communication
    assert split.computation_ms == pytest.approx(0.0)
    assert split.communication_ms == pytest.approx(communication - 0.030)
    assert split.computation_ms + split.overlap_ms + split.communication_ms + split.other_ms == pytest.approx(
        split.total_ms
    )


def test_gloo_collectives_on_the_host_against_its_cpu_work() -> None:
    """gloo runs its collectives on the host (no kernels): computation is the host's CPU execution, and a
    collective on the backend's thread while the main thread computes is overlap. Two calls add up."""
    trace = Trace().step(1, 0, 100).op("aten::mm", 0, 40).op("aten::add", 60, 10)
    for start in (30, 50):
        trace.op(
            "gloo:all_reduce",
            start,
            20,
            cat="user_annotation",
            tid=2,
            **{"Input Dims": [[10]], "Input type": ["double"]},
        )
    run, launched, steps = _views(trace)
    (row,) = comm_op_table(run.ops, launched).itertuples()
    assert (row.calls, row.total_bytes, row.mean_bytes) == (2, 160, 80)
    assert row.total_ms == pytest.approx(0.040) and row.mean_ms == pytest.approx(0.020)
    (split,) = comm_split(run.ops, run.spans, steps).itertuples()
    assert split.overlap_ms == pytest.approx(0.020)  # [30, 40) and [60, 70)
    assert split.computation_ms == pytest.approx(0.050 - 0.020)
    assert split.communication_ms == pytest.approx(0.040 - 0.020)
    assert split.other_ms == pytest.approx(0.100 - 0.070)


def _collectives(calls: list[tuple[str, float, list[tuple[float, float]]]]) -> Trace:
    """A rank's trace: per call, the collective's name, its host start, and the (start, duration) of each
    kernel it launches (none: a gloo call, its host range of 20 µs is its piece)."""
    trace = Trace().step(1, 0, 1000)
    for name, at, kernels in calls:
        trace.op(name, at, 20, cat="user_annotation")
        for i, (start, dur) in enumerate(kernels):
            trace.launch(at + 1 + i, "ncclKernel_AllReduce_RING_LL_Sum_float", start, dur, stream=9)
    return trace


def _transfer(*ranks: Trace) -> dict[tuple[int, str], float]:
    pieces = {}
    for rank, trace in enumerate(ranks):
        run, launched, _ = _views(trace)
        pieces[rank] = comm_pieces(run.ops, launched)
    return {(r.rank, r.name): r.transfer_ms for r in transfer_times(pieces).itertuples()}


def test_data_transfer_time_is_each_piece_as_long_as_the_fastest_ranks() -> None:
    """The k-th call of a collective is one collective on every rank, even when the ranks interleave their
    collectives differently; each of its kernels transfers as long as the shortest rank's, ending where
    the rank's kernel ends; a call launching two kernels pairs them in order; gloo's host range is its piece."""
    rank0 = _collectives(
        [
            ("nccl:all_reduce", 10, [(50, 100)]),
            ("nccl:broadcast", 200, [(250, 30)]),
            ("nccl:all_reduce", 400, [(450, 40), (500, 60)]),
            ("gloo:barrier", 700, []),
        ]
    )
    rank1 = _collectives(
        [
            ("nccl:broadcast", 10, [(40, 50)]),  # broadcast first on this rank: still paired with rank 0's
            ("nccl:all_reduce", 100, [(120, 20)]),
            ("nccl:all_reduce", 400, [(450, 10), (470, 80)]),
            ("gloo:barrier", 600, []),
        ]
    )
    out = _transfer(rank0, rank1)
    # all_reduce: min(100, 20) + min(40, 10) + min(60, 80) = 20 + 10 + 60 µs on both ranks
    assert out[(0, "nccl:all_reduce")] == pytest.approx(0.090) and out[(1, "nccl:all_reduce")] == pytest.approx(0.090)
    assert out[(0, "nccl:broadcast")] == pytest.approx(0.030) and out[(1, "nccl:broadcast")] == pytest.approx(0.030)
    assert out[(0, "gloo:barrier")] == pytest.approx(0.020)  # both host ranges 20 µs
    # the latency is never less than the transfer: rank 0 waited 80 µs of its first all_reduce kernel
    run, launched, _ = _views(rank0)
    latency = {r.name: r.total_ms for r in comm_op_table(run.ops, launched).itertuples()}
    assert all(latency[name] >= out[(0, name)] for name in latency)


def test_ranks_that_disagree_on_a_collective_have_no_transfer_time_for_it() -> None:
    """A rank with one more all_reduce call (a cut trace), or a call launching one kernel more: NaN for that
    collective on every rank; the collectives they agree on keep theirs."""
    rank0 = _collectives([("nccl:all_reduce", 10, [(50, 100)]), ("nccl:broadcast", 200, [(250, 30)])])
    extra_call = _collectives(
        [
            ("nccl:all_reduce", 10, [(50, 40)]),
            ("nccl:broadcast", 200, [(250, 10)]),
            ("nccl:all_reduce", 300, [(350, 40)]),
        ]
    )
    out = _transfer(rank0, extra_call)
    assert all(out[(r, "nccl:all_reduce")] != out[(r, "nccl:all_reduce")] for r in (0, 1))  # NaN
    assert out[(0, "nccl:broadcast")] == pytest.approx(0.010)
    extra_kernel = _collectives([("nccl:all_reduce", 10, [(50, 40), (100, 5)]), ("nccl:broadcast", 200, [(250, 10)])])
    out = _transfer(rank0, extra_kernel)
    assert out[(1, "nccl:all_reduce")] != out[(1, "nccl:all_reduce")]
    assert out[(1, "nccl:broadcast")] == pytest.approx(0.010)


def test_a_run_without_collectives_has_no_distributed_view() -> None:
    run, launched, steps = _views(Trace().step(1, 0, 100).op("aten::mm", 1, 5).launch(2, "k", 20, 30))
    assert comm_op_table(run.ops, launched).empty and comm_split(run.ops, run.spans, steps).empty


@pytest.mark.parametrize(
    "shapes, types, expected",
    [
        ("[[2, 3]]", '["float"]', 24),
        ("[[4], []]", '["long int", "Scalar"]', 32),
        ("[[4]]", '["some::NewType"]', 0),  # an unknown element type counts 0, as in the plugin
        ("", "", 0),
        ("not json", '["float"]', 0),
    ],
)
def test_message_bytes(shapes: str, types: str, expected: int) -> None:
    assert message_bytes(shapes, types) == expected


def test_ops_by_input_shape() -> None:
    """aten::mm called on two shapes is two rows, each with its own calls, times and kernels; the rows of
    a name add up to its op_detail row; a run that recorded no shapes has no such table."""
    from profiler.analysis.ops import op_shape_table

    trace = Trace().step(1, 0, 100)
    trace.op("aten::mm", 1, 10, **{"Input Dims": [[8, 8], [8, 8]]}).launch(2, "k_small", 20, 2)
    trace.op("aten::mm", 12, 10, **{"Input Dims": [[8, 8], [8, 8]]}).launch(13, "k_small", 30, 2)
    trace.op("aten::mm", 30, 20, **{"Input Dims": [[512, 512], [512, 512]]}).launch(31, "k_big", 40, 30)
    run, launched, _ = _views(trace)
    shapes = op_shape_table(run.ops, launched)
    table = shapes[shapes["name"] == "aten::mm"].set_index("shapes")
    small, big = table.loc["[[8,8],[8,8]]"], table.loc["[[512,512],[512,512]]"]
    assert (small["count"], small["total_ms"], small["device_self_ms"]) == (
        2,
        pytest.approx(0.020),
        pytest.approx(0.004),
    )
    assert (big["count"], big["total_ms"], big["device_self_ms"]) == (1, pytest.approx(0.020), pytest.approx(0.030))
    detail = op_detail_table(run.ops, launched).set_index("name").loc["aten::mm"]
    assert table["count"].sum() == detail["count"] and table["total_ms"].sum() == pytest.approx(detail["total_ms"])
    assert op_shape_table(Trace().step(1, 0, 10).op("aten::mm", 1, 5).run().ops).empty


def test_ops_by_call_stack() -> None:
    """aten::mm called from two lines of the program is two rows, each with the Python frames around it,
    outermost first (modules among them); an op outside every frame has an empty stack; runs without
    frames have no such table."""
    from profiler.analysis.call_stacks import call_stacks, has_python_frames, op_stack_table

    trace = Trace().step(1, 0, 200).op("train.py(10): loop", 1, 100, cat="python_function")
    trace.module("Net_0", 2, 50).op("aten::mm", 3, 10).launch(4, "k", 20, 5)
    trace.op("eval.py(7): score", 60, 30, cat="python_function").op("aten::mm", 61, 20)
    trace.op("aten::add", 150, 5)
    run, launched, _ = _views(trace)
    stacks = dict(zip(run.ops["name"].astype(str) + "@" + run.ops["start_ns"].astype(str), call_stacks(run.ops)))
    assert stacks["aten::mm@3000"] == "train.py(10): loop > nn.Module: Net_0"
    assert stacks["aten::mm@61000"] == "train.py(10): loop > eval.py(7): score"
    assert stacks["aten::add@150000"] == ""
    table = op_stack_table(run.ops, launched).set_index(["name", "stack"])
    mm = table.loc[("aten::mm", "train.py(10): loop > nn.Module: Net_0")]
    assert (mm["count"], mm["total_ms"], mm["device_self_ms"]) == (1, pytest.approx(0.010), pytest.approx(0.005))
    assert table.loc[("aten::mm", "train.py(10): loop > eval.py(7): score"), "total_ms"] == pytest.approx(0.020)
    assert table.loc[("aten::add", ""), "count"] == 1
    assert op_stack_table(Trace().step(1, 0, 10).op("aten::mm", 1, 5).run().ops).empty
    assert has_python_frames(run.ops) and isinstance(run.ops["category"].dtype, pd.CategoricalDtype)
    framed_as_text = run.ops.assign(category=run.ops["category"].astype(str))
    assert has_python_frames(framed_as_text) and op_stack_table(framed_as_text, launched).equals(
        op_stack_table(run.ops, launched)
    )
    unframed = run.ops.assign(category=run.ops["category"].cat.rename_categories({"python": "python_frames_dropped"}))
    assert not has_python_frames(unframed) and op_stack_table(unframed, launched).empty

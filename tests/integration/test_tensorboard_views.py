"""The TensorBoard plugin's views on real captures: profview's figures against what the plugin itself
(torch-tb-profiler 0.4.3) computed for the same traces, recorded by scripts/tb_plugin_figures.py into
tests/data/recorded/tb_plugin/ (docs/tensorboard.md says where the definitions part)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.results import analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.formats.tables import read_csv
from profiler.importers.kineto import read_kineto_trace
from profiler.postprocess.imported import import_capture

DATA = Path(__file__).resolve().parents[1] / "data"
PEER = DATA / "recorded" / "tb_plugin"
GPU_TRACES = ["alexnet", "sampled_rank-0", "sampled_rank-1", "nccl_data", "diff_test", "diff_control"]
#: The plugin's overview roles -> step_activity_{rank}.csv columns.
ROLES = {
    "Kernel": "kernel_ms",
    "Memcpy": "memcpy_ms",
    "Memset": "memset_ms",
    "Communication": "communication_ms",
    "Runtime": "runtime_ms",
    "DataLoader": "dataloader_ms",
    "CpuOp": "cpu_exec_ms",
    "Other": "other_ms",
}

#: The device's activities, which the two definitions of communication share out differently.
DEVICE_ROLES = ("Kernel", "Memcpy", "Memset", "Communication")


def _peer(trace: str) -> dict:
    return json.loads((PEER / f"{trace}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def analysed():
    """name -> Analysis of every recorded trace (imported as `profview import` does)."""
    return {
        name: analyse_run(ensure_steps(read_kineto_trace(DATA / "kineto" / f"{name}.json.gz")))
        for name in [*GPU_TRACES, "cpu_only"]
    }


@pytest.mark.parametrize("trace", [*GPU_TRACES, "cpu_only"])
def test_step_breakdown_is_the_plugins(analysed, trace: str) -> None:
    """The plugin's steps to the µs, and each activity within 1 % of the step. Collective kernels are
    profview's communication where the plugin (which knew them only through `nccl:*` op names torch no
    longer writes) left most of them in its kernel time, ranked above memcpy and memset: the device's
    activities are compared together."""
    mine = analysed[trace].step_activity
    peer = _peer(trace)["steps"]
    assert [str(s) for s in mine["step"]] == [s["name"] for s in peer]
    for row, theirs in zip(mine.itertuples(), peer):
        costs = {role: us / 1e3 for role, us in theirs["costs_us"].items()}
        assert row.total_ms == pytest.approx(costs["Total"], abs=1e-3)
        tolerance = 0.01 * costs["Total"]
        for role, column in ROLES.items():
            if role not in DEVICE_ROLES:
                assert getattr(row, column) == pytest.approx(costs[role], abs=tolerance), (row.step, role)
        device = sum(getattr(row, ROLES[role]) for role in DEVICE_ROLES)
        assert device == pytest.approx(sum(costs[role] for role in DEVICE_ROLES), abs=tolerance)
        parts = sum(getattr(row, column) for column in ROLES.values())
        assert parts == pytest.approx(row.total_ms, abs=1e-6)


def test_the_collective_kernels_are_communication(analysed) -> None:
    """Where the two definitions part: NCCL kernels launched under record_param_comms are communication."""
    steps = analysed["sampled_rank-0"].step_activity
    assert (steps["communication_ms"] > 100).all()
    kernels = analysed["sampled_rank-0"].kernels
    nccl = kernels[kernels["name"].astype(str).str.startswith("nccl")]
    assert len(nccl) and all(op == "record_param_comms" or op.startswith("c10d::") for op in nccl["op"])


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_gpu_summary_is_the_plugins(analysed, trace: str) -> None:
    """GPU utilization, Est. SM Efficiency and Est. Achieved Occupancy within 0.01 point of the plugin's;
    tensor-core kernel time equal where the plugin's kernel list recognises every tensor-core kernel,
    and larger where it misses Ampere's (sm80_xmma ... tf32, docs/tensorboard.md)."""
    peer = _peer(trace)
    devices = analysed[trace].devices.set_index("device")
    assert len(peer["gpus"]) == 1
    gpu_id, theirs = next(iter(peer["gpus"].items()))
    mine = devices.loc[f"cuda:{gpu_id}"]
    assert mine["utilization_pct"] == pytest.approx(theirs["utilization"] * 100, abs=0.01)
    assert mine["sm_efficiency_pct"] == pytest.approx(theirs["sm_efficiency"] * 100, abs=0.01)
    assert mine["achieved_occupancy_pct"] == pytest.approx(theirs["achieved_occupancy"], abs=0.01)
    plugin_tc = peer["tc_used_ratio"] * 100
    if trace in ("alexnet", "nccl_data"):  # their convolutions run sm80_xmma tf32 kernels
        assert mine["tensor_core_pct"] > plugin_tc + 5
    else:
        assert mine["tensor_core_pct"] == pytest.approx(plugin_tc, abs=0.01)


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_kernel_table_is_the_plugins(analysed, trace: str) -> None:
    """Per kernel name: calls equal, total / max / min to the µs, the duration-weighted blocks per SM and
    achieved occupancy within 0.01 (profview's rows, per kernel and launching op, summed up)."""
    peer = pd.DataFrame(_peer(trace)["kernels"]).set_index("name")
    rows = analysed[trace].kernels.assign(
        blocks=lambda t: t["blocks_per_sm"] * t["total_ms"],
        occupancy=lambda t: t["achieved_occupancy_pct"] * t["total_ms"],
    )
    mine = rows.groupby("name").agg(
        calls=("calls", "sum"),
        total_ms=("total_ms", "sum"),
        max_ms=("max_ms", "max"),
        min_ms=("min_ms", "min"),
        blocks=("blocks", "sum"),
        occupancy=("occupancy", "sum"),
    )
    assert set(mine.index) == set(peer.index)
    both = peer.join(mine, rsuffix="_mine")
    np.testing.assert_array_equal(both["calls_mine"].to_numpy(), both["calls"].to_numpy())
    np.testing.assert_allclose(both["total_ms"] * 1e3, both["total_us"], atol=1e-3)
    np.testing.assert_allclose(both["max_ms"] * 1e3, both["max_us"], atol=1e-3)
    np.testing.assert_allclose(both["min_ms"] * 1e3, both["min_us"], atol=1e-3)
    np.testing.assert_allclose(both["blocks"] / both["total_ms"], both["blocks_per_sm"], atol=0.01)
    np.testing.assert_allclose(both["occupancy"] / both["total_ms"], both["achieved_occupancy"], atol=0.01)


def test_a_kernel_belongs_to_the_op_around_its_launch(analysed) -> None:
    """alexnet's sgemm is launched by cudaLaunchKernel inside aten::addmm (inside aten::linear): the
    kernel row names aten::addmm, and addmm's device self time is its kernels', linear's total holds it."""
    a = analysed["alexnet"]
    sgemm = a.kernels[a.kernels["name"] == "ampere_sgemm_32x32_sliced1x4_tn"]
    assert sgemm["op"].tolist() == ["aten::addmm"] and sgemm["calls"].tolist() == [6]
    ops = a.op_detail.set_index("name")
    kernels = a.kernels[a.kernels["op"] == "aten::addmm"]["total_ms"].sum()
    assert kernels <= ops.loc["aten::addmm", "device_self_ms"] <= kernels + 0.01  # and a memset
    assert ops.loc["aten::linear", "device_self_ms"] == 0
    assert ops.loc["aten::linear", "device_total_ms"] == pytest.approx(
        ops.loc["aten::addmm", "device_self_ms"], abs=1e-6
    )
    assert ops.loc["aten::conv2d", "tc_eligible"] == "true" and ops.loc["aten::max_pool2d", "tc_eligible"] == "false"


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_device_time_is_conserved(analysed, trace: str) -> None:
    """Every launched execution is counted once as device self time, and the device totals of the outermost
    ops add up to the same: no kernel lost or counted twice on the way up the op tree."""
    a = analysed[trace]
    from profiler.analysis.launches import device_times, launches

    launched = launches(a.run.ops)
    ops = a.run.ops
    times = device_times(ops, launched)
    executions = launched.launcher >= 0
    assert times.device_self_ns.sum() == ops["dur_ns"].to_numpy()[executions].sum()
    roots = (
        (launched.parent < 0) & (ops["device"] == "cpu").to_numpy() & ops["category"].isin(["host", "user"]).to_numpy()
    )
    assert times.device_total_ns[roots].sum() == times.device_self_ns.sum()
    assert executions.sum() >= 0.9 * ops["category"].isin(["compute", "comm", "memcpy", "memset"]).sum()


def test_the_files_are_written_and_read_back(tmp_path: Path) -> None:
    """`profview import` writes kernels_0.csv and step_activity_0.csv, the op tables gain the device columns
    (empty for device rows) and report_0.json's device the GPU summary; the readers accept them."""
    import_capture(DATA / "kineto" / "nccl_data.json.gz", tmp_path)
    kernels = read_csv(tmp_path / "kernels_0.csv", "kernels")
    assert kernels["calls"].sum() == 2700 and set(kernels["tensor_cores"]) == {"true", "false"}
    steps = read_csv(tmp_path / "step_activity_0.csv", "step_activity")
    assert steps["step"].tolist() == [4, 5, 6]
    detail = read_csv(tmp_path / "op_detail_0.csv", "op_detail")
    host = detail[(detail["device"] == "cpu").to_numpy() & (detail["category"] == "host").to_numpy()]
    assert (
        host["device_total_ms"].notna().all() and detail.loc[detail["device"] != "cpu", "device_self_ms"].isna().all()
    )
    assert set(host["tc_eligible"]) == {"true", "false"}
    report = json.loads((tmp_path / "report_0.json").read_text())
    device = report["devices"][0]
    assert device["utilization_pct"] == pytest.approx(_peer("nccl_data")["gpus"]["0"]["utilization"] * 100, abs=0.01)


def test_cpu_only_trace_has_no_device_figures(tmp_path: Path) -> None:
    """Without kernels: no kernels file, empty device columns, and the step breakdown still (gloo's
    all-reduce ranges are communication)."""
    import_capture(DATA / "kineto" / "cpu_only.json.gz", tmp_path)
    assert not list(tmp_path.glob("kernels_*.csv"))  # the trace is rank 34's
    detail = read_csv(tmp_path / "op_detail_34.csv", "op_detail")
    assert detail["device_self_ms"].isna().all() and set(detail["tc_eligible"]) == {""}
    steps = read_csv(tmp_path / "step_activity_34.csv", "step_activity")
    peer = _peer("cpu_only")["steps"][0]["costs_us"]
    assert steps["communication_ms"].iloc[0] == pytest.approx(peer["Communication"] / 1e3, abs=1e-3)


@pytest.mark.parametrize("trace", [*GPU_TRACES, "cpu_only"])
def test_communication_ops_are_the_plugins(analysed, trace: str) -> None:
    """Every collective the plugin knows (its five nccl / gloo names): calls and message bytes equal. The
    latency is the plugin's on gloo (host ranges only); with NCCL profview's also covers the kernels each
    call launched, which the plugin's release could not tie to the call (docs/tensorboard.md): never less."""
    mine = analysed[trace].comm_ops.set_index("name")
    for name, theirs in _peer(trace)["comm_ops"].items():
        row = mine.loc[name]
        assert (row["calls"], row["total_bytes"]) == (theirs["calls"], theirs["bytes"]), name
        if name.startswith("gloo:"):
            assert row["total_ms"] == pytest.approx(theirs["latency_us"] / 1e3, abs=1e-3), name
        else:
            assert row["total_ms"] >= theirs["latency_us"] / 1e3 - 1e-3, name


@pytest.mark.parametrize("trace", [*GPU_TRACES, "cpu_only"])
def test_computation_communication_split_is_the_plugins(analysed, trace: str) -> None:
    """Per step the four parts add up to the step; on the gloo trace each equals the plugin's to the µs,
    and communication is within 1 % of the step on nccl_data, where the plugin tied the NCCL kernels to
    their calls. Elsewhere
    the plugin left NCCL kernels in its computation (as in its step breakdown): profview's communication
    is never less than the plugin's (less 1 % of the step)."""
    mine = analysed[trace].comm_split
    peer = _peer(trace)["comm_split"]
    if mine.empty:
        assert all(s["communication_us"] == 0 for s in peer), trace
        return
    assert len(mine) == len(peer)
    for row, theirs in zip(mine.itertuples(), peer):
        parts = row.computation_ms + row.overlap_ms + row.communication_ms + row.other_ms
        assert parts == pytest.approx(row.total_ms, abs=1e-6)
        communication = row.communication_ms + row.overlap_ms
        if trace == "cpu_only":
            assert row.overlap_ms == pytest.approx(theirs["overlap_us"] / 1e3, abs=1e-3)
            assert row.computation_ms == pytest.approx(
                (theirs["computation_us"] - theirs["overlap_us"]) / 1e3, abs=1e-3
            )
            assert row.other_ms == pytest.approx(theirs["other_us"] / 1e3, abs=1e-3)
        if trace == "cpu_only":
            assert communication == pytest.approx(theirs["communication_us"] / 1e3, abs=1e-3)
        if trace == "nccl_data":
            assert communication == pytest.approx(theirs["communication_us"] / 1e3, abs=0.01 * row.total_ms)
        assert communication >= theirs["communication_us"] / 1e3 - 0.01 * row.total_ms


def test_the_cluster_files_hold_every_ranks_split(tmp_path: Path) -> None:
    """Two ranks of one job imported into one directory: cluster_comm_split.csv is each rank's
    comm_split_{rank}.csv with the rank in front (the plugin's per-worker distributed view)."""
    from profiler.export.cluster import write_cluster_outputs

    runs = {}
    for rank in (0, 1):
        path = DATA / "kineto" / f"sampled_rank-{rank}.json.gz"
        import_capture(path, tmp_path)
        runs[rank] = read_kineto_trace(path)
    written = {p.name for p in write_cluster_outputs(tmp_path, lambda directory, rank: runs[rank])}
    assert "cluster_comm_split.csv" in written
    cluster = read_csv(tmp_path / "cluster_comm_split.csv", "cluster_comm_split")
    for rank in (0, 1):
        own = read_csv(tmp_path / f"comm_split_{rank}.csv", "comm_split")
        mine = cluster[cluster["rank"] == rank].drop(columns="rank").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, own)
    summary = json.loads((tmp_path / "cluster_summary.json").read_text())
    assert "cluster_comm_split.csv" in summary["outputs"] and "cluster_comm_ops.csv" in summary["outputs"]
    # every rank's collectives with the data transfer time: on these ranks each call launched one NCCL kernel,
    # so the k-th kernel of a collective (calls and kernels in start order) transfers min over the ranks
    ops = read_csv(tmp_path / "cluster_comm_ops.csv", "cluster_comm_ops")
    kernels = {rank: _kernels_by_collective(runs[rank].ops) for rank in (0, 1)}
    for rank in (0, 1):
        own = read_csv(tmp_path / f"comm_ops_{rank}.csv", "comm_ops").set_index("name")
        mine = ops[ops["rank"] == rank].set_index("name")
        pd.testing.assert_frame_equal(mine[own.columns].sort_index(), own.sort_index())
        for name, row in mine.iterrows():
            shortest = np.minimum(kernels[0][name], kernels[1][name])
            assert row.transfer_ms == pytest.approx(shortest.sum() / 1e6, abs=1e-6)
            assert row.transfer_ms <= row.total_ms and row.mean_transfer_ms == pytest.approx(
                row.transfer_ms / row.calls
            )
    assert ops.loc[ops["name"] == "nccl:all_reduce", "transfer_ms"].tolist() == pytest.approx([44.446, 44.446])


def _kernels_by_collective(table: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each collective's kernel durations (ns) in call order, pairing the host ranges and the NCCL kernels in
    start order (on sampled_rank-0/1 every call launched exactly one kernel, after the previous one's)."""
    host = table[(table["device"] == "cpu") & (table["category"] == "comm")].sort_values("start_ns")
    device = table[(table["device"] != "cpu") & (table["category"] == "comm")].sort_values("start_ns")
    assert len(host) == len(device)
    names = host["name"].astype(str).to_numpy()
    return {n: device["dur_ns"].to_numpy(np.int64)[names == n] for n in sorted(set(names))}


@pytest.mark.parametrize("trace", GPU_TRACES)
def test_ops_by_input_shape_add_up_to_each_op(analysed, trace: str) -> None:
    """op_shapes partitions op_detail: per op name, its shape rows' calls, host and device times add up."""
    shapes, detail = analysed[trace].op_shapes, analysed[trace].op_detail
    if shapes.empty:  # the trace recorded no shapes
        assert (analysed[trace].run.ops["shapes"].astype(str) == "").all()
        return
    summed = shapes.groupby(["device", "name"], observed=True)[["count", "total_ms", "self_ms", "device_self_ms"]].sum()
    mine = detail.set_index(["device", "name"])[["count", "total_ms", "self_ms", "device_self_ms"]].fillna(0)
    pd.testing.assert_frame_equal(
        summed.sort_index(), mine.sort_index(), check_exact=False, atol=1e-6, check_dtype=False
    )

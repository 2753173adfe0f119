"""The reference Ascend-style device: its log in the formats of RAW_FORMATS.md, its API, and a numpy
model run through it, checked against what the host saw (the device's intervals on the host clock)."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler, ProfviewError
from profiler.importers.ascend import read_ascend_job, to_run
from profiler.importers.ascend.hwts import GLOBAL_TASK_ID_MIN, decode_hwts
from profiler.importers.ascend.slices import Joined
from profiler.importers.ascend.training_trace import decode_training_trace
from profiler.postprocess.recording import load_rank
from profiler.record.recorder import now_ns
from profview_reference_device.device import AscendReferenceDevice
from profview_reference_device.log_writer import (
    CLOCK_SYNC_NAME,
    hwts_bytes,
    task_pair_bytes,
    tensor_description,
    training_trace_bytes,
)
from profview_reference_device.merge import HOST_STEP_LANE, HOST_STEP_SPAN, read_clock_sync

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sample_runs"))
from ascend_reference_device import NumpyMLP, batches  # noqa: E402

TICK = 10  # ns per syscnt tick: device times are tick edges, up to 10 ns before the true instant


def joined(data: np.ndarray) -> Joined:
    return Joined(data, (Path("mem"),), np.zeros(1, dtype=np.int64))


# ---- the writer ---------------------------------------------------------------------------------


def test_hwts_records_have_the_documented_layout():
    data = hwts_bytes(
        np.array([0, 1, 0]),
        np.array([25000, 25000, 40000]),
        np.array([7, 7, 9]),
        np.array([123456789012, 123456789099, 2**40]),
        first_cnt=15,
    )
    raw = data.tobytes()
    assert len(raw) == 3 * 64
    assert raw[0] == 0 | (15 << 4) and raw[64] == 1 | (0 << 4)  # log type + rolling 4-bit cnt
    assert struct.unpack_from("<H", raw, 6)[0] == 25000  # task id at 6
    assert struct.unpack_from("<Q", raw, 8)[0] == 123456789012  # syscnt at 8
    assert struct.unpack_from("<I", raw, 16)[0] == 7  # stream id at 16
    assert raw[20:64] == bytes(44)
    records, problems = decode_hwts(joined(data))
    assert problems == []
    assert records["log_type"].tolist() == [0, 1, 0] and records["cnt"].tolist() == [15, 0, 1]
    assert records["syscnt"].tolist() == [123456789012, 123456789099, 2**40]


def test_task_pairs_and_trace_points_decode_back():
    pairs = task_pair_bytes(np.array([25001, 25002]), np.array([0, 1]), np.array([100, 150]), np.array([120, 400]))
    records, _ = decode_hwts(joined(pairs))
    assert records[["log_type", "task_id", "stream_id", "syscnt"]].values.tolist() == [
        [0, 25001, 0, 100],
        [1, 25001, 0, 120],
        [0, 25002, 1, 150],
        [1, 25002, 1, 400],
    ]
    trace = training_trace_bytes(np.array([10000, 1, 255]), np.zeros(3), np.array([0, 0, 0]), np.array([5, 6, 9]))
    assert len(trace) == 60 and struct.unpack_from("<QHHQ", trace.tobytes(), 20) == (1, 0, 0, 6)
    frame, _ = decode_training_trace(joined(trace))
    assert frame["tag"].tolist() == [10000, 1, 255] and frame["syscnt"].tolist() == [5, 6, 9]


def test_tensor_descriptions_use_the_vm_enum():
    assert tensor_description(np.zeros((16, 80), np.float32)) == (40, "16,80")
    assert tensor_description(np.int32(3)) == (31, "")
    assert tensor_description(2.5) == (41, "")
    assert tensor_description("text") is None


# ---- the device API -----------------------------------------------------------------------------


def test_streams_run_in_order_and_tasks_wait_across_streams(tmp_path):
    with AscendReferenceDevice(device_id=3, streams=2, job_dir=tmp_path / "JOB") as dev:
        slow = dev.launch("Default/Slow-op1", "Slow", lambda: (time.sleep(0.05), np.arange(4.0))[1])
        doubled = dev.launch("Default/Mul-op2", "Mul", lambda a: a * 2, slow, stream=1)  # waits for stream 0
        assert not doubled.done()
        assert doubled.result(timeout=10).tolist() == [0, 2, 4, 6]
        order = []
        for i in range(20):
            dev.launch("Default/Append-op3", "Append", order.append, i)
        dev.synchronize()
        assert order == list(range(20))
    with pytest.warns(UserWarning, match="there are no steps"):  # no fp_start / iter_end: no iterations
        job = read_ascend_job(tmp_path / "JOB")
    assert job.device_id == 3 and len(job.executions) == 22
    assert (job.tasks["task_id"] >= GLOBAL_TASK_ID_MIN).all() and job.tasks["task_id"].is_unique
    assert len(job.tasks) == 3  # one task id per op: the ops form one graph
    mul = job.executions[job.executions["op"] == job.op_names.index("Default/Mul-op2")].iloc[0]
    slow_run = job.executions[job.executions["op"] == job.op_names.index("Default/Slow-op1")].iloc[0]
    assert mul["start"] >= slow_run["start"] + slow_run["dur"] and mul["stream_id"] == 1
    assert job.graph.set_index("full_name").loc["Default/Mul-op2", "op_info"]["input_0"]["shape"] == "4"


def test_kernel_errors_reach_the_host(tmp_path):
    dev = AscendReferenceDevice(job_dir=tmp_path / "JOB")
    bad = dev.launch("Default/Fail-op1", "Fail", lambda: 1 / 0)
    dependent = dev.launch("Default/Use-op2", "Use", lambda x: x, bad)
    with pytest.raises(ZeroDivisionError):
        bad.result(timeout=10)
    with pytest.raises(ZeroDivisionError):
        dependent.result(timeout=10)
    with pytest.raises(ZeroDivisionError):
        dev.synchronize()
    dev.synchronize()  # reported once
    dev.close()
    assert dev.info()["failed_tasks"] == 2


def test_misuse_is_refused(tmp_path):
    dev = AscendReferenceDevice(streams=2, job_dir=tmp_path / "JOB")
    dev.launch("Default/A-op1", "A", int)
    with pytest.raises(ValueError, match="was launched as 'A'"):
        dev.launch("Default/A-op1", "B", int)
    with pytest.raises(ValueError, match="not a compute stream"):
        dev.launch("Default/C-op2", "C", int, stream=2)  # stream 2 is the data stream
    dev.close()
    with pytest.raises(ProfviewError, match="closed"):
        dev.launch("Default/A-op1", "A", int)
    with pytest.raises(ProfviewError, match="closed"):
        dev.to_device(np.zeros(3))


def test_stand_alone_job_directory_has_every_file(tmp_path):
    job_dir = tmp_path / "JOB"
    with AscendReferenceDevice(device_id=0, streams=2, job_dir=job_dir) as dev:
        for _ in range(3):
            x = dev.to_device(np.ones((8, 4), np.float32))
            dev.fp_start()
            h = dev.launch("Default/MatMul-op1", "MatMul", np.matmul, x, np.ones((4, 2), np.float32))
            dev.launch("Gradients/ReluGrad-op2", "ReluGrad", np.negative, h)
            dev.bp_end()
            dev.all_reduce("Default/AllReduce-op3", np.copy, h, stream=1)
            dev.iter_end().result(timeout=10)
    names = sorted(p.name for p in job_dir.iterdir())
    assert names == [
        "Framework.host.vm.graph_desc_info.0.slice_0",
        "Framework.host.vm.point.0.slice_0",
        "Framework.host.vm.task_desc_info.0.slice_0",
        "hwts.log.data.45.dev.profiler_default_tag.0.slice_0",
        CLOCK_SYNC_NAME.format(dev=0),
        "training_trace.46.dev.profiler_default_tag.0.slice_0",
    ]
    assert (job_dir / "Framework.host.vm.point.0.slice_0").read_text().splitlines() == [
        "1 Default/MatMul-op1",
        "2 Gradients/ReluGrad-op2",
        "3 Default/AllReduce-op3",
        "4 Default/AllReduce-op3",
    ]
    job = read_ascend_job(job_dir)
    assert job.warnings == []
    run = to_run(job)
    assert run.steps["step"].tolist() == [0, 1, 2]
    assert set(run.ops["op_type"]) == {"MatMul", "ReluGrad", "MemcpyAsync"}
    assert run.ops.loc[run.ops["op_type"] == "MatMul", "shapes"].iat[0] == "[[8, 4], [4, 2]]"
    assert run.spans["name"].eq("all_reduce").sum() == 3 and set(run.threads["os_tid"]) == {1}
    sync = read_clock_sync(job_dir / CLOCK_SYNC_NAME.format(dev=0))
    assert sync.residual_ns() == 0 and sync.host_steps == {0: 0, 1: 1, 2: 2} and len(sync.pairs) >= 2


# ---- a numpy model through a profiled device, against the host's view ---------------------------


class TimedDevice(AscendReferenceDevice):
    """Records, for every launched op and all-reduce, the host's view of it: from the launch call to the
    moment the host saw the iteration finish, and when its callable actually ran (on the stream)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.truth: list[dict] = []

    def _timed(self, name, fn):
        rec = {"name": name, "launched": now_ns()}
        self.truth.append(rec)

        def run(*values):
            rec["fn_start"] = now_ns()
            try:
                return fn(*values)
            finally:
                rec["fn_end"] = now_ns()

        return rec, run

    def launch(self, name, op_type, fn, *args, stream=0):
        rec, run = self._timed(name, fn)
        rec["kind"] = "op"
        return super().launch(name, op_type, run, *args, stream=stream)

    def all_reduce(self, name, fn, *args, stream=None):
        rec, run = self._timed(name, fn)
        rec["kind"] = "all_reduce"
        return super().all_reduce(name, run, *args, stream=stream)


STEPS = 6


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    """6 iterations of the sample's MLP on a 2-stream device, each waited for; the host's truth per op."""
    out = tmp_path_factory.mktemp("device") / "run"
    profiler = Profiler(out, host_counters=False, gpu_counters=False)
    dev = TimedDevice(profiler, device_id=0, streams=2)
    model = NumpyMLP(np.random.default_rng(0))
    for x, y in batches(STEPS, loader_ms=1):
        model.step(dev, dev.to_device(x), dev.to_device(y))
        dev.iter_end().result(timeout=60)
        observed = now_ns()
        for rec in dev.truth:
            rec.setdefault("observed", observed)
        profiler.step()
    profiler.analyse(progress=False)
    return out, dev.truth, load_rank(out, 0)


def test_device_ops_lie_within_what_the_host_saw(model_run):
    out, truth, run = model_run
    origin = int(run.info["clock"]["origin_monotonic_ns"])
    ops = run.ops[(run.ops["device"] == "npu:0") & (run.ops["op_type"] != "MemcpyAsync")]
    launched = pd.DataFrame([r for r in truth if r["kind"] == "op"])
    assert len(ops) == len(launched) == 12 * STEPS
    overheads = []
    for name, device_ops in ops.groupby("name", sort=False):
        device_ops = device_ops.sort_values("start_ns")
        host = launched[launched["name"] == name]
        assert len(device_ops) == len(host) == STEPS, name
        start = device_ops["start_ns"].to_numpy() + origin  # back on the host clock
        end = start + device_ops["dur_ns"].to_numpy()
        # launch call <= device start <= the callable started; the callable ended <= device end <= host saw it
        assert (start >= host["launched"].to_numpy() - TICK).all(), name
        assert (start <= host["fn_start"].to_numpy()).all(), name
        assert (end >= host["fn_end"].to_numpy() - TICK).all(), name
        assert (end <= host["observed"].to_numpy()).all(), name
        overheads += list(device_ops["dur_ns"].to_numpy() - (host["fn_end"] - host["fn_start"]).to_numpy())
    # device durations (from cycles) are the work done, plus the stream's two counter reads
    assert min(overheads) >= -TICK and np.median(overheads) < 100_000


def test_all_reduce_intervals_lie_within_what_the_host_saw(model_run):
    out, truth, run = model_run
    origin = int(run.info["clock"]["origin_monotonic_ns"])
    lane = run.threads.loc[run.threads["name"] == "npu:0 stream 1 all_reduce", "tid"]
    spans = run.spans[(run.spans["name"] == "all_reduce") & run.spans["tid"].isin(lane)].sort_values("start_ns")
    host = pd.DataFrame([r for r in truth if r["kind"] == "all_reduce"])  # stream 1 runs them in launch order
    assert len(spans) == len(host) == 2 * STEPS
    start = spans["start_ns"].to_numpy() + origin
    end = start + spans["dur_ns"].to_numpy()
    assert (start >= host["launched"].to_numpy() - TICK).all() and (start <= host["fn_start"].to_numpy()).all()
    assert (end >= host["fn_end"].to_numpy() - TICK).all() and (end <= host["observed"].to_numpy()).all()


def test_step_trace_comes_from_the_device_points(model_run):
    out, truth, run = model_run
    st = pd.read_csv(out / "step_trace_0.csv")
    assert st["step"].tolist() == list(range(STEPS))
    assert np.allclose(st["iteration_gap_ms"] + st["fp_bp_ms"] + st["tail_ms"], st["total_ms"], atol=3e-6)
    assert (st[["iteration_gap_ms", "fp_bp_ms", "tail_ms"]] >= 0).all().all()
    assert (st["fp_start_source"] == "marked").all() and (st["bp_end_source"] == "marked").all()
    assert (st["all_reduce_ms"] > 0).all()
    # the overlap is the all-reduce time inside FP_START..BP_END: usually none (the all-reduces are launched
    # after BP_END), but stream 1 may start one as soon as its gradient is ready, before stream 0 runs BP_END
    reduces = run.spans[run.spans["name"] == "all_reduce"]
    for step, row in zip(run.steps.itertuples(), st.itertuples()):
        inside = (reduces["start_ns"] + reduces["dur_ns"]).clip(upper=step.bp_end_ns) - reduces["start_ns"].clip(
            lower=step.fp_start_ns
        )
        assert row.all_reduce_overlap_ms == pytest.approx(inside.clip(lower=0).sum() * 1e-6, abs=1e-9)
    assert run.info["steps_from"] == "npu:0"
    ops = run.ops[run.ops["device"] == "npu:0"]
    for step in run.steps.itertuples():
        mine = ops[ops["step"] == step.step]
        fwd = mine[mine["name"].str.startswith("Default/network/")]
        bwd = mine[mine["name"].str.startswith("Gradients/")]
        update = mine[mine["name"].str.startswith("Default/optimizer/")]
        # FP_START before the first forward op, BP_END between the last backward op and the update, ITER_END last
        assert step.fp_start_ns <= fwd["start_ns"].min()
        assert (bwd["start_ns"] + bwd["dur_ns"]).max() <= step.bp_end_ns <= update["start_ns"].min()
        assert (mine["start_ns"] + mine["dur_ns"]).max() <= step.end_ns
    info = json.loads((out / "profiler_info_0.json").read_text())
    device = info["ascend_devices"][0]
    assert device["device"] == "npu:0" and device["clock"]["sync_residual_ns"] == 0
    assert device["fp_start_op"] == "Default/network/fc1/MatMul-op1"
    assert device["bp_end_op"] == "Gradients/Default/network/fc1/MatMul-op10"
    assert info["sources"]["ascend_dev0"]["status"] == "ok" and info["warnings"] == []


def test_host_steps_are_kept_as_spans(model_run):
    out, truth, run = model_run
    tid = run.threads.loc[run.threads["name"] == HOST_STEP_LANE, "tid"]
    host = run.spans[(run.spans["name"] == HOST_STEP_SPAN) & run.spans["tid"].isin(tid)]
    assert len(host) == STEPS
    # a host step ends (profiler.step()) after the host saw its iteration end on the device
    assert ((host["start_ns"] + host["dur_ns"]).to_numpy() >= run.steps["end_ns"].to_numpy()).all()
    ops = pd.read_csv(out / "op_type_0.csv")
    assert set(ops["device"]) == {"npu:0"} and ops.iloc[0]["op_type"] == "MatMul"


def test_device_steps_are_numbered_by_the_host_step_that_began_them(tmp_path):
    profiler = Profiler(tmp_path / "run", host_counters=False, gpu_counters=False)
    for _ in range(3):
        profiler.step()  # three host steps before the device starts iterating
    dev = AscendReferenceDevice(profiler, streams=1)
    for _ in range(2):
        dev.fp_start()
        dev.launch("Default/Add-op1", "Add", np.add, np.ones(4), 1)
        dev.bp_end()
        dev.iter_end().result(timeout=10)
        profiler.step()
    profiler.analyse(progress=False)
    st = pd.read_csv(tmp_path / "run" / "step_trace_0.csv")
    assert st["step"].tolist() == [3, 4]
    op = pd.read_csv(tmp_path / "run" / "op_detail_0.csv")
    assert op[["device", "name", "count"]].values.tolist() == [["npu:0", "Default/Add-op1", 2]]


def test_without_device_iterations_the_host_steps_stay(tmp_path):
    profiler = Profiler(tmp_path / "run", host_counters=False, gpu_counters=False)
    dev = AscendReferenceDevice(profiler, streams=1)
    for _ in range(3):
        with profiler.phase("forward"):
            dev.launch("Default/Add-op1", "Add", np.add, np.ones(4), 1).result(timeout=10)
        profiler.step()
    profiler.analyse(progress=False)
    run = load_rank(tmp_path / "run", 0)
    assert run.info["steps_from"] == "host" and run.steps["step"].tolist() == [0, 1, 2]
    device_ops = run.ops[run.ops["device"] == "npu:0"]
    assert device_ops["step"].tolist() == [0, 1, 2]
    assert not run.spans["name"].eq(HOST_STEP_SPAN).any()


def test_a_device_without_clock_sync_is_left_out_with_a_warning(tmp_path):
    profiler = Profiler(tmp_path / "run", host_counters=False, gpu_counters=False)
    dev = AscendReferenceDevice(profiler)
    dev.launch("Default/Add-op1", "Add", np.add, np.ones(4), 1)
    profiler.step()
    profiler.stop()
    (Path(dev.details["job_dir"]) / CLOCK_SYNC_NAME.format(dev=0)).unlink()
    profiler.analyse(progress=False)
    info = json.loads((tmp_path / "run" / "profiler_info_0.json").read_text())
    assert any("npu:0" in w and "not merged" in w and "host clock" in w for w in info["warnings"])
    assert not (tmp_path / "run" / "op_type_0.csv").exists()

"""torch.profiler op capture: a real CNN training loop on the CPU, checked against torch's own numbers."""

import gzip
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from profiler import Profiler, schedule  # noqa: E402
from profiler.capture.base import Source  # noqa: E402
from profiler.capture.torch_capture import TorchOps, torch_index_entries  # noqa: E402
from profiler.postprocess.recording import load_rank  # noqa: E402
from profiler.record.recorder import clock_anchor  # noqa: E402

from support.torch_loops import cifar_batch, profiled_cnn_run, read_csv, small_cnn, torch_capture_of, train  # noqa: E402

torch.set_num_threads(1)
EXPECTED_OPS = {
    "aten::conv2d",
    "aten::convolution",
    "aten::batch_norm",
    "aten::native_batch_norm",
    "aten::relu",
    "aten::max_pool2d",
    "aten::linear",
    "aten::convolution_backward",
    "aten::native_batch_norm_backward",
    "aten::threshold_backward",
}


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cnn")
    profiler = profiled_cnn_run(out, steps=6)
    return out, profiler


def test_import_profiler_does_not_import_torch(tmp_path):
    """Neither the import nor a whole recording and analysis without framework / attach imports torch."""
    code = (
        "import sys, profiler; from profiler import Profiler; assert 'torch' not in sys.modules\n"
        f"p = Profiler({str(tmp_path)!r}, gpu_counters=False); p.step(); p.step(); p.analyse(progress=False)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'torch'], 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_op_tables_hold_the_aten_ops(cnn_run):
    out, _ = cnn_run
    detail = read_csv(out, "op_detail")
    assert EXPECTED_OPS <= set(detail["name"])
    assert set(detail["device"]) == {"cpu"}
    conv = detail.set_index("name").loc["aten::conv2d"]
    assert conv["count"] == 2 * 6  # two convolutions a step, six steps
    assert conv["self_ms"] < conv["total_ms"]  # self excludes the nested convolution kernels
    op_type = read_csv(out, "op_type")
    assert abs(op_type["share_pct"].sum() - 100.0) < 0.01
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["sources"]["torch"]["status"] == "ok"
    assert info["sources"]["torch"]["windows_merged"] == 1


def test_per_op_totals_match_torch_key_averages(cnn_run):
    """Same run, same torch.profiler object: count, total and self time per op within 5 %."""
    out, profiler = cnn_run
    averages = {e.key: e for e in torch_capture_of(profiler).torch_profiler.key_averages()}
    detail = read_csv(out, "op_detail").set_index("name")
    compared = 0
    for name, e in averages.items():
        if not name.startswith("aten::") or e.cpu_time_total < 50:  # us; tiny ops are all noise
            continue
        ours = detail.loc[name]
        assert ours["count"] == e.count, name
        assert ours["total_ms"] == pytest.approx(e.cpu_time_total / 1e3, rel=0.05), name
        assert ours["self_ms"] == pytest.approx(e.self_cpu_time_total / 1e3, rel=0.05, abs=0.005), name
        compared += 1
    assert compared >= 15


def test_every_op_lies_in_its_step_between_the_hook_marks(cnn_run):
    out, _ = cnn_run
    run = load_rank(out, 0)
    ops = run.ops[run.ops["source"] == "torch"]
    assert set(ops["step"]) == set(range(6))
    steps = run.steps.set_index("step")
    marks = run.instants[run.instants["kind"] == "mark"]
    fp = marks[marks["name"] == "fp_start"]["time_ns"].to_numpy()
    bp = marks[marks["name"] == "bp_end"]["time_ns"].to_numpy()
    for s, g in ops.groupby("step"):
        assert g["start_ns"].min() >= steps.loc[s, "start_ns"]
        assert (g["start_ns"] + g["dur_ns"]).max() <= steps.loc[s, "end_ns"]
        # the first convolution follows the fp_start mark; backward ops end before bp_end
        conv = g[g["name"] == "aten::conv2d"]
        assert 0 <= conv["start_ns"].min() - fp[s] < 10_000_000
        bwd = g[g["name"] == "aten::convolution_backward"]
        assert (bwd["start_ns"] + bwd["dur_ns"]).max() <= bp[s]


def test_kineto_clock_rule(tmp_path):
    """ts_us * 1000 + baseTimeNanoseconds is Unix ns: each annotation lies inside the
    perf_counter_ns bracket taken around it, once moved onto perf_counter_ns with an anchor pair."""
    brackets = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(50):
            a = time.perf_counter_ns()
            with record_function(f"probe{i}"):
                time.sleep(0.0002)
            brackets.append((a, time.perf_counter_ns()))
    mono, unix = clock_anchor()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    base = trace["baseTimeNanoseconds"]
    events = {e["name"]: e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    for i, (a, b) in enumerate(brackets):
        e = events[f"probe{i}"]
        start = round(e["ts"] * 1000) + base - unix + mono
        end = start + round(e["dur"] * 1000)
        assert a <= start and end <= b, (i, start - a, b - end)


def test_torch_ops_land_inside_profview_spans(tmp_path):
    """End to end through the sidecar and the merge: an aten::mm run inside a profview span."""
    a = torch.randn(256, 256)
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False, framework="torch")
    for _ in range(20):
        with p.span("probe"):
            torch.mm(a, a)
        p.step()
    p.analyse(progress=False)
    run = load_rank(tmp_path, 0)
    mm = run.ops[run.ops["name"] == "aten::mm"].sort_values("start_ns")
    probe = run.spans[run.spans["name"] == "probe"].sort_values("start_ns")
    assert len(mm) == len(probe) == 20
    assert (mm["start_ns"].to_numpy() >= probe["start_ns"].to_numpy()).all()
    assert ((mm["start_ns"] + mm["dur_ns"]).to_numpy() <= (probe["start_ns"] + probe["dur_ns"]).to_numpy()).all()
    assert set(mm["stream"]) == {"MainThread"}  # the profview lane of the same thread


def test_ops_schedule_samples_op_capture_while_every_step_is_traced(tmp_path):
    p = profiled_cnn_run(tmp_path, steps=12, ops_schedule=schedule(wait=2, warmup=1, active=2))
    trace = read_csv(tmp_path, "step_trace")
    assert list(trace["step"]) == list(range(12))
    assert set(trace["fp_start_source"]) == {"marked"} and set(trace["bp_end_source"]) == {"marked"}
    run = load_rank(tmp_path, 0)
    assert sorted(set(run.ops["step"])) == [3, 4, 8, 9]
    per_step = run.ops.groupby("step").size()
    assert per_step.nunique() == 1  # every sampled step has its full op set
    assert torch_capture_of(p).windows_saved == 2
    windows = sorted(tmp_path.glob("raw/*-torch-*.json.gz"))
    assert len(windows) == 2 and not list(tmp_path.glob("raw/*-torch-*.json"))
    entries = [entry for _, entry in torch_index_entries(tmp_path, 0)]
    assert [(e["first_step"], e["last_step"]) for e in entries] == [(3, 4), (8, 9)]
    # torch is stepped only where the op action changes: no ProfilerStep#N ranges of its own
    assert all(b"ProfilerStep#" not in gzip.decompress(w.read_bytes()) for w in windows)


def test_one_step_windows_back_to_back(tmp_path):
    """active=1 with no wait: every step is its own window (torch saves one after each step, a
    RECORD_AND_SAVE -> RECORD_AND_SAVE transition)."""
    p = profiled_cnn_run(tmp_path, steps=4, ops_schedule=schedule(wait=0, warmup=0, active=1))
    run = load_rank(tmp_path, 0)
    assert sorted(set(run.ops["step"])) == [0, 1, 2, 3]
    assert run.ops.groupby("step").size()[1:].nunique() == 1  # step 0 is the loop's first (warm-up work)
    entries = [entry for _, entry in torch_index_entries(tmp_path, 0)]
    # the fifth is step 4, begun by the last step end and cut short by stop()
    assert [(e["first_step"], e["last_step"]) for e in entries] == [(k, k) for k in range(5)]
    assert torch_capture_of(p).windows_saved == 5


def test_record_shapes_fills_the_shapes_column(tmp_path):
    profiled_cnn_run(tmp_path, steps=2, framework="torch", record_shapes=True)
    detail = read_csv(tmp_path, "op_detail").set_index("name")
    assert "[32,3,32,32]" in detail.loc["aten::conv2d", "shapes"]
    info = json.loads((tmp_path / "profiler_info_0.json").read_text())
    assert info["config"]["record_shapes"] is True and info["sources"]["torch"]["record_shapes"] is True


def test_options_are_off_by_default(cnn_run):
    out, _ = cnn_run
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert {k: info["config"][k] for k in ("record_shapes", "profile_memory", "with_stack")} == {
        "record_shapes": False,
        "profile_memory": False,
        "with_stack": False,
    }
    assert set(read_csv(out, "op_detail")["shapes"]) == {""}


def _device_trace(base: int, ts_us: float) -> dict:
    """A Kineto trace of one CUDA launch: host op, runtime launch and memcpy / kernel on stream 7."""

    def x(cat, name, pid, tid, dt, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts_us + dt, "dur": dur, "args": args}

    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base,
        "traceEvents": [
            x("cpu_op", "aten::mm", 100, 100, 0, 50),
            x("cuda_runtime", "cudaLaunchKernel", 100, 100, 10, 5, correlation=41),
            x("cuda_runtime", "cudaMemcpyAsync", 100, 100, 20, 5, correlation=42),
            x("kernel", "volta_sgemm_128x64_nn", 0, 7, 30, 40, device=0, stream=7, correlation=41),
            x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 0, 7, 80, 10, device=0, stream=7, correlation=42),
        ],
    }


class _SidecarsOnly(Source):
    """Lists the torch source in the recording, as a CUDA machine's capture would; the test
    writes the sidecar that capture would have exported (the analysis merges the sources listed)."""

    name = TorchOps.name


def test_device_ops_and_launch_flows_from_a_cuda_trace(tmp_path):
    """The merge path of a CUDA capture (no GPU here): a sidecar trace with kernels and correlations."""
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False, sources=[_SidecarsOnly()])
    p.step()
    time.sleep(0.002)
    mono, unix = clock_anchor()
    time.sleep(0.002)
    p.step()
    p.stop()
    base = unix - 1_000_000_000
    stem = next(tmp_path.glob("raw/*.pvraw")).name[: -len(".pvraw")]
    (tmp_path / "raw" / f"{stem}-torch-0.json.gz").write_bytes(
        gzip.compress(json.dumps(_device_trace(base, 1_000_000.0)).encode())
    )
    entry = {
        "file": f"{stem}-torch-0.json",
        "window": 0,
        "first_step": 1,
        "last_step": 1,
        "anchor": {"monotonic_ns": mono, "unix_ns": unix},
        "threads": {"100": "MainThread"},
    }
    (tmp_path / "raw" / f"{stem}-torch.jsonl").write_text(json.dumps(entry) + "\n")
    p.analyse(progress=False)
    op_type = read_csv(tmp_path, "op_type").set_index(["device", "op_type"])
    assert op_type.loc[("cuda:0", "volta_sgemm_128x64_nn"), "category"] == "compute"
    assert op_type.loc[("cuda:0", "Memcpy HtoD"), "category"] == "memcpy"
    run = load_rank(tmp_path, 0)
    assert set(run.ops["step"]) == {1}
    kernel = run.ops[run.ops["name"] == "volta_sgemm_128x64_nn"].iloc[0]
    origin = run.info["clock"]["origin_monotonic_ns"]
    assert kernel["start_ns"] == mono - origin + 30_000 and kernel["correlation"] == 41
    events = json.loads((tmp_path / "timeline_0.json").read_text())["traceEvents"]
    flows = [e for e in events if e.get("ph") in ("s", "f")]
    assert sorted((e["ph"], e["id"]) for e in flows) == [("f", 41), ("f", 42), ("s", 41), ("s", 42)]


def test_ddp_collectives_count_as_all_reduce(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(small_cnn())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        p = Profiler(tmp_path / "out", host_counters=False, gpu_counters=False)
        p.attach(model, optimizer)
        train(model, optimizer, cifar_batch(), steps=4)
        p.analyse(progress=False)
    finally:
        dist.destroy_process_group()
    trace = read_csv(tmp_path / "out", "step_trace")
    assert (trace["all_reduce_ms"] > 0).all()
    assert np.allclose(trace["iteration_gap_ms"] + trace["fp_bp_ms"] + trace["tail_ms"], trace["total_ms"], atol=1e-5)
    op_type = read_csv(tmp_path / "out", "op_type")
    comm = op_type[op_type["category"] == "comm"]
    assert "gloo:all_reduce" in set(comm["op_type"])
    info = json.loads((tmp_path / "out" / "profiler_info_0.json").read_text())
    assert info["world_size"] == 1


def test_op_capture_follows_the_profiler_schedule_by_default(tmp_path):
    """No ops_schedule: ops are captured exactly on the steps the step trace records."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiled_cnn_run(tmp_path, steps=9, schedule=schedule(wait=1, warmup=1, active=2))
    assert caught == []
    trace = read_csv(tmp_path, "step_trace")
    assert list(trace["step"]) == [2, 3, 6, 7]
    run = load_rank(tmp_path, 0)
    assert sorted(set(run.ops["step"])) == [2, 3, 6, 7]

"""The output variants of the framework versions the importers claim, made from the shared real
captures by rewriting them in tmp (the captures themselves are never changed):

* Kineto from torch 1.13 to 2.13: integer Unix-µs `ts` without baseTimeNanoseconds (torch 1.x),
  `ProfilerStep#N` as `cpu_op` or `user_annotation`, `ts` / `dur` as text, `args` absent or not an
  object, `deviceProperties` / `distributedInfo` absent or odd, gzip or plain JSON, and damage
  that must cost only the damaged events (a `ts` of -1, a 23-digit step number).
* MindSpore 1.x / MindInsight-era Ascend directories: device times near 1.5e13 ticks, the summary
  row MindSpore writes after the steps, the later all-reduce column naming, timelines written
  relative to min_cycle_counter.

Each variant must give the same run as the original (up to what the variant cannot express), and
`profview PATH -o report.html` must work on it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler.analysis.device_time import IDLE_CAUSES, device_time, runtime_calls
from profiler.analysis.results import analyse_run, step_windows_ns
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.importers.mindspore import read_mindspore_dir

from support.trace_variants import load_trace, rocm_variant, write_trace

REPO = Path(__file__).resolve().parents[2]
STEP_TRACE = "step_trace_raw_1_detail_time.csv"


def _profview(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DISPLAY", None)
    return subprocess.run(
        [sys.executable, "-m", "viewer.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=600
    )


def _report_works(path: Path, tmp: Path) -> None:
    result = _profview(path, "-o", tmp / "report.html")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and (tmp / "report.html").stat().st_size > 100_000


# ----------------------------------------------------------------------------- Kineto


def _relative(run) -> dict:
    """What a variant must keep: per step its number and duration, per op its name, relative start, duration."""
    steps = run.steps.sort_values("step")
    ops = run.ops.sort_values(["start_ns", "name"], kind="stable")
    return {
        "steps": steps["step"].tolist(),
        "step_dur": (steps["end_ns"] - steps["start_ns"]).to_numpy(),
        "op_names": ops["name"].astype(str).tolist(),
        "op_start": ops["start_ns"].to_numpy(),
        "op_dur": ops["dur_ns"].to_numpy(),
        "categories": ops["category"].astype(str).tolist(),
    }


def _torch_1_13(doc: dict) -> dict:
    """A torch 2.x trace (baseTimeNanoseconds, float µs relative to it) as torch 1.13 wrote it:
    integer Unix µs, no base, ProfilerStep#N as a cpu_op, no distributedInfo, args of host ops
    without the newer keys."""
    out = copy.deepcopy(doc)
    base_us = out.pop("baseTimeNanoseconds") // 1000
    for e in out["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = int(round(base_us + e["ts"]))
        if isinstance(e.get("dur"), float):
            e["dur"] = int(round(e["dur"]))
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["cat"] = "cpu_op"
        if isinstance(e.get("args"), dict):
            for key in ("Record function id", "Ev Idx", "Concrete Inputs", "Input Strides"):
                e["args"].pop(key, None)
    for key in ("distributedInfo", "displayTimeUnit", "INFO"):
        out.pop(key, None)
    return out


@pytest.fixture(scope="module")
def nccl(captures: Path):
    path = captures / "kineto" / "nccl_data.json.gz"
    return path, load_trace(path), read_kineto_trace(path)


def test_torch_1_13_style_trace_gives_the_same_run(nccl, tmp_path: Path):
    path, doc, original = nccl
    run = read_kineto_trace(write_trace(_torch_1_13(doc), tmp_path / "rank0.pt.trace.json", compress=False))
    assert run.info["clock"]["clock"] == "kineto: ts is Unix time in us"
    assert abs(run.info["origin_unix_ns"] - original.info["origin_unix_ns"]) <= 1000
    assert run.steps["step"].tolist() == original.steps["step"].tolist() == [4, 5, 6]
    # whole µs instead of µs with 3 decimals: every time within a µs of the original (ties may reorder)
    step_dur = lambda r: (r.steps["end_ns"] - r.steps["start_ns"]).to_numpy()
    assert np.abs(step_dur(run) - step_dur(original)).max() <= 1000
    key = ["name", "category", "start_ns", "dur_ns"]
    a = original.ops[key].astype({"name": str, "category": str}).sort_values(key, ignore_index=True)
    b = run.ops[key].astype({"name": str, "category": str}).sort_values(key, ignore_index=True)
    assert a["name"].tolist() == b["name"].tolist() and a["category"].tolist() == b["category"].tolist()
    # (the origin moves by under 1 µs too: starts within 2 µs)
    assert np.abs(a["start_ns"] - b["start_ns"]).max() <= 2000 and np.abs(a["dur_ns"] - b["dur_ns"]).max() <= 1000
    assert run.rank == 0 and run.info["world_size"] == 1


def test_times_as_text_and_plain_json_give_the_identical_run(nccl, tmp_path: Path):
    """MindSpore's trace_view.json and some converters write ts / dur as decimal text."""
    path, doc, original = nccl
    out = copy.deepcopy(doc)
    for e in out["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(e.get(key), (int, float)):
                e[key] = repr(e[key])
    run = read_kineto_trace(write_trace(out, tmp_path / "trace.json", compress=False))
    a, b = _relative(original), _relative(run)
    for key in a:
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key
    assert run.info["origin_unix_ns"] == original.info["origin_unix_ns"]


def test_args_and_header_variants(captures: Path, tmp_path: Path):
    """args absent or not an object, deviceProperties / distributedInfo absent or odd, rank as text."""
    path = captures / "kineto" / "sampled_rank-1.json.gz"
    doc, original = load_trace(path), read_kineto_trace(path)
    out = copy.deepcopy(doc)
    for i, e in enumerate(out["traceEvents"]):
        if e.get("cat") == "cpu_op" and i % 2:
            e.pop("args", None)
        elif e.get("cat") == "cpu_op":
            e["args"] = ["not", "an", "object"]
    out["deviceProperties"] = {"not": "a list"}
    out["distributedInfo"] = {"backend": "nccl", "rank": "1", "world_size": "2"}
    run = read_kineto_trace(write_trace(out, tmp_path / "t.json.gz", compress=True))
    assert run.rank == 1 and run.info["world_size"] == 2 and run.info["devices"] == []
    host = (run.ops["category"] == "host").to_numpy()  # collectives keep their message shapes: not cpu_ops
    assert len(run.ops) == len(original.ops) and (run.ops["shapes"].astype(str)[host] == "").all()
    out.pop("distributedInfo"), out.pop("deviceProperties")
    run = read_kineto_trace(write_trace(out, tmp_path / "t2.json", compress=False))
    assert run.rank == 0 and len(run.steps) == len(original.steps)


def test_a_damaged_time_or_step_number_costs_only_that_event(nccl, tmp_path: Path):
    path, doc, original = nccl
    out = copy.deepcopy(doc)
    ops = [e for e in out["traceEvents"] if e.get("cat") == "cpu_op"]
    ops[0]["ts"] = -1
    ops[1]["ts"] = 1e300
    ops[2]["dur"] = 1e15  # 31 years
    step = next(e for e in out["traceEvents"] if e.get("name") == "ProfilerStep#5")
    step["name"] = "ProfilerStep#99999999999999999999999"
    trace = write_trace(out, tmp_path / "damaged.json", compress=False)
    run = read_kineto_trace(trace)
    without = copy.deepcopy(doc)  # the same trace without the three damaged events
    damaged = [i for i, e in enumerate(without["traceEvents"]) if e.get("cat") == "cpu_op"][:3]
    without["traceEvents"] = [e for i, e in enumerate(without["traceEvents"]) if i not in damaged]
    assert len(without["traceEvents"]) == len(doc["traceEvents"]) - 3
    assert len(run.ops) == len(read_kineto_trace(write_trace(without, tmp_path / "w.json", compress=False)).ops)
    assert sorted(run.steps["step"]) == [4, 6]
    assert run.ops["start_ns"].min() >= 0 and run.ops["start_ns"].max() < 10**10
    warnings = " ".join(run.info["warnings"])
    assert "times cannot be real" in warnings and "skipped 1 malformed" in warnings
    _report_works(trace, tmp_path)


def test_torch_1_13_trace_opens_in_the_viewer(nccl, tmp_path: Path):
    path, doc, _ = nccl
    _report_works(write_trace(_torch_1_13(doc), tmp_path / "rank0.pt.trace.json.gz", compress=True), tmp_path)


def _with_device_step_ranges(doc: dict) -> dict:
    """The trace as newer torch writes it: every ProfilerStep#N range also projected onto the device
    as a `gpu_user_annotation` per stream, spanning the kernels of the step on that stream."""
    out = copy.deepcopy(doc)
    device = [e for e in out["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    for step in [e for e in out["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]:
        inside = [e for e in device if step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
        for stream in sorted({e["args"]["stream"] for e in inside}):
            on = [e for e in inside if e["args"]["stream"] == stream]
            first, end = min(e["ts"] for e in on), max(e["ts"] + e["dur"] for e in on)
            out["traceEvents"].append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": step["name"],
                    "pid": on[0]["pid"],
                    "tid": stream,
                    "ts": first,
                    "dur": end - first,
                    "args": {"device": on[0]["args"]["device"], "stream": stream},
                }
            )
    return out


def test_device_step_ranges_are_annotations_not_work(nccl, tmp_path: Path):
    """ProfilerStep#N on the device ("ProfilerStep#1 does most of the work on cuda:2 (86.3 %)" before)
    is an annotation on the device lane: in the timeline's ops, not a step, not in the op tables, not
    busy time."""
    path, doc, original = nccl
    run = read_kineto_trace(write_trace(_with_device_step_ranges(doc), tmp_path / "steps.json", compress=False))
    ranges = run.ops[run.ops["name"].astype(str).str.startswith("ProfilerStep#")]
    assert len(ranges) == 6 and set(ranges["category"]) == {"annotation"} and set(ranges["device"]) == {"cuda:0"}
    assert run.steps["step"].tolist() == [4, 5, 6]
    a = analyse_run(ensure_steps(run))
    for table in (a.op_type, a.op_detail):
        assert not table["op_type"].astype(str).str.startswith("ProfilerStep").any()
        assert set(table["category"]) <= {"host", "compute", "comm", "memcpy", "memset"}
    assert not any("ProfilerStep" in f["title"] for f in a.extra_json["report"]["findings"])
    same_steps = step_windows_ns(a.step_trace)
    breakdown = device_time(original.ops, steps=same_steps).drop(columns=["executions"])
    assert a.devices[breakdown.columns].equals(breakdown)


#: torch 1.8's categories for today's (Kineto's first schema: the TensorBoard plugin's samples,
#: pytorch/kineto tb_plugin/test/gpu_metrics_input.json, read by tb_plugin/.../profiler/trace.py).
#: record_function ranges had no category of their own: they were `Operator` events like ops.
_TORCH_1_8_CATEGORY = {
    "cpu_op": "Operator",
    "user_annotation": "Operator",
    "python_function": "Python",
    "cuda_runtime": "Runtime",
    "cuda_driver": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}


def _torch_1_8(doc: dict) -> dict:
    """A trace as torch 1.8 wrote it (on top of _torch_1_13's integer Unix µs): the capitalised
    categories, thread ids as text ("24572") and device lanes as "stream N", `external id` in
    lower case on runtime calls and device events, launch flows in category `async` named `launch`,
    `computeProperties` for `deviceProperties`; no `gpu_user_annotation`, `cuda_sync` or
    forward/backward flows, which came later."""
    out = _torch_1_13(doc)
    events = []
    for e in out["traceEvents"]:
        cat = e.get("cat")
        if cat in ("gpu_user_annotation", "cuda_sync", "fwdbwd"):
            continue
        if cat == "ac2g":
            e["cat"], e["name"] = "async", "launch"
        e["cat"] = _TORCH_1_8_CATEGORY.get(cat, e.get("cat"))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e["cat"] in ("Kernel", "Memcpy", "Memset"):
            e["tid"] = f"stream {args['stream']}"
        elif isinstance(e.get("tid"), int) and e.get("ph") != "s":
            e["tid"] = str(e["tid"])
        if e["cat"] in ("Runtime", "Kernel", "Memcpy", "Memset") and "External id" in args:
            args["external id"] = args.pop("External id")
        events.append(e)
    out["traceEvents"] = events
    out["computeProperties"] = out.pop("deviceProperties", [])
    return out


def test_torch_1_8_schema_is_read(nccl, tmp_path: Path):
    """The older schema gives the same steps, device work and device time as the original: it was
    refused as "nothing was recorded" although it holds ProfilerStep#N ranges and 3,774 device
    executions. Annotations torch 1.8 wrote as Operator events are spans by their names, collective
    ranges (nccl:all_reduce) comm ops in both schemas."""
    path, doc, original = nccl
    variant = write_trace(_torch_1_8(doc), tmp_path / "rank0.pt.trace.json", compress=False)
    run = read_kineto_trace(variant)
    assert run.steps["step"].tolist() == original.steps["step"].tolist() == [4, 5, 6]
    step_dur = lambda r: (r.steps["end_ns"] - r.steps["start_ns"]).to_numpy()
    assert np.abs(step_dur(run) - step_dur(original)).max() <= 1000
    counts = lambda r: r.ops.groupby("category", observed=True).size().to_dict()
    before, after = counts(original), counts(run)
    collectives = original.ops[(original.ops["category"] == "comm").to_numpy() & (original.ops["device"] == "cpu")]
    assert set(collectives["name"]) == {"nccl:all_reduce", "nccl:broadcast"}
    expected = {category: n for category, n in before.items() if category != "annotation"}
    assert after == expected
    assert sorted(run.spans["name"]) == sorted(original.spans["name"])
    ours, theirs = device_time(run.ops), device_time(original.ops)
    # whole µs: each of the 1,074 memcpy / memset of ~3 µs moves by up to 1 µs (0.01 point on memory)
    for column in ("window_ms", "busy_pct", "compute_pct", "comm_pct", "memory_pct", "comm_compute_overlap_pct"):
        assert ours[column].iloc[0] == pytest.approx(theirs[column].iloc[0], abs=0.05), column
    assert run.info["devices"] == original.info["devices"] and len(run.info["devices"]) == 8
    out = tmp_path / "out"
    result = _profview("import-kineto", variant, "-o", out)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report_0.json").read_text())
    assert [d["device"] for d in report["devices"]] == ["cuda:0"]
    assert report["devices"][0]["idle_pct"] == pytest.approx(theirs["idle_pct"].iloc[0], abs=0.05)


def test_rocm_trace_is_read(captures: Path, tmp_path: Path):
    """HIP calls are runtime calls like CUDA's: never in the op tables, syncs recognised by name;
    the device time is the original's (the same executions)."""
    path = captures / "kineto" / "alexnet.json.gz"
    doc, original = load_trace(path), read_kineto_trace(path)
    run = read_kineto_trace(write_trace(rocm_variant(doc), tmp_path / "rocm.json.gz", compress=True))
    runtime = run.ops[run.ops["category"] == "runtime"]
    assert len(runtime) == (original.ops["category"] == "runtime").sum()
    assert runtime["name"].astype(str).str.startswith("hip").all()
    calls = runtime_calls(run.ops)
    assert set(calls.loc[calls["kind"] == "sync", "name"]) == {"hipStreamSynchronize", "hipDeviceSynchronize"}
    assert (calls.loc[calls["name"] == "hipLaunchKernel", "kind"] == "launch").all()
    a = analyse_run(ensure_steps(run))
    for table in (a.op_type, a.op_detail):
        assert not table["op_type"].astype(str).str.startswith("hip").any()
    assert not any("hip" in f["title"] for f in a.extra_json["report"]["findings"])
    ours, theirs = device_time(run.ops), device_time(original.ops)
    for column in ("window_ms", "busy_pct", "idle_pct", "compute_pct", "memory_pct"):
        assert ours[column].iloc[0] == pytest.approx(theirs[column].iloc[0], abs=1e-9), column
    causes = [f"idle_{c}_ms" for c in IDLE_CAUSES]
    assert ours[causes].sum(axis=1).iloc[0] == pytest.approx(ours["idle_ms"].iloc[0], rel=1e-9)


# ----------------------------------------------------------------------------- MindSpore 1.x (Ascend)

#: The device counter of a machine up for ~42 hours: times near 1.5e13 ticks.
OFFSET_TICKS = 15_000_000_000_000


def _mindspore_1x(gold: Path, out: Path) -> Path:
    """run_1_gold as MindSpore 1.x wrote such a directory: times on a counter near 1.5e13 ticks, the
    1.x all-reduce column names (stream_<sid>_<k>_<OpType>), the summary row with every point 0
    (its iteration_interval the mean), the timeline relative to min_cycle_counter."""
    out.mkdir()
    lines = (gold / STEP_TRACE).read_text().splitlines()
    header = lines[0].split(",")
    renamed = [h.replace("_parallel_0", "_0_AllReduce") for h in header]
    point = [
        h == "start_point" or h == "end_point" or h.endswith(("fp_point", "bp_point", "_start_point", "_end_point"))
        for h in header
    ]
    rows = [renamed]
    intervals = []
    for line in lines[1:]:
        cells = line.split(",")
        if cells[0] == "-":
            continue
        intervals.append(int(cells[header.index("iteration_interval")]))
        rows.append(
            [str(int(c) + OFFSET_TICKS) if is_point and c not in ("", "0") else c for c, is_point in zip(cells, point)]
        )
    summary = ["0"] * len(header)
    summary[header.index("iteration_interval")] = str(round(sum(intervals) / len(intervals)))
    rows.append(summary)
    (out / STEP_TRACE).write_text("\r\n".join(",".join(r) for r in rows) + "\r\n")
    counter = float((gold / "min_cycle_counter_1.txt").read_text()) + OFFSET_TICKS
    (out / "min_cycle_counter_1.txt").write_text(f"{counter:.1f}")
    timeline = (gold / "output_timeline_data_1.txt").read_text().splitlines()
    relative = [timeline[0]]
    for line in timeline[1:]:
        name, stream, start, dur = line.split(",")
        ticks = round(float(start) * 1e5) + OFFSET_TICKS - round(counter)
        relative.append(f"{name},{stream},{ticks / 1e5:.5f},{dur}")
    (out / "output_timeline_data_1.txt").write_text("\n".join(relative) + "\n")
    for name in ("framework_raw_1.csv", "aicore_intermediate_1_detail.csv", "aicore_intermediate_1_type.csv"):
        (out / name).write_bytes((gold / name).read_bytes())
    return out


def test_mindspore_1x_directory_gives_the_2020_run(gold: Path, tmp_path: Path):
    variant = _mindspore_1x(gold, tmp_path / "ms1x")
    (old,), (new,) = read_mindspore_dir(gold), read_mindspore_dir(variant)
    assert new.info["warnings"] == []  # the summary row is not a step, nor damage
    assert len(new.steps) == len(old.steps) == 322 and new.steps["step"].tolist() == old.steps["step"].tolist()
    shift = OFFSET_TICKS * 10
    assert new.info["clock"]["origin_device_ns"] == old.info["clock"]["origin_device_ns"] + shift
    for table in ("steps", "spans"):
        a, b = getattr(old, table), getattr(new, table)
        assert a.drop(columns=[c for c in ("lane",) if c in a]).equals(b.drop(columns=[c for c in ("lane",) if c in b]))
    assert len(new.ops) == len(old.ops) == 2817
    assert (new.ops["dur_ns"].to_numpy() == old.ops["dur_ns"].to_numpy()).all()
    assert np.abs(new.ops["start_ns"].to_numpy() - old.ops["start_ns"].to_numpy()).max() <= 10  # one tick
    _report_works(variant, tmp_path)


def test_mindspore_summary_rows_and_damaged_rows(gold: Path, tmp_path: Path):
    """Rows that are not steps: `-` (2020) and all-zero points (1.x) silently; `-0`, `nan` or a total
    that disagrees with the points: damaged, left out with the line named."""
    (tmp_path / "ms").mkdir()
    lines = (gold / STEP_TRACE).read_text().splitlines()
    header = lines[0].split(",")
    zero = ["0"] * len(header)
    zero[header.index("iteration_interval")] = "1243211"
    damaged = lines[5].split(",")
    damaged[header.index("start_point")] = "-0"
    nan_row = lines[6].split(",")
    nan_row[header.index("fp_point")] = "nan"
    total = lines[7].split(",")
    total[header.index("total")] = str(int(total[header.index("total")]) + 1)
    rows = lines[:5] + [",".join(damaged), ",".join(nan_row), ",".join(total)] + lines[8:] + [",".join(zero)]
    (tmp_path / "ms" / STEP_TRACE).write_text("\r\n".join(rows) + "\r\n")
    with pytest.warns(UserWarning, match=r"3 step row\(s\) .* \(line 6, 7, 8\)"):
        (run,) = read_mindspore_dir(tmp_path / "ms")
    assert len(run.steps) == 322 - 3 and not {4, 5, 6} & set(run.steps["step"])
    assert (run.steps["end_ns"] >= run.steps["start_ns"]).all()


def test_mindspore_2x_ascend_output_is_named_in_the_refusal(tmp_path: Path):
    """A layout the importer does not read yet gets one sentence that says what it is."""
    out = tmp_path / "rank_0" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_text(
        json.dumps(
            [
                {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Ascend Hardware"}},
                {"ph": "X", "name": "MatMul", "pid": 1, "tid": 2, "ts": "1795245674352900.963", "dur": "12.5"},
            ]
        )
    )
    (out / "kernel_details.csv").write_text("Step Id,Name,Type,Start Time(us),Duration(us)\n1,MatMul,MatMul,1,2\n")
    result = _profview(tmp_path, "--summary")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("profview: error: ")]
    assert len(error) == 1 and "MindSpore 2.x Ascend output (kernel_details.csv" in error[0]


# ----------------------------------------------------------------------------- MindSpore 2.x (CPU)


def test_mindspore_cpu_times_since_boot_and_damaged_launches(captures: Path, tmp_path: Path):
    """The 2.x CPU layout with launch times in ns since boot instead of Unix ns (no Unix anchor:
    origin_unix_ns 0, the same op table), and launches whose numbers are damaged (`nan`, `-0.5`,
    a 25-digit start) left out with the lines named, the rest intact."""
    source = captures / "mindspore_cpu" / "cnn_50steps_ascend_ms"
    (original,) = read_mindspore_dir(source)
    variant = tmp_path / "cnn_ms"
    (variant / "FRAMEWORK").mkdir(parents=True)
    for name in ("cpu_op_detail_info_0.csv", "cpu_framework_0.txt", "cpu_op_type_info_0.csv"):
        (variant / "FRAMEWORK" / name).write_bytes((source / "FRAMEWORK" / name).read_bytes())
    lines = (source / "FRAMEWORK" / "cpu_op_execute_timestamp_0.txt").read_text().splitlines()
    first = min(int(t.split(",")[0]) for line in lines for t in line.split(";")[2].split())
    boot = 3_600 * 10**9  # the machine booted an hour before the first launch
    rewritten = []
    for line in lines:
        name, kind, launches = line.split(";")
        shifted = [f"{int(s) - first + boot},{d},{tid}" for s, d, tid in (t.split(",") for t in launches.split())]
        rewritten.append(f"{name};{kind};{' '.join(shifted)}")
    (variant / "FRAMEWORK" / "cpu_op_execute_timestamp_0.txt").write_text("\n".join(rewritten) + "\n")
    (run,) = read_mindspore_dir(variant)
    assert run.info["clock"]["clock"] == "host_unknown" and run.info["clock"]["origin_unix_ns"] == 0
    assert original.info["clock"]["clock"] == "host_realtime"
    assert len(run.ops) == len(original.ops)
    assert run.ops["start_ns"].tolist() == original.ops["start_ns"].tolist()
    assert run.ops["dur_ns"].tolist() == original.ops["dur_ns"].tolist()

    damaged = list(rewritten)
    for i, bad in ((0, "nan"), (1, "-0.5")):
        name, kind, launches = damaged[i].split(";")
        cells = launches.split()
        start, _, tid = cells[0].split(",")
        cells[0] = f"{start},{bad},{tid}"
        damaged[i] = f"{name};{kind};{' '.join(cells)}"
    name, kind, launches = damaged[2].split(";")
    cells = launches.split()
    cells[0] = "9" * 25 + "," + cells[0].split(",", 1)[1]
    damaged[2] = f"{name};{kind};{' '.join(cells)}"
    (variant / "FRAMEWORK" / "cpu_op_execute_timestamp_0.txt").write_text("\n".join(damaged) + "\n")
    with pytest.warns(UserWarning, match=r"3 launch\(es\) .* left out \(line 1, 2, 3\)"):
        (run,) = read_mindspore_dir(variant)
    assert len(run.ops) == len(original.ops) - 3
    _report_works(variant, tmp_path)

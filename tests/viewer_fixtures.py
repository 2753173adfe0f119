"""Writes synthetic profview output directories that follow docs/formats.md exactly.

Used by the viewer tests (small runs, odd names, bad files) and by benchmarks/bench_report.py
(runs of up to 10 million timeline events). The timeline is laid out like profview's writer:
one event per line, numbers padded with spaces.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

XSS = "<img src=x onerror=alert(1)>"
OP_NAMES = ["MatMul", "Conv2D", "BatchNorm", "Cast", "ReLU", "Add", XSS, 'odd,name "quoted"']
HOST_LANE, LOADER_LANE, STEP_LANE, DEVICE_STREAM = 0, 1, 2, 7


@dataclass
class Spec:
    """Shape of a synthetic run."""

    steps: int = 40
    ops_per_step: int = 30          # device kernels per step (host launches add as many again)
    ranks: int = 1
    step_ms: float = 100.0
    seed: int = 0
    queues: bool = True
    counters: bool = True
    report: bool = True
    timeline: bool = True


def fmt(value) -> str:
    """A number as formats.md prints it: up to 6 decimals, trailing zeros trimmed."""
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """CSV per formats.md: header, \\n line ends, quoting only when needed."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(frame.columns)
        for row in frame.itertuples(index=False):
            writer.writerow([fmt(v) if isinstance(v, (float, int, np.number)) else v for v in row])


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def _steps(spec: Spec, rng: np.random.Generator, rank: int) -> pd.DataFrame:
    n = spec.steps
    gap = rng.uniform(0.05, 0.25, n) * spec.step_ms
    gap[::10] *= 4                                   # periodic slow data loading: outliers
    fp_bp = rng.uniform(0.55, 0.65, n) * spec.step_ms * (1 + 0.15 * rank)
    tail = rng.uniform(0.08, 0.15, n) * spec.step_ms
    total = gap + fp_bp + tail
    start = np.concatenate([[0.0], np.cumsum(total)[:-1]]) + 5.0
    all_reduce = tail * 0.6
    origin = 1_763_700_000_000_000_000
    frame = pd.DataFrame({
        "step": np.arange(n), "start_ms": start, "iteration_gap_ms": gap, "fp_bp_ms": fp_bp,
        "tail_ms": tail, "total_ms": total, "all_reduce_ms": all_reduce,
        "all_reduce_overlap_ms": all_reduce * 0.1, "data_wait_ms": gap * 0.8,
        "profiler_overhead_ms": np.full(n, 0.01),
    })
    for col, offset in (("start_unix_ns", 0), ("fp_start_unix_ns", gap), ("bp_end_unix_ns", gap + fp_bp),
                        ("end_unix_ns", total)):
        frame[col] = (origin + (start + offset) * 1e6).astype(np.int64)
    frame["fp_start_source"] = "marked"
    frame["bp_end_source"] = "inferred"
    return frame


def _ops(spec: Spec, rng: np.random.Generator, steps: pd.DataFrame) -> pd.DataFrame:
    """Device kernels spread over each step's fp..bp window, and their host launches."""
    k = spec.ops_per_step
    step = np.repeat(steps["step"].to_numpy(), k)
    fp = np.repeat((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy(), k)
    span = np.repeat(steps["fp_bp_ms"].to_numpy(), k)
    slot = np.tile(np.arange(k), len(steps)) / k
    start = fp + slot * span
    dur = span / k * rng.uniform(0.3, 0.95, len(start))
    names = np.array(OP_NAMES, dtype=object)[rng.integers(0, len(OP_NAMES), len(start))]
    device = pd.DataFrame({"device": "cuda:0", "stream": DEVICE_STREAM, "name": names, "op_type": names,
                           "category": "compute", "start_ms": start, "dur_ms": dur, "step": step})
    host = device.assign(device="cpu", stream=HOST_LANE, name="launch " + device["name"],
                         op_type="cudaLaunchKernel", category="host",
                         start_ms=start - span / k * 0.2, dur_ms=span / k * 0.05)
    return pd.concat([device, host], ignore_index=True)


def _op_tables(ops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    g = ops.groupby(["device", "op_type", "category", "name"], sort=True)["dur_ms"]
    detail = g.agg(count="count", total_ms="sum", min_ms="min", max_ms="max").reset_index()
    detail["self_ms"] = detail["total_ms"]
    detail["avg_ms"] = detail["total_ms"] / detail["count"]
    detail["share_pct"] = 100 * detail["self_ms"] / detail.groupby("device")["self_ms"].transform("sum")
    detail["shapes"] = np.where(detail["category"] == "compute", "32x3x224x224;32x64", "")
    detail["scope"] = ""
    detail = detail.sort_values(["device", "total_ms", "name"], ascending=[True, False, True])
    detail = detail[["device", "op_type", "category", "name", "count", "total_ms", "self_ms", "avg_ms",
                     "min_ms", "max_ms", "share_pct", "shapes", "scope"]]
    t = detail.groupby(["device", "op_type", "category"])
    types = t[["count", "total_ms", "self_ms"]].sum().reset_index()
    types["avg_ms"] = types["total_ms"] / types["count"]
    types["share_pct"] = 100 * types["self_ms"] / types.groupby("device")["self_ms"].transform("sum")
    types = types.sort_values(["device", "total_ms", "op_type"], ascending=[True, False, True])
    return types, detail


def _queues(spec: Spec, rng: np.random.Generator, steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for queue, capacity, fill in (("host_queue", 8, 0.2), ("device_queue", 4, 0.7), ("decode->batch", 16, 0.5)):
        t = np.sort(rng.uniform(0, steps["start_ms"].iloc[-1] + steps["total_ms"].iloc[-1], spec.steps * 6))
        size = np.clip(np.round(capacity * fill + rng.normal(0, capacity * 0.3, len(t))), 0, capacity)
        step = np.searchsorted(steps["start_ms"].to_numpy(), t, side="right") - 1
        rows.append(pd.DataFrame({"queue": queue, "time_ms": t, "event": np.where(np.arange(len(t)) % 2, "get", "put"),
                                  "size": size.astype(int), "capacity": capacity,
                                  "wait_ms": np.where(size == 0, 2.5, 0.0), "step": step}))
    return pd.concat(rows, ignore_index=True)


def _queue_summary(queues: pd.DataFrame) -> dict:
    stats = []
    for name, q in queues.groupby("queue", sort=True):
        cap = int(q["capacity"].iloc[0])
        stats.append({"queue": name, "capacity": cap, "empty_ratio": float((q["size"] == 0).mean()),
                      "full_ratio": float((q["size"] >= cap).mean()), "mean_size": float(q["size"].mean()),
                      "get_wait_ms": float(q["wait_ms"].sum())})
    return {"schema_version": 1,
            "verdict": {"kind": "data_process", "reason": "the consumer found host_queue empty at 31 % of its gets",
                        "feed_queue": "host_queue", "host_queue": "host_queue", "device_queue": "device_queue",
                        "bottleneck_stage": "decode"},
            "queues": stats,
            "pipeline": {"stages": [{"stage": "decode", "depth": 1, "input_queue": "read->decode",
                                     "output_queue": "decode->batch", "input_full_ratio": 0.9,
                                     "output_empty_ratio": 0.05, "slow": True}],
                         "bottleneck_stage": "decode"}}


def _counters(spec: Spec, rng: np.random.Generator, end_ms: float) -> pd.DataFrame:
    t = np.arange(0.0, end_ms, 50.0)
    series = [("host", "host", "process_cpu_pct", rng.uniform(80, 120, len(t))),
              ("host", "host", "rss_bytes", 2e9 + np.cumsum(rng.normal(1e6, 1e5, len(t)))),
              ("nvml", "cuda:0", "gpu_util_pct", rng.uniform(40, 95, len(t))),
              ("nvml", "cuda:0", "mem_used_bytes", np.full(len(t), 8.5e9)),
              ("nvml", "cuda:0", "power_w", rng.uniform(150, 250, len(t)))]
    return pd.concat([pd.DataFrame({"source": s, "device": d, "metric": m, "time_ms": t, "value": v})
                      for s, d, m, v in series], ignore_index=True)


def _report(steps: pd.DataFrame) -> dict:
    gap = float(steps["iteration_gap_ms"].sum())
    total = float(steps["total_ms"].sum())
    return {"verdict": "Input-bound: the iteration gap (data loading) takes "
                       f"{100 * gap / total:.0f}% of step time.",
            "findings": [
                {"kind": "input_bound", "severity": "high", "title": "Data loading stalls the device",
                 "at_stake_ms": gap / len(steps), "at_stake_pct": 100 * gap / total,
                 "evidence": "host_queue empty 60% of gets", "threshold": "gap > 10% of step",
                 "suggestion": "raise num_workers / prefetch_factor"},
                {"kind": "op_hotspot", "severity": "medium", "title": f"{XSS} dominates device time",
                 "at_stake_ms": 3.5, "at_stake_pct": 4.0, "evidence": "share 30%", "threshold": "share > 25%",
                 "suggestion": "use mixed precision"}]}


TIMELINE_ROW = ('{"name":"%s","cat":"%s","ph":"X","pid":%3d,"tid":%3d,'
                '"ts":%16.3f,"dur":%12.3f,"args":{"op_type":"%s","step":%6d}},\n')


def _escape(names: np.ndarray) -> np.ndarray:
    """Names as JSON string contents (without the quotes)."""
    return np.array([json.dumps(str(n))[1:-1] for n in names], dtype=object)


def write_timeline(path: Path, rank: int, steps: pd.DataFrame, ops: pd.DataFrame) -> int:
    """timeline_{rank}.json in the writer's layout; returns the number of events written."""
    device_pid = 1000 + rank
    meta = [{"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank} host"}},
            {"ph": "M", "name": "process_name", "pid": device_pid, "args": {"name": "cuda:0"}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": HOST_LANE, "args": {"name": "MainThread"}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": LOADER_LANE, "args": {"name": "DataLoader <0>"}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": STEP_LANE, "args": {"name": "steps"}},
            {"ph": "M", "name": "thread_name", "pid": device_pid, "tid": DEVICE_STREAM,
             "args": {"name": f"stream {DEVICE_STREAM}"}}]
    st = steps
    step_rows = pd.DataFrame({"name": "step " + st["step"].astype(str), "category": "step", "pid": rank,
                              "stream": STEP_LANE, "start_ms": st["start_ms"], "dur_ms": st["total_ms"],
                              "op_type": "step", "step": st["step"]})
    phase_rows = pd.DataFrame({"name": "forward", "category": "phase", "pid": rank, "stream": HOST_LANE,
                               "start_ms": st["start_ms"] + st["iteration_gap_ms"], "dur_ms": st["fp_bp_ms"],
                               "op_type": "phase", "step": st["step"]})
    load_rows = phase_rows.assign(name="next(batch)", stream=LOADER_LANE, start_ms=st["start_ms"],
                                  dur_ms=st["iteration_gap_ms"] * 0.9, category="span")
    op_rows = ops.assign(pid=np.where(ops["device"] == "cpu", rank, device_pid))
    rows = pd.concat([step_rows, phase_rows, load_rows, op_rows[step_rows.columns]], ignore_index=True)
    rows = rows.sort_values("start_ms", kind="stable")
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"traceEvents":[\n')
        for event in meta:
            f.write(json.dumps(event) + ",\n")
        chunk = 1_000_000
        for i in range(0, len(rows), chunk):
            part = rows.iloc[i:i + chunk]
            names = _escape(part["name"].to_numpy())
            types = _escape(part["op_type"].to_numpy())
            f.write("".join(TIMELINE_ROW % r for r in zip(
                names, part["category"], part["pid"], part["stream"], part["start_ms"].to_numpy() * 1000,
                part["dur_ms"].to_numpy() * 1000, types, part["step"])))
        f.write('{"ph":"i","name":"end","pid":%d,"tid":0,"ts":0,"s":"g"}\n' % rank)
        f.write('],"displayTimeUnit":"ms","otherData":{"tool":"profview"}}\n')
    return len(meta) + len(rows) + 1


def write_run(directory: Path, spec: Spec = Spec()) -> Path:
    """A complete profview output directory for `spec`; returns `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(spec.ranks):
        rng = np.random.default_rng(spec.seed + rank)
        steps = _steps(spec, rng, rank)
        ops = _ops(spec, rng, steps)
        types, detail = _op_tables(ops)
        outputs = {f"step_trace_{rank}.csv": steps, f"op_type_{rank}.csv": types,
                   f"op_detail_{rank}.csv": detail}
        end_ms = float(steps["start_ms"].iloc[-1] + steps["total_ms"].iloc[-1])
        if spec.queues:
            queues = _queues(spec, rng, steps)
            outputs[f"data_queue_{rank}.csv"] = queues
            write_json(directory / f"queue_summary_{rank}.json", _queue_summary(queues))
        if spec.counters:
            outputs[f"device_counters_{rank}.csv"] = _counters(spec, rng, end_ms)
        for name, frame in outputs.items():
            write_csv(directory / name, frame)
        names = list(outputs) + ([f"queue_summary_{rank}.json"] if spec.queues else [])
        events = 0
        if spec.timeline:
            events = write_timeline(directory / f"timeline_{rank}.json", rank, steps, ops)
            names.append(f"timeline_{rank}.json")
        if spec.report:
            write_json(directory / f"report_{rank}.json", _report(steps))
            names.append(f"report_{rank}.json")
        info = {"schema_version": 1, "tool": "profview", "tool_version": "0.1.0", "data_origin": "profview",
                "rank": rank, "world_size": spec.ranks, "host": "testhost", "pid": 4242,
                "framework_versions": {"python": "3.11.7"},
                "clock": {"origin_unix_ns": 1_763_700_000_000_000_000, "origin_monotonic_ns": 1,
                          "clock": "perf_counter_ns"},
                "sources": {"markers": {"status": "ok"}, "nvml": {"status": "absent: no GPU"}},
                "config": {}, "recording": {"events": events, "dropped_events": 0, "dropped_reason": "",
                                            "chunks": 1, "torn_chunks": 0, "memory_budget_bytes": 1 << 26},
                "steps": {"count": spec.steps, "first": 0, "last": spec.steps - 1},
                "overhead": {"total_ms": 1.0, "per_event_ns": 150.0, "flush_ms": 0.5},
                "warnings": [], "outputs": sorted(names)}
        write_json(directory / f"profiler_info_{rank}.json", info)
    return directory


def profile_loop(directory: Path, rank: int = 0, world_size: int = 2, steps: int = 30) -> Path:
    """A small torch training loop under the real Profiler (one rank of a job); returns `directory`.

    Batches come through `profiler.prefetch` (a probed queue) from a loader that is slow every
    tenth batch; phases, a user op with the XSS name; analysed into `directory`.
    """
    import time

    import torch
    from profiler import Profiler

    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    profiler = Profiler(output_path=directory, rank=rank, world_size=world_size)

    def loader():
        for step in range(steps):
            time.sleep(0.001 * (1 + rank) + (0.01 if step % 10 == 5 else 0))
            yield torch.randn(16, 32), torch.randint(0, 4, (16,))

    for x, y in profiler.prefetch(loader()):
        with profiler.phase("forward"):
            with profiler.op("MatMul"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        with profiler.phase("backward"):
            loss.backward()
        with profiler.op(XSS):
            optimizer.step()
            optimizer.zero_grad()
        profiler.step()
    profiler.analyse(progress=False)
    return directory

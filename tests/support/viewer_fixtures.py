"""Writes synthetic profview output directories that follow docs/formats.md exactly.

Used by the viewer tests (small runs, odd names, bad files) and by benchmarks/bench_report.py
(runs of up to 1e8 timeline events). The timeline is the columnar event file
(events_{rank}.arrow), written by the generator chunk by chunk with profview's streaming writer.
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
HOST_LANE, LOADER_LANE, DEVICE_STREAM, STEP_TID = 0, 1, 7, 1_000_000


@dataclass
class Spec:
    """Shape of a synthetic run."""

    steps: int = 40
    ops_per_step: int = 30  # device kernels per step (host launches add as many again)
    ranks: int = 1
    step_ms: float = 100.0
    seed: int = 0
    queues: bool = True
    counters: bool = True
    report: bool = True
    timeline: bool = True


#: the run write_run writes when given no Spec
DEFAULT_SPEC = Spec()


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
    gap[::10] *= 4  # periodic slow data loading: outliers
    fp_bp = rng.uniform(0.55, 0.65, n) * spec.step_ms * (1 + 0.15 * rank)
    tail = rng.uniform(0.08, 0.15, n) * spec.step_ms
    total = gap + fp_bp + tail
    start = np.concatenate([[0.0], np.cumsum(total)[:-1]]) + 5.0
    all_reduce = tail * 0.6
    origin = 1_763_700_000_000_000_000
    frame = pd.DataFrame(
        {
            "step": np.arange(n),
            "start_ms": start,
            "iteration_gap_ms": gap,
            "fp_bp_ms": fp_bp,
            "tail_ms": tail,
            "total_ms": total,
            "all_reduce_ms": all_reduce,
            "all_reduce_overlap_ms": all_reduce * 0.1,
            "data_wait_ms": gap * 0.8,
            "profiler_overhead_ms": np.full(n, 0.01),
        }
    )
    for col, offset in (
        ("start_unix_ns", 0),
        ("fp_start_unix_ns", gap),
        ("bp_end_unix_ns", gap + fp_bp),
        ("end_unix_ns", total),
    ):
        frame[col] = (origin + (start + offset) * 1e6).astype(np.int64)
    frame["fp_start_source"] = "marked"
    frame["bp_end_source"] = "inferred"
    return frame


def _chunk_ops(spec: Spec, rank: int, steps: pd.DataFrame, chunk: int) -> dict[str, np.ndarray]:
    """Device kernels spread over each step's fp..bp window (ns) and their host launches, for the
    steps of one chunk; the same arrays every time (a generator seeded by rank and chunk)."""
    rng = np.random.default_rng([spec.seed, rank, chunk])
    k = spec.ops_per_step
    step = np.repeat(steps["step"].to_numpy(), k)
    fp = np.repeat((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy(), k)
    span = np.repeat(steps["fp_bp_ms"].to_numpy(), k)
    slot = np.tile(np.arange(k), len(steps)) / k
    start = fp + slot * span
    dur = span / k * rng.uniform(0.3, 0.95, len(start))
    start_ns = np.round(start * 1e6).astype(np.int64)
    return {
        "step": step,
        "start_ns": start_ns,
        "dur_ns": np.round(dur * 1e6).astype(np.int64),
        "name": rng.integers(0, len(OP_NAMES), len(start)),
        "launch_ns": start_ns - np.round(span / k * 0.2 * 1e6).astype(np.int64),
        "launch_dur_ns": np.round(span / k * 0.05 * 1e6).astype(np.int64),
    }


def _chunks(spec: Spec, steps: pd.DataFrame):
    """(chunk index, steps) of about two million ops each."""
    per = max(1, 2_000_000 // max(spec.ops_per_step, 1))
    for i, a in enumerate(range(0, len(steps), per)):
        yield i, steps.iloc[a : a + per]


def _op_tables(spec: Spec, rank: int, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """op_type / op_detail of the generated ops, aggregated chunk by chunk."""
    parts = []
    for i, chunk in _chunks(spec, steps):
        ops = _chunk_ops(spec, rank, chunk, i)
        for device, dur in (("cuda:0", ops["dur_ns"]), ("cpu", ops["launch_dur_ns"])):
            g = pd.DataFrame({"name": ops["name"], "dur": dur}).groupby("name")["dur"]
            parts.append(g.agg(["count", "sum", "min", "max"]).reset_index().assign(device=device))
    g = (
        pd.concat(parts)
        .groupby(["device", "name"])
        .agg(count=("count", "sum"), total=("sum", "sum"), lo=("min", "min"), hi=("max", "max"))
        .reset_index()
    )
    names = np.array(OP_NAMES, dtype=object)[g["name"].to_numpy()]
    host = (g["device"] == "cpu").to_numpy()
    detail = pd.DataFrame(
        {
            "device": g["device"],
            "op_type": np.where(host, "cudaLaunchKernel", names),
            "category": np.where(host, "host", "compute"),
            "name": np.where(host, np.char.add("launch ", names.astype(str)).astype(object), names),
            "count": g["count"],
            "total_ms": g["total"] / 1e6,
            "min_ms": g["lo"] / 1e6,
            "max_ms": g["hi"] / 1e6,
        }
    )
    detail["self_ms"] = detail["total_ms"]
    detail["avg_ms"] = detail["total_ms"] / detail["count"]
    detail["share_pct"] = 100 * detail["self_ms"] / detail.groupby("device")["self_ms"].transform("sum")
    detail["shapes"] = np.where(detail["category"] == "compute", "32x3x224x224;32x64", "")
    detail["scope"] = ""
    detail = detail.sort_values(["device", "total_ms", "name"], ascending=[True, False, True])
    detail = detail[
        [
            "device",
            "op_type",
            "category",
            "name",
            "count",
            "total_ms",
            "self_ms",
            "avg_ms",
            "min_ms",
            "max_ms",
            "share_pct",
            "shapes",
            "scope",
        ]
    ]
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
        rows.append(
            pd.DataFrame(
                {
                    "queue": queue,
                    "time_ms": t,
                    "event": np.where(np.arange(len(t)) % 2, "get", "put"),
                    "size": size.astype(int),
                    "capacity": capacity,
                    "wait_ms": np.where(size == 0, 2.5, 0.0),
                    "step": step,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def _queue_summary(queues: pd.DataFrame) -> dict:
    stats = []
    for name, q in queues.groupby("queue", sort=True):
        cap = int(q["capacity"].iloc[0])
        stats.append(
            {
                "queue": name,
                "capacity": cap,
                "empty_ratio": float((q["size"] == 0).mean()),
                "full_ratio": float((q["size"] >= cap).mean()),
                "mean_size": float(q["size"].mean()),
                "get_wait_ms": float(q["wait_ms"].sum()),
            }
        )
    return {
        "schema_version": 1,
        "verdict": {
            "kind": "data_process",
            "reason": "the consumer found host_queue empty at 31 % of its gets",
            "feed_queue": "host_queue",
            "host_queue": "host_queue",
            "device_queue": "device_queue",
            "bottleneck_stage": "decode",
        },
        "queues": stats,
        "pipeline": {
            "stages": [
                {
                    "stage": "decode",
                    "depth": 1,
                    "input_queue": "read->decode",
                    "output_queue": "decode->batch",
                    "input_full_ratio": 0.9,
                    "output_empty_ratio": 0.05,
                    "slow": True,
                }
            ],
            "bottleneck_stage": "decode",
        },
    }


def _counters(spec: Spec, rng: np.random.Generator, end_ms: float) -> pd.DataFrame:
    t = np.arange(0.0, end_ms, 50.0)
    series = [
        ("host", "host", "process_cpu_pct", rng.uniform(80, 120, len(t))),
        ("host", "host", "rss_bytes", 2e9 + np.cumsum(rng.normal(1e6, 1e5, len(t)))),
        ("nvml", "cuda:0", "gpu_util_pct", rng.uniform(40, 95, len(t))),
        ("nvml", "cuda:0", "mem_used_bytes", np.full(len(t), 8.5e9)),
        ("nvml", "cuda:0", "power_w", rng.uniform(150, 250, len(t))),
    ]
    return pd.concat(
        [pd.DataFrame({"source": s, "device": d, "metric": m, "time_ms": t, "value": v}) for s, d, m, v in series],
        ignore_index=True,
    )


def _report(steps: pd.DataFrame) -> dict:
    gap = float(steps["iteration_gap_ms"].sum())
    total = float(steps["total_ms"].sum())
    return {
        "verdict": f"Input-bound: the iteration gap (data loading) takes {100 * gap / total:.0f}% of step time.",
        "findings": [
            {
                "kind": "input_bound",
                "severity": "high",
                "title": "Data loading stalls the device",
                "at_stake_ms": gap / len(steps),
                "at_stake_pct": 100 * gap / total,
                "evidence": "host_queue empty 60% of gets",
                "threshold": "gap > 10% of step",
                "suggestion": "raise num_workers / prefetch_factor",
            },
            {
                "kind": "op_hotspot",
                "severity": "medium",
                "title": f"{XSS} dominates device time",
                "at_stake_ms": 3.5,
                "at_stake_pct": 4.0,
                "evidence": "share 30%",
                "threshold": "share > 25%",
                "suggestion": "use mixed precision",
            },
        ],
    }


def write_events(path: Path, rank: int, steps: pd.DataFrame, spec: Spec) -> int:
    """events_{rank}.arrow straight from the generator (the format of docs/formats.md, written with
    profview's streaming writer), lane by lane and chunk by chunk: any size in bounded memory.
    Lanes: MainThread (launches, forward phases), DataLoader (next(batch)), steps, the device
    stream (kernels); one instant. Returns the number of events written."""
    from profiler.export.event_file import EventStreamWriter
    from profiler.formats.columns import EVENT_HEAD_FIELDS

    device_pid = 1000 + rank
    lanes = [
        {"pid": rank, "tid": HOST_LANE, "process": f"host (rank {rank})", "thread": "MainThread", "kind": "host"},
        {"pid": rank, "tid": LOADER_LANE, "process": f"host (rank {rank})", "thread": "DataLoader <0>", "kind": "host"},
        {"pid": rank, "tid": STEP_TID, "process": f"host (rank {rank})", "thread": "steps", "kind": "steps"},
        {
            "pid": device_pid,
            "tid": DEVICE_STREAM,
            "process": f"cuda:0 (rank {rank})",
            "thread": f"stream {DEVICE_STREAM}",
            "kind": "device",
        },
    ]
    for lane in lanes:
        lane["process_sort"] = 0 if lane["kind"] != "device" else 1
    n_ops, n_steps = len(OP_NAMES), len(steps)
    names = (
        OP_NAMES
        + [f"launch {n}" for n in OP_NAMES]
        + ["forward", "next(batch)", "end"]
        + [f"step {int(s)}" for s in steps["step"]]
    )
    categories = ["compute", "host", "phase", "span", "step", "mark"]
    args = ['{"type":"cudaLaunchKernel"}'] + [f'{{"step":{int(s)}}}' for s in steps["step"]]
    # the heads (ph, lane, name, category, args): kernels, launches, forward, next(batch), steps, the instant
    X = ord("X")
    kernel, launch, forward, loader = 0, n_ops, 2 * n_ops, 2 * n_ops + 1  # their first codes
    first_step, end = loader + 1, loader + 1 + n_steps
    table = (
        [(X, 3, i, 0, -1) for i in range(n_ops)]
        + [(X, 0, n_ops + i, 1, 0) for i in range(n_ops)]
        + [(X, 0, 2 * n_ops, 2, -1), (X, 1, 2 * n_ops + 1, 3, -1)]
        + [(X, 2, 2 * n_ops + 3 + k, 4, 1 + k) for k in range(n_steps)]
        + [(ord("i"), 0, 2 * n_ops + 2, 5, -1)]
    )
    heads = dict(zip([name for name, _ in EVENT_HEAD_FIELDS], np.array(table, dtype=np.int64).T))
    start_ns = np.round(steps["start_ms"].to_numpy() * 1e6).astype(np.int64)
    end_ns = np.round((steps["start_ms"] + steps["total_ms"]).to_numpy() * 1e6).astype(np.int64)
    fp_ns = np.round((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy() * 1e6).astype(np.int64)
    fp_bp_ns = np.round(steps["fp_bp_ms"].to_numpy() * 1e6).astype(np.int64)
    gap_ns = np.round(steps["iteration_gap_ms"].to_numpy() * 1e6).astype(np.int64)
    number = steps["step"].to_numpy()

    def rows(start, dur, step, head):
        order = np.lexsort((-dur, start))
        return {
            "start_ns": start[order],
            "dur_ns": dur[order],
            "step": np.broadcast_to(step, start.shape)[order],
            "head": np.broadcast_to(head, start.shape)[order],
        }

    with EventStreamWriter(
        path,
        rank=rank,
        names=names,
        categories=categories,
        args=args,
        heads=heads,
        lanes=lanes,
        origin_unix_ns=1_763_700_000_000_000_000,
    ) as w:
        by_chunk = list(_chunks(spec, steps))
        for i, chunk in by_chunk:  # lane 0: launches + forward phases
            ops = _chunk_ops(spec, rank, chunk, i)
            sel = np.isin(number, chunk["step"].to_numpy())
            start = np.concatenate([ops["launch_ns"], fp_ns[sel]])
            dur = np.concatenate([ops["launch_dur_ns"], fp_bp_ns[sel]])
            head = np.concatenate([ops["name"] + launch, np.full(sel.sum(), forward)])
            w.write(rows(start, dur, np.concatenate([ops["step"], number[sel]]), head))
        w.write(rows(start_ns.copy(), np.round(gap_ns * 0.9).astype(np.int64), number, loader))
        w.write(rows(start_ns.copy(), end_ns - start_ns, number, first_step + np.arange(n_steps)))
        for i, chunk in by_chunk:  # lane 3: device kernels
            ops = _chunk_ops(spec, rank, chunk, i)
            w.write(rows(ops["start_ns"], ops["dur_ns"], ops["step"], ops["name"] + kernel))
        w.write(rows(np.zeros(1, np.int64), np.zeros(1, np.int64), -1, end), complete=False)
    return w.rows


def write_run(directory: Path, spec: Spec = DEFAULT_SPEC) -> Path:
    """A complete profview output directory for `spec`; returns `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(spec.ranks):
        rng = np.random.default_rng(spec.seed + rank)
        steps = _steps(spec, rng, rank)
        types, detail = _op_tables(spec, rank, steps)
        outputs = {f"step_trace_{rank}.csv": steps, f"op_type_{rank}.csv": types, f"op_detail_{rank}.csv": detail}
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
            events = write_events(directory / f"events_{rank}.arrow", rank, steps, spec)
            names.append(f"events_{rank}.arrow")
        if spec.report:
            write_json(directory / f"report_{rank}.json", _report(steps))
            names.append(f"report_{rank}.json")
        info = {
            "schema_version": 1,
            "tool": "profview",
            "tool_version": "0.1.0",
            "data_origin": "profview",
            "rank": rank,
            "world_size": spec.ranks,
            "host": "testhost",
            "pid": 4242,
            "framework_versions": {"python": "3.11.7"},
            "clock": {
                "origin_unix_ns": 1_763_700_000_000_000_000,
                "origin_monotonic_ns": 1,
                "clock": "perf_counter_ns",
            },
            "sources": {"markers": {"status": "ok"}, "nvml": {"status": "absent: no GPU"}},
            "config": {},
            "recording": {
                "events": events,
                "dropped_events": 0,
                "dropped_reason": "",
                "chunks": 1,
                "torn_chunks": 0,
                "memory_budget_bytes": 1 << 26,
            },
            "steps": {"count": spec.steps, "first": 0, "last": spec.steps - 1},
            "overhead": {"total_ms": 1.0, "per_event_ns": 150.0, "flush_ms": 0.5},
            "warnings": [],
            "outputs": sorted(names),
        }
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

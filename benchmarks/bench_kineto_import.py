"""Benchmark: a large Kineto trace imported by profview and loaded by HolisticTraceAnalysis, side by side.

Builds a trace of `--size-gb` GB (or `--events` events) by replicating the real events of a CUDA capture
in tests/data/kineto (default sampled_rank-0.json.gz: each copy shifted in time, with its own step numbers
and correlation ids; Kineto's own window stretched over every copy), written event by event. Then, each in
a fresh process, on the same file: profview's `import_kineto_trace` (what `profview import-kineto` runs:
the chunked read, every analysis with the device time breakdown, the output files) and HTA's
`TraceAnalysis(include_last_profiler_step=True)` + `get_temporal_breakdown()` (HTA_DISABLE_NS_ROUNDING=1,
as the tests compare them). Prints wall time, peak RSS (the process's VmHWM), the device's idle share
by both, and the ratios. `--cut F` also imports the file cut at F of its bytes.

    .venv/bin/python benchmarks/bench_kineto_import.py --size-gb 0.94 [--gzip] [--skip-hta] [--cut 0.6]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiler.importers.kineto_events import load_trace_object  # noqa: E402

SEED_TRACE = REPO / "tests" / "data" / "kineto" / "sampled_rank-0.json.gz"
STEP = re.compile(r"ProfilerStep#(\d+)")
#: Gap between two copies of the seed events, in microseconds.
COPY_GAP_US = 1000


@dataclass(frozen=True)
class Replication:
    """How the seed's events are repeated: its metadata (Kineto's own window stretched over every copy, as a
    real long capture's is: the importer skips events far outside it as damaged), then its timed events
    copy after copy, each later by `span`, steps and ids renumbered."""

    metadata: list
    body: list
    span: float
    steps_per_copy: int
    id_stride: int

    @classmethod
    def of(cls, seed: dict) -> Replication:
        events = seed["traceEvents"]
        body = [e for e in events if e.get("ph") != "M" and e.get("cat") != "Trace"]
        start = min(e["ts"] for e in body)
        return cls(
            metadata=[e for e in events if e.get("ph") == "M" or e.get("cat") == "Trace"],
            body=body,
            span=max(e["ts"] + e.get("dur", 0) for e in body) - start + COPY_GAP_US,
            steps_per_copy=sum(1 for e in body if STEP.match(str(e.get("name", "")))),
            id_stride=1
            + max(max(e.get("args", {}).get("correlation", 0), e.get("args", {}).get("External id", 0)) for e in body),
        )

    def window(self, copies: int) -> list[dict]:
        """The metadata, Kineto's window covering `copies` copies."""
        return [
            dict(e, dur=e["dur"] + (copies - 1) * self.span) if e.get("cat") == "Trace" else e for e in self.metadata
        ]

    def copy(self, k: int) -> list[dict]:
        """The timed events of copy `k`."""
        return [_shifted(e, k, k * self.span, k * self.steps_per_copy, k * self.id_stride) for e in self.body]


def replicated_trace(seed: dict, target_events: int) -> dict:
    """The seed trace with its timed events repeated until about `target_events` events."""
    plan = Replication.of(seed)
    copies = max(1, (target_events - len(plan.metadata)) // len(plan.body))
    return {**seed, "traceEvents": plan.window(copies) + [e for k in range(copies) for e in plan.copy(k)]}


def _shifted(event: dict, copy: int, dt_us: float, step_offset: int, id_offset: int) -> dict:
    """One event of copy `copy`: later by dt_us, step and ids renumbered."""
    e = dict(event, ts=event["ts"] + dt_us)
    if copy and "args" in e:
        args = dict(e["args"])
        for key in ("correlation", "External id"):
            if key in args:
                args[key] += id_offset
        e["args"] = args
    match = STEP.match(str(e.get("name", "")))
    if match:
        e["name"] = f"ProfilerStep#{int(match.group(1)) + step_offset}"
    return e


def write_replicated(seed: dict, path: Path, target_bytes: int, compress: bool) -> tuple[int, int]:
    """Write the seed trace with its timed events repeated until the JSON text holds about `target_bytes`,
    a copy at a time (the trace never exists whole in memory); (events, steps) written."""
    plan = Replication.of(seed)
    copies = max(1, round(target_bytes / sum(len(json.dumps(e)) + 2 for e in plan.body)))
    header = {k: v for k, v in seed.items() if k != "traceEvents"}
    opener = gzip.open(path, "wb", compresslevel=1) if compress else open(path, "wb")
    with opener as fh:
        fh.write(json.dumps(header)[:-1].encode() + b', "traceEvents": [\n')
        parts = (plan.window(copies) if k < 0 else plan.copy(k) for k in range(-1, copies))
        separator = b""
        for part in parts:
            if part:
                fh.write(separator + ",\n".join(map(json.dumps, part)).encode())
                separator = b",\n"
        fh.write(b"\n]}\n")
    return len(plan.metadata) + copies * len(plan.body), copies * plan.steps_per_copy


def child_profview(path: str, out: str) -> dict:
    """`profview import-kineto PATH -o OUT`, as the command runs it (in this process, its output hidden)."""
    from viewer.cli import main as profview

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        if profview(["import-kineto", path, "-o", out]) != 0:
            sys.exit("profview import-kineto failed")
    seconds = time.perf_counter() - t0
    report = json.loads(next(Path(out).glob("report_*.json")).read_text())
    idle = report["devices"][0]["idle_pct"] if report["devices"] else None  # None: a CPU-only trace
    return {"seconds": seconds, "idle_pct": idle, "steps": report["steps"]}


def child_hta(trace_dir: str) -> dict:
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=True)
    temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    return {"seconds": time.perf_counter() - t0, "idle_pct": float(temporal["idle_time_pctg"])}


def measured(*child_args: str) -> dict:
    """Run one measurement in a fresh process: its figures and its peak RSS."""
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1")
    done = subprocess.run(
        [sys.executable, __file__, "--child", *child_args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"{child_args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--size-gb", type=float, help="JSON text of about this many GB (default 0.94)")
    size.add_argument("--events", type=int, help="about this many events instead")
    parser.add_argument(
        "--seed", default=SEED_TRACE.name, help="the capture in tests/data/kineto to replicate, or the path of a trace"
    )
    parser.add_argument("--gzip", action="store_true", help="write the trace as .json.gz")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--cut", type=float, help="also import the file cut at this share of its bytes")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *paths = args.child
        figures = child_profview(*paths) if kind == "profview" else child_hta(*paths)
        # VmHWM, not ru_maxrss: that keeps the parent's high-water mark across fork and exec
        hwm = re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())
        figures["peak_rss_mb"] = int(hwm[1]) / 1024
        print(json.dumps(figures))
        return

    seed = load_trace_object(SEED_TRACE.parent / args.seed)
    with tempfile.TemporaryDirectory(prefix="bench_kineto_") as tmp:
        trace_dir = Path(tmp) / "trace"
        trace_dir.mkdir()
        path = trace_dir / ("bench_rank-0.json.gz" if args.gzip else "bench_rank-0.json")
        if args.events:
            target = args.events * sum(len(json.dumps(e)) + 2 for e in seed["traceEvents"]) / len(seed["traceEvents"])
        else:
            target = (args.size_gb or 0.94) * 1e9
        t0 = time.perf_counter()
        n_events, n_steps = write_replicated(seed, path, int(target), args.gzip)
        print(
            f"trace: {n_events:,} events, {n_steps} steps, {path.stat().st_size / 1e9:.3f} GB on disk ({path.name}, "
            f"from {args.seed}; written in {time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        rows = [("profview import-kineto", measured("profview", str(path), str(Path(tmp) / "out")))]
        print(_row(*rows[-1]), flush=True)
        if args.cut:
            cut = Path(tmp) / "cut" / path.name
            cut.parent.mkdir()
            cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * args.cut)])
            rows.append(
                (f"profview, cut at {args.cut:.0%}", measured("profview", str(cut), str(Path(tmp) / "cut_out")))
            )
            print(_row(*rows[-1]) + f", {rows[-1][1]['steps']['analysed']} steps analysed", flush=True)
        if args.skip_hta:
            return
        hta = measured("hta", str(trace_dir))
        print(_row("HTA TraceAnalysis + temporal", hta), flush=True)
        ours = rows[0][1]
        print(
            f"profview / HTA: time {ours['seconds'] / hta['seconds']:.2f}x, peak RSS "
            f"{ours['peak_rss_mb'] / hta['peak_rss_mb']:.2f}x; device idle {ours['idle_pct']:.2f} % vs "
            f"{hta['idle_pct']:.2f} % ({abs(ours['idle_pct'] - hta['idle_pct']):.2f} points apart)"
        )


def _row(label: str, figures: dict) -> str:
    idle = "no device" if figures["idle_pct"] is None else f"device idle {figures['idle_pct']:.2f} %"
    return f"{label:<30} {figures['seconds']:8.1f} s  peak RSS {figures['peak_rss_mb']:8.0f} MB  {idle}"


if __name__ == "__main__":
    main()

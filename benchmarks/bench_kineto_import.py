"""Benchmark: Kineto trace import (profview) against HolisticTraceAnalysis' trace load.

Builds a trace of about a million events in a temp dir by replicating the real events of
tests/data/kineto/sampled_rank-0.json.gz (each copy shifted in time, with its own step numbers
and correlation ids), then times, on the same file: `read_kineto_trace` (the parse into a Run),
`import_kineto_trace` (what `profview import-kineto` runs: the parse, every analysis with the
device time breakdown, and the output files), and HTA's own parse
(`hta.trace_analysis.TraceAnalysis`), and prints the figures and the ratios HTA / profview.

    .venv/bin/python benchmarks/bench_kineto_import.py [--events N] [--gzip] [--skip-hta]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiler.importers.kineto import read_kineto_trace  # noqa: E402
from profiler.importers.kineto_events import load_trace_object  # noqa: E402
from profiler.postprocess.imported import import_kineto_trace  # noqa: E402

SEED_TRACE = REPO / "tests" / "data" / "kineto" / "sampled_rank-0.json.gz"
STEP = re.compile(r"ProfilerStep#(\d+)")
#: Gap between two copies of the seed events, in microseconds.
COPY_GAP_US = 1000


def replicated_trace(seed: dict, target_events: int) -> dict:
    """The seed trace with its timed events repeated until about `target_events` events."""
    events = seed["traceEvents"]
    metadata = [e for e in events if e.get("ph") == "M" or e.get("cat") == "Trace"]
    body = [e for e in events if e.get("ph") != "M" and e.get("cat") != "Trace"]
    start = min(e["ts"] for e in body)
    span = max(e["ts"] + e.get("dur", 0) for e in body) - start + COPY_GAP_US
    steps_per_copy = sum(1 for e in body if STEP.match(str(e.get("name", ""))))
    id_stride = 1 + max(
        max(e.get("args", {}).get("correlation", 0), e.get("args", {}).get("External id", 0)) for e in body
    )
    copies = max(1, (target_events - len(metadata)) // len(body))
    # Kineto's own window ("PyTorch Profiler (0)") covers every copy, as a real long capture's does:
    # the importer skips events far outside it as damaged.
    out = [dict(e, dur=e["dur"] + (copies - 1) * span) if e.get("cat") == "Trace" else e for e in metadata]
    for k in range(copies):
        out.extend(_shifted(e, k, k * span, k * steps_per_copy, k * id_stride) for e in body)
    return {**seed, "traceEvents": out}


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


def write_trace(trace: dict, directory: Path, compress: bool) -> Path:
    path = directory / ("bench_rank-0.json.gz" if compress else "bench_rank-0.json")
    text = json.dumps(trace).encode()
    if compress:
        with gzip.open(path, "wb", compresslevel=1) as fh:
            fh.write(text)
    else:
        path.write_bytes(text)
    return path


def timed(label: str, func) -> float:
    gc.collect()
    t0 = time.perf_counter()
    result = func()
    seconds = time.perf_counter() - t0
    print(f"{label:<34} {seconds:8.2f} s", flush=True)
    del result
    return seconds


def hta_load(directory: Path):
    """HTA's own entry point: parses every rank's trace of the directory."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    return TraceAnalysis(trace_dir=str(directory))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--gzip", action="store_true", help="write the trace as .json.gz")
    parser.add_argument("--skip-hta", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_kineto_") as tmp:
        trace = replicated_trace(load_trace_object(SEED_TRACE), args.events)
        path = write_trace(trace, Path(tmp), args.gzip)
        n_events = len(trace["traceEvents"])
        del trace
        print(f"trace: {n_events} events, {path.stat().st_size / 1e6:.0f} MB ({path.name})")

        run = read_kineto_trace(path)
        print(f"imported: {len(run.ops)} ops, {len(run.steps)} steps, {len(run.spans)} spans")
        del run
        ours = timed("profview read_kineto_trace", lambda: read_kineto_trace(path))
        with tempfile.TemporaryDirectory(prefix="bench_kineto_out_") as out:  # not in HTA's trace_dir
            whole = timed("profview import-kineto (+ analysis)", lambda: import_kineto_trace(path, out))
            devices = json.loads(next(Path(out).glob("report_*.json")).read_text())["devices"]
        print(
            "device time: "
            + "; ".join(f"{d['device']} busy {d['busy_pct']:.1f} %, idle {d['idle_pct']:.1f} %" for d in devices)
        )
        if args.skip_hta:
            return
        theirs = timed("HTA TraceAnalysis(trace_dir)", lambda: hta_load(Path(tmp)))
        print(f"ratio HTA / profview read_kineto_trace: {theirs / ours:.1f}x")
        print(f"ratio HTA / profview import-kineto:     {theirs / whole:.1f}x")


if __name__ == "__main__":
    main()

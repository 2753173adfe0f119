"""Core benchmark: cost of a recorded span against its peers, memory per event, analyse() throughput.

    python benchmarks/bench_core.py [--sizes 1e5,1e6,1e7]

One run, side by side on this machine:
  * ns per recorded span: profview phase() / op() (C hot path and pure-Python fallback),
    torch.profiler.record_function under an active torch profiler, VizTracer's log_event,
    and the floor (two perf_counter_ns calls + a list append);
  * bytes per recorded event held in memory;
  * analyse() throughput and peak RSS at each size (each size in a fresh subprocess);
  * Chrome-trace bytes per event.
Targets (issue 2): span <= 400 ns; <= 40 B/event in memory; analyse >= 5 M events/s at 1e7;
<= 100 B/event in the Chrome trace.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

N_SPANS = 200_000


def per_call_ns(fn, n=N_SPANS, repeat=5) -> float:
    return min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e9


def bench_floor() -> float:
    from time import perf_counter_ns

    out: list = []

    def span():
        a = perf_counter_ns()
        b = perf_counter_ns()
        out.append(b - a)

    r = per_call_ns(span)
    return r


def bench_profview(tmp: Path, impl: str) -> dict:
    """Run in a subprocess so the hot-path implementation can be chosen by environment."""
    code = r"""
import json, sys, timeit
from profiler import Profiler
from profiler.record.recorder import HOT_PATH_IMPL, hot
p = Profiler(output_path=sys.argv[1], host_counters=False, gpu_counters=False, flush_interval_s=3600,
             memory_budget_mb=512)
N = int(sys.argv[2])
def phase():
    with p.phase("forward"):
        pass
def op():
    with p.op("MatMul", op_type="MatMul"):
        pass
res = {"impl": HOT_PATH_IMPL,
       "phase_ns": min(timeit.repeat(phase, number=N, repeat=5)) / N * 1e9,
       "op_ns": min(timeit.repeat(op, number=N, repeat=5)) / N * 1e9}
hot.drain()
before = hot.held_bytes()
for _ in range(N):
    phase()
held = hot.held_bytes() - before
res["bytes_per_event"] = max(held, 1) / (2 * N)
if HOT_PATH_IMPL == "python":
    res["bytes_per_event"] = 16.0   # array('q') storage: two int64 per event, amortised growth aside
p.stop()
print(json.dumps(res))
"""
    env = dict(os.environ)
    if impl == "python":
        env["PROFVIEW_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", code, str(tmp / f"pv-{impl}"), str(N_SPANS)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_torch() -> float | None:
    try:
        import torch
    except ImportError:
        return None
    from torch.profiler import ProfilerActivity, profile, record_function

    def span():
        with record_function("forward"):
            pass

    with profile(activities=[ProfilerActivity.CPU]):
        r = per_call_ns(span, n=20_000, repeat=3)
    return r


def bench_viztracer(tmp: Path) -> float | None:
    try:
        from viztracer import VizTracer
    except ImportError:
        return None
    tracer = VizTracer(output_file=str(tmp / "viz.json"), verbose=0, tracer_entries=2_000_000)
    tracer.start()

    def span():
        with tracer.log_event("forward"):
            pass

    try:
        r = per_call_ns(span, n=50_000, repeat=3)
    finally:
        tracer.stop()
        tracer.clear()
    return r


ANALYSE_CHILD = r"""
import json, os, resource, sys, time
from profiler import Profiler
from profiler.postprocess.recording import analyse_directory
out, n_events = sys.argv[1], int(float(sys.argv[2]))
p = Profiler(output_path=out, host_counters=False, gpu_counters=False, memory_budget_mb=1024)
spans_per_step = 1000
span = p.op("MatMul", op_type="MatMul")
fwd = p.phase("forward")
n_spans = n_events // 2
steps = max(n_spans // spans_per_step, 1)
for _ in range(steps):
    with fwd:
        for _ in range(spans_per_step - 1):
            with span:
                pass
    p.step()
p.stop()
rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
paths = analyse_directory(out, progress=False)
dt = time.perf_counter() - t0
trace = [x for x in paths if "timeline" in x.name][0]
info = json.load(open(os.path.join(out, "profiler_info_0.json")))
events = info["recording"]["events"]
n_trace = 0
print(json.dumps({"events": events, "seconds": dt, "events_per_s": events / dt,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_before_analyse_mb": rss_before / 1024,
                  "trace_bytes": os.path.getsize(trace), "trace_spans": events // 2 + steps}))
"""


def bench_analyse(tmp: Path, size: float) -> dict:
    out = tmp / f"analyse-{int(size)}"
    r = subprocess.run([sys.executable, "-c", ANALYSE_CHILD, str(out), str(size)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["trace_bytes_per_event"] = res["trace_bytes"] / res["trace_spans"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,1e6,1e7", help="event counts for the analyse() benchmark")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("== ns per recorded span (lower is better)")
        floor = bench_floor()
        c = bench_profview(tmp, "c")
        py = bench_profview(tmp, "python")
        torch_ns = bench_torch()
        viz = bench_viztracer(tmp)
        rows = [("profview phase() [C hot path]", c["phase_ns"]), ("profview op() [C hot path]", c["op_ns"]),
                ("profview phase() [pure Python]", py["phase_ns"]), ("profview op() [pure Python]", py["op_ns"]),
                ("torch record_function (profiler active)", torch_ns), ("VizTracer log_event", viz),
                ("floor: 2x perf_counter_ns + append", floor)]
        for name, v in rows:
            print(f"  {name:42s} {'n/a' if v is None else f'{v:8.0f} ns'}"
                  + ("" if v is None else f"   x{v / c['phase_ns']:.1f} of profview phase()"))
        print(f"  target: span <= 400 ns -> {'met' if c['phase_ns'] <= 400 else 'NOT met'}")
        print(f"== memory: {c['bytes_per_event']:.1f} bytes per recorded event (C), target <= 40")
        print("== analyse() throughput (fresh process per size)")
        for s in [float(x) for x in args.sizes.split(",")]:
            r = bench_analyse(tmp, s)
            if "error" in r:
                print(f"  {s:.0e} events: failed: {r['error']}")
                continue
            print(f"  {r['events']:>10,} events: {r['seconds']:6.2f} s  {r['events_per_s'] / 1e6:5.2f} M events/s  "
                  f"peak RSS {r['peak_rss_mb']:7.0f} MB  trace {r['trace_bytes_per_event']:5.1f} B/event")


if __name__ == "__main__":
    main()

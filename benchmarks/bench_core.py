"""Core benchmark: cost of a recorded span against its peers, memory per event, analyse() throughput.

    python benchmarks/bench_core.py [--sizes 1e5,1e6,1e7]

One run, side by side on this machine:
  * ns per recorded span: profview phase() / op() (C hot path and pure-Python fallback),
    torch.profiler.record_function under an active torch profiler, VizTracer's log_event,
    and the floor (two perf_counter_ns calls + a list append);
  * bytes per recorded event held in memory;
  * analyse() end to end (`Profiler.analyse()`: stop, final flush, reading the raw store, every
    output including the Chrome trace and the event file) and peak RSS at each size (each size
    in a fresh subprocess, `--repeat` times), against VizTracer's `stop(); save()` of the same
    loop (its natural events: one per traced Python call; the same number of spans) in the same run;
  * Chrome-trace and event-file bytes per span;
  * with `--stages`: the raw store's two analysis stages at each size, reading
    (`store.load.read_raw_tables`) and interpreting (`store.interpret.interpret`), each run in a fresh
    process on one recording, median and range of `--repeat` runs; `--baseline REF` times a git
    worktree of REF on the same recording, alternating with this checkout (before / after figures
    measured side by side under the same machine load).
Targets (issue 2): span <= 400 ns; <= 40 B/event in memory; analyse >= 5 M events/s at 1e7;
<= 100 B/event in the Chrome trace. Issue 16: analyse() at 1e7 events >= 2x VizTracer's save().
Issue 25: reading + interpreting the raw store at 1e7 events >= 1.5x faster than before it.
"Events" are profview's recorded events (a span is two: begin and end), as in profiler_info;
VizTracer records one entry per call, so both rates are also given per span.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp / f"pv-{impl}"), str(N_SPANS)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_torch() -> float | None:
    try:
        from torch.profiler import ProfilerActivity, profile, record_function
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
rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
paths = p.analyse(progress=False)
dt = time.perf_counter() - t0
trace = [x for x in paths if "timeline" in x.name][0]
events_file = [x for x in paths if x.name.startswith("events_")][0]
info = json.load(open(os.path.join(out, "profiler_info_0.json")))
events = info["recording"]["events"]
print(json.dumps({"events": events, "spans": events // 2, "seconds": dt, "events_per_s": events / dt,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_before_analyse_mb": rss_before / 1024, "trace_bytes": os.path.getsize(trace),
                  "event_file_bytes": os.path.getsize(events_file), "trace_spans": events // 2 + steps,
                  "trace_content": info["timeline"]["content"], "trace_events": info["timeline"]["events_written"]}))
"""

VIZTRACER_CHILD = r"""
import json, os, resource, sys, time
from viztracer import VizTracer
out, n_events = sys.argv[1], int(float(sys.argv[2]))
n_spans = n_events // 2                  # the same loop as profview's: steps of 1000 spans
per_step = 1000
def op():
    pass
def forward():
    for _ in range(per_step - 1):
        op()
tracer = VizTracer(output_file=out, verbose=0, tracer_entries=n_spans + 100_000, ignore_c_function=True)
tracer.start()
for _ in range(max(n_spans // per_step, 1)):
    forward()
t0 = time.perf_counter()
tracer.stop()
tracer.save()
dt = time.perf_counter() - t0
print(json.dumps({"spans": n_spans, "seconds": dt, "spans_per_s": n_spans / dt, "trace_bytes": os.path.getsize(out),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_analyse(tmp: Path, size: float) -> dict:
    out = tmp / f"analyse-{int(size)}"
    r = subprocess.run([sys.executable, "-c", ANALYSE_CHILD, str(out), str(size)], capture_output=True, text=True)
    subprocess.run(["rm", "-rf", str(out)])
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["trace_bytes_per_event"] = res["trace_bytes"] / res["trace_events"]
    res["event_file_bytes_per_event"] = res["event_file_bytes"] / res["trace_spans"]
    return res


def bench_viztracer_save(tmp: Path, size: float) -> dict | None:
    try:
        import viztracer  # noqa: F401
    except ImportError:
        return None
    out = tmp / f"viztracer-{int(size)}.json"
    r = subprocess.run([sys.executable, "-c", VIZTRACER_CHILD, str(out), str(size)], capture_output=True, text=True)
    out.unlink(missing_ok=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- the raw store's analysis stages: reading and interpreting --------------------------------

RECORD_CHILD = r"""
import sys
from profiler import Profiler
out, n_events = sys.argv[1], int(float(sys.argv[2]))
p = Profiler(output_path=out, host_counters=False, gpu_counters=False, memory_budget_mb=1024)
span, fwd = p.op("MatMul", op_type="MatMul"), p.phase("forward")
for _ in range(max(n_events // 2000, 1)):          # the analyse() benchmark's loop: steps of 1000 spans
    with fwd:
        for _ in range(999):
            with span:
                pass
    p.step()
p.stop()
"""

STAGES_CHILD = r"""
import json, sys, time
from pathlib import Path
from profiler.store.interpret import interpret
from profiler.store.load import read_raw_tables, scan_raw_store
directory = Path(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
tables = read_raw_tables(scan_raw_store(directory).files[0], rank=0)
t1, c1 = time.perf_counter(), time.process_time()
run = interpret(tables)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"events": run.info["recording"]["events"], "read_s": t1 - t0, "interpret_s": t2 - t1,
                  "cpu_s": c2 - c0}))
"""


def checkout(tmp: Path, ref: str) -> Path:
    """A git worktree of `ref` with its C extensions built (the baseline of --stages)."""
    root = Path(__file__).resolve().parents[1]
    tree = tmp / "baseline-tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), ref], cwd=root, check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True, capture_output=True
    )
    return tree


def time_stages(tree: Path, directory: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run(
        [sys.executable, "-c", STAGES_CHILD, str(directory)], capture_output=True, text=True, env=env, cwd=str(tree)
    )
    if r.returncode != 0:
        raise SystemExit(f"stage timing failed in {tree}: {r.stderr.strip().splitlines()[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_stages(tmp: Path, sizes: list[float], repeat: int, baseline: str | None) -> None:
    """Read + interpret the raw store of one recording per size, in fresh processes, alternating trees."""
    root = Path(__file__).resolve().parents[1]
    trees = {"this checkout": root}
    if baseline:
        trees = {f"baseline {baseline}": checkout(tmp, baseline), **trees}
    print(
        f"== raw store stages: reading + interpreting (fresh process each, median of {repeat}; "
        f"load average {os.getloadavg()[0]:.1f} at start)"
    )
    try:
        for size in sizes:
            directory = tmp / f"stages-{int(size)}"
            subprocess.run(
                [sys.executable, "-c", RECORD_CHILD, str(directory), str(size)],
                check=True,
                env={**os.environ, "PYTHONPATH": str(root)},
            )
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for _ in range(repeat):
                for name, tree in trees.items():
                    runs[name].append(time_stages(tree, directory))
            medians, cpu = [], []
            for name, rs in runs.items():
                read, interp = [r["read_s"] for r in rs], [r["interpret_s"] for r in rs]
                medians.append(statistics.median(a + b for a, b in zip(read, interp)))
                cpu.append(statistics.median(r["cpu_s"] for r in rs))
                print(
                    f"  {rs[0]['events']:>11,} events, {name:24s} read {statistics.median(read):5.2f} s "
                    f"({min(read):.2f}-{max(read):.2f})  interpret {statistics.median(interp):5.2f} s "
                    f"({min(interp):.2f}-{max(interp):.2f})  both {medians[-1]:5.2f} s, CPU {cpu[-1]:5.2f} s"
                )
            if baseline:
                speedup = medians[0] / medians[1]
                print(
                    f"  -> {speedup:.2f}x faster than {baseline} ({cpu[0] / cpu[1]:.2f}x less CPU; target 1.5x at "
                    f"1e7: {'met' if speedup >= 1.5 else 'NOT met'}); load average now {os.getloadavg()[0]:.1f}"
                )
            shutil.rmtree(directory, ignore_errors=True)
    finally:
        if baseline:
            subprocess.run(["git", "worktree", "remove", "--force", str(trees[f"baseline {baseline}"])], cwd=root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,1e6,1e7", help="event counts for the analyse() benchmark")
    ap.add_argument("--repeat", type=int, default=3, help="analyse() / VizTracer runs per size, alternating")
    ap.add_argument("--analyse-only", action="store_true", help="skip the per-span cost section")
    ap.add_argument(
        "--stages", action="store_true", help="only the raw store's stages: reading and interpreting, at each size"
    )
    ap.add_argument("--baseline", help="with --stages: a git ref timed on the same recordings, alternating")
    ap.add_argument(
        "--loads", default="quiet", help="quiet and / or busy (a process spinning on a core meanwhile), e.g. quiet,busy"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.stages:
            bench_stages(tmp, [float(x) for x in args.sizes.split(",")], args.repeat, args.baseline)
            return
        if not args.analyse_only:
            print("== ns per recorded span (lower is better)")
            floor = bench_floor()
            c = bench_profview(tmp, "c")
            py = bench_profview(tmp, "python")
            torch_ns = bench_torch()
            viz = bench_viztracer(tmp)
            rows = [
                ("profview phase() [C hot path]", c["phase_ns"]),
                ("profview op() [C hot path]", c["op_ns"]),
                ("profview phase() [pure Python]", py["phase_ns"]),
                ("profview op() [pure Python]", py["op_ns"]),
                ("torch record_function (profiler active)", torch_ns),
                ("VizTracer log_event", viz),
                ("floor: 2x perf_counter_ns + append", floor),
            ]
            for name, v in rows:
                print(
                    f"  {name:42s} {'n/a' if v is None else f'{v:8.0f} ns'}"
                    + ("" if v is None else f"   x{v / c['phase_ns']:.1f} of profview phase()")
                )
            print(f"  target: span <= 400 ns -> {'met' if c['phase_ns'] <= 400 else 'NOT met'}")
            print(f"== memory: {c['bytes_per_event']:.1f} bytes per recorded event (C), target <= 40")
        for load in args.loads.split(","):
            with background(load):
                compare_analyse(tmp, [float(x) for x in args.sizes.split(",")], args.repeat, load)


@contextlib.contextmanager
def background(load: str):
    """`quiet`: nothing else started; `busy`: one process spinning on a core meanwhile."""
    if load not in ("quiet", "busy"):
        raise SystemExit(f"--loads takes quiet and / or busy, not {load!r}")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
    try:
        yield
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def _median_range(values: list[float]) -> str:
    return f"median {statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"


def compare_analyse(tmp: Path, sizes: list[float], repeat: int, load: str) -> None:
    """analyse() end to end against VizTracer's stop() + save() of as many entries as profview recorded spans."""
    print(
        f"== analyse() end to end vs VizTracer stop() + save(), {load} machine (load average "
        f"{os.getloadavg()[0]:.1f}; fresh process each, alternating, {repeat} each)"
    )
    for s in sizes:
        ours, theirs = [], []
        for _ in range(repeat):
            ours.append(bench_analyse(tmp, s))
            theirs.append(bench_viztracer_save(tmp, s))
        good = [r for r in ours if "error" not in r]
        if not good:
            print(f"  {s:.0e} events: failed: {ours[0]['error']}")
            continue
        r = good[0]
        secs = [x["seconds"] for x in good]
        print(
            f"  profview  {r['events']:>11,} events ({r['spans']:,} spans): {_median_range(secs)}  "
            f"{r['events'] / statistics.median(secs) / 1e6:5.2f} M events/s  peak RSS "
            f"{max(x['peak_rss_mb'] for x in good):6.0f} MB  trace: {r['trace_content']} "
            f"({r['trace_events']:,} events, "
            f"{r['trace_bytes'] / 1e6:.1f} MB, {r['trace_bytes_per_event']:5.1f} B/event), event file "
            f"{r['event_file_bytes'] / 1e6:.0f} MB ({r['event_file_bytes_per_event']:4.1f} B/span)"
        )
        viz = [v for v in theirs if v and "error" not in v]
        if not viz:
            if theirs and theirs[0] is not None:
                print(f"  VizTracer failed: {theirs[0].get('error')}")
            else:
                print("  VizTracer is not installed (pip install -e .[benchmark])")
            continue
        vs = [v["seconds"] for v in viz]
        v = viz[0]
        print(
            f"  VizTracer {v['spans']:>11,} entries (1 a call):          {_median_range(vs)}  "
            f"{v['spans'] / statistics.median(vs) / 1e6:5.2f} M entries/s  peak RSS "
            f"{max(x['peak_rss_mb'] for x in viz):6.0f} MB  trace {v['trace_bytes'] / 1e6:.0f} MB"
        )
        same_spans = statistics.median(vs) / statistics.median(secs)
        per_event = (r["events"] / statistics.median(secs)) / (v["spans"] / statistics.median(vs))
        print(
            f"  -> medians: VizTracer's time / profview's for the same spans x{same_spans:.2f}; events/s "
            f"(profview events, 2 a span, / VizTracer entries) x{per_event:.2f} (issue 25 target x3: "
            f"{'met' if per_event >= 3 else 'NOT met'})"
        )


if __name__ == "__main__":
    main()

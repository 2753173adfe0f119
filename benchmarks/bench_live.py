"""The live view's cost: does `profview watch` keep up with a fast recording, how much CPU does it take,
and does it slow the training loop it watches?

Run: python benchmarks/bench_live.py [--rate 1e6] [--seconds 15] [--steps 150] [--blocks 10] [--threads 1]

1. **Following a fast recording.** A recording process records `--rate` events per second (user
   ops in a `forward` phase, a `data` phase, 10 000 events a step, paced to the rate) for
   `--seconds`, while `profview watch` follows its directory in its own process, printing plain
   lines to a pipe, then (`--view both`, the default) drawing its rich view on a pseudo-terminal. The
   watcher's CPU time is measured from the moment the recording starts to the watcher's exit (its
   start-up, the imports, is left out: it is sampled once the watcher printed its first line),
   with psutil / wait4, i.e. process CPU time, not wall time. Reported: the rate the recording
   reached, the records per second the watcher read, the watcher's CPU as % of one core (target
   < 10 %), how long after the recording's end chunk it exited, and that it saw every step.
2. **Step time with and without a watcher.** A real PyTorch loop (the tests' CIFAR-sized CNN, SGD,
   `Profiler()` + `attach()`) runs `--blocks` blocks of `--steps` steps in one process, alone and
   with `profview watch --plain` following its recording in the order A B B A A B B A ... (the
   watcher started, imports done, before its block, and stopped after it), so both see the same
   machine and a steady drift cancels. Reported per pair of blocks: the
   median step (wall) and the training thread's median CPU time per step, and their ratios
   watched / alone; then the median and the range of the ratios.

Other processes share this machine: the figures are ranges over repetitions, not single numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PROFVIEW = [PYTHON, "-m", "viewer.cli"]

RECORDER = r"""
import json, sys, time
from profiler import Profiler
out, rate, seconds, per_step = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
p = Profiler(out, host_counters=True, gpu_counters=False, memory_budget_mb=512)
ops = [p.op(f"Op{k}", op_type=f"T{k % 8}") for k in range(16)]
fwd, data = p.phase("forward"), p.phase("data")
spans = max(per_step // 2 - 2, 1)              # + the two phases' 4 events; the step is a sample
events = steps = 0
t0 = time.perf_counter()
while time.perf_counter() - t0 < seconds:
    with data:
        pass
    with fwd:
        for i in range(spans):
            with ops[i & 15]:
                pass
    p.step()
    steps += 1
    events += 2 * spans + 5
    ahead = events / rate - (time.perf_counter() - t0)
    if ahead > 0:
        time.sleep(ahead)
elapsed = time.perf_counter() - t0
p.stop()
print(json.dumps({"steps": steps, "events": events, "seconds": elapsed, "rate": events / elapsed}), flush=True)
"""

TRAIN = r"""
import json, statistics, subprocess, sys, time
import psutil
import torch
sys.path.insert(0, sys.argv[4])
from support.torch_loops import cifar_batch, small_cnn
from profiler import Profiler
out, steps, threads, blocks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
watch_cmd = json.loads(sys.argv[6])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = small_cnn()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = cifar_batch()
p = Profiler(out, gpu_counters=False)
p.attach(model, opt, ops=False)

def block(n):
    wall, cpu = [], []
    for i in range(n):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        wall.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    return statistics.median(wall) / 1e6, statistics.median(cpu) / 1e6

block(20)                                          # warm-up
results = []
for b in range(blocks):
    watched = b % 4 in (1, 2)                       # A B B A A B B A ...: a linear drift cancels out
    watcher = None
    if watched:                                    # started (imports done) before the block, stopped after it
        watcher = subprocess.Popen(watch_cmd + [out, "--plain"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True)
        watcher.stdout.readline()
        c0, t0 = sum(psutil.Process(watcher.pid).cpu_times()[:2]), time.monotonic()
    wall, cpu = block(steps)
    share = None
    if watcher is not None:
        share = 100 * (sum(psutil.Process(watcher.pid).cpu_times()[:2]) - c0) / (time.monotonic() - t0)
        watcher.terminate()
        watcher.wait()
    results.append({"watched": watched, "median_ms": wall, "cpu_ms": cpu, "watcher_cpu_pct": share})
p.stop()
print(json.dumps(results), flush=True)
"""


def start_watcher(directory: Path, view: str = "plain") -> tuple[subprocess.Popen, float]:
    """`profview watch DIR` once it has started (imports done), and its CPU seconds then. "plain":
    stdout a pipe (plain lines); "rich": stdout a pseudo-terminal (the rich view), drained by a thread."""
    if view == "plain":
        proc = subprocess.Popen(
            [*PROFVIEW, "watch", str(directory), "--plain"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        proc.stdout.readline()  # "status=waiting": imports done
    else:
        import pty
        import threading

        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [*PROFVIEW, "watch", str(directory)],
            cwd=REPO,
            stdout=slave,
            stderr=slave,
            env=dict(os.environ, COLUMNS="120", LINES="40"),
        )
        os.close(slave)
        first = threading.Event()

        def drain() -> None:
            while True:
                try:
                    if not os.read(master, 65536):
                        return
                except OSError:
                    return
                first.set()

        threading.Thread(target=drain, daemon=True).start()
        first.wait(60)  # the first frame: imports done
    t = psutil.Process(proc.pid).cpu_times()
    return proc, t.user + t.system


def finish_watcher(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[float, list[str]]:
    """(total CPU seconds, its output lines) once it exits (os.wait4: the child's own rusage)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime, proc.stdout.read().splitlines() if proc.stdout else []
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.02)


def fields(line: str) -> dict[str, str]:
    import shlex

    return dict(w.split("=", 1) for w in shlex.split(line)[1:] if "=" in w)


def follow_benchmark(rate: float, seconds: float, view: str = "plain") -> None:
    work = Path(tempfile.mkdtemp(prefix="profview-bench-live-"))
    try:
        out = work / "run"
        out.mkdir()
        watcher, cpu0 = start_watcher(out, view)
        t0 = time.monotonic()
        rec = subprocess.run(
            [PYTHON, "-c", RECORDER, str(out), str(rate), str(seconds), "10000"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        recorded = json.loads(rec.stdout.strip().splitlines()[-1])
        t_end = time.monotonic()
        cpu1, lines = finish_watcher(watcher)
        t_exit = time.monotonic()
        plain = [line for line in lines if line.startswith("profview-watch ")]
        last = fields(plain[-1]) if plain else {}
        wall = t_exit - t0
        cpu = cpu1 - cpu0
        records = int(last.get("records", 0))
        raw_mb = sum(p.stat().st_size for p in (out / "raw").glob("*.pvraw")) / 1e6
        shown = "plain lines" if view == "plain" else "the rich view on a pseudo-terminal"
        print(f"1. following a fast recording (profview watch, {shown}, its own process)")
        print(
            f"   recording: {recorded['events']:,} events in {recorded['steps']:,} steps over "
            f"{recorded['seconds']:.1f} s = {recorded['rate'] / 1e6:.2f} M events/s ({raw_mb:.0f} MB raw store)"
        )
        if view == "plain":
            print(
                f"   watcher:   read {records:,} records = {records / recorded['seconds'] / 1e6:.2f} M records/s "
                f"(ratio to the recording: {records / max(recorded['events'], 1):.3f}); saw {last.get('steps')} of "
                f"{recorded['steps']} steps; exited {t_exit - t_end:.2f} s after the recording did"
            )
        print(f"   watcher CPU: {cpu:.2f} s over {wall:.1f} s = {100 * cpu / wall:.1f} % of one core (target < 10 %)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def step_benchmark(steps: int, blocks: int, threads: int) -> None:
    print(
        f"2. a PyTorch training loop (CIFAR-sized CNN, batch 32, SGD, Profiler + attach, torch threads {threads}): "
        f"{blocks} blocks of {steps} steps in one process, without and with `profview watch` "
        "following it (A B B A ...; the watcher started before its block)"
    )
    work = Path(tempfile.mkdtemp(prefix="profview-bench-train-"))
    try:
        out = work / "run"
        r = subprocess.run(
            [
                PYTHON,
                "-c",
                TRAIN,
                str(out),
                str(steps),
                str(threads),
                str(REPO / "tests"),
                str(blocks),
                json.dumps([*PROFVIEW, "watch"]),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        results = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios, cpu_ratios = [], []
    pairs = [(a, b) if not a["watched"] else (b, a) for a, b in zip(results[0::2], results[1::2])]
    for before, watched in pairs:
        ratios.append(watched["median_ms"] / before["median_ms"])
        cpu_ratios.append(watched["cpu_ms"] / before["cpu_ms"])
        print(
            f"   median step {before['median_ms']:.2f} ms alone -> {watched['median_ms']:.2f} ms watched "
            f"(x{ratios[-1]:.3f}); training thread CPU {before['cpu_ms']:.2f} -> {watched['cpu_ms']:.2f} ms a step "
            f"(x{cpu_ratios[-1]:.3f}); the watcher took {watched['watcher_cpu_pct']:.1f} % of one core"
        )
    print(
        f"   with / without a watcher: median step x{statistics.median(ratios):.3f} "
        f"(range x{min(ratios):.3f} - x{max(ratios):.3f}); training CPU per step x{statistics.median(cpu_ratios):.3f} "
        f"(range x{min(cpu_ratios):.3f} - x{max(cpu_ratios):.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1e6, help="events per second the recording makes")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long it records")
    parser.add_argument("--steps", type=int, default=300, help="training steps per block")
    parser.add_argument("--blocks", type=int, default=12, help="blocks, without and with a watcher (A B B A ...)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the training loop")
    parser.add_argument("--only", choices=("follow", "train"), help="run one part only")
    parser.add_argument(
        "--view",
        choices=("plain", "rich", "both"),
        default="both",
        help="the watcher's output in part 1: plain lines, the rich view (on a pseudo-terminal), both",
    )
    args = parser.parse_args()
    if args.only != "train":
        for view in ("plain", "rich") if args.view == "both" else (args.view,):
            follow_benchmark(args.rate, args.seconds, view)
    if args.only != "follow":
        step_benchmark(args.steps, args.blocks, args.threads)


if __name__ == "__main__":
    main()

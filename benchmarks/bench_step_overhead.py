"""Step-time overhead of profview on real PyTorch training loops (CPU): MLP (~0.3 ms a step) and CNN.

Run: python benchmarks/bench_step_overhead.py [--reps R] [--models mlp,cnn] [--threads T]

Modes, interleaved within every repetition (the order rotates each repetition, so drift in the
machine's speed spreads over all modes):

  baseline      the bare loop (with no-op phase context managers, so only the profiler differs)
  markers       profview step trace only, marked by hand: phase("forward" / "backward" / "optimizer") + step()
  steps         profview step trace only, automatic: Profiler() + attach(model, optimizer, ops=False)
  hook floor    no profiler: *empty* hooks where attach() keeps its own after the first backward
                pass (a pass-through instance forward on the root module, post-accumulate-grad
                hook on the first parameter, optimizer step pre / post hooks): what
                torch's hook dispatch alone costs
  steps+sampled the step trace of every step, ops on 2 steps in 50 (ops_schedule)
  ops           profview with op capture on every step: Profiler() + attach(model, optimizer)
  torch         plain torch.profiler capturing every step: profile(activities=[CPU]) + prof.step()
  torch sampled plain torch.profiler on the same 2-in-50 schedule, each window exported as a
                Chrome trace (as profview exports its windows): the peer of steps+sampled

Each block runs `warmup` untimed steps, then times `steps` iterations one by one, in wall time
(perf_counter_ns) and in the training thread's CPU time (thread_time_ns: what the loop itself
spent, insensitive to other processes competing for the cores; profview's background threads are
not in it). Reported per mode: the median over repetitions of each block's median step time, its
ratio to the baseline and to its torch.profiler peer ("torch", or "torch sampled" for
steps+sampled), and the wall-time mean (which includes window ends: torch's post-processing and
export). Targets: steps <= 1.01 x baseline; ops <= torch; steps+sampled <= torch sampled.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.profiler import schedule as torch_schedule

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from profiler import Profiler, schedule  # noqa: E402

from support.torch_loops import cifar_batch, small_cnn  # noqa: E402

MODES = ("baseline", "markers", "steps", "hook floor", "steps+sampled", "ops", "torch", "torch sampled")
#: the torch.profiler mode each mode is compared with
PEER = {"steps+sampled": "torch sampled"}
#: per model: (build model and batch, warmup steps, timed steps)
MODELS: dict[str, tuple[Callable[[], tuple[nn.Module, tuple]], int, int]] = {
    "mlp": (
        lambda: (
            nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)),
            (torch.randn(32, 128), torch.randint(0, 10, (32,))),
        ),
        50,
        500,
    ),
    "cnn": (lambda: (small_cnn(), cifar_batch()), 5, 40),
}


class _NoPhase:
    """Stands in for profiler.phase(...) in the unprofiled loops (a no-op context manager)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NO_PHASE = _NoPhase()


def timed_steps(
    model: nn.Module,
    optimizer,
    batch,
    warmup: int,
    steps: int,
    after_step: Callable[[], None] = lambda: None,
    phase: Callable[[str], object] = lambda name: _NO_PHASE,
) -> tuple[list[int], list[int]]:
    """Per-iteration wall and thread-CPU time (ns) of the loop, after `warmup` untimed iterations."""
    x, y = batch
    wall, cpu = [], []
    for i in range(warmup + steps):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        optimizer.zero_grad()
        with phase("forward"):
            loss = nn.functional.cross_entropy(model(x), y)
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            optimizer.step()
        after_step()
        if i >= warmup:
            wall.append(time.perf_counter_ns() - t0)
            cpu.append(time.thread_time_ns() - c0)
    return wall, cpu


def run_block(
    mode: str, model: nn.Module, optimizer, batch, warmup: int, steps: int, out: Path
) -> tuple[list[int], list[int]]:
    """One block of `mode`: set the profiler up, time the loop, tear it down (not timed)."""
    if mode == "baseline":
        return timed_steps(model, optimizer, batch, warmup, steps)
    if mode == "hook floor":
        noop = lambda *args, **kwargs: None
        handles = [optimizer.register_step_pre_hook(noop), optimizer.register_step_post_hook(noop)]
        handles += [p.register_post_accumulate_grad_hook(noop) for p in list(model.parameters())[:1]]
        model.forward = model.forward  # an instance attribute, as attach() sets
        try:
            return timed_steps(model, optimizer, batch, warmup, steps)
        finally:
            del model.forward
            for h in handles:
                h.remove()
    if mode == "torch":
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.start()
        try:
            return timed_steps(model, optimizer, batch, warmup, steps, prof.step)
        finally:
            prof.stop()
    shutil.rmtree(out, ignore_errors=True)
    if mode == "torch sampled":
        out.mkdir(parents=True)
        windows = iter(range(1 << 30))
        prof = profile(
            activities=[ProfilerActivity.CPU],
            schedule=torch_schedule(wait=46, warmup=2, active=2),
            on_trace_ready=lambda p: p.export_chrome_trace(str(out / f"window-{next(windows)}.json")),
        )
        prof.start()
        try:
            return timed_steps(model, optimizer, batch, warmup, steps, prof.step)
        finally:
            prof.stop()
    if mode == "markers":
        p = Profiler(out, gpu_counters=False)
        try:
            return timed_steps(model, optimizer, batch, warmup, steps, p.step, p.phase)
        finally:
            p.stop()
    kwargs = {"ops_schedule": schedule(wait=46, warmup=2, active=2)} if mode == "steps+sampled" else {}
    p = Profiler(out, gpu_counters=False, **kwargs)
    try:
        p.attach(model, optimizer, ops=mode != "steps")
        return timed_steps(model, optimizer, batch, warmup, steps)
    finally:
        p.stop()


def bench(name: str, reps: int, tmp: Path) -> dict[str, dict[str, float]]:
    """Per mode, in ms, the median over `reps` interleaved repetitions of: the block's median wall
    time, median thread-CPU time and mean wall time."""
    build, warmup, steps = MODELS[name]
    torch.manual_seed(0)
    model, batch = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    blocks: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for rep in range(reps):
        order = MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]
        for mode in order:
            wall, cpu = run_block(mode, model, optimizer, batch, warmup, steps, tmp / f"{name}-{mode}")
            blocks[mode].append(
                {
                    "wall_ms": statistics.median(wall) / 1e6,
                    "cpu_ms": statistics.median(cpu) / 1e6,
                    "mean_ms": statistics.fmean(wall) / 1e6,
                }
            )
    return {m: {k: statistics.median(b[k] for b in blocks[m]) for k in blocks[m][0]} for m in MODES}


def report(name: str, result: dict[str, dict[str, float]]) -> None:
    base = result["baseline"]
    print(f"\n{name}: medians over repetitions (wall mean includes window ends; x peer: see PEER)")
    print(
        f"  {'mode':14s} {'wall ms':>9s} {'x base':>7s} {'x peer':>8s} {'cpu ms':>9s} {'x base':>7s} "
        f"{'x peer':>8s} {'wall mean':>9s}"
    )
    for mode, r in result.items():
        peer = result[PEER.get(mode, "torch")]
        print(
            f"  {mode:14s} {r['wall_ms']:9.4f} {r['wall_ms'] / base['wall_ms']:7.3f} "
            f"{r['wall_ms'] / peer['wall_ms']:8.3f} {r['cpu_ms']:9.4f} {r['cpu_ms'] / base['cpu_ms']:7.3f} "
            f"{r['cpu_ms'] / peer['cpu_ms']:8.3f} {r['mean_ms']:9.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")  # torch sampled: expected
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.reps} interleaved repetitions")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            report(name, bench(name, args.reps, Path(tmp)))


if __name__ == "__main__":
    main()

"""Where an import's memory peaks: each stage's peak RSS, and the stack that set it.

    python benchmarks/stage_peaks.py TRACE.json OUT_DIR

Reads a Kineto trace, writes its timeline, analyses it and writes the other outputs (the stages of
`profview import-kineto`, one after the other, with its allocator setting), while a sampler thread reads
the process's RSS every 5 ms and keeps the main thread's stack (profview's frames) at each new high.
Prints, per stage, its time, the RSS at its end, its peak and that stack: what to shrink first.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.analysis.results import analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.export.outputs import write_outputs, write_timeline
from profiler.importers.kineto import read_kineto_trace
from profiler.memory import give_back_freed_memory, return_freed_memory

ROOT = str(Path(__file__).resolve().parents[1] / "profiler")
MAIN = threading.get_ident()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


def main_stack() -> list[str]:
    """The main thread's profview frames, as text. The frame objects are dropped on return: a sampler that
    kept one would keep its locals (a stage's tables) alive after the stage."""
    frame = sys._current_frames().get(MAIN)
    frames = traceback.extract_stack(frame) if frame else []
    return [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames if ROOT in f.filename]


class PeakSampler:
    """The highest RSS since the last `report`, with the main thread's profview frames at that moment."""

    def __init__(self) -> None:
        self.peak, self.stack = 0.0, []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            now = rss_mb()
            if now > self.peak:
                self.peak, self.stack = now, main_stack()
            time.sleep(0.005)

    def report(self, stage: str, started: float) -> None:
        seconds = time.perf_counter() - started
        print(f"{stage:<8} {seconds:6.1f} s  RSS at end {rss_mb():6.0f} MB  peak {self.peak:6.0f} MB")
        print("         at", " <- ".join(reversed(self.stack[-6:])) or "?", flush=True)
        self.peak = 0.0


def main() -> None:
    trace, out = sys.argv[1], Path(sys.argv[2])
    return_freed_memory()  # as the `profview` command does
    sampler = PeakSampler()
    t0 = time.perf_counter()
    run = ensure_steps(read_kineto_trace(trace))
    sampler.report("read", t0)
    t0 = time.perf_counter()
    timeline = write_timeline(run, out)
    give_back_freed_memory()
    sampler.report("timeline", t0)
    t0 = time.perf_counter()
    analysis = analyse_run(run)
    sampler.report("analyse", t0)
    t0 = time.perf_counter()
    write_outputs(analysis, out, timeline=lambda: timeline)
    sampler.report("write", t0)


if __name__ == "__main__":
    main()

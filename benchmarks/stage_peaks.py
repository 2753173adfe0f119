"""Where an import's memory peaks: each stage's peak RSS, and the stack that set it.

    python benchmarks/stage_peaks.py TRACE.json OUT_DIR

Imports a trace as `profview import` does (`import_capture`, with its allocator setting) while a sampler
thread reads the process's RSS every 0.5 ms and keeps the main thread's stack (profview's frames) at each
new high. The stages are the ones the import reports to its progress (reading the file, writing the
timeline, analysing, writing the outputs): prints, per stage, its time, the RSS at its end, its peak and
that stack (what to shrink first), then the kernel's own peak (VmHWM: the sampler misses short spikes), the
most disk the spill files took at once and how often the memory-limit watcher dropped spilled pages.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler import spill
from profiler.memory import return_freed_memory
from profiler.postprocess.imported import import_capture
from profiler.progress import Progress

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
        self.spilled_peak = 0.0  # MB of spill files alive at once, over the whole import
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        for i in itertools.count():
            now = rss_mb()
            if now > self.peak:
                self.peak, self.stack = now, main_stack()
            if i % 100 == 0:  # every ~50 ms: the spilled arrays' disk space (a sum over every mapping)
                self.spilled_peak = max(self.spilled_peak, spill.spilled_bytes() / 1e6)
            time.sleep(0.0005)

    def report(self, stage: str, started: float) -> None:
        seconds = time.perf_counter() - started
        print(f"{stage:<34} {seconds:6.1f} s  RSS at end {rss_mb():6.0f} MB  peak {self.peak:6.0f} MB")
        print("         at", " <- ".join(reversed(self.stack[-6:])) or "?", flush=True)
        self.peak = 0.0


class StageReports(Progress):
    """The import's progress reports, taken as stage boundaries: a new stage text closes the previous one."""

    def __init__(self, sampler: PeakSampler) -> None:
        super().__init__(enabled=False)
        self.sampler, self.current, self.started = sampler, None, time.perf_counter()

    def stage(self, what: str, done=None, total=None) -> None:
        if what != self.current:
            self.close()
            self.current, self.started = what, time.perf_counter()

    def close(self) -> None:
        if self.current is not None:
            self.sampler.report(self.current, self.started)


def main() -> None:
    trace, out = sys.argv[1], Path(sys.argv[2])
    return_freed_memory()  # as the `profview` command does
    sampler = PeakSampler()
    with StageReports(sampler).reporting() as stages:
        import_capture(Path(trace), out)
        stages.close()
    print([line.strip() for line in open("/proc/self/status") if line.startswith("VmHWM")][0])
    print(
        f"spill files at most {sampler.spilled_peak:.0f} MB at once; the watcher dropped {spill.watcher_drops()} times"
    )


if __name__ == "__main__":
    main()

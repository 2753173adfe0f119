"""The plain loop `profview compare` is checked on, before and after a prefetch fix: shared by
tests/integration/test_compare.py (the report's compare tab, bad inputs) and
tests/e2e/test_compare_loops.py (the verdict on the real time the fix saves)."""

from __future__ import annotations

import time
from pathlib import Path

from profiler import Profiler


def loop(out: Path, prefetch: bool, steps: int = 30) -> Path:
    """A plain loop whose batches take 40 ms to load; with prefetch they load during the 60 ms step.
    30 steps (~3 s): enough for the mean step's interval to stay clear of 0 on a busy machine, and
    the loading far above what a loaded machine adds to each sleep (tens of ms at load 15 on 2 cores)."""

    def batches():
        for i in range(steps + 4):
            time.sleep(0.040)
            yield i

    p = Profiler(output_path=out, host_counters=False, gpu_counters=False)
    source = p.prefetch(batches(), depth=4) if prefetch else batches()
    for _i, _ in zip(range(steps), source):
        with p.phase("forward"):
            time.sleep(0.030)
        with p.phase("backward"):
            time.sleep(0.030)
        p.step()
    p.analyse(progress=False)
    return out


def before_after_prefetch(root: Path) -> tuple[Path, Path]:
    """The loop recorded and analysed without prefetch (root/before), then with it (root/after)."""
    return loop(root / "before", prefetch=False), loop(root / "after", prefetch=True)

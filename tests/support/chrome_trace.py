"""The multi-thread recording the Chrome trace tests analyse, and the steps a written trace holds:
shared by tests/integration/test_chrome_export.py (a recording within `timeline_max_events`) and
tests/e2e/test_chrome_key_steps.py (one past it, with injected slow steps)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from profiler import ProfiledQueue, Profiler

#: An ordinary step's sleep in its forward phase.
ORDINARY_S = 0.03


def record_threads(out: Path, steps: int, slow: dict[int, float], **settings) -> None:
    """A loop fed by a loader thread through a probed queue, with phases, ops, marks and counters;
    step s sleeps `slow.get(s, ORDINARY_S)` in its forward phase."""
    p = Profiler(out, host_counters=False, gpu_counters=False, **settings)
    q = ProfiledQueue(maxsize=2, name="host_queue")

    def loader() -> None:
        for i in range(steps):
            with p.op("Decode", op_type="IO"):
                pass
            q.put(i)

    t = threading.Thread(target=loader, name="loader")
    t.start()
    for s in range(steps):
        q.get()
        with p.phase("forward"):
            with p.op("MatMul", op_type="MatMul"):
                time.sleep(slow.get(s, ORDINARY_S))
        with p.phase("backward"):
            with p.op("MatMulGrad", op_type="MatMul"):
                pass
        p.mark("bp_end")
        p.counter("loss", 1.0 / (s + 1))
        p.instant("tick")
        p.step()
    t.join()
    p.analyse(progress=False, quiet=True)


def trace_steps(path: Path) -> list[int]:
    """The steps whose step event (the steps lane) a trace holds."""
    events = json.loads(path.read_text())["traceEvents"]
    return sorted(e["args"]["step"] for e in events if e["ph"] == "X" and e.get("cat") == "step")

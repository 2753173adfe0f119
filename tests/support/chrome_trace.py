"""The multi-thread recording the Chrome trace tests analyse, and what a written trace holds (its steps,
its rows, the rows of some steps): shared by tests/integration/test_chrome_export.py (a recording within
`timeline_max_events`), tests/integration/test_writers.py and tests/e2e/test_chrome_key_steps.py (one
past it, with injected slow steps)."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from profiler import ProfiledQueue, Profiler
from profiler.export.event_file import EventFile

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


def trace_rows(path: Path) -> tuple[list[str], list[str]]:
    """The rows (complete, instant and counter events) of a trace and its other lines."""
    lines = path.read_text().splitlines()
    rows = [line for line in lines if re.match(r'\{"ph":"[XiC]"', line)]
    return rows, [line for line in lines if line not in set(rows)]


def rows_in_steps(whole: Path, ef: EventFile, keep: Callable[[np.ndarray], np.ndarray]) -> list[str]:
    """The rows of the whole trace `whole` whose step `keep` selects (a mask of a step array), each row's
    step read from the event file it was rendered from (the same rows in the same order)."""
    rows, _ = trace_rows(whole)
    step = ef.column("step", 0, len(rows))
    assert len(rows) == ef.rows - sum(ef.meta["phase_rows"].get(ph, 0) for ph in "sf")  # every row but the flows
    return [row for row, k in zip(rows, keep(step).tolist()) if k]

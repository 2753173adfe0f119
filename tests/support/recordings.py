"""Small real recordings that tests read the outputs of (structure, not timing)."""

from __future__ import annotations

import time
from pathlib import Path

from profiler import Profiler


def record_small_run(out: Path) -> None:
    """6 steps of nested user ops in phases, instants and a counter, with host and GPU counters; analysed."""
    p = Profiler(output_path=out, host_counters=True, gpu_counters=True)
    for i in range(6):
        with p.phase("forward"):
            with p.op("Conv2D", op_type="Conv"):
                with p.op("Pad", op_type="Pad"):
                    time.sleep(0.001)
                time.sleep(0.001)
        with p.phase("backward"):
            time.sleep(0.002)
        p.instant("logged")
        p.counter("loss", 1.0 / (i + 1))
        p.step()
    p.analyse(progress=False)

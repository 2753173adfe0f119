"""Real recording processes for the live-view tests (profview watch, --live, the follower)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from support.cli import REPO, python_env

#: A plain-Python loop recorded by profview: a data phase (sleep: the injected input bottleneck),
#: a forward phase with user ops (their op type from argv, to test escaping), a backward phase,
#: a probed queue; `steps` steps, then analyse() (which writes the outputs and prints a line).
RECORDER = r"""
import sys, time
from profiler import Profiler, ProfiledQueue
out, steps, data_s, op_type = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
analyse = len(sys.argv) <= 5 or sys.argv[5] != "stop"
p = Profiler(out, host_counters=True, gpu_counters=False, counter_interval_s=0.05)
q = ProfiledQueue(maxsize=4, name="host_queue")
for s in range(steps):
    with p.phase("data"):
        time.sleep(data_s)
        q.put(s)
        q.get()
    with p.phase("forward"):
        for k in range(4):
            with p.op(f"MatMul_{k}", op_type=op_type):
                pass
    with p.phase("backward"):
        for k in range(4):
            with p.op(f"MatMulGrad_{k}", op_type=op_type):
                pass
    p.step()
if analyse:
    p.analyse(progress=False)
else:
    p.stop()
"""


def start_recorder(
    out: Path,
    steps: int,
    data_s: float = 0.004,
    op_type: str = "MatMul",
    analyse: bool = True,
    rank: Optional[int] = None,
    world_size: int = 1,
) -> subprocess.Popen:
    """A recording process writing into `out` (its stdout / stderr piped); `rank` of `world_size`
    through the environment, as torchrun passes them."""
    env = python_env()
    if rank is not None:
        env.update(RANK=str(rank), WORLD_SIZE=str(world_size))
    return subprocess.Popen(
        [sys.executable, "-c", RECORDER, str(out), str(steps), str(data_s), op_type, "analyse" if analyse else "stop"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def record(out: Path, steps: int, data_s: float = 0.001, op_type: str = "MatMul") -> None:
    """A finished recording (analysed)."""
    proc = start_recorder(out, steps, data_s, op_type)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


def wait_for(condition: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


def steps_in(out: Path, rank: int = 0) -> Optional[int]:
    """Rows of the analysed step trace (every recorded step)."""
    path = out / f"step_trace_{rank}.csv"
    if not path.is_file():
        return None
    return sum(1 for _ in path.open()) - 1

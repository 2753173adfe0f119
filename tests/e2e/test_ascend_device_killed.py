"""A run killed inside an iteration on the reference Ascend-style device: the device log written up to its
last flush is still read (a real process, real flushes on a timer and a SIGKILL: the timed tier)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profiler.postprocess.recording import load_rank

pytestmark = pytest.mark.timing

REPO = Path(__file__).resolve().parents[2]

KILLED_RUN = """
import os, signal, sys, time
import numpy as np
from profiler import Profiler
from profview_reference_device.device import AscendReferenceDevice
profiler = Profiler(sys.argv[1], host_counters=False, gpu_counters=False, flush_interval_s=0.05)
dev = AscendReferenceDevice(profiler, streams=2)
for _ in range(5):
    dev.fp_start()
    h = dev.launch("Default/MatMul-op1", "MatMul", np.matmul, np.ones((64, 64)), np.ones((64, 64)))
    dev.bp_end()
    dev.all_reduce("Default/AllReduce-op2", np.copy, h, stream=1)
    dev.iter_end().result()
    profiler.step()
time.sleep(0.5)                          # a few flushes of the raw store and of the device log
dev.fp_start()
dev.launch("Default/MatMul-op1", "MatMul", time.sleep, 5)     # killed inside this iteration
time.sleep(0.2)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_run_keeps_the_device_log_up_to_its_last_flush(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", KILLED_RUN, str(out)], cwd=REPO, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    profiler_run = load_rank(out, 0)
    assert profiler_run.info["steps_from"] == "npu:0"
    assert profiler_run.steps["step"].tolist() == [0, 1, 2, 3, 4]  # the unfinished iteration is left out
    ops = profiler_run.ops[profiler_run.ops["device"] == "npu:0"]
    assert ops["name"].tolist() == ["Default/MatMul-op1"] * 5
    assert any("without ITER_END" in w for w in profiler_run.info["warnings"])

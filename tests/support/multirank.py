"""Launching a multi-rank job like torchrun: real worker processes (multirank_worker.py) on CPU (gloo),
each killed at a deadline so that a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

WORKER = Path(__file__).with_name("multirank_worker.py")
REPO = WORKER.parents[2]
DEADLINE_S = 240  # per job: start-up of N torch processes on 2 loaded cores is slow
DELAY_MS = 30.0


@dataclass
class Job:
    out: Path
    world: int
    results: dict[int, dict]  # rank -> the worker's JSON line (absent for a rank that died)
    codes: dict[int, int]  # rank -> exit code
    stderr: dict[int, str]  # rank -> the end of its stderr

    def csv(self, name: str) -> pd.DataFrame:
        return pd.read_csv(self.out / name)

    def json(self, name: str) -> dict:
        return json.loads((self.out / name).read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, world: int, *args: str) -> Job:
    """Run `world` worker processes as ranks of one job; kill them all at the deadline."""
    port = free_port()
    procs = {}
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO),
        }
        procs[rank] = subprocess.Popen(
            [sys.executable, str(WORKER), str(out), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results, codes, errors = {}, {}, {}
    for rank, p in procs.items():
        try:
            stdout, stderr = p.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            for q in procs.values():
                q.kill()
            pytest.fail(f"rank {rank} of the {world}-rank job did not finish within {DEADLINE_S} s")
        codes[rank] = p.returncode
        errors[rank] = stderr[-3000:]
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if lines:
            results[rank] = json.loads(lines[-1])
    return Job(out, world, results, codes, errors)


def assert_ok(job: Job) -> None:
    bad = {r: c for r, c in job.codes.items() if c != 0}
    assert not bad, f"ranks exited with {bad}: {job.stderr}"

"""A capture format that exists only for the tests: what a third-party importer module looks like.

A toy capture is a text file:

    toyprof 1 rank 2
    step 0 0 1000            step number, start and end (µs); a file without step lines has no step markers
    op 0 matmul 0 300        device stream, name, start and duration (µs)

test_importer_registry.py registers it (`register(IMPORTER)`) or installs it as a plug-in (an entry
point of the `profview.importers` group naming `toy_format:IMPORTER`); nothing else in profview
knows it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError
from profiler.importers.base import CERTAIN, NOT_IT, Importer
from profiler.kernels.intervals import assign_steps
from profiler.model import OP_COLUMNS, STEP_COLUMNS, Run, conform

MAGIC = b"toyprof 1"


def toy_confidence(path: Path) -> float:
    """CERTAIN when the file starts with the toy header, whatever its name (a FIFO is not opened)."""
    if not path.is_file():
        return NOT_IT
    try:
        with open(path, "rb") as fh:
            return CERTAIN if fh.read(len(MAGIC)) == MAGIC else NOT_IT
    except OSError:
        return NOT_IT


def read_toy(path: Path) -> list[Run]:
    """The one run of a toy capture."""
    lines = [line.split() for line in Path(path).read_text().splitlines()]
    if not lines or lines[0][:2] != ["toyprof", "1"]:
        raise ProfviewError(f"{path} is not a toy capture: it does not start with 'toyprof 1'")
    rank = int(lines[0][3]) if lines[0][2:3] == ["rank"] else 0
    steps = pd.DataFrame(
        [(int(s), int(a) * 1000, int(b) * 1000) for kind, s, a, b in (line for line in lines if line[0] == "step")],
        columns=["step", "start_ns", "end_ns"],
        dtype="int64",
    )
    ops = pd.DataFrame(
        [
            (stream, name, int(start) * 1000, int(dur) * 1000)
            for kind, stream, name, start, dur in (line for line in lines if line[0] == "op")
        ],
        columns=["stream", "name", "start_ns", "dur_ns"],
    )
    if ops.empty:
        raise ProfviewError(f"toy capture {path} has no op")
    steps = conform(steps, STEP_COLUMNS).assign(overhead_ns=0)
    ops = ops.assign(
        device="toy:0",
        op_type=ops["name"],
        category="compute",
        self_ns=ops["dur_ns"],
        step=assign_steps(ops["start_ns"].to_numpy(np.int64), steps),
        source="toy",
    )
    return [Run(info={"data_origin": "toy", "rank": rank, "warnings": []}, ops=conform(ops, OP_COLUMNS), steps=steps)]


#: The declaration a plug-in package exposes (entry point group `profview.importers`).
IMPORTER = Importer(
    data_origin="toy",
    title="toy profiler capture",
    detect=toy_confidence,
    read=read_toy,
    framework="torch",
    exact_steps="write step lines into the toy capture for exact boundaries",
)


def toy_capture(path: Path, steps: int = 3, with_steps: bool = True, rank: int = 2) -> Path:
    """A toy capture of `steps` steps of 1 ms: matmul 300 µs then relu 100 µs on stream 0 (each
    step's first 400 µs), then idle."""
    lines = [f"toyprof 1 rank {rank}"]
    for k in range(steps):
        if with_steps:
            lines.append(f"step {k} {k * 1000} {(k + 1) * 1000}")
        lines += [f"op 0 matmul {k * 1000} 300", f"op 0 relu {k * 1000 + 300} 100"]
    path.write_text("\n".join(lines) + "\n")
    return path

"""enclosing_parents over a big multi-lane op table: its time and the memory it maps (issue #32).

    python benchmarks/bench_nesting_memory.py [--intervals 3e7] [--commit 4bd9cde] [--limit-mb 0] [--lanes 0.5,0.5]

A synthetic op table as the importers hand it to the nesting (profiler/kernels/nesting.py): `intervals` intervals in
start order on interleaved threads (by default three busy ones and a minor one with 3 % of the rows, each lane's rows
spread over the whole table), durations from 10 ns to 90 us (nesting a few levels deep; 1 ms idle after every 10,000
intervals, as between steps: where the nesting can be cut in pieces), lane codes int32 and times int64 in
spill files. Built inside `spill.spilling` (a temporary directory beside this repository), its pages handed back; then
a sampler process reads the process's VmRSS and RssFile every millisecond while enclosing_parents runs, and VmHWM is
reset just before it (/proc/self/clear_refs). Printed: the seconds and, above what the process held before, the
highest VmRSS, RssFile (the spilled pages mapped) and VmHWM. With --commit, enclosing_parents is that commit's
(its profiler/kernels/nesting.py, run on this tree's spill module); with --limit-mb, the watcher runs at that limit.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_memory_events import status_kb  # beside this script

from profiler import spill
from profiler.memory import return_freed_memory

ROOT = Path(__file__).resolve().parents[1]
SAMPLER = """
import sys, select
path, peak = f"/proc/{sys.argv[1]}/status", {"VmRSS": 0, "RssFile": 0}
while True:
    with open(path) as f:
        for line in f:
            key = line.split(":")[0]
            if key in peak:
                peak[key] = max(peak[key], int(line.split()[1]))
    if sys.stdin in select.select([sys.stdin], [], [], 0.001)[0]:
        print(peak["VmRSS"], peak["RssFile"], flush=True)
        break
"""


def synthetic_intervals(n: int, shares: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lane, start, end) of `n` intervals in start order on interleaved lanes (each with its share of the rows), made
    a chunk at a time, spilled."""

    def lanes(at: slice) -> np.ndarray:
        return np.random.default_rng(at.start).choice(len(shares), at.stop - at.start, p=shares)

    def ends(at: slice) -> np.ndarray:
        rng = np.random.default_rng(at.start + 1)
        dur = rng.integers(1, 10, at.stop - at.start) * 10 ** rng.integers(1, 5, at.stop - at.start)
        return starts(at) + dur

    def starts(at: slice) -> np.ndarray:  # 10 ns apart, 1 ms idle after every 10,000 (where the nesting is cut)
        return np.arange(at.start, at.stop) * 10 + np.arange(at.start, at.stop) // 10_000 * 1_000_000

    lane = spill.chunked(n, np.int32, lanes)
    start = spill.chunked(n, np.int64, starts)
    return lane, start, spill.chunked(n, np.int64, ends)


def enclosing_parents_of(commit: str) -> Callable:
    """enclosing_parents of `commit`'s kernels/nesting.py (this tree's if empty), loaded beside this tree's modules."""
    path = "profiler/kernels/nesting.py"
    git = ["git", "show", f"{commit}:{path}"]
    source = subprocess.run(git, cwd=ROOT, check=True, capture_output=True, text=True).stdout if commit else None
    module = sys.modules["nesting_at_commit"] = ModuleType("nesting_at_commit")  # registered: its dataclasses
    exec(compile(source or (ROOT / path).read_text(), f"{commit or 'tree'}:{path}", "exec"), module.__dict__)
    return module.enclosing_parents


def measure(n: int, commit: str, limit_mb: int, shares: list[float]) -> None:
    """One run, in this process: build the intervals, then run enclosing_parents with the sampler beside it."""
    return_freed_memory()
    enclosing_parents = enclosing_parents_of(commit)
    limit = limit_mb << 20 if limit_mb else None
    with tempfile.TemporaryDirectory(dir=ROOT) as directory, spill.spilling(directory, resident_limit=limit):
        lane, start, end = synthetic_intervals(n, shares)
        gc.collect()
        spill.drop_resident()
        sampler = subprocess.Popen(
            [sys.executable, "-c", SAMPLER, str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.2)
        before = status_kb("VmRSS"), status_kb("RssFile")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        started = time.perf_counter()
        parent = enclosing_parents(lane, start, end)
        seconds = time.perf_counter() - started
        hwm = status_kb("VmHWM")
        peak_rss, peak_file = (int(x) for x in sampler.communicate("stop\n")[0].split())
        nested = sum(int(np.count_nonzero(parent[at] >= 0)) for at in spill.chunks(len(parent)))
        print(
            f"{commit or 'this tree':>10} {n:>11,} intervals ({nested:,} nested), lanes {shares}, limit"
            f" {limit_mb or '-'} MB:"
            f" {seconds:6.1f} s, VmRSS +{(peak_rss - before[0]) / 1024:6.1f} MB,"
            f" RssFile +{(peak_file - before[1]) / 1024:6.1f} MB, VmHWM +{(hwm - before[0]) / 1024:6.1f} MB",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals", default="3e7", help="intervals per table, comma-separated")
    ap.add_argument("--commit", default="", help="measure enclosing_parents as of this commit instead")
    ap.add_argument("--limit-mb", type=int, default=0, help="run the watcher at this resident limit (0: none)")
    ap.add_argument("--lanes", default="0.33,0.33,0.31,0.03", help="the lanes' shares of the rows, comma-separated")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a size in this process (the runs' own)
    args = ap.parse_args()
    sizes = [args.one] if args.one is not None else [int(float(x)) for x in args.intervals.split(",")]
    shares = [float(x) for x in args.lanes.split(",")]
    for n in sizes:
        if args.one is not None:
            measure(n, args.commit, args.limit_mb, shares)
        else:  # each size in a process of its own
            own = ["--one", str(n), "--commit", args.commit, "--limit-mb", str(args.limit_mb), "--lanes", args.lanes]
            subprocess.run([sys.executable, __file__, *own], check=True)


if __name__ == "__main__":
    main()

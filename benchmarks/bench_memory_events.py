"""The memory events table (profiler/analysis/memory.memory_events): its time and the anonymous memory it adds.

    python benchmarks/bench_memory_events.py [--blocks 1e6,4e6] [--commit 580b957]

A synthetic allocations table as the Kineto importer leaves it (time order, spilled number columns, a categorical
device with spilled codes) of `blocks` blocks on two devices: addresses reused from a pool of 8,192 per device (a
block is freed before its address is taken again), twin allocation times, 1 % of the blocks allocated before the
trace (their free alone) and 1 % never freed; owners among 200 op names. Each size runs in its own process, inside
`spill.spilling` (a temporary directory beside this file's repository); a sampler process reads the importing
process's RssAnon every millisecond while memory_events runs, and the process's VmHWM is reset just before it
(/proc/self/clear_refs). Printed: the rows, the seconds, the anonymous memory it added at its highest (what the
function itself holds: the inputs and its output are spilled) and the VmHWM it added (with the spilled pages it
touched). With --commit, memory_events is that commit's (its profiler/analysis/memory.py, run on this tree's other
modules), for a before / after comparison.
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
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler import spill
from profiler.memory import return_freed_memory

ROOT = Path(__file__).resolve().parents[1]
POOL = 8192  # addresses per device
SAMPLER = """
import sys, time
path, peak = f"/proc/{sys.argv[1]}/status", 0
while True:
    with open(path) as f:
        peak = max(peak, next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")))
    if sys.stdin in __import__("select").select([sys.stdin], [], [], 0.001)[0]:
        print(peak, flush=True)
        break
"""


def synthetic_allocations(blocks: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """(ops, allocations, owner): `blocks` blocks' allocations and frees in time order, their columns spilled."""
    rng = np.random.default_rng(seed)
    block = np.arange(blocks)
    alloc_ns = (block // 2) * 10  # twins
    free_ns = alloc_ns + rng.integers(1, POOL * 5 * 2 - 10, blocks)  # before the address is taken again
    device = (block // POOL) % 2
    addr = 0x7F0000000000 + (block % POOL) * 4096
    size = rng.choice([512, 4096, 1 << 20], blocks)
    before, never = rng.random(blocks) < 0.01, rng.random(blocks) < 0.01
    kept_alloc, kept_free = ~before, ~never
    when = np.concatenate([alloc_ns[kept_alloc], free_ns[kept_free]])
    order = np.argsort(when, kind="stable")
    columns = {
        "device": np.concatenate([device[kept_alloc], device[kept_free]])[order].astype(np.int8),
        "tid": np.zeros(len(order), dtype=np.int64),
        "time_ns": when[order],
        "bytes": np.concatenate([size[kept_alloc], -size[kept_free]])[order],
        "addr": np.concatenate([addr[kept_alloc], addr[kept_free]])[order],
        "allocated_bytes": np.full(len(order), np.nan),
        "reserved_bytes": np.full(len(order), np.nan),
    }
    spilled = {name: spill.spilled(values) for name, values in columns.items()}
    spilled["device"] = pd.Categorical.from_codes(spilled["device"], categories=["cuda:0", "host"])
    allocations = pd.DataFrame(spilled, copy=False)
    names = pd.Categorical.from_codes(rng.integers(0, 200, 10_000), [f"aten::op{i}" for i in range(200)])
    owner = spill.spilled(rng.integers(-1, 10_000, len(order)))
    return pd.DataFrame({"name": names}), allocations, owner


def memory_events_of(commit: str) -> Callable:
    """memory_events of this tree, or of `commit` (its analysis/memory.py loaded beside this tree's modules)."""
    if not commit:
        from profiler.analysis.memory import memory_events

        return memory_events
    source = subprocess.run(
        ["git", "show", f"{commit}:profiler/analysis/memory.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    module = ModuleType("memory_at_commit")
    exec(compile(source, f"{commit}:profiler/analysis/memory.py", "exec"), module.__dict__)
    return module.memory_events


def measure(blocks: int, commit: str) -> None:
    """One size, in this process: build the table, then run memory_events with the sampler beside it."""
    return_freed_memory()
    memory_events = memory_events_of(commit)
    with tempfile.TemporaryDirectory(dir=ROOT) as directory, spill.spilling(directory):
        ops, allocations, owner = synthetic_allocations(blocks)
        gc.collect()
        spill.drop_resident()
        sampler = subprocess.Popen(
            [sys.executable, "-c", SAMPLER, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.2)
        before_anon, before_rss = status_kb("RssAnon"), status_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        started = time.perf_counter()
        table = memory_events(ops, allocations, owner)
        seconds = time.perf_counter() - started
        hwm = status_kb("VmHWM")
        peak_anon = int(sampler.communicate("stop\n")[0])
        print(
            f"{commit or 'this tree':>10} {len(allocations):>11,} allocations {len(table):>10,} rows: {seconds:6.2f} s,"
            f" "
            f"anonymous +{(peak_anon - before_anon) / 1024:6.1f} MB, VmHWM +{(hwm - before_rss) / 1024:6.1f} MB",
            flush=True,
        )


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(f"{field}:"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="1e6,4e6", help="blocks per table, comma-separated (two events each)")
    ap.add_argument("--commit", default="", help="measure memory_events as of this commit instead")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a size in this process (the runs' own)
    args = ap.parse_args()
    if args.one is not None:
        measure(args.one, args.commit)
        return
    for blocks in (int(float(b)) for b in args.blocks.split(",")):
        subprocess.run([sys.executable, __file__, "--one", str(blocks), "--commit", args.commit], check=True)


if __name__ == "__main__":
    main()

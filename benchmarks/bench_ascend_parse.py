"""HWTS task-log parse throughput (records/s) on the real JOB3 log and on a synthetic 1e7-record log.

Run: python benchmarks/bench_ascend_parse.py [--records N] [--repeat R] [--data tests/data]

Three figures per log, best of R runs: decode (bytes in memory -> record columns), decode + pair
(also task-key mapping and Start/End pairing into executions), and read (the same from the
slice files on disk, page cache warm). The synthetic log is written into a JOB directory by the
reference device's writer (`profview_reference_device.log_writer.JobWriter`, vectorised: one numpy
structured array per 8 MiB chunk of executions, one slice per chunk), like JOB3:
Start/End pairs of framework tasks, 1 in 10 a device-only task no task_desc line describes.
The writer's own throughput is printed too: encoding alone, and with the appends to the slice files.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from profiler.importers.ascend import framework_desc, hwts
from profiler.importers.ascend.slices import find_slices, join_slices
from profview_reference_device.log_writer import JobWriter, task_desc_line, task_pair_bytes

REPO = Path(__file__).resolve().parents[1]
CHUNK_PAIRS = 1 << 16  # executions per writer call: 8 MiB of records, one slice each


def write_synthetic_job(job_dir: Path, n_records: int, n_ops: int = 200, seed: int = 0) -> tuple[float, float]:
    """Write a synthetic JOB directory of `n_records` HWTS records with the device's writer; returns
    the seconds spent encoding the records and in the whole writer (encoding + appending to slices)."""
    rng = np.random.default_rng(seed)
    writer = JobWriter(job_dir, 0)
    writer.lines("task_desc", [task_desc_line(f"Default/net/Op{i}-op{i}", 1, 30000 + i, i % 7) for i in range(n_ops)])
    clock, encoding, writing = 38_000_000_000, 0.0, 0.0
    for first in range(0, n_records // 2, CHUNK_PAIRS):
        n = min(CHUNK_PAIRS, n_records // 2 - first)
        framework = rng.random(n) >= 0.1
        task = np.where(framework, 30000 + (first + np.arange(n)) % n_ops, 60000 + rng.integers(0, 100, n))
        stream = 519 + task % 23
        start = clock + np.cumsum(rng.integers(50, 5000, n))
        end = start + rng.integers(10, 4000, n)
        clock = int(end[-1])
        t0 = time.perf_counter()
        task_pair_bytes(task, stream, start, end)
        t1 = time.perf_counter()
        writer.task_pairs(task, stream, start, end)
        encoding, writing = encoding + t1 - t0, writing + time.perf_counter() - t1
    return encoding, writing


def best_of(repeat: int, fn) -> float:
    """The fastest of `repeat` timed calls of fn(), in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(label: str, job_dir: Path, repeat: int) -> None:
    slices = find_slices(job_dir)
    hwts_paths = [s.path for s in slices if s.kind == "hwts"]
    task_desc = [s.path for s in slices if s.kind == "task_desc"]
    joined = join_slices(hwts_paths)
    tasks, _ = framework_desc.parse_task_desc(join_slices(task_desc))
    key_map = framework_desc.task_key_map(tasks, framework_desc.op_names(tasks))
    n = len(joined.data) // hwts.HWTS_RECORD_BYTES

    def decode_and_pair():
        return hwts.executions(hwts.decode_hwts(joined)[0], *key_map)

    def read_decode_and_pair():
        return hwts.executions(hwts.decode_hwts(join_slices(hwts_paths))[0], *key_map)

    n_exec = len(decode_and_pair())
    print(
        f"{label}: {n:,} records ({len(joined.data) / 1e6:.1f} MB in {len(hwts_paths)} slice(s)), {n_exec:,} executions"
    )
    for what, fn in (
        ("decode", lambda: hwts.decode_hwts(joined)),
        ("decode + pair", decode_and_pair),
        ("read + decode + pair", read_decode_and_pair),
    ):
        seconds = best_of(repeat, fn)
        print(f"  {what:22s} {seconds * 1e3:9.1f} ms   {n / seconds / 1e6:7.1f} M records/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=REPO / "tests" / "data")
    args = parser.parse_args()

    job3 = args.data / "ascend" / "JOB3"
    if job3.is_dir():
        measure("JOB3", job3, args.repeat)
    else:
        print(f"JOB3 not found under {args.data}; skipped")

    with tempfile.TemporaryDirectory() as tmp:
        encoding, writing = write_synthetic_job(Path(tmp), args.records)
        for what, seconds in (("encode", encoding), ("encode + append to slices", writing)):
            print(
                f"reference device writer, {what}: {args.records:,} records in {seconds * 1e3:.1f} ms "
                f"({args.records / seconds / 1e6:.1f} M records/s)"
            )
        measure("synthetic (reference device writer)", Path(tmp), args.repeat)


if __name__ == "__main__":
    main()

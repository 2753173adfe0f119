"""HWTS task-log parse throughput (records/s) on the real JOB3 log and on a synthetic 1e7-record log.

Run: python benchmarks/bench_ascend_parse.py [--records N] [--repeat R] [--data /path/to/shared/data]

Three figures per log, best of R runs: decode (bytes in memory -> record columns), decode + pair
(also task-key mapping and Start/End pairing into executions), and read (the same from the
slice files on disk, page cache warm). The synthetic log is built with numpy in the HWTS layout:
Start/End pairs of framework tasks interleaved with device-only tasks, like JOB3.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from profiler.sources.ascend import framework_desc, hwts
from profiler.sources.ascend.slices import join_slices

REPO = Path(__file__).resolve().parents[1]


def synthetic_hwts(n_records: int, n_ops: int = 200, seed: int = 0) -> tuple[np.ndarray, str]:
    """HWTS bytes of `n_records` records (Start/End pairs, 1 in 10 pairs a device-only task)
    and the matching task_desc text."""
    rng = np.random.default_rng(seed)
    n_pairs = n_records // 2
    framework_task = rng.random(n_pairs) >= 0.1
    task = np.where(framework_task, 30000 + np.arange(n_pairs) % n_ops, 60000 + rng.integers(0, 100, n_pairs))
    stream = 519 + task % 23
    start = 38_000_000_000 + np.cumsum(rng.integers(50, 5000, n_pairs))
    dur = rng.integers(10, 4000, n_pairs)
    records = np.zeros(2 * n_pairs, dtype=hwts.HWTS_DTYPE)
    records["head"] = np.tile([hwts.TASK_START, hwts.TASK_END], n_pairs) | (np.arange(2 * n_pairs) % 16 << 4)
    records["task_id"] = np.repeat(task, 2)
    records["stream_id"] = np.repeat(stream, 2)
    records["syscnt"] = np.column_stack([start, start + dur]).ravel()
    task_desc = "".join(f"Default/net/Op{i}-op{i} 1 {30000 + i} {i % 7}\n" for i in range(n_ops))
    return records.view(np.uint8).reshape(-1), task_desc


def best_of(repeat: int, fn) -> float:
    """The fastest of `repeat` timed calls of fn(), in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(label: str, hwts_path: Path, task_desc_path: Path, repeat: int) -> None:
    joined = join_slices([hwts_path])
    tasks, _ = framework_desc.parse_task_desc(join_slices([task_desc_path]))
    names = framework_desc.op_names(tasks)
    key_map = framework_desc.task_key_map(tasks, names)
    n = len(joined.data) // hwts.HWTS_RECORD_BYTES

    def decode_and_pair():
        return hwts.executions(hwts.decode_hwts(joined)[0], *key_map)

    def read_decode_and_pair():
        return hwts.executions(hwts.decode_hwts(join_slices([hwts_path]))[0], *key_map)

    n_exec = len(decode_and_pair())
    print(f"{label}: {n:,} records ({len(joined.data) / 1e6:.1f} MB), {n_exec:,} executions")
    for what, fn in (("decode", lambda: hwts.decode_hwts(joined)), ("decode + pair", decode_and_pair),
                     ("read + decode + pair", read_decode_and_pair)):
        seconds = best_of(repeat, fn)
        print(f"  {what:22s} {seconds * 1e3:9.1f} ms   {n / seconds / 1e6:7.1f} M records/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()

    job3 = args.data / "ascend" / "JOB3"
    if job3.is_dir():
        measure("JOB3", job3 / "hwts.log.data.45.dev.profiler_default_tag.1.slice_0",
                job3 / "Framework.host.vm.task_desc_info.1.slice_0", args.repeat)
    else:
        print(f"JOB3 not found under {args.data}; skipped")

    with tempfile.TemporaryDirectory() as tmp:
        data, task_desc = synthetic_hwts(args.records)
        hwts_path = Path(tmp) / "hwts.log.data.45.dev.profiler_default_tag.0.slice_0"
        data.tofile(hwts_path)
        del data
        task_desc_path = Path(tmp) / "Framework.host.vm.task_desc_info.0.slice_0"
        task_desc_path.write_text(task_desc)
        measure("synthetic", hwts_path, task_desc_path, args.repeat)


if __name__ == "__main__":
    main()

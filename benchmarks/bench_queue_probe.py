"""Cost of a probed put / get: ProfiledQueue vs a plain queue.Queue, single thread, ns per operation.

    python benchmarks/bench_queue_probe.py [--ops 200000] [--repeat 5]

Three rows: queue.Queue; ProfiledQueue with no Profiler (the probe's check only);
ProfiledQueue while a Profiler records (a clock read + one hot-path sample per put / get).
Best of `repeat` runs (the least disturbed by other processes). Prints ns per put and per get,
the overhead over queue.Queue, and the ratio of put + get times.
"""

from __future__ import annotations

import argparse
import queue
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler import Profiler
from profiler.data.queues import ProfiledQueue
from profiler.record.recorder import HOT_PATH_IMPL

BATCH = 64  # puts then gets per round: the queue never blocks, so only the per-call cost is timed


def time_queue(q: queue.Queue, ops: int) -> tuple[float, float]:
    """ns per put and per get, `ops` of each, in rounds of BATCH puts then BATCH gets."""
    put, get = q.put, q.get
    rounds = ops // BATCH
    t_put = t_get = 0
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for i in range(BATCH):
            put(i)
        t1 = time.perf_counter_ns()
        for _ in range(BATCH):
            get()
        t2 = time.perf_counter_ns()
        t_put += t1 - t0
        t_get += t2 - t1
    n = rounds * BATCH
    return t_put / n, t_get / n


def measure(ops: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Best (put ns, get ns) per configuration; the configurations alternate, so load hits them alike."""
    runs: dict[str, list[tuple[float, float]]] = {PLAIN: [], IDLE: [], RECORDING: []}
    with tempfile.TemporaryDirectory() as out:
        for k in range(repeat):
            runs[PLAIN].append(time_queue(queue.Queue(BATCH), ops))
            runs[IDLE].append(time_queue(ProfiledQueue(BATCH, "bench"), ops))
            # the flusher stays out of the timed loop: only the probe's own cost is measured
            prof = Profiler(
                output_path=Path(out) / str(k),
                host_counters=False,
                gpu_counters=False,
                memory_budget_mb=256,
                flush_interval_s=60,
            )
            runs[RECORDING].append(time_queue(ProfiledQueue(BATCH, "bench"), ops))
            prof.stop()
    return {name: (min(r[0] for r in rs), min(r[1] for r in rs)) for name, rs in runs.items()}


PLAIN, IDLE, RECORDING = "queue.Queue", "ProfiledQueue, no Profiler", "ProfiledQueue, recording"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    best = measure(args.ops, args.repeat)
    plain = best[PLAIN]
    print(f"hot path: {HOT_PATH_IMPL}; {args.ops:,} puts and gets per run, best of {args.repeat}")
    print(f"{'':28s} {'put ns':>8s} {'get ns':>8s} {'put +ns':>8s} {'get +ns':>8s} {'ratio':>6s}")
    for label, (p, g) in best.items():
        ratio = (p + g) / (plain[0] + plain[1])
        print(f"{label:28s} {p:8.0f} {g:8.0f} {p - plain[0]:8.0f} {g - plain[1]:8.0f} {ratio:6.2f}")


if __name__ == "__main__":
    main()

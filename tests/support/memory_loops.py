"""A real loop with a known memory pattern, recorded by profview in a process of its own (so its RSS
is only the loop's), then analysed; tests/integration/test_memory_trend.py runs it.

    python tests/support/memory_loops.py OUT PATTERN STEPS STEP_S

Every step sleeps STEP_S and allocates a 4 MB scratch block it lets go (the jitter of a real step);
what it keeps depends on PATTERN:

- leak: a 2 MB block every step (LEAK_MB), kept to the end;
- warmup: 40 MB in each of steps 1-5 (a cache filled at start-up), then nothing;
- stairs: 24 MB at three steps spread over the run (an allocator growing its arenas), nothing else;
- flat: nothing.
"""

from __future__ import annotations

import sys
import time

from profiler import Profiler

LEAK_MB = 2
MB = 1 << 20


def touched(mb: float) -> bytearray:
    """`mb` MB whose pages are all written (resident)."""
    return bytearray(b"\x01") * int(mb * MB)


def kept_at(pattern: str, step: int, steps: int) -> float:
    """MB the loop keeps at `step`."""
    if pattern == "leak":
        return LEAK_MB
    if pattern == "warmup":
        return 40 if 1 <= step <= 5 else 0
    if pattern == "stairs":
        return 24 if step in (steps // 4, steps // 2, 3 * steps // 4) else 0
    return 0


def main(out: str, pattern: str, steps: int, step_s: float) -> None:
    kept = []
    p = Profiler(out, host_counters=True, gpu_counters=False, counter_interval_s=0.05)
    for step in range(steps):
        scratch = touched(4)
        mb = kept_at(pattern, step, steps)
        if mb:
            kept.append(touched(mb))
        time.sleep(step_s)
        del scratch
        p.step()
    p.analyse(progress=False)
    print(f"kept {sum(len(b) for b in kept) / MB:.0f} MB")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))

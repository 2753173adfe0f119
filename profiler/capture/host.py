"""Host counters from psutil: process and system CPU %, resident memory, thread count."""

from __future__ import annotations

import os
import time

from profiler.capture.base import Sampler

HOST_METRICS = ("process_cpu_pct", "system_cpu_pct", "rss_bytes", "threads")


class HostCounters(Sampler):
    """Samples this process's CPU %, resident memory and threads and the machine's CPU % every `interval_s`."""

    name = "host_counters"
    source = "host"

    def open(self) -> list[tuple[str, str]]:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process(os.getpid())
        self._proc.cpu_percent(None)  # the first call only sets the baseline
        psutil.cpu_percent(None)
        self._cpu_window_start = time.perf_counter()
        self.details["memory_limit_bytes"] = memory_limit_bytes(psutil.virtual_memory().total)
        return [("host", m) for m in HOST_METRICS]

    def read(self) -> list[tuple[str, str, float]]:
        p = self._proc
        with p.oneshot():
            out = [("host", "rss_bytes", p.memory_info().rss), ("host", "threads", p.num_threads())]
            # CPU % is CPU time over the window since the last reading, and the kernel counts CPU
            # time in 10 ms ticks: a reading much closer than the interval (the last one, taken as
            # recording stops) would be mostly rounding, so it reports memory and threads only.
            now = time.perf_counter()
            if now - self._cpu_window_start >= self.interval_s / 2:
                self._cpu_window_start = now
                out += [
                    ("host", "process_cpu_pct", p.cpu_percent(None)),
                    ("host", "system_cpu_pct", self._psutil.cpu_percent(None)),
                ]
            return out


def memory_limit_bytes(physical: int) -> int:
    """What this process can grow into: physical memory, or the cgroup's limit when lower (containers)."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            return min(physical, int(text))
    return physical

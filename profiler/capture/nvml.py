"""GPU counters from NVML (the `nvidia-ml-py` binding): utilisation, memory, power, SM clock, temperature.

Without a driver or a GPU, NVML raises on init: the source is then recorded as
`absent: <NVML's reason>` in profiler_info, once, and nothing else happens.
"""

from __future__ import annotations

from types import ModuleType

from profiler.capture.base import Sampler

GPU_METRICS = ("gpu_util_pct", "mem_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz", "temperature_c")


class GpuCounters(Sampler):
    """Samples every GPU NVML sees every `interval_s` (recorded under the name `nvml`); `nvml` is
    the binding to read through (default: `pynvml`; tests inject a fake one)."""

    name = "nvml"
    source = "nvml"

    def __init__(self, interval_s: float = 0.1, nvml: ModuleType | None = None) -> None:
        super().__init__(interval_s)
        self._nvml = nvml  # injectable at the pynvml boundary, for tests
        self._handles: list = []

    def open(self) -> list[tuple[str, str]]:
        nvml = self._nvml
        if nvml is None:
            import pynvml as nvml

            self._nvml = nvml
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            nvml.nvmlShutdown()
            raise RuntimeError("NVML found no GPU")
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.details["devices"] = [self._name(h) for h in self._handles]
        totals = {
            f"cuda:{i}": getattr(nvml.nvmlDeviceGetMemoryInfo(h), "total", None) for i, h in enumerate(self._handles)
        }
        self.details["memory_total_bytes"] = {dev: int(total) for dev, total in totals.items() if total}
        return [(f"cuda:{i}", m) for i in range(count) for m in GPU_METRICS]

    def _name(self, handle) -> str:
        name = self._nvml.nvmlDeviceGetName(handle)
        return name.decode() if isinstance(name, bytes) else str(name)

    def read(self) -> list[tuple[str, str, float]]:
        nvml = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            dev = f"cuda:{i}"
            util = nvml.nvmlDeviceGetUtilizationRates(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            out += [
                (dev, "gpu_util_pct", util.gpu),
                (dev, "mem_util_pct", util.memory),
                (dev, "mem_used_bytes", mem.used),
                (dev, "power_w", nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                (dev, "sm_clock_mhz", nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                (dev, "temperature_c", nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
            ]
        return out

    def close(self) -> None:
        if self._handles:
            self._handles = []
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

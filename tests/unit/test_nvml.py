"""GPU counters: NVML absent on this machine (reported, never raised), and the sampler path driven
by a fake NVML module injected at the pynvml boundary."""

import json
import time
import warnings
from types import SimpleNamespace

import pandas as pd
import pytest

from profiler import Profiler
from profiler.capture.nvml import GPU_METRICS, GpuCounters


class FakeNvml:
    """The part of the pynvml API GpuCounters uses, with readings that change on every call."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, devices: int = 2, fail_reads: bool = False) -> None:
        self.devices = devices
        self.fail_reads = fail_reads
        self.reads = 0
        self.shutdowns = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return f"Fake GPU {h}".encode()

    def nvmlDeviceGetUtilizationRates(self, h):
        if self.fail_reads:
            raise RuntimeError("GPU is lost")
        self.reads += 1
        return SimpleNamespace(gpu=10 * h + self.reads % 7, memory=5 + h)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(h + 1) << 30, total=16 << 30)

    def nvmlDeviceGetPowerUsage(self, h):
        return 150_000 + 1000 * h  # milliwatts

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_SM
        return 1410

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 60 + h


def _run(out, sources=(), gpu_counters=False, steps=5, step_s=0.03) -> dict:
    p = Profiler(out, host_counters=False, gpu_counters=gpu_counters, counter_interval_s=0.005, sources=list(sources))
    for _ in range(steps):
        time.sleep(step_s)
        p.step()
    p.analyse(progress=False)
    return json.loads((out / "profiler_info_0.json").read_text())


def test_absent_nvml_is_reported_once_without_exception_or_warnings(tmp_path, capfd):
    pytest.importorskip("pynvml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = _run(tmp_path, gpu_counters=True)
    status = info["sources"]["nvml"]["status"]
    assert status == "absent: NVML Shared Library Not Found"
    assert caught == []
    out, err = capfd.readouterr()
    assert "NVML" not in out + err
    assert not (tmp_path / "device_counters_0.csv").exists()  # nothing was sampled


def test_absent_pynvml_module_is_reported(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    info = _run(tmp_path, gpu_counters=True, steps=1)
    assert info["sources"]["nvml"]["status"].startswith("absent: ")
    assert "pynvml" in info["sources"]["nvml"]["status"]


def test_fake_nvml_values_land_in_counters_and_timeline(tmp_path):
    fake = FakeNvml(devices=2)
    info = _run(tmp_path, sources=[GpuCounters(0.005, nvml=fake)])
    assert info["sources"]["nvml"]["status"] == "ok"
    assert info["sources"]["nvml"]["devices"] == ["Fake GPU 0", "Fake GPU 1"]
    assert fake.shutdowns == 1
    c = pd.read_csv(tmp_path / "device_counters_0.csv")
    nv = c[c["source"] == "nvml"]
    assert set(nv["device"]) == {"cuda:0", "cuda:1"}
    assert set(nv["metric"]) == set(GPU_METRICS)
    per = nv.groupby(["device", "metric"])["value"]
    assert per.size().min() >= 5  # sampled through the whole run
    last = per.last()
    assert last[("cuda:1", "power_w")] == 151.0  # mW -> W
    assert last[("cuda:0", "mem_used_bytes")] == 1 << 30
    assert last[("cuda:1", "temperature_c")] == 61
    assert last[("cuda:0", "sm_clock_mhz")] == 1410
    util = nv[(nv["device"] == "cuda:1") & (nv["metric"] == "gpu_util_pct")]["value"]
    assert util.between(10, 16).all() and util.nunique() > 1
    assert (
        nv["time_ms"].is_monotonic_increasing
        or nv.groupby(["device", "metric"])["time_ms"].apply(lambda s: s.is_monotonic_increasing).all()
    )
    events = json.loads((tmp_path / "timeline_0.json").read_text())["traceEvents"]
    counters = [e for e in events if e.get("ph") == "C" and e["name"] == "power_w (cuda:1)"]
    assert len(counters) == per.size()[("cuda:1", "power_w")]
    assert {e["args"]["value"] for e in counters} == {151}


def test_failing_reads_stop_the_sampler_quietly(tmp_path):
    fake = FakeNvml(devices=1, fail_reads=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = _run(tmp_path, sources=[GpuCounters(0.002, nvml=fake)], steps=4)
    assert caught == []
    assert info["sources"]["nvml"]["status"] == "absent: stopped after repeated read failures (GPU is lost)"

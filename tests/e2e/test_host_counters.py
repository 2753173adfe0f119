"""Host counters (psutil): CPU %, RSS and threads in device_counters_{rank}.csv, with plausible values,
sampled during a real run (idle, busy on one core, holding 200 MB, with 4 extra threads)."""

import json
import threading
import time

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler
from profiler.capture.host import HOST_METRICS

pytestmark = pytest.mark.timing

psutil = pytest.importorskip("psutil")
ALLOC_BYTES = 200 << 20


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    """Step 0 idle, step 1 busy on one core, step 2 holding 200 MB, step 3 with 4 extra threads."""
    out = tmp_path_factory.mktemp("host")
    p = Profiler(out, gpu_counters=False, counter_interval_s=0.02)
    time.sleep(0.25)
    p.step()
    cpu0, wall0 = sum(psutil.Process().cpu_times()[:2]), time.perf_counter()
    _spin(0.4)
    busy_truth = 100 * (sum(psutil.Process().cpu_times()[:2]) - cpu0) / (time.perf_counter() - wall0)
    p.step()
    block = np.ones(ALLOC_BYTES, dtype=np.uint8)  # every page written: resident
    time.sleep(0.25)
    p.step()
    del block
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(4)]
    for w in workers:
        w.start()
    time.sleep(0.25)
    p.step()
    stop.set()
    for w in workers:
        w.join()
    rss_at_stop = psutil.Process().memory_info().rss  # before analyse() (and later tests) move it
    p.analyse(progress=False)
    counters = pd.read_csv(out / "device_counters_0.csv")
    trace = pd.read_csv(out / "step_trace_0.csv")
    return out, counters[counters["source"] == "host"], trace, busy_truth, rss_at_stop


def _in_step(counters: pd.DataFrame, trace: pd.DataFrame, step: int, metric: str) -> pd.Series:
    row = trace.set_index("step").loc[step]
    end = row["start_ms"] + row["total_ms"]
    m = counters[
        (counters["metric"] == metric) & (counters["time_ms"] >= row["start_ms"]) & (counters["time_ms"] < end)
    ]
    return m["value"]


def test_every_host_metric_is_sampled(host_run):
    out, host, _, _, _ = host_run
    assert set(host["metric"]) == set(HOST_METRICS)
    assert set(host["device"]) == {"host"}
    assert host.groupby("metric").size().min() >= 20  # ~1 s at 20 ms
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["sources"]["host_counters"]["status"] == "ok"


def test_cpu_percentages_are_plausible(host_run):
    """Process CPU % while spinning agrees with the CPU time psutil counts for the same interval
    (not simply ~100: the machine may be shared)."""
    _, host, trace, busy_truth, _ = host_run
    ncpu = psutil.cpu_count() or 1
    proc = host[host["metric"] == "process_cpu_pct"]["value"]
    system = host[host["metric"] == "system_cpu_pct"]["value"]
    assert proc.between(0, 100 * ncpu).all() and system.between(0, 100).all()
    busy = _time_weighted_mean(host, trace, 1, "process_cpu_pct")
    idle = _time_weighted_mean(host, trace, 0, "process_cpu_pct")
    assert busy == pytest.approx(busy_truth, abs=20)
    assert busy > idle + 15


def _time_weighted_mean(counters: pd.DataFrame, trace: pd.DataFrame, step: int, metric: str) -> float:
    """The mean of a rate sampled in a step, each sample weighted by the interval it covers (the time
    since the sample before): on a loaded machine the sampler wakes late, and its long intervals would
    otherwise count as much as the short ones."""
    series = counters[counters["metric"] == metric].sort_values("time_ms")
    covered = series["time_ms"].diff().to_numpy(copy=True)
    row = trace.set_index("step").loc[step]
    inside = (
        (series["time_ms"] >= row["start_ms"]) & (series["time_ms"] < row["start_ms"] + row["total_ms"])
    ).to_numpy()
    inside = inside & np.isfinite(covered)
    return float(np.average(series["value"].to_numpy()[inside], weights=covered[inside]))


def test_rss_grows_by_the_allocation(host_run):
    _, host, trace, _, rss_at_stop = host_run
    rss = host[host["metric"] == "rss_bytes"]["value"]
    assert rss.between(10 << 20, psutil.virtual_memory().total).all()
    before = _in_step(host, trace, 1, "rss_bytes").median()
    holding = _in_step(host, trace, 2, "rss_bytes").max()
    assert holding - before == pytest.approx(ALLOC_BYTES, rel=0.15)
    # the last sample is this process (as psutil saw it when recording stopped), the allocation freed
    assert abs(rss.iloc[-1] - rss_at_stop) < ALLOC_BYTES / 2
    assert rss.iloc[-1] < holding - ALLOC_BYTES / 2


def test_thread_count_follows_the_threads_started(host_run):
    _, host, trace, _, _ = host_run
    before = _in_step(host, trace, 2, "threads").median()
    during = _in_step(host, trace, 3, "threads").median()
    assert before >= 2  # the loop's thread and profview's own threads
    assert during - before == 4

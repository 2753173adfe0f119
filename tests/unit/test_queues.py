"""Queue probes and the queue analysis: exact numbers on hand-made event tables, real threads for the instruments."""

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from profiler import Pipeline, ProfiledQueue, Profiler, QueueProbe, prefetch
from profiler.analysis.queues import (
    COMPUTE,
    DATA_PROCESS,
    DATA_TRANSMISSION,
    UNKNOWN,
    endpoints,
    feed_queues,
    pipeline_stages,
    queue_stats,
    queue_summary,
    role,
    slowest_stage,
    verdict,
)
from profiler.capture.queues import GET, PUT
from profiler.data.queues import connector_name

MS = 1_000_000


def events(rows, queue="q", capacity=2, tid=0):
    """(time ms, event, size after, wait ms) rows -> a run.queues table."""
    t, ev, size, wait = zip(*rows)
    return pd.DataFrame(
        {
            "queue": queue,
            "time_ns": np.array(t) * MS,
            "event": ev,
            "size": size,
            "capacity": capacity,
            "wait_ns": np.array(wait) * MS,
            "tid": tid,
        }
    )


# size: [0,10) 1, [10,20) 2, [20,30) 1, [30,45) 0, [45,50) 1, then 0
HAND = events(
    [(0, "put", 1, 0), (10, "put", 2, 0), (20, "get", 1, 0), (30, "get", 0, 0), (45, "put", 1, 0), (50, "get", 0, 10)]
)


# ---- analysis: pure functions ---------------------------------------------------------------


def test_ratios_from_the_size_step_function():
    s = queue_stats(HAND, n_steps=2).iloc[0]
    assert (s["puts"], s["gets"], s["samples"], s["capacity"]) == (3, 3, 6, 2)
    # gets called at 20 (size 2: full), 30 (size 1), 40 (size 0: empty, it waited 10 ms)
    assert s["empty_ratio"] == pytest.approx(1 / 3) and s["full_ratio"] == pytest.approx(1 / 3)
    assert s["put_full_ratio"] == 0
    assert s["time_empty_ratio"] == pytest.approx(15 / 50) and s["time_full_ratio"] == pytest.approx(10 / 50)
    assert s["mean_size"] == pytest.approx(45 / 50) and s["max_size"] == 2 and s["span_ms"] == 50
    assert s["get_wait_ms"] == 10 and s["get_wait_mean_ms"] == pytest.approx(10 / 3)
    assert s["get_wait_per_step_ms"] == 5


def test_queue_that_was_not_empty_when_recording_started():
    # recording begins with 3 items already queued: the first get leaves 2, so 3 were there before it
    s = queue_stats(events([(0, "get", 2, 0), (5, "get", 1, 0), (9, "get", 0, 0)], capacity=4)).iloc[0]
    assert s["empty_ratio"] == 0 and s["full_ratio"] == 0 and s["mean_size"] == pytest.approx((5 * 2 + 4 * 1) / 9)


def test_unbounded_queue_has_no_full_ratio():
    s = queue_stats(events([(0, "put", 1, 0), (1, "get", 0, 0)], capacity=0)).iloc[0]
    assert np.isnan(s["full_ratio"]) and np.isnan(s["time_full_ratio"]) and s["empty_ratio"] == 0


def test_names_carry_the_pipeline_structure():
    assert endpoints("decode->batch") == ("decode", "batch") and endpoints("host_queue") == ("", "host_queue")
    assert [role(n) for n in ("batch->host_queue", "device_queue", "a->b", "mine")] == [
        "host_queue",
        "device_queue",
        "connector",
        "queue",
    ]
    assert connector_name("a", "b") == "a->b"
    with pytest.raises(ValueError):
        connector_name("a->x", "b")


def _stats(rows):
    """Per-queue stats rows from (queue, gets, empty_ratio, full_ratio)."""
    df = pd.DataFrame(rows, columns=["queue", "gets", "empty_ratio", "full_ratio"])
    df["producer"] = [endpoints(q)[0] for q in df["queue"]]
    df["consumer"] = [endpoints(q)[1] for q in df["queue"]]
    df["role"] = [role(q) for q in df["queue"]]
    return df


def test_slow_stage_input_full_output_empty():
    stats = _stats(
        [("read->decode", 50, 0.0, 0.95), ("decode->augment", 50, 0.9, 0.0), ("augment->host_queue", 50, 0.8, 0.0)]
    )
    stages = pipeline_stages(stats)
    assert list(stages["stage"]) == ["read", "decode", "augment"] and list(stages["depth"]) == [0, 1, 2]
    assert list(stages["slow"]) == [False, True, False]
    assert slowest_stage(stages) == "decode"


def test_slow_source_stage_is_the_one_whose_output_is_starved():
    stats = _stats([("read->decode", 50, 0.7, 0.0), ("decode->host_queue", 50, 0.6, 0.0)])
    stages = pipeline_stages(stats)
    assert list(stages["slow"]) == [True, False] and slowest_stage(stages) == "read"


@pytest.mark.parametrize(
    "rows, kind",
    [
        ([("host_queue", 10, 0.1, 0.8), ("device_queue", 10, 0.29, 0.7)], COMPUTE),
        ([("host_queue", 10, 0.05, 0.9), ("device_queue", 10, 0.8, 0.0)], DATA_TRANSMISSION),
        ([("host_queue", 10, 0.7, 0.0), ("device_queue", 10, 0.8, 0.0)], DATA_PROCESS),
        ([("host_queue", 10, 0.3, 0.0)], DATA_PROCESS),  # the warning line itself counts as starved
        ([("host_queue", 0, float("nan"), float("nan"))], UNKNOWN),
    ],
)
def test_verdict_rules(rows, kind):
    stats = _stats(rows)
    empty = pd.DataFrame({"queue": [], "event": [], "tid": []})
    assert verdict(stats, feed_queues(stats, empty, -1), "decode")["kind"] == kind


def test_feed_queue_without_well_known_names_is_what_the_stepping_thread_reads():
    ev = pd.concat(
        [
            events([(0, "put", 1, 0), (1, "get", 0, 0)], queue="mine", tid=7),
            events([(0, "put", 1, 0), (1, "get", 0, 0)], queue="other", tid=3),
        ]
    )
    stats = queue_stats(ev)
    assert feed_queues(stats, ev, step_tid=7)["feed_queue"] == "mine"


def test_summary_is_json_and_joins_waits_to_the_gaps():
    trace = pd.DataFrame(
        {
            "step": [0, 1],
            "start_unix_ns": [0, 25 * MS],
            "fp_start_unix_ns": [5 * MS, 45 * MS],
            "end_unix_ns": [25 * MS, 60 * MS],
            "iteration_gap_ms": [5.0, 20.0],
            "data_wait_ms": [0.0, 10.0],
        }
    )
    doc = queue_summary(HAND, trace, step_tid=0)
    text = json.dumps(doc, allow_nan=False, sort_keys=True)
    assert json.loads(text) == doc and queue_summary(HAND, trace, step_tid=0) == doc
    # the 10 ms get wait (40..50 ms) lies inside step 1's gap (25..45 ms) for 5 ms
    assert [s["gap_wait_ms"] for s in doc["steps"]] == [0.0, 5.0]
    assert doc["steps"][1]["gap_wait_pct"] == 25.0
    # per queue and step: the gets completing in the step (20 ms in step 0; 30 and 50 ms in step 1)
    assert [s["get_wait_ms"] for s in doc["steps"]] == [{"q": 0.0}, {"q": 10.0}]
    assert doc["totals"]["gap_wait_ms"] == 5.0
    assert doc["thresholds"]["empty_ratio_warning"] == 0.3 and doc["thresholds"]["full_ratio_line"] == 0.5


# ---- ProfiledQueue and QueueProbe, recorded by a real Profiler -------------------------------


def _recorded(out):
    return pd.read_csv(out / "data_queue_0.csv")


def test_concurrent_puts_and_gets_are_recorded_exactly(tmp_path):
    """Sizes are taken under the queue's mutex: sorted by time, each event moves the size by exactly one."""
    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False)
    q = ProfiledQueue(3, name="shared")
    n, producers, consumers = 400, 4, 2

    def produce():
        for i in range(n):
            q.put(i)

    def consume():
        for _ in range(n * producers // consumers):
            q.get()

    with ThreadPoolExecutor(producers + consumers) as pool:
        for done in [pool.submit(f) for f in [produce] * producers + [consume] * consumers]:
            done.result()
    p.step()
    p.analyse(progress=False)
    ev = _recorded(tmp_path).sort_values("time_ms", kind="stable")
    assert len(ev) == 2 * n * producers and (ev["capacity"] == 3).all()
    assert ev["size"].between(0, 3).all()
    step = np.where(ev["event"] == "put", 1, -1)
    assert (np.diff(ev["size"].to_numpy()) == step[1:]).all()
    # the timeline has the same sizes as a counter track (one C event per put / get)
    trace = json.loads((tmp_path / "timeline_0.json").read_text())["traceEvents"]
    track = sorted((e["ts"], e["args"]["size"]) for e in trace if e.get("ph") == "C" and e["name"] == "queue shared")
    assert [size for _, size in track] == list(ev["size"])
    assert np.allclose([ts for ts, _ in track], ev["time_ms"].to_numpy() * 1000, atol=1e-3)


def test_get_wait_is_the_time_blocked(tmp_path):
    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False)
    q = ProfiledQueue(1, name="waited")
    threading.Timer(0.05, q.put, args=("x",)).start()
    t0 = time.perf_counter_ns()
    q.get()
    truth_ms = (time.perf_counter_ns() - t0) / 1e6  # the whole get() call: the blocked time and a little more
    q.put("y")
    q.get()
    p.step()
    p.analyse(progress=False)
    gets = _recorded(tmp_path).query("event == 'get'")
    assert truth_ms - 5 < gets["wait_ms"].iloc[0] <= truth_ms and gets["wait_ms"].iloc[0] > 40
    assert gets["wait_ms"].iloc[1] == 0  # a get that did not block reads no clock for it


def test_probe_follows_the_active_recording(tmp_path):
    probe = QueueProbe("custom", capacity=8)
    probe.record(PUT, 1)  # no Profiler: nothing happens
    for run in ("a", "b"):  # each recording interns its own codes
        p = Profiler(output_path=tmp_path / run, host_counters=False, gpu_counters=False)
        probe.record(PUT, 1)
        probe.record_at(GET, time.perf_counter_ns(), 0, wait_ns=3 * MS)
        p.step()
        p.analyse(progress=False)
        ev = _recorded(tmp_path / run)
        assert list(ev["event"]) == ["put", "get"] and list(ev["size"]) == [1, 0]
        assert list(ev["wait_ms"]) == [0, 3] and set(ev["queue"]) == {"custom"} and set(ev["capacity"]) == {8}


# ---- prefetch and Pipeline semantics (no Profiler needed) ------------------------------------


class Jittery:
    """Map-style source whose items take random times, so parallel workers finish out of order."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at
        self.rng = random.Random(0)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.rng.random() * 0.003)
        if i == self.fail_at:
            raise ValueError(f"item {i}")
        return i


def _pipeline_threads():
    return [t for t in threading.enumerate() if t.name.startswith("profview-") and t.name != "profview-flusher"]


def test_prefetch_keeps_order_with_workers():
    assert list(prefetch(Jittery(60), depth=3, workers=4)) == list(range(60))
    assert list(prefetch(iter(range(10)), depth=2)) == list(range(10))
    assert not _pipeline_threads()


def test_prefetch_exception_arrives_after_the_items_before_it():
    got = []
    with pytest.raises(ValueError, match="item 13"):
        for x in prefetch(Jittery(40, fail_at=13), workers=4):
            got.append(x)
    assert got == list(range(13))

    def gen():
        yield from range(3)
        raise KeyError("source")

    got = []
    with pytest.raises(KeyError):
        for x in prefetch(gen()):
            got.append(x)
    assert got == [0, 1, 2]


def test_prefetch_rejects_parallel_reads_of_an_iterator():
    with pytest.raises(ValueError, match="map-style"):
        prefetch(iter(range(3)), workers=2)


def test_leaving_the_loop_stops_the_threads():
    it = prefetch(Jittery(10_000), depth=2, workers=3)
    assert next(it) == 0
    it.close()
    assert not _pipeline_threads()
    for _x in Pipeline(range(10_000), depth=2).map(str, workers=2, name="s"):  # break: the iterator is dropped
        break
    deadline = time.monotonic() + 2
    while _pipeline_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _pipeline_threads()


def test_pipeline_order_batches_and_errors():
    pipe = Pipeline(range(23), name="src").map(lambda x: x * 2, workers=3, name="double").map(str, name="text").batch(5)
    assert pipe.queue_names == ["src->double", "double->text", "text->batch", "batch->host_queue"]
    out = list(pipe)
    assert out[0] == ["0", "2", "4", "6", "8"] and out[-1] == ["40", "42", "44"] and len(out) == 5
    assert list(Pipeline(range(7)).batch(3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]

    def fail(x):
        if x == 11:
            raise ZeroDivisionError("eleven")
        return x

    got = []
    with pytest.raises(ZeroDivisionError):
        for b in Pipeline(range(30)).map(fail, workers=4, name="fail").batch(2):
            got.append(b)
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]  # the batch holding item 11 is not delivered
    with pytest.raises(ValueError, match="twice"):
        Pipeline(range(3), name="a").map(str, name="a")

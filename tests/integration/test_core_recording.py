"""Recording: schedule windows, concurrent threads, memory budget, misuse, both hot-path implementations."""

import json
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler, ProfilerUsageWarning, ProfviewError, schedule
from profiler.record.recorder import HOT_PATH_IMPL


def _quiet(out, **kw):
    return Profiler(output_path=out, host_counters=False, gpu_counters=False, **kw)


@pytest.mark.skipif(os.environ.get("PROFVIEW_PURE_PYTHON") == "1", reason="the pure-Python path was asked for")
def test_hot_path_is_the_c_extension():
    """The package builds its C hot path here; the pure-Python one is the fallback."""
    assert HOT_PATH_IMPL == "c"


def test_schedule_records_exactly_the_active_steps(tmp_path):
    windows = []
    sched = schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    p = _quiet(tmp_path, schedule=sched, on_trace_ready=lambda prof: windows.append(prof.last_window))
    for _ in range(12):
        with p.phase("forward"):
            time.sleep(0.001)
        p.step()
    p.analyse(progress=False)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    # skip 0; cycle 1: wait 1, warmup 2, active 3-4; cycle 2: wait 5, warmup 6, active 7-8; then nothing
    assert list(st["step"]) == [3, 4, 7, 8]
    assert windows == [(3, 4), (7, 8)]
    # nothing outside the windows reached the trace
    trace = json.load(open(tmp_path / "timeline_0.json"))
    fwd = [e for e in trace["traceEvents"] if e.get("name") == "forward"]
    assert len(fwd) == 4


def test_quiet_steps_skip_the_python_step_path_and_keep_the_count(tmp_path):
    """Steps a source declares quiet (quiet_until) and that keep the schedule's action are entered
    by the C stepper alone: on_step runs only where needed, yet every step is counted and the
    windows are the schedule's."""
    from profiler.capture.base import Source
    from profiler.schedule import next_change

    class EveryThird(Source):
        name = "every_third"

        def __init__(self):
            super().__init__()
            self.calls = []

        def on_step(self, step, action):
            self.calls.append(step)

        def quiet_until(self, step):
            return step + 3

    sched = schedule(wait=4, warmup=1, active=2, repeat=2)
    assert [next_change(sched, k) for k in (0, 3, 4, 5, 6, 7, 14)] == [4, 4, 5, 6, 7, 11, 14 + 1024]
    source = EveryThird()
    p = _quiet(tmp_path, schedule=sched, sources=[source])
    for _ in range(16):
        time.sleep(0.001)
        p.step()
    assert p.step_num == 16
    # step 0 begins at start; the first step() is slow (it fixes the stepping thread); then the
    # slow path runs where the schedule changes (4, 5, 6, 11, 12, 13, 14), after a window end (7)
    # or where the source asks (10 = 7 + 3); 2, 3, 8, 9, 15, 16 are entered by the C stepper alone
    assert source.calls == [0, 1, 4, 5, 6, 7, 10, 11, 12, 13, 14]
    p.analyse(progress=False)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    assert list(st["step"]) == [5, 6, 12, 13]
    assert (st["total_ms"] > 0.5).all()


def test_schedule_windows_start_where_the_previous_step_ended(tmp_path):
    p = _quiet(tmp_path, schedule=schedule(wait=2, warmup=0, active=3))
    for _ in range(10):
        time.sleep(0.002)
        p.step()
    p.analyse(progress=False)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    assert list(st["step"]) == [2, 3, 4, 7, 8, 9]
    assert (st["total_ms"] > 1.5).all()  # first step of each window is whole, not truncated


def test_eight_threads_record_concurrently(tmp_path):
    n_threads, n_ops = 8, 3000
    p = _quiet(tmp_path, flush_interval_s=0.05)
    barrier = threading.Barrier(n_threads)

    def worker(i):
        barrier.wait()
        outer = p.op(f"outer-{i}", op_type="Outer")
        inner = p.op(f"inner-{i}", op_type="Inner")
        for _ in range(n_ops):
            with outer:
                with inner:
                    pass

    threads = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.step()
    p.analyse(progress=False)
    detail = pd.read_csv(tmp_path / "op_detail_0.csv")
    counts = dict(zip(detail["name"], detail["count"]))
    for i in range(n_threads):
        assert counts[f"outer-{i}"] == n_ops and counts[f"inner-{i}"] == n_ops
    info = json.load(open(tmp_path / "profiler_info_0.json"))
    assert info["recording"]["dropped_events"] == 0
    assert info["recording"]["unmatched_span_events"] == 0
    # no misattribution: each thread's lane carries only its own ops
    trace = json.load(open(tmp_path / "timeline_0.json"))
    names = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") == "user":
            i = e["name"].split("-")[1]
            assert e["tid"] == names[f"worker-{i}"]
    # self time: outer = total - inner, exactly
    outer = detail[detail["op_type"] == "Outer"]
    inner = detail[detail["op_type"] == "Inner"].set_index(detail[detail["op_type"] == "Inner"]["name"].str[6:])
    for _, row in outer.iterrows():
        i = row["name"][6:]
        assert row["self_ms"] == pytest.approx(row["total_ms"] - inner.loc[i, "total_ms"], abs=1e-5)


def test_memory_budget_drops_are_counted_not_silent(tmp_path):
    n = 50_000
    p = _quiet(tmp_path, memory_budget_mb=0.1, flush_interval_s=30)
    span = p.op("burst")
    for _ in range(n):
        with span:
            pass
    p.step()
    p.analyse(progress=False)
    info = json.load(open(tmp_path / "profiler_info_0.json"))
    dropped = info["recording"]["dropped_events"]
    assert dropped > 0
    detail = pd.read_csv(tmp_path / "op_detail_0.csv")
    kept = int(detail.loc[detail["name"] == "burst", "count"].iloc[0])
    # every begin/end either reached the store or was counted (one span may be split at the edge)
    assert abs(2 * kept + dropped - 2 * n) <= 2
    assert kept * 16 * 2 <= 0.1 * (1 << 20) * 1.01


def test_step_from_a_second_thread_warns_and_is_ignored(tmp_path):
    p = _quiet(tmp_path)
    p.step()
    with pytest.warns(ProfilerUsageWarning, match="second thread"):
        t = threading.Thread(target=p.step)
        t.start()
        t.join()
    p.step()
    p.analyse(progress=False)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    assert list(st["step"]) == [0, 1]


def test_unknown_phase_warns_with_a_suggestion(tmp_path):
    p = _quiet(tmp_path)
    with pytest.warns(ProfilerUsageWarning, match="did you mean 'forward'"):
        with p.phase("forwrd"):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with p.phase("forwrd"):  # warned once only
            pass
        with p.span("my region"):  # free-form spans never warn
            pass
    p.stop()


def test_analyse_before_any_step_warns_and_analyses_one_step(tmp_path):
    p = _quiet(tmp_path)
    with p.phase("forward"):
        time.sleep(0.003)
    with pytest.warns(ProfilerUsageWarning, match="no profiler.step"):
        p.analyse(progress=False)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    assert len(st) == 1


def test_analyse_with_nothing_recorded_is_a_clear_error(tmp_path):
    p = _quiet(tmp_path)
    with pytest.raises(ProfviewError, match="nothing was recorded"):
        p.analyse(progress=False)


def test_one_recording_at_a_time(tmp_path):
    p = _quiet(tmp_path / "a")
    with pytest.raises(ProfviewError, match="already recording"):
        _quiet(tmp_path / "b")
    p.stop()
    _quiet(tmp_path / "c").stop()


def test_context_manager_decorator_counter_instant(tmp_path):
    with _quiet(tmp_path) as p:

        @p.op("Decorated", op_type="Fn")
        def f(x):
            return x + 1

        @p.op
        def bare():
            return 2

        for i in range(3):
            assert f(i) == i + 1 and bare() == 2
            p.counter("loss", 1.0 / (i + 1))
            p.instant("checkpoint")
            p.step()
    p.analyse(progress=False)
    detail = pd.read_csv(tmp_path / "op_detail_0.csv")
    assert dict(zip(detail["name"], detail["count"])) == {
        "Decorated": 3,
        "test_context_manager_decorator_counter_instant.<locals>.bare": 3,
    }
    counters = pd.read_csv(tmp_path / "device_counters_0.csv")
    assert list(counters.loc[counters["metric"] == "loss", "value"]) == pytest.approx([1.0, 0.5, 1 / 3])
    trace = json.load(open(tmp_path / "timeline_0.json"))
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "i" and e["name"] == "checkpoint") == 3


PURE_PYTHON_LOOP = r"""
import json, sys, time
from profiler import Profiler
from profiler.record.recorder import HOT_PATH_IMPL
assert HOT_PATH_IMPL == "python", HOT_PATH_IMPL
p = Profiler(output_path=sys.argv[1], host_counters=False, gpu_counters=False)
truth = []
for _ in range(4):
    t0 = time.perf_counter_ns()
    time.sleep(0.01)
    t1 = time.perf_counter_ns()
    with p.phase("forward"):
        with p.op("MatMul"):
            time.sleep(0.005)
    with p.phase("backward"):
        time.sleep(0.005)
    t2 = time.perf_counter_ns()
    p.counter("lr", 0.1)
    p.step()
    truth.append([(t1 - t0) / 1e6, (t2 - t1) / 1e6])
p.analyse(progress=False)
json.dump(truth, open(sys.argv[1] + "/truth.json", "w"))
"""


def test_pure_python_fallback_gives_the_same_outputs(tmp_path):
    env = dict(os.environ, PROFVIEW_PURE_PYTHON="1")
    subprocess.run([sys.executable, "-c", PURE_PYTHON_LOOP, str(tmp_path)], env=env, check=True, timeout=120)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    truth = np.array(json.load(open(tmp_path / "truth.json")))
    assert len(st) == 4
    assert np.all(np.abs(st["iteration_gap_ms"][1:] - truth[1:, 0]) < 2)
    assert np.all(np.abs(st["fp_bp_ms"] - truth[:, 1]) < 2)
    detail = pd.read_csv(tmp_path / "op_detail_0.csv")
    assert int(detail.loc[detail["name"] == "MatMul", "count"].iloc[0]) == 4
    info = json.load(open(tmp_path / "profiler_info_0.json"))
    assert info["sources"]["markers"]["hot_path"] == "python"


def test_second_recording_into_the_same_directory_keeps_the_first(tmp_path):
    def record(steps):
        p = _quiet(tmp_path)
        for _ in range(steps):
            with p.phase("forward"):
                pass
            p.step()
        p.analyse(progress=False)

    record(3)
    with pytest.warns(ProfilerUsageWarning, match="already held a recording"):
        record(5)
    st = pd.read_csv(tmp_path / "step_trace_0.csv")
    assert list(st["step"]) == [0, 1, 2, 3, 4]  # the second recording only
    previous = list((tmp_path / "raw" / "previous").glob("*/*.pvraw"))
    assert len(previous) == 1  # the first one, kept


@pytest.mark.parametrize("module", ["profiler.record._hotpath", "profiler.record.buffers"])
def test_emitter_records_then_passes_the_call_on(module, tmp_path):
    """Emitter(code, then) (the C hot path and its pure-Python twin): each call records the point
    event, then returns then(*args, **kwargs); without `then` it returns None."""
    import importlib

    hot = importlib.import_module(module)
    received = []

    def forward(*args, **kwargs):
        received.append((args, kwargs))
        return "out"

    wrapper, hook = hot.Emitter(7, forward), hot.Emitter(8)
    hot.drain()
    hot.set_enabled(True)
    try:
        assert wrapper(1, 2, key=3) == "out" and hook("module", ("args",)) is None
    finally:
        hot.set_enabled(False)
    mine = [bytes(events) for ident, events, _, _ in hot.drain() if ident == threading.get_ident()]
    events = np.frombuffer(b"".join(mine), dtype=np.int64)
    assert list(events.reshape(-1, 2)[:, 1]) == [7, 8]
    assert received == [((1, 2), {"key": 3})] and wrapper.then is forward and hook.then is None
    with pytest.raises(TypeError):
        hot.Emitter(1, "not callable")

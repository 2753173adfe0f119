"""Raw store crash safety (a torn last chunk; a SIGKILLed recording is tests/e2e/test_durability.py),
Chrome trace validity and determinism."""

import json
import os
import time
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler
from profiler.export.trace_text import fixed_decimal
from profiler.postprocess.recording import analyse_directory

from support.recordings import record_small_run


def test_torn_last_chunk_is_skipped_and_reported(tmp_path):
    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False)
    for _ in range(5):
        with p.phase("forward"):
            time.sleep(0.001)
        p.step()
    p.stop()
    raw = next((tmp_path / "raw").glob("*.pvraw"))
    data = raw.read_bytes()
    # append half of a valid-looking chunk, as a kill during write() would leave it
    from profiler.store.raw import encode_chunk

    extra = encode_chunk({"table": "events", "thread": 1, "words": 2}, b"\x00" * 64)
    raw.write_bytes(data + extra[: len(extra) // 2])
    analyse_directory(tmp_path, progress=False)
    info = json.load(open(tmp_path / "profiler_info_0.json"))
    assert info["recording"]["torn_chunks"] == 1
    assert any("torn chunk" in w and str(len(data)) in w for w in info["warnings"])
    assert len(pd.read_csv(tmp_path / "step_trace_0.csv")) == 5


def test_chrome_trace_is_valid_and_nested(tmp_path):
    record_small_run(tmp_path)
    trace = json.load(open(tmp_path / "timeline_0.json"))
    events = trace["traceEvents"]
    required = {
        "X": {"name", "ph", "ts", "dur", "pid", "tid"},
        "i": {"name", "ph", "ts", "pid", "tid", "s"},
        "C": {"name", "ph", "ts", "pid", "args"},
        "M": {"name", "ph", "pid", "args"},
    }
    kinds = defaultdict(int)
    for e in events:
        kinds[e["ph"]] += 1
        assert required[e["ph"]] <= set(e), e
    assert kinds["X"] and kinds["i"] == 6 and kinds["C"] and kinds["M"]
    # X events nest properly on every lane, in a reader's float arithmetic: sorted by (ts, -dur),
    # each starts after the previous ends or ends inside it; and the file lists them in that order
    lanes = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            lanes[(e["pid"], e["tid"])].append((e["ts"], e["dur"]))  # exact: times are k / 1024 µs
    for lane in lanes.values():
        assert lane == sorted(lane, key=lambda x: (x[0], -x[1])), "events sorted by start within each thread"
        stack = []
        for ts, dur in lane:
            while stack and stack[-1] <= ts:
                stack.pop()
            assert not stack or ts + dur <= stack[-1], "partially overlapping events on one lane"
            stack.append(ts + dur)
    names = {e["args"].get("name") for e in events if e["ph"] == "M"}
    assert "MainThread" in names and "steps" in names
    assert os.path.getsize(tmp_path / "timeline_0.json") / len(events) < 150


def test_analysis_is_deterministic(tmp_path):
    record_small_run(tmp_path)
    outputs = sorted(p for p in tmp_path.iterdir() if p.is_file())
    first = {p.name: p.read_bytes() for p in outputs}
    analyse_directory(tmp_path, progress=False)
    second = {p.name: p.read_bytes() for p in sorted(q for q in tmp_path.iterdir() if q.is_file())}
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], name


def test_gzip_timeline(tmp_path):
    import gzip

    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False, gzip_timeline=True)
    with p.phase("forward"):
        pass
    p.step()
    p.analyse(progress=False)
    trace = json.loads(gzip.decompress((tmp_path / "timeline_0.json.gz").read_bytes()))
    assert any(e.get("name") == "forward" for e in trace["traceEvents"])
    assert not (tmp_path / "timeline_0.json").exists()


@pytest.mark.parametrize("ns", [0, 1, 999, 1000, 123456789, 10**15, -5, -123456, 2**63 - 1, -(2**63)])
def test_fixed_decimal_round_trips(ns):
    row = fixed_decimal(np.array([ns]), 30).tobytes().decode()
    assert float(row) * 1000 == pytest.approx(ns, abs=0.5, rel=1e-15)
    assert len(row) == 30

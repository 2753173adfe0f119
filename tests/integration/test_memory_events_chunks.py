"""The "[memory]" events of a trace recorded with `profile_memory=True` are read and analysed a chunk of rows at a
time (importers/kineto_memory.py; analysis/memory.py): on the real torch 2.13 capture of
tests/data/recorded/views/torch_memory_modules, the counters and allocations are the events' own numbers, the same
for any chunk size, spilled when spilling; the memory analysis equals the whole-table computation it replaced."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.launches import framework_ops
from profiler.analysis.memory import allocating_ops, memory_curve, memory_events, op_memory, peak_memory
from profiler.analysis.modules import module_rows
from profiler.analysis.results import Analysis, analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.export import csv_json
from profiler.export.csv_rows import FLOAT_FORMAT
from profiler.export.writers.base import WriteOptions
from profiler.export.writers.device_counters import DeviceCounters
from profiler.export.writers.tensorboard_views import MemoryCurve
from profiler.formats.columns import OP_MEMORY_COLUMNS
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.nesting import enclosing_parents, nesting_depths

from support.kineto_builder import Trace
from support.recorded import RECORDED

CHUNKS = (7, 4096)  # rows per chunk: many chunks, and one


def _trace() -> Path:
    (path,) = (RECORDED / "views" / "torch_memory_modules" / "raw").glob("*-torch-0.json.gz")
    return path


@pytest.fixture(scope="module")
def whole():
    return ensure_steps(read_kineto_trace(_trace()))


def _read_in_chunks_of(rows: int, monkeypatch, tmp_path):
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    with spill.spilling(tmp_path, min_bytes=1):
        return ensure_steps(read_kineto_trace(_trace()))


def test_allocations_are_the_memory_events_numbers_in_time_order(whole) -> None:
    """Each allocation's bytes, address and totals are its event's args, the events stably sorted by time."""
    with gzip.open(_trace(), "rt", encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    events.sort(key=lambda e: e["ts"])
    table = whole.allocations
    assert len(table) == len(events) > 100
    assert table["bytes"].tolist() == [e["args"]["Bytes"] for e in events]
    assert table["addr"].tolist() == [e["args"]["Addr"] for e in events]
    assert table["allocated_bytes"].tolist() == [float(e["args"]["Total Allocated"]) for e in events]
    assert table["reserved_bytes"].tolist() == [float(e["args"]["Total Reserved"]) for e in events]
    assert np.all(np.diff(table["time_ns"].to_numpy()) >= 0)


def test_memory_counters_are_the_allocations_totals(whole) -> None:
    """Two counter rows per allocation (its totals after it), in (time, device, metric) order."""
    a = whole.allocations
    rows = [
        pd.DataFrame({"device": a["device"], "metric": metric, "time_ns": a["time_ns"], "value": a[metric]})
        for metric in ("allocated_bytes", "reserved_bytes")
    ]
    expected = pd.concat(rows, ignore_index=True).sort_values(["time_ns", "device", "metric"], kind="stable")
    counters = whole.counters[whole.counters["source"] == "kineto"]
    assert len(counters) == 2 * len(a)
    for column in ("device", "metric", "time_ns", "value"):
        assert counters[column].tolist() == expected[column].tolist(), column


@pytest.mark.parametrize("rows", CHUNKS)
def test_counters_and_allocations_read_in_chunks_are_the_whole_ones(whole, rows, monkeypatch, tmp_path) -> None:
    """Any chunk size gives the same tables; spilling, their numbers and their text columns' codes are in spill
    files (categoricals: nothing is kept per row in memory)."""
    run = _read_in_chunks_of(rows, monkeypatch, tmp_path)
    pd.testing.assert_frame_equal(run.counters, whole.counters, check_exact=True)
    pd.testing.assert_frame_equal(run.allocations, whole.allocations, check_exact=True)
    for column in ("tid", "time_ns", "bytes", "addr", "allocated_bytes", "reserved_bytes"):
        assert spill.is_spilled(run.allocations[column].to_numpy()), column
    for column in ("time_ns", "value"):
        assert spill.is_spilled(run.counters[column].to_numpy()), column
    for table, column in (
        ("counters", "source"),
        ("counters", "device"),
        ("counters", "metric"),
        ("allocations", "device"),
    ):
        assert spill.is_spilled(getattr(run, table)[column].array.codes), (table, column)


def test_counter_texts_are_categoricals_in_sorted_order() -> None:
    """Memory samples of two devices and a "C" event's two series: the rows in (time, device, metric) order, each
    text column a categorical of the values that occur, sorted (a group-by sees the order the text has)."""
    trace = Trace().memory(20, 512, 1, 512, device_type=1).memory(10, 256, 2, 256).memory(20, 64, 3, 320)
    trace.events.append({"ph": "C", "name": "queue", "pid": 1, "tid": 1, "ts": 20, "args": {"b": 2, "a": 1.5}})
    run = trace.run()
    counters, allocations = run.counters, run.allocations
    assert counters[["device", "metric", "time_ns", "value"]].values.tolist() == [
        ["host", "allocated_bytes", 0, 256.0],
        ["host", "reserved_bytes", 0, 4096.0],
        ["cuda:0", "allocated_bytes", 10000, 512.0],
        ["cuda:0", "reserved_bytes", 10000, 4096.0],
        ["host", "allocated_bytes", 10000, 320.0],
        ["host", "queue.a", 10000, 1.5],
        ["host", "queue.b", 10000, 2.0],
        ["host", "reserved_bytes", 10000, 4096.0],
    ]
    assert counters["metric"].cat.categories.tolist() == ["allocated_bytes", "queue.a", "queue.b", "reserved_bytes"]
    assert counters["device"].cat.categories.tolist() == ["cuda:0", "host"]
    assert counters["source"].cat.categories.tolist() == ["kineto"]
    assert allocations[["device", "bytes"]].values.tolist() == [["host", 256], ["cuda:0", 512], ["host", 64]]
    assert allocations["device"].cat.categories.tolist() == ["cuda:0", "host"]


# ----------------------------------------------------------------------------- the whole-table computations


def _whole_op_memory(ops, allocations, owner, parent) -> pd.DataFrame:
    """op_memory as it was computed, a frame of every op row per device."""
    held = owner >= 0
    size = allocations["bytes"].to_numpy(np.int64)
    device = allocations["device"].astype(str).to_numpy(dtype=object)
    names = ops["name"].astype(str)
    framework = framework_ops(ops)
    calls = names[framework].value_counts()
    depth = nesting_depths(parent)
    order = [np.flatnonzero((parent >= 0) & (depth == d)) for d in range(int(depth.max(initial=0)), 0, -1)]
    tables = []
    for dev in sorted(set(device[held])):
        mine = held & (device == dev)
        to, amount = owner[mine], size[mine]
        grown = amount > 0
        own = {
            "self_increase_bytes": sums_by(to, amount, len(ops)),
            "self_alloc_bytes": sums_by(to[grown], amount[grown], len(ops)),
            "self_alloc_count": sums_by(to[grown], np.ones(grown.sum(), dtype=np.int64), len(ops)),
        }
        total = {key.removeprefix("self_"): value.copy() for key, value in own.items()}
        for rows in order:
            for value in total.values():
                np.add.at(value, parent[rows], value[rows])
        per_call = pd.DataFrame({"op": names.to_numpy(dtype=object), **own, **total})
        per_call = per_call[(per_call.drop(columns="op") != 0).any(axis=1).to_numpy() & framework]
        table = per_call.groupby("op", sort=False).sum().reset_index()
        table.insert(0, "device", dev)
        table.insert(2, "calls", calls.reindex(table["op"]).to_numpy(np.int64))
        tables.append(table)
    out = pd.concat(tables, ignore_index=True)[OP_MEMORY_COLUMNS]
    return out.sort_values(["device", "self_increase_bytes", "op"], ascending=[True, False, True], ignore_index=True)


def sums_by(to: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per index 0..n-1: the sum of `values` whose `to` is that index (the whole-array reference)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, to, values)
    return out


def _whole_owners(ops, allocations, threads) -> tuple[np.ndarray, np.ndarray]:
    """allocating_ops' lanes as they were made: a str per op row and per allocation, factorized."""
    framework = framework_ops(ops)
    nodes = np.flatnonzero(framework | module_rows(ops))
    thread_name = dict(zip(threads["tid"].tolist(), threads["name"].astype(str).tolist()))
    lanes = np.concatenate(
        [
            ops["stream"].astype(str).to_numpy(dtype=object)[nodes],
            np.array([thread_name.get(t, f"tid {t}") for t in allocations["tid"].tolist()], dtype=object),
        ]
    )
    lane, _ = codes_and_labels(pd.Series(lanes, dtype=object))
    start = ops["start_ns"].to_numpy(np.int64)[nodes]
    when = allocations["time_ns"].to_numpy(np.int64)
    parent = enclosing_parents(
        lane,
        np.concatenate([start, when]),
        np.concatenate([start + ops["dur_ns"].to_numpy(np.int64)[nodes], when + 1]),
    )
    holder = parent[len(nodes) :]
    owner = np.where(holder >= 0, nodes[np.maximum(holder, 0)], -1)
    owner[owner >= 0] = np.where(framework[owner[owner >= 0]], owner[owner >= 0], -1)
    op_parent = np.full(len(ops), -1, dtype=np.int64)
    op_parent[nodes] = np.where(parent[: len(nodes)] >= 0, nodes[np.maximum(parent[: len(nodes)], 0)], -1)
    return owner, op_parent


@pytest.mark.parametrize("rows", CHUNKS)
def test_memory_analysis_in_chunks_is_the_whole_table_one(whole, rows, monkeypatch, tmp_path) -> None:
    """Owners, parents, each block's op and the per-op memory table equal the whole-table computation."""
    owner, parent = _whole_owners(whole.ops, whole.allocations, whole.threads)
    expected = _whole_op_memory(whole.ops, whole.allocations, owner, parent)
    assert len(expected) > 10 and (owner >= 0).sum() > 100 and (parent >= 0).sum() > 100  # not vacuous
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    with spill.spilling(tmp_path, min_bytes=1):
        got_owner, got_parent = allocating_ops(whole.ops, whole.allocations, whole.threads)
        table = op_memory(whole.ops, whole.allocations, got_owner, got_parent)
        events = memory_events(whole.ops, whole.allocations, got_owner)
        curve = memory_curve(whole.allocations)
    assert np.array_equal(got_owner, owner) and np.array_equal(got_parent, parent)
    pd.testing.assert_frame_equal(table, expected, check_exact=True)
    pd.testing.assert_frame_equal(events, memory_events(whole.ops, whole.allocations, owner), check_exact=True)
    names = whole.ops["name"].astype(str).to_numpy()
    allocated = events["op"] != ""  # each allocation's op is its owner's name (the definition)
    assert allocated.sum() > 100 and set(events.loc[allocated, "op"]) <= set(names[owner[owner >= 0]])
    assert curve["device"].tolist() == whole.allocations["device"].astype(str).tolist()
    numbers = ["bytes", "alloc_ms", "free_ms", "lifetime_ms"]  # held until written: in spill files, not in memory
    assert all(spill.is_spilled(events[c].to_numpy()) for c in numbers)


def test_allocations_in_a_trace_without_operators_belong_to_no_op() -> None:
    """A trace whose only ops are Python frames (no framework operator, no module frame, so no op an allocation can
    belong to): every allocation is listed with op "" and no op is charged (it raised IndexError); one inside
    an operator of another trace still is its."""
    frames = Trace().op("train.py(10): main", 0, 100, cat="python_function")
    frames.memory(10, 512, 1, 512).memory(50, -512, 1, 0)
    analysis = analyse_run(ensure_steps(frames.run()))
    assert analysis.memory_events[["op", "bytes", "alloc_ms", "free_ms"]].values.tolist() == [["", 512, 0.01, 0.05]]
    assert analysis.op_memory.empty

    operator = Trace().op("train.py(10): main", 0, 100, cat="python_function").op("aten::empty", 5, 10)
    operator.memory(10, 512, 1, 512).memory(50, -512, 1, 0)
    analysis = analyse_run(ensure_steps(operator.run()))
    assert analysis.memory_events["op"].tolist() == ["aten::empty"]
    assert analysis.op_memory.set_index("op").loc["aten::empty", "alloc_bytes"] == 512


@pytest.mark.parametrize("rows", CHUNKS)
def test_memory_and_counter_files_in_chunks_hold_the_whole_tables(whole, rows, monkeypatch, tmp_path) -> None:
    """memory_N.csv and device_counters_N.csv, their times made a chunk at a time into spill files and their text
    checked for carriage returns CSV_ROWS rows at a time, hold pandas' CSV of the tables made whole."""
    a, c = whole.allocations, whole.counters
    curve = pd.DataFrame({"device": a["device"].astype(str), "time_ms": a["time_ns"] / 1e6})
    curve[["allocated_bytes", "reserved_bytes"]] = a[["allocated_bytes", "reserved_bytes"]]
    counters = pd.DataFrame({"source": c["source"], "device": c["device"], "metric": c["metric"]})
    counters["time_ms"], counters["value"] = c["time_ns"] / 1e6, c["value"]
    assert len(curve) > 100 and len(counters) > 200  # many chunks
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    monkeypatch.setattr(csv_json, "CSV_ROWS", 5)
    analysis = Analysis(whole, pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    with spill.spilling(tmp_path, min_bytes=1):
        written = [w.write(analysis, tmp_path, WriteOptions()) for w in (MemoryCurve(), DeviceCounters())]
    for path, table, na_rep in zip(written, (curve, counters), ("", "nan")):
        text = table.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n", na_rep=na_rep)
        assert path.read_bytes() == text.encode(), path.name


def _whole_peaks(curve: pd.DataFrame, start_ms: np.ndarray, end_ms: np.ndarray) -> pd.DataFrame:
    """memory.peak_memory as it was, a device's rows at a time, whole."""
    rows = []
    for device, points in curve.groupby("device", sort=True):
        time = points["time_ms"].to_numpy()
        step = np.searchsorted(start_ms, time, "right") - 1
        inside = (step >= 0) & (time < end_ms[np.maximum(step, 0)])
        if inside.any():
            allocated, reserved = (
                points["allocated_bytes"].to_numpy()[inside],
                points["reserved_bytes"].to_numpy()[inside],
            )
            top = int(np.nanargmax(allocated))
            rows.append((device, float(allocated[top]), float(np.nanmax(reserved)), float(time[inside][top])))
    return pd.DataFrame(rows, columns=["device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_time_ms"])


@pytest.mark.parametrize("rows", CHUNKS)
def test_peak_memory_in_chunks_is_the_whole_one(whole, rows, monkeypatch, tmp_path) -> None:
    """Each device's peaks inside the steps, read a chunk of rows at a time, are those of its rows taken whole, in
    steps that leave rows out (before the first, between steps, after the last) and the real inferred steps."""
    curve = memory_curve(whole.allocations)
    time = curve["time_ms"].to_numpy()
    edges = np.quantile(time, [0.1, 0.3, 0.35, 0.6, 0.65, 0.9])
    gapped = (edges[::2], edges[1::2])
    steps = (whole.steps["start_ns"].to_numpy() / 1e6, whole.steps["end_ns"].to_numpy() / 1e6)
    expected = [_whole_peaks(curve, start, end) for start, end in (gapped, steps)]
    assert all(len(e) and (e["peak_allocated_bytes"] > 0).all() for e in expected)  # not vacuous
    assert ((time >= edges[1]) & (time < edges[2])).sum() > 0  # rows between the steps are left out
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    with spill.spilling(tmp_path, min_bytes=1):
        got = [peak_memory(memory_curve(whole.allocations), start, end) for start, end in (gapped, steps)]
    for g, e in zip(got, expected):
        pd.testing.assert_frame_equal(g, e, check_exact=True)


@pytest.mark.parametrize("rows", (4, 4096))
def test_memory_events_out_of_time_order_are_read_as_a_stable_sort(rows, monkeypatch, tmp_path) -> None:
    """Memory events written out of time order (with twin times, two devices): the allocations are the events
    stably sorted by time and the counters stably sorted by (time, device, metric), read in pieces of one row and
    in one, spilled, as a whole stable sort gives them."""
    rng = np.random.default_rng(4)
    trace = Trace()
    events = [(int(rng.integers(0, 40)), int(rng.choice([256, -256, 512])), int(rng.integers(0, 2))) for _ in range(90)]
    for k, (ts, size, device) in enumerate(events):
        trace.memory(ts, size, 0x10 * (k % 7), 1000 + k, device_type=device, reserved=5000 + k)
    monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
    with spill.spilling(tmp_path, min_bytes=1):
        run = trace.run()
    in_time = sorted(range(len(events)), key=lambda k: events[k][0])
    assert run.allocations["allocated_bytes"].tolist() == [1000.0 + k for k in in_time]
    assert run.allocations["device"].tolist() == [("cuda:0" if events[k][2] else "host") for k in in_time]
    a = run.allocations
    rows_of = [
        pd.DataFrame({"device": a["device"].astype(str), "metric": m, "time_ns": a["time_ns"], "value": a[m]})
        for m in ("allocated_bytes", "reserved_bytes")
    ]
    expected = pd.concat(rows_of, ignore_index=True).sort_values(["time_ns", "device", "metric"], kind="stable")
    for column in ("device", "metric", "time_ns", "value"):
        assert run.counters[column].astype(expected[column].dtype).tolist() == expected[column].tolist(), column

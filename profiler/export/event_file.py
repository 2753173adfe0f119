"""The columnar event file (events_{rank}.arrow, docs/formats.md): every event of the timeline as
columns, for the viewer and any program that wants the events without parsing JSON.

An Apache Arrow IPC file (uncompressed, record batches of 1 Mi rows): a reader memory-maps it and
gets numpy arrays without copying or parsing anything (benchmarks/bench_event_format.py has the
measured alternatives). Strings are stored once, in tables in the schema's metadata; the rows
carry codes. Rows are the complete events (ph X: steps, spans, ops) sorted by lane, start and
longest first, then instants and counter values sorted by lane and time, then flow points.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

from profiler import formats
from profiler.export.chrome_trace import STEP_TID, Head, TimelineEvents, timeline_events
from profiler.export.direct_file import DirectFile
from profiler.model import Run

BATCH_ROWS = 1 << 20


def _codes(values: list) -> tuple[np.ndarray, list]:
    """Dense codes of values in first-seen order, and the distinct values."""
    index: dict = {}
    codes = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)
    return codes, list(index)


def _args_text(args: Optional[dict]) -> Optional[str]:
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"), sort_keys=True) if args else None


def _lane_table(ev: TimelineEvents) -> list[dict]:
    """The lanes (pid, tid) with their process and thread names from the trace's metadata."""
    process, thread, sort = {}, {}, {}
    for m in ev.lanes.meta:
        if m["name"] == "process_name":
            process[m["pid"]] = m["args"]["name"]
        elif m["name"] == "thread_name":
            thread[(m["pid"], m["tid"])] = m["args"]["name"]
        elif m["name"] == "process_sort_index":
            sort[m["pid"]] = m["args"]["sort_index"]
    out = []
    for pid, tid in ev.lane_pairs:
        kind = "steps" if (pid == ev.lanes.host_pid and tid == STEP_TID) else (
            "host" if pid == ev.lanes.host_pid else "device")
        out.append({"pid": int(pid), "tid": int(tid), "process": process.get(pid, f"pid {pid}"),
                    "thread": thread.get((pid, tid), "counters" if tid == 0 and (pid, tid) not in thread else f"tid {tid}"),
                    "kind": kind, "process_sort": int(sort.get(pid, 0))})
    return out


def write_event_file(run: Run, path: Path, events: Optional[TimelineEvents] = None) -> Path:
    """Write the run's events as an Arrow IPC file at `path` (atomically); returns the path."""
    import pyarrow as pa

    path = Path(path)
    ev = events if events is not None else timeline_events(run)
    specs: list[Head] = ev.complete.specs + ev.points.specs
    n_complete_heads = len(ev.complete.specs)
    flows = ev.flows
    flow_specs = [Head(e["ph"], e["pid"], e["tid"], e["cat"], e["name"], {"id": e["id"]}) for e in flows]
    pairs = list(ev.lane_pairs)
    pair_index = {p: i for i, p in enumerate(pairs)}
    for h in flow_specs:
        if (h.pid, h.tid) not in pair_index:
            pair_index[(h.pid, h.tid)] = len(pairs)
            pairs.append((h.pid, h.tid))
    ev.lane_pairs = pairs
    all_specs = specs + flow_specs
    name_code, names = _codes([h.name for h in all_specs])
    cat_code, categories = _codes([h.cat for h in all_specs])
    args_text = [_args_text(h.args) for h in all_specs]
    distinct_args = sorted({a for a in args_text if a is not None})
    args_index = {a: i for i, a in enumerate(distinct_args)}
    head_table = {
        "ph": np.array([ord(h.ph) for h in all_specs], dtype=np.uint8),
        "lane": np.array([pair_index[(h.pid, h.tid)] for h in all_specs], dtype=np.uint16),
        "name": name_code.astype(np.int32),
        "category": cat_code.astype(np.uint16),
        "args": np.array([-1 if a is None else args_index[a] for a in args_text], dtype=np.int32),
    }
    c, p = ev.complete, ev.points
    n_c, n_p, n_f = len(c.key), len(p.key), len(flows)
    lanes = _lane_table(ev)
    # complete rows per lane: first row, count, longest duration (a window query looks that far back)
    c_lane = head_table["lane"][:n_complete_heads][c.key[ev.complete_order]] if n_c else np.empty(0, np.uint16)
    counts = np.bincount(c_lane, minlength=len(pairs)) if n_c else np.zeros(len(pairs), np.int64)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    longest = np.zeros(len(pairs), np.int64)
    if n_c:
        np.maximum.at(longest, c_lane.astype(np.int64), np.asarray(c.dur_ns, np.int64)[ev.complete_order])
    meta = {
        "format": formats.EVENT_FILE_FORMAT, "version": formats.EVENT_FILE_VERSION, "rank": run.rank,
        "data_origin": run.info.get("data_origin", "profview"),
        "origin_unix_ns": int(run.info.get("clock", {}).get("origin_unix_ns", 0)),
        "rows": n_c + n_p + n_f, "complete_rows": n_c, "point_rows": n_p, "flow_rows": n_f,
        "names": names, "categories": categories, "args": distinct_args, "lanes": lanes,
        "lane_complete": [[int(f), int(k), int(m)] for f, k, m in zip(firsts, counts, longest)],
    }
    schema = pa.schema([(name, pa.from_numpy_dtype(np.dtype(dtype))) for name, dtype in formats.EVENT_COLUMNS],
                       metadata={formats.EVENT_FILE_META_KEY: json.dumps(meta, ensure_ascii=False)})
    tmp = path.with_name(path.name + ".tmp")
    flow_ts = np.array([e["_ns"] for e in flows], dtype=np.int64)
    flow_key = np.arange(n_f, dtype=np.int64) + len(specs)
    flow_step = np.full(n_f, -1, np.int64)
    parts = [(c, ev.complete_order, 0), (p, ev.points_order, n_complete_heads)]
    with DirectFile(tmp) as raw:
        sink = pa.PythonFile(raw, mode="w")
        with pa.ipc.new_file(sink, schema) as writer:
            for b, order, head_offset in parts:
                for i in range(0, len(order), BATCH_ROWS):
                    rows = order[i:i + BATCH_ROWS]
                    heads = b.key[rows] + head_offset
                    dur = np.asarray(b.dur_ns)[rows] if b.dur_ns is not None else np.zeros(len(rows), np.int64)
                    writer.write_batch(_batch(pa, schema, head_table, heads, np.asarray(b.ts_ns)[rows], dur,
                                              np.asarray(b.step)[rows]))
            if n_f:
                fo = np.argsort(flow_ts, kind="stable")
                writer.write_batch(_batch(pa, schema, head_table, flow_key[fo], flow_ts[fo],
                                          np.zeros(n_f, np.int64), flow_step))
    os.replace(tmp, path)
    return path


def _batch(pa, schema, head_table: dict, heads: np.ndarray, start: np.ndarray, dur: np.ndarray, step: np.ndarray):
    cols = {
        "ph": head_table["ph"][heads], "lane": head_table["lane"][heads],
        "start_ns": np.ascontiguousarray(start, dtype=np.int64), "dur_ns": np.ascontiguousarray(dur, dtype=np.int64),
        "name": head_table["name"][heads], "category": head_table["category"][heads],
        "step": step.astype(np.int32), "args": head_table["args"][heads],
    }
    return pa.record_batch([pa.array(cols[name]) for name in schema.names], schema=schema)


def write_timeline_files(run: Run, out_dir: Path, gzip_timeline: bool = False) -> list[Path]:
    """The timeline of one rank: the Chrome trace and the event file, from one grouping of the events."""
    from profiler.export.chrome_trace import write_chrome_trace

    ev = timeline_events(run)
    trace = write_chrome_trace(run, Path(out_dir) / formats.rank_file("timeline", run.rank), gzip_timeline, events=ev)
    return [trace, write_event_file(run, Path(out_dir) / formats.rank_file("events", run.rank), events=ev)]

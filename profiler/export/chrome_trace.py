"""Chrome Trace Event Format files (Perfetto, chrome://tracing, speedscope): the timeline's events
(`timeline_model.py`) written as JSON rows, whose text `trace_text.py` makes.

A trace is `{"traceEvents":[` + rows + flow and metadata events + `],"displayTimeUnit":"ms",
"otherData":{...}}`. Rows are written from an `EventBlock` in any order of any of its rows, so a
trace of some rows (a step range: `TimelineEvents.in_steps`) is written the same way as the whole.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import BinaryIO, Optional

import numpy as np

from profiler.export.direct_file import DirectFile
from profiler.export.files import AtomicWrite
from profiler.export.timeline_model import EventBlock, Head, TimelineEvents
from profiler.export.trace_text import new_row_buffer, row_texts

TRACE_START = b'{"traceEvents":[\n'
INSTANT_SCOPE = ',"s":"t"'      # instants are thread-scoped


def head_text(h: Head) -> bytes:
    """A row's JSON up to its time: `{"ph":..,"pid":..,"tid":..,"cat":..,"name":..[,"args":..],"ts":`."""
    body = {"ph": h.ph, "pid": h.pid, "tid": h.tid, "cat": h.cat, "name": h.name}
    if h.args:
        body["args"] = h.args
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return (text[:-1] + (INSTANT_SCOPE if h.ph == "i" else "") + ',"ts":').encode()


def write_rows(f: BinaryIO, b: EventBlock, order: np.ndarray, buffer: Optional[np.ndarray] = None) -> int:
    """Write the rows `order` of a block (each followed by `,\\n`); returns how many."""
    n = len(order)
    if n == 0:
        return 0
    heads = [head_text(h) for h in b.specs]
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in heads])]).astype(np.int64)
    key = np.ascontiguousarray(b.key, dtype=np.int64)
    ts = np.ascontiguousarray(b.ts_ns, dtype=np.int64)
    dur = None if b.dur_ns is None else np.ascontiguousarray(b.dur_ns, dtype=np.int64)
    for text in row_texts(b"".join(heads), offsets, key, ts, dur, np.ascontiguousarray(order, dtype=np.int64), buffer):
        f.write(text)
    return n


def write_trace_end(f: BinaryIO, events: list[dict], other: dict) -> None:
    """The events written as JSON objects (flows, metadata: keys starting with `_` left out), then
    the end of the trace with its `otherData`."""
    text = ",\n".join(json.dumps({k: v for k, v in e.items() if not k.startswith("_")}, ensure_ascii=False,
                                 separators=(",", ":")) for e in events)
    f.write(text.encode())
    f.write(b'\n],"displayTimeUnit":"ms","otherData":' + json.dumps(other).encode() + b"}\n")


def write_chrome_trace(ev: TimelineEvents, path: Path, gzip_output: bool = False) -> Path:
    """Write the events' Chrome trace (atomically); returns the path written (with .gz when compressed).

    Complete events come sorted by lane, then start, longest first; then instants and counter
    values, by lane and time; then flow events and the metadata.
    """
    path = Path(path)
    if gzip_output and path.suffix != ".gz":
        path = path.with_name(path.name + ".gz")
    opener = (lambda p: gzip.open(p, "wb", compresslevel=3)) if gzip_output else DirectFile
    with AtomicWrite(path) as out, opener(out.tmp) as f:
        f.write(TRACE_START)
        buffer = new_row_buffer()
        write_rows(f, ev.complete, ev.complete_order, buffer)
        write_rows(f, ev.points, ev.points_order, buffer)
        write_trace_end(f, ev.flows + ev.lanes.meta, {"tool": "profview", "rank": ev.rank, "data_origin": ev.data_origin,
                                                      "origin_unix_ns": ev.origin_unix_ns})
    return path

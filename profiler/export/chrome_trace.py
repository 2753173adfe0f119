"""Chrome Trace Event Format writer (Perfetto, chrome://tracing, speedscope).

Millions of events are written without a Python loop per event: events that share everything
but their times (phase letter, pid, tid, category, name, args) share one pre-encoded row head,
and the times are microsecond decimals with three fraction digits (ns resolution). The rows
are formatted by a C kernel (`_trace_rows.c`) when it is built, else by `format_rows_numpy`,
which lays them out as fixed-width byte matrices with integer arithmetic on numpy arrays and
then drops the padding; both give the same bytes.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Optional

import numpy as np
import pandas as pd

from profiler.kernels.grouping import codes_and_labels, first_rows
from profiler.kernels.nesting import stable_order
from profiler.model import Run
from profiler.kernels.native import native
from profiler.export.direct_file import DirectFile
from profiler.export.files import temp_path

STEP_TID = 1_000_000          # the lane that shows steps on the host process
#: The longest time and duration, in characters: µs with 3 decimals and a sign. 21 holds every
#: int64 ns (-9223372036854775.808 µs), so no recording's time can fail to fit (14 and 12 did: a
#: trace longer than 2.8 h, or a span longer than 100 s, was a ValueError); numbers are written
#: without padding, so the width changes no byte of a trace.
TS_WIDTH = 21
DUR_WIDTH = 21


_POW10_US_IN_NS = 10 ** np.arange(16, dtype=np.int64) * 1000   # 1 µs, 10 µs, ... in ns
_TRIPLETS = np.array([list(f"{i:03d}".encode()) for i in range(1000)], dtype=np.uint8)   # "000".."999"


def fixed_decimal(ns: np.ndarray, width: int) -> np.ndarray:
    """ns values as right-aligned µs decimals with 3 fraction digits, space-padded: (n, width) uint8.

    Digits are produced three at a time from a lookup table, then leading zeros are blanked.
    """
    v = np.asarray(ns, dtype=np.int64)
    neg = v < 0
    mag = np.where(neg, (-(v + 1)).astype(np.uint64) + np.uint64(1), v.astype(np.uint64))   # |v|, even for int64 min
    rest = mag
    n_int = width - 4                                   # integer digits that fit (width - ".xxx")
    groups = -(-n_int // 3)
    digits = np.empty((len(v), groups * 3 + 4), dtype=np.uint8)
    # below 2**53 float64 holds every integer exactly and divides far faster than int64
    exact_float = len(rest) and int(rest.max()) < 2**53
    rest = rest.astype(np.float64) if exact_float else rest
    for g in range(groups + 1):                          # least significant triplet first
        if exact_float:
            q = np.floor(rest / 1000.0)
            low = (rest - q * 1000.0).astype(np.int16)
        else:
            q, low = np.divmod(rest, 1000)
        hi = digits.shape[1] - (0 if g == 0 else 4 + 3 * (g - 1))
        digits[:, hi - 3:hi] = _TRIPLETS[low]
        rest = q
    digits[:, -4] = ord(".")
    if (rest > 0).any():
        raise ValueError("a time does not fit the trace's fixed-width field")
    out = digits[:, -width:].copy()
    # blank leading zeros, keeping at least "0.xxx" (and one column for a minus sign)
    n_digits = np.maximum(np.searchsorted(_POW10_US_IN_NS.astype(np.uint64), mag, side="right"), 1)
    first = width - 4 - n_digits                         # column of the first significant digit
    if (first < 0).any() or (neg & (first < 1)).any():
        raise ValueError("a time does not fit the trace's fixed-width field")
    out[np.arange(width)[None, :] < first[:, None]] = ord(" ")
    if neg.any():
        rows = np.flatnonzero(neg)
        out[rows, first[rows] - 1] = ord("-")
    return out


@dataclass
class EventBlock:
    """Events sharing a row head: heads[k] for events whose key is k."""

    heads: list[bytes]
    key: np.ndarray          # index into heads, per event
    ts_ns: np.ndarray
    dur_ns: Optional[np.ndarray]   # None for instants / flow events
    tail: bytes = b"},\n"


def _head(ph: str, pid: int, tid: int, cat: str, name: str, args: Optional[dict] = None, extra: str = "") -> bytes:
    body = {"ph": ph, "pid": pid, "tid": tid, "cat": cat, "name": name}
    if args:
        body["args"] = args
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return (text[:-1] + extra + ',"ts":').encode()


ROWS_PER_WRITE = 1 << 20      # numpy path: rows formatted per write, bounding the memory of a block's text
BUFFER_BYTES = 32 << 20       # C path: one reused output buffer per trace
_MID = b',"dur":'
_SPACE = ord(" ")


def write_block(f: BinaryIO, block: EventBlock, buffer: Optional[np.ndarray] = None) -> int:
    """Write the block's events grouped by head (in recording order within a head); returns the count.

    `buffer` is a reusable uint8 scratch array for the C kernel (one is made when not given).
    """
    n = len(block.key)
    if n == 0:
        return 0
    key = np.ascontiguousarray(block.key, dtype=np.int64)
    heads = b"".join(block.heads)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in block.heads])]).astype(np.int64)
    ts = np.ascontiguousarray(block.ts_ns, dtype=np.int64)
    dur = None if block.dur_ns is None else np.ascontiguousarray(block.dur_ns, dtype=np.int64)
    for text in row_texts(heads, offsets, key, ts, dur, stable_order(key), buffer, block.tail):
        f.write(text)
    return n


def row_texts(heads: bytes, offsets: np.ndarray, key: np.ndarray, ts: np.ndarray, dur: Optional[np.ndarray],
              order: Optional[np.ndarray], buffer: Optional[np.ndarray] = None, tail: bytes = b"},\n",
              use_kernel: bool = True) -> Iterator[bytes | memoryview]:
    """The text of rows order[0:n] (or 0:n), piece by piece: head[key] + ts [+ ,"dur": + dur] + tail.

    With the C kernel the pieces are views of `buffer`, valid until the next piece is asked for.
    """
    n = len(key) if order is None else len(order)
    if _trace_rows is None or not use_kernel:
        for start in range(0, n, ROWS_PER_WRITE):
            yield format_rows_numpy(heads, offsets, key, ts, dur, order, start, min(n, start + ROWS_PER_WRITE),
                                    TS_WIDTH, DUR_WIDTH, _MID, tail)
        return
    longest = int(np.diff(offsets).max(initial=0)) + TS_WIDTH + len(_MID) + DUR_WIDTH + len(tail)
    if buffer is None or len(buffer) < longest:
        buffer = np.empty(max(BUFFER_BYTES, longest), dtype=np.uint8)
    start = 0
    while start < n:
        start, size = _trace_rows.format_rows(buffer, heads, offsets, key, ts, dur, order, start, n,
                                              TS_WIDTH, DUR_WIDTH, _MID, tail)
        yield memoryview(buffer)[:size]


def format_rows_numpy(heads: bytes, offsets: np.ndarray, key: np.ndarray, ts: np.ndarray, dur: Optional[np.ndarray],
                      order: Optional[np.ndarray], start: int, stop: int, ts_width: int, dur_width: int,
                      mid: bytes, tail: bytes) -> bytes:
    """The rows order[start:stop] as text (the C kernel's reference and fallback).

    Rows must come grouped by key; each run of one key is laid out as a (rows, columns) byte matrix
    with right-aligned numbers, whose padding is then left out.
    """
    rows = np.arange(start, stop) if order is None else order[start:stop]
    keys = key[rows]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    starts, stops = np.concatenate([[0], bounds]), np.concatenate([bounds, [len(rows)]])
    ts_text = fixed_decimal(ts[rows], ts_width)
    dur_text = fixed_decimal(dur[rows], dur_width) if dur is not None else None
    tail_bytes, mid_bytes = np.frombuffer(tail, dtype=np.uint8), np.frombuffer(mid, dtype=np.uint8)
    out = []
    for a, b in zip(starts, stops):
        k = int(keys[a])
        head = np.frombuffer(heads[offsets[k]:offsets[k + 1]], dtype=np.uint8)
        m = b - a
        parts = [np.broadcast_to(head, (m, len(head))), ts_text[a:b]]
        if dur_text is not None:
            parts += [np.broadcast_to(mid_bytes, (m, len(mid_bytes))), dur_text[a:b]]
        parts.append(np.broadcast_to(tail_bytes, (m, len(tail_bytes))))
        matrix = np.hstack(parts)
        keep = np.ones(matrix.shape, dtype=bool)
        keep[:, len(head):len(head) + ts_width] = ts_text[a:b] != _SPACE
        if dur_text is not None:
            at = len(head) + ts_width + len(mid)
            keep[:, at:at + dur_width] = dur_text[a:b] != _SPACE
        out.append(matrix[keep].tobytes())
    return b"".join(out)


_trace_rows = native("profiler.export._trace_rows")


def _keys(*cols) -> tuple[np.ndarray, list[tuple]]:
    """Dense key per row for the distinct combinations of the given columns, with those combinations."""
    n = len(cols[0]) if cols else 0
    if n == 0:
        return np.empty(0, np.int64), []
    combined = np.zeros(n, dtype=np.int64)
    decoded = []
    for col in cols:
        codes, uniques = codes_and_labels(col)
        combined *= len(uniques) + 1                        # in place: these arrays have a row per event
        combined += codes
        decoded.append((codes, uniques))
    key, first = _dense(combined)
    combos = [tuple(u[c[i]] for c, u in decoded) for i in first]
    return key, combos


def _dense(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes for int64 values (first-seen order) and the row of each code's first occurrence."""
    codes, uniques = pd.factorize(values, sort=False)
    codes = codes.astype(np.int64)
    return codes, first_rows(codes, len(uniques))


class Lanes:
    """pid / tid numbering of a run's host threads and device streams, with their M events."""

    def __init__(self, run: Run) -> None:
        self.rank = run.rank
        self.host_pid = run.rank
        self.meta: list[dict] = [
            {"ph": "M", "pid": self.host_pid, "tid": 0, "name": "process_name", "args": {"name": f"host (rank {run.rank})"}},
            {"ph": "M", "pid": self.host_pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": 0}},
            {"ph": "M", "pid": self.host_pid, "tid": STEP_TID, "name": "thread_name", "args": {"name": "steps"}},
            {"ph": "M", "pid": self.host_pid, "tid": STEP_TID, "name": "thread_sort_index", "args": {"sort_index": -1}},
        ]
        self.thread_tid = {str(n): int(t) for t, n in zip(run.threads["tid"], run.threads["name"])}
        for name, tid in self.thread_tid.items():
            self.meta.append({"ph": "M", "pid": self.host_pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
        self.device_pid: dict[str, int] = {}
        self.stream_tid: dict[tuple[str, str], int] = {}

    def host_lane(self, stream: str) -> int:
        tid = self.thread_tid.get(stream)
        if tid is None:
            tid = self.thread_tid[stream] = len(self.thread_tid) + 1
            self.meta.append({"ph": "M", "pid": self.host_pid, "tid": tid, "name": "thread_name", "args": {"name": stream}})
        return tid

    def device_lane(self, device: str, stream: str) -> tuple[int, int]:
        pid = self.device_pid.get(device)
        if pid is None:
            pid = self.device_pid[device] = 1000 * (self.rank + 1) + len(self.device_pid)
            self.meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
                              "args": {"name": f"{device} (rank {self.rank})"}})
            self.meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index",
                              "args": {"sort_index": len(self.device_pid)}})
        tid = self.stream_tid.get((device, stream))
        if tid is None:
            tid = int(stream) if str(stream).isdigit() else 100_000 + len(self.stream_tid)
            self.stream_tid[(device, stream)] = tid
            self.meta.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": f"stream {stream}"}})
        return pid, tid

    def lane(self, device: str, stream: str) -> tuple[int, int]:
        return (self.host_pid, self.host_lane(stream)) if device == "cpu" else self.device_lane(device, stream)


def op_block(run: Run, lanes: Lanes) -> EventBlock:
    ops = run.ops
    key, uniq = _keys(ops["device"], ops["stream"], ops["category"], ops["name"], ops["op_type"])
    heads = []
    for device, stream, cat, name, op_type in uniq:
        pid, tid = lanes.lane(str(device), str(stream))
        args = {"type": str(op_type)} if str(op_type) != str(name) else None
        heads.append(_head("X", pid, tid, str(cat) or "op", str(name), args))
    return EventBlock(heads, key, ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy())


def span_block(run: Run, lanes: Lanes) -> EventBlock:
    sp = run.spans
    key, uniq = _keys(sp["tid"], sp["kind"], sp["name"])
    heads = [_head("X", lanes.host_pid, int(tid), str(kind), str(name)) for tid, kind, name in uniq]
    return EventBlock(heads, key, sp["start_ns"].to_numpy(), sp["dur_ns"].to_numpy())


def step_block(run: Run, lanes: Lanes) -> EventBlock:
    st = run.steps
    heads = [_head("X", lanes.host_pid, STEP_TID, "step", f"step {int(s)}", {"step": int(s)}) for s in st["step"]]
    return EventBlock(heads, np.arange(len(st)), st["start_ns"].to_numpy(),
                      (st["end_ns"] - st["start_ns"]).to_numpy())


def instant_block(run: Run, lanes: Lanes) -> EventBlock:
    ins = run.instants
    key, uniq = _keys(ins["tid"], ins["kind"], ins["name"])
    heads = [_head("i", lanes.host_pid, int(tid), str(kind), str(name), extra=',"s":"t"') for tid, kind, name in uniq]
    return EventBlock(heads, key, ins["time_ns"].to_numpy(), None)


def counter_blocks(run: Run, lanes: Lanes) -> Iterable[EventBlock]:
    """C events: one series per (source, device, metric); queue sizes as `queue <name>` series."""
    c = run.counters
    if len(c):
        key, uniq = _keys(c["source"], c["device"], c["metric"])
        vals = c["value"].to_numpy()
        yield from _value_blocks(lanes, key, uniq, c["time_ns"].to_numpy(), vals,
                                 lambda u: (f"{u[2]} ({u[1]})" if u[1] not in ("", "host") else str(u[2]), "value"))
    q = run.queues
    if len(q):
        key, uniq = _keys(q["queue"])
        yield from _value_blocks(lanes, key, uniq, q["time_ns"].to_numpy(), q["size"].to_numpy().astype(np.float64),
                                 lambda u: (f"queue {u[0]}", "size"))


def _value_blocks(lanes: Lanes, key: np.ndarray, uniq: list, t: np.ndarray, values: np.ndarray, label) -> Iterable[EventBlock]:
    """Counter values differ per event, so each distinct value gets its own head (values repeat a lot)."""
    vkey, vuniq = _keys(key, values)
    heads = []
    for k, v in vuniq:
        name, field = label(uniq[int(k)])
        heads.append(_head("C", lanes.host_pid, 0, "counter", name, {field: _num(v)}))
    yield EventBlock(heads, vkey, t, None)


def _num(v: float):
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else round(float(v), 6)


def flow_block(run: Run, lanes: Lanes) -> list[dict]:
    """s / f flow events from a host launch to the device op with the same correlation id."""
    ops = run.ops[run.ops["correlation"] >= 0]
    if len(ops) == 0:
        return []
    host = ops[ops["device"] == "cpu"].drop_duplicates("correlation")
    dev = ops[ops["device"] != "cpu"].drop_duplicates("correlation")
    m = host.merge(dev, on="correlation", suffixes=("_h", "_d"))
    out = []
    for r in m.itertuples(index=False):
        hp, ht = lanes.lane("cpu", str(r.stream_h))
        dp, dt = lanes.lane(str(r.device_d), str(r.stream_d))
        cid = int(r.correlation)
        out.append({"ph": "s", "id": cid, "pid": hp, "tid": ht, "ts": r.start_ns_h / 1000, "cat": "launch", "name": "launch"})
        out.append({"ph": "f", "id": cid, "pid": dp, "tid": dt, "ts": r.start_ns_d / 1000, "cat": "launch",
                    "name": "launch", "bp": "e"})
    return out


def write_chrome_trace(run: Run, path: Path, gzip_output: bool = False) -> Path:
    """Write the run's timeline; returns the path written (with .gz when compressed)."""
    path = Path(path)
    if gzip_output and path.suffix != ".gz":
        path = path.with_name(path.name + ".gz")
    lanes = Lanes(run)
    opener = (lambda p: gzip.open(p, "wb", compresslevel=3)) if gzip_output else DirectFile
    tmp = temp_path(path)
    try:
        with opener(tmp) as f:
            f.write(b'{"traceEvents":[\n')
            buffer = np.empty(BUFFER_BYTES, dtype=np.uint8) if _trace_rows is not None else None
            for block in (step_block(run, lanes), span_block(run, lanes), op_block(run, lanes), instant_block(run, lanes),
                          *counter_blocks(run, lanes)):
                write_block(f, block, buffer)
            tail_events = flow_block(run, lanes) + lanes.meta
            f.write(",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in tail_events).encode())
            other = {"tool": "profview", "rank": run.rank, "data_origin": run.info.get("data_origin", "profview"),
                     "origin_unix_ns": run.info.get("clock", {}).get("origin_unix_ns", 0)}
            f.write(b'\n],"displayTimeUnit":"ms","otherData":' + json.dumps(other).encode() + b"}\n")
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path

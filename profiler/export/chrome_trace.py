"""Chrome Trace Event Format writer (Perfetto, chrome://tracing, speedscope).

Millions of events are written without a Python loop per event: events that share everything
but their times (phase letter, pid, tid, category, name, args) share one pre-encoded row head,
and the times are microsecond decimals on a 1/1024 µs grid (see `grid_times`: exact in float64). The rows
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
from profiler.model import Run
from profiler.kernels.native import native
from profiler.export.direct_file import DirectFile

STEP_TID = 1_000_000          # the lane that shows steps on the host process
TS_WIDTH = 28                 # the longest time: "-" + 16 integer digits + "." + 10 decimals (any int64 ns)
DUR_WIDTH = 28
INT_WIDTH = 17                # sign and integer digits
FRAC_DIGITS = 10              # k / 1024 has at most 10 decimals
MIN_DECIMALS = 3


_TRIPLETS = np.array([list(f"{i:03d}".encode()) for i in range(1000)], dtype=np.uint8)   # "000".."999"


def _floor_divmod(v: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    return np.floor_divide(v, d), np.mod(v, d)


def grid_parts(q: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, r) with ns = 125 q + r, 0 <= r < 250 -> (integer µs part, fraction in 1024ths), as the C kernel."""
    carry = r >= 125
    r = np.where(carry, r - 125, r)
    q = q + carry
    a, b = _floor_divmod(q, 8)
    f = 128 * b + (r * 128 + 62) // 125
    return a + f // 1024, f % 1024


def grid_times(ts_ns: np.ndarray, dur_ns: Optional[np.ndarray] = None):
    """The trace's times: ns rounded to the 1/1024 µs grid, as (integer part, 1024ths) of the start
    and, with durations, of the duration derived from the rounded start and the rounded end.

    Why a binary grid: every value written is then exactly a float64, and so are the sums a reader
    makes (ts + dur), so spans that touch in nanoseconds touch exactly in every viewer.
    """
    q1, r1 = _floor_divmod(np.asarray(ts_ns, dtype=np.int64), 125)
    ip, frac = grid_parts(q1, r1)
    if dur_ns is None:
        return (ip, frac), None
    q2, r2 = _floor_divmod(np.asarray(dur_ns, dtype=np.int64), 125)
    eip, efrac = grid_parts(q1 + q2, r1 + r2)
    dip, dfrac = eip - ip, efrac - frac
    borrow = dfrac < 0
    return (ip, frac), (dip - borrow, np.where(borrow, dfrac + 1024, dfrac))


def grid_us(ts_ns: np.ndarray) -> np.ndarray:
    """The float64 value a reader parses for these times (µs)."""
    (ip, frac), _ = grid_times(ts_ns)
    return ip + frac / 1024.0


def grid_decimal(ip: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """ip + frac / 1024 as fixed-width text: (n, 28) uint8, sign and integer digits right-aligned in
    17 columns, ".", 10 decimals with trailing zeros past the third blanked (the C kernel's
    grid_decimal, with the padding still in: the caller drops the spaces)."""
    ip, frac = np.asarray(ip, dtype=np.int64), np.asarray(frac, dtype=np.int64)
    n = len(ip)
    neg = ip < 0
    whole = np.where(neg, np.where(frac > 0, -(ip + 1), -ip), ip)
    part = np.where(neg & (frac > 0), 1024 - frac, frac)
    out = np.full((n, TS_WIDTH), ord(" "), dtype=np.uint8)
    # integer digits, three at a time from the least significant
    digits = np.empty((n, 18), dtype=np.uint8)
    rest = whole
    for g in range(6):
        rest, low = np.divmod(rest, 1000)
        digits[:, 18 - 3 * (g + 1):18 - 3 * g] = _TRIPLETS[low]
    n_digits = np.ones(n, dtype=np.int64)
    for k in range(1, 17):
        n_digits += whole >= 10 ** k
    cols = np.arange(INT_WIDTH)[None, :]
    first = INT_WIDTH - n_digits                    # column of the first digit
    body = digits[:, 1:]                            # 17 columns
    out[:, :INT_WIDTH] = np.where(cols >= first[:, None], body, ord(" "))
    if neg.any():
        rows = np.flatnonzero(neg)
        out[rows, first[rows] - 1] = ord("-")
    out[:, INT_WIDTH] = ord(".")
    f = part * 9765625                              # 10 decimals of part / 1024
    fd = np.empty((n, 12), dtype=np.uint8)
    for g in range(4):
        f, low = np.divmod(f, 1000)
        fd[:, 12 - 3 * (g + 1):12 - 3 * g] = _TRIPLETS[low]
    frac_text = fd[:, 2:]                           # 10 columns
    zeros = np.zeros(n, dtype=np.int64)             # trailing zeros that may go (at most 7)
    still = np.ones(n, dtype=bool)
    for c in range(FRAC_DIGITS - 1, MIN_DECIMALS - 1, -1):
        still &= frac_text[:, c] == ord("0")
        zeros += still
    keep_cols = np.arange(FRAC_DIGITS)[None, :] < (FRAC_DIGITS - zeros)[:, None]
    out[:, INT_WIDTH + 1:] = np.where(keep_cols, frac_text, ord(" "))
    return out


def fixed_decimal(ns: np.ndarray, width: int = TS_WIDTH) -> np.ndarray:
    """ns times as the trace writes them, fixed-width (spaces are padding): (n, width) uint8."""
    (ip, frac), _ = grid_times(ns)
    text = grid_decimal(ip, frac)
    return text if width == TS_WIDTH else np.hstack([np.full((len(text), width - TS_WIDTH), ord(" "), np.uint8), text])


@dataclass(frozen=True)
class Head:
    """What events of one row head share: phase letter, lane, category, name, args."""

    ph: str
    pid: int
    tid: int
    cat: str
    name: str
    args: Optional[dict] = None
    extra: str = ""

    def encoded(self) -> bytes:
        return _head(self.ph, self.pid, self.tid, self.cat, self.name, self.args, self.extra)


@dataclass
class EventBlock:
    """Events sharing a row head: heads[k] for events whose key is k (specs[k] says what it holds)."""

    heads: list[bytes]
    key: np.ndarray          # index into heads, per event
    ts_ns: np.ndarray
    dur_ns: Optional[np.ndarray]   # None for instants / flow events
    tail: bytes = b"},\n"
    specs: Optional[list[Head]] = None
    step: Optional[np.ndarray] = None   # the step of each event (-1 outside every step), when known


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


def block(specs: list[Head], key: np.ndarray, ts_ns: np.ndarray, dur_ns: Optional[np.ndarray],
          step: Optional[np.ndarray] = None) -> EventBlock:
    return EventBlock([h.encoded() for h in specs], key, ts_ns, dur_ns, specs=specs, step=step)


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
    start_parts, dur_parts = grid_times(ts[rows], None if dur is None else dur[rows])
    ts_text = _widen(grid_decimal(*start_parts), ts_width)
    dur_text = _widen(grid_decimal(*dur_parts), dur_width) if dur is not None else None
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


def _widen(text: np.ndarray, width: int) -> np.ndarray:
    if width < TS_WIDTH:
        raise ValueError(f"the field width must be at least {TS_WIDTH}")
    return text if width == TS_WIDTH else np.hstack([np.full((len(text), width - TS_WIDTH), _SPACE, np.uint8), text])


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
    specs = []
    for device, stream, cat, name, op_type in uniq:
        pid, tid = lanes.lane(str(device), str(stream))
        args = {"type": str(op_type)} if str(op_type) != str(name) else None
        specs.append(Head("X", pid, tid, str(cat) or "op", str(name), args))
    return block(specs, key, ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy(), ops["step"].to_numpy())


def span_block(run: Run, lanes: Lanes) -> EventBlock:
    sp = run.spans
    key, uniq = _keys(sp["tid"], sp["kind"], sp["name"])
    specs = [Head("X", lanes.host_pid, int(tid), str(kind), str(name)) for tid, kind, name in uniq]
    return block(specs, key, sp["start_ns"].to_numpy(), sp["dur_ns"].to_numpy())


def step_block(run: Run, lanes: Lanes) -> EventBlock:
    st = run.steps
    specs = [Head("X", lanes.host_pid, STEP_TID, "step", f"step {int(s)}", {"step": int(s)}) for s in st["step"]]
    return block(specs, np.arange(len(st)), st["start_ns"].to_numpy(), (st["end_ns"] - st["start_ns"]).to_numpy(),
                 st["step"].to_numpy())


def instant_block(run: Run, lanes: Lanes) -> EventBlock:
    ins = run.instants
    key, uniq = _keys(ins["tid"], ins["kind"], ins["name"])
    specs = [Head("i", lanes.host_pid, int(tid), str(kind), str(name), extra=',"s":"t"') for tid, kind, name in uniq]
    return block(specs, key, ins["time_ns"].to_numpy(), None)


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
    specs = []
    for k, v in vuniq:
        name, field = label(uniq[int(k)])
        specs.append(Head("C", lanes.host_pid, 0, "counter", name, {field: _num(v)}))
    yield block(specs, vkey, t, None)


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
        out.append({"ph": "s", "id": cid, "pid": hp, "tid": ht, "ts": r.start_ns_h / 1000, "cat": "launch", "name": "launch",
                    "_ns": int(r.start_ns_h)})
        out.append({"ph": "f", "id": cid, "pid": dp, "tid": dt, "ts": r.start_ns_d / 1000, "cat": "launch",
                    "name": "launch", "bp": "e", "_ns": int(r.start_ns_d)})
    return out


def merge_blocks(blocks: list[EventBlock], with_dur: bool) -> EventBlock:
    """One block of several (heads renumbered), for writing them in one order."""
    specs: list[Head] = []
    keys, ts, dur, step = [], [], [], []
    for b in blocks:
        keys.append(np.asarray(b.key, dtype=np.int64) + len(specs))
        specs += b.specs
        ts.append(np.asarray(b.ts_ns, dtype=np.int64))
        if with_dur:
            dur.append(np.asarray(b.dur_ns, dtype=np.int64))
        step.append(np.full(len(b.key), -1, np.int64) if b.step is None else np.asarray(b.step, dtype=np.int64))
    cat = (lambda parts: np.concatenate(parts) if parts else np.empty(0, np.int64))
    return block(specs, cat(keys), cat(ts), cat(dur) if with_dur else None, cat(step))


def lane_codes(specs: list[Head]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Each head's lane as a dense code (lanes sorted by pid, tid), and the lanes."""
    pairs = sorted({(h.pid, h.tid) for h in specs})
    index = {pair: i for i, pair in enumerate(pairs)}
    return np.array([index[(h.pid, h.tid)] for h in specs], dtype=np.int64), pairs


def thread_order(lane: np.ndarray, ts: np.ndarray, dur: Optional[np.ndarray]) -> np.ndarray:
    """The order rows are written in: by lane, then start, then longest first (parents before the
    spans nested in them), so readers that trust the file's order nest every lane correctly.

    One stable sort of an int64 key (lane in the high bits, start in the low) when it fits, else a
    radix sort by lane and, per lane, a stable sort by start where the lane is not sorted yet;
    recording order is sorted runs (one per block), which the stable sort (timsort) merges. Ties
    are settled among the few tied rows only.
    """
    n = len(ts)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    t_min, t_max = int(ts.min()), int(ts.max())
    bits = max(int(t_max - t_min).bit_length(), 1)
    if lane.min() >= 0 and int(lane.max()).bit_length() + bits <= 62:
        # one int64 key (lane above the time): blocks are sorted runs, which the stable sort merges
        key = lane.astype(np.int64) << bits
        key += ts
        key -= t_min
        order = np.argsort(key, kind="stable")
        lanes_sorted = lane[order]
        t = ts[order]
    else:
        small = lane.astype(np.int16) if lane.max() < 2**15 and lane.min() >= 0 else lane
        order = np.argsort(small, kind="stable")
        lanes_sorted = small[order]
        cuts = np.concatenate([[0], np.flatnonzero(lanes_sorted[1:] != lanes_sorted[:-1]) + 1, [n]])
        t = ts[order]
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            seg = t[a:b]
            if b - a > 1 and not bool(np.all(seg[1:] >= seg[:-1])):
                sub = np.argsort(seg, kind="stable")
                order[a:b] = order[a:b][sub]
                t[a:b] = seg[sub]
    if dur is not None and n > 1:
        tied = np.flatnonzero((t[1:] == t[:-1]) & (lanes_sorted[1:] == lanes_sorted[:-1]))
        if len(tied):
            rows = np.unique(np.concatenate([tied, tied + 1]))      # positions in tie groups, ascending
            sub = order[rows]
            order[rows] = sub[np.lexsort((-dur[sub], t[rows], lanes_sorted[rows]))]
    return order


@dataclass
class TimelineEvents:
    """Every event of a run's timeline, once, for both the Chrome trace and the event file."""

    complete: EventBlock            # X events: steps, spans, ops
    complete_order: np.ndarray      # rows of `complete` by lane, start, longest first
    points: EventBlock              # instants and counter values (no duration)
    points_order: np.ndarray
    flows: list[dict]
    lanes: Lanes
    lane_of_head: np.ndarray        # lane code of each head of `complete` + `points` (complete's first)
    lane_pairs: list[tuple[int, int]]


def timeline_events(run: Run) -> TimelineEvents:
    """Group a run's events by row head and put them in the trace's order."""
    lanes = Lanes(run)
    complete = merge_blocks([_stepped(b, run) for b in (step_block(run, lanes), span_block(run, lanes),
                                                        op_block(run, lanes))], with_dur=True)
    points = merge_blocks([_stepped(b, run) for b in (instant_block(run, lanes), *counter_blocks(run, lanes))],
                          with_dur=False)
    flows = flow_block(run, lanes)
    codes, pairs = lane_codes(complete.specs + points.specs)
    n_complete = len(complete.specs)
    return TimelineEvents(
        complete=complete, complete_order=thread_order(codes[:n_complete][complete.key], complete.ts_ns, complete.dur_ns),
        points=points, points_order=thread_order(codes[n_complete:][points.key], points.ts_ns, None),
        flows=flows, lanes=lanes, lane_of_head=codes, lane_pairs=pairs)


def _stepped(b: EventBlock, run: Run) -> EventBlock:
    """The block with the step of each row: its source's (ops, steps), else the step containing its start."""
    if b.step is None:
        from profiler.kernels.intervals import assign_steps

        b.step = assign_steps(np.asarray(b.ts_ns, dtype=np.int64), run.steps)
    return b


def write_ordered(f: BinaryIO, b: EventBlock, order: np.ndarray, buffer: Optional[np.ndarray] = None) -> int:
    """Write a block's rows in `order`."""
    n = len(b.key)
    if n == 0:
        return 0
    key = np.ascontiguousarray(b.key, dtype=np.int64)
    heads = b"".join(b.heads)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in b.heads])]).astype(np.int64)
    ts = np.ascontiguousarray(b.ts_ns, dtype=np.int64)
    dur = None if b.dur_ns is None else np.ascontiguousarray(b.dur_ns, dtype=np.int64)
    for text in row_texts(heads, offsets, key, ts, dur, np.ascontiguousarray(order, dtype=np.int64), buffer, b.tail):
        f.write(text)
    return n


def write_chrome_trace(run: Run, path: Path, gzip_output: bool = False,
                       events: Optional[TimelineEvents] = None) -> Path:
    """Write the run's timeline; returns the path written (with .gz when compressed).

    Complete events come sorted by lane, then start, longest first; then instants and counter
    values, by lane and time; then flow events and the metadata.
    """
    path = Path(path)
    if gzip_output and path.suffix != ".gz":
        path = path.with_name(path.name + ".gz")
    ev = events if events is not None else timeline_events(run)
    opener = (lambda p: gzip.open(p, "wb", compresslevel=3)) if gzip_output else DirectFile
    tmp = path.with_name(path.name + ".tmp")
    with opener(tmp) as f:
        f.write(b'{"traceEvents":[\n')
        buffer = np.empty(BUFFER_BYTES, dtype=np.uint8) if _trace_rows is not None else None
        write_ordered(f, ev.complete, ev.complete_order, buffer)
        write_ordered(f, ev.points, ev.points_order, buffer)
        flows = [{k: v for k, v in e.items() if k != "_ns"} for e in ev.flows]
        tail_events = flows + ev.lanes.meta
        f.write(",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in tail_events).encode())
        other = {"tool": "profview", "rank": run.rank, "data_origin": run.info.get("data_origin", "profview"),
                 "origin_unix_ns": run.info.get("clock", {}).get("origin_unix_ns", 0)}
        f.write(b'\n],"displayTimeUnit":"ms","otherData":' + json.dumps(other).encode() + b"}\n")
    tmp.replace(path)
    return path

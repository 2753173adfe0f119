"""The timeline's event model: a run's events grouped once by row head and put in the timeline's order,
as the event file (`event_file.py`, the timeline's one saved form, from which the Chrome trace is
rendered) and the merged cluster timeline write them (docs/architecture.md, "The timeline").

Events that share everything but their times (phase letter, lane, category, name, args) share one
`Head`; an `EventBlock` holds, per event, the index of its head, its start, duration and step.
Nothing here formats text: the writers encode heads and times their own way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.intervals import assign_steps
from profiler.kernels.nesting import ascending, position_dtype, positions_passing
from profiler.model import Run

STEP_TID = 1_000_000  # the lane that shows steps on the host process
#: Rows worked at a time where a step would otherwise make arrays of the whole run's rows
CHUNK_ROWS = 1 << 18


@dataclass(frozen=True)
class Head:
    """What events of one row head share: phase letter, lane (pid, tid), category, name, args."""

    ph: str
    pid: int
    tid: int
    cat: str
    name: str
    args: Optional[dict] = None


@dataclass
class EventBlock:
    """Events grouped by head: `specs[key[i]]` is what event i shares with others."""

    specs: list[Head]
    key: np.ndarray  # index into specs, per event
    ts_ns: np.ndarray
    dur_ns: Optional[np.ndarray]  # None for instants and counter values
    step: Optional[np.ndarray] = None  # the step of each event (-1 outside every step), when known


def _keys(*cols, chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, list[tuple]]:
    """Dense key per row for the distinct combinations of the given columns, with those combinations."""
    n = len(cols[0]) if cols else 0
    if n == 0:
        return np.empty(0, np.int64), []
    decoded = [codes_and_labels(col) for col in cols]

    def combined(rows: slice) -> np.ndarray:
        values = np.zeros(len(decoded[0][0][rows]), dtype=np.int64)
        for codes, uniques in decoded:
            values *= len(uniques) + 1
            values += codes[rows]
        return values

    key, first = _dense(combined, n, chunk_rows)
    combos = [tuple(u[c[i]] for c, u in decoded) for i in first.tolist()]
    return key, combos


def _dense(values_of, n: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes (first-seen order) of int64 values given a chunk of rows at a time (`values_of(slice)`),
    spilled, and the row of each code's first occurrence: as pd.factorize numbers them, without a hash table
    and codes of the whole rows."""
    key = spill.empty(n, np.int64)
    met = np.empty(0, np.int64)  # the values met so far, sorted
    met_code = np.empty(0, np.int64)
    first = []
    for lo in range(0, n, chunk_rows):
        values, at, inverse = np.unique(values_of(slice(lo, lo + chunk_rows)), return_index=True, return_inverse=True)
        where = np.minimum(np.searchsorted(met, values), max(len(met) - 1, 0))
        seen = met[where] == values if len(met) else np.zeros(len(values), bool)
        new = np.flatnonzero(~seen)
        new = new[np.argsort(at[new])]  # numbered in the order they are first met
        code = np.empty(len(values), np.int64)
        code[seen] = met_code[where[seen]]
        code[new] = len(met) + np.arange(len(new))
        first.append(at[new] + lo)
        key[lo : lo + len(inverse)] = code[inverse.reshape(-1)]
        by_value = np.argsort(np.concatenate([met, values[new]]), kind="stable")
        met, met_code = np.concatenate([met, values[new]])[by_value], np.concatenate([met_code, code[new]])[by_value]
        spill.drop_resident()
    return key, np.concatenate(first)


class Lanes:
    """pid / tid numbering of a run's host threads and device streams, with their names and sort
    order as metadata (M) events, in the order the lanes were met."""

    def __init__(self, run: Run) -> None:
        self.rank = run.rank
        self.host_pid = run.rank
        self.meta: list[dict] = [
            {
                "ph": "M",
                "pid": self.host_pid,
                "tid": 0,
                "name": "process_name",
                "args": {"name": f"host (rank {run.rank})"},
            },
            {"ph": "M", "pid": self.host_pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": 0}},
            {"ph": "M", "pid": self.host_pid, "tid": STEP_TID, "name": "thread_name", "args": {"name": "steps"}},
            {"ph": "M", "pid": self.host_pid, "tid": STEP_TID, "name": "thread_sort_index", "args": {"sort_index": -1}},
        ]
        self.thread_tid = {str(n): int(t) for t, n in zip(run.threads["tid"], run.threads["name"])}
        for name, tid in self.thread_tid.items():
            self.meta.append(
                {"ph": "M", "pid": self.host_pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
            )
        self.device_pid: dict[str, int] = {}
        self.stream_tid: dict[tuple[str, str], int] = {}

    def host_lane(self, stream: str) -> int:
        tid = self.thread_tid.get(stream)
        if tid is None:
            tid = self.thread_tid[stream] = len(self.thread_tid) + 1
            self.meta.append(
                {"ph": "M", "pid": self.host_pid, "tid": tid, "name": "thread_name", "args": {"name": stream}}
            )
        return tid

    def device_lane(self, device: str, stream: str) -> tuple[int, int]:
        pid = self.device_pid.get(device)
        if pid is None:
            pid = self.device_pid[device] = 1000 * (self.rank + 1) + len(self.device_pid)
            self.meta.append(
                {
                    "ph": "M",
                    "pid": pid,
                    "tid": 0,
                    "name": "process_name",
                    "args": {"name": f"{device} (rank {self.rank})"},
                }
            )
            self.meta.append(
                {
                    "ph": "M",
                    "pid": pid,
                    "tid": 0,
                    "name": "process_sort_index",
                    "args": {"sort_index": len(self.device_pid)},
                }
            )
        tid = self.stream_tid.get((device, stream))
        if tid is None:
            tid = int(stream) if str(stream).isdigit() else 100_000 + len(self.stream_tid)
            self.stream_tid[(device, stream)] = tid
            self.meta.append(
                {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": f"stream {stream}"}}
            )
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
    return EventBlock(specs, key, ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy(), ops["step"].to_numpy())


def span_block(run: Run, lanes: Lanes) -> EventBlock:
    sp = run.spans
    key, uniq = _keys(sp["tid"], sp["kind"], sp["name"])
    specs = [Head("X", lanes.host_pid, int(tid), str(kind), str(name)) for tid, kind, name in uniq]
    return EventBlock(specs, key, sp["start_ns"].to_numpy(), sp["dur_ns"].to_numpy())


def step_block(run: Run, lanes: Lanes) -> EventBlock:
    st = run.steps
    specs = [Head("X", lanes.host_pid, STEP_TID, "step", f"step {int(s)}", {"step": int(s)}) for s in st["step"]]
    return EventBlock(
        specs,
        np.arange(len(st)),
        st["start_ns"].to_numpy(),
        (st["end_ns"] - st["start_ns"]).to_numpy(),
        st["step"].to_numpy(),
    )


def instant_block(run: Run, lanes: Lanes) -> EventBlock:
    ins = run.instants
    key, uniq = _keys(ins["tid"], ins["kind"], ins["name"])
    specs = [Head("i", lanes.host_pid, int(tid), str(kind), str(name)) for tid, kind, name in uniq]
    return EventBlock(specs, key, ins["time_ns"].to_numpy(), None)


def counter_blocks(run: Run, lanes: Lanes) -> Iterable[EventBlock]:
    """C events: one series per (source, device, metric); queue sizes as `queue <name>` series."""
    c = run.counters
    if len(c):
        key, uniq = _keys(c["source"], c["device"], c["metric"])
        vals = c["value"].to_numpy()
        yield _value_block(
            lanes,
            key,
            uniq,
            c["time_ns"].to_numpy(),
            vals,
            lambda u: (f"{u[2]} ({u[1]})" if u[1] not in ("", "host") else str(u[2]), "value"),
        )
    q = run.queues
    if len(q):
        key, uniq = _keys(q["queue"])
        yield _value_block(
            lanes,
            key,
            uniq,
            q["time_ns"].to_numpy(),
            q["size"].to_numpy().astype(np.float64),
            lambda u: (f"queue {u[0]}", "size"),
        )


def _value_block(lanes: Lanes, key: np.ndarray, uniq: list, t: np.ndarray, values: np.ndarray, label) -> EventBlock:
    """Counter values differ per event, so each distinct value gets its own head (values repeat a lot)."""
    vkey, vuniq = _keys(key, values)
    specs = []
    for k, v in vuniq:
        name, field = label(uniq[int(k)])
        specs.append(Head("C", lanes.host_pid, 0, "counter", name, {field: _num(v)}))
    return EventBlock(specs, vkey, t, None)


def _num(v: float):
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else round(float(v), 6)


FLOW_CATEGORY = FLOW_NAME = "launch"  # what a flow point is called in the trace


@dataclass
class FlowPoints:
    """The flows from each host launch to the device op with its correlation id: an array per field, a row per
    launch (spilled), whose two points are, in the Chrome trace's order, an `s` at the launch then its `f` at
    the device op."""

    flow_id: np.ndarray  # the correlation id
    host_ns: np.ndarray  # the launch's start
    device_ns: np.ndarray  # the device op's start
    step: np.ndarray  # the launching op's step (int32)
    host_lane: np.ndarray  # the launch's lane: an index into `lanes`
    device_lane: np.ndarray  # the device op's lane
    lanes: list[tuple[int, int]]  # the (pid, tid) of the points' lanes, in the order the points meet them

    def __len__(self) -> int:
        """The number of points (two per launch)."""
        return 2 * len(self.flow_id)


def interleaved(at_launch: np.ndarray, at_device: np.ndarray, lo: int = 0, hi: Optional[int] = None) -> np.ndarray:
    """Flow points [lo, hi) (lo even) of a field given per launch for the `s` and for the `f` points."""
    hi = 2 * len(at_launch) if hi is None else hi
    out = np.empty(hi - lo, dtype=np.result_type(at_launch, at_device))
    out[0::2] = at_launch[lo // 2 : (hi + 1) // 2]
    out[1::2] = at_device[lo // 2 : hi // 2]
    return out


def flow_points(run: Run, lanes: Lanes, chunk_rows: int = CHUNK_ROWS) -> FlowPoints:
    """The flow points of the run's launches: each correlation's first host op with its first device op, in
    the host ops' order (lanes met in the order the points are, host then device). Every array per launch is
    made a chunk at a time into spill files: a big trace has millions of launches."""
    ops = run.ops
    correlation = ops["correlation"].to_numpy()
    host, device = _flow_ends(ops, chunk_rows)
    flow_id, host = _first_of_each_id(correlation, host, chunk_rows)  # each id's first host row, by id
    device = _first_rows_with(correlation, device, flow_id, chunk_rows)
    if not ascending(host, rows=chunk_rows):  # ids that do not ascend along the rows: back to row order
        in_rows = np.argsort(host)
        flow_id, host, device = flow_id[in_rows], host[in_rows], device[in_rows]
    launched = positions_passing(len(device), lambda at: device[at] >= 0, chunk_rows)
    host, flow_id, device = (spill.gathered(values, launched) for values in (host, flow_id, device))
    host_lane, device_lane, met = _flow_lanes(ops, host, device, lanes, chunk_rows)
    start, step = ops["start_ns"].to_numpy(), ops["step"].to_numpy()
    return FlowPoints(
        flow_id=flow_id,
        host_ns=spill.gathered(start, host, np.int64),
        device_ns=spill.gathered(start, device, np.int64),
        step=spill.gathered(step, host, np.int32),
        host_lane=host_lane,
        device_lane=device_lane,
        lanes=met,
    )


def _first_of_each_id(correlation: np.ndarray, rows: np.ndarray, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct correlation ids of `rows` (ascending) and the first of `rows` with each. Without a sort where
    the ids already ascend along the rows (a trace's launches, usually): a big trace's millions of rows then
    take no sort's working arrays."""
    ids = spill.gathered(correlation, rows, np.int64)
    if ascending(ids, strictly=True, rows=chunk_rows):
        return ids, rows
    distinct, first = np.unique(ids, return_index=True)
    return distinct, rows[first]


def _first_rows_with(correlation: np.ndarray, rows: np.ndarray, ids: np.ndarray, chunk_rows: int) -> np.ndarray:
    """For each of `ids` (ascending, distinct), the first of `rows` (ascending) with that correlation id, -1 for
    none: a chunk of rows at a time, each id's first kept from the first chunk that has it."""
    first = spill.filled(len(ids), np.int64, -1, rows=chunk_rows)
    if not len(ids):
        return first
    for at in spill.chunks(len(rows), chunk_rows):
        chunk = rows[at]
        of_chunk = correlation[chunk]
        place = np.minimum(np.searchsorted(ids, of_chunk), len(ids) - 1)
        known = ids[place] == of_chunk
        place, at_first = np.unique(place[known], return_index=True)
        new = first[place] < 0
        first[place[new]] = chunk[known][at_first[new]]
        spill.drop_resident()
    return first


def _flow_ends(ops: pd.DataFrame, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the ops with a correlation id on the host, and on a device (ascending), found a chunk at a time
    into spill files."""
    codes, labels = codes_and_labels(ops["device"])
    on_host = np.array([v == "cpu" for v in labels.tolist()] + [False])  # a missing device (-1) is no host
    correlation = ops["correlation"].to_numpy()

    def rows_where(cpu: bool) -> np.ndarray:
        return positions_passing(len(ops), lambda at: (correlation[at] >= 0) & (on_host[codes[at]] == cpu), chunk_rows)

    return rows_where(True), rows_where(False)


def _flow_lanes(
    ops: pd.DataFrame, host: np.ndarray, device: np.ndarray, lanes: Lanes, chunk_rows: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Each launch's host and device lane, as indices into the distinct (pid, tid) in the order the points
    meet them, and those; `lanes` numbers the texts in the order the points meet them."""
    host_stream, host_streams = _texts_at(ops["stream"], host, chunk_rows)
    device_name, devices = _texts_at(ops["device"], device, chunk_rows)
    stream, streams = _texts_at(ops["stream"], device, chunk_rows)
    device_pair = spill.chunked(
        len(device), np.int32, lambda at: device_name[at] * len(streams) + stream[at], rows=chunk_rows
    )
    # where each text first meets a point: launch i's host point is point 2i, its device point 2i + 1
    met_at = np.concatenate(
        [
            2 * _first_met(host_stream, len(host_streams), chunk_rows),
            2 * _first_met(device_pair, len(devices) * len(streams), chunk_rows) + 1,
        ]
    )
    texts = [("cpu", s) for s in host_streams] + [(d, s) for d in devices for s in streams]
    lane_of_text = np.zeros(len(texts), np.int32)
    met: dict[tuple[int, int], int] = {}
    for text in np.argsort(met_at, kind="stable").tolist():
        if met_at[text] < 2 * len(host):  # a text some point has
            lane_of_text[text] = met.setdefault(lanes.lane(*texts[text]), len(met))
    n_host = len(host_streams)
    return (
        spill.chunked(len(host), np.int32, lambda at: lane_of_text[host_stream[at]], rows=chunk_rows),
        spill.chunked(len(device), np.int32, lambda at: lane_of_text[n_host + device_pair[at]], rows=chunk_rows),
        list(met),
    )


def _texts_at(column: pd.Series, rows: np.ndarray, chunk_rows: int) -> tuple[np.ndarray, list[str]]:
    """The code (int32, spilled) of each of `rows` among the distinct texts (`str(value)`) of the column, and those
    texts: from the column's codes (`codes_and_labels`) a chunk at a time, without a text or a hash per row."""
    codes, labels = codes_and_labels(column)
    text_codes, texts = pd.factorize(np.array([str(u) for u in [*labels, np.nan]], dtype=object))  # -1: missing
    text_code = text_codes.astype(np.int32)
    text_of_row = spill.chunked(len(rows), np.int32, lambda at: text_code[codes[rows[at]]], chunk_rows, along=rows)
    return text_of_row, list(texts)


def _first_met(values: np.ndarray, n: int, chunk_rows: int) -> np.ndarray:
    """The first position of each of 0..n-1 in `values` (len(values) for one not there), a chunk at a time."""
    first = np.full(n, len(values), np.int64)
    for lo in range(0, len(values), chunk_rows):
        met, at = np.unique(values[lo : lo + chunk_rows], return_index=True)
        first[met] = np.minimum(first[met], at + lo)
    return first


def merge_blocks(blocks: list[EventBlock], with_dur: bool, chunk_rows: int = CHUNK_ROWS) -> EventBlock:
    """One block of several (heads renumbered), for writing them in one order: its arrays spilled (kept while
    the rows are sorted and written), keys and steps int32 as the event file stores them, not int64."""
    head = position_dtype(sum(len(b.specs) for b in blocks))
    specs: list[Head] = []
    offsets = []
    for b in blocks:
        offsets.append(len(specs))
        specs += b.specs
    keys = _joined([b.key for b in blocks], head, chunk_rows, offsets)
    ts = _joined([b.ts_ns for b in blocks], np.int64, chunk_rows)
    dur = _joined([b.dur_ns for b in blocks], np.int64, chunk_rows) if with_dur else None
    steps = [np.full(len(b.key), -1, np.int32) if b.step is None else b.step for b in blocks]
    return EventBlock(specs, keys, ts, dur, _joined(steps, np.int32, chunk_rows))


def _joined(parts: list, dtype, chunk_rows: int, add: Optional[list[int]] = None) -> np.ndarray:
    """np.concatenate of `parts` cast to `dtype` (each plus its `add`), spilled: copied a chunk at a time, whose
    pages (the source's and the copy's) are handed back before the next."""
    out = spill.empty(sum(len(p) for p in parts), dtype)
    at = 0
    for i, part in enumerate(parts):
        for lo in range(0, len(part), chunk_rows):
            piece = out[at : at + min(chunk_rows, len(part) - lo)]
            piece[:] = np.asarray(part[lo : lo + len(piece)])  # cast as astype casts
            if add is not None:
                piece += dtype(add[i])
            at += len(piece)
            spill.drop_resident()
    return out


def lane_codes(specs: list[Head]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Each head's lane as a dense code (lanes sorted by pid, tid), and the lanes."""
    pairs = sorted({(h.pid, h.tid) for h in specs})
    index = {pair: i for i, pair in enumerate(pairs)}
    return np.array([index[(h.pid, h.tid)] for h in specs], dtype=np.int64), pairs


def rows_lane(head_lane: np.ndarray, key: np.ndarray, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
    """The lane of each row (`head_lane[key]`), int32 and spilled, gathered a chunk of rows at a time."""
    out = spill.empty(len(key), np.int32)
    for lo in range(0, len(key), chunk_rows):
        out[lo : lo + chunk_rows] = head_lane[key[lo : lo + chunk_rows]]
        spill.drop_resident()
    return out


def thread_order(
    lane: np.ndarray, ts: np.ndarray, dur: Optional[np.ndarray], chunk_rows: int = CHUNK_ROWS
) -> np.ndarray:
    """The order rows are written in: by lane, then start, then longest first (parents before the
    spans nested in them), then row, so readers that trust the file's order nest every lane correctly.

    Sorted a bucket of rows at a time (about `chunk_rows` each, spilled: it is kept while the rows are
    written): the rows are counted into buckets of (lane, start) ranges, cut at a sample of the rows, then
    each bucket is sorted on its own. No array of the whole run's rows is made but the order itself.
    """
    n = len(ts)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    key = _LaneTimeKey(lane, ts, chunk_rows)
    sample = np.sort(np.concatenate([key(at) for at in spill.sampled(n, max(1, chunk_rows // 64))]))  # ~64 a bucket
    cuts = np.unique(sample[32::32])  # buckets of ~chunk_rows / 2 rows
    order, sizes = _bucketed(lambda rows: np.searchsorted(cuts, key(rows), side="right"), n, len(cuts) + 1, chunk_rows)
    at = 0
    for size in sizes.tolist():
        bucket = order[at : at + size]
        bucket[:] = _sorted_rows(bucket, key, ts, dur)
        at += size
        spill.drop_resident()
    return order


def _bucketed(bucket_of, n: int, buckets: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows 0..n-1 put in order of their bucket (`bucket_of` a slice of rows), each bucket's in row order (a
    counting sort, a chunk of rows at a time, spilled), and the size of each bucket."""
    sizes = np.zeros(buckets, np.int64)
    for lo in range(0, n, chunk_rows):
        sizes += np.bincount(bucket_of(slice(lo, lo + chunk_rows)), minlength=buckets)
    order = spill.empty(n, position_dtype(n))
    free = np.cumsum(sizes) - sizes  # the next free position of each bucket
    for lo in range(0, n, chunk_rows):
        bucket = bucket_of(slice(lo, lo + chunk_rows))
        rows = np.argsort(bucket, kind="stable")
        bucket = bucket[rows]
        count = np.bincount(bucket, minlength=buckets)
        order[free[bucket] + np.arange(len(rows)) - (np.cumsum(count) - count)[bucket]] = rows + lo
        free += count
        spill.drop_resident()
    return order, sizes


def _sorted_rows(rows: np.ndarray, key, ts: np.ndarray, dur: Optional[np.ndarray]) -> np.ndarray:
    """`rows` (ascending) by key, start, longest first, then row; rows of one key (few: ties, or starts the key
    rounds) settled among themselves. A bucket's rows spread over the run: their keys are read a stretch of the
    columns at a time (spill.chunked along them)."""
    k = spill.chunked(len(rows), np.int64, lambda at: key(rows[at]), along=rows)
    by_key = np.argsort(k, kind="stable")
    rows, k = rows[by_key], k[by_key]
    tied = np.flatnonzero(k[1:] == k[:-1])
    if len(tied):
        at = np.unique(np.concatenate([tied, tied + 1]))  # positions in groups of one key, ascending
        sub = rows[at]
        starts = ts[sub]
        rows[at] = sub[np.lexsort((starts, k[at]) if dur is None else (-dur[sub], starts, k[at]))]
    return rows


class _LaneTimeKey:
    """An int64 per row that orders rows by (lane, start), exactly when lane and time fit in 62 bits, else by
    start rounded down (a bucket's order is settled by the starts themselves)."""

    def __init__(self, lane: np.ndarray, ts: np.ndarray, chunk_rows: int) -> None:
        self.lane, self.ts = lane, ts
        self.lanes = np.unique(
            np.concatenate([np.unique(lane[lo : lo + chunk_rows]) for lo in range(0, len(lane), chunk_rows)])
        )
        self.t_min = ts.min()
        time_bits = (int(ts.max()) - int(self.t_min)).bit_length()
        self.shift = max(0, len(self.lanes).bit_length() + time_bits - 62)
        self.lane_shift = time_bits - self.shift

    def __call__(self, rows) -> np.ndarray:
        """The keys of `rows` (a slice or positions)."""
        since = (self.ts[rows] - self.t_min).view(np.uint64) >> np.uint64(self.shift)  # exact past int64's range
        return np.searchsorted(self.lanes, self.lane[rows]).astype(np.int64) << self.lane_shift | since.view(np.int64)


@dataclass
class TimelineEvents:
    """Every event of a run's timeline, once, in the order the event file saves them."""

    rank: int
    data_origin: str
    origin_unix_ns: int
    complete: EventBlock  # X events: steps, spans, ops
    complete_order: np.ndarray  # rows of `complete` by lane, start, longest first
    points: EventBlock  # instants and counter values (no duration)
    points_order: np.ndarray  # rows of `points` by lane and time
    flows: FlowPoints
    lanes: Lanes
    lane_pairs: list[tuple[int, int]]  # the (pid, tid) of every lane of `complete` and `points`, sorted

    @property
    def other_data(self) -> dict:
        """What the Chrome trace's `otherData` says of the run (the event file keeps it for the trace)."""
        return {
            "tool": "profview",
            "rank": self.rank,
            "data_origin": self.data_origin,
            "origin_unix_ns": self.origin_unix_ns,
        }


def timeline_events(run: Run) -> TimelineEvents:
    """Group a run's events by row head and put them in the timeline's order."""
    lanes = Lanes(run)
    complete = merge_blocks(
        [stepped(b, run) for b in (step_block(run, lanes), span_block(run, lanes), op_block(run, lanes))], with_dur=True
    )
    points = merge_blocks(
        [stepped(b, run) for b in (instant_block(run, lanes), *counter_blocks(run, lanes))], with_dur=False
    )
    flows = flow_points(run, lanes)
    codes, pairs = lane_codes(complete.specs + points.specs)
    n_complete = len(complete.specs)
    return TimelineEvents(
        rank=run.rank,
        data_origin=run.info.get("data_origin", "profview"),
        origin_unix_ns=run.info.get("clock", {}).get("origin_unix_ns", 0),
        complete=complete,
        complete_order=thread_order(rows_lane(codes[:n_complete], complete.key), complete.ts_ns, complete.dur_ns),
        points=points,
        points_order=thread_order(rows_lane(codes[n_complete:], points.key), points.ts_ns, None),
        flows=flows,
        lanes=lanes,
        lane_pairs=pairs,
    )


def stepped(b: EventBlock, run: Run) -> EventBlock:
    """The block with the step of each row: its source's (ops, steps), else the step containing its start."""
    if b.step is None:
        b.step = assign_steps(np.asarray(b.ts_ns, dtype=np.int64), run.steps)
    return b

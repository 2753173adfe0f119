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

from profiler.kernels.grouping import codes_and_labels, first_rows
from profiler.kernels.intervals import assign_steps
from profiler.kernels.nesting import position_dtype
from profiler.model import Run

STEP_TID = 1_000_000  # the lane that shows steps on the host process


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


def _keys(*cols) -> tuple[np.ndarray, list[tuple]]:
    """Dense key per row for the distinct combinations of the given columns, with those combinations."""
    n = len(cols[0]) if cols else 0
    if n == 0:
        return np.empty(0, np.int64), []
    combined = np.zeros(n, dtype=np.int64)
    decoded = []
    for col in cols:
        codes, uniques = codes_and_labels(col)
        combined *= len(uniques) + 1  # in place: these arrays have a row per event
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
    """Flow points from each host launch to the device op with its correlation id, in the Chrome trace's
    order (an `s` at the launch, then its `f` at the device op): a column per field."""

    ph: np.ndarray  # "s" / "f" (unicode)
    flow_id: np.ndarray  # the correlation id
    pid: np.ndarray
    tid: np.ndarray
    ns: np.ndarray  # the point's time
    step: np.ndarray  # the launching op's step

    def __len__(self) -> int:
        return len(self.ph)


def flow_points(run: Run, lanes: Lanes) -> FlowPoints:
    """The flow points of the run's launches (lanes met in the order the points are, host then device)."""
    used = ["correlation", "device", "stream", "start_ns", "step"]  # a row filter copies every column it takes
    ops = run.ops.loc[(run.ops["correlation"] >= 0).to_numpy(), used]
    host = ops[ops["device"] == "cpu"].drop_duplicates("correlation")
    dev = ops[ops["device"] != "cpu"].drop_duplicates("correlation")
    m = host.merge(dev, on="correlation", suffixes=("_h", "_d"))
    n = len(m)
    host_stream, host_streams = _text_codes(m["stream_h"])
    device, devices = _text_codes(m["device_d"])
    stream, streams = _text_codes(m["stream_d"])
    pair = np.empty(2 * n, dtype=np.int64)  # a code per (device, stream) text pair: host ones first
    pair[0::2] = host_stream
    pair[1::2] = len(host_streams) + device.astype(np.int64) * len(streams) + stream
    lane, met = pd.factorize(pair)  # in the order the points meet them

    def texts(code: int) -> tuple[str, str]:
        if code < len(host_streams):
            return "cpu", host_streams[code]
        d, s = divmod(code - len(host_streams), len(streams))
        return devices[d], streams[s]

    lane_ids = np.array([lanes.lane(*texts(k)) for k in met.tolist()], dtype=np.int64).reshape(-1, 2)
    ns = np.empty(2 * n, dtype=np.int64)
    ns[0::2], ns[1::2] = m["start_ns_h"].to_numpy(np.int64), m["start_ns_d"].to_numpy(np.int64)
    return FlowPoints(
        ph=np.tile(np.array(["s", "f"]), n),
        flow_id=np.repeat(m["correlation"].to_numpy(np.int64), 2),
        pid=lane_ids[lane, 0] if n else np.empty(0, np.int64),
        tid=lane_ids[lane, 1] if n else np.empty(0, np.int64),
        ns=ns,
        step=np.repeat(m["step_h"].to_numpy(np.int64), 2),
    )


def _text_codes(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each row's code among the distinct texts (`str(value)`) of `values`, and those texts: without a text
    per row."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    text_codes, texts = pd.factorize(np.array([str(u) for u in uniques], dtype=object))
    return text_codes[codes], list(texts)


def merge_blocks(blocks: list[EventBlock], with_dur: bool) -> EventBlock:
    """One block of several (heads renumbered), for writing them in one order."""
    specs: list[Head] = []
    keys, ts, dur, step = [], [], [], []
    head = position_dtype(sum(len(b.specs) for b in blocks))  # keys and steps as the event file stores them:
    for b in blocks:  # int32, not int64, for the rows of a big trace held while it is written
        keys.append(np.asarray(b.key).astype(head) + head(len(specs)))
        specs += b.specs
        ts.append(np.asarray(b.ts_ns, dtype=np.int64))
        if with_dur:
            dur.append(np.asarray(b.dur_ns, dtype=np.int64))
        step.append(np.full(len(b.key), -1, np.int32) if b.step is None else np.asarray(b.step).astype(np.int32))
    cat = lambda parts, dtype: np.concatenate(parts) if parts else np.empty(0, dtype)
    return EventBlock(
        specs, cat(keys, head), cat(ts, np.int64), cat(dur, np.int64) if with_dur else None, cat(step, np.int32)
    )


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
            rows = np.unique(np.concatenate([tied, tied + 1]))  # positions in tie groups, ascending
            sub = order[rows]
            order[rows] = sub[np.lexsort((-dur[sub], t[rows], lanes_sorted[rows]))]
    return order.astype(position_dtype(n))  # kept while the rows are written: half the memory of int64


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
        complete_order=thread_order(codes[:n_complete][complete.key], complete.ts_ns, complete.dur_ns),
        points=points,
        points_order=thread_order(codes[n_complete:][points.key], points.ts_ns, None),
        flows=flows,
        lanes=lanes,
        lane_pairs=pairs,
    )


def stepped(b: EventBlock, run: Run) -> EventBlock:
    """The block with the step of each row: its source's (ops, steps), else the step containing its start."""
    if b.step is None:
        b.step = assign_steps(np.asarray(b.ts_ns, dtype=np.int64), run.steps)
    return b

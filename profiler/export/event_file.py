"""The columnar event file (events_{rank}.arrow, docs/formats.md): every event of the timeline as
columns, for the viewer and any program that wants the events without parsing JSON.

An Apache Arrow IPC file (uncompressed, record batches of 1 Mi rows): a reader gets each column
of a batch as a numpy array without parsing or converting anything, read or memory-mapped, batch
by batch (benchmarks/bench_event_format.py has the measured alternatives). What rows share is stored
once, in tables in the schema's metadata: the strings, and the distinct row heads (phase, lane, name,
category, args: EVENT_HEAD_FIELDS) as codes into them; a row carries its start, duration (a flow point,
which has none: its id), step and head (24 bytes), so the tables do not grow with the trace. Rows are the
complete events (ph X: steps, spans, ops) sorted by lane, start and longest first, then instants and counter
values sorted by lane and time, then flow points in the Chrome trace's order. The metadata's `chrome` (the
trace's M events and otherData) and the flows' steps let `chrome_from_events.py` write the Chrome trace
again, byte for byte.

`read_event_file` opens one (an `EventFile`), checking what consumers rely on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from profiler import spill
from profiler.errors import InputError
from profiler.export.direct_file import DirectFile
from profiler.export.files import AtomicWrite
from profiler.export.timeline_model import (
    FLOW_CATEGORY,
    FLOW_NAME,
    STEP_TID,
    FlowPoints,
    Head,
    TimelineEvents,
    interleaved,
    timeline_events,
)
from profiler.formats.columns import (
    EVENT_COLUMNS,
    EVENT_FIELD_DTYPES,
    EVENT_FILE_COLUMNS,
    EVENT_FILE_FORMAT,
    EVENT_FILE_META_KEY,
    EVENT_FILE_VERSION,
    EVENT_HEAD_FIELDS,
    EVENT_INDEX_STEP,
)
from profiler.formats.documents import regular_file
from profiler.formats.text import valid_text
from profiler.kernels.nesting import position_dtype
from profiler.memory import give_back_freed_memory
from profiler.model import Run

BATCH_ROWS = 1 << 20


def _codes(values: list) -> tuple[np.ndarray, list]:
    """Dense codes of values in first-seen order, and the distinct values."""
    index: dict = {}
    codes = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)
    return codes, list(index)


def _json(value: dict) -> str:
    """Compact JSON (no spaces): the args as the trace writes them, and the metadata, which the file holds twice."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _metadata(meta: dict, args: Sequence[str], lanes: list[dict], heads: dict, chrome) -> bytes:
    """The schema's metadata: `meta` with the args, lanes, heads (lists of numbers) and `chrome`, as compact JSON.
    Every table is of what rows share (since version 3 a flow point's id is in its row), so it stays small."""
    tables = {
        "args": list(args),
        "lanes": list(lanes),
        "heads": {name: np.asarray(v).tolist() for name, v in heads.items()},
    }
    return _json(meta | tables | ({} if chrome is None else {"chrome": chrome})).encode()


def _args_text(args: Optional[dict]) -> Optional[str]:
    """The args as the Chrome trace writes them (keys in their order), so its rows can be written again."""
    return _json(args) if args else None


def _lane_table(ev: TimelineEvents, pairs: list[tuple[int, int]]) -> list[dict]:
    """The lanes `pairs` (pid, tid) with their process and thread names from the timeline's metadata."""
    process, thread, sort = {}, {}, {}
    for m in ev.lanes.meta:
        if m["name"] == "process_name":
            process[m["pid"]] = m["args"]["name"]
        elif m["name"] == "thread_name":
            thread[(m["pid"], m["tid"])] = m["args"]["name"]
        elif m["name"] == "process_sort_index":
            sort[m["pid"]] = m["args"]["sort_index"]
    out = []
    for pid, tid in pairs:
        kind = (
            "steps"
            if (pid == ev.lanes.host_pid and tid == STEP_TID)
            else ("host" if pid == ev.lanes.host_pid else "device")
        )
        out.append(
            {
                "pid": int(pid),
                "tid": int(tid),
                "process": process.get(pid, f"pid {pid}"),
                "thread": thread.get((pid, tid), "counters" if tid == 0 and (pid, tid) not in thread else f"tid {tid}"),
                "kind": kind,
                "process_sort": int(sort.get(pid, 0)),
            }
        )
    return out


class EventStreamWriter:
    """Writes an event file row batch by row batch, in bounded memory.

    The string tables, lanes and heads (`heads`: an array per EVENT_HEAD_FIELDS, codes into
    the tables) are known up front (the schema's metadata); the row index (each lane's range of
    complete rows, its longest event, every EVENT_INDEX_STEP-th start, the rows per phase, the batch
    sizes) is gathered while writing, the lanes and phases from the rows' heads, and stored in the
    custom metadata of a last, empty batch. Complete rows must come lane by lane in lane order,
    each lane's sorted by start; then the other rows (`complete=False`).
    """

    def __init__(
        self,
        path: Path,
        *,
        rank: int,
        names: list[str],
        categories: list[str],
        args: Sequence[str],
        heads: dict[str, np.ndarray],
        lanes: list[dict],
        data_origin: str = "profview",
        origin_unix_ns: int = 0,
        chrome: Optional[dict] = None,
    ) -> None:
        import pyarrow as pa

        self._pa = pa
        self.path = Path(path)
        self._heads = {name: np.asarray(heads[name], dtype=dtype) for name, dtype in EVENT_HEAD_FIELDS}
        meta = {
            "format": EVENT_FILE_FORMAT,
            "version": EVENT_FILE_VERSION,
            "rank": int(rank),
            "data_origin": data_origin,
            "origin_unix_ns": int(origin_unix_ns),
            "names": list(names),
            "categories": list(categories),
        }
        self.schema = pa.schema(
            [(name, pa.from_numpy_dtype(np.dtype(dtype))) for name, dtype in EVENT_COLUMNS],
            metadata={EVENT_FILE_META_KEY: _metadata(meta, args, lanes, self._heads, chrome)},
        )
        self._file = AtomicWrite(self.path)
        self._raw = DirectFile(self._file.tmp)
        self._writer = pa.ipc.new_file(pa.PythonFile(self._raw, mode="w"), self.schema)
        n = len(lanes)
        self.rows = 0
        self.complete_rows = 0
        self._phase_rows = np.zeros(256, np.int64)  # rows per phase letter
        self._lane_first = np.zeros(n, np.int64)
        self._lane_count = np.zeros(n, np.int64)
        self._lane_longest = np.zeros(n, np.int64)
        self._lane_index: list[list[int]] = [[] for _ in range(n)]
        self._last_lane = -1
        self._batch_rows: list[int] = []
        self._complete_done = False

    def write(self, cols: dict[str, np.ndarray], complete: bool = True) -> None:
        """Append rows (a dict of the EVENT_COLUMNS; `head` indexes the heads)."""
        head = np.asarray(cols["head"])
        n = len(head)
        if n == 0:
            return
        if head.min() < 0 or head.max() >= len(self._heads["ph"]):
            raise ValueError("a row's head is not in the heads table")
        if complete:
            if self._complete_done:
                raise ValueError("complete rows must come before the others")
            self._index(self._heads["lane"][head], np.asarray(cols["start_ns"]), np.asarray(cols["dur_ns"]))
            self.complete_rows += n
        else:
            self._complete_done = True
        self._phase_rows += np.bincount(self._heads["ph"][head], minlength=256)
        pa = self._pa
        for i in range(0, n, BATCH_ROWS):
            arrays = [
                pa.array(np.ascontiguousarray(np.asarray(cols[name])[i : i + BATCH_ROWS], dtype=dtype))
                for name, dtype in EVENT_COLUMNS
            ]
            self._writer.write_batch(pa.record_batch(arrays, schema=self.schema))
            self._batch_rows.append(min(BATCH_ROWS, n - i))
        self.rows += n

    def _index(self, lane: np.ndarray, start: np.ndarray, dur: np.ndarray) -> None:
        cuts = np.flatnonzero(lane[1:] != lane[:-1]) + 1
        for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(lane)]]).tolist()):
            k = int(lane[a])
            if k != self._last_lane:
                if k < self._last_lane or self._lane_count[k]:
                    raise ValueError("complete rows must come lane by lane, in lane order")
                self._lane_first[k] = self.complete_rows + a
                self._last_lane = k
            done = int(self._lane_count[k])
            step = EVENT_INDEX_STEP
            self._lane_index[k] += start[a + (-done) % step : b : step].tolist()
            self._lane_count[k] += b - a
            self._lane_longest[k] = max(int(self._lane_longest[k]), int(dur[a:b].max()))

    def close(self) -> Path:
        """Write the row index and finish the file (atomically renamed into place)."""
        pa = self._pa
        index = {
            "rows": self.rows,
            "complete_rows": self.complete_rows,
            "phase_rows": {
                chr(letter): int(self._phase_rows[letter]) for letter in np.flatnonzero(self._phase_rows).tolist()
            },
            "lane_complete": [
                [int(f), int(c), int(m)] for f, c, m in zip(self._lane_first, self._lane_count, self._lane_longest)
            ],
            "lane_index_step": EVENT_INDEX_STEP,
            "lane_index": self._lane_index,
            "batch_rows": self._batch_rows + [0],
        }
        give_back_freed_memory()  # what the rows freed: the footer, which repeats the metadata, comes on its own
        empty = [pa.array(np.empty(0, dtype=dtype)) for _, dtype in EVENT_COLUMNS]
        self._writer.write_batch(
            pa.record_batch(empty, schema=self.schema), custom_metadata={EVENT_FILE_META_KEY: _json(index)}
        )
        self._writer.close()
        self._raw.close()
        return self._file.commit()

    def abort(self) -> None:
        try:
            self._raw.close()
        finally:
            self._file.discard()

    def __enter__(self) -> EventStreamWriter:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _header(ev: TimelineEvents, flow_heads: FlowHeads) -> dict[str, Any]:
    """The EventStreamWriter arguments of a timeline: its tables of names, categories, args, lanes and heads (the
    other rows' heads, then the flow points': one per phase and lane, as a point's id is in its row)."""
    specs: list[Head] = ev.complete.specs + ev.points.specs
    flows = ev.flows
    pairs = list(ev.lane_pairs)
    pair_index = {p: i for i, p in enumerate(pairs)}
    for pair in flows.lanes:  # the flows' lanes the other rows do not have
        if pair not in pair_index:
            pair_index[pair] = len(pairs)
            pairs.append(pair)
    # every flow point is named and categorised alike (codes after the other heads'), without args
    flow_name, flow_cat = ([FLOW_NAME], [FLOW_CATEGORY]) if len(flows) else ([], [])
    name_code, names = _codes([h.name for h in specs] + flow_name)
    cat_code, categories = _codes([h.cat for h in specs] + flow_cat)
    args_text = [_args_text(h.args) for h in specs]
    args = sorted({a for a in args_text if a is not None})
    args_code = {a: i for i, a in enumerate(args)}
    flow_ph, flow_lane = _flow_head_fields(flow_heads)
    flow_lanes = [pair_index[pair] for pair in flows.lanes]
    n_flow = len(flow_ph)
    heads = {
        "ph": [ord(h.ph) for h in specs] + flow_ph,
        "lane": [pair_index[(h.pid, h.tid)] for h in specs] + [flow_lanes[k] for k in flow_lane],
        "name": name_code[: len(specs)].tolist() + name_code[len(specs) :].repeat(n_flow).tolist(),
        "category": cat_code[: len(specs)].tolist() + cat_code[len(specs) :].repeat(n_flow).tolist(),
        "args": [-1 if a is None else args_code[a] for a in args_text] + [-1] * n_flow,
    }
    return {
        "rank": ev.rank,
        "names": names,
        "categories": categories,
        "args": args,
        "heads": {name: np.array(heads[name], dtype=dtype) for name, dtype in EVENT_HEAD_FIELDS},
        "lanes": _lane_table(ev, pairs),
        "data_origin": ev.data_origin,
        "origin_unix_ns": int(ev.origin_unix_ns),
        "chrome": {"meta": ev.lanes.meta, "other": ev.other_data},
    }


#: A flow point's phase letter and its lane's head numbers: {letter: for each of `FlowPoints.lanes`, the number
#: among the flow heads of a point on that lane, -1 where none is}.
FlowHeads = dict[int, np.ndarray]


def _flow_heads(flows: FlowPoints) -> FlowHeads:
    """The flow points' heads, one per phase and lane: an `s` per launching lane, then an `f` per device lane. The
    lanes used are counted a chunk of points at a time (bincount casts its input: 8 B per launch at once)."""
    out, count = {}, 0
    for letter, of_point in ((ord("s"), flows.host_lane), (ord("f"), flows.device_lane)):
        used = np.zeros(len(flows.lanes), dtype=bool)
        for at in spill.chunks(len(of_point)):
            used |= np.bincount(of_point[at], minlength=len(flows.lanes)) > 0
        out[letter] = np.where(used, np.cumsum(used) - 1 + count, -1)
        count += int(used.sum())
    return out


def _flow_head_fields(flow_heads: FlowHeads) -> tuple[list[int], list[int]]:
    """The phase letter and `FlowPoints.lanes` index of each flow head, in their order."""
    ph, lane = [], []
    for letter, number in flow_heads.items():
        used = np.flatnonzero(number >= 0)
        ph += [letter] * len(used)
        lane += used.tolist()
    return ph, lane


def write_run_events(run: Run, path: Path) -> Path:
    """The run's timeline (`timeline_events`) written as its event file at `path`; returns the path."""
    ev = timeline_events(run)
    flow_heads = _flow_heads(ev.flows)
    with EventStreamWriter(path, **_header(ev, flow_heads)) as writer:
        _write_rows(writer, ev, flow_heads)
    return Path(path)


def _write_rows(writer: EventStreamWriter, ev: TimelineEvents, flow_heads: FlowHeads) -> None:
    """The timeline's rows: complete events lane by lane, then instants and counter values, then flow points
    (each with its id as its `dur_ns`: they have no duration)."""
    give_back_freed_memory()  # what making the header freed: the first batch comes with the schema message
    n_complete_heads, n_heads = len(ev.complete.specs), len(ev.complete.specs) + len(ev.points.specs)
    flows = ev.flows
    c, p = ev.complete, ev.points
    for b, order, head_offset, complete in (
        (c, ev.complete_order, 0, True),
        (p, ev.points_order, n_complete_heads, False),
    ):
        # a lane's rows span the run: gathered a stretch of each column at a time, its pages handed back as it goes
        start, step, head = (spill.gathered(values, order) for values in (b.ts_ns, b.step, b.key))
        dur = spill.gathered(b.dur_ns, order) if b.dur_ns is not None else None
        for i in range(0, len(order), BATCH_ROWS):
            rows = slice(i, i + BATCH_ROWS)
            writer.write(
                {
                    "start_ns": start[rows],
                    "dur_ns": dur[rows] if dur is not None else np.zeros(len(start[rows]), np.int64),
                    "step": step[rows],
                    "head": head[rows] + head_offset,
                },
                complete=complete,
            )
            give_back_freed_memory()  # the rows' pages, and what writing them freed (Arrow's pool keeps it)
    points = (("s", flows.host_lane), ("f", flows.device_lane))
    for lo in range(0, len(flows), BATCH_ROWS):  # in the Chrome trace's order, each with its launching op's step
        hi = min(lo + BATCH_ROWS, len(flows))
        writer.write(
            {
                "start_ns": interleaved(flows.host_ns, flows.device_ns, lo, hi),
                "dur_ns": interleaved(flows.flow_id, flows.flow_id, lo, hi),
                "step": interleaved(flows.step, flows.step, lo, hi),
                "head": n_heads + interleaved(*(flow_heads[ord(ph)][lanes[lo // 2 : hi // 2]] for ph, lanes in points)),
            },
            complete=False,
        )
        give_back_freed_memory()


class EventFile:
    """An events_{rank}.arrow: columns as numpy arrays, the string tables.

    Rows [0, complete_rows) are the complete events, sorted by lane then start; `lane_rows(lane)`
    gives a lane's range of them. Record batches (1 Mi rows) are read when a column range needs
    them and only the last two are kept, so a file of 1e8 events opens at once and is read in
    bounded memory; a column within one batch is a view of it, without parsing or conversion. A
    head field (EVENT_HEAD_FIELDS) of a version-2 file is gathered from its heads table by the rows'
    `head`; version 1 stored it as a column.
    """

    def __init__(self, path: Path, reader, meta: dict[str, Any], heads: dict[str, np.ndarray]) -> None:
        self.path = Path(path)
        self.meta = meta
        self._reader = reader
        self._heads = heads
        self._index = {name: i for i, name in enumerate(reader.schema.names)}
        self._batches: dict[int, Any] = {}
        sizes = meta.get("batch_rows")
        if not isinstance(sizes, list) or len(sizes) != reader.num_record_batches:
            sizes = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        self.batch_starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)

    @property
    def rows(self) -> int:
        return int(self.batch_starts[-1])

    @property
    def complete_rows(self) -> int:
        return int(self.meta["complete_rows"])

    @property
    def names(self) -> list[str]:
        return self.meta["names"]

    @property
    def categories(self) -> list[str]:
        return self.meta["categories"]

    @property
    def args(self) -> list[str]:
        return self.meta["args"]

    @property
    def lanes(self) -> list[dict[str, Any]]:
        return self.meta["lanes"]

    @property
    def head_table(self) -> dict[str, np.ndarray]:
        """A version-2 file's distinct row heads: an array per EVENT_HEAD_FIELDS, indexed by the `head`
        column; empty for version 1, whose rows hold those fields."""
        return self._heads

    def lane_rows(self, lane: int) -> tuple[int, int, int]:
        """(first row, rows, longest duration in ns) of a lane's complete events."""
        first, count, longest = self.meta["lane_complete"][lane]
        return int(first), int(count), int(longest)

    def lane_search(self, lane: int, t_ns: int, side: str = "left") -> int:
        """The row where `t_ns` would go among a lane's complete rows (sorted by start), as np.searchsorted.

        The metadata's sparse index narrows it to EVENT_INDEX_STEP rows, the only ones read.
        """
        first, count, _ = self.lane_rows(lane)
        if count == 0:
            return first
        step = int(self.meta.get("lane_index_step", EVENT_INDEX_STEP))
        index = np.asarray(self.meta.get("lane_index", [[]] * (lane + 1))[lane], dtype=np.int64)
        if len(index) == 0:
            lo, hi = 0, count
        else:
            k = int(np.searchsorted(index, t_ns, side=side))
            lo, hi = max(k - 1, 0) * step, min(k * step + 1, count) if k < len(index) else count
        starts = self.column("start_ns", first + lo, first + hi)
        return first + lo + int(np.searchsorted(starts, t_ns, side=side))

    def _batch(self, i: int):
        batch = self._batches.get(i)
        if batch is None:
            if len(self._batches) >= 2:
                self._batches.pop(next(iter(self._batches)))
            batch = self._batches[i] = self._reader.get_batch(i)
        return batch

    def column(self, name: str, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        """Rows [start, stop) of a field (EVENT_FIELD_DTYPES): a stored column, or a head field gathered."""
        field = self._heads.get(name)
        if field is not None:
            return field[self._stored("head", start, stop)]
        return self._stored(name, start, stop)

    def flow_ids(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        """The flow id of each of rows [start, stop), which are flow points: their `dur_ns` since version 3, the
        `id` of their args before (each distinct args text parsed once)."""
        if self.meta["version"] >= 3:
            return self._stored("dur_ns", start, stop)
        distinct, at = np.unique(self.column("args", start, stop), return_inverse=True)
        ids = np.array([json.loads(self.args[a])["id"] for a in distinct.tolist()], dtype=np.int64)
        return ids[at.reshape(-1)]

    def _stored(self, name: str, start: int, stop: Optional[int]) -> np.ndarray:
        """Rows [start, stop) of a stored column (a view of the mapped file when they lie in one batch)."""
        stop = self.rows if stop is None else min(stop, self.rows)
        start = max(0, start)
        if stop <= start:
            return np.empty(0, dtype=EVENT_FIELD_DTYPES[name])
        index = self._index[name]
        first = int(np.searchsorted(self.batch_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.batch_starts, stop, side="left")) - 1
        out = None  # rows of several batches: copied out of each, so no batch stays alive but the two cached
        for i in range(first, last + 1):
            b0 = int(self.batch_starts[i])
            values = self._batch(i).column(index).to_numpy(zero_copy_only=True)[max(start - b0, 0) : stop - b0]
            if first == last:
                return values
            out = np.empty(stop - start, dtype=values.dtype) if out is None else out
            at = max(b0 - start, 0)
            out[at : at + len(values)] = values
        return out

    def chunks(self, stop: Optional[int] = None, rows: int = 1 << 22):
        """(start, stop) row ranges of at most `rows` rows over [0, stop): for streaming passes."""
        stop = self.rows if stop is None else stop
        for start in range(0, stop, rows):
            yield start, min(stop, start + rows)


#: Where the writer puts the heads table in the metadata JSON (EventStreamWriter: after the lanes).
_HEADS_KEY = b',"heads":{'
#: Where the writer puts the args table (EventStreamWriter: after the categories).
_ARGS_KEY = b',"args":['


def _parsed_meta(raw: bytes) -> Any:
    """The metadata JSON, with its heads table (in a version-2 file a number per head field per flow point: ~30 MB
    per GB of trace) parsed straight into arrays and its args table kept as JSON text (`JsonStrings`, a text per flow
    id) where the writer put them: as Python ints and strings they took ~150 and ~50 MB. Any other layout is
    parsed whole, as JSON."""
    at = raw.find(_HEADS_KEY)
    end = raw.find(b"}", at) if at >= 0 else -1
    heads = _int_lists(raw, at + len(_HEADS_KEY), end) if end >= 0 else None
    if heads is None:
        return json.loads(raw)
    args_at = raw.find(_ARGS_KEY, 0, at) + len(_ARGS_KEY) - 1  # the list's "["
    listed = _json_strings(raw, args_at, at) if args_at >= len(_ARGS_KEY) - 1 else None
    meta = json.loads(raw[:args_at] + b"[]" + raw[listed[0] : at] + raw[end + 1 :]) if listed else None
    if not isinstance(meta, dict) or meta.get("args") != []:  # the list was not the args table's
        meta = json.loads(raw[:at] + raw[end + 1 :])
    elif listed:
        meta["args"] = listed[1]
    if isinstance(meta, dict):
        meta["heads"] = heads
    return meta


class JsonStrings(Sequence[str]):
    """A JSON list of strings kept as its text, a string parsed when it is read (the event file's args table)."""

    def __init__(self, text: bytes, starts: np.ndarray, stops: np.ndarray) -> None:
        self._text, self._starts, self._stops = text, starts, stops

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return json.loads(self._text[self._starts[i] : self._stops[i]])

    def __eq__(self, other: object) -> bool:
        """Equal to a list (or another JsonStrings) of the same strings, as the list it stands for."""
        return isinstance(other, (list, JsonStrings)) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # a list's stand-in: not hashable


def _json_strings(raw: bytes, start: int, stop: int, chunk: int = 1 << 16) -> Optional[tuple[int, JsonStrings]]:
    """The JSON list of strings at raw[start] (ending before `stop`): where it ends and its strings, None when
    there is none there. Its strings' quotes are found, and the strings checked as json.loads reads them, a
    chunk at a time; their texts stay one text."""
    if raw[start : start + 1] != b"[":
        return None
    if raw[start : start + 2] == b"[]":
        return start + 2, JsonStrings(b"", np.empty(0, np.int64), np.empty(0, np.int64))
    buf = np.frombuffer(raw, dtype=np.uint8)
    step = chunk << 7  # bytes
    quotes = np.concatenate([_string_quotes(buf, lo, min(stop, lo + step)) for lo in range(start, stop, step)])
    opens, closes = quotes[0::2], quotes[1::2][: len(quotes) // 2]
    after = buf[closes + 1]
    ends = np.flatnonzero(after != ord(","))
    if not len(ends) or after[ends[0]] != ord("]"):
        return None
    opens, closes = opens[: ends[0] + 1], closes[: ends[0] + 1]
    if opens[0] != start + 1 or np.any(opens[1:] != closes[:-1] + 2):
        return None
    for i in range(0, len(opens), chunk):  # every string as valid as a whole parse wants it (raises where not)
        json.loads(b"[" + raw[opens[i] : closes[min(i + chunk, len(opens)) - 1] + 1] + b"]")
    stop = int(closes[-1]) + 1
    at = position_dtype(stop - start)
    return stop + 1, JsonStrings(raw[start:stop], (opens - start).astype(at), (closes + 1 - start).astype(at))


def _string_quotes(buf: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The positions in [lo, hi) of the quotes that open or close a JSON string: not after an odd number of
    backslashes (counted back past `lo` too)."""
    quotes = np.flatnonzero(buf[lo:hi] == ord('"')) + lo
    escaped = np.zeros(len(quotes), bool)
    back, run = 1, np.flatnonzero(buf[quotes - 1] == ord("\\"))
    while len(run):
        escaped[run] ^= True
        back += 1
        run = run[buf[quotes[run] - back] == ord("\\")]
    return quotes[~escaped]


def _int_lists(raw: bytes, start: int, end: int) -> Optional[dict[str, np.ndarray]]:
    """`"key":[integers],...` (JSON object members whose values are lists of integers), the text raw[start:end],
    as arrays, None when the text is anything else. A head field's values are narrowed to its stored type as
    soon as they are read, when they fit (one field's int64 at a time, not all five)."""
    if start >= end or raw[end - 1 : end] != b"]":
        return None
    lists = {}
    dtypes = dict(EVENT_HEAD_FIELDS)
    while True:
        close = raw.find(b"],", start, end)
        key, colon, numbers = raw[start : end if close < 0 else close].removesuffix(b"]").partition(b":[")
        if not colon or not key.startswith(b'"') or b'"' in key[1:-1] or b"\\" in key:
            return None
        if numbers.strip(b"-0123456789,") or numbers.startswith(b",") or numbers.endswith(b","):
            return None
        values = np.fromstring(numbers, dtype=np.int64, sep=",") if numbers else np.empty(0, dtype=np.int64)
        if len(values) != (numbers.count(b",") + 1 if numbers else 0):
            return None
        name = json.loads(key)
        lists[name] = _narrowed(values, dtypes[name]) if name in dtypes else values
        if close < 0:
            return lists
        start = close + 2


def _narrowed(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` in `dtype` when they all fit, else as they are (`_typed` refuses them)."""
    return values.astype(dtype) if _fit(values, dtype) else values


def _fit(values: np.ndarray, dtype: str) -> bool:
    """Whether every integer of `values` is one of `dtype`."""
    limits = np.iinfo(dtype)
    return not len(values) or bool(values.min() >= limits.min and values.max() <= limits.max)


def _head_table(meta: dict[str, Any], path: Path) -> dict[str, np.ndarray]:
    """A version-2 file's heads table (one array per head field, all as long), taken out of the metadata (it
    is kept once, in its stored types); one sentence when it is not one."""
    table = meta.pop("heads", None)
    try:
        heads = {name: _typed(table[name], dtype) for name, dtype in EVENT_HEAD_FIELDS}
        if all(values.ndim == 1 and len(values) == len(heads["ph"]) for values in heads.values()):
            return heads
    except (TypeError, KeyError, ValueError, OverflowError):
        pass
    raise InputError(f"{path} is malformed: its metadata's heads table is not the event file's")


def _typed(values: Any, dtype: str) -> np.ndarray:
    """A list or array of integers in `dtype`; OverflowError for one that does not fit (a cast would wrap)."""
    if not isinstance(values, np.ndarray):
        return np.asarray(values, dtype=dtype)
    if not _fit(values, dtype):
        raise OverflowError(f"a head field outside {dtype}")
    return values.astype(dtype, copy=False)


def read_event_file(path: Path) -> EventFile:
    """Open an events_{rank}.arrow, checking what consumers rely on; one sentence when it is not one."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - a core dependency
        raise InputError(f"reading {path} needs pyarrow (pip install pyarrow)") from None
    path = Path(path)
    regular_file(path)  # a FIFO would block the open, a device never end
    reader = _file_reader(path)
    raw = (reader.schema.metadata or {}).get(EVENT_FILE_META_KEY.encode())
    try:
        batches = reader.num_record_batches
        last = batches and reader.get_batch_with_custom_metadata(batches - 1)
        index = ((last and last.custom_metadata) or {}).get(EVENT_FILE_META_KEY.encode())  # the row index
        # a reader holds the metadata twice (the footer and its schema: ~40 MB per GB of trace in version 2): it is
        # opened again once the metadata is parsed, not kept beside it while it is
        del reader, last
        meta = _parsed_meta(raw) if raw else None
        if isinstance(meta, dict) and index:
            meta.update(json.loads(index))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, pa.ArrowInvalid):
        meta = None
    del raw
    if not isinstance(meta, dict) or meta.get("format") != EVENT_FILE_FORMAT:
        raise InputError(f"{path} is not a profview event file (or it is damaged)")
    version = meta.get("version")
    if not isinstance(version, int) or version > EVENT_FILE_VERSION:
        raise InputError(
            f"{path} has event-file version {version!r}, newer than this viewer reads "
            f"({EVENT_FILE_VERSION}); upgrade profview"
        )
    reader = _batch_reader(path, batches)
    if reader.schema.names != list(EVENT_FILE_COLUMNS.get(version, ())):
        raise InputError(f"{path} is malformed: its columns are not the event file's")
    for key in ("names", "categories", "args", "lanes", "lane_complete", "complete_rows"):
        if key not in meta:
            raise InputError(f"{path} is malformed: its metadata has no {key!r}")
    return EventFile(path, reader, meta, _head_table(meta, path) if "head" in reader.schema.names else {})


def _batch_reader(path: Path, batches: int) -> Any:
    """What reads the file's record batches: `MappedBatches`, or Arrow's file reader where the file's messages
    are not the schema and `batches` record batches (another writer's file)."""
    import pyarrow as pa

    try:
        return MappedBatches(path, batches)
    except (ValueError, OSError, pa.ArrowInvalid):
        return _file_reader(path)


#: An Arrow IPC file's first bytes: its magic and the padding to 8 bytes, then the stream format's messages.
ARROW_FILE_MAGIC = b"ARROW1\x00\x00"


class MappedBatches:
    """An event file's record batches read from a read-only mapping of it, found by walking its messages.

    Arrow's file reader keeps the footer and the schema it parses from it for as long as it is open, each with
    the file's metadata (in version 2, ~40 MB per GB of trace, twice). Here the schema is kept without the
    metadata and a batch is a view of the mapping; its pages count in the RSS while touched, until `spill.drop_resident`
    hands them back (the mapping is the file's: nothing is lost)."""

    def __init__(self, path: Path, batches: int) -> None:
        import pyarrow as pa

        self._buffer = pa.py_buffer(spill.mapped_file(path))
        stream = pa.BufferReader(self._buffer)
        stream.seek(len(ARROW_FILE_MAGIC))  # the stream format follows the file's magic and its padding
        self.schema = pa.ipc.read_schema(pa.ipc.read_message(stream)).remove_metadata()
        self._offsets: list[int] = []
        while len(self._offsets) < batches:
            at = stream.tell()
            if pa.ipc.read_message(stream).type != "record batch":
                raise ValueError("not a message of the event file")  # a dictionary: Arrow's reader resolves it
            self._offsets.append(at)
        spill.drop_resident()  # the schema message's metadata, read once

    @property
    def num_record_batches(self) -> int:
        return len(self._offsets)

    def get_batch(self, i: int) -> Any:
        import pyarrow as pa

        stream = pa.BufferReader(self._buffer)
        stream.seek(self._offsets[i])
        return pa.ipc.read_record_batch(pa.ipc.read_message(stream), self.schema)


def _file_reader(path: Path):
    """An Arrow IPC file reader of `path`; one sentence when it cannot be one."""
    import pyarrow as pa

    try:
        if valid_text(str(path)) == str(path):
            source = pa.OSFile(str(path), "r", memory_pool=pa.system_memory_pool())
        else:  # Arrow takes UTF-8 paths: a non-UTF-8 name goes through Python
            source = pa.PythonFile(open(path, "rb"), mode="r")
        # the C library's allocator: a batch read and dropped goes back to the system (mimalloc, Arrow's default,
        # keeps what it frees for later, so every batch read stayed in the process)
        return pa.ipc.open_file(source, memory_pool=pa.system_memory_pool())
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except (OSError, pa.ArrowInvalid):
        if path.is_file() and path.stat().st_size == 0:
            raise InputError(f"{path} is empty (was the run interrupted while writing it?)") from None
        raise InputError(f"{path} is not a profview event file (Arrow IPC): it may be truncated") from None

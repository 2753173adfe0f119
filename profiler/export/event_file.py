"""The columnar event file (events_{rank}.arrow, docs/formats.md): every event of the timeline as
columns, for the viewer and any program that wants the events without parsing JSON.

An Apache Arrow IPC file (uncompressed, record batches of 1 Mi rows): a reader gets each column
of a batch as a numpy array without parsing or converting anything, read or memory-mapped, batch
by batch (benchmarks/bench_event_format.py has the measured alternatives). What rows share is stored
once, in tables in the schema's metadata: the strings, and the distinct row heads (phase, lane, name,
category, args: formats.EVENT_HEAD_FIELDS) as codes into them; a row carries its start, duration,
step and head (24 bytes). Rows are the complete events (ph X: steps, spans, ops) sorted by lane, start and
longest first, then instants and counter values sorted by lane and time, then flow points in the
Chrome trace's order. The metadata's `chrome` (the trace's M events and otherData) and the flows'
steps let `chrome_from_events.py` write the Chrome trace again, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from profiler import formats
from profiler.export.direct_file import DirectFile
from profiler.export.files import AtomicWrite
from profiler.export.timeline_model import STEP_TID, Head, TimelineEvents

BATCH_ROWS = 1 << 20


def _codes(values: list) -> tuple[np.ndarray, list]:
    """Dense codes of values in first-seen order, and the distinct values."""
    index: dict = {}
    codes = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)
    return codes, list(index)


def _json(value: dict) -> str:
    """Compact JSON (no spaces): the args as the trace writes them, and the metadata, which the file holds twice."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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

    The string tables, lanes and heads (`heads`: an array per formats.EVENT_HEAD_FIELDS, codes into
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
        args: list[str],
        heads: dict[str, np.ndarray],
        lanes: list[dict],
        data_origin: str = "profview",
        origin_unix_ns: int = 0,
        chrome: Optional[dict] = None,
    ) -> None:
        import pyarrow as pa

        self._pa = pa
        self.path = Path(path)
        self._heads = {name: np.asarray(heads[name], dtype=dtype) for name, dtype in formats.EVENT_HEAD_FIELDS}
        meta = {
            "format": formats.EVENT_FILE_FORMAT,
            "version": formats.EVENT_FILE_VERSION,
            "rank": int(rank),
            "data_origin": data_origin,
            "origin_unix_ns": int(origin_unix_ns),
            "names": list(names),
            "categories": list(categories),
            "args": list(args),
            "lanes": list(lanes),
            "heads": {name: values.tolist() for name, values in self._heads.items()},
        }
        if chrome is not None:
            meta["chrome"] = chrome
        self.schema = pa.schema(
            [(name, pa.from_numpy_dtype(np.dtype(dtype))) for name, dtype in formats.EVENT_COLUMNS],
            metadata={formats.EVENT_FILE_META_KEY: _json(meta)},
        )
        self._file = AtomicWrite(self.path)
        self._raw = DirectFile(self._file.tmp)
        self._writer = pa.ipc.new_file(pa.PythonFile(self._raw, mode="w"), self.schema)
        n = len(lanes)
        self.rows = 0
        self.complete_rows = 0
        self._head_rows = np.zeros(len(self._heads["ph"]), np.int64)
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
        head_rows = np.bincount(head, minlength=len(self._head_rows))
        if len(head_rows) > len(self._head_rows):
            raise ValueError("a row's head is not in the heads table")
        if complete:
            if self._complete_done:
                raise ValueError("complete rows must come before the others")
            self._index(self._heads["lane"][head], np.asarray(cols["start_ns"]), np.asarray(cols["dur_ns"]))
            self.complete_rows += n
        else:
            self._complete_done = True
        self._head_rows += head_rows
        pa = self._pa
        for i in range(0, n, BATCH_ROWS):
            arrays = [
                pa.array(np.ascontiguousarray(np.asarray(cols[name])[i : i + BATCH_ROWS], dtype=dtype))
                for name, dtype in formats.EVENT_COLUMNS
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
            step = formats.EVENT_INDEX_STEP
            self._lane_index[k] += start[a + (-done) % step : b : step].tolist()
            self._lane_count[k] += b - a
            self._lane_longest[k] = max(int(self._lane_longest[k]), int(dur[a:b].max()))

    def close(self) -> Path:
        """Write the row index and finish the file (atomically renamed into place)."""
        pa = self._pa
        index = {
            "rows": self.rows,
            "complete_rows": self.complete_rows,
            "phase_rows": _phase_rows(self._heads["ph"], self._head_rows),
            "lane_complete": [
                [int(f), int(c), int(m)] for f, c, m in zip(self._lane_first, self._lane_count, self._lane_longest)
            ],
            "lane_index_step": formats.EVENT_INDEX_STEP,
            "lane_index": self._lane_index,
            "batch_rows": self._batch_rows + [0],
        }
        empty = [pa.array(np.empty(0, dtype=dtype)) for _, dtype in formats.EVENT_COLUMNS]
        self._writer.write_batch(
            pa.record_batch(empty, schema=self.schema), custom_metadata={formats.EVENT_FILE_META_KEY: _json(index)}
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


def _phase_rows(ph: np.ndarray, head_rows: np.ndarray) -> dict[str, int]:
    """Rows per phase letter, from each head's phase and rows."""
    rows = np.zeros(256, np.int64)
    np.add.at(rows, ph, head_rows)
    return {chr(letter): int(rows[letter]) for letter in np.flatnonzero(rows).tolist()}


def write_event_file(ev: TimelineEvents, path: Path) -> Path:
    """Write the events as an Arrow IPC file at `path` (atomically); returns the path."""
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
    all_specs = specs + flow_specs
    name_code, names = _codes([h.name for h in all_specs])
    cat_code, categories = _codes([h.cat for h in all_specs])
    args_text = [_args_text(h.args) for h in all_specs]
    distinct_args = sorted({a for a in args_text if a is not None})
    args_index = {a: i for i, a in enumerate(distinct_args)}
    heads = {
        "ph": np.array([ord(h.ph) for h in all_specs], dtype=np.int64),
        "lane": np.array([pair_index[(h.pid, h.tid)] for h in all_specs], dtype=np.int64),
        "name": name_code,
        "category": cat_code,
        "args": np.array([-1 if a is None else args_index[a] for a in args_text], dtype=np.int64),
    }
    c, p = ev.complete, ev.points
    with EventStreamWriter(
        path,
        rank=ev.rank,
        names=names,
        categories=categories,
        args=distinct_args,
        heads=heads,
        lanes=_lane_table(ev, pairs),
        data_origin=ev.data_origin,
        origin_unix_ns=int(ev.origin_unix_ns),
        chrome={"meta": ev.lanes.meta, "other": ev.other_data},
    ) as writer:
        for b, order, head_offset, complete in (
            (c, ev.complete_order, 0, True),
            (p, ev.points_order, n_complete_heads, False),
        ):
            for i in range(0, len(order), BATCH_ROWS):
                rows = order[i : i + BATCH_ROWS]
                dur = np.asarray(b.dur_ns)[rows] if b.dur_ns is not None else np.zeros(len(rows), np.int64)
                writer.write(
                    {
                        "start_ns": np.asarray(b.ts_ns)[rows],
                        "dur_ns": dur,
                        "step": np.asarray(b.step)[rows],
                        "head": b.key[rows] + head_offset,
                    },
                    complete=complete,
                )
        if flows:  # in the Chrome trace's order, each with its launching op's step
            writer.write(
                {
                    "start_ns": np.array([e["_ns"] for e in flows], dtype=np.int64),
                    "dur_ns": np.zeros(len(flows), np.int64),
                    "step": np.array([e["_step"] for e in flows], dtype=np.int64),
                    "head": np.arange(len(flows), dtype=np.int64) + len(specs),
                },
                complete=False,
            )
    return Path(path)

"""Reading a Chrome Trace Event file (timeline_{rank}.json) into columns, fast.

A 10-million-event timeline is over a gigabyte of JSON; `json.load` would take minutes and
tens of gigabytes. profview's writer puts one event per line, so the fast path finds the few
keys the viewer needs (`ph`, `ts`, `dur`, `pid`, `tid`) with vectorised byte searches and
parses their numbers with numpy, chunk by chunk, never building a Python object per event.
Names and arguments are parsed later, with `json`, only for the events a page shows in detail.
Any file that does not have that layout (pretty-printed, several events per line, string
thread ids, ...) is read with `json` instead: slower, same result.
"""
from __future__ import annotations

import gzip
import json
import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from viewer.errors import InputError
from viewer.progress import Progress

CHUNK_BYTES = 64 << 20
NUMBER_WIDTH = 32
#: The keys read on the fast path, with the 4 bytes that end each (searched as one uint32).
KEYS = {"ph": b'"ph":', "ts": b'"ts":', "dur": b'"dur":', "pid": b'"pid":', "tid": b'"tid":'}


class LayoutError(Exception):
    """The file is valid JSON, perhaps, but not laid out one event per line."""


@dataclass
class Trace:
    """The complete events ("X") of a trace as columns, plus lane names and a count of the rest."""

    path: Path
    lane: np.ndarray                 # int32 lane index of each complete event
    ts_us: np.ndarray                # float64 start, microseconds from the origin
    dur_us: np.ndarray               # float64 duration, microseconds
    lanes: pd.DataFrame              # lane index -> pid, tid, process, thread, label
    phase_counts: dict[str, int]     # every event in the file, by `ph`
    details: Callable[[np.ndarray], list[dict[str, Any]]] = field(repr=False)

    @property
    def events(self) -> int:
        """How many events the file holds in all."""
        return sum(self.phase_counts.values())


def read_trace(path: Path, progress: Optional[Progress] = None) -> Trace:
    """Read a timeline_{rank}.json (or .json.gz) into a Trace."""
    progress = progress or Progress.silent()
    buffer = _open_buffer(path)
    try:
        columns, details, meta = _read_lines(buffer, progress)
    except LayoutError:
        progress.note(f"{path.name} is not one event per line; reading it with json (slower)")
        columns, details, meta = _read_json(buffer, path)
    return _assemble(path, columns, details, meta)


def _open_buffer(path: Path):
    """The file's bytes: memory-mapped when plain, decompressed when gzip."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            if f.seek(0, 2) == 0:
                raise InputError(f"{path} is empty (was the run interrupted while writing it?)")
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _chunks(buffer, size: int = CHUNK_BYTES):
    """(start, end) byte ranges of about `size` bytes, each ending after a newline."""
    start, total = 0, len(buffer)
    while start < total:
        end = min(start + size, total)
        if end < total:
            cut = buffer.rfind(b"\n", start, end)
            end = cut + 1 if cut >= start else buffer.find(b"\n", end) + 1 or total
        yield start, end
        start = end


def _key_positions(a: np.ndarray, key: bytes) -> np.ndarray:
    """Offsets just after every occurrence of `key` in `a`, found through uint32 views."""
    pattern = np.frombuffer(key[-4:], dtype=np.uint32)[0]
    hits = []
    for shift in range(4):
        n = (len(a) - shift) // 4
        view = a[shift:shift + 4 * n].view(np.uint32)
        hits.append(np.flatnonzero(view == pattern) * 4 + shift)
    end = np.sort(np.concatenate(hits)) + 4
    head = key[:-4]
    ok = end - len(key) >= 0
    for i, byte in enumerate(head):
        ok &= a[np.maximum(end - len(key) + i, 0)] == byte
    return end[ok]


def _windows(a: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The `width` bytes after each position (padded with spaces past the end)."""
    idx = pos[:, None] + np.arange(width)
    w = a[np.minimum(idx, len(a) - 1)]
    w[idx >= len(a)] = 32
    return w


def parse_numbers(a: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Parse the JSON number starting (after optional spaces) at each position, vectorised.

    Plain decimals are summed digit by digit; anything else (exponents) goes through float().
    Raises LayoutError when a value is not a number (a string thread id, say).
    """
    w = _windows(a, pos, NUMBER_WIDTH)
    digit = (w >= 48) & (w <= 57)
    numeric = digit | (w == 46) | (w == 45) | (w == 43) | (w == 101) | (w == 69) | (w == 32)
    stop = np.argmin(numeric, axis=1)
    cols = np.arange(NUMBER_WIDTH)
    inside = cols < stop[:, None]
    if not (stop > 0).all() or not digit[inside.any(axis=1)].any():
        raise LayoutError("a value is not a number")
    digit &= inside
    dot_here = (w == 46) & inside
    dot = np.where(dot_here.any(axis=1), np.argmax(dot_here, axis=1), stop)
    power = dot[:, None] - cols - (cols < dot[:, None])
    values = (np.where(digit, (w.astype(np.float64) - 48) * 10.0 ** power, 0.0)).sum(axis=1)
    values[((w == 45) & inside).any(axis=1)] *= -1
    odd = (((w == 101) | (w == 69) | (w == 43)) & inside).any(axis=1) | ~digit.any(axis=1)
    for i in np.flatnonzero(odd):
        try:
            values[i] = float(w[i, :stop[i]].tobytes())
        except ValueError:
            raise LayoutError("a value is not a number") from None
    return values


def _parse_chunk(buffer, start: int, end: int) -> dict[str, np.ndarray]:
    """Columns of the events in one chunk of lines (byte offsets are global)."""
    a = np.frombuffer(buffer, dtype=np.uint8, count=end - start, offset=start)
    newlines = np.flatnonzero(a == 10)
    if not len(newlines) or newlines[-1] != len(a) - 1:
        newlines = np.append(newlines, len(a))
    keys = {}
    for name, key in KEYS.items():
        pos = _key_positions(a, key)
        line = np.searchsorted(newlines, pos)
        if len(line) > 1 and (np.diff(line) == 0).any():
            raise LayoutError(f"several {name!r} keys on one line")
        keys[name] = (pos, line)
    ph_pos, ph_line = keys["ph"]
    line_start = np.concatenate([[0], newlines[:-1] + 1])
    out = {"start": line_start[ph_line] + start, "end": newlines[ph_line] + start}
    quote = _windows(a, ph_pos, 8)
    first = np.argmax(quote == 34, axis=1)
    out["ph"] = quote[np.arange(len(ph_pos)), np.minimum(first + 1, 7)]
    for name in ("ts", "dur", "pid", "tid"):
        pos, line = keys[name]
        row = np.searchsorted(ph_line, line)
        if len(row) and ((row >= len(ph_line)) | (ph_line[np.minimum(row, len(ph_line) - 1)] != line)).any():
            raise LayoutError(f"a {name!r} key outside an event line")
        column = np.full(len(ph_line), np.nan)
        column[row] = parse_numbers(a, pos)
        out[name] = column
    return out


def _read_lines(buffer, progress: Progress):
    """The fast path: one event per line."""
    tail = bytes(buffer[max(0, len(buffer) - 256):]).rstrip()
    if not tail.endswith((b"}", b"]")):
        raise LayoutError("the file does not end its JSON (truncated?)")
    parts = []
    total = len(buffer)
    for start, end in _chunks(buffer):
        parts.append(_parse_chunk(buffer, start, end))
        progress.update("reading timeline", end, total)
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if not parts or not len(cols["ph"]):
        raise LayoutError("no events found")
    complete = cols["ph"] == ord("X")
    if np.isnan(cols["ts"][complete]).any() or np.isnan(cols["dur"][complete]).any():
        raise LayoutError("a complete event without ts or dur")
    starts, ends = cols["start"][complete], cols["end"][complete]

    def details(index: np.ndarray) -> list[dict[str, Any]]:
        return [json.loads(bytes(buffer[starts[i]:ends[i]]).rstrip(b", \r\n\t"))
                for i in index]

    meta_rows = np.flatnonzero(cols["ph"] == ord("M"))
    meta = [json.loads(bytes(buffer[cols["start"][i]:cols["end"][i]]).rstrip(b", \r\n\t")) for i in meta_rows]
    phases, counts = np.unique(cols["ph"], return_counts=True)
    columns = {
        "ts": cols["ts"][complete], "dur": cols["dur"][complete],
        "pid": cols["pid"][complete], "tid": cols["tid"][complete],
        "counts": {chr(p): int(c) for p, c in zip(phases, counts)},
    }
    return columns, details, meta


def _read_json(buffer, path: Path):
    """The general path: any valid Chrome trace (object or bare array form)."""
    try:
        data = json.loads(bytes(buffer))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"{path} is not valid JSON: it may be truncated") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise InputError(f"{path} is not a Chrome trace (no traceEvents list)")
    events = [e for e in events if isinstance(e, dict)]
    complete = [e for e in events if e.get("ph") == "X"]
    counts = pd.Series([str(e.get("ph", "?")) for e in events], dtype=object).value_counts()

    def column(key: str) -> np.ndarray:
        try:
            return np.array([float(e.get(key, 0.0)) for e in complete], dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{path} is malformed: an event has a non-numeric {key!r}") from None

    columns = {
        "ts": column("ts"), "dur": column("dur"),
        "pid": np.array([e.get("pid", 0) for e in complete], dtype=object),
        "tid": np.array([e.get("tid", 0) for e in complete], dtype=object),
        "counts": {str(k): int(v) for k, v in counts.items()},
    }
    meta = [e for e in events if e.get("ph") == "M"]
    return columns, (lambda index: [complete[i] for i in index]), meta


def _lane_id(value: Any) -> Any:
    """A pid / tid as JSON wrote it: integral floats from the fast path become ints."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return value


def _sort_key(lane: tuple) -> tuple:
    """Numbers before names, each in order: the lane order of chrome://tracing."""
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in lane)


def _lane_table(pid: np.ndarray, tid: np.ndarray, meta: list[dict[str, Any]]) -> tuple[np.ndarray, pd.DataFrame]:
    """Lane index per event, and the lanes sorted by process then thread, named from M events."""
    codes, uniques = pd.factorize(pd.Series(list(zip(map(_lane_id, pid), map(_lane_id, tid))), dtype=object))
    order = sorted(range(len(uniques)), key=lambda i: _sort_key(uniques[i]))
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    process, thread = {}, {}
    for event in meta:
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if event.get("name") == "process_name":
            process[event.get("pid")] = str(args.get("name", ""))
        elif event.get("name") == "thread_name":
            thread[(event.get("pid"), event.get("tid"))] = str(args.get("name", ""))
    lanes = pd.DataFrame([uniques[i] for i in order], columns=["pid", "tid"], dtype=object)
    lanes["process"] = [process.get(p, f"pid {p}") for p in lanes["pid"]]
    lanes["thread"] = [thread.get((p, t), f"tid {t}") for p, t in zip(lanes["pid"], lanes["tid"])]
    lanes["label"] = lanes["process"] + " / " + lanes["thread"]
    return rank[codes], lanes


def _assemble(path: Path, columns: dict, details, meta) -> Trace:
    lane, lanes = _lane_table(columns["pid"], columns["tid"], meta)
    return Trace(path=path, lane=lane, ts_us=columns["ts"], dur_us=columns["dur"], lanes=lanes,
                 phase_counts=columns["counts"], details=details)

# The viewer's Chrome-trace reader as it was before the event file (commit 21be585, viewer/trace.py),
# kept verbatim as the baseline of benchmarks/bench_report.py ("today's JSON path"). Not used by profview.
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

from profiler.errors import InputError
from profiler.progress import Progress

CHUNK_BYTES = 64 << 20
NUMBER_WIDTH = 32
#: The keys read on the fast path.
KEYS = {"ph": b'"ph":', "ts": b'"ts":', "dur": b'"dur":', "pid": b'"pid":', "tid": b'"tid":'}


class LayoutError(Exception):
    """The file is valid JSON, perhaps, but not laid out one event per line."""


@dataclass
class Trace:
    """The complete events ("X") of a trace as columns, plus lane names and a count of the rest."""

    path: Path
    lane: np.ndarray  # int32 lane index of each complete event
    ts_us: np.ndarray  # float64 start, microseconds from the origin
    dur_us: np.ndarray  # float64 duration, microseconds
    lanes: pd.DataFrame  # lane index -> pid, tid, process, thread, label
    phase_counts: dict[str, int]  # every event in the file, by `ph`
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


def _colons(a: np.ndarray) -> np.ndarray:
    """Offsets of every `":` (the end of every object key) in `a`, sorted, via two uint16 views."""
    pattern = np.frombuffer(b'":', dtype=np.uint16)[0]
    hits = []
    for shift in range(2):
        n = (len(a) - shift) // 2
        hits.append(np.flatnonzero(a[shift : shift + 2 * n].view(np.uint16) == pattern) * 2 + shift)
    return np.sort(np.concatenate(hits), kind="stable")  # two sorted runs: a linear merge


def _key_positions(a: np.ndarray, colons: np.ndarray, last: np.ndarray, key: bytes) -> np.ndarray:
    """Offsets just after every `key` (e.g. b'"ts":'), picked from the `":` offsets.

    `last` is the byte before each `":`; the rest of the key is checked on the few that match it.
    """
    candidates = colons[(last == key[-3]) & (colons >= len(key) - 2)]
    for back, byte in enumerate(reversed(key[:-3]), start=2):
        candidates = candidates[a[candidates - back] == byte]
    return candidates + 2


def parse_numbers(a: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Parse the JSON number starting (after optional spaces) at each position, vectorised.

    Skips the padding, then walks the digits one byte column at a time (Horner's rule on an
    int64 mantissa) over the values not finished yet, so the cost is a few array operations
    per character. Exponents and over-long values go through float(); a value that is not a
    number (a string thread id) raises LayoutError.
    """
    last = len(a) - 1
    start = np.minimum(pos, last)
    padded = np.flatnonzero(a[start] == 32)
    while len(padded):
        start[padded] = np.minimum(start[padded] + 1, last)
        padded = padded[a[start[padded]] == 32]
    negative = a[start] == 45
    start += negative
    n = len(pos)
    mantissa = np.zeros(n, dtype=np.int64)
    dot_at = np.full(n, -1, dtype=np.int64)
    stop_at = np.full(n, NUMBER_WIDTH, dtype=np.int64)
    rows, base = np.arange(n), start
    m, dot = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    limit = last - NUMBER_WIDTH
    for col in range(NUMBER_WIDTH):
        c = a[base + col] if len(base) and base.max() <= limit else a[np.minimum(base + col, last)]
        v = c - np.uint8(48)
        digit = v < 10
        m = np.where(digit, m * 10 + v, m)
        is_dot = c == 46
        dot[is_dot] = col
        stop = ~digit & ~is_dot
        if stop.any():
            done = rows[stop]
            mantissa[done], dot_at[done], stop_at[done] = m[stop], dot[stop], col
            keep = ~stop
            rows, base, m, dot = rows[keep], base[keep], m[keep], dot[keep]
            if not len(rows):
                break
    after = a[np.minimum(start + stop_at, last)]
    last_digit = stop_at - 1 - (dot_at == stop_at - 1)
    digits = last_digit + 1 - ((dot_at >= 0) & (dot_at < last_digit))
    odd = (last_digit < 0) | (digits > 18) | (stop_at >= NUMBER_WIDTH) | (after == 101) | (after == 69)
    decimals = np.where(dot_at >= 0, np.maximum(last_digit - dot_at, 0), 0)
    values = mantissa / 10.0**decimals
    values[negative] *= -1
    for i in np.flatnonzero(odd):
        values[i] = _slow_number(a, int(pos[i]))
    return values


def _slow_number(a: np.ndarray, pos: int) -> float:
    """One number the vectorised parser could not take (exponent, very long, or not a number)."""
    text = bytes(a[pos : pos + 64]).split(b",")[0].split(b"}")[0].split(b"]")[0].strip()
    try:
        return float(text)
    except ValueError:
        raise LayoutError("a value is not a number") from None


def _parse_chunk(buffer, start: int, end: int) -> dict[str, np.ndarray]:
    """Columns of the events in one chunk of lines (byte offsets are global).

    Values are placed by line number, so that an event missing a key (a metadata event has no
    `ts`) simply has NaN there; a key twice on one line means the layout is not one event per line.
    """
    a = np.frombuffer(buffer, dtype=np.uint8, count=end - start, offset=start)
    newlines = np.flatnonzero(a == 10)
    if not len(newlines) or newlines[-1] != len(a) - 1:
        newlines = np.append(newlines, len(a))
    lines = len(newlines)
    colons = _colons(a)
    before = a[np.maximum(colons - 1, 0)]
    found = {}
    for name, key in KEYS.items():
        pos = _key_positions(a, colons, before, key)
        line = np.searchsorted(newlines, pos)
        if len(line) and np.bincount(line, minlength=lines).max() > 1:
            raise LayoutError(f"several {name!r} keys on one line")
        found[name] = (pos, line)
    ph_pos, ph_line = found["ph"]
    event = np.zeros(lines, dtype=bool)
    event[ph_line] = True
    rows = np.flatnonzero(event)
    line_start = np.concatenate([[0], newlines[:-1] + 1])
    out = {"start": line_start[rows] + start, "end": newlines[rows] + start}
    at = ph_pos.copy()
    for _ in range(8):  # skip spaces up to the opening quote
        spaces = a[np.minimum(at, len(a) - 1)] == 32
        if not spaces.any():
            break
        at += spaces
    ph = np.zeros(lines, dtype=np.uint8)
    ph[ph_line] = a[np.minimum(at + 1, len(a) - 1)]
    out["ph"] = ph[rows]
    for name in ("ts", "dur", "pid", "tid"):
        pos, line = found[name]
        if not event[line].all():
            raise LayoutError(f"a {name!r} key outside an event line")
        column = np.full(lines, np.nan)
        column[line] = parse_numbers(a, pos)
        out[name] = column[rows]
    return out


def _read_lines(buffer, progress: Progress):
    """The fast path: one event per line."""
    tail = bytes(buffer[max(0, len(buffer) - 256) :]).rstrip()
    if not tail.endswith((b"}", b"]")):
        raise LayoutError("the file does not end its JSON (truncated?)")
    parts = []
    total = len(buffer)
    for start, end in _chunks(buffer):
        parts.append(_parse_chunk(buffer, start, end))
        progress.stage("reading timeline", end, total)
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if not parts or not len(cols["ph"]):
        raise LayoutError("no events found")
    complete = cols["ph"] == ord("X")
    if np.isnan(cols["ts"][complete]).any() or np.isnan(cols["dur"][complete]).any():
        raise LayoutError("a complete event without ts or dur")
    starts, ends = cols["start"][complete], cols["end"][complete]

    def details(index: np.ndarray) -> list[dict[str, Any]]:
        return [json.loads(bytes(buffer[starts[i] : ends[i]]).rstrip(b", \r\n\t")) for i in index]

    meta_rows = np.flatnonzero(cols["ph"] == ord("M"))
    meta = [json.loads(bytes(buffer[cols["start"][i] : cols["end"][i]]).rstrip(b", \r\n\t")) for i in meta_rows]
    phases, counts = np.unique(cols["ph"], return_counts=True)
    columns = {
        "ts": cols["ts"][complete],
        "dur": cols["dur"][complete],
        "pid": cols["pid"][complete],
        "tid": cols["tid"][complete],
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
        "ts": column("ts"),
        "dur": column("dur"),
        "pid": np.array([e.get("pid", 0) for e in complete], dtype=object),
        "tid": np.array([e.get("tid", 0) for e in complete], dtype=object),
        "counts": {str(k): int(v) for k, v in counts.items()},
    }
    meta = [e for e in events if e.get("ph") == "M"]
    return columns, (lambda index: [complete[i] for i in index]), meta


def _lane_keys(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
    """Codes of each event's (pid, tid) and the distinct pairs, in first-seen order.

    Numeric ids (the fast path) are factorised as one int64 key; anything else pair by pair.
    """
    if (
        pid.dtype.kind == "f"
        and np.isfinite(pid).all()
        and np.isfinite(tid).all()
        and (pid == np.round(pid)).all()
        and (tid == np.round(tid)).all()
    ):
        key = pid.astype(np.int64) * (1 << 32) + tid.astype(np.int64)
        codes, uniques = pd.factorize(key)
        return codes, [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in uniques]
    codes, uniques = pd.factorize(pd.Series(list(zip(pid, tid)), dtype=object))
    return codes, list(uniques)


def _sort_key(lane: tuple) -> tuple:
    """Numbers before names, each in order: the lane order of chrome://tracing."""
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in lane)


def _lane_table(pid: np.ndarray, tid: np.ndarray, meta: list[dict[str, Any]]) -> tuple[np.ndarray, pd.DataFrame]:
    """Lane index per event, and the lanes sorted by process then thread, named from M events."""
    codes, uniques = _lane_keys(pid, tid)
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
    return Trace(
        path=path,
        lane=lane,
        ts_us=columns["ts"],
        dur_us=columns["dur"],
        lanes=lanes,
        phase_counts=columns["counts"],
        details=details,
    )

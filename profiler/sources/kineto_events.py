"""Reading a Kineto (PyTorch profiler) Chrome trace file and turning its events into columns.

The per-event Python work is the JSON parse itself plus one list comprehension per field that is
needed; everything after that runs on whole numpy / pandas columns. Parsing uses orjson when it
is installed (an optional speed-up) and the standard json module otherwise, with the cyclic
garbage collector paused: a trace of a million events allocates millions of dicts, and letting
the collector re-scan them while they are built makes parsing about three times slower.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError

try:
    import orjson
except ImportError:  # orjson is an optional speed-up
    orjson = None

_GZIP_MAGIC = b"\x1f\x8b"
#: How much of a file `looks_like_kineto` reads: the trace header and its first events.
_SNIFF_BYTES = 1 << 20
#: Markers only Kineto writes: its header key and its event categories.
_KINETO_MARKER = re.compile(
    rb'"schemaVersion"|"cat"\s*:\s*"(?:cpu_op|kernel|cuda_runtime|user_annotation|python_function|gpu_memcpy)"'
)


def loads_json(raw: bytes) -> Any:
    """Parse JSON text with orjson when available, else with the standard library."""
    if orjson is not None:
        return orjson.loads(raw)
    return json.loads(raw)


def dumps_compact(value: Any) -> str:
    """`value` as compact JSON text (no spaces), e.g. input shapes "[[4,3,32,32],[8]]"."""
    if orjson is not None:
        return orjson.dumps(value).decode()
    return json.dumps(value, separators=(",", ":"))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of containers are created."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_bytes(path: Path, limit: int = -1) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic (up to `limit` bytes)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic != _GZIP_MAGIC:
            return fh.read(limit)
        with gzip.GzipFile(fileobj=fh) as gz:
            return gz.read(limit)


def load_trace_object(path: "str | os.PathLike[str]") -> dict[str, Any]:
    """Parse a .json / .json.gz Kineto trace into its top-level JSON object.

    Raises ProfviewError (one sentence naming the file) when the file is missing or unreadable,
    is a corrupt or truncated gzip, is not JSON, or has no `traceEvents` list.
    """
    path = Path(path)
    if not path.exists():
        raise ProfviewError(f"Kineto trace {path} does not exist.")
    if path.is_dir():
        raise ProfviewError(f"Kineto trace {path} is a directory, not a trace file.")
    try:
        raw = _read_bytes(path)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ProfviewError(f"Kineto trace {path} is a corrupt or truncated gzip file ({err}).") from err
    except OSError as err:
        raise ProfviewError(f"Cannot read Kineto trace {path}: {err.strerror or err}.") from err
    try:
        trace = loads_json(raw)
    except ValueError as err:  # json.JSONDecodeError and orjson.JSONDecodeError are ValueErrors
        raise ProfviewError(f"Kineto trace {path} is not valid JSON ({err}).") from err
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ProfviewError(f"{path} is not a Kineto trace: it has no traceEvents list.")
    return trace


def looks_like_kineto(path: "str | os.PathLike[str]") -> bool:
    """True when the file (plain or gzip) starts like a Kineto trace: a JSON object with
    `traceEvents` and Kineto's `schemaVersion` header or one of its event categories.

    Reads at most the first MiB, so it is cheap enough for a CLI to probe any file.
    """
    try:
        head = _read_bytes(Path(path), _SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return (
        head.lstrip()[:1] == b"{"
        and b'"traceEvents"' in head
        and _KINETO_MARKER.search(head) is not None
    )


@dataclass(frozen=True)
class EventColumns:
    """The trace's events as parallel columns, one row per event object."""

    ph: np.ndarray      # object: "X", "i", "C", "M", "s", "f", ...
    cat: np.ndarray     # object: Kineto category, None when absent
    name: np.ndarray    # object
    pid: np.ndarray     # float64: process id (host) or device id; NaN for Kineto's text lanes ("Spans")
    tid: np.ndarray     # float64: thread id (host) or stream id; NaN when not a number
    ts_us: np.ndarray   # float64 microseconds, NaN when absent or not a number
    dur_us: np.ndarray  # float64 microseconds, NaN when absent or not a number
    args: list          # the events' args dicts (None when absent)

    def __len__(self) -> int:
        return len(self.ph)

    def arg(self, key: str, rows: np.ndarray, default: Any = None) -> list:
        """The value of `args[key]` for the given rows (`default` where absent)."""
        args = self.args
        return [
            a.get(key, default) if a.__class__ is dict else default
            for a in (args[i] for i in rows.tolist())
        ]


def _values(events: Sequence[dict], key: str) -> list:
    return [e.get(key) for e in events]


def _objects(values: list) -> np.ndarray:
    """A 1-d object array (np.array would build 2-d arrays from equal-length lists)."""
    return np.fromiter(values, dtype=object, count=len(values))


def to_float(values: "Sequence[Any] | np.ndarray") -> np.ndarray:
    """Numbers as float64; anything else (None, text that is not a number, lists) as NaN."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)


def to_int(values: "Sequence[Any] | np.ndarray", default: int) -> np.ndarray:
    """Integers as int64; anything else as `default`."""
    numbers = to_float(values)
    return np.where(np.isfinite(numbers), numbers, default).astype(np.int64)


def event_columns(events: Sequence[Any]) -> tuple[EventColumns, int]:
    """Columns of the event objects, and how many list items were not objects (skipped)."""
    try:
        ph = _values(events, "ph")
    except AttributeError:  # an item that is not a JSON object
        objects = [e for e in events if isinstance(e, dict)]
        columns, _ = event_columns(objects)
        return columns, len(events) - len(objects)
    columns = EventColumns(
        ph=_objects(ph),
        cat=_objects(_values(events, "cat")),
        name=_objects(_values(events, "name")),
        pid=to_float(_values(events, "pid")),
        tid=to_float(_values(events, "tid")),
        ts_us=to_float(_values(events, "ts")),
        dur_us=to_float(_values(events, "dur")),
        args=_values(events, "args"),
    )
    return columns, 0


def _factorize(values: np.ndarray) -> np.ndarray:
    """Dense codes of the values, missing values (None, NaN) included as one more code."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object))
    return np.where(codes < 0, len(uniques), codes)


def map_unique(func: Callable[..., Any], *columns: np.ndarray, dtype: Any = object) -> np.ndarray:
    """`func(*values)` computed once per distinct combination of the columns' values, spread
    back over all rows.

    Names, categories and stream ids repeat heavily in a trace (a million kernels have a few
    hundred distinct names), so the per-value Python work is paid per distinct value only.
    """
    n = len(columns[0])
    try:
        key = np.zeros(n, dtype=np.int64)
        for column in columns:
            codes = _factorize(column)
            key = key * (int(codes.max(initial=0)) + 1) + codes
    except TypeError:  # unhashable items (lists, dicts) in malformed events
        return np.array([func(*values) for values in zip(*columns)], dtype=dtype)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    mapped = np.empty(len(first), dtype=dtype)
    mapped[:] = [func(*(column[i] for column in columns)) for i in first]
    return mapped[inverse]

"""The output contract (docs/formats.md): file names, column lists, step phases, queue names, and
the validated readers. Export writes with these names, the viewer, `compare` and the cluster
analysis read with these readers: one home for every fact of the output directory.

Readers are strict about what consumers rely on (the file parses, the required columns exist,
numbers are numbers) and tolerant of everything else, so a malformed or half-written file gives
one sentence naming it (InputError) instead of a traceback deep inside a consumer.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.errors import InputError

# pandas >= 3 backs text columns with pyarrow whenever pyarrow is installed, and pyarrow is a
# dependency now (the event file). profview's tables were built and tested with Python-backed
# strings (outputs byte for byte), and pandas fails some merges of empty pyarrow string columns
# (`cannot construct ChunkedArray from empty vector`, in `profview compare`): keep Python storage,
# unless the process chose a storage itself.
if "string_storage" in dir(pd.options.mode) and pd.get_option("mode.string_storage") == "auto":
    pd.set_option("mode.string_storage", "python")

#: Version of the output directory's layout; readers refuse a newer one.
SCHEMA_VERSION = 1

# ---- file names ---------------------------------------------------------------------------

#: Per-rank output files, by kind (`{rank}` is the integer rank).
RANK_FILES = {
    "profiler_info": "profiler_info_{rank}.json",
    "step_trace": "step_trace_{rank}.csv",
    "op_type": "op_type_{rank}.csv",
    "op_detail": "op_detail_{rank}.csv",
    "data_queue": "data_queue_{rank}.csv",
    "device_counters": "device_counters_{rank}.csv",
    "queue_summary": "queue_summary_{rank}.json",
    "report": "report_{rank}.json",
    "timeline": "timeline_{rank}.json",
    "events": "events_{rank}.arrow",
}
#: The cluster files rank 0 (or `profview analyse`) writes when more than one rank recorded.
CLUSTER_SUMMARY = "cluster_summary.json"
CLUSTER_STEP_TRACE = "cluster_step_trace.csv"
CLUSTER_TIMELINE = "cluster_timeline.json"
INFO_PATTERN = re.compile(r"^profiler_info_(\d+)\.json$")


def rank_file(kind: str, rank: int) -> str:
    """The file name of output `kind` (a RANK_FILES key) for `rank`."""
    return RANK_FILES[kind].format(rank=rank)


# ---- columns ------------------------------------------------------------------------------

#: The step phases, in order. They tile a step: iteration_gap_ms + fp_bp_ms + tail_ms == total_ms.
PHASES: tuple[tuple[str, str], ...] = (
    ("iteration_gap_ms", "iteration gap"), ("fp_bp_ms", "forward + backward"), ("tail_ms", "tail"),
)
PHASE_COLUMNS = tuple(column for column, _ in PHASES)
#: Other per-step figures (column, label); all-reduce and data wait overlap the phases.
ALL_REDUCE = ("all_reduce_ms", "all-reduce")
DATA_WAIT = ("data_wait_ms", "data wait")
GAP_HOST = ("gap_host_ms", "other host work in the gap")
PROFILER_OVERHEAD = ("profiler_overhead_ms", "profiler overhead")
STEP_TOTAL = ("total_ms", "step")
#: a step's start (ms from the origin), and how many ops started in it (0 where op capture skipped it)
STEP_START = "start_ms"
OP_COUNT = "op_count"

STEP_TRACE_COLUMNS = [
    "step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "all_reduce_ms",
    "all_reduce_overlap_ms", "data_wait_ms", "gap_host_ms", "op_count", "profiler_overhead_ms", "start_unix_ns",
    "fp_start_unix_ns",
    "bp_end_unix_ns", "end_unix_ns", "fp_start_source", "bp_end_source", "step_source",
]
OP_TYPE_COLUMNS = ["device", "op_type", "category", "count", "total_ms", "self_ms", "avg_ms", "share_pct"]
OP_DETAIL_COLUMNS = ["device", "name", "op_type", "category", "count", "total_ms", "self_ms", "avg_ms", "min_ms",
                     "max_ms", "share_pct", "shapes", "scope"]
DATA_QUEUE_COLUMNS = ["queue", "time_ms", "event", "size", "capacity", "wait_ms", "step"]
DEVICE_COUNTER_COLUMNS = ["source", "device", "metric", "time_ms", "value"]
CLUSTER_STEP_COLUMNS = [
    "rank", "step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "comm_ms",
    "comm_overlap_ms", "exposed_comm_ms", "wait_ms", "busy_ms", "fp_bp_excl_comm_ms", "tail_excl_comm_ms",
    "slowest_rank", "behind_slowest_ms",
]

# ---- the columnar event file (events_{rank}.arrow) ------------------------------------------

#: What the event file's metadata calls itself, and its version (readers refuse a newer one).
EVENT_FILE_FORMAT = "profview-events"
EVENT_FILE_VERSION = 1
#: The schema metadata key holding the file's tables (names, categories, args, lanes) as JSON.
EVENT_FILE_META_KEY = "profview"
#: The metadata's lane index holds every this-many-th start of a lane's complete rows.
EVENT_INDEX_STEP = 1 << 16
#: The event file's columns, in order, with their numpy dtypes.
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ph", "uint8"),          # the Chrome trace phase letter as a byte: X complete, i instant, C counter, s / f flow
    ("lane", "uint16"),       # index into the lanes table (pid, tid, process and thread names, kind)
    ("start_ns", "int64"),    # start (time of an instant / counter value), ns from the run's origin
    ("dur_ns", "int64"),      # duration, 0 for events without one
    ("name", "int32"),        # index into the names table
    ("category", "uint16"),   # index into the categories table (step, phase, span, compute, host, counter, ...)
    ("step", "int32"),        # the step the event started in, -1 outside every step
    ("args", "int32"),        # index into the args table (JSON text), -1 for none
)

# ---- queue names --------------------------------------------------------------------------

ARROW = "->"                     # a connector queue between two pipeline stages: "producer->consumer"
HOST_QUEUE = "host_queue"        # the host pipeline's output: batches ready on the host
DEVICE_QUEUE = "device_queue"    # batches already staged on the device, waiting for compute

# ---- readers ------------------------------------------------------------------------------

_STEP_NUMBERS = ["step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "all_reduce_ms"]
_CLUSTER_NUMBERS = ["rank", "step", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "comm_ms",
                    "comm_overlap_ms", "exposed_comm_ms", "wait_ms", "busy_ms", "fp_bp_excl_comm_ms",
                    "tail_excl_comm_ms", "slowest_rank"]
#: What a reader requires of each CSV: (columns that must exist, the ones among them that must be numbers).
CSV_REQUIRED: dict[str, tuple[list[str], list[str]]] = {
    "step_trace": (_STEP_NUMBERS, _STEP_NUMBERS),
    "op_type": (["device", "op_type", "count", "total_ms", "avg_ms", "share_pct"],
                ["count", "total_ms", "avg_ms", "share_pct"]),
    "op_detail": (["device", "op_type", "name", "count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"],
                  ["count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"]),
    "data_queue": (["queue", "time_ms", "size", "capacity"], ["time_ms", "size", "capacity"]),
    "device_counters": (["source", "device", "metric", "time_ms", "value"], ["time_ms", "value"]),
    "cluster_step_trace": (_CLUSTER_NUMBERS, _CLUSTER_NUMBERS),
}
#: Columns read as text whatever they look like (an op named "1" stays "1").
TEXT_DTYPES = {c: str for c in ("name", "queue", "op_type", "device", "metric", "shapes", "scope", "source")}
#: Text columns that may be absent in a file and are then filled with "".
OPTIONAL_TEXT = ("category", "shapes", "scope", "fp_start_source", "bp_end_source", "step_source", "event")


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into one sentence naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise InputError(f"{path} is empty (was the run interrupted while writing it?)")
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise InputError(f"{path} is not valid JSON{where}: it may be truncated or not a profview file") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object (profiler_info, report, queue and cluster summaries)."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise InputError(f"{path} is malformed: expected a JSON object")
    return value


def read_csv(path: Path, kind: str) -> pd.DataFrame:
    """Read one of the output CSVs (a CSV_REQUIRED key) and check the columns consumers rely on."""
    required, numeric = CSV_REQUIRED[kind]
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype=TEXT_DTYPES)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path} is empty (was the run interrupted while writing it?)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path} is not a valid CSV file ({first.rstrip('.')})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"{path} is malformed: missing column(s) {', '.join(missing)}")
    for col in numeric:
        values = pd.to_numeric(frame[col], errors="coerce")
        if values.isna().any():
            row = int(values.isna().to_numpy().nonzero()[0][0]) + 2
            raise InputError(f"{path} is malformed: column {col} has a non-numeric or empty value on line {row}")
        frame[col] = values
    for col in OPTIONAL_TEXT:
        if col in frame.columns:
            frame[col] = frame[col].fillna("").astype(str)
    return frame


def info_files(directory: Path) -> dict[int, Path]:
    """The profiler_info_{rank}.json files of an output directory, by rank."""
    found = {}
    for path in directory.iterdir():
        match = INFO_PATTERN.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


class EventFile:
    """An events_{rank}.arrow: columns as numpy arrays, the string tables.

    Rows [0, complete_rows) are the complete events, sorted by lane then start; `lane_rows(lane)`
    gives a lane's range of them. Record batches (1 Mi rows) are read when a column range needs
    them and only the last two are kept, so a file of 1e8 events opens at once and is read in
    bounded memory; a column within one batch is a view of it, without parsing or conversion.
    """

    def __init__(self, path: Path, reader, meta: dict[str, Any]) -> None:
        self.path = Path(path)
        self.meta = meta
        self._reader = reader
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
        """Rows [start, stop) of a column (a view of the mapped file when they lie in one batch)."""
        stop = self.rows if stop is None else min(stop, self.rows)
        start = max(0, start)
        if stop <= start:
            return np.empty(0, dtype=dict(EVENT_COLUMNS)[name])
        index = EVENT_COLUMN_INDEX[name]
        first = int(np.searchsorted(self.batch_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.batch_starts, stop, side="left")) - 1
        parts = []
        for i in range(first, last + 1):
            b0 = int(self.batch_starts[i])
            values = self._batch(i).column(index).to_numpy(zero_copy_only=True)
            parts.append(values[max(start - b0, 0):stop - b0])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def chunks(self, stop: Optional[int] = None, rows: int = 1 << 22):
        """(start, stop) row ranges of at most `rows` rows over [0, stop): for streaming passes."""
        stop = self.rows if stop is None else stop
        for start in range(0, stop, rows):
            yield start, min(stop, start + rows)


EVENT_COLUMN_INDEX = {name: i for i, (name, _) in enumerate(EVENT_COLUMNS)}


def read_event_file(path: Path) -> EventFile:
    """Open an events_{rank}.arrow, checking what consumers rely on; one sentence when it is not one."""
    try:
        import pyarrow as pa
    except ImportError:       # pragma: no cover - a core dependency
        raise InputError(f"reading {path} needs pyarrow (pip install pyarrow)") from None
    path = Path(path)
    try:
        reader = pa.ipc.open_file(pa.OSFile(str(path), "r"))
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except (OSError, pa.ArrowInvalid):
        if path.is_file() and path.stat().st_size == 0:
            raise InputError(f"{path} is empty (was the run interrupted while writing it?)") from None
        raise InputError(f"{path} is not a profview event file (Arrow IPC): it may be truncated") from None
    raw = (reader.schema.metadata or {}).get(EVENT_FILE_META_KEY.encode())
    try:
        meta = json.loads(raw) if raw else None
        if isinstance(meta, dict) and reader.num_record_batches:      # the row index, in the last (empty) batch
            last = reader.get_batch_with_custom_metadata(reader.num_record_batches - 1).custom_metadata
            index = (last or {}).get(EVENT_FILE_META_KEY.encode())
            if index:
                meta.update(json.loads(index))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, pa.ArrowInvalid):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != EVENT_FILE_FORMAT:
        raise InputError(f"{path} is not a profview event file (or it is damaged)")
    version = meta.get("version")
    if not isinstance(version, int) or version > EVENT_FILE_VERSION:
        raise InputError(f"{path} has event-file version {version!r}, newer than this viewer reads "
                         f"({EVENT_FILE_VERSION}); upgrade profview")
    if reader.schema.names != [name for name, _ in EVENT_COLUMNS]:
        raise InputError(f"{path} is malformed: its columns are not the event file's")
    for key in ("names", "categories", "args", "lanes", "lane_complete", "complete_rows"):
        if key not in meta:
            raise InputError(f"{path} is malformed: its metadata has no {key!r}")
    return EventFile(path, reader, meta)

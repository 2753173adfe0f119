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
from typing import Any

import pandas as pd

from profiler.errors import InputError

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

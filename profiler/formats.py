"""The output contract (docs/formats.md): file names, column lists, step phases, queue names, and
the validated readers. Export writes with these names, the viewer, `compare` and the cluster
analysis read with these readers: one home for every fact of the output directory.

Readers are strict about what consumers rely on (the file parses, the required columns exist,
numbers are numbers) and tolerant of everything else, so a malformed or half-written file gives
one sentence naming it (InputError) instead of a traceback deep inside a consumer.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Optional

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
    ("iteration_gap_ms", "iteration gap"),
    ("fp_bp_ms", "forward + backward"),
    ("tail_ms", "tail"),
)
PHASE_COLUMNS = tuple(column for column, _ in PHASES)
#: Other per-step figures (column, label); all-reduce and data wait overlap the phases.
ALL_REDUCE = ("all_reduce_ms", "all-reduce")
DATA_WAIT = ("data_wait_ms", "data wait")
GAP_HOST = ("gap_host_ms", "other host work in the gap")
PROFILER_OVERHEAD = ("profiler_overhead_ms", "profiler overhead")
#: Per step, how long the device executed something / did not (empty for steps without device data).
DEVICE_BUSY = ("device_busy_ms", "device busy")
DEVICE_IDLE = ("device_idle_ms", "device idle")
STEP_TOTAL = ("total_ms", "step")
#: a step's start (ms from the origin), and how many ops started in it (0 where op capture skipped it)
STEP_START = "start_ms"
OP_COUNT = "op_count"

STEP_TRACE_COLUMNS = [
    "step",
    "start_ms",
    "iteration_gap_ms",
    "fp_bp_ms",
    "tail_ms",
    "total_ms",
    "all_reduce_ms",
    "all_reduce_overlap_ms",
    "data_wait_ms",
    "gap_host_ms",
    "op_count",
    "profiler_overhead_ms",
    "start_unix_ns",
    "fp_start_unix_ns",
    "bp_end_unix_ns",
    "end_unix_ns",
    "fp_start_source",
    "bp_end_source",
    "step_source",
    DEVICE_BUSY[0],
    DEVICE_IDLE[0],
]
OP_TYPE_COLUMNS = ["device", "op_type", "category", "count", "total_ms", "self_ms", "avg_ms", "share_pct"]
OP_DETAIL_COLUMNS = [
    "device",
    "name",
    "op_type",
    "category",
    "count",
    "total_ms",
    "self_ms",
    "avg_ms",
    "min_ms",
    "max_ms",
    "share_pct",
    "shapes",
    "scope",
]
DATA_QUEUE_COLUMNS = ["queue", "time_ms", "event", "size", "capacity", "wait_ms", "step"]
DEVICE_COUNTER_COLUMNS = ["source", "device", "metric", "time_ms", "value"]
#: The keys of each entry of report_{rank}.json's "devices" list, one per device (analysis/device_time.py):
#: the device's time breakdown over its window (HTA's definitions) and its idle time split by cause.
DEVICE_TIME_COLUMNS = [
    "device",
    "window_ms",
    "busy_ms",
    "idle_ms",
    "busy_pct",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "comm_pct",
    "memory_pct",
    "comm_compute_overlap_pct",
    "executions",
    "streams",
    "idle_sync_ms",
    "idle_data_ms",
    "idle_host_ms",
    "idle_launch_ms",
    "idle_other_ms",
    "outside_steps_ms",
]
CLUSTER_STEP_COLUMNS = [
    "rank",
    "step",
    "start_ms",
    "iteration_gap_ms",
    "fp_bp_ms",
    "tail_ms",
    "total_ms",
    "comm_ms",
    "comm_overlap_ms",
    "exposed_comm_ms",
    "wait_ms",
    "busy_ms",
    "fp_bp_excl_comm_ms",
    "tail_excl_comm_ms",
    "slowest_rank",
    "behind_slowest_ms",
]

# ---- the Chrome trace (timeline_{rank}.json) -------------------------------------------------

#: The most events (rows and flow points) timeline_{rank}.json holds by default: a run with more
#: gets the trace of its key steps (median, slowest, outliers) and `profview export --chrome` writes
#: the rest from the event file. 1e6 events are 70-200 MB of JSON, which chrome://tracing (a hard
#: limit near 256 MB) and Perfetto's in-browser importer (~2 GB of memory) open in seconds
#: (docs/formats.md, "timeline_{rank}.json"). `Settings(timeline_max_events=)` changes it.
TIMELINE_MAX_EVENTS = 1_000_000
#: What profiler_info's `timeline.content` says the trace holds.
TIMELINE_FULL, TIMELINE_KEY_STEPS = "full", "key steps"

# ---- the columnar event file (events_{rank}.arrow) ------------------------------------------

#: What the event file's metadata calls itself, and its version (readers refuse a newer one).
EVENT_FILE_FORMAT = "profview-events"
EVENT_FILE_VERSION = 2
#: The schema metadata key holding the file's tables (names, categories, args, lanes, heads) as JSON.
EVENT_FILE_META_KEY = "profview"
#: The metadata's lane index holds every this-many-th start of a lane's complete rows.
EVENT_INDEX_STEP = 1 << 16
#: The fields of a row's head, with their numpy dtypes: what many rows share, so the file stores each
#: distinct head once (the metadata's `heads` table, one array per field) and a row its head's index.
EVENT_HEAD_FIELDS: tuple[tuple[str, str], ...] = (
    ("ph", "uint8"),  # the Chrome trace phase letter as a byte: X complete, i instant, C counter, s / f flow
    ("lane", "uint16"),  # index into the lanes table (pid, tid, process and thread names, kind)
    ("name", "int32"),  # index into the names table
    ("category", "uint16"),  # index into the categories table (step, phase, span, compute, host, counter, ...)
    ("args", "int32"),  # index into the args table (JSON text), -1 for none
)
#: The event file's columns, in order, with their numpy dtypes.
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("start_ns", "int64"),  # start (time of an instant / counter value), ns from the run's origin
    ("dur_ns", "int64"),  # duration, 0 for events without one
    ("step", "int32"),  # the step the event started in, -1 outside every step
    ("head", "int32"),  # index into the heads table
)
#: The columns of each version's files, in order: version 1 stored the head fields in every row.
EVENT_FILE_COLUMNS: dict[int, tuple[str, ...]] = {
    1: ("ph", "lane", "start_ns", "dur_ns", "name", "category", "step", "args"),
    2: tuple(name for name, _ in EVENT_COLUMNS),
}
#: The numpy dtype of every field a reader gets (`EventFile.column`): the head fields and the columns.
EVENT_FIELD_DTYPES: dict[str, str] = dict(EVENT_HEAD_FIELDS + EVENT_COLUMNS)

# ---- queue names --------------------------------------------------------------------------

ARROW = "->"  # a connector queue between two pipeline stages: "producer->consumer"
HOST_QUEUE = "host_queue"  # the host pipeline's output: batches ready on the host
DEVICE_QUEUE = "device_queue"  # batches already staged on the device, waiting for compute

# ---- readers ------------------------------------------------------------------------------

_STEP_NUMBERS = ["step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "all_reduce_ms"]
_CLUSTER_NUMBERS = [
    "rank",
    "step",
    "iteration_gap_ms",
    "fp_bp_ms",
    "tail_ms",
    "total_ms",
    "comm_ms",
    "comm_overlap_ms",
    "exposed_comm_ms",
    "wait_ms",
    "busy_ms",
    "fp_bp_excl_comm_ms",
    "tail_excl_comm_ms",
    "slowest_rank",
]
#: What a reader requires of each CSV: (columns that must exist, the ones among them that must be numbers).
CSV_REQUIRED: dict[str, tuple[list[str], list[str]]] = {
    "step_trace": (_STEP_NUMBERS, _STEP_NUMBERS),
    "op_type": (
        ["device", "op_type", "count", "total_ms", "avg_ms", "share_pct"],
        ["count", "total_ms", "avg_ms", "share_pct"],
    ),
    "op_detail": (
        ["device", "op_type", "name", "count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"],
        ["count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"],
    ),
    "data_queue": (["queue", "time_ms", "size", "capacity"], ["time_ms", "size", "capacity"]),
    "device_counters": (["source", "device", "metric", "time_ms", "value"], ["time_ms", "value"]),
    "cluster_step_trace": (_CLUSTER_NUMBERS, _CLUSTER_NUMBERS),
}
#: Every column of each CSV the writer writes: the numeric ones among them are checked whenever
#: present (a consumer computes with them), the required ones must be present.
CSV_COLUMNS: dict[str, list[str]] = {
    "step_trace": STEP_TRACE_COLUMNS,
    "op_type": OP_TYPE_COLUMNS,
    "op_detail": OP_DETAIL_COLUMNS,
    "data_queue": DATA_QUEUE_COLUMNS,
    "device_counters": DEVICE_COUNTER_COLUMNS,
    "cluster_step_trace": CLUSTER_STEP_COLUMNS,
}
#: Columns read as text whatever they look like (an op named "1" stays "1").
TEXT_DTYPES = dict.fromkeys(("name", "queue", "op_type", "device", "metric", "shapes", "scope", "source"), str)
#: Text columns that may be absent in a file and are then filled with "".
OPTIONAL_TEXT = ("category", "shapes", "scope", "fp_start_source", "bp_end_source", "step_source", "event")
#: Numeric columns that may hold a value that is not finite, and the spellings the writer uses for
#: them (a user counter may be NaN: a diverging loss is worth recording; an empty cell is a value
#: the row does not have, read as NaN). Any other column, and any other spelling (NaN, Infinity,
#: 1e400), is refused.
NON_FINITE_CELLS: dict[tuple[str, str], tuple[str, ...]] = {
    ("device_counters", "value"): ("nan", "inf", "-inf"),
    ("step_trace", DEVICE_BUSY[0]): ("",),  # empty: no device data in the step
    ("step_trace", DEVICE_IDLE[0]): ("",),
    ("step_trace", GAP_HOST[0]): ("",),  # empty: the run did not measure its data wait
}

#: The bound (exclusive) on the magnitude of a number of an output file: whole numbers (counts,
#: sizes, steps, ns) are int64s, and times in ms come from the run's int64 ns clock. A value at or
#: beyond it (1e308 ms, a capacity of 2**64) is damage, refused by the readers with the file, column and line; only a
#: user's counter value (device_counters.value) may be any float.
MAX_WHOLE = 2.0**63
MAX_MS = MAX_WHOLE / 1e6
UNBOUNDED_COLUMNS = {("device_counters", "value")}


def column_limit(kind: str, column: str) -> float:
    """The bound (exclusive) on the magnitude of column `column` of CSV `kind` (inf: any value)."""
    if (kind, column) in UNBOUNDED_COLUMNS:
        return math.inf
    return MAX_MS if column.endswith(("_ms", "_pct", "_ratio")) else MAX_WHOLE


# ---- text -----------------------------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def valid_text(text: str) -> str:
    """`text` as valid Unicode: every lone surrogate escaped, the rest unchanged.

    Python strings may hold lone surrogates (`os.fsdecode(b"\\xff")` is "\\udcff"), which no UTF-8
    file can: an undecodable byte (U+DC80-U+DCFF) becomes the text `\\xNN` of that byte, any other
    lone surrogate `\\uXXXX`. Valid text (nearly always) is returned as it is, after one encode.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_escape_surrogate, text)
    return text


def valid_texts(values: Iterable[Any]) -> list[Any] | None:
    """The values with every str made `valid_text`, or None when none needed it (the usual case)."""
    values = list(values)
    try:
        "".join(values).encode("utf-8")
        return None
    except TypeError:  # not all text: check the strings one by one
        if all(not isinstance(v, str) or v == valid_text(v) for v in values):
            return None
    except UnicodeEncodeError:
        pass
    return [valid_text(v) if isinstance(v, str) else v for v in values]


# ---- JSON values --------------------------------------------------------------------------


def plain_value(value: Any, digits: Optional[int] = None) -> Any:
    """A value as an output JSON file holds it: numpy scalars as Python numbers, arrays as lists, a
    float that is not finite as None (JSON has no NaN), floats rounded to `digits` when given; text,
    whole numbers, booleans and None as they are; anything else as its str(). Also a json.dumps
    `default`."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if digits is not None else value
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def plain_document(doc: Any) -> Any:
    """A JSON document held in memory as a reader gets it back from its file, without the text:
    mappings with text keys, sequences as lists, every other value through plain_value."""
    if isinstance(doc, dict):
        return {_json_key(k): plain_document(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple, np.ndarray)):
        return [plain_document(v) for v in doc]
    return plain_value(doc)


def _json_key(key: Any) -> str:
    """A mapping key as a JSON object's key (json.dumps writes 1 as "1", True as "true", None as "null")."""
    key = plain_value(key)
    return key if isinstance(key, str) else json.dumps(key)


def regular_file(path: Path, what: str = "", noun: str = "file") -> os.stat_result:
    """os.stat of `path` (symlinks followed), or InputError when it cannot be read as a plain file:
    missing, a symlink loop, a directory, a FIFO, a device (/dev/zero), a socket. Opening a FIFO
    would wait for a writer and reading /dev/zero never ends, so nothing is opened before this."""
    label = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{label} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read {label}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a named pipe (FIFO)"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "not a regular file"
        )
        raise InputError(f"{label} is {kind}, not a {noun}")
    return st


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into one sentence naming the file.

    Strict RFC 8259: NaN / Infinity literals (which Python's json would accept), invalid UTF-8 and
    documents nested deeper than the parser's recursion limit are refused.
    """
    regular_file(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise InputError(f"{path} is empty (was the run interrupted while writing it?)")
    try:
        return json.loads(data, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): it may be truncated "
            "or not a profview file"
        ) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: it is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # a NaN / Infinity literal (parse_constant), an over-long integer
        what = (
            f"a {exc} literal, which JSON does not allow"
            if str(exc) in ("NaN", "Infinity", "-Infinity")
            else "a number Python cannot read"
        )
        raise InputError(f"{path} is not valid JSON: it holds {what}") from None
    except RecursionError:
        raise InputError(f"{path} is not a profview file: its JSON is nested too deeply to read") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object (profiler_info, report, queue and cluster summaries)."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise InputError(f"{path} is malformed: expected a JSON object")
    return value


#: What readers rely on in profiler_info_{rank}.json: field -> (JSON types allowed, what to say).
#: Absent fields are fine (older files, imports); a present one of another type is refused.
INFO_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "schema_version": ((int,), "a whole number"),
    "rank": ((int,), "a whole number"),
    "world_size": ((int,), "a whole number"),
    "outputs": ((list,), "a list of file names"),
    "warnings": ((list,), "a list of sentences"),
    "source_path": ((str,), "a path (text)"),
    "host": ((str,), "text"),
    "data_origin": ((str,), "text"),
    "recording": ((dict,), "an object"),
    "sources": ((dict,), "an object"),
    "clock": ((dict,), "an object"),
    "steps": ((dict,), "an object"),
    "overhead": ((dict,), "an object"),
    "config": ((dict,), "an object"),
    "timeline": ((dict,), "an object"),
}


def read_profiler_info(path: Path) -> dict[str, Any]:
    """profiler_info_{rank}.json, with the fields readers use checked (INFO_FIELDS), a newer schema
    refused, and every listed output a file name (no directory part)."""
    info = read_json_object(path)
    for key, (types, meaning) in INFO_FIELDS.items():
        if key not in info:
            continue
        value = info[key]
        if not isinstance(value, types) or isinstance(value, bool):
            if key == "source_path" and value is None:
                continue
            raise InputError(f"{path} is malformed: {key} should be {meaning}, not {_shown(value)}")
    version = info.get("schema_version", SCHEMA_VERSION)
    if version > SCHEMA_VERSION or version < 1:
        raise InputError(
            f"{path} has schema version {version}, "
            + (
                f"newer than this profview reads ({SCHEMA_VERSION}); upgrade profview"
                if version > SCHEMA_VERSION
                else "which no profview writes"
            )
        )
    outputs = info.get("outputs", [])
    bad = [
        name
        for name in outputs
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", "..")
    ]
    if bad:
        raise InputError(f"{path} is malformed: outputs lists {_shown(bad[0])}, which is not a file name")
    if not all(isinstance(w, str) for w in info.get("warnings", [])):
        raise InputError(f"{path} is malformed: warnings should be a list of sentences")
    return info


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- JSON documents: the type of every key readers use --------------------------------------

#: Leaf types of a document schema. Numbers may be null: the writer writes a float that is not
#: finite as null (plain_value), and readers treat it as "no value".
NUMBER: tuple[type, ...] = (int, float, type(None))
#: A number the writer always has (a threshold in force): never null.
FIGURE: tuple[type, ...] = (int, float)
WHOLE: tuple[type, ...] = (int, type(None))
TEXT: tuple[type, ...] = (str,)
TEXT_OR_NULL: tuple[type, ...] = (str, type(None))
FLAG: tuple[type, ...] = (bool,)
#: An object whose keys are not fixed (a queue name, a rank): "*" gives the type of every value.
ANY_KEY = "*"


class Nullable(tuple):
    """A document schema node that may also be null (`Nullable((spec,))`): an object or list the
    writer leaves null when it has nothing (`straggler`, a `verdict` without queues)."""


def nullable(spec: Any) -> Nullable:
    return Nullable((spec,))


_FINDING = {
    "kind": TEXT,
    "key": TEXT,
    "severity": TEXT,
    "title": TEXT,
    "at_stake_ms": NUMBER,
    "at_stake_pct": NUMBER,
    "evidence": TEXT,
    "threshold": TEXT,
    "suggestion": TEXT,
    "files": [TEXT],
    "metrics": {ANY_KEY: NUMBER},
    "rank": WHOLE,
}

#: The type of every key of the output JSON documents (report, queue_summary, cluster_summary) that
#: some reader uses: a dict is an object (its keys checked when present, others ignored; ANY_KEY for
#: every key), a one-item list a list of that item, a tuple of types a value. `read_document` checks
#: a document against its schema once, at the edge, so the viewer, `compare` and `--summary` can use
#: the values without re-checking; an absent key is fine (older files, imports).
DOCUMENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "report": {
        "schema_version": WHOLE,
        "verdict": TEXT,
        "headline": TEXT,
        "framework": TEXT,
        "steps": {
            "analysed": WHOLE,
            "warmup_skipped": WHOLE,
            "outliers": WHOLE,
            "steady": WHOLE,
            "rule": TEXT,
            "mean_ms": NUMBER,
            "median_ms": NUMBER,
            "wall_ms": NUMBER,
            "mean_phase_ms": {ANY_KEY: NUMBER},
            "share_pct": {ANY_KEY: NUMBER},
            "op_captured_steps": WHOLE,
            "data_wait_measured": FLAG,
            "source": TEXT,
            "source_note": TEXT,
        },
        "thresholds": {ANY_KEY: FIGURE},
        "findings": [_FINDING],
        "devices": [{**dict.fromkeys(DEVICE_TIME_COLUMNS, NUMBER), "device": TEXT}],
        "profiler_cost": {"overhead_ms_per_step": NUMBER, "overhead_pct": NUMBER, "memory_mb": {ANY_KEY: NUMBER}},
    },
    "queue_summary": {
        "schema_version": WHOLE,
        "thresholds": {"empty_ratio_warning": FIGURE, "full_ratio_line": FIGURE, "meaning": TEXT},
        "verdict": {
            "kind": TEXT,
            "reason": TEXT,
            "feed_queue": TEXT_OR_NULL,
            "host_queue": TEXT_OR_NULL,
            "device_queue": TEXT_OR_NULL,
            "bottleneck_stage": TEXT_OR_NULL,
        },
        "queues": [
            {
                "queue": TEXT,
                "role": TEXT,
                "producer": TEXT,
                "consumer": TEXT,
                "capacity": NUMBER,
                "samples": NUMBER,
                "puts": NUMBER,
                "gets": NUMBER,
                "empty_ratio": NUMBER,
                "full_ratio": NUMBER,
                "put_full_ratio": NUMBER,
                "time_empty_ratio": NUMBER,
                "time_full_ratio": NUMBER,
                "mean_size": NUMBER,
                "max_size": NUMBER,
                "span_ms": NUMBER,
                "get_wait_ms": NUMBER,
                "get_wait_mean_ms": NUMBER,
                "get_wait_per_step_ms": NUMBER,
                "put_wait_ms": NUMBER,
            }
        ],
        "pipeline": {
            "stages": [
                {
                    "stage": TEXT,
                    "depth": NUMBER,
                    "input_queue": TEXT_OR_NULL,
                    "output_queue": TEXT_OR_NULL,
                    "input_full_ratio": NUMBER,
                    "output_empty_ratio": NUMBER,
                    "slow": FLAG,
                }
            ],
            "bottleneck_stage": TEXT_OR_NULL,
        },
        "totals": {ANY_KEY: NUMBER},
        "steps": [
            {
                "step": NUMBER,
                "iteration_gap_ms": NUMBER,
                "data_wait_ms": NUMBER,
                "gap_wait_ms": NUMBER,
                "gap_wait_pct": NUMBER,
                "get_wait_ms": {ANY_KEY: NUMBER},
            }
        ],
    },
    "cluster_summary": {
        "schema_version": WHOLE,
        "ranks": {
            "world_size": WHOLE,
            "profiled": [WHOLE],
            "present": [WHOLE],
            "missing": [WHOLE],
            "not_profiled": [WHOLE],
            "stopped_early": {ANY_KEY: {}},
            "last_step": WHOLE,
        },
        "clock": {
            "method": TEXT,
            "reference_rank": WHOLE,
            "origin_unix_ns": WHOLE,
            "max_uncertainty_ns": NUMBER,
            "per_rank": {ANY_KEY: {}},
        },
        "steps": {ANY_KEY: WHOLE},
        "per_rank": [{ANY_KEY: NUMBER}],
        "straggler": nullable(
            {
                "rank": WHOLE,
                "slowest_share_pct": NUMBER,
                "excess_ms": NUMBER,
                "phase": TEXT,
                "phase_excess_ms": {ANY_KEY: NUMBER},
                "others_wait_ms": NUMBER,
            }
        ),
        "communication": {ANY_KEY: NUMBER},
        "findings": [_FINDING],
        "warnings": [TEXT],
        "devices": [{ANY_KEY: (int, float, str, type(None))}],
        "device_time": [{**dict.fromkeys(DEVICE_TIME_COLUMNS, NUMBER), "device": TEXT, "rank": WHOLE}],
        "timeline_ranks": [WHOLE],
        "timeline": {
            "file": TEXT,
            "content": TEXT,
            "events": WHOLE,
            "events_written": WHOLE,
            "max_events": WHOLE,
            "steps": [WHOLE],
            "median_step": WHOLE,
            "slowest_step": WHOLE,
            "outlier_steps": [WHOLE],
            "outlier_steps_left_out": [WHOLE],
            "rest": TEXT,
        },
        "outputs": [TEXT],
    },
}


def _meaning(spec: Any) -> str:
    """What a schema node asks for, in words."""
    if isinstance(spec, Nullable):
        return _meaning(spec[0]) + " or null"
    if isinstance(spec, dict):
        return "an object"
    if isinstance(spec, list):
        return "a list"
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
    words = [names[t] for t in spec if t is not type(None) and not (t is int and float in spec)]
    return " or ".join(words) + (" or null" if type(None) in spec else "")


def type_problem(value: Any, spec: Any, where: str = "") -> Optional[str]:
    """Where `value` breaks the schema node `spec`, in words ("verdict should be an object, not \\"x\\""),
    or None. Booleans are not numbers (JSON true is no count)."""
    if isinstance(spec, Nullable):
        return None if value is None else type_problem(value, spec[0], where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where or 'the document'} should be {_meaning(spec)}, not {_shown(value)}"
        for key, item in value.items():
            sub = spec.get(key, spec.get(ANY_KEY))
            if sub is not None:
                problem = type_problem(item, sub, f"{where}.{key}" if where else key)
                if problem:
                    return problem
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where} should be {_meaning(spec)}, not {_shown(value)}"
        for i, item in enumerate(value):
            problem = type_problem(item, spec[0], f"{where}[{i}]")
            if problem:
                return problem
        return None
    if not isinstance(value, spec) or (isinstance(value, bool) and bool not in spec):
        return f"{where} should be {_meaning(spec)}, not {_shown(value)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= MAX_WHOLE:
        return f"{where} is {_shown(value)}, beyond what a 64-bit number can hold"
    return None


def read_document(path: Path, kind: str) -> dict[str, Any]:
    """An output JSON document of `kind` (a DOCUMENT_SCHEMAS key), its types checked: one sentence
    naming the file and the key when a value has the wrong JSON type."""
    doc = read_json_object(path)
    problem = type_problem(doc, DOCUMENT_SCHEMAS[kind])
    if problem:
        raise InputError(f"{path} is malformed: {problem}")
    return doc


def read_csv(path: Path | IO[str], kind: str) -> pd.DataFrame:
    """Read one of the output CSVs (a CSV_REQUIRED key) and check the columns consumers rely on.

    Text cells are read as written ("" stays "", an op named "nan" or "1" stays text); the numeric
    columns consumers rely on must hold finite numbers (NON_FINITE_CELLS lists the exceptions).
    """
    required, numeric = CSV_REQUIRED[kind]
    if isinstance(path, (str, os.PathLike)):  # a file (the live view passes text in memory)
        regular_file(path)
    try:
        frame = pd.read_csv(path, na_filter=False, dtype=TEXT_DTYPES)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path} is empty (was the run interrupted while writing it?)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path} is not a valid CSV file ({first.rstrip('.')})") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"{path} is malformed: missing column(s) {', '.join(missing)}")
    text = set(TEXT_DTYPES) | set(OPTIONAL_TEXT)
    for col in numeric + [
        c for c in CSV_COLUMNS.get(kind, ()) if c in frame.columns and c not in numeric and c not in text
    ]:
        frame[col] = _numeric_column(
            frame[col], path, col, NON_FINITE_CELLS.get((kind, col), ()), column_limit(kind, col)
        )
    for col in OPTIONAL_TEXT:
        if col in frame.columns:
            frame[col] = frame[col].astype(str)
    return frame


def _numeric_column(
    column: pd.Series, path: Path, name: str, non_finite: tuple[str, ...], limit: float = math.inf
) -> pd.Series:
    """A CSV column as float64 numbers (int64 when every cell is whole), or InputError naming the
    first line that is not a finite number (or one of the `non_finite` spellings) or is at or
    beyond `limit` in magnitude."""
    if column.dtype.kind in "iu":
        beyond = np.abs(column.to_numpy(dtype=np.float64)) >= limit
        if beyond.any():
            _beyond_limit(column, path, name, int(np.flatnonzero(beyond)[0]))
        return column
    if column.dtype.kind == "f":
        values = column.to_numpy()
        bad = ~np.isfinite(values)
    else:
        text = column.astype(str)
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
        allowed = text.isin(non_finite).to_numpy() if non_finite else False
        bad = ~np.isfinite(values) & ~allowed
        if non_finite:
            values = np.where(allowed, text.map(_SPELLED).to_numpy(dtype=np.float64, na_value=np.nan), values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        cell = str(column.iloc[row])
        what = (
            "an empty value"
            if not cell.strip()
            else f"a value that is not a finite number ({cell[:40]!r})"
            if _is_number_text(cell)
            else f"a non-numeric value ({cell[:40]!r})"
        )
        raise InputError(f"{path} is malformed: column {name} has {what} on line {row + 2}")
    with np.errstate(invalid="ignore"):
        beyond = (np.abs(values) >= limit) & np.isfinite(values)
    if beyond.any():
        _beyond_limit(column, path, name, int(np.flatnonzero(beyond)[0]))
    return pd.Series(values, index=column.index, name=column.name, dtype=np.float64)


def _beyond_limit(column: pd.Series, path: Path, name: str, row: int) -> None:
    raise InputError(
        f"{path} is malformed: column {name} has {str(column.iloc[row])[:40]!r} on line {row + 2}, "
        "beyond what a 64-bit clock or count can hold"
    )


_SPELLED = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _is_number_text(text: str) -> bool:
    """Whether float() reads `text` (nan, inf and 1e400 included)."""
    try:
        float(text)
    except (ValueError, OverflowError):
        return False
    return True


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

    def _stored(self, name: str, start: int, stop: Optional[int]) -> np.ndarray:
        """Rows [start, stop) of a stored column (a view of the mapped file when they lie in one batch)."""
        stop = self.rows if stop is None else min(stop, self.rows)
        start = max(0, start)
        if stop <= start:
            return np.empty(0, dtype=EVENT_FIELD_DTYPES[name])
        index = self._index[name]
        first = int(np.searchsorted(self.batch_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.batch_starts, stop, side="left")) - 1
        parts = []
        for i in range(first, last + 1):
            b0 = int(self.batch_starts[i])
            values = self._batch(i).column(index).to_numpy(zero_copy_only=True)
            parts.append(values[max(start - b0, 0) : stop - b0])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def chunks(self, stop: Optional[int] = None, rows: int = 1 << 22):
        """(start, stop) row ranges of at most `rows` rows over [0, stop): for streaming passes."""
        stop = self.rows if stop is None else stop
        for start in range(0, stop, rows):
            yield start, min(stop, start + rows)


def _head_table(meta: dict[str, Any], path: Path) -> dict[str, np.ndarray]:
    """A version-2 file's heads table (one array per head field, all as long); one sentence when it is not one."""
    table = meta.get("heads")
    try:
        heads = {name: np.asarray(table[name], dtype=dtype) for name, dtype in EVENT_HEAD_FIELDS}
        if all(values.ndim == 1 and len(values) == len(heads["ph"]) for values in heads.values()):
            return heads
    except (TypeError, KeyError, ValueError, OverflowError):
        pass
    raise InputError(f"{path} is malformed: its metadata's heads table is not the event file's")


def read_event_file(path: Path) -> EventFile:
    """Open an events_{rank}.arrow, checking what consumers rely on; one sentence when it is not one."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - a core dependency
        raise InputError(f"reading {path} needs pyarrow (pip install pyarrow)") from None
    path = Path(path)
    regular_file(path)  # a FIFO would block the open, a device never end
    try:
        if valid_text(str(path)) == str(path):
            source = pa.OSFile(str(path), "r")
        else:  # Arrow takes UTF-8 paths: a non-UTF-8 name goes through Python
            source = pa.PythonFile(open(path, "rb"), mode="r")
        reader = pa.ipc.open_file(source)
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except (OSError, pa.ArrowInvalid):
        if path.is_file() and path.stat().st_size == 0:
            raise InputError(f"{path} is empty (was the run interrupted while writing it?)") from None
        raise InputError(f"{path} is not a profview event file (Arrow IPC): it may be truncated") from None
    raw = (reader.schema.metadata or {}).get(EVENT_FILE_META_KEY.encode())
    try:
        meta = json.loads(raw) if raw else None
        if isinstance(meta, dict) and reader.num_record_batches:  # the row index, in the last (empty) batch
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
        raise InputError(
            f"{path} has event-file version {version!r}, newer than this viewer reads "
            f"({EVENT_FILE_VERSION}); upgrade profview"
        )
    if reader.schema.names != list(EVENT_FILE_COLUMNS.get(version, ())):
        raise InputError(f"{path} is malformed: its columns are not the event file's")
    for key in ("names", "categories", "args", "lanes", "lane_complete", "complete_rows"):
        if key not in meta:
            raise InputError(f"{path} is malformed: its metadata has no {key!r}")
    return EventFile(path, reader, meta, _head_table(meta, path) if "head" in reader.schema.names else {})

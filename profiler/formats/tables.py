"""The CSV side of the output contract: what a reader requires of each CSV, and `read_csv`, which
checks it (the columns consumers rely on exist, their cells are finite numbers within bounds)."""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Optional

import numpy as np
import pandas as pd

from profiler.errors import InputError
from profiler.formats.columns import (
    CLUSTER_COMM_OP_COLUMNS,
    CLUSTER_COMM_SPLIT_COLUMNS,
    CLUSTER_STEP_COLUMNS,
    COMM_OP_COLUMNS,
    COMM_PIECE_COLUMNS,
    COMM_SPLIT_COLUMNS,
    DATA_QUEUE_COLUMNS,
    DATA_WAIT,
    DEVICE_BUSY,
    DEVICE_COUNTER_COLUMNS,
    DEVICE_IDLE,
    GAP_HOST,
    KERNEL_COLUMNS,
    MAX_MS,
    MAX_WHOLE,
    MEMORY_COLUMNS,
    MEMORY_EVENT_COLUMNS,
    MODULE_COLUMNS,
    OP_DETAIL_COLUMNS,
    OP_DEVICE_COLUMNS,
    OP_MEMORY_COLUMNS,
    OP_SHAPE_COLUMNS,
    OP_STACK_COLUMNS,
    OP_TYPE_COLUMNS,
    STEP_ACTIVITY_COLUMNS,
    STEP_TRACE_COLUMNS,
)
from profiler.formats.documents import regular_file

OP_DEVICE_NUMBERS = [column for column in OP_DEVICE_COLUMNS if column != "tc_eligible"]
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
    "step_activity": (STEP_ACTIVITY_COLUMNS, STEP_ACTIVITY_COLUMNS),
    "op_stacks": (
        ["device", "name", "stack", "count", "total_ms", "self_ms", "avg_ms", "share_pct"],
        ["count", "total_ms", "self_ms", "avg_ms", "share_pct"],
    ),
    "op_shapes": (
        ["device", "name", "shapes", "count", "total_ms", "self_ms", "avg_ms", "share_pct"],
        ["count", "total_ms", "self_ms", "avg_ms", "share_pct"],
    ),
    "kernels": (KERNEL_COLUMNS, ["calls", "total_ms", "mean_ms", "max_ms", "min_ms"]),
    "modules": (MODULE_COLUMNS, ["occurrences", "host_total_ms", "host_self_ms"]),
    "comm_split": (COMM_SPLIT_COLUMNS, COMM_SPLIT_COLUMNS),
    "comm_ops": (COMM_OP_COLUMNS, COMM_OP_COLUMNS[1:]),
    "cluster_comm_split": (CLUSTER_COMM_SPLIT_COLUMNS, CLUSTER_COMM_SPLIT_COLUMNS),
    "comm_pieces": (COMM_PIECE_COLUMNS, COMM_PIECE_COLUMNS[1:]),
    "cluster_comm_ops": (CLUSTER_COMM_OP_COLUMNS, ["rank", *COMM_OP_COLUMNS[1:]]),
    "memory": (MEMORY_COLUMNS, ["time_ms"]),
    "memory_events": (MEMORY_EVENT_COLUMNS, ["bytes"]),
    "op_memory": (OP_MEMORY_COLUMNS, OP_MEMORY_COLUMNS[2:]),
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
    "op_shapes": OP_SHAPE_COLUMNS,
    "op_stacks": OP_STACK_COLUMNS,
    "kernels": KERNEL_COLUMNS,
    "modules": MODULE_COLUMNS,
    "comm_split": COMM_SPLIT_COLUMNS,
    "comm_ops": COMM_OP_COLUMNS,
    "cluster_comm_split": CLUSTER_COMM_SPLIT_COLUMNS,
    "comm_pieces": COMM_PIECE_COLUMNS,
    "cluster_comm_ops": CLUSTER_COMM_OP_COLUMNS,
    "memory": MEMORY_COLUMNS,
    "memory_events": MEMORY_EVENT_COLUMNS,
    "op_memory": OP_MEMORY_COLUMNS,
    "step_activity": STEP_ACTIVITY_COLUMNS,
    "data_queue": DATA_QUEUE_COLUMNS,
    "device_counters": DEVICE_COUNTER_COLUMNS,
    "cluster_step_trace": CLUSTER_STEP_COLUMNS,
}
#: Columns read as text whatever they look like (an op named "1" stays "1").
TEXT_DTYPES = dict.fromkeys(
    (
        "name",
        "queue",
        "op_type",
        "op",
        "device",
        "metric",
        "shapes",
        "scope",
        "source",
        "tensor_cores",
        "path",
        "parent",
        "stack",
    ),
    str,
)
#: Text columns that may be absent in a file and are then filled with "".
OPTIONAL_TEXT = (
    "category",
    "shapes",
    "scope",
    "fp_start_source",
    "bp_end_source",
    "step_source",
    "event",
    "tc_eligible",
)
#: Numeric columns that may hold a value that is not finite, and the spellings the writer uses for
#: them (a user counter may be NaN: a diverging loss is worth recording; an empty cell is a value
#: the row does not have, read as NaN). Any other column, and any other spelling (NaN, Infinity,
#: 1e400), is refused.
NON_FINITE_CELLS: dict[tuple[str, str], tuple[str, ...]] = {
    ("device_counters", "value"): ("nan", "inf", "-inf"),
    ("step_trace", DEVICE_BUSY[0]): ("",),  # empty: no device data in the step
    ("step_trace", DEVICE_IDLE[0]): ("",),
    ("step_trace", GAP_HOST[0]): ("",),  # empty: the run did not measure its data wait in the step
    ("step_trace", DATA_WAIT[0]): ("",),  # empty: measured in other steps of the run, not this one
    # empty: not a framework op, or a run whose kernels carry no launch (OP_DEVICE_COLUMNS)
    **{
        (kind, column): ("",)
        for kind in ("op_type", "op_detail", "op_shapes", "op_stacks")
        for column in OP_DEVICE_NUMBERS
    },
    ("modules", "device_total_ms"): ("",),  # empty: no kernel of the run is tied to its launch
    ("modules", "device_self_ms"): ("",),
    ("memory", "allocated_bytes"): ("",),  # empty: the trace did not record the device's total
    ("memory", "reserved_bytes"): ("",),
    ("memory_events", "alloc_ms"): ("",),  # empty: allocated before the trace began
    ("memory_events", "free_ms"): ("",),  # empty: still held when it ended
    ("memory_events", "lifetime_ms"): ("",),
}

UNBOUNDED_COLUMNS = {("device_counters", "value")}


def column_limit(kind: str, column: str) -> float:
    """The bound (exclusive) on the magnitude of column `column` of CSV `kind` (inf: any value)."""
    if (kind, column) in UNBOUNDED_COLUMNS:
        return math.inf
    return MAX_MS if column.endswith(("_ms", "_pct", "_ratio")) else MAX_WHOLE


def read_csv(path: Path | IO, kind: str) -> pd.DataFrame:
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
        column = frame[col]
        checked = _numeric_column(column, path, col, NON_FINITE_CELLS.get((kind, col), ()), column_limit(kind, col))
        if checked is not column:  # converted from text (a column already numbers stays as read)
            frame[col] = checked
    for col in OPTIONAL_TEXT:
        if col in frame.columns:
            frame[col] = frame[col].astype(str)
    return frame


#: How much CSV text read_csvs parses at a time.
BATCH_BYTES = 32 << 20
_WHOLE_NUMBER = re.compile(rb"[+-]?[0-9]+")


def read_csvs(paths: Sequence[Path], kind: str) -> list[pd.DataFrame]:
    """`read_csv(path, kind)` of each of `paths`, in order: the same frames and the same refusals, with
    the files that share a header parsed together (one pandas parse per BATCH_BYTES of them, not one per
    file: a merge reads thousands of ranks' small step traces). A batch that does not read cleanly, or
    whose rows do not split back into its files, is read file by file, and so is a file whose numeric
    column pandas might type differently on its own (see `_float_columns`)."""
    frames: list[Optional[pd.DataFrame]] = [None] * len(paths)
    batch: list[tuple[int, bytes, bytes]] = []  # (position, header, rows)
    for i, path in enumerate(paths):
        split = _header_and_rows(path, kind)
        if split is None:
            frames[i] = read_csv(path, kind)
            continue
        if batch and (split[0] != batch[0][1] or sum(len(b[2]) for b in batch) >= BATCH_BYTES):
            _read_batch(batch, paths, kind, frames)
            batch = []
        batch.append((i, *split))
    if batch:
        _read_batch(batch, paths, kind, frames)
    return frames  # type: ignore[return-value]


def _header_and_rows(path: Path, kind: str) -> Optional[tuple[bytes, bytes]]:
    """A file's header line and its rows (ending in a line feed) when it can be parsed with others: a
    plain file of contract columns with rows, no quote and no carriage return (each line one row)."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    header, _, rows = data.partition(b"\n")
    if not rows or b'"' in data or b"\r" in data:
        return None
    names = _column_names(header)
    if len(set(names)) != len(names) or not set(names) <= set(CSV_COLUMNS.get(kind, ())) | set(CSV_REQUIRED[kind][0]):
        return None
    return header, rows if rows.endswith(b"\n") else rows + b"\n"


def _read_batch(
    batch: list[tuple[int, bytes, bytes]], paths: Sequence[Path], kind: str, frames: list[Optional[pd.DataFrame]]
) -> None:
    """Parse `batch` (files sharing a header) at once and give each file its rows in `frames`; a file the
    batch cannot speak for is read on its own."""
    header = batch[0][1]
    counts = [rows.count(b"\n") for _, _, rows in batch]
    try:
        table = read_csv(io.BytesIO(b"\n".join([header, *(rows for _, _, rows in batch)])), kind)
    except InputError:  # a file is refused: read each, so the refusal names it
        table = None
    if table is None or len(table) != sum(counts):  # blank lines skipped: rows no longer map to files
        for i, _, _ in batch:
            frames[i] = read_csv(paths[i], kind)
        return
    floats = _float_columns(table, header)
    start = 0
    for (i, _, rows), count in zip(batch, counts):
        alike = not any(_WHOLE_NUMBER.fullmatch(cell.strip()) for cell in _cells(rows, floats))
        frames[i] = table.iloc[start : start + count].reset_index(drop=True) if alike else read_csv(paths[i], kind)
        start += count


def _float_columns(table: pd.DataFrame, header: bytes) -> list[int]:
    """Positions (in `header`) of the numeric columns a batch read as floats. pandas types a column by its
    cells, so a column of whole numbers in one file but fractions in another is int64 read alone and float64
    in the batch: a file whose first cell in such a column is a whole number may be one (profview writes
    every float with a decimal point) and is read alone."""
    text = set(TEXT_DTYPES) | set(OPTIONAL_TEXT)
    return [i for i, name in enumerate(_column_names(header)) if name not in text and table[name].dtype.kind == "f"]


def _column_names(header: bytes) -> list[str]:
    """The names of a CSV header line's columns (no quotes: `_header_and_rows` batches no file with one)."""
    return header.decode("utf-8", errors="replace").split(",")


def _cells(rows: bytes, positions: list[int]) -> list[bytes]:
    """The cells at `positions` of the first of `rows` (lines of unquoted cells)."""
    first = rows[: rows.index(b"\n")].split(b",")
    return [first[i] for i in positions if i < len(first)]


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
    if column.dtype == np.float64:
        return column  # read as numbers, all of them allowed
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

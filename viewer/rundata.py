"""Loading one profview output directory into `RunData`: the tables the report pages read.

Every file follows docs/formats.md. Reading is strict about what the pages rely on (the
file parses, the columns exist, numbers are numbers) and tolerant of everything else, so that
a malformed or half-written file gives one clear sentence instead of a traceback deep inside
a page, and an absent optional file simply leaves its page saying "no data".
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from viewer.errors import InputError

SCHEMA_VERSION = 1

#: Columns each CSV must have (formats.md) and which of them must be numeric.
CSV_COLUMNS: dict[str, tuple[list[str], list[str]]] = {
    "step_trace": (
        ["step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "all_reduce_ms"],
        ["step", "start_ms", "iteration_gap_ms", "fp_bp_ms", "tail_ms", "total_ms", "all_reduce_ms"],
    ),
    "op_type": (
        ["device", "op_type", "count", "total_ms", "avg_ms", "share_pct"],
        ["count", "total_ms", "avg_ms", "share_pct"],
    ),
    "op_detail": (
        ["device", "op_type", "name", "count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"],
        ["count", "total_ms", "avg_ms", "min_ms", "max_ms", "share_pct"],
    ),
    "data_queue": (
        ["queue", "time_ms", "size", "capacity"],
        ["time_ms", "size", "capacity"],
    ),
    "device_counters": (
        ["source", "device", "metric", "time_ms", "value"],
        ["time_ms", "value"],
    ),
}

#: Columns read as text whatever they look like (an op named "1" stays "1").
TEXT_DTYPES = {c: str for c in ("name", "queue", "op_type", "device", "metric", "shapes", "scope", "source")}

#: Text columns that may be absent in a file and are then filled with "".
OPTIONAL_TEXT = ("category", "shapes", "scope", "fp_start_source", "bp_end_source", "event")

INFO_PATTERN = re.compile(r"^profiler_info_(\d+)\.json$")


@dataclass
class RunData:
    """One rank of one run, as the viewer needs it. Absent files are None."""

    rank: int
    directory: Path
    info: dict[str, Any] = field(default_factory=dict)
    step_trace: Optional[pd.DataFrame] = None
    op_type: Optional[pd.DataFrame] = None
    op_detail: Optional[pd.DataFrame] = None
    data_queue: Optional[pd.DataFrame] = None
    counters: Optional[pd.DataFrame] = None
    queue_summary: Optional[dict[str, Any]] = None
    report: Optional[dict[str, Any]] = None
    timeline_path: Optional[Path] = None

    @property
    def shown_path(self) -> Path:
        """What the user opened: the imported trace / JOB directory, else the profview directory."""
        return Path(self.info.get("source_path") or self.directory)

    @property
    def label(self) -> str:
        """A short human name for the run: what was opened, and the rank."""
        return f"{self.shown_path.name} rank {self.rank}"


def info_files(directory: Path) -> dict[int, Path]:
    """The profiler_info_{rank}.json files of a directory, by rank."""
    found = {}
    for path in directory.iterdir():
        match = INFO_PATTERN.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


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


def read_csv(path: Path, kind: str) -> pd.DataFrame:
    """Read one of the output CSVs and check the columns the pages rely on."""
    required, numeric = CSV_COLUMNS[kind]
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


def _optional(path: Path) -> Optional[Path]:
    return path if path.is_file() else None


def load_rank(directory: Path, rank: int, info_path: Path) -> RunData:
    """Load every output file of one rank; files that are absent stay None."""
    info = read_json(info_path)
    if not isinstance(info, dict):
        raise InputError(f"{info_path} is malformed: expected a JSON object")
    version = info.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise InputError(f"{info_path} has schema version {version!r}, newer than this viewer reads "
                         f"({SCHEMA_VERSION}); upgrade profview")
    listed = [str(name) for name in info.get("outputs", []) if isinstance(name, str)]
    missing = [name for name in listed if not (directory / name).exists()]
    if missing:
        raise InputError(f"{directory} is incomplete: {missing[0]} listed in {info_path.name} is missing "
                         f"(the analysis may have been interrupted; re-run `profview analyse {directory}`)")
    run = RunData(rank=rank, directory=directory, info=info)
    for kind in CSV_COLUMNS:
        path = _optional(directory / f"{kind}_{rank}.csv")
        if path is not None:
            setattr(run, kind if kind != "device_counters" else "counters", read_csv(path, kind))
    for attr, name in (("queue_summary", "queue_summary"), ("report", "report")):
        path = _optional(directory / f"{name}_{rank}.json")
        if path is not None:
            value = read_json(path)
            if not isinstance(value, dict):
                raise InputError(f"{path} is malformed: expected a JSON object")
            setattr(run, attr, value)
    run.timeline_path = (_optional(directory / f"timeline_{rank}.json")
                         or _optional(directory / f"timeline_{rank}.json.gz"))
    return run


def load_profview_dir(directory: Path) -> list[RunData]:
    """Every rank found in a profview output directory, in rank order."""
    infos = info_files(directory)
    if not infos:
        raise InputError(f"{directory} is not a profview output directory (no profiler_info_<rank>.json)")
    return [load_rank(directory, rank, path) for rank, path in infos.items()]

"""Loading one profview output directory into `RunData`: the tables the report pages read.

Every file is read with the validated readers of profiler.formats (docs/formats.md): a malformed
or half-written file gives one clear sentence, and an absent optional file simply leaves its
page saying "no data".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from profiler.errors import InputError
from profiler.formats import SCHEMA_VERSION, info_files, rank_file, read_csv, read_json_object


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
    timeline_path: Optional[Path] = None          # the Chrome trace (for Perfetto; the viewer does not read it)
    events_path: Optional[Path] = None            # the columnar event file the timeline page reads

    @property
    def shown_path(self) -> Path:
        """What the user opened: the imported trace / JOB directory, else the profview directory."""
        return Path(self.info.get("source_path") or self.directory)

    @property
    def label(self) -> str:
        """A short human name for the run: what was opened, and the rank."""
        return f"{self.shown_path.name} rank {self.rank}"


def _optional(path: Path) -> Optional[Path]:
    return path if path.is_file() else None


#: The per-rank CSVs the pages read, and the RunData field each fills.
RUN_CSVS = {"step_trace": "step_trace", "op_type": "op_type", "op_detail": "op_detail",
            "data_queue": "data_queue", "device_counters": "counters"}


def load_rank(directory: Path, rank: int, info_path: Path) -> RunData:
    """Load every output file of one rank; files that are absent stay None."""
    info = read_json_object(info_path)
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
    for kind, attr in RUN_CSVS.items():
        path = _optional(directory / rank_file(kind, rank))
        if path is not None:
            setattr(run, attr, read_csv(path, kind))
    for kind in ("queue_summary", "report"):
        path = _optional(directory / rank_file(kind, rank))
        if path is not None:
            setattr(run, kind, read_json_object(path))
    timeline = directory / rank_file("timeline", rank)
    run.timeline_path = _optional(timeline) or _optional(timeline.with_name(timeline.name + ".gz"))
    run.events_path = _optional(directory / rank_file("events", rank))
    return run


def load_profview_dir(directory: Path) -> list[RunData]:
    """Every rank found in a profview output directory, in rank order."""
    infos = info_files(directory)
    if not infos:
        raise InputError(f"{directory} is not a profview output directory (no profiler_info_<rank>.json)")
    return [load_rank(directory, rank, path) for rank, path in infos.items()]

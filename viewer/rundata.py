"""`RunData`: one rank of one run, as every report page reads it, and the one way it is built.

`RunData.from_outputs` takes a rank's outputs by kind (profiler.formats: the tables as their CSV
files hold them, the documents as their JSON files do). They come from files (`load_profview_dir`,
with the validated readers of profiler.formats: a malformed or half-written file is one clear
sentence, an absent optional file leaves its page saying "no data"), or from memory (the live
report hands over the analysis of a recording's recent window, viewer.live_report). Pages read nothing
else: the event file is opened through `RunData.timeline()`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from profiler.errors import InputError
from profiler.formats.documents import read_document, read_profiler_info, regular_file
from profiler.formats.names import (
    CLUSTER_COMM_OPS,
    CLUSTER_COMM_SPLIT,
    CLUSTER_STEP_TRACE,
    CLUSTER_SUMMARY,
    info_files,
    rank_file,
)
from profiler.formats.tables import CSV_REQUIRED, read_csv
from viewer.trace import Timeline, load_timeline

#: The per-rank tables (CSV) and documents (JSON) a RunData holds, each in the field named after its kind.
RANK_TABLES = (
    "step_trace",
    "op_type",
    "op_detail",
    "op_shapes",
    "op_stacks",
    "kernels",
    "step_activity",
    "modules",
    "memory",
    "memory_events",
    "op_memory",
    "comm_split",
    "comm_ops",
    "data_queue",
    "device_counters",
)
RANK_DOCUMENTS = ("queue_summary", "report")
#: The directory's cluster files (several ranks analysed together), the same in each of its ranks' RunData.
CLUSTER_OUTPUTS = {
    "cluster_summary": CLUSTER_SUMMARY,
    "cluster_step_trace": CLUSTER_STEP_TRACE,
    "cluster_comm_split": CLUSTER_COMM_SPLIT,
    "cluster_comm_ops": CLUSTER_COMM_OPS,
}


@dataclass
class RunData:
    """One rank of one run, as the viewer needs it. Outputs that are absent are None."""

    rank: int
    directory: Path
    info: dict[str, Any] = field(default_factory=dict)
    step_trace: Optional[pd.DataFrame] = None
    op_type: Optional[pd.DataFrame] = None
    op_detail: Optional[pd.DataFrame] = None
    op_shapes: Optional[pd.DataFrame] = None
    op_stacks: Optional[pd.DataFrame] = None
    kernels: Optional[pd.DataFrame] = None
    step_activity: Optional[pd.DataFrame] = None
    modules: Optional[pd.DataFrame] = None
    memory: Optional[pd.DataFrame] = None
    memory_events: Optional[pd.DataFrame] = None
    op_memory: Optional[pd.DataFrame] = None
    comm_split: Optional[pd.DataFrame] = None
    comm_ops: Optional[pd.DataFrame] = None
    data_queue: Optional[pd.DataFrame] = None
    device_counters: Optional[pd.DataFrame] = None
    queue_summary: Optional[dict[str, Any]] = None
    report: Optional[dict[str, Any]] = None
    cluster_summary: Optional[dict[str, Any]] = None
    cluster_step_trace: Optional[pd.DataFrame] = None
    cluster_comm_split: Optional[pd.DataFrame] = None
    cluster_comm_ops: Optional[pd.DataFrame] = None
    timeline_path: Optional[Path] = None  # the Chrome trace (for Perfetto; the viewer does not read it)
    events_path: Optional[Path] = None  # the columnar event file (read through timeline())
    _timeline: Optional[Timeline] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_outputs(cls, rank: int, directory: Path, outputs: Mapping[str, Any], **paths: Optional[Path]) -> RunData:
        """The RunData of a rank's outputs by kind: "profiler_info" (the info), RANK_TABLES, RANK_DOCUMENTS and
        CLUSTER_OUTPUTS, absent ones left out or None; `paths`: timeline_path and events_path."""
        unknown = set(outputs) - {"profiler_info", *RANK_TABLES, *RANK_DOCUMENTS, *CLUSTER_OUTPUTS}
        if unknown:
            raise ValueError(f"not an output a RunData holds: {', '.join(sorted(unknown))}")
        kinds = {kind: value for kind, value in outputs.items() if kind != "profiler_info"}
        return cls(rank=rank, directory=Path(directory), info=outputs.get("profiler_info") or {}, **kinds, **paths)

    @property
    def shown_path(self) -> Path:
        """What the user opened: the imported trace / JOB directory, else the profview directory."""
        source = self.info.get("source_path")
        return Path(source) if isinstance(source, str) and source else Path(self.directory)

    @property
    def label(self) -> str:
        """A short human name for the run: what was opened, and the rank."""
        return f"{self.shown_path.name} rank {self.rank}"

    def timeline(self) -> Optional[Timeline]:
        """The run's events from its event file, opened on first use (None without one; InputError
        when it cannot be read)."""
        if self._timeline is None and self.events_path is not None:
            self._timeline = load_timeline(self.events_path)
        return self._timeline


def _optional(path: Path) -> Optional[Path]:
    """`path` when it exists (it must then be a regular file), None when it does not."""
    if not os.path.lexists(path):
        return None
    regular_file(path)
    return path


def read_outputs(directory: Path, names: Mapping[str, str]) -> dict[str, Any]:
    """The outputs of `directory` named `names` (kind -> file name) that exist, read by kind: a CSV
    kind as its validated table, any other as its JSON document, its types checked
    (formats.documents.DOCUMENT_SCHEMAS)."""
    out: dict[str, Any] = {}
    for kind, name in names.items():
        path = _optional(directory / name)
        if path is not None:
            out[kind] = read_csv(path, kind) if kind in CSV_REQUIRED else read_document(path, kind)
    return out


def load_rank(directory: Path, rank: int, info_path: Path, cluster: Mapping[str, Any]) -> RunData:
    """Load every output file of one rank (and the directory's `cluster` outputs); absent files stay None."""
    info = read_profiler_info(info_path)
    listed = info.get("outputs", [])
    missing = [name for name in listed if not os.path.lexists(directory / name)]
    if missing:
        raise InputError(
            f"{directory} is incomplete: {missing[0]} listed in {info_path.name} is missing "
            f"(the analysis may have been interrupted; re-run `profview analyse {directory}`)"
        )
    for name in listed:
        regular_file(directory / name)  # a FIFO, a directory or /dev/zero is one sentence, not a hang
    outputs = read_outputs(directory, {kind: rank_file(kind, rank) for kind in RANK_TABLES + RANK_DOCUMENTS})
    timeline = directory / rank_file("timeline", rank)
    timeline_path = _optional(timeline) or _optional(timeline.with_name(timeline.name + ".gz"))
    return RunData.from_outputs(
        rank,
        directory,
        {"profiler_info": info, **outputs, **cluster},
        timeline_path=timeline_path,
        events_path=_optional(directory / rank_file("events", rank)),
    )


def load_profview_dir(directory: Path) -> list[RunData]:
    """Every rank found in a profview output directory, in rank order."""
    infos = info_files(directory)
    if not infos:
        raise InputError(f"{directory} is not a profview output directory (no profiler_info_<rank>.json)")
    cluster = read_outputs(directory, CLUSTER_OUTPUTS)
    return [load_rank(directory, rank, path, cluster) for rank, path in infos.items()]

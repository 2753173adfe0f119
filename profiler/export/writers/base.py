"""The contract of a per-rank output file's writer (docs/architecture.md, "How to add an output").

A writer names its file (`kind`, a `profiler.formats.names.RANK_FILES` key) and writes it, atomically,
from what it reads: the `Analysis` (on the main thread) or the run's `TimelineEvents` (on the
timeline thread, while the analysis runs). `write` returns the path written, or None when the run
has nothing for that file (an earlier analysis's copy is then removed).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import pandas as pd

from profiler.analysis.results import Analysis
from profiler.export.chrome_from_events import trace_plan
from profiler.export.chrome_trace import TracePlan
from profiler.export.csv_json import write_csv, write_json
from profiler.export.event_file import EventFile
from profiler.export.key_steps import KeySteps
from profiler.formats.columns import TIMELINE_MAX_EVENTS
from profiler.formats.names import rank_file


@dataclass(frozen=True)
class WriteOptions:
    """How the outputs are written (the same for every writer; each reads what concerns it)."""

    gzip_timeline: bool = False
    timeline_max_events: int = TIMELINE_MAX_EVENTS  # past it, the Chrome trace holds the key steps


@dataclass(frozen=True)
class SavedTimeline:
    """The run's timeline as saved in its event file (the timeline's one saved form), with the run's key
    steps: what every timeline file is rendered from (`outputs.write_timeline`)."""

    events: EventFile
    key_steps: KeySteps
    rank: int
    _plans: dict[int, TracePlan] = field(default_factory=dict, compare=False, repr=False)

    def plan(self, max_events: int) -> TracePlan:
        """What the Chrome trace holds within `max_events` (chrome_from_events.trace_plan), counted once per
        limit: the trace and profiler_info's description of it read the same plan."""
        if max_events not in self._plans:
            self._plans[max_events] = trace_plan(self.events, self.key_steps, max_events)
        return self._plans[max_events]


class Writer(ABC):
    """One output file of a rank."""

    kind: str  # the file's RANK_FILES key

    def path(self, out_dir: Path, rank: int) -> Path:
        return Path(out_dir) / rank_file(self.kind, rank)

    def file_names(self, rank: int) -> list[str]:
        """Every name this writer may write for `rank` (what a later analysis removes when it writes none)."""
        return [rank_file(self.kind, rank)]


class AnalysisWriter(Writer):
    """A file written from the analysed tables."""

    @abstractmethod
    def write(self, analysis: Analysis, out_dir: Path, options: WriteOptions) -> Optional[Path]:
        """Write the file into `out_dir`; its path, or None when the run has nothing for it."""


class TimelineWriter(Writer):
    """A file of the run's timeline, rendered from its saved form (the event file)."""

    @abstractmethod
    def write(self, saved: SavedTimeline, out_dir: Path, options: WriteOptions) -> Optional[Path]:
        """Write the file into `out_dir`; its path, or None when the run has nothing for it."""

    def describe(self, saved: SavedTimeline, options: WriteOptions) -> Optional[dict[str, Any]]:
        """What profiler_info says of the file under the writer's `kind` (None: nothing to say)."""
        return None


class CsvWriter(AnalysisWriter):
    """A table of the analysis written as deterministic CSV."""

    na_rep: ClassVar[str] = ""  # how a missing number is written

    @abstractmethod
    def table(self, analysis: Analysis) -> Optional[pd.DataFrame]:
        """The table, or None when the run has nothing for this file."""

    def write(self, analysis: Analysis, out_dir: Path, options: WriteOptions) -> Optional[Path]:
        table = self.table(analysis)
        return None if table is None else write_csv(table, self.path(out_dir, analysis.run.rank), na_rep=self.na_rep)


class AnalysisDocument(AnalysisWriter):
    """A JSON document the analysis built (`Analysis.extra_json[kind]`), when it built one."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def write(self, analysis: Analysis, out_dir: Path, options: WriteOptions) -> Optional[Path]:
        doc = analysis.extra_json.get(self.kind)
        return None if doc is None else write_json(doc, self.path(out_dir, analysis.run.rank))

"""events_{rank}.arrow: the run's events as columns, the file the viewer reads."""

from __future__ import annotations

from pathlib import Path

from profiler.export.event_file import write_event_file
from profiler.export.timeline_model import TimelineEvents
from profiler.export.writers.base import TimelineWriter, WriteOptions


class EventFile(TimelineWriter):
    kind = "events"

    def write(self, events: TimelineEvents, out_dir: Path, options: WriteOptions) -> Path:
        return write_event_file(events, self.path(out_dir, events.rank))

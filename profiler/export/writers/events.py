"""events_{rank}.arrow: the run's events as columns, the file the viewer reads and the timeline's one
saved form: `outputs.write_timeline` saves it (`save`) before every other timeline file, which is rendered
from it."""

from __future__ import annotations

from pathlib import Path

from profiler.export.event_file import write_run_events
from profiler.export.writers.base import SavedTimeline, TimelineWriter, WriteOptions
from profiler.model import Run


class EventFile(TimelineWriter):
    kind = "events"

    def save(self, run: Run, out_dir: Path, rank: int) -> Path:
        """Write the run's timeline as its event file."""
        return write_run_events(run, self.path(out_dir, rank))

    def write(self, saved: SavedTimeline, out_dir: Path, options: WriteOptions) -> Path:
        """The file the timeline was saved to: nothing more to write."""
        return saved.events.path

"""timeline_{rank}.json (or .json.gz): the Chrome trace of the run's events."""
from __future__ import annotations

from pathlib import Path

from profiler.export.chrome_trace import write_chrome_trace
from profiler.export.timeline_model import TimelineEvents
from profiler.export.writers.base import TimelineWriter, WriteOptions


class ChromeTrace(TimelineWriter):
    kind = "timeline"

    def file_names(self, rank: int) -> list[str]:
        name = super().file_names(rank)[0]
        return [name, name + ".gz"]

    def write(self, events: TimelineEvents, out_dir: Path, options: WriteOptions) -> Path:
        return write_chrome_trace(events, self.path(out_dir, events.rank), options.gzip_timeline)

"""timeline_{rank}.json (or .json.gz): the Chrome trace of the run's events, rendered from the event
file: all of them while they are at most `WriteOptions.timeline_max_events`, else those of the key steps
(chrome_trace.plan_steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.export.chrome_from_events import export_chrome_trace, plan_filter
from profiler.export.chrome_trace import describe_plan
from profiler.export.writers.base import SavedTimeline, TimelineWriter, WriteOptions
from profiler.formats.names import rank_file


class ChromeTrace(TimelineWriter):
    kind = "timeline"

    def file_names(self, rank: int) -> list[str]:
        name = super().file_names(rank)[0]
        return [name, name + ".gz"]

    def write(self, saved: SavedTimeline, out_dir: Path, options: WriteOptions) -> Path:
        plan = saved.plan(options.timeline_max_events)
        return export_chrome_trace(
            saved.events, self.path(out_dir, saved.rank), plan_filter(plan), gzip_output=options.gzip_timeline
        )

    def describe(self, saved: SavedTimeline, options: WriteOptions) -> dict[str, Any]:
        """profiler_info's `timeline`: what the trace holds and how to get the rest (docs/formats.md)."""
        plan = saved.plan(options.timeline_max_events)
        name = self.file_names(saved.rank)[1 if options.gzip_timeline else 0]
        return describe_plan(
            plan,
            saved.key_steps,
            name,
            f"the whole trace, or any steps, from {rank_file('events', saved.rank)}: "
            "profview export --chrome DIR [--steps A:B]",
        )

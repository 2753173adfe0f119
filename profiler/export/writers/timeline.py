"""timeline_{rank}.json (or .json.gz): the Chrome trace of the run's events, all of them while they
are at most `WriteOptions.timeline_max_events`, else those of the key steps (chrome_trace.trace_plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.export.chrome_trace import describe_plan, trace_plan, write_chrome_trace
from profiler.export.timeline_model import TimelineEvents
from profiler.export.writers.base import TimelineWriter, WriteOptions
from profiler.formats.names import rank_file


class ChromeTrace(TimelineWriter):
    kind = "timeline"

    def file_names(self, rank: int) -> list[str]:
        name = super().file_names(rank)[0]
        return [name, name + ".gz"]

    def write(self, events: TimelineEvents, out_dir: Path, options: WriteOptions) -> Path:
        plan = trace_plan(events, options.timeline_max_events)
        return write_chrome_trace(plan.selected(events), self.path(out_dir, events.rank), options.gzip_timeline)

    def describe(self, events: TimelineEvents, options: WriteOptions) -> dict[str, Any]:
        """profiler_info's `timeline`: what the trace holds and how to get the rest (docs/formats.md)."""
        plan = trace_plan(events, options.timeline_max_events)
        name = self.file_names(events.rank)[1 if options.gzip_timeline else 0]
        return describe_plan(
            plan,
            events.key_steps,
            name,
            f"the whole trace, or any steps, from {rank_file('events', events.rank)}: "
            "profview export --chrome DIR [--steps A:B]",
        )

"""timeline_{rank}.json (or .json.gz): the Chrome trace of the run's events, all of them while they
are at most `WriteOptions.timeline_max_events`, else those of the key steps (chrome_trace.trace_plan)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.export.chrome_trace import trace_plan, write_chrome_trace
from profiler.export.timeline_model import TimelineEvents
from profiler.export.writers.base import TimelineWriter, WriteOptions
from profiler.formats import rank_file


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
        info: dict[str, Any] = {"file": name, "content": plan.content, "events": plan.events,
                                "events_written": plan.written, "max_events": plan.max_events}
        if plan.steps is not None:
            key = events.key_steps
            info.update({"steps": list(plan.steps), "median_step": key.median, "slowest_step": key.slowest,
                         "outlier_steps": list(key.outliers), "outlier_steps_left_out": list(plan.left_out),
                         "rest": f"the whole trace, or any steps, from {rank_file('events', events.rank)}: "
                                 "profview export --chrome DIR [--steps A:B]"})
        return info

"""Write an analysed run as the profview output directory (docs/formats.md): every registered
writer (`writers.WRITERS`), then profiler_info, under the rules of docs/architecture.md, "The lock
and the outputs": profiler_info removed first and written last, listing the outputs; outputs an
earlier analysis wrote but this one does not removed."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from profiler.analysis.results import Analysis
from profiler.export.chrome_trace import timeline_max_events
from profiler.export.event_file import read_event_file
from profiler.export.key_steps import key_steps
from profiler.export.writers import (
    EVENT_FILE,
    WRITERS,
    AnalysisWriter,
    SavedTimeline,
    TimelineWriter,
    WriteOptions,
    profiler_info,
)
from profiler.memory import give_back_freed_memory
from profiler.model import Run


def rank_outputs(rank: int) -> list[str]:
    """Every output file name of one rank (the timeline with and without .gz), profiler_info first."""
    return [profiler_info.path(Path(), rank).name] + [name for w in WRITERS for name in w.file_names(rank)]


@dataclass(frozen=True)
class TimelineFiles:
    """The files written from the run's timeline events, and what profiler_info says of them (by kind)."""

    paths: list[Path]
    info: dict[str, Any]


def write_timeline(run: Run, out_dir: Path, gzip_timeline: bool = False) -> TimelineFiles:
    """The run's timeline saved as its event file, then every timeline file rendered from that (the
    Chrome trace), as `profview export --chrome` renders it; `analyse` runs this on a second thread
    while the analysis runs."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = EVENT_FILE.save(run, out_dir, run.rank)  # the renderers read the file in chunks
    give_back_freed_memory()
    saved = SavedTimeline(read_event_file(path), key_steps(run), run.rank)
    options = WriteOptions(gzip_timeline=gzip_timeline, timeline_max_events=timeline_max_events(run))
    writers = [w for w in WRITERS if isinstance(w, TimelineWriter)]
    written = [w.write(saved, out_dir, options) for w in writers]
    info = {w.kind: w.describe(saved, options) for w in writers}
    return TimelineFiles([p for p in written if p is not None], {k: v for k, v in info.items() if v is not None})


def write_outputs(
    a: Analysis, out_dir: Path, gzip_timeline: bool = False, timeline: Optional[Callable[[], TimelineFiles]] = None
) -> list[Path]:
    """Write every output file of one rank; returns the paths in the order written.

    `timeline`, when given, returns the timeline's files once the caller has written them
    (`write_timeline`, which analyse runs on a second thread); else they are written here.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rank = a.run.rank
    info_path = profiler_info.path(out_dir, rank)
    # profiler_info lists the outputs and is written last: without it no reader trusts the files of a
    # half-done (killed) analysis, nor a mix of this analysis's files with an earlier one's.
    _remove(info_path)
    unwritten = set(a.extra_json) - {w.kind for w in WRITERS}
    if unwritten:
        raise ValueError(f"no writer in profiler/export/writers writes the analysis's {sorted(unwritten)} documents")
    options = WriteOptions(gzip_timeline=gzip_timeline)
    written = [w.write(a, out_dir, options) for w in WRITERS if isinstance(w, AnalysisWriter)]
    written = [p for p in written if p is not None]
    timeline_files = timeline() if timeline else write_timeline(a.run, out_dir, gzip_timeline)
    written += timeline_files.paths
    for stale in set(rank_outputs(rank)) - {p.name for p in written} - {info_path.name}:
        _remove(out_dir / stale)  # an earlier analysis's output this one does not write
    written.append(profiler_info.write_profiler_info(a, out_dir, written, timeline_files.info))
    return written


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()

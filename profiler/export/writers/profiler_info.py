"""profiler_info_{rank}.json: what was recorded and analysed, and the list of the rank's outputs.

Not a registered writer: it is the index of the others, removed before they are written and
written after them, so a reader trusts only a complete set (docs/architecture.md, "The lock and
the outputs").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from profiler.analysis.results import Analysis
from profiler.export.csv_json import write_json
from profiler.formats.names import rank_file

KIND = "profiler_info"


def path(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / rank_file(KIND, rank)


def info_document(a: Analysis, outputs: list[str], timeline: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The run's info with its analysed steps, the profiler's total overhead, `outputs` (file names)
    and what the timeline writers said of their files (`timeline`: by kind, e.g. the Chrome trace's
    content under "timeline")."""
    trace = a.step_trace
    info = dict(a.run.info)
    info["steps"] = {
        "count": int(len(trace)),
        "first": int(trace["step"].min()) if len(trace) else None,
        "last": int(trace["step"].max()) if len(trace) else None,
    }
    info["overhead"] = {
        **info.get("overhead", {}),
        "total_ms": float(trace["profiler_overhead_ms"].sum()) if len(trace) else 0.0,
    }
    info["outputs"] = outputs
    info.update(timeline or {})
    return info


def write_profiler_info(
    a: Analysis, out_dir: Path, written: list[Path], timeline: Optional[dict[str, Any]] = None
) -> Path:
    """Write the index listing `written` and itself, with what the timeline writers said (`info_document`)."""
    own = path(out_dir, a.run.rank)
    return write_json(info_document(a, [p.name for p in written] + [own.name], timeline), own)

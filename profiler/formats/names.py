"""The file names of the output directory (docs/formats.md): the layout's version, the per-rank
and cluster files, and the profiler_info files of a directory."""

from __future__ import annotations

import re
from pathlib import Path

#: Version of the output directory's layout; readers refuse a newer one.
SCHEMA_VERSION = 1

#: Per-rank output files, by kind (`{rank}` is the integer rank).
RANK_FILES = {
    "profiler_info": "profiler_info_{rank}.json",
    "step_trace": "step_trace_{rank}.csv",
    "op_type": "op_type_{rank}.csv",
    "op_detail": "op_detail_{rank}.csv",
    "op_shapes": "op_shapes_{rank}.csv",
    "op_stacks": "op_stacks_{rank}.csv",
    "kernels": "kernels_{rank}.csv",
    "step_activity": "step_activity_{rank}.csv",
    "modules": "modules_{rank}.csv",
    "memory": "memory_{rank}.csv",
    "memory_events": "memory_events_{rank}.csv",
    "op_memory": "op_memory_{rank}.csv",
    "comm_split": "comm_split_{rank}.csv",
    "comm_ops": "comm_ops_{rank}.csv",
    "comm_pieces": "comm_pieces_{rank}.csv",
    "data_queue": "data_queue_{rank}.csv",
    "device_counters": "device_counters_{rank}.csv",
    "queue_summary": "queue_summary_{rank}.json",
    "report": "report_{rank}.json",
    "timeline": "timeline_{rank}.json",
    "events": "events_{rank}.arrow",
}
#: The cluster files rank 0 (or `profview analyse`) writes when more than one rank recorded.
CLUSTER_SUMMARY = "cluster_summary.json"
CLUSTER_STEP_TRACE = "cluster_step_trace.csv"
CLUSTER_COMM_SPLIT = "cluster_comm_split.csv"
CLUSTER_COMM_OPS = "cluster_comm_ops.csv"
CLUSTER_TIMELINE = "cluster_timeline.json"
INFO_PATTERN = re.compile(r"^profiler_info_(\d+)\.json$")


def rank_file(kind: str, rank: int) -> str:
    """The file name of output `kind` (a RANK_FILES key) for `rank`."""
    return RANK_FILES[kind].format(rank=rank)


def info_files(directory: Path) -> dict[int, Path]:
    """The profiler_info_{rank}.json files of an output directory, by rank."""
    found = {}
    for path in directory.iterdir():
        match = INFO_PATTERN.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))

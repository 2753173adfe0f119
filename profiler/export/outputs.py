"""Write an analysed run as the profview output directory (docs/formats.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler.analysis.results import Analysis
from profiler.formats import DATA_QUEUE_COLUMNS, DEVICE_COUNTER_COLUMNS, rank_file
from profiler.kernels.intervals import assign_steps
from profiler.export.event_file import write_timeline_files

FLOAT_FORMAT = "%.6f"


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """Deterministic CSV: header, '\\n' line ends, 6-decimal floats; written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
    os.replace(tmp, path)
    return path


def write_json(obj: Any, path: Path) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_jsonable) + "\n")
    os.replace(tmp, path)
    return path


def _jsonable(o: Any):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def queue_table(a: Analysis) -> pd.DataFrame:
    q = a.run.queues
    return pd.DataFrame({
        "queue": q["queue"], "time_ms": q["time_ns"] / 1e6, "event": q["event"], "size": q["size"],
        "capacity": q["capacity"], "wait_ms": q["wait_ns"] / 1e6,
        "step": assign_steps(q["time_ns"].to_numpy(), a.run.steps),
    }, columns=DATA_QUEUE_COLUMNS)


def counter_table(a: Analysis) -> pd.DataFrame:
    c = a.run.counters
    return pd.DataFrame({"source": c["source"], "device": c["device"], "metric": c["metric"],
                         "time_ms": c["time_ns"] / 1e6, "value": c["value"]}, columns=DEVICE_COUNTER_COLUMNS)


def write_outputs(a: Analysis, out_dir: Path, gzip_timeline: bool = False,
                  timeline: Optional[Callable[[], list[Path]]] = None) -> list[Path]:
    """Write every output file of one rank; returns the paths in the order written.

    `timeline`, when given, returns the timeline's paths (Chrome trace, event file) once the caller
    has written them (analyse writes them on a second thread while the analysis runs); else they
    are written here.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    r = a.run.rank
    written = [write_csv(a.step_trace, out_dir / rank_file("step_trace", r))]
    if len(a.run.ops):
        written.append(write_csv(a.op_type, out_dir / rank_file("op_type", r)))
        written.append(write_csv(a.op_detail, out_dir / rank_file("op_detail", r)))
    if len(a.run.queues):
        written.append(write_csv(queue_table(a), out_dir / rank_file("data_queue", r)))
    if len(a.run.counters):
        written.append(write_csv(counter_table(a), out_dir / rank_file("device_counters", r)))
    for kind, doc in a.extra_json.items():
        written.append(write_json(doc, out_dir / rank_file(kind, r)))
    written += timeline() if timeline else write_timeline_files(a.run, out_dir, gzip_timeline)
    info_path = out_dir / rank_file("profiler_info", r)
    info = dict(a.run.info)
    info["steps"] = {"count": int(len(a.step_trace)),
                     "first": int(a.step_trace["step"].min()) if len(a.step_trace) else None,
                     "last": int(a.step_trace["step"].max()) if len(a.step_trace) else None}
    info["overhead"] = {**info.get("overhead", {}),
                        "total_ms": float(a.step_trace["profiler_overhead_ms"].sum()) if len(a.step_trace) else 0.0}
    info["outputs"] = [p.name for p in written] + [info_path.name]
    written.append(write_json(info, info_path))
    return written

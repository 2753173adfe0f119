"""Write an analysed run as the profview output directory (docs/formats.md)."""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler.analysis.results import Analysis
from profiler.formats import DATA_QUEUE_COLUMNS, DEVICE_COUNTER_COLUMNS, RANK_FILES, rank_file
from profiler.kernels.intervals import assign_steps
from profiler.export.event_file import write_timeline_files
from profiler.export.files import temp_path

FLOAT_FORMAT = "%.6f"


def write_csv(df: pd.DataFrame, path: Path, na_rep: str = "") -> Path:
    """Deterministic CSV: header, '\\n' line ends, 6-decimal floats; written atomically (a unique
    temporary name, then renamed).

    Text is written as it is, quoted when it holds a comma, a quote or a line feed. Python's csv
    writer leaves a lone carriage return unquoted (readers then split the row there), so a file
    whose text holds one is written with every field quoted. `na_rep` is what a missing number
    is written as.
    """
    tmp = temp_path(path)
    quoting = csv.QUOTE_ALL if _holds_carriage_return(df) else csv.QUOTE_MINIMAL
    try:
        df.to_csv(tmp, index=False, float_format=FLOAT_FORMAT, lineterminator="\n", quoting=quoting, na_rep=na_rep,
                  errors="backslashreplace")
        os.replace(tmp, path)
    finally:
        _discard(tmp)
    return path


def _holds_carriage_return(df: pd.DataFrame) -> bool:
    """Whether a text cell (or a column name) of `df` holds a carriage return."""
    if any("\r" in str(c) for c in df.columns):
        return True
    for col in df.columns:
        column = df[col]
        if isinstance(column.dtype, pd.CategoricalDtype):
            values = column.cat.categories
        elif column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            values = column
        else:
            continue
        if any(isinstance(v, str) and "\r" in v for v in pd.unique(np.asarray(values, dtype=object))):
            return True
    return False


def write_json(obj: Any, path: Path) -> Path:
    """Deterministic JSON (sorted keys, indent 2, UTF-8); written atomically.

    Always RFC 8259: a number that is not finite is written as null (JSON has no NaN / Infinity),
    and a lone surrogate in text (a path from a non-UTF-8 file name) as its `\\udcXX` JSON escape,
    which reads back as the same string.
    """
    try:
        text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_jsonable, allow_nan=False)
    except ValueError:                       # a NaN / inf somewhere: null instead
        text = json.dumps(_finite(obj), indent=2, sort_keys=True, ensure_ascii=False, default=_jsonable,
                          allow_nan=False)
    tmp = temp_path(path)
    try:
        tmp.write_bytes((text + "\n").encode("utf-8", errors="backslashreplace"))
        os.replace(tmp, path)
    finally:
        _discard(tmp)
    return path


def _finite(obj: Any) -> Any:
    """`obj` with every float that is not finite replaced by None (for JSON)."""
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _finite(obj.tolist())
    return obj


def _discard(tmp: Path) -> None:
    """Remove a temporary file left by a failed write (after a successful rename there is none)."""
    try:
        tmp.unlink()
    except OSError:
        pass


def rank_outputs(rank: int) -> list[str]:
    """Every output file name of one rank (the timeline with and without .gz)."""
    names = [rank_file(kind, rank) for kind in RANK_FILES]
    return names + [rank_file("timeline", rank) + ".gz"]


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
    info_path = out_dir / rank_file("profiler_info", r)
    # profiler_info lists the outputs and is written last: without it no reader trusts the files of a
    # half-done (killed) analysis, nor a mix of this analysis's files with an earlier one's.
    _discard(info_path)
    written = [write_csv(a.step_trace, out_dir / rank_file("step_trace", r))]
    if len(a.run.ops):
        written.append(write_csv(a.op_type, out_dir / rank_file("op_type", r)))
        written.append(write_csv(a.op_detail, out_dir / rank_file("op_detail", r)))
    if len(a.run.queues):
        written.append(write_csv(queue_table(a), out_dir / rank_file("data_queue", r)))
    if len(a.run.counters):
        written.append(write_csv(counter_table(a), out_dir / rank_file("device_counters", r), na_rep="nan"))
    for kind, doc in a.extra_json.items():
        written.append(write_json(doc, out_dir / rank_file(kind, r)))
    written += timeline() if timeline else write_timeline_files(a.run, out_dir, gzip_timeline)
    for stale in set(rank_outputs(r)) - {p.name for p in written} - {info_path.name}:
        _discard(out_dir / stale)            # an earlier analysis's output this one does not write
    info = dict(a.run.info)
    info["steps"] = {"count": int(len(a.step_trace)),
                     "first": int(a.step_trace["step"].min()) if len(a.step_trace) else None,
                     "last": int(a.step_trace["step"].max()) if len(a.step_trace) else None}
    info["overhead"] = {**info.get("overhead", {}),
                        "total_ms": float(a.step_trace["profiler_overhead_ms"].sum()) if len(a.step_trace) else 0.0}
    info["outputs"] = [p.name for p in written] + [info_path.name]
    written.append(write_json(info, info_path))
    return written

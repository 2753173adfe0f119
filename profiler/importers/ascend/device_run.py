"""Building a `Run` from device-side tables, shared by the Ascend log parser and the MindSpore importer.

Both sources end with the same three tables on one device clock: op executions, steps and
all-reduce intervals. This module places them on the run's origin (the earliest timestamp, so
every time is >= 0), assigns ops to steps and lays all-reduce intervals out as phase spans.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import numpy as np
import pandas as pd

from profiler.model import OP_COLUMNS, SPAN_COLUMNS, STEP_COLUMNS, THREAD_COLUMNS, Run, RunInfo, conform

#: Op types that are collective communication rather than compute.
COMM_OP_TYPES = frozenset(
    {
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "Broadcast",
        "AllToAll",
        "AllToAllv",
        "Send",
        "Receive",
        "HcomAllReduce",
        "HcomAllGather",
        "HcomReduceScatter",
        "HcomBroadcast",
        "HcomSend",
        "HcomReceive",
    }
)

#: One Ascend syscnt tick (the 100 MHz system counter) in ns.
SYSCNT_TICK_NS = 10

#: Span name of an all-reduce interval (a `phase` span, one lane per device stream).
ALL_REDUCE_SPAN = "all_reduce"

_OP_NUMBER_SUFFIX = re.compile(r"-op\d+$")


def op_type_from_name(full_name: str) -> str:
    """An op's type guessed from its name when no description gives it: `.../MatMul-op12` -> `MatMul`."""
    return _OP_NUMBER_SUFFIX.sub("", full_name.rsplit("/", 1)[-1])


def lookup(keys: pd.Series, table: pd.Series, fallback) -> pd.Series:
    """`table[key]` for each key; where absent or empty, `fallback(key)` (a function) or `fallback` itself."""
    values = keys.map(table).astype(object) if len(table) else pd.Series(None, index=keys.index, dtype=object)
    missing = values.isna() | (values == "")
    if not missing.any():
        return values
    filler = keys.map(fallback).astype(object) if callable(fallback) else fallback
    return values.where(~missing, filler)


def op_categories(op_type: pd.Series) -> np.ndarray:
    """`comm` for collective op types, `compute` for everything else."""
    return np.where(op_type.isin(COMM_OP_TYPES).to_numpy(), "comm", "compute").astype(object)


def shapes_text(shapes: list[list[int]]) -> str:
    """Input shapes as our `shapes` text: a JSON list of lists, e.g. `[[16000, 80], []]`."""
    return json.dumps(shapes)


def dims(text: str) -> list[int]:
    """`"16000,80"` / `"[32, 3]"` / `""` -> [16000, 80] / [32, 3] / []."""
    inner = text.strip().strip('"').strip("[]")
    return [int(d) for d in inner.split(",") if d.strip().lstrip("-").isdecimal() and len(d.strip()) <= 19]


def input_shapes(op_info: dict[str, Any]) -> str:
    """The shapes text of a graph_desc / framework_raw op_info dict (its `input_<k>` tensors)."""
    inputs = sorted((int(k.split("_")[1]), v) for k, v in op_info.items() if k.startswith("input_"))
    return shapes_text([dims(str(v.get("shape", ""))) for _, v in inputs]) if inputs else ""


def reduce_spans(device: str, reduces: pd.DataFrame) -> pd.DataFrame:
    """All-reduce intervals (stream_id, start_ns, end_ns) as phase spans on one lane per stream."""
    return pd.DataFrame(
        {
            "lane": [f"{device} stream {s} all_reduce" for s in reduces["stream_id"].tolist()],
            "lane_id": reduces["stream_id"].to_numpy(dtype=np.int64),
            "kind": "phase",
            "name": ALL_REDUCE_SPAN,
            "start_ns": reduces["start_ns"].to_numpy(dtype=np.int64),
            "dur_ns": (reduces["end_ns"] - reduces["start_ns"]).to_numpy(dtype=np.int64),
            "depth": 0,
        }
    )


def _step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose [start, end) holds each time, -1 outside every step."""
    if steps.empty:
        return np.full(len(times), -1, dtype=np.int64)
    order = np.argsort(steps["start_ns"].to_numpy(), kind="stable")
    starts = steps["start_ns"].to_numpy()[order]
    ends = steps["end_ns"].to_numpy()[order]
    i = np.searchsorted(starts, times, side="right") - 1
    inside = (i >= 0) & (times < ends[np.maximum(i, 0)])
    return np.where(inside, steps["step"].to_numpy()[order][np.maximum(i, 0)], -1)


def _lanes(spans: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The threads table of the span lanes (tid in order of lane_id) and each span's tid."""
    lanes = spans[["lane_id", "lane"]].drop_duplicates("lane").sort_values("lane_id", kind="stable")
    tid_of = {lane: tid for tid, lane in enumerate(lanes["lane"].tolist())}
    threads = pd.DataFrame(
        {"tid": np.arange(len(lanes)), "os_tid": lanes["lane_id"].to_numpy(), "name": lanes["lane"].to_numpy()}
    )
    return threads, np.array([tid_of[x] for x in spans["lane"].tolist()], dtype=np.int64)


def _earliest(*times: np.ndarray) -> int:
    present = [t.min() for t in times if len(t)]
    return int(min(present)) if present else 0


#: A device time this far (7 days) from the median of the run's times is a damaged counter value.
FAR_NS = 7 * 86400 * 10**9


def checked_tables(
    ops: pd.DataFrame, steps: pd.DataFrame, spans: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """The tables without rows no real device clock can give, and a sentence per kind left out.

    Left out: ops and spans with a negative duration, steps whose bounds are out of order
    (start <= fp <= bp <= end, fp / bp -1 when absent) or that overlap an earlier step, and any
    row more than FAR_NS from the median time of the run (a bit flipped in a counter: the run's
    origin, its earliest time, would otherwise sit years before the rest). Valid input passes
    through unchanged.
    """
    times = np.concatenate(
        [ops["start_ns"].to_numpy(np.int64), steps["start_ns"].to_numpy(np.int64), spans["start_ns"].to_numpy(np.int64)]
    )
    if not len(times):
        return ops, steps, spans, []
    center = int(np.median(times))
    near = lambda t: np.abs(t.astype(np.float64) - center) <= FAR_NS
    problems = []

    def plausible(table: pd.DataFrame) -> np.ndarray:
        """Rows of an interval table with a non-negative duration, near the run at both ends."""
        start, dur = table["start_ns"].to_numpy(np.int64), table["dur_ns"].to_numpy(np.int64)
        return (dur >= 0) & near(start) & near(start + np.maximum(dur, 0))

    o_ok = plausible(ops)
    if not o_ok.all():
        problems.append(
            f"{int((~o_ok).sum())} op execution(s) with a negative duration or a time far from the rest "
            "of the run (damaged counter values) were left out"
        )
        ops = ops[o_ok].reset_index(drop=True)

    s, e = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    fp, bp = steps["fp_start_ns"].to_numpy(np.int64), steps["bp_end_ns"].to_numpy(np.int64)
    s_ok = (
        (s >= 0)
        & (e >= s)
        & ((fp == -1) | ((fp >= s) & (fp <= e)))
        & ((bp == -1) | ((bp >= np.where(fp >= 0, fp, s)) & (bp <= e)))
        & near(s)
        & near(e)
    )
    order = np.argsort(s, kind="stable")
    overlapping = np.zeros(len(s), dtype=bool)
    reach = None
    for i in order[s_ok[order]].tolist():
        if reach is not None and s[i] < reach:
            overlapping[i] = True
        else:
            reach = e[i]
    if not s_ok.all() or overlapping.any():
        problems.append(
            f"{int((~s_ok).sum() + overlapping.sum())} step(s) whose bounds are out of order, overlap an "
            "earlier step or lie far from the rest of the run (damaged values) were left out"
        )
    steps = steps.iloc[order[(s_ok & ~overlapping)[order]]].reset_index(drop=True)

    p_ok = plausible(spans)
    if not p_ok.all():
        problems.append(
            f"{int((~p_ok).sum())} all-reduce / scope span(s) with a negative duration or far from the "
            "rest of the run were left out"
        )
        spans = spans[p_ok].reset_index(drop=True)
    return ops, steps, spans, problems


def device_run(
    info: RunInfo, ops: pd.DataFrame, steps: pd.DataFrame, spans: pd.DataFrame, clock_unix_ns: int | None
) -> Run:
    """A Run from absolute device-clock tables, with the origin at the earliest timestamp.

    ops: device, stream, name, op_type, start_ns, dur_ns, shapes, source. steps: step, start_ns,
    end_ns, fp_start_ns, bp_end_ns (-1 when absent). spans: lane, lane_id, kind, name, start_ns,
    dur_ns, depth. `clock_unix_ns` is the Unix time of device-clock zero, None when unknown
    (origin_unix_ns is then 0). `info` gets the clock.
    """
    ops, steps, spans, problems = checked_tables(ops, steps, spans)
    if problems:
        info = info.copy()
        info["warnings"] = list(info.get("warnings", [])) + problems
        for problem in problems:
            warnings.warn(problem, UserWarning, stacklevel=2)
    origin = _earliest(ops["start_ns"].to_numpy(), steps["start_ns"].to_numpy(), spans["start_ns"].to_numpy())
    steps = steps.assign(
        **{
            c: np.where(steps[c].to_numpy() >= 0, steps[c].to_numpy() - origin, -1)
            for c in ("start_ns", "end_ns", "fp_start_ns", "bp_end_ns")
        },
        overhead_ns=0,
    )
    op_start = ops["start_ns"].to_numpy(dtype=np.int64) - origin
    ops = ops.assign(
        start_ns=op_start,
        self_ns=ops["dur_ns"],
        category=op_categories(ops["op_type"]),
        step=_step_of(op_start, steps),
        correlation=-1,
    ).sort_values("start_ns", kind="stable")
    threads, tids = _lanes(spans)
    spans = spans.assign(tid=tids, start_ns=spans["start_ns"].to_numpy(dtype=np.int64) - origin)
    spans = spans.sort_values(["start_ns", "tid", "depth"], kind="stable")
    info = info.copy()
    info["clock"] = {
        "origin_unix_ns": 0 if clock_unix_ns is None else clock_unix_ns + origin,
        "origin_device_ns": origin,
        **info.get("clock", {}),
    }
    return Run(
        info=info,
        ops=conform(ops, OP_COLUMNS),
        steps=conform(steps, STEP_COLUMNS),
        spans=conform(spans, SPAN_COLUMNS),
        threads=conform(threads, THREAD_COLUMNS),
    )

"""What each step was doing, instant by instant, as the TensorBoard plugin's overview split it
(step_activity_{rank}.csv, docs/tensorboard.md).

Steps are delimited as the plugin did (`device_aware_steps`): a host step extended to the end of the
device work its runtime calls launched, starting no earlier than the previous step's end, with the
last steps left out when they launched (almost) nothing, as a window cut before their kernels ran.
Every instant of a step goes to the first activity of ACTIVITIES running then, else to "other".
Pure: the run's tables in, tables out.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profiler.analysis.launches import FRAMEWORK_CATEGORIES, Launches
from profiler.formats.columns import COMM_SPLIT_COLUMNS, STEP_ACTIVITY_COLUMNS
from profiler.kernels.grouping import is_in, text_matches
from profiler.kernels.intervals import covered_ns, union, union_where
from profiler.model import DEVICE_WORK_CATEGORIES

#: A data loader's fetch annotation (torch's `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`,
#: a DataPipe's `enumerate(DataPipe)#...`).
_DATALOADER_FETCH = re.compile(r"enumerate\(DataLoader\)#.*\.__next__$|enumerate\(DataPipe\)#")
#: A collective's host range (`nccl:all_reduce`, `gloo:broadcast`, ...): communication on the host.
_COLLECTIVE = re.compile(r"(?:nccl|gloo):\w+$")
#: A last step is kept when it launched at least this share of the device executions of the step before.
_TAIL_KEEP_SHARE = 0.8


def device_aware_steps(ops: pd.DataFrame, steps: pd.DataFrame, launched: Launches | None) -> pd.DataFrame:
    """The steps as the plugin delimits them: columns step, start_ns, end_ns, in time order.

    Without step annotations the whole span of the framework ops is one step, numbered 0.
    """
    host_steps = steps.sort_values("start_ns", kind="stable")
    if host_steps.empty:
        host = ops[(ops["device"] == "cpu").to_numpy() & ops["category"].isin(FRAMEWORK_CATEGORIES).to_numpy()]
        if host.empty:
            return pd.DataFrame({"step": [], "start_ns": [], "end_ns": []}, dtype=np.int64)
        ends = host["start_ns"].to_numpy() + host["dur_ns"].to_numpy()
        host_steps = pd.DataFrame({"step": [0], "start_ns": [int(host["start_ns"].min())], "end_ns": [int(ends.max())]})
    step = host_steps["step"].to_numpy(dtype=np.int64)
    start = host_steps["start_ns"].to_numpy(dtype=np.int64)
    end = host_steps["end_ns"].to_numpy(dtype=np.int64)
    if launched is None:
        return pd.DataFrame({"step": step, "start_ns": start, "end_ns": end})
    launched_in, first, last, count = _launched_per_step(ops, launched, start, end)
    if count.sum() == 0:
        return pd.DataFrame({"step": step, "start_ns": start, "end_ns": end})
    previous_end = int(start[0])
    if count[0] > 0:  # work left running from before the first step delays its start
        earlier = _device_ends(ops)[~launched_in]
        earlier = earlier[earlier < first[0]]
        previous_end = max(previous_end, int(earlier.max(initial=previous_end)))
    new_start, new_end = start.copy(), end.copy()
    for i in range(len(step)):
        new_start[i] = max(previous_end, start[i])
        new_end[i] = max(end[i], last[i]) if count[i] else end[i]
        new_end[i] = max(new_end[i], new_start[i])
        previous_end = int(new_end[i])
    keep = _kept_steps(count)
    return pd.DataFrame({"step": step[:keep], "start_ns": new_start[:keep], "end_ns": new_end[:keep]})


def _device_ends(ops: pd.DataFrame) -> np.ndarray:
    return (ops["start_ns"] + ops["dur_ns"]).to_numpy()


def _launched_per_step(
    ops: pd.DataFrame, launched: Launches, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(whether each op is a device execution launched by a call inside a step, per step the first
    start and last end of those executions, per step their count)."""
    executions = np.flatnonzero(launched.call >= 0)
    call = launched.call[executions]
    call_start = ops["start_ns"].to_numpy()[call]
    call_end = call_start + ops["dur_ns"].to_numpy()[call]
    at = np.searchsorted(start, call_start, side="right") - 1
    inside = (at >= 0) & (call_end <= end[np.maximum(at, 0)])
    executions, at = executions[inside], at[inside]
    exec_start = ops["start_ns"].to_numpy()[executions]
    exec_end = exec_start + ops["dur_ns"].to_numpy()[executions]
    first = np.full(len(start), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(start), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, at, exec_start)
    np.maximum.at(last, at, exec_end)
    launched_in = np.zeros(len(ops), dtype=bool)
    launched_in[executions] = True
    device_work = (ops["device"] != "cpu").to_numpy() & is_in(ops["category"], DEVICE_WORK_CATEGORIES)
    launched_in |= ~device_work  # only device work can be "left running"
    return launched_in, first, last, np.bincount(at, minlength=len(start))


def _kept_steps(count: np.ndarray) -> int:
    """How many steps to keep: up to the last that launched device work, and without that one when it
    launched less than _TAIL_KEEP_SHARE of the step before (its kernels were cut off)."""
    if len(count) <= 1:
        return len(count)
    launching = np.flatnonzero(count > 0)
    last = int(launching[-1])
    if last > 0 and count[last - 1] * _TAIL_KEEP_SHARE > count[last]:
        return last
    return last + 1


def activity_intervals(ops: pd.DataFrame, spans: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(starts, ends) of the union of every activity's intervals (`intervals.union`: disjoint, sorted, a few per
    step where the ops are millions), in the order ACTIVITIES ranks them (all devices together)."""
    on_device = (ops["device"] != "cpu").to_numpy()
    category = ops["category"]
    start, dur = ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy()
    collective = (
        ~on_device & is_in(category, _CPU_EXEC_CATEGORIES + ("comm",)) & text_matches(ops["name"], _COLLECTIVE.match)
    )
    masks = {
        "kernel": on_device & (category == "compute").to_numpy(),
        "memcpy": on_device & (category == "memcpy").to_numpy(),
        "memset": on_device & (category == "memset").to_numpy(),
        "communication": on_device & (category == "comm").to_numpy() | collective,
        "runtime": ~on_device & (category == "runtime").to_numpy(),
        "cpu_exec": ~on_device & is_in(category, _CPU_EXEC_CATEGORIES) & ~collective,
    }
    out = {name: union_where(start, dur, mask) for name, mask in masks.items()}
    span_names = spans["name"].astype(str)
    span_start, span_end = spans["start_ns"].to_numpy(), (spans["start_ns"] + spans["dur_ns"]).to_numpy()
    collective_span = span_names.str.match(_COLLECTIVE.pattern).to_numpy()
    fetch = span_names.str.match(_DATALOADER_FETCH.pattern).to_numpy()
    scope = (spans["kind"] == "scope").to_numpy() & ~collective_span & ~fetch
    out["dataloader"] = union(span_start[fetch], span_end[fetch])
    for name, chosen in (("communication", collective_span), ("cpu_exec", scope)):
        out[name] = union(
            np.concatenate([out[name][0], span_start[chosen]]),
            np.concatenate([out[name][1], span_end[chosen]]),
        )
    return {name: out[name] for name in ACTIVITIES}


#: Host ops the plugin counts as CPU execution: framework ops and Python frames (its PYTHON events).
_CPU_EXEC_CATEGORIES = FRAMEWORK_CATEGORIES + ("python",)
#: The activities in the order an instant is given to them (the plugin's), "other" being the rest.
ACTIVITIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")


def step_activity(ops: pd.DataFrame, spans: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (`device_aware_steps`), the ms of each activity, other and the step's total."""
    if steps.empty:
        return pd.DataFrame(columns=STEP_ACTIVITY_COLUMNS)
    q_start, q_end = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    table = {"step": steps["step"].to_numpy(np.int64)}
    merged = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))  # the activities so far, as one union
    covered_before = np.zeros(len(steps), dtype=np.int64)
    for name, (s, e) in activity_intervals(ops, spans).items():
        merged = union(np.concatenate([merged[0], s]), np.concatenate([merged[1], e]))
        covered = covered_ns(*merged, q_start, q_end)
        table[f"{name}_ms"] = (covered - covered_before) / 1e6
        covered_before = covered
    total = q_end - q_start
    table["other_ms"] = (total - covered_before) / 1e6
    table["total_ms"] = total / 1e6
    return pd.DataFrame(table)[STEP_ACTIVITY_COLUMNS]


def comm_split(ops: pd.DataFrame, spans: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (`device_aware_steps`), the plugin's computation / communication overview (COMM_SPLIT_COLUMNS):
    computation (compute kernels, or the host's CPU execution in a run without kernels) and communication
    each without the time they overlap, the overlap, and the rest. Empty for a run without communication."""
    intervals = activity_intervals(ops, spans)
    communication = intervals["communication"]
    if steps.empty or not len(communication[0]):
        return pd.DataFrame(columns=COMM_SPLIT_COLUMNS)
    computation = intervals["kernel"] if len(intervals["kernel"][0]) else intervals["cpu_exec"]
    q_start, q_end = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    comp = covered_ns(*computation, q_start, q_end)
    comm = covered_ns(*communication, q_start, q_end)
    either = covered_ns(
        np.concatenate([computation[0], communication[0]]),
        np.concatenate([computation[1], communication[1]]),
        q_start,
        q_end,
    )
    overlap = comp + comm - either
    total = q_end - q_start
    return pd.DataFrame(
        {
            "step": steps["step"].to_numpy(np.int64),
            "computation_ms": (comp - overlap) / 1e6,
            "overlap_ms": overlap / 1e6,
            "communication_ms": (comm - overlap) / 1e6,
            "other_ms": (total - either) / 1e6,
            "total_ms": total / 1e6,
        }
    )[COMM_SPLIT_COLUMNS]

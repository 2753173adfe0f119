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
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import numpy as np
import pandas as pd

from profiler.analysis.launches import FRAMEWORK_CATEGORIES, Launches
from profiler.formats.columns import COMM_SPLIT_COLUMNS, STEP_ACTIVITY_COLUMNS
from profiler.kernels.grouping import is_in, text_matches
from profiler.kernels.intervals import SettledUnion, covered_ns, in_order, union
from profiler.model import DEVICE_WORK_CATEGORIES
from profiler.spill import chunks, sample

#: A data loader's fetch annotation (torch's `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`,
#: a DataPipe's `enumerate(DataPipe)#...`).
_DATALOADER_FETCH = re.compile(r"enumerate\(DataLoader\)#.*\.__next__$|enumerate\(DataPipe\)#")
#: A collective's host range (`nccl:all_reduce`, `gloo:broadcast`, ...): communication on the host.
_COLLECTIVE = re.compile(r"(?:nccl|gloo):\w+$")
#: Ops read at a time by the passes over the op table here: their temporaries (masks, intervals, unions) take
#: ~80 B per row of a chunk (~5 MB), not of the table. Measured on 2.5 M ops: 1 M rows +112 MB RSS, 64 Ki +13 MB,
#: the same time within 0.15 s.
CHUNK_ROWS = 1 << 16
#: (starts, ends) of intervals
Intervals = tuple[np.ndarray, np.ndarray]
#: A last step is kept when it launched at least this share of the device executions of the step before.
_TAIL_KEEP_SHARE = 0.8


def device_aware_steps(ops: pd.DataFrame, steps: pd.DataFrame, launched: Launches | None) -> pd.DataFrame:
    """The steps as the plugin delimits them: columns step, start_ns, end_ns, in time order.

    Without step annotations the whole span of the framework ops is one step, numbered 0.
    """
    host_steps = steps.sort_values("start_ns", kind="stable")
    if host_steps.empty:
        framework = _framework_span(ops)
        if framework is None:
            return pd.DataFrame({"step": [], "start_ns": [], "end_ns": []}, dtype=np.int64)
        host_steps = pd.DataFrame({"step": [0], "start_ns": [framework[0]], "end_ns": [framework[1]]})
    step = host_steps["step"].to_numpy(dtype=np.int64)
    start = host_steps["start_ns"].to_numpy(dtype=np.int64)
    end = host_steps["end_ns"].to_numpy(dtype=np.int64)
    if launched is None:
        return pd.DataFrame({"step": step, "start_ns": start, "end_ns": end})
    first, last, count = _launched_per_step(ops, launched, start, end)
    if count.sum() == 0:
        return pd.DataFrame({"step": step, "start_ns": start, "end_ns": end})
    previous_end = int(start[0])
    if count[0] > 0:  # work left running from before the first step delays its start
        previous_end = max(previous_end, _latest_end_left_running(ops, launched, start, end, int(first[0])))
    new_start, new_end = start.copy(), end.copy()
    for i in range(len(step)):
        new_start[i] = max(previous_end, start[i])
        new_end[i] = max(end[i], last[i]) if count[i] else end[i]
        new_end[i] = max(new_end[i], new_start[i])
        previous_end = int(new_end[i])
    keep = _kept_steps(count)
    return pd.DataFrame({"step": step[:keep], "start_ns": new_start[:keep], "end_ns": new_end[:keep]})


def _framework_span(ops: pd.DataFrame) -> Optional[tuple[int, int]]:
    """The first start and the last end of the host's framework ops (None without any), a chunk of ops at a time."""
    op_start, op_dur = ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy()
    spans = []  # per chunk with framework ops
    for rows in chunks(len(ops), CHUNK_ROWS):
        host = (ops["device"].iloc[rows] == "cpu").to_numpy() & is_in(ops["category"].iloc[rows], FRAMEWORK_CATEGORIES)
        if host.any():
            start = op_start[rows][host]
            spans.append((int(start.min()), int((start + op_dur[rows][host]).max())))
    return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


def _launched_per_step(
    ops: pd.DataFrame, launched: Launches, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step, the first start and last end of the device executions launched by a call inside it, and their
    count (min, max and count summed chunk by chunk: exact)."""
    op_start, op_dur = ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy()
    first = np.full(len(start), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(start), np.iinfo(np.int64).min, dtype=np.int64)
    count = np.zeros(len(start), dtype=np.int64)
    for _, executions, at in _step_launches(ops, launched, start, end):
        exec_start = op_start[executions]
        np.minimum.at(first, at, exec_start)
        np.maximum.at(last, at, exec_start + op_dur[executions])
        count += np.bincount(at, minlength=len(start))
    return first, last, count


def _latest_end_left_running(
    ops: pd.DataFrame, launched: Launches, start: np.ndarray, end: np.ndarray, before: int
) -> int:
    """The latest end before `before` of the device work that no call inside a step launched (work left running
    from before the first step), the least int64 without any."""
    op_start, op_dur = ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy()
    latest = int(np.iinfo(np.int64).min)
    for rows, executions, _ in _step_launches(ops, launched, start, end):
        left = (ops["device"].iloc[rows] != "cpu").to_numpy() & is_in(
            ops["category"].iloc[rows], DEVICE_WORK_CATEGORIES
        )
        left[executions - rows.start] = False
        ends = op_start[rows][left] + op_dur[rows][left]
        latest = int(ends[ends < before].max(initial=latest))
    return latest


def _step_launches(
    ops: pd.DataFrame, launched: Launches, start: np.ndarray, end: np.ndarray
) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """A chunk of ops at a time: its rows, the device executions among them (rows of the table) launched by a
    call inside a step [start, end), and that step's position."""
    op_start, op_dur = ops["start_ns"].to_numpy(), ops["dur_ns"].to_numpy()
    for rows in chunks(len(ops), CHUNK_ROWS):
        executions = np.flatnonzero(launched.call[rows] >= 0) + rows.start
        call = launched.call[executions]
        call_start = op_start[call]
        at = np.searchsorted(start, call_start, side="right") - 1
        inside = (at >= 0) & (call_start + op_dur[call] <= end[np.maximum(at, 0)])
        yield rows, executions[inside], at[inside]


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


class Coverage(NamedTuple):
    """How much of each window a group of activities covers (`activity_coverage`)."""

    ns: np.ndarray  # int64 ns per window
    intervals: int  # how many disjoint intervals the group's union has over the whole run (0: no such activity)


def activity_coverage(
    ops: pd.DataFrame, spans: pd.DataFrame, groups: Sequence[Sequence[str]], q_start: np.ndarray, q_end: np.ndarray
) -> list[Coverage]:
    """Per group of ACTIVITIES (all devices together), how much of each window [q_start, q_end) the union of their
    intervals covers. The ops are read a chunk of rows at a time and each group's union counted a settled piece at
    a time (`intervals.SettledUnion`): integer sums over the pieces are the whole unions' figures (the importers
    skip events of negative duration), with no mask, interval array or union over every op held at once."""
    unions = [SettledUnion() for _ in groups]
    covered = [np.zeros(len(q_start), dtype=np.int64) for _ in groups]
    counts = [0] * len(groups)
    for pieces, later in _activity_pieces(ops, spans):
        for i, group in enumerate(groups):
            settled = unions[i].add(*_concatenated([pieces[name] for name in group]), later)
            covered[i] += covered_ns(*settled, q_start, q_end)
            counts[i] += len(settled[0])
    return [Coverage(ns, count) for ns, count in zip(covered, counts)]


def _activity_pieces(ops: pd.DataFrame, spans: pd.DataFrame) -> Iterator[tuple[dict[str, Intervals], Optional[int]]]:
    """Every activity's intervals a chunk of ops at a time (with the spans that start in the chunk's time), and
    the start of the next chunk (None after the last), before which no later chunk's interval starts. Ops out of
    start order are one chunk."""
    start = ops["start_ns"].to_numpy()
    rows = (list(chunks(len(ops), CHUNK_ROWS)) if in_order(start) else [slice(0, len(ops))]) or [slice(0, 0)]
    # the chunks' first starts: a sample of the column a stretch at a time (one read per chunk maps a folio each)
    laters = [*sample(start[CHUNK_ROWS:], CHUNK_ROWS).tolist(), None] if len(rows) > 1 else [None]
    span_pieces = {name: _cut(s, e, laters[:-1]) for name, (s, e) in _span_intervals(spans).items()}
    for i, (at, later) in enumerate(zip(rows, laters)):
        pieces = _op_intervals(ops, at)
        for name, cut in span_pieces.items():
            pieces[name] = _concatenated([pieces[name], cut[i]]) if name in pieces else cut[i]
        yield pieces, later


def _op_intervals(ops: pd.DataFrame, rows: slice) -> dict[str, Intervals]:
    """The union of the intervals of each activity's ops among `rows` (a chunk of the ops table)."""
    on_device = (ops["device"].iloc[rows] != "cpu").to_numpy()
    category = ops["category"].iloc[rows]
    collective = (
        ~on_device
        & is_in(category, _CPU_EXEC_CATEGORIES + ("comm",))
        & text_matches(ops["name"].iloc[rows], _COLLECTIVE.match)
    )
    masks = {
        "kernel": on_device & (category == "compute").to_numpy(),
        "memcpy": on_device & (category == "memcpy").to_numpy(),
        "memset": on_device & (category == "memset").to_numpy(),
        "communication": on_device & (category == "comm").to_numpy() | collective,
        "runtime": ~on_device & (category == "runtime").to_numpy(),
        "cpu_exec": ~on_device & is_in(category, _CPU_EXEC_CATEGORIES) & ~collective,
    }
    start, dur = ops["start_ns"].to_numpy()[rows], ops["dur_ns"].to_numpy()[rows]
    return {name: union(start[mask], start[mask] + dur[mask]) for name, mask in masks.items()}


def _span_intervals(spans: pd.DataFrame) -> dict[str, Intervals]:
    """The spans' intervals of the activities spans have (data loader fetches, collectives' host ranges, other
    scopes as CPU execution), each in start order."""
    span_names = spans["name"].astype(str)
    span_start, span_end = spans["start_ns"].to_numpy(), (spans["start_ns"] + spans["dur_ns"]).to_numpy()
    collective_span = span_names.str.match(_COLLECTIVE.pattern).to_numpy()
    fetch = span_names.str.match(_DATALOADER_FETCH.pattern).to_numpy()
    scope = (spans["kind"] == "scope").to_numpy() & ~collective_span & ~fetch
    out = {}
    for name, chosen in (("dataloader", fetch), ("communication", collective_span), ("cpu_exec", scope)):
        order = np.argsort(span_start[chosen], kind="stable")
        out[name] = (span_start[chosen][order], span_end[chosen][order])
    return out


def _cut(starts: np.ndarray, ends: np.ndarray, laters: Sequence[int]) -> list[Intervals]:
    """Intervals in start order cut into pieces before each of `laters` (ascending): len(laters) + 1 pieces."""
    at = np.searchsorted(starts, laters)
    return list(zip(np.split(starts, at), np.split(ends, at)))


def _concatenated(pieces: Sequence[Intervals]) -> Intervals:
    """The intervals of every piece, one piece after the other (for `union`, which orders them)."""
    return np.concatenate([s for s, _ in pieces]), np.concatenate([e for _, e in pieces])


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
    ranked = [ACTIVITIES[: i + 1] for i in range(len(ACTIVITIES))]  # each activity with those before it, as one union
    covered_before = np.zeros(len(steps), dtype=np.int64)
    for name, covered in zip(ACTIVITIES, activity_coverage(ops, spans, ranked, q_start, q_end)):
        table[f"{name}_ms"] = (covered.ns - covered_before) / 1e6
        covered_before = covered.ns
    total = q_end - q_start
    table["other_ms"] = (total - covered_before) / 1e6
    table["total_ms"] = total / 1e6
    return pd.DataFrame(table)[STEP_ACTIVITY_COLUMNS]


def comm_split(ops: pd.DataFrame, spans: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (`device_aware_steps`), the plugin's computation / communication overview (COMM_SPLIT_COLUMNS):
    computation (compute kernels, or the host's CPU execution in a run without kernels) and communication
    each without the time they overlap, the overlap, and the rest. Empty for a run without communication."""
    if steps.empty:
        return pd.DataFrame(columns=COMM_SPLIT_COLUMNS)
    q_start, q_end = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    groups = [
        ("kernel",),
        ("cpu_exec",),
        ("communication",),
        ("kernel", "communication"),
        ("cpu_exec", "communication"),
    ]
    kernel, cpu_exec, communication, kernel_or_comm, cpu_or_comm = activity_coverage(ops, spans, groups, q_start, q_end)
    if not communication.intervals:
        return pd.DataFrame(columns=COMM_SPLIT_COLUMNS)
    computation, either = (kernel, kernel_or_comm) if kernel.intervals else (cpu_exec, cpu_or_comm)
    comp, comm = computation.ns, communication.ns
    overlap = comp + comm - either.ns
    total = q_end - q_start
    return pd.DataFrame(
        {
            "step": steps["step"].to_numpy(np.int64),
            "computation_ms": (comp - overlap) / 1e6,
            "overlap_ms": overlap / 1e6,
            "communication_ms": (comm - overlap) / 1e6,
            "other_ms": (total - either.ns) / 1e6,
            "total_ms": total / 1e6,
        }
    )[COMM_SPLIT_COLUMNS]

"""Device time: how busy each device was, on what, and why it waited — told from its own timeline.

For every device of a run (ops whose device is not "cpu": CUDA, ROCm or any Kineto device, Ascend
NPUs), from its executions alone (model.DEVICE_WORK_CATEGORIES: kernels, collectives, memcpy,
memset; every stream merged), with the definitions of HTA's `get_temporal_breakdown` and
`get_comm_comp_overlap`:

- window = first execution start .. last execution end; busy = the union of the executions;
  idle = window - busy;
- compute = the union of compute kernels, non-compute = busy - compute, comm = the union of
  communication kernels, memory = the union of memcpy and memset;
- comm / compute overlap = |U(comm) n U(compute)| / |U(comm)| (None without communication).

Why the device waits: every idle gap (between two merged executions) is split by cause. The work
that ends the gap was launched by a host runtime call (same `correlation`); when that launch came
before the gap began, the device had the work queued and still waited: `launch` latency when the
gap is short (under LAUNCH_LATENCY_NS, HTA's kernel_wait), else `other` (a dependency: another
stream, a peer). When the launch came later, the host was late (HTA's host_wait), and the gap's time
is split by what the host was doing: waiting for data (`data`: data-wait intervals), inside a
synchronising call or between its return and the next launch (`sync`: the device ran dry because
the host waited for it, `.item()`, `.cpu()`, a pageable copy), anything else (`host`: Python and
framework work, launching too slowly). Gaps whose work has no recorded launch are split the same
way, with `other` instead of `host`.

Pure: DataFrames and arrays in, DataFrames out; one numpy / pandas pass, no Python loop per event.
"""

from __future__ import annotations

import re
import weakref
from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.ops import op_rows
from profiler.formats.columns import DEVICE_TIME_COLUMNS
from profiler.kernels.grouping import is_in, text_matches
from profiler.kernels.intervals import covered_ns, union
from profiler.kernels.nesting import enclosing_parents
from profiler.model import DEVICE_WORK_CATEGORIES
from profiler.spill import spilled

#: A gap shorter than this between two executions whose work was already launched is launch
#: latency (HTA's default `consecutive_kernel_delay`, 30 us); a longer one waits on a dependency.
LAUNCH_LATENCY_NS = 30_000
#: The causes an idle gap is split into, in the order of the output columns.
IDLE_CAUSES = ("sync", "data", "host", "launch", "other")
#: Device API calls that block the host until the device has finished work (CUDA runtime and
#: driver, HIP): device / stream / event / context synchronisation and the synchronous copies.
SYNC_CALL = re.compile(
    r"(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)Synchronize"
    r"|(?:cuda|hip)Memcpy(?:2D|3D|HtoD|DtoH|DtoD|ToSymbol|FromSymbol|WithStream)?"
    r"|cuMemcpy(?:HtoD|DtoH|DtoD)?(?:_v2)?"
)
#: A copy to or from pageable host memory (CUDA's memcpy names: "Memcpy DtoH (Device -> Pageable)"):
#: the call that launched it blocks the host while the driver stages the data.
PAGEABLE_COPY = "Pageable"

_EMPTY = np.empty(0, dtype=np.int64)


# ----------------------------------------------------------------------------- inputs


#: device_executions' results by the id of the op table they were computed from (with a weak reference to
#: it, so an entry is dropped with its table): a run's executions are computed once, though the device
#: breakdown, the step trace's busy and communication windows, the idle gaps, the sync calls and the
#: findings' device timeline all start from them.
_EXECUTIONS: dict[int, tuple[weakref.ref, pd.DataFrame]] = {}


def device_executions(ops: pd.DataFrame) -> pd.DataFrame:
    """The executions of every device: device, stream, category, name, start_ns, end_ns, correlation, and
    `row` (the execution's position in `ops`, for figures kept per op row: analysis/launches.py). Computed
    once per op table (an analysis treats its op table as read-only, and so do its callers with the
    executions)."""
    key = id(ops)
    cached = _EXECUTIONS.get(key)
    if cached is not None and cached[0]() is ops:
        return cached[1]
    ex = _device_executions(ops)
    _EXECUTIONS[key] = (weakref.ref(ops, lambda _gone, key=key: _EXECUTIONS.pop(key, None)), ex)
    return ex


def _device_executions(ops: pd.DataFrame) -> pd.DataFrame:
    """device_executions, computed."""
    rows = np.flatnonzero((ops["device"] != "cpu").to_numpy() & is_in(ops["category"], DEVICE_WORK_CATEGORIES))
    ex = op_rows(ops, ["device", "stream", "category", "name", "start_ns", "dur_ns", "correlation"], rows)
    start = ex["start_ns"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "device": _categorical(ex["device"]),
            "stream": _categorical(ex["stream"]),
            "category": _categorical(ex["category"]),
            "name": _categorical(ex["name"]),
            # kept for the whole analysis: in spill files when the run is spilled (its pages handed back with the
            # op columns'), not copied again into the table
            "start_ns": spilled(start),
            "end_ns": spilled(start + ex["dur_ns"].to_numpy(np.int64)),
            "correlation": spilled(ex["correlation"].to_numpy(np.int64)),
            "row": spilled(rows),
        },
        copy=False,
    )


def _categorical(column: pd.Series) -> pd.Categorical:
    """A text column as a categorical of the values it holds (the op table's are already: no copy of
    the strings, a million executions share a few hundred names)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.array.remove_unused_categories()
    return pd.Categorical(column.astype(str))


def runtime_calls(ops: pd.DataFrame) -> pd.DataFrame:
    """The host's device API calls (category `runtime`) with what each is: `sync` (it blocks until the
    device has finished: SYNC_CALL names, and the calls whose copy involves pageable memory),
    `launch` (it put work on a device: its correlation is an execution's) or `other` (allocation,
    event record, queries). Columns: name, start_ns, end_ns, correlation, kind."""
    return _runtime_calls(ops, device_executions(ops))


def _runtime_calls(ops: pd.DataFrame, ex: pd.DataFrame) -> pd.DataFrame:
    rt = op_rows(ops, ["name", "start_ns", "dur_ns", "correlation"], np.flatnonzero(ops["category"] == "runtime"))
    corr = rt["correlation"].to_numpy(np.int64)
    ex_corr = ex["correlation"].to_numpy(np.int64)
    copies = (ex["category"] == "memcpy").to_numpy() & text_matches(ex["name"], lambda n: PAGEABLE_COPY in n)
    blocking = text_matches(rt["name"], lambda n: SYNC_CALL.fullmatch(n) is not None)
    sync = blocking | ((corr >= 0) & _member(corr, np.sort(ex_corr[copies])))
    launch = (corr >= 0) & _member(corr, np.sort(ex_corr[ex_corr >= 0]))
    start = rt["start_ns"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "name": _categorical(rt["name"]),
            "start_ns": start,
            "end_ns": start + rt["dur_ns"].to_numpy(np.int64),
            "correlation": corr,
            "kind": np.where(sync, "sync", np.where(launch, "launch", "other")).astype(object),
        }
    )


def _member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Whether each value is in the sorted array `pool` (a binary search: np.isin hashes both)."""
    if len(pool) == 0:
        return np.zeros(len(values), dtype=bool)
    return pool[np.minimum(np.searchsorted(pool, values), len(pool) - 1)] == values


# ----------------------------------------------------------------------------- idle gaps


def idle_gaps(
    ops: pd.DataFrame, data_wait: tuple[np.ndarray, np.ndarray] = (_EMPTY, _EMPTY), per_stream: bool = False
) -> pd.DataFrame:
    """Every idle gap of every device (of every stream with `per_stream`: HTA's idle time breakdown
    works per stream), with its time split by cause (the module docstring).

    Columns: device, stream ("" unless per_stream), start_ns, end_ns, next_launch_ns (start of the
    runtime call that launched the work ending the gap, -1 when not recorded), and one `<cause>_ns`
    column per IDLE_CAUSES; the causes add up to end_ns - start_ns.
    """
    ex = device_executions(ops)
    return _gaps(ex, _runtime_calls(ops, ex), data_wait, per_stream)


def _gaps(
    ex: pd.DataFrame, calls: pd.DataFrame, data_wait: tuple[np.ndarray, np.ndarray], per_stream: bool
) -> pd.DataFrame:
    lanes = ex["device"].cat.codes.to_numpy(np.int64)
    if per_stream:
        lanes = lanes * len(ex["stream"].cat.categories) + ex["stream"].cat.codes.to_numpy(np.int64)
    first, start, end, lane = _merged(lanes, ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy())
    same = lane[1:] == lane[:-1]
    g_start, g_end = end[:-1][same], start[1:][same]
    ends_gap = first[1:][same]  # the execution that ends each gap
    launched = _launch_time(ex["correlation"].to_numpy()[ends_gap], calls)
    data_s, data_e = (np.asarray(a, dtype=np.int64) for a in data_wait)
    sync_s, sync_e = _sync_shadows(calls)
    data = covered_ns(data_s, data_e, g_start, g_end)
    data_or_sync = covered_ns(np.concatenate([data_s, sync_s]), np.concatenate([data_e, sync_e]), g_start, g_end)
    length = g_end - g_start
    queued = (launched >= 0) & (launched <= g_start)
    short = queued & (length < LAUNCH_LATENCY_NS)
    unknown = launched < 0
    rest = length - data_or_sync
    zero = np.zeros(len(length), dtype=np.int64)
    return pd.DataFrame(
        {
            "device": ex["device"].to_numpy(dtype=object)[ends_gap],
            "stream": ex["stream"].to_numpy(dtype=object)[ends_gap]
            if per_stream
            else np.full(len(g_start), "", object),
            "start_ns": g_start,
            "end_ns": g_end,
            "next_launch_ns": launched,
            "sync_ns": np.where(queued, zero, data_or_sync - data),
            "data_ns": np.where(queued, zero, data),
            "host_ns": np.where(queued | unknown, zero, rest),
            "launch_ns": np.where(short, length, zero),
            "other_ns": np.where(queued, length - np.where(short, length, zero), np.where(unknown, rest, zero)),
        },
        copy=False,  # arrays made for this table: not copied again (a big trace's gaps are millions)
    )


def _merged(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """The union of the intervals of each lane (integer codes), as (index of each merged interval's
    first interval, its start, its end, its lane), in (lane, start) order."""
    if len(start) == 0:
        return _EMPTY, _EMPTY, _EMPTY, _EMPTY
    order = np.lexsort((start, lane))
    s, e, k = start[order], end[order], lane[order]
    reach = np.empty(len(e), dtype=np.int64)  # each lane's running latest end (a few lanes: no groupby's copies)
    edges = [0, *(np.flatnonzero(k[1:] != k[:-1]) + 1), len(k)]
    for lo, hi in zip(edges[:-1], edges[1:]):
        np.maximum.accumulate(e[lo:hi], out=reach[lo:hi])
    new = np.ones(len(s), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > reach[:-1])
    head = np.flatnonzero(new)
    last = np.append(head[1:], len(s)) - 1
    return order[head], s[head], reach[last], k[head]


def _launch_time(correlation: np.ndarray, calls: pd.DataFrame) -> np.ndarray:
    """Start of the runtime call with each correlation id (-1 when there is none)."""
    ids = calls["correlation"].to_numpy(np.int64)
    keep = ids >= 0
    order = np.argsort(ids[keep], kind="stable")
    ids, starts = ids[keep][order], calls["start_ns"].to_numpy(np.int64)[keep][order]
    if len(ids) == 0:
        return np.full(len(correlation), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, correlation), len(ids) - 1)
    return np.where((correlation >= 0) & (ids[at] == correlation), starts[at], -1)


def _sync_shadows(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each synchronising call, from its start to the next launch after it returns: the time the
    device runs dry because the host waited for it (the call's end when nothing is launched later)."""
    sync = calls[(calls["kind"] == "sync").to_numpy()]
    s, e = sync["start_ns"].to_numpy(np.int64), sync["end_ns"].to_numpy(np.int64)
    launches = np.sort(calls.loc[(calls["kind"] == "launch").to_numpy(), "start_ns"].to_numpy(np.int64))
    if len(launches) == 0:
        return s, e
    at = np.searchsorted(launches, e, side="left")
    return s, np.where(at < len(launches), launches[np.minimum(at, len(launches) - 1)], e)


# ----------------------------------------------------------------------------- the breakdown


def device_time(
    ops: pd.DataFrame,
    data_wait: tuple[np.ndarray, np.ndarray] = (_EMPTY, _EMPTY),
    steps: Optional[tuple[np.ndarray, np.ndarray]] = None,
) -> pd.DataFrame:
    """One row per device (formats.columns.DEVICE_TIME_COLUMNS), sorted by device name: window, busy / idle,
    the temporal breakdown, comm / compute overlap, the idle time split by cause (`idle_gaps`), and
    the busy time outside every step (`steps`: the steps' [start, end) in ns; NaN without them), which
    the breakdown counts and tools that keep only the steps' executions (HTA) leave out.
    Empty when no device executed anything."""
    ex = device_executions(ops)
    if ex.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "device" else np.float64) for c in DEVICE_TIME_COLUMNS})
    gaps = _gaps(ex, _runtime_calls(ops, ex), data_wait, per_stream=False)
    causes = gaps.groupby("device")[[f"{c}_ns" for c in IDLE_CAUSES]].sum()
    rows = []
    for device, rows_of in ex.groupby("device", sort=True, observed=True):
        row = _device_row(str(device), rows_of, causes.loc[device] if device in causes.index else None)
        row["outside_steps_ms"] = _outside_ms(rows_of, steps) if steps is not None else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=DEVICE_TIME_COLUMNS)


def _outside_ms(ex: pd.DataFrame, steps: tuple[np.ndarray, np.ndarray]) -> float:
    """The busy time of executions `ex` outside every step window (ms): busy minus busy inside the steps."""
    start, end = ex["start_ns"].to_numpy(np.int64), ex["end_ns"].to_numpy(np.int64)
    w_start, w_end = union(np.asarray(steps[0], dtype=np.int64), np.asarray(steps[1], dtype=np.int64))
    inside = int(covered_ns(start, end, w_start, w_end).sum()) if len(w_start) else 0
    return max(_length(start, end) - inside, 0) * 1e-6


def _device_row(device: str, ex: pd.DataFrame, causes: pd.Series | None) -> dict:
    """The breakdown of one device from its executions."""
    start, end, category = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy(), ex["category"].to_numpy(dtype=object)
    window = int(end.max() - start.min())
    compute, comm = category == "compute", category == "comm"
    busy = _length(start, end)
    compute_ns, comm_ns = _length(start[compute], end[compute]), _length(start[comm], end[comm])
    memory = np.isin(category, ("memcpy", "memset"))
    either = compute | comm
    overlap = compute_ns + comm_ns - _length(start[either], end[either])
    pct = (lambda ns: 100.0 * ns / window) if window > 0 else (lambda ns: 0.0)
    ms = 1e-6
    row = {
        "device": device,
        "window_ms": window * ms,
        "busy_ms": busy * ms,
        "idle_ms": (window - busy) * ms,
        "busy_pct": pct(busy),
        "idle_pct": pct(window - busy),
        "compute_pct": pct(compute_ns),
        "non_compute_pct": pct(busy - compute_ns),
        "comm_pct": pct(comm_ns),
        "memory_pct": pct(_length(start[memory], end[memory])),
        "comm_compute_overlap_pct": 100.0 * overlap / comm_ns if comm_ns > 0 else None,
        "executions": int(len(ex)),
        "streams": int(ex["stream"].nunique()),
    }
    for cause in IDLE_CAUSES:
        row[f"idle_{cause}_ms"] = (float(causes[f"{cause}_ns"]) if causes is not None else 0.0) * ms
    return row


def _length(start: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of the intervals."""
    s, e = union(start, end)
    return int((e - s).sum())


def busy_in_windows(ops: pd.DataFrame, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each window [q_start, q_end): how long any device executed something in it (the union of
    every device's executions: a rank normally drives one device), and whether the window overlaps
    the devices' recorded time at all (first execution start .. last execution end)."""
    ex = device_executions(ops)
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    if len(start) == 0:
        return np.zeros(len(q_start), dtype=np.int64), np.zeros(len(q_start), dtype=bool)
    return covered_ns(start, end, q_start, q_end), (q_end > start.min()) & (q_start < end.max())


# ----------------------------------------------------------------------------- sync calls and their call sites

#: A Python frame as Kineto records it (`with_stack=True`: python_function events "train.py(42): step").
PYTHON_FRAME = re.compile(r"\.py\(\d+\)")
#: The profiler's step annotation: it encloses everything in a step, so it names no call site.
STEP_ANNOTATION = re.compile(r"ProfilerStep#\d+")


def sync_calls(ops: pd.DataFrame) -> pd.DataFrame:
    """Every synchronising runtime call (`runtime_calls` kind sync) with its call site and its shadow:
    name, call_site, start_ns, end_ns, shadow_end_ns (the next launch after it returns: until then the
    device runs dry because of it).

    The call site is what the host was running around the call, from the ops enclosing it on its
    thread: the innermost Python frame when recorded (Kineto `with_stack`), else the outermost
    enclosing op, then the innermost enclosing op ("DistributedDataParallel.forward > aten::item"):
    where in the loop the call is and which tensor operation made it.
    """
    ex = device_executions(ops)
    calls = _runtime_calls(ops, ex)
    runtime = (ops["category"] == "runtime").to_numpy()
    used = ["stream", "category", "name", "start_ns", "dur_ns"]
    host = op_rows(ops, used, np.flatnonzero((ops["device"] == "cpu").to_numpy() | runtime))  # calls in calls' order
    sync_at = np.flatnonzero((calls["kind"] == "sync").to_numpy())
    sync = calls.iloc[sync_at]
    return pd.DataFrame(
        {
            "name": sync["name"].astype(str).to_numpy(dtype=object),
            "call_site": _call_sites(host, np.flatnonzero((host["category"] == "runtime").to_numpy())[sync_at]),
            "start_ns": sync["start_ns"].to_numpy(np.int64),
            "end_ns": sync["end_ns"].to_numpy(np.int64),
            "shadow_end_ns": _sync_shadows(calls)[1],
        }
    )


def _call_sites(host: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The call site (see `sync_calls`) of the host ops at positions `rows` of `host`."""
    lane = pd.Categorical(host["stream"].astype(str)).codes.astype(np.int64)
    start = host["start_ns"].to_numpy(np.int64)
    parent = enclosing_parents(lane, start, start + host["dur_ns"].to_numpy(np.int64))
    usable = (host["category"] != "runtime").to_numpy() & ~text_matches(
        host["name"], lambda n: STEP_ANNOTATION.fullmatch(n) is not None
    )
    frame = text_matches(host["name"], lambda n: PYTHON_FRAME.search(n) is not None)
    n = len(rows)
    inner, outer, python = np.full(n, -1), np.full(n, -1), np.full(n, -1)
    at = parent[rows] if n else np.empty(0, dtype=np.int64)
    while (at >= 0).any():
        live = at >= 0
        hit = np.zeros(n, dtype=bool)
        hit[live] = usable[at[live]]
        inner = np.where(hit & (inner < 0), at, inner)
        outer = np.where(hit, at, outer)
        py = hit.copy()
        py[live] &= frame[at[live]]
        python = np.where(py & (python < 0), at, python)
        at = np.where(live, parent[np.maximum(at, 0)], -1)
    head = np.where(python >= 0, python, outer)
    names = host["name"]
    text = [
        ("" if h < 0 else str(names.iat[h]) if h == i else f"{names.iat[h]} > {names.iat[i]}")
        for h, i in zip(head, inner)
    ]
    return np.asarray(text, dtype=object)


def comm_in_windows(ops: pd.DataFrame, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each window [q_start, q_end): how long communication kernels ran on the devices in it (the
    union of every device's `comm` executions), and how much of that time compute kernels ran too
    (|U(comm) n U(compute)|: the numerator of HTA's `get_comm_comp_overlap`, window by window)."""
    ex = device_executions(ops)
    category = ex["category"].to_numpy(dtype=object)
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    comm, compute = category == "comm", category == "compute"
    either = comm | compute
    comm_ns = covered_ns(start[comm], end[comm], q_start, q_end)
    overlap = (
        comm_ns
        + covered_ns(start[compute], end[compute], q_start, q_end)
        - covered_ns(start[either], end[either], q_start, q_end)
    )
    return comm_ns, np.maximum(overlap, 0)

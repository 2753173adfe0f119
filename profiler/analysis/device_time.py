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
from collections.abc import Callable, Iterator
from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.ops import gathered_column, op_rows
from profiler.formats.columns import DEVICE_TIME_COLUMNS
from profiler.kernels.grouping import code_counts, is_in, text_matches
from profiler.kernels.intervals import RunningUnion, WindowCoverage, covered_ns, in_order, start_ordered, union
from profiler.kernels.nesting import enclosing_parents, positions_passing
from profiler.model import DEVICE_WORK_CATEGORIES, op_times
from profiler.spill import chunked, chunks, gathered

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
#: Executions (runtime calls) read at a time by the breakdown and the idle gaps: their temporaries are ~20 arrays
#: of 8 B per execution of a chunk, not of the run.
GAP_CHUNK = 1 << 16

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
    """device_executions, computed: each column gathered from the op table on its own (a categorical's codes, the
    times into spill files), without a copy of the executions' rows of every column at once."""
    rows = _device_work_rows(ops)
    start, end = op_times(ops, rows)
    return pd.DataFrame(
        {
            "device": _categorical(ops["device"], rows),
            "stream": _categorical(ops["stream"], rows),
            "category": _categorical(ops["category"], rows),
            "name": _categorical(ops["name"], rows),
            # kept for the whole analysis: in spill files when the run is spilled (its pages handed back with the
            # op columns')
            "start_ns": start,
            "end_ns": end,
            "correlation": gathered(ops["correlation"].to_numpy(np.int64), rows, np.int64),
            "row": rows,
        },
        copy=False,
    )


def _device_work_rows(ops: pd.DataFrame) -> np.ndarray:
    """The rows of device work (off the host, in DEVICE_WORK_CATEGORIES), found a chunk of the table at a time
    (`positions_passing`: int32 below 2**31 ops, in a spill file when big)."""
    device, category = ops["device"], ops["category"]
    return positions_passing(
        len(ops), lambda at: (device.iloc[at] != "cpu").to_numpy() & is_in(category.iloc[at], DEVICE_WORK_CATEGORIES)
    )


def _categorical(column: pd.Series, rows: Optional[np.ndarray] = None) -> pd.Categorical:
    """column[rows] (all of it by default) as a categorical of the values they hold (remove_unused_categories'
    result, without its sort of the codes: a million executions share a few hundred names); text coded."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return pd.Categorical((column if rows is None else column.iloc[rows]).astype(str))
    codes = column.array.codes if rows is None else gathered(column.array.codes, rows)  # one more still fits
    counts = code_counts(codes, len(column.cat.categories))
    used = counts[1:] > 0
    # in the type pandas keeps for that many categories (so it does not copy them into memory to cast)
    kept = next(t for t in (np.int8, np.int16, np.int32, np.int64) if int(used.sum()) < np.iinfo(t).max)
    renumbered = np.full(len(counts), -1, dtype=kept)
    renumbered[1:][used] = np.arange(int(used.sum()))
    new_codes = chunked(len(codes), kept, lambda at: renumbered[codes[at] + 1])
    return pd.Categorical.from_codes(new_codes, dtype=pd.CategoricalDtype(column.cat.categories[used]))


def runtime_calls(ops: pd.DataFrame) -> pd.DataFrame:
    """The host's device API calls (category `runtime`) with what each is: `sync` (it blocks until the
    device has finished: SYNC_CALL names, and the calls whose copy involves pageable memory),
    `launch` (it put work on a device: its correlation is an execution's) or `other` (allocation,
    event record, queries). Columns: name, start_ns, end_ns, correlation, kind."""
    calls = _runtime_calls(ops, device_executions(ops))
    return calls.assign(name=_categorical(calls["name"]), kind=calls["kind"].astype(object))


#: The kinds of runtime calls (`runtime_calls`), as `_runtime_calls` codes them.
CALL_KINDS = ("sync", "launch", "other")


def _runtime_calls(ops: pd.DataFrame, ex: pd.DataFrame) -> pd.DataFrame:
    """runtime_calls with `kind` a categorical (1 B per call) and `name` the op table's column's values (every
    category kept), its columns found and gathered a chunk at a time into spill files when the run is spilled: the
    idle gaps of a big run read them whole."""
    category = ops["category"]
    rows = positions_passing(len(ops), lambda at: (category.iloc[at] == "runtime").to_numpy())
    name, corr = gathered_column(ops["name"], rows), gathered_column(ops["correlation"], rows)
    start, end = op_times(ops, rows)
    ex_corr, ex_category, ex_name = ex["correlation"].to_numpy(np.int64), ex["category"], ex["name"]
    launched = _sorted_where(ex_corr, lambda at: ex_corr[at] >= 0)
    copied = _sorted_where(
        ex_corr,
        lambda at: (
            (ex_category.iloc[at] == "memcpy").to_numpy() & text_matches(ex_name.iloc[at], lambda n: PAGEABLE_COPY in n)
        ),
    )
    names = pd.Series(name, copy=False)
    kind = chunked(len(rows), np.int8, lambda at: _call_kinds(names.iloc[at], corr[at], launched, copied))
    return pd.DataFrame(
        {
            "name": name,
            "start_ns": start,
            "end_ns": end,
            "correlation": corr,
            "kind": pd.Categorical.from_codes(kind, CALL_KINDS),
        },
        copy=False,
    )


def _sorted_where(values: np.ndarray, keep: Callable[[slice], np.ndarray]) -> np.ndarray:
    """The values at the positions where `keep(positions)` holds, sorted: found and gathered a chunk at a time,
    sorted in place (in a spill file when big)."""
    kept = gathered(values, positions_passing(len(values), keep))
    kept.sort()
    return kept


def _call_kinds(name: pd.Series, corr: np.ndarray, launched: np.ndarray, copied: np.ndarray) -> np.ndarray:
    """The CALL_KINDS codes of runtime calls: `sync` for a SYNC_CALL name or a pageable copy's correlation (sorted
    `copied`), else `launch` for an execution's correlation (sorted `launched`), else `other`."""
    recorded = corr >= 0
    kind = np.where(recorded & _member(corr, launched), CALL_KINDS.index("launch"), CALL_KINDS.index("other"))
    blocking = text_matches(name, lambda n: SYNC_CALL.fullmatch(n) is not None)
    kind[blocking | (recorded & _member(corr, copied))] = CALL_KINDS.index("sync")
    return kind.astype(np.int8)


def _member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Whether each value is in the sorted array `pool` (a binary search: np.isin hashes both), a chunk of
    values at a time."""
    found = np.zeros(len(values), dtype=bool)
    if len(pool):
        for at in chunks(len(values), GAP_CHUNK):
            found[at] = pool[np.minimum(np.searchsorted(pool, values[at]), len(pool) - 1)] == values[at]
    return found


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


_GAP_COLUMNS = ("start_ns", "end_ns", "next_launch_ns", *(f"{c}_ns" for c in IDLE_CAUSES))


def idle_gap_pieces(
    ops: pd.DataFrame, data_wait: tuple[np.ndarray, np.ndarray] = (_EMPTY, _EMPTY)
) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """`idle_gaps`' rows (all streams merged) a piece at a time, as (device, its columns but device and stream),
    each device's pieces in its table's order: for a reader that keeps them elsewhere than in memory (the
    findings' device timeline keeps them in spill files)."""
    ex = device_executions(ops)
    devices = ex["device"].array.categories
    for lane, piece in _gap_pieces(ex, _runtime_calls(ops, ex), data_wait, False, GAP_CHUNK):
        yield str(devices[lane]), {c: piece[c] for c in _GAP_COLUMNS}


def _gaps(
    ex: pd.DataFrame,
    calls: pd.DataFrame,
    data_wait: tuple[np.ndarray, np.ndarray],
    per_stream: bool,
    rows: int = GAP_CHUNK,
) -> pd.DataFrame:
    """idle_gaps' table: the lanes' gap pieces joined lane by lane, in (lane, start) order."""
    pieces: dict[int, list[dict[str, np.ndarray]]] = {}
    for lane, piece in _gap_pieces(ex, calls, data_wait, per_stream, rows):
        pieces.setdefault(lane, []).append(piece)
    ordered = [piece for lane in sorted(pieces) for piece in pieces[lane]]
    ends = np.concatenate([p["ends"] for p in ordered]) if ordered else _EMPTY
    columns = {c: np.concatenate([p[c] for p in ordered]) if ordered else _EMPTY for c in _GAP_COLUMNS}
    return pd.DataFrame(
        {
            "device": _labels(ex["device"], ends),
            "stream": _labels(ex["stream"], ends) if per_stream else np.full(len(ends), "", object),
            **columns,
        },
        copy=False,  # arrays made for this table: not copied again (a big trace's gaps are millions)
    )


def _labels(column: pd.Series, at: np.ndarray) -> np.ndarray:
    """The texts of a categorical column at positions `at`, as objects (no object array over every row)."""
    return np.asarray(column.array.categories, dtype=object)[column.array.codes[at]]


def _idle_by_device(
    ex: pd.DataFrame, calls: pd.DataFrame, data_wait: tuple[np.ndarray, np.ndarray], rows: int = GAP_CHUNK
) -> dict[int, list[int]]:
    """Per device (its code in ex), the idle time of its gaps per cause (ns, in IDLE_CAUSES' order), summed a
    chunk of gaps at a time: the breakdown needs the sums, not the gaps."""
    sums: dict[int, list[int]] = {}
    for lane, piece in _gap_pieces(ex, calls, data_wait, False, rows):
        total = sums.setdefault(lane, [0] * len(IDLE_CAUSES))
        for i, cause in enumerate(IDLE_CAUSES):
            total[i] += int(piece[f"{cause}_ns"].sum())
    return sums


def _gap_pieces(
    ex: pd.DataFrame, calls: pd.DataFrame, data_wait: tuple[np.ndarray, np.ndarray], per_stream: bool, rows: int
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """The idle gaps of each lane between the unions of its executions, split by cause, as (lane, columns)
    pieces (`_lane_chunks`); `ends` is the execution that ends each gap."""
    start, end, correlation = (ex[c].to_numpy() for c in ("start_ns", "end_ns", "correlation"))
    launches = _launch_lookup(calls)
    data_s, data_e = (np.asarray(a, dtype=np.int64) for a in data_wait)
    sync_s, sync_e = _sync_shadows(calls)
    data = union(data_s, data_e)
    held = union(np.concatenate([data_s, sync_s]), np.concatenate([data_e, sync_e]))  # data wait or sync
    unions: dict[int, RunningUnion] = {}
    for lane, at in _lane_chunks(ex, per_stream, rows):
        s = start[at]
        new, before = unions.setdefault(lane, RunningUnion()).add(s, end[at])
        if new.any():
            g_start, g_end, ends = before[new], s[new], at[new]
            causes = _causes(g_start, g_end, _launch_time(correlation[ends], launches), data, held)
            yield lane, {"ends": ends, "start_ns": g_start, "end_ns": g_end, **causes}


def _lane_chunks(ex: pd.DataFrame, per_stream: bool, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """The executions in start order `rows` at a time (`start_ordered`), split by lane: (lane, positions) pairs,
    each lane's in start order. A lane is a device (its code) or, with `per_stream`, a device's stream (device
    code x streams + stream code): their order is the lanes' order."""
    devices, streams = ex["device"].array, ex["stream"].array
    for positions in start_ordered(ex["start_ns"].to_numpy(), rows):
        lane = devices.codes[positions].astype(np.int64)
        if per_stream:
            lane = lane * len(streams.categories) + streams.codes[positions]
        for code in np.unique(lane):
            yield int(code), positions[lane == code]


def _causes(
    g_start: np.ndarray, g_end: np.ndarray, launched: np.ndarray, data: tuple, held: tuple
) -> dict[str, np.ndarray]:
    """Each gap's next_launch_ns and its time split by cause (the module docstring); `data` and `held` are the
    unions of the data-wait intervals and of those with the sync shadows."""
    waiting = covered_ns(*data, g_start, g_end)
    waiting_or_sync = covered_ns(*held, g_start, g_end)
    length = g_end - g_start
    queued = (launched >= 0) & (launched <= g_start)
    short = queued & (length < LAUNCH_LATENCY_NS)
    unknown = launched < 0
    rest = length - waiting_or_sync
    zero = np.zeros(len(length), dtype=np.int64)
    return {
        "next_launch_ns": launched,
        "sync_ns": np.where(queued, zero, waiting_or_sync - waiting),
        "data_ns": np.where(queued, zero, waiting),
        "host_ns": np.where(queued | unknown, zero, rest),
        "launch_ns": np.where(short, length, zero),
        "other_ns": np.where(queued, length - np.where(short, length, zero), np.where(unknown, rest, zero)),
    }


def _launch_lookup(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The runtime calls' recorded correlation ids in order (stable), with their calls' starts: `_launch_time`'s
    table, made once, in spill files when the run is spilled."""
    ids, starts = (calls[c].to_numpy(np.int64) for c in ("correlation", "start_ns"))
    kept = positions_passing(len(ids), lambda at: ids[at] >= 0)
    ordered = gathered(ids, kept)
    if not in_order(ordered):  # calls are in start order: their ids mostly too
        kept = kept[np.argsort(ordered, kind="stable")]
        ordered = gathered(ids, kept)
    return ordered, gathered(starts, kept)


def _launch_time(correlation: np.ndarray, lookup: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Start of the runtime call with each correlation id (-1 when there is none), from `_launch_lookup`."""
    ids, starts = lookup
    if len(ids) == 0:
        return np.full(len(correlation), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, correlation), len(ids) - 1)
    return np.where((correlation >= 0) & (ids[at] == correlation), starts[at], -1)


def _sync_shadows(calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each synchronising call, from its start to the next launch after it returns: the time the
    device runs dry because the host waited for it (the call's end when nothing is launched later)."""
    kind, start = calls["kind"].array.codes, calls["start_ns"].to_numpy(np.int64)
    sync = positions_passing(len(kind), lambda at: kind[at] == CALL_KINDS.index("sync"))
    s, e = start[sync], calls["end_ns"].to_numpy(np.int64)[sync]
    launches = _sorted_where(start, lambda at: kind[at] == CALL_KINDS.index("launch"))
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
    idle = _idle_by_device(ex, _runtime_calls(ops, ex), data_wait)
    windows = None if steps is None else union(*(np.asarray(s, dtype=np.int64) for s in steps))
    figures = _device_figures(ex, windows)
    devices = ex["device"].array.categories
    rows = [_device_row(str(devices[code]), figures[code], idle.get(code)) for code in sorted(figures)]
    return pd.DataFrame(rows, columns=DEVICE_TIME_COLUMNS)


#: The unions of a device's executions the breakdown measures besides the busy one: the categories in each.
_SPANS = {"compute": ("compute",), "comm": ("comm",), "either": ("compute", "comm"), "memory": ("memcpy", "memset")}


class _DeviceFigures:
    """What the breakdown of one device reads of its executions, given a chunk of them at a time in start order:
    its window, the unions (busy, with its part inside the steps' windows, and _SPANS'), executions, streams."""

    def __init__(self, windows: Optional[tuple[np.ndarray, np.ndarray]]) -> None:
        self.busy, self.spans = RunningUnion(windows), {span: RunningUnion() for span in _SPANS}
        self.first, self.last, self.executions, self.streams = None, None, 0, set()

    def add(self, start: np.ndarray, end: np.ndarray, spans: dict[str, np.ndarray], streams: np.ndarray) -> None:
        """The next executions (`spans`: which are in each of _SPANS; `streams`: their stream codes)."""
        lo, hi = int(start.min()), int(end.max())
        self.first = lo if self.first is None else min(self.first, lo)
        self.last = hi if self.last is None else max(self.last, hi)
        self.executions += len(start)
        self.streams.update(int(s) for s in np.unique(streams) if s >= 0)
        self.busy.add(start, end)
        for span, mine in spans.items():
            if mine.any():
                self.spans[span].add(start[mine], end[mine])


def _device_figures(
    ex: pd.DataFrame, windows: Optional[tuple[np.ndarray, np.ndarray]], rows: int = GAP_CHUNK
) -> dict[int, _DeviceFigures]:
    """Each device's figures (by its code in ex), from its executions a chunk at a time: no copy of a device's
    executions, no object array over them."""
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    category, stream = ex["category"].array, ex["stream"].array
    labels = np.asarray(category.categories, dtype=object)
    member = {span: np.isin(labels, names) for span, names in _SPANS.items()}  # per category code
    figures: dict[int, _DeviceFigures] = {}
    for device, at in _lane_chunks(ex, False, rows):
        kinds = category.codes[at]
        spans = {span: mine[kinds] for span, mine in member.items()}
        figures.setdefault(device, _DeviceFigures(windows)).add(start[at], end[at], spans, stream.codes[at])
    return figures


def _device_row(device: str, figures: _DeviceFigures, idle: Optional[list[int]]) -> dict:
    """The breakdown of one device from its figures and its idle time per cause (ns, IDLE_CAUSES' order; None
    without gaps)."""
    window = figures.last - figures.first
    busy, inside = figures.busy.totals()
    compute_ns, comm_ns = figures.spans["compute"].totals()[0], figures.spans["comm"].totals()[0]
    overlap = compute_ns + comm_ns - figures.spans["either"].totals()[0]
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
        "memory_pct": pct(figures.spans["memory"].totals()[0]),
        "comm_compute_overlap_pct": 100.0 * overlap / comm_ns if comm_ns > 0 else None,
        "executions": figures.executions,
        "streams": len(figures.streams),
        # busy minus busy inside the steps; NaN without steps
        "outside_steps_ms": np.nan if figures.busy.windows is None else max(busy - inside, 0) * ms,
    }
    for cause, ns in zip(IDLE_CAUSES, idle or [0] * len(IDLE_CAUSES)):
        row[f"idle_{cause}_ms"] = float(ns) * ms
    return row


def busy_in_windows(ops: pd.DataFrame, q_start: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each window [q_start, q_end): how long any device executed something in it (the union of
    every device's executions: a rank normally drives one device), and whether the window overlaps
    the devices' recorded time at all (first execution start .. last execution end). The executions are read
    GAP_CHUNK at a time in start order, their union measured as it settles (`WindowCoverage`)."""
    ex = device_executions(ops)
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    if len(start) == 0:
        return np.zeros(len(q_start), dtype=np.int64), np.zeros(len(q_start), dtype=bool)
    busy = WindowCoverage(q_start, q_end)
    for at in start_ordered(start, GAP_CHUNK):
        busy.add(start[at], end[at])
    return busy.covered(), (q_end > start.min()) & (q_start < end.max())


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


def comm_in_windows(
    ops: pd.DataFrame, q_start: np.ndarray, q_end: np.ndarray, rows: Optional[int] = None
) -> tuple[np.ndarray, np.ndarray]:
    """For each window [q_start, q_end): how long communication kernels ran on the devices in it (the
    union of every device's `comm` executions), and how much of that time compute kernels ran too
    (|U(comm) n U(compute)|: the numerator of HTA's `get_comm_comp_overlap`, window by window). The executions
    are read `rows` (default GAP_CHUNK) at a time in start order, their unions measured as they settle."""
    ex = device_executions(ops)
    start, end, category = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy(), ex["category"].array
    labels = np.asarray(category.categories, dtype=object)
    # per category code, with code -1 (missing) last: in none
    member = {span: np.append(np.isin(labels, _SPANS[span]), False) for span in ("comm", "compute", "either")}
    coverage = {span: WindowCoverage(q_start, q_end) for span in member}
    for at in start_ordered(start, rows or GAP_CHUNK):
        kinds, s, e = category.codes[at], start[at], end[at]
        for span, mine in member.items():
            keep = mine[kinds]
            coverage[span].add(s[keep], e[keep])
    comm_ns = coverage["comm"].covered()
    overlap = comm_ns + coverage["compute"].covered() - coverage["either"].covered()
    return comm_ns, np.maximum(overlap, 0)

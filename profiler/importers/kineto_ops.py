"""The Kineto importer's op table: host ops and device ops in one table, in start order, with self time and step,
redispatch copies left out, built a window at a time so that its sorting and nesting stay a window's size (see
`op_table`, and docs/kineto.md for what becomes what)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.importers.kineto_events import (
    SOURCE,
    Clock,
    Coded,
    EventColumns,
    combine,
    dense_ids,
    release_columns,
    rows_where,
)
from profiler.kernels.intervals import assign_steps
from profiler.kernels.nesting import enclosing_parents, self_times
from profiler.memory import give_back_freed_memory
from profiler.model import COLLECTIVE_PREFIXES, OP_COLUMNS

#: Kineto categories imported as host ops, with their op category, in every schema in use: today's
#: lowercase names (torch >= 1.9), torch 1.8's capitalised ones (`Operator`, `Runtime`, `Python`,
#: as the TensorBoard plugin's samples have them) and ROCm's (Kineto writes HIP calls under
#: `cuda_runtime`; `hip_runtime` is accepted too). Python frames (`with_stack=True`, `nn.Module: Linear_0`
#: among them) get category "python": where the work was called from, not work (model.NOT_WORK_CATEGORIES).
#: Runtime / driver calls of any device API get
#: their own category: launch overhead and sync waits are not framework work (analysis/device_time.py
#: tells them apart).
HOST_OP_CATEGORIES = {
    "cpu_op": "host",
    "Operator": "host",
    "python_function": "python",
    "Python": "python",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "Runtime": "runtime",
    "hip_runtime": "runtime",
    "xpu_runtime": "runtime",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
}
#: Kineto categories imported as device ops, with their op category (NCCL / RCCL kernels become
#: "comm"). `gpu_user_annotation` ranges are the device-side projection of record_function
#: annotations: category "annotation", shown on the device lane, never counted as work.
DEVICE_OP_CATEGORIES = {
    "kernel": "compute",
    "Kernel": "compute",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "mtia_ccp_events": "compute",
    "cuda_sync": "sync",
    "gpu_user_annotation": "annotation",
}
#: Device ops that are executions (self time == duration); annotations may contain them.
DEVICE_ACTIVITIES = ("compute", "comm", "memcpy", "memset", "sync")
_NCCL_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_CAMEL_WORD = re.compile(r"(?<!^)(?=[A-Z])")
_MEMCPY_KIND = re.compile(r"Memcpy [A-Za-z]+")


def is_collective_name(name: Any) -> bool:
    """Whether an event name is a collective's range (nccl:all_reduce, ...): category "comm" in any Kineto category."""
    return isinstance(name, str) and name.startswith(COLLECTIVE_PREFIXES)


def redispatch_copies(
    thread: np.ndarray, framework: np.ndarray, name: np.ndarray, start: np.ndarray, end: np.ndarray, self_ns: np.ndarray
) -> np.ndarray:
    """Which ops are redispatch copies (torch tables drop them); their self time is added to the op they
    are a copy of, in `self_ns` (changed in place).

    A framework op whose only child on its thread has its own name (aten::div inside aten::div) is one
    operator dispatched twice (runtime calls are never copies: two back-to-back calls of whole-µs
    traces can share one interval); torch's tables keep the outer one and give it the inner one's self
    time. Doing the same keeps counts and totals equal to torch's own (the timeline loses nothing
    visible: the two intervals coincide up to the dispatch cost).

    Per op: `thread` a code of its thread's name, -1 for device ops; `framework` whether its category is
    "host"; `name` a code of its name; start and end ns. Any row order (of two identical intervals the
    first listed is the outer one).
    """
    kept = np.ones(len(thread), dtype=bool)
    while True:
        host = np.flatnonzero((thread >= 0) & kept)
        framework_host = framework[host]
        parent = enclosing_parents(thread[host], start[host], end[host])
        child = np.flatnonzero(parent >= 0)
        names = name[host]
        only_child = np.bincount(parent[child], minlength=len(host))[parent[child]] == 1
        copy = np.zeros(len(host), dtype=bool)
        copy[child] = (
            only_child & (names[parent[child]] == names[child]) & framework_host[child] & framework_host[parent[child]]
        )
        copy[child] &= ~copy[parent[child]]  # chains collapse one level per round
        if not copy.any():
            return ~kept
        np.add.at(self_ns, host[parent[copy]], self_ns[host[copy]])
        kept[host[copy]] = False


def op_table(
    cols: EventColumns,
    host: np.ndarray,
    device: np.ndarray,
    thread_of: np.ndarray,
    threads: pd.DataFrame,
    steps: pd.DataFrame,
    clock: Clock,
) -> pd.DataFrame:
    """The op table (model.OP_COLUMNS) of the host ops and device ops at rows `host` and `device` of the event
    columns: in start order, with self time and step; redispatch copies left out (`redispatch_copies`).

    Built a window of whole steps at a time (`_op_windows`: at most OP_BUILD_ROWS ops, cut where no operator or
    device range that contains others is open; Python frames and other host ranges open across a cut are built in
    each window they overlap, `_Spanners`), so its sorting and nesting copies stay a window's size: the ops' event
    data is split by window a column at a time (`_split_by_window`), each window's goes once its table is made, and
    the windows' columns are joined a column at a time. The event columns are spent: each goes once used
    (`release_columns`)."""
    ops = _op_events(cols, host, device, thread_of, threads, clock)
    release_columns(cols, "ph", "cat", "pid", "tid", "ts_us", "dur_us", "other_args")
    release_columns(cols.op_args, "device", "stream")
    positions, spanners = _op_windows(ops, steps)
    placed = [spanners.in_window(w, p) for w, p in enumerate(positions)]
    windows = _split_by_window(ops, cols, positions)
    del positions
    tables, built, children_ns = [], [], np.zeros(len(spanners.position), dtype=np.int64)
    for here in placed:  # a window's event data goes once its table is made, its columns to the spill (if on) at once
        table, spanned = _window_ops(windows.pop(0), threads["name"].tolist(), steps, here)
        children_ns[here.spanner] += spanned.children_ns
        tables.append(table)
        built.append(spanned)
        give_back_freed_memory()
    self_ns = spanners.self_ns(children_ns)  # now that every window counted the spanners' children
    for table, spanned in zip(tables, built):
        table["self_ns"][spanned.rows] = self_ns[spanned.kept]
    return pd.DataFrame(_joined_windows(tables), columns=list(OP_COLUMNS), copy=False)  # no copy into 2-d blocks


def _op_events(
    cols: EventColumns, host: np.ndarray, dev: np.ndarray, thread_of: np.ndarray, threads: pd.DataFrame, clock: Clock
) -> _OpEvents:
    """The ops' event data (`_OpEvents`), made a chunk of ops at a time into spilled arrays (spill.chunked)."""
    rows = spill.concatenated([host, dev])
    name_code = pd.factorize(threads["name"])[0]  # a code per thread name
    return _OpEvents(
        host_count=len(host),
        rows=rows,
        start=spill.chunked(len(rows), np.int64, lambda at: clock.ns(cols.ts_us[rows[at]]), along=rows),
        dur=spill.chunked(len(rows), np.int64, lambda at: clock.dur_ns(cols.dur_us[rows[at]]), along=rows),
        device=_DeviceOps.of(cols, dev),
        host_category=Coded.chunked(
            len(host), lambda at: combine(cols.cat[host[at]], cols.name[host[at]]), along=host
        ).mapped(_host_category),
        thread_of=spill.chunked(len(host), np.int64, lambda at: thread_of[host[at]], along=host),
        thread_code=spill.chunked(len(host), name_code.dtype, lambda at: name_code[thread_of[host[at]]], along=host),
    )


#: Ops built at a time: a window of whole steps (more when one step holds more).
OP_BUILD_ROWS = 1 << 20


@dataclass(frozen=True)
class _OpEvents:
    """The ops' event data, host ops first then device ops (an op's position): times, lanes, categories and
    their columns from the trace. `_split_by_window` cuts it by window (the trace's columns added)."""

    host_count: int
    rows: Optional[np.ndarray]  # per position: row in the event columns (until split)
    start: np.ndarray  # ns, per position
    dur: np.ndarray  # ns, per position
    device: _DeviceOps  # device ops
    host_category: Coded  # host ops
    thread_of: np.ndarray  # host ops: row of the threads table
    thread_code: np.ndarray  # host ops: a code of the thread's name
    name: Optional[Coded] = None  # per position; this and the fields below: from the split on
    correlation: Optional[np.ndarray] = None  # per position
    shapes: Optional[Coded] = None  # host ops
    dtypes: Optional[Coded] = None  # host ops
    blocks_per_sm: Optional[np.ndarray] = None  # device ops
    occupancy_pct: Optional[np.ndarray] = None  # device ops

    def containers(self, at: slice) -> np.ndarray:
        """Whether each op at positions `at` is one whose self time excludes what it encloses (a host op, a device
        range that is not an activity). Read for those ops alone (no flag per device op of the trace)."""
        position = np.arange(at.start, at.stop)
        device = position >= self.host_count
        container = ~device
        container[device] = ~self.device[position[device] - self.host_count].activity()
        return container

    def uncuttable(self, at: slice) -> np.ndarray:
        """Whether each op at positions `at` is a container a window edge must not cut: a framework operator (its
        redispatch copy is found among its children) or a device range. Other host ranges (Python frames,
        annotations, runtime calls) may be cut: they are built in every window they overlap (`_Spanners`)."""
        uncuttable = self.containers(at)
        host = slice(at.start, min(at.stop, self.host_count))
        if host.stop > host.start:
            uncuttable[: host.stop - host.start] = self.host_category[host].map(lambda c: c == "host", dtype=bool)
        return uncuttable


def _op_windows(ops: _OpEvents, steps: pd.DataFrame) -> tuple[list[np.ndarray], _Spanners]:
    """The positions of each window's ops (ascending), and the host ranges built in several windows: windows of whole
    steps holding at most OP_BUILD_ROWS ops where a step edge allows, cut only at step starts (`_window_edges`) that
    no operator or device range spans (`_OpEvents.uncuttable`), so each operator's nesting, self time and redispatch
    copy lie in its window; a range open across a cut (`_Spanners`) is in each window it overlaps. What decides the
    cuts is found a chunk of ops at a time (`_edge_figures`); the windows are spilled."""
    n = len(ops.start)
    if n <= OP_BUILD_ROWS:
        return [np.arange(n)], _Spanners.found(ops, np.zeros(0, dtype=np.int64))
    edges = _window_edges(ops, steps)
    spanned, zero_start, ops_before = _edge_figures(ops, edges)
    cuttable = ~spanned & ~zero_start  # an op ending at the edge holds any op of no length starting there
    cuts: list[int] = []
    last, previous = 0, None  # ops before the last cut; the cuttable edge before this one, when it may be cut
    for edge, before_edge in [*zip(edges[cuttable].tolist(), ops_before[cuttable].tolist()), (None, n)]:
        if before_edge - last > OP_BUILD_ROWS and previous is not None:
            cuts.append(previous[0])
            last = previous[1]
        previous = (edge, before_edge) if before_edge > last else None
    cut_at = np.asarray(cuts, dtype=np.int64)
    window = spill.chunked(n, np.int32, lambda at: np.searchsorted(cut_at, ops.start[at], side="right"))
    spanners = _Spanners.found(ops, cut_at)
    return [spanners.visiting(w, rows_where(window, w)) for w in range(len(cuts) + 1)], spanners


@dataclass(frozen=True)
class _Spanners:
    """The host ranges open across a window cut (Python frames, annotations: never operators, `_OpEvents.uncuttable`):
    each is built in every window it overlaps, so that its children there find it as their parent, and kept in the
    table of the first (its start's); its self time is its duration less its direct children's in all of them."""

    position: np.ndarray  # the op's position, ascending
    first: np.ndarray  # the window of its start
    last: np.ndarray  # the window of its end
    dur: np.ndarray  # ns

    @classmethod
    def found(cls, ops: _OpEvents, cut_at: np.ndarray) -> _Spanners:
        """The containers that start before a cut and end after it (a few per cut: the frames open there), found a
        chunk of ops at a time."""
        found = [(np.zeros(0, dtype=np.int64),) * 4]
        for at in spill.chunks(ops.host_count if len(cut_at) else 0):
            start, dur = ops.start[at], ops.dur[at]
            first = np.searchsorted(cut_at, start, side="right")  # the window of its start
            last = np.searchsorted(cut_at, start + dur, side="left")  # the window of its end
            spanning = np.flatnonzero(first < last)  # host ops: containers all
            found.append((at.start + spanning, first[spanning], last[spanning], dur[spanning]))
            spill.drop_resident()
        return cls(*(np.concatenate(column).astype(np.int64) for column in zip(*found)))

    def visiting(self, window: int, positions: np.ndarray) -> np.ndarray:
        """A window's op positions (ascending) with those of the spanners starting in an earlier one that overlap it."""
        visitors = self.position[(self.first < window) & (self.last >= window)]
        return (
            spill.spilled(np.insert(positions, np.searchsorted(positions, visitors), visitors))
            if len(visitors)
            else positions
        )

    def in_window(self, window: int, positions: np.ndarray) -> _WindowSpanners:
        """The spanners in a window whose op positions are `positions` (`visiting`'s)."""
        here = np.flatnonzero((self.first <= window) & (self.last >= window))
        return _WindowSpanners(here, np.searchsorted(positions, self.position[here]), self.first[here] == window)

    def self_ns(self, children_ns: np.ndarray) -> np.ndarray:
        """Their self time, given their direct children's time summed over the windows (as `self_times` makes it)."""
        return np.maximum(self.dur - children_ns, 0)


@dataclass(frozen=True)
class _WindowSpanners:
    """The spanners built in one window: which (rows of `_Spanners`), where among its host ops, and whether it is
    the one that keeps them."""

    spanner: np.ndarray
    local: np.ndarray  # ascending
    kept: np.ndarray  # bool

    def children_ns(self, parent: np.ndarray, dur: np.ndarray) -> np.ndarray:
        """Per spanner here, its direct children's time in this window (`parent` of the window's host ops, from
        `enclosing_parents`); a spanner child is counted in the window that keeps it, once."""
        if not len(self.local):
            return np.zeros(0, dtype=np.int64)
        slot = np.full(len(parent), -1, dtype=np.int64)
        slot[self.local] = np.arange(len(self.local))
        counted = np.ones(len(parent), dtype=bool)
        counted[self.local[~self.kept]] = False  # a visitor: a child where it is kept
        child = np.flatnonzero((parent >= 0) & counted)
        owner = slot[parent[child]]
        children_ns = np.zeros(len(self.local), dtype=np.int64)
        np.add.at(children_ns, owner[owner >= 0], dur[child[owner >= 0]])
        return children_ns

    def visitors(self) -> np.ndarray:
        """Where among the window's host ops the spanners kept by an earlier window are (left out of its table)."""
        return self.local[~self.kept]

    def kept_rows(self, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the window's table (its ops by `order`) that hold the spanners it keeps, and which each is."""
        rows = np.flatnonzero(np.isin(order, self.local[self.kept]))
        return rows, self.spanner[self.kept][np.searchsorted(self.local[self.kept], order[rows])]


class _SpannedInWindow(NamedTuple):
    """What a window's table needs from the others for its spanners: their children's time here, and where it
    keeps them (rows of its table, rows of `_Spanners`)."""

    children_ns: np.ndarray
    rows: np.ndarray
    kept: np.ndarray


#: In a trace without steps, the candidate window edges: about this many op starts per window's worth of ops.
EDGES_PER_WINDOW = 16


def _window_edges(ops: _OpEvents, steps: pd.DataFrame) -> np.ndarray:
    """Where windows may be cut: the steps' starts, or in a trace without step markers op starts sampled across it
    (about EDGES_PER_WINDOW per OP_BUILD_ROWS ops, in time order), so that it too is built a window at a time where
    no operator or device range encloses an edge."""
    if not steps.empty:
        return steps["start_ns"].to_numpy(np.int64)
    every = max(1, OP_BUILD_ROWS // EDGES_PER_WINDOW)
    return np.unique(spill.sample(ops.start, every))


def _edge_figures(ops: _OpEvents, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step edge: whether an uncuttable op spans it (starts before it and ends after it), whether an op of no
    length starts at it, and how many ops start before it; summed a chunk of ops at a time."""
    order = np.argsort(edges, kind="stable")
    sorted_edges = edges[order]
    spans = np.zeros(len(edges) + 1, dtype=np.int64)  # +1 where a container's spanned edges begin, -1 after
    zero_start = np.zeros(len(edges), dtype=bool)
    starting = np.zeros(len(edges) + 1, dtype=np.int64)  # ops by how many edges are at or before their start
    for at in spill.chunks(len(ops.start)):
        start, dur = ops.start[at], ops.dur[at]
        container = ops.uncuttable(at)
        first = np.searchsorted(sorted_edges, start[container], side="right")  # the first edge after its start
        after_last = np.searchsorted(sorted_edges, (start + dur)[container], side="left")  # edges before its end
        spanning = first < after_last
        np.add.at(spans, first[spanning], 1)
        np.add.at(spans, after_last[spanning], -1)
        zero_start |= np.isin(sorted_edges, start[dur == 0])
        starting += np.bincount(np.searchsorted(sorted_edges, start, side="right"), minlength=len(edges) + 1)
        spill.drop_resident()
    figures = np.cumsum(spans)[:-1] > 0, zero_start, np.cumsum(starting)[:-1]
    return tuple(_unsorted(values, order) for values in figures)  # type: ignore[return-value]


def _unsorted(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Values found for sorted items, back in the items' own order (`order` sorted them)."""
    out = np.empty_like(values)
    out[order] = values
    return out


def _split_by_window(ops: _OpEvents, cols: EventColumns, windows: list[np.ndarray]) -> list[_OpEvents]:
    """Each window's event data, with the trace's columns of its ops (name, correlation, shapes, dtypes, kernel
    args). Spends `ops` and those columns a field at a time, each dropped once split, so the data is held about
    once; one window takes views of them all."""
    host_count = ops.host_count
    if len(windows) == 1:
        cuts, index = [host_count], {"position": [slice(None)], "host": [slice(None, host_count)]}
        index["device"] = [slice(None)]  # the device fields hold the device ops alone
    else:
        cuts = [int(np.searchsorted(positions, host_count)) for positions in windows]
        index = {"position": windows, "host": [p[:k] for p, k in zip(windows, cuts)]}
        index["device"] = [spill.spilled(p[k:] - host_count) for p, k in zip(windows, cuts)]
    split = {}
    for name, kind in _OP_EVENT_FIELDS:
        split[name] = [_spilled_piece(getattr(ops, name)[i]) for i in index[kind]]
        release_columns(ops, name)
    rows = {"position": [_spilled_piece(ops.rows[i]) for i in index["position"]]}  # the ops' rows in the events
    release_columns(ops, "rows")
    rows["host"] = [r[:k] for r, k in zip(rows["position"], cuts)]
    rows["device"] = [r[k:] for r, k in zip(rows["position"], cuts)]
    split["name"] = [_spilled_piece(cols.name[r]) for r in rows["position"]]
    release_columns(cols, "name")
    for name, kind in _OP_ARG_FIELDS:
        split[name] = [_spilled_piece(getattr(cols.op_args, name)[r]) for r in rows[kind]]
        release_columns(cols.op_args, name)
    release_columns(cols, "op_args")
    return [
        _OpEvents(host_count=k, rows=None, **{name: pieces[w] for name, pieces in split.items()})
        for w, k in enumerate(cuts)
    ]


def _spilled_piece(piece: Any) -> Any:
    """A window's piece of a field or of its op table (an array, a coded column, the device ops' arrays), its
    arrays spilled: the windows wait their turn, and their tables their join, in files, not in memory."""
    if isinstance(piece, np.ndarray):
        return spill.spilled(piece)
    if isinstance(piece, Coded):
        return piece.spilled()
    return _DeviceOps(spill.spilled(piece.device_id), spill.spilled(piece.stream_id), _spilled_piece(piece.kinds))


#: The fields of `_OpEvents` made before the split, and the fields of the event columns' op args it takes,
#: with the ops they are of (all, the host ops, the device ops).
_OP_EVENT_FIELDS = (
    ("start", "position"),
    ("dur", "position"),
    ("device", "device"),
    ("host_category", "host"),
    ("thread_of", "host"),
    ("thread_code", "host"),
)
_OP_ARG_FIELDS = (
    ("correlation", "position"),
    ("shapes", "host"),
    ("dtypes", "host"),
    ("blocks_per_sm", "device"),
    ("occupancy_pct", "device"),
)


def _window_ops(
    ops: _OpEvents, thread_names: list, steps: pd.DataFrame, spanners: _WindowSpanners
) -> tuple[dict[str, Any], _SpannedInWindow]:
    """The op table's columns of one window's ops, in start order, redispatch copies and visiting spanners left out:
    text as `Coded` columns (made categoricals when the windows are joined), each column spilled as soon as it is
    made, so the windows' tables wait for their join in files, not in memory. The self time of the spanners it keeps
    is set once every window has counted their children (`_ops`)."""
    n_host, n_dev = ops.host_count, len(ops.start) - ops.host_count
    host_start, host_dur = ops.start[:n_host], ops.dur[:n_host]
    host_end = host_start + host_dur
    parent = enclosing_parents(ops.thread_of, host_start, host_end)
    children_ns = spanners.children_ns(parent, host_dur)
    self_ns = np.concatenate([self_times(parent, host_dur), ops.device.self_ns(ops.start[n_host:], ops.dur[n_host:])])
    del parent
    left_out = redispatch_copies(
        ops.thread_code,
        ops.host_category.map(lambda c: c == "host", dtype=bool),
        ops.name.codes[:n_host],
        host_start,
        host_end,
        self_ns[:n_host],  # a view: the copies' self time goes to their outer ops in self_ns
    )
    left_out[spanners.visitors()] = True
    del host_start, host_dur, host_end
    order = np.argsort(ops.start, kind="stable")
    order = order[~np.concatenate([left_out, np.zeros(n_dev, dtype=bool)])[order]]
    device = ops.device
    made = {
        "device": lambda: Coded.concat(Coded.constant("cpu", n_host), device.device()),
        "stream": lambda: Coded.concat(Coded(ops.thread_of, thread_names), device.stream()),
        "name": lambda: ops.name,
        "op_type": lambda: Coded.concat(ops.name[:n_host], device.op_type()),
        "category": lambda: Coded.concat(ops.host_category, device.category()),
        "shapes": lambda: _host_texts(ops.shapes, n_dev),
        "dtypes": lambda: _host_texts(ops.dtypes, n_dev),
        "correlation": lambda: ops.correlation,
        "source": lambda: Coded.constant(SOURCE, n_host + n_dev),
        "blocks_per_sm": lambda: _device_numbers(ops.blocks_per_sm, n_host),
        "occupancy_pct": lambda: _device_numbers(ops.occupancy_pct, n_host),
    }
    table = {key: _spilled_piece(make()[order]) for key, make in made.items()}
    start = spill.gathered(ops.start, order)
    step = assign_steps(start, steps)
    table.update(
        start_ns=start, dur_ns=spill.gathered(ops.dur, order), self_ns=spill.gathered(self_ns, order), step=step
    )
    return table, _SpannedInWindow(children_ns, *spanners.kept_rows(order))


def _joined_windows(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The windows' op columns one after the other, a column at a time, each column's pieces freed once
    joined; coded text becomes a categorical (`_joined_categorical`)."""
    joined = {}
    for name in list(windows[0]):
        pieces = [window.pop(name) for window in windows]
        if isinstance(pieces[0], Coded):
            joined[name] = _joined_categorical(pieces)
        else:
            joined[name] = pieces[0] if len(pieces) == 1 else spill.concatenated(pieces)
        del pieces
        spill.drop_resident()
    return joined


def _joined_categorical(pieces: list[Coded]) -> pd.Categorical:
    """The coded pieces one after the other as a categorical of the values that occur in them, in first-seen order
    (one piece's categories are the index of its values; several pieces' are joined as pandas' union_categoricals
    joins them), its codes written into a spilled array a piece at a time from the pieces' spilled codes."""
    occurring = [pd.unique(piece.codes) for piece in pieces]  # each piece's codes that occur, in first-seen order
    own = [pd.CategoricalDtype([p.values[u] for u in used.tolist()]).categories for p, used in zip(pieces, occurring)]
    categories = (
        own[0] if len(own) == 1 else pd.Index(pd.unique(np.concatenate([np.asarray(c, dtype=object) for c in own])))
    )
    dtype = pd.Categorical.from_codes([], categories=categories).codes.dtype  # pandas' choice for that many
    codes = spill.empty(sum(len(p) for p in pieces), dtype)
    at = 0
    for piece, used, values in zip(pieces, occurring, own):
        recode = np.zeros(len(piece.values), dtype=dtype)  # a piece's code -> the joined one's (for codes that occur)
        recode[used] = categories.get_indexer(values)
        codes[at : at + len(piece)] = recode[piece.codes]
        at += len(piece)
        spill.drop_resident()
    return pd.Categorical.from_codes(codes, categories=categories)


def _host_texts(texts: Coded, device_ops: int) -> Coded:
    """A text column of the host ops (input shapes, dtypes), "" for the device ops after them: coded (the op
    table's categorical: a code per op, spilled, where an object per op stays in memory)."""
    return Coded.concat(texts, Coded.constant("", device_ops))


def _host_category(cat_and_name: tuple[Any, Any]) -> Optional[str]:
    """A host op's category: `comm` for a collective range, else its Kineto category's."""
    cat, name = cat_and_name
    return "comm" if is_collective_name(name) else HOST_OP_CATEGORIES.get(cat)


@dataclass(frozen=True)
class _DeviceOps:
    """What the device ops' columns are made of: "cuda:<device>", the stream id as text, category and op
    type by `_device_category_type`; their lane is the (device, stream) pair."""

    device_id: np.ndarray
    stream_id: np.ndarray
    kinds: Coded  # (cat, name) pairs

    @classmethod
    def of(cls, cols: EventColumns, rows: np.ndarray) -> _DeviceOps:
        """Those of the device ops at `rows` of the event columns, a chunk of rows at a time (spill.chunked)."""
        args, n = cols.op_args, len(rows)
        return cls(
            spill.chunked(n, np.int64, lambda at: _arg_or_lane(args.device[rows[at]], cols.pid[rows[at]]), along=rows),
            spill.chunked(n, np.int64, lambda at: _arg_or_lane(args.stream[rows[at]], cols.tid[rows[at]]), along=rows),
            Coded.chunked(n, lambda at: combine(cols.cat[rows[at]], cols.name[rows[at]]), along=rows),
        )

    def device(self) -> Coded:
        return Coded.of(self.device_id).mapped(lambda d: f"cuda:{d}")

    def stream(self) -> Coded:
        return Coded.of(self.stream_id).mapped(str)

    def op_type(self) -> Coded:
        return self.kinds.mapped(lambda pair: _device_category_type(*pair)[1])

    def category(self) -> Coded:
        return self.kinds.mapped(lambda pair: _device_category_type(*pair)[0])

    def __getitem__(self, rows: np.ndarray) -> _DeviceOps:
        """Those of some device ops."""
        return _DeviceOps(self.device_id[rows], self.stream_id[rows], self.kinds[rows])

    def activity(self) -> np.ndarray:
        """Whether each is an activity (a kernel, a copy: DEVICE_ACTIVITIES), not a range enclosing others."""
        return self.kinds.map(lambda pair: _device_category_type(*pair)[0] in DEVICE_ACTIVITIES, dtype=bool)

    def self_ns(self, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
        """Activities' (kernels, copies) self time is their duration; other device ranges' excludes what
        they enclose on their stream."""
        lane = dense_ids(self.device_id, self.stream_id)[0]
        return np.where(self.activity(), dur, self_times(enclosing_parents(lane, start, start + dur), dur))


def _arg_or_lane(value: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Integer args (device / stream) of device events where they have one, else their pid / tid."""
    return np.where(value >= 0, value, lane.astype(np.int64))


def _device_category_type(cat: str, name: str) -> tuple[str, str]:
    """(category, op_type) of one device event.

    NCCL kernels ("ncclKernel_AllReduce_RING_LL_Sum_float(...)", "ncclDevKernel_SendRecv(...)")
    are "comm" with op type "nccl:<collective in snake case>", like torch's own
    record_function names (nccl:all_reduce); memcpy op type is its direction ("Memcpy HtoD");
    memset is "Memset"; other kernels keep their full name as op type.
    """
    category = DEVICE_OP_CATEGORIES[cat]
    if category == "compute" and (name.startswith("nccl") or "ncclKernel" in name or "ncclDevKernel" in name):
        collective = _NCCL_COLLECTIVE.search(name)
        if collective is None:
            return "comm", name
        return "comm", "nccl:" + _CAMEL_WORD.sub("_", collective.group(1)).lower()
    if category == "memcpy":
        kind = _MEMCPY_KIND.match(name)
        return category, kind.group(0) if kind else name
    if category == "memset":
        return category, "Memset"
    return category, name


def _device_numbers(values: np.ndarray, host_count: int) -> np.ndarray:
    """A numeric kernel arg (float32) of the host ops then the device ops (`values`): NaN for host ops and
    where the arg is absent or not a number."""
    return np.concatenate([np.full(host_count, np.nan, dtype=np.float32), values])

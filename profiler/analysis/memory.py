"""The memory view (the TensorBoard plugin's Memory view, docs/tensorboard.md), from the allocator's
allocations and frees a trace recorded with `profile_memory=True` (the run's allocations table).

An allocation or free belongs to the innermost framework op running on its thread at that instant
(an op's time taken as [start, end), as the plugin does); one made directly in a module or outside
every op belongs to none. Pure: the run's tables in, tables out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.launches import framework_ops, with_descendants
from profiler.analysis.modules import module_rows
from profiler.formats.columns import MEMORY_COLUMNS, MEMORY_EVENT_COLUMNS, OP_MEMORY_COLUMNS
from profiler.kernels.grouping import code_sums, codes_and_labels, occurring_sorted
from profiler.kernels.intervals import in_windows
from profiler.kernels.nesting import (
    ascending,
    bucketed_lexsort,
    by_depth,
    enclosing_parents_of_two,
    positions_passing,
)


def memory_curve(allocations: pd.DataFrame) -> pd.DataFrame:
    """Allocated and reserved memory of each device right after each allocation or free (MEMORY_COLUMNS): the
    allocations' own number columns (no copy), the times made a chunk at a time (spilled when big), the device
    one shared str per distinct device (objects: pandas 3 makes a str column's text anew per row)."""
    return pd.DataFrame(
        {
            "device": pd.Series(_texts(allocations["device"]), dtype=object, copy=False),
            "time_ms": milliseconds(allocations["time_ns"].to_numpy(np.int64)),
            "allocated_bytes": allocations["allocated_bytes"].to_numpy(np.float64),
            "reserved_bytes": allocations["reserved_bytes"].to_numpy(np.float64),
        },
        columns=MEMORY_COLUMNS,
        copy=False,
    )


def milliseconds(ns: np.ndarray) -> np.ndarray:
    """ns / 1e6 (float64), a chunk at a time into a spill file when big: a big table's times in ms."""
    return spill.chunked(len(ns), np.float64, lambda at: ns[at] / 1e6)


def step_peaks(curve: pd.DataFrame, start_ms: np.ndarray, end_ms: np.ndarray) -> pd.DataFrame:
    """The highest allocated memory of each device in each step [start, end): device, step index, peak
    (steps in which a device allocated or freed nothing are left out)."""
    rows = []
    for device, points in curve.groupby("device", sort=True):
        time = points["time_ms"].to_numpy()
        allocated = points["allocated_bytes"].to_numpy()
        first, last = np.searchsorted(time, start_ms, "left"), np.searchsorted(time, end_ms, "left")
        for index in np.flatnonzero(last > first):
            rows.append((device, int(index), float(np.nanmax(allocated[first[index] : last[index]]))))
    return pd.DataFrame(rows, columns=["device", "step_index", "peak_bytes"])


def peak_memory(curve: pd.DataFrame, start_ms: np.ndarray, end_ms: np.ndarray) -> pd.DataFrame:
    """Per device, the highest allocated and reserved memory inside the steps [start, end) (sorted, not
    overlapping): device, peak_allocated_bytes, peak_reserved_bytes, peak_time_ms (when the allocated peak
    was first reached). Devices with no allocation or free inside a step are left out. Read a piece of rows at a
    time (`spill.pieces`: ~50 bytes of temporaries a row), each device's peaks carried from piece to piece."""
    device_code, devices = codes_and_labels(curve["device"])
    time, allocated, reserved = (curve[c].to_numpy() for c in ("time_ms", "allocated_bytes", "reserved_bytes"))
    peaks: dict[int, tuple[float, float, float]] = {}  # device code -> (peak allocated, its time, peak reserved)
    for at in spill.pieces(len(curve)):
        rows = at.start + np.flatnonzero(in_windows(time[at], start_ms, end_ms))
        codes = device_code[rows]
        for code in np.unique(codes[codes >= 0]).tolist():
            mine = rows[codes == code]
            peaks[code] = _raised(peaks.get(code, _NO_PEAKS), allocated[mine], time[mine], reserved[mine])
    rows = [(devices[code], *_peak_row(peaks[code])) for code in sorted(peaks, key=lambda code: devices[code])]
    return pd.DataFrame(rows, columns=["device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_time_ms"])


#: A device's running peaks (allocated, its time, reserved) before any of its rows.
_NO_PEAKS = (np.nan, np.nan, np.nan)


def _raised(
    peak: tuple[float, float, float], allocated: np.ndarray, time: np.ndarray, reserved: np.ndarray
) -> tuple[float, float, float]:
    """A device's running peaks (allocated, its time, reserved) raised by its rows of a later piece: an allocated
    value only above the peak (a tie keeps the first), NaN values left out."""
    top_allocated, top_time, top_reserved = peak
    if not np.isnan(allocated).all():
        top = int(np.nanargmax(allocated))
        if not allocated[top] <= top_allocated:  # above it, or no peak yet (NaN)
            top_allocated, top_time = allocated[top], time[top]
    return top_allocated, top_time, np.fmax(top_reserved, np.fmax.reduce(reserved))


def _peak_row(peak: tuple[float, float, float]) -> tuple[float, float, float]:
    """A device's peak allocated, peak reserved and the time of the allocated peak."""
    if np.isnan(peak[0]):
        raise ValueError("All-NaN slice encountered")  # np.nanargmax's error over the device's rows, as before
    return float(peak[0]), float(peak[2]), float(peak[1])


def allocating_ops(
    ops: pd.DataFrame, allocations: pd.DataFrame, threads: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """(owner, parent): per allocation the ops-table row of the framework op it belongs to (-1: none),
    and per op row its innermost enclosing framework op (-1: a root or not a framework op). The ops' numbers are
    read a chunk at a time into spilled arrays; lanes are numbered per distinct stream or thread name, not per row."""
    framework = framework_ops(ops)
    modules = module_rows(ops)
    nodes = positions_passing(len(ops), lambda at: framework[at] | modules[at])
    node_lane, thread_lane = _lanes(ops["stream"], nodes, allocations["tid"].to_numpy(np.int64), threads)
    op_start, op_dur = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    when = allocations["time_ns"].to_numpy(np.int64)
    # an allocation at t is the interval [t, t + 1): an op ending at t no longer holds it
    parent = enclosing_parents_of_two(
        spill.concatenated([node_lane, thread_lane]),
        spill.concatenated([spill.gathered(op_start, nodes), when]),
        spill.concatenated(
            [
                spill.chunked(len(nodes), np.int64, lambda at: op_start[nodes[at]] + op_dur[nodes[at]], along=nodes),
                spill.chunked(len(when), np.int64, lambda at: when[at] + 1),
            ]
        ),
        len(nodes),
    )
    holder = _past_allocations(parent, len(nodes))[len(nodes) :]
    owner = spill.chunked(len(holder), np.int64, lambda at: _framework_rows(holder[at], nodes, framework))
    op_parent = spill.filled(len(ops), np.int64, -1)
    for at in spill.chunks(len(nodes)):
        node_parent = parent[at]
        op_parent[nodes[at]] = np.where(node_parent >= 0, nodes[np.maximum(node_parent, 0)], -1)
    return owner, op_parent


def _past_allocations(parent: np.ndarray, n_nodes: int) -> np.ndarray:
    """`parent` (of the nodes, then the allocations: positions in that order) with each link to an allocation led on
    to that allocation's own parent, in place: an allocation [t, t + 1) holds no op or other allocation, yet nests an
    allocation at the same time on its thread listed after it, or an op of no duration starting then. Pointer
    jumping (each pass doubles the links skipped), a chunk at a time; one pass finds nothing in most traces."""
    while True:
        rows = positions_passing(len(parent), lambda at: parent[at] >= n_nodes)
        if not len(rows):
            return parent
        parent[rows] = parent[parent[rows]]


def _framework_rows(holder: np.ndarray, nodes: np.ndarray, framework: np.ndarray) -> np.ndarray:
    """The ops-table row of each holder (a position in `nodes`, -1: none) when it is a framework op, else -1 (an
    allocation directly in a module belongs to no op)."""
    out = np.full(len(holder), -1, dtype=np.int64)
    held = np.flatnonzero(holder >= 0)
    out[held] = np.where(framework[nodes[holder[held]]], nodes[holder[held]], -1)
    return out


def _lanes(
    stream: pd.Series, nodes: np.ndarray, tid: np.ndarray, threads: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """(lane of each of the `nodes` op rows, lane per allocation): one number per distinct name, an op's its
    stream's, an allocation's its thread's name ("tid N" when unnamed); numbered per name, not per row, the threads
    found and the lanes made a chunk at a time (np.unique of every allocation's thread sorted a copy of the column)."""
    thread_name = dict(zip(threads["tid"].tolist(), threads["name"].astype(str).tolist()))
    lane_of: dict[str, int] = {}
    stream_code, streams = codes_and_labels(stream)
    stream_lanes = np.array([lane_of.setdefault(str(s), len(lane_of)) for s in streams], dtype=np.int64)
    tids = _distinct(tid)
    names = [thread_name.get(t, f"tid {t}") for t in tids.tolist()]
    thread_lanes = np.array([lane_of.setdefault(name, len(lane_of)) for name in names], dtype=np.int64)
    by_node = spill.chunked(len(nodes), np.int64, lambda at: stream_lanes[stream_code[nodes[at]]], along=nodes)
    return by_node, spill.chunked(len(tid), np.int64, lambda at: thread_lanes[np.searchsorted(tids, tid[at])])


def memory_events(ops: pd.DataFrame, allocations: pd.DataFrame, owner: np.ndarray) -> pd.DataFrame:
    """Each block's life (MEMORY_EVENT_COLUMNS): an allocation paired with the next free of its address
    on its device. alloc_ms is empty for a block allocated before the trace, free_ms for one still held
    at its end; lifetime_ms when both are known. Rows in (alloc_ms, free_ms) order, empty first, ties by device,
    address and time: the blocks allocated before the trace by when they were freed, then the allocations.

    Made a piece of allocations at a time (`spill.pieces`) into spilled columns, device and op as categoricals
    (their codes spilled): in memory, the blocks still held at a piece's end (`_partners`), never a sort or a
    text object per allocation."""
    if len(allocations) == 0:
        return pd.DataFrame(columns=MEMORY_EVENT_COLUMNS)
    device_code, devices = _text_codes(allocations["device"])
    events = _time_ordered(device_code, allocations, owner)
    partner = _partners(events)
    texts = _Texts(devices, *_text_codes(ops["name"]))
    n = sum(
        int(np.count_nonzero(_freed_only(events, partner, at) | (events.size[at] > 0)))
        for at in spill.dropping(spill.chunks(len(events.when)))
    )
    columns = {column: spill.empty(n, dtype) for column, dtype in _EVENT_TYPES.items()}
    done = 0
    for rows in _block_rows(events, partner):
        for column, values in _block_columns(events, partner, texts, rows).items():
            columns[column][done : done + len(rows)] = values
        done += len(rows)
    columns["device"] = _sorted_categorical(columns["device"], devices)
    columns["op"] = _sorted_categorical(columns["op"], np.append(texts.names, ""))
    return pd.DataFrame(columns, columns=MEMORY_EVENT_COLUMNS, copy=False)


#: The memory events' columns as they are made: device and op as positions in their texts (the op's "" last).
_EVENT_TYPES = {
    "device": np.int64,
    "op": np.int64,
    "bytes": np.int64,
    "alloc_ms": np.float64,
    "free_ms": np.float64,
    "lifetime_ms": np.float64,
}


@dataclass
class _Events:
    """The allocations and frees in time order, ties in the table's order: each one's device code (-1: missing),
    address, time, bytes (> 0 an allocation, < 0 a free) and owner (the ops-table row of its op, -1: none)."""

    device: np.ndarray
    addr: np.ndarray
    when: np.ndarray
    size: np.ndarray
    owner: np.ndarray


@dataclass
class _Texts:
    """The memory events' texts: the devices', the op names' and each op row's code in these (-1: missing)."""

    devices: np.ndarray
    name_code: np.ndarray
    names: np.ndarray


def _time_ordered(device_code: np.ndarray, allocations: pd.DataFrame, owner: np.ndarray) -> _Events:
    """The allocations' columns as `_Events`: as they are when the table is in time order (the importers' tables
    are), else gathered in a stable time order (`bucketed_lexsort`)."""
    columns = [
        device_code,
        allocations["addr"].to_numpy(np.int64),
        allocations["time_ns"].to_numpy(np.int64),
        allocations["bytes"].to_numpy(np.int64),
        owner,
    ]
    if ascending(columns[2]):
        return _Events(*columns)
    order = bucketed_lexsort([columns[2]])
    return _Events(*(spill.gathered(column, order) for column in columns))


def _partners(events: _Events) -> np.ndarray:
    """Per event, the event it pairs with (-1: none): an allocation and the next event at its device and address
    when that is a free. Read a piece at a time, the allocations not yet followed by an event at their address
    carried from piece to piece (the blocks held at that moment, however long the trace)."""
    n = len(events.when)
    partner = spill.filled(n, np.int64, -1)
    held = np.empty(0, dtype=np.int64)  # in (device, address) order, one per address
    for at in spill.dropping(spill.pieces(n)):
        rows = np.concatenate([held, np.arange(at.start, at.stop)])
        device, addr = events.device[rows], events.addr[rows]
        by_address = np.lexsort((rows, addr, device))  # then in time order: the events are
        rows, device, addr = rows[by_address], device[by_address], addr[by_address]
        next_same = (device[1:] == device[:-1]) & (addr[1:] == addr[:-1])
        size = events.size[rows]
        paired = np.flatnonzero((size[:-1] > 0) & (size[1:] < 0) & next_same)
        partner[rows[paired]], partner[rows[paired + 1]] = rows[paired + 1], rows[paired]
        held = rows[(size > 0) & np.append(~next_same, True)]
    return partner


def _freed_only(events: _Events, partner: np.ndarray, at: slice) -> np.ndarray:
    """Whether each event of `at` is the free of a block allocated before the trace (a free paired with no
    allocation): a row of the memory events, as each allocation is."""
    return (events.size[at] < 0) & (partner[at] < 0)


def _block_rows(events: _Events, partner: np.ndarray) -> Iterator[np.ndarray]:
    """The events that are rows of the memory events, in its order, a piece at a time: the frees of blocks
    allocated before the trace (no alloc_ms: first), then the allocations."""
    yield from _in_table_order(events, partner, lambda at: _freed_only(events, partner, at))
    yield from _in_table_order(events, partner, lambda at: events.size[at] > 0)


def _in_table_order(events: _Events, partner: np.ndarray, kept: Callable[[slice], np.ndarray]) -> Iterator[np.ndarray]:
    """The events `kept(piece)` holds, a piece at a time in (own time in ms, free_ms with none first, device, address,
    time, position) order: as the whole table sorted stably by (alloc_ms, free_ms) had them. The events are in time
    order, so only a run of events at one ms can be out of it, and a run that reaches a piece's end is carried into
    the next piece."""
    n, carried = len(events.when), np.empty(0, dtype=np.int64)
    for at in spill.dropping(spill.pieces(n)):
        rows = np.concatenate([carried, at.start + np.flatnonzero(kept(at))])
        ms = events.when[rows] / 1e6
        cut = len(rows) if at.stop == n or not len(rows) else int(np.searchsorted(ms, ms[-1]))
        rows, ms, carried = rows[:cut], ms[:cut], rows[cut:]
        free_ms = np.nan_to_num(_free_ms(events, partner, rows), nan=-np.inf)  # none first
        yield rows[np.lexsort((rows, events.when[rows], events.addr[rows], events.device[rows], free_ms, ms))]


def _free_ms(events: _Events, partner: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """When each of the block rows `rows` was freed (ms): a free's own time, an allocation's free's, NaN for an
    allocation never freed."""
    freed = np.where(events.size[rows] < 0, rows, partner[rows])
    return np.where(freed >= 0, events.when[np.maximum(freed, 0)] / 1e6, np.nan)


def _block_columns(events: _Events, partner: np.ndarray, texts: _Texts, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The memory events' columns (`_EVENT_TYPES`) of the block rows `rows`: the device's position in the devices'
    texts, the op's in the op names' (none: the "" after them); a missing device or name (code -1) is the last
    text, as indexing the texts by its code was."""
    alloc = events.size[rows] > 0
    owner = np.where(alloc, events.owner[rows], -1)
    op = np.full(len(rows), len(texts.names), dtype=np.int64)
    op[owner >= 0] = texts.name_code[owner[owner >= 0]] % len(texts.names)
    alloc_ms = np.where(alloc, events.when[rows] / 1e6, np.nan)
    free_ms = _free_ms(events, partner, rows)
    return {
        "device": events.device[rows] % len(texts.devices),
        "op": op,
        "bytes": np.abs(events.size[rows]),
        "alloc_ms": alloc_ms,
        "free_ms": free_ms,
        "lifetime_ms": free_ms - alloc_ms,
    }


def _sorted_categorical(positions: np.ndarray, texts: np.ndarray) -> pd.Categorical:
    """The text at each of `positions` as a categorical of the texts that occur, sorted, its codes spilled
    (grouping.occurring_sorted): a text column with no object per row, whose CSV is that of its texts as objects."""
    codes, categories = occurring_sorted(positions, list(texts))
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object))


def op_memory(ops: pd.DataFrame, allocations: pd.DataFrame, owner: np.ndarray, parent: np.ndarray) -> pd.DataFrame:
    """Per device and framework op name (OP_MEMORY_COLUMNS): its calls, and the bytes and count of what
    its calls allocated and freed themselves (self_) and with the ops nested in them. Summed per name code a
    chunk of ops at a time: the per-op sums are spilled arrays, no per-op text or frame."""
    held = owner >= 0
    if not held.any():
        return pd.DataFrame(columns=OP_MEMORY_COLUMNS)
    name_code, names = _text_codes(ops["name"])
    framework = framework_ops(ops)
    calls, _ = code_sums(name_code, len(names), [], lambda at: framework[at])
    device_code, devices = codes_and_labels(allocations["device"])
    order = by_depth(parent)[::-1]  # deepest first: children before their parents
    size = allocations["bytes"].to_numpy(np.int64)
    tables = []
    for code in sorted(_distinct(device_code, held).tolist(), key=lambda d: str(devices[d])):
        own = _own_memory(owner, size, _held_on(held, device_code, code), len(ops))
        sums = [*own, *(with_descendants(value, parent, order) for value in own)]
        kept, totals = code_sums(name_code, len(names), sums, _nonzero_in(framework, sums))
        present = np.flatnonzero(kept)
        columns = {"device": str(devices[code]), "op": names[present], "calls": calls[present]}
        columns.update({column: total[present] for column, total in zip(OP_MEMORY_COLUMNS[3:], totals)})
        tables.append(pd.DataFrame(columns, columns=OP_MEMORY_COLUMNS))
    out = pd.concat(tables, ignore_index=True)
    return out.sort_values(["device", "self_increase_bytes", "op"], ascending=[True, False, True], ignore_index=True)


def _held_on(held: np.ndarray, device_code: np.ndarray, code: int) -> Callable[[slice], np.ndarray]:
    """A chunk test: the allocations `held` (a bool per allocation) on the device `code`."""
    return lambda at: held[at] & (device_code[at] == code)


def _nonzero_in(rows: np.ndarray, values: list[np.ndarray]) -> Callable[[slice], np.ndarray]:
    """A chunk test: the `rows` (a bool per row) where any of `values` is not 0."""
    return lambda at: rows[at] & np.any([value[at] != 0 for value in values], axis=0)


def _text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, each code's value as text): a column's text without a str per row."""
    code, labels = codes_and_labels(column)
    return code, np.array([str(label) for label in labels], dtype=object)


def _texts(column: pd.Series) -> np.ndarray:
    """The column's values as text (objects), one shared str per distinct value."""
    code, labels = _text_codes(column)
    return labels[code]


def _own_memory(owner: np.ndarray, size: np.ndarray, mine: Callable[[slice], np.ndarray], n: int) -> list[np.ndarray]:
    """Per op row (`owner`: the op of each allocation, `size` its bytes; `mine`: which allocations of a chunk count,
    a device's owned ones): the bytes it allocated minus those it freed, the bytes it allocated and its count of
    allocations, in spilled arrays. Selected a chunk at a time (a device's owners and sizes were two whole-length
    int64 copies)."""
    out = [spill.filled(n, np.int64, 0) for _ in range(3)]
    for at in spill.dropping(spill.chunks(len(owner))):
        kept = mine(at)
        to, amount = owner[at][kept], size[at][kept]
        grown = amount > 0
        np.add.at(out[0], to, amount)
        np.add.at(out[1], to[grown], amount[grown])
        np.add.at(out[2], to[grown], 1)
    return out


def _distinct(values: np.ndarray, kept: Optional[np.ndarray] = None) -> np.ndarray:
    """np.unique(values[kept]) (`kept`: a bool per value; None: all), a chunk at a time: each sort a chunk's, not
    the whole column's."""
    return np.unique(
        np.concatenate(
            [np.unique(values[at] if kept is None else values[at][kept[at]]) for at in spill.chunks(len(values))]
            or [values[:0]]
        )
    )

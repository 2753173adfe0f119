"""The memory view (the TensorBoard plugin's Memory view, docs/tensorboard.md), from the allocator's
allocations and frees a trace recorded with `profile_memory=True` (the run's allocations table).

An allocation or free belongs to the innermost framework op running on its thread at that instant
(an op's time taken as [start, end), as the plugin does); one made directly in a module or outside
every op belongs to none. Pure: the run's tables in, tables out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.launches import FRAMEWORK_CATEGORIES, framework_ops, sums_by
from profiler.analysis.modules import module_rows
from profiler.formats.columns import MEMORY_COLUMNS, MEMORY_EVENT_COLUMNS, OP_MEMORY_COLUMNS
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.nesting import enclosing_parents, nesting_depths


def memory_curve(allocations: pd.DataFrame) -> pd.DataFrame:
    """Allocated and reserved memory of each device right after each allocation or free (MEMORY_COLUMNS)."""
    return pd.DataFrame(
        {
            "device": allocations["device"].astype(str).to_numpy(dtype=object),
            "time_ms": allocations["time_ns"].to_numpy(np.int64) / 1e6,
            "allocated_bytes": allocations["allocated_bytes"].to_numpy(np.float64),
            "reserved_bytes": allocations["reserved_bytes"].to_numpy(np.float64),
        },
        columns=MEMORY_COLUMNS,
    )


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
    was reached). Devices with no allocation or free inside a step are left out."""
    rows = []
    for device, points in curve.groupby("device", sort=True):
        time = points["time_ms"].to_numpy()
        step = np.searchsorted(start_ms, time, "right") - 1
        inside = (step >= 0) & (time < end_ms[np.maximum(step, 0)])
        if not inside.any():
            continue
        allocated, reserved = points["allocated_bytes"].to_numpy()[inside], points["reserved_bytes"].to_numpy()[inside]
        top = int(np.nanargmax(allocated))
        rows.append((device, float(allocated[top]), float(np.nanmax(reserved)), float(time[inside][top])))
    return pd.DataFrame(rows, columns=["device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_time_ms"])


def allocating_ops(
    ops: pd.DataFrame, allocations: pd.DataFrame, threads: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """(owner, parent): per allocation the ops-table row of the framework op it belongs to (-1: none),
    and per op row its innermost enclosing framework op (-1: a root or not a framework op)."""
    on_host = (ops["device"] == "cpu").to_numpy()
    category = ops["category"]
    framework = on_host & category.isin(FRAMEWORK_CATEGORIES).to_numpy()
    nodes = np.flatnonzero(framework | module_rows(ops))
    thread_name = dict(zip(threads["tid"].tolist(), threads["name"].astype(str).tolist()))
    lanes = np.concatenate(
        [
            ops["stream"].astype(str).to_numpy(dtype=object)[nodes],
            np.array([thread_name.get(t, f"tid {t}") for t in allocations["tid"].tolist()], dtype=object),
        ]
    )
    lane, _ = codes_and_labels(pd.Series(lanes, dtype=object))
    start = ops["start_ns"].to_numpy(np.int64)[nodes]
    when = allocations["time_ns"].to_numpy(np.int64)
    # an allocation at t is the interval [t, t + 1): an op ending at t no longer holds it
    parent = enclosing_parents(
        lane,
        np.concatenate([start, when]),
        np.concatenate([start + ops["dur_ns"].to_numpy(np.int64)[nodes], when + 1]),
    )
    holder = parent[len(nodes) :]
    owner = np.where(holder >= 0, nodes[np.maximum(holder, 0)], -1)
    owner[owner >= 0] = np.where(framework[owner[owner >= 0]], owner[owner >= 0], -1)  # in a module: none
    node_parent = parent[: len(nodes)]
    op_parent = np.full(len(ops), -1, dtype=np.int64)
    op_parent[nodes] = np.where(node_parent >= 0, nodes[np.maximum(node_parent, 0)], -1)
    return owner, op_parent


def memory_events(ops: pd.DataFrame, allocations: pd.DataFrame, owner: np.ndarray) -> pd.DataFrame:
    """Each block's life (MEMORY_EVENT_COLUMNS): an allocation paired with the next free of its address
    on its device. alloc_ms is empty for a block allocated before the trace, free_ms for one still held
    at its end; lifetime_ms when both are known."""
    if len(allocations) == 0:
        return pd.DataFrame(columns=MEMORY_EVENT_COLUMNS)
    device = allocations["device"].astype(str).to_numpy(dtype=object)
    addr = allocations["addr"].to_numpy(np.int64)
    when = allocations["time_ns"].to_numpy(np.int64)
    size = allocations["bytes"].to_numpy(np.int64)
    device_code, _ = codes_and_labels(pd.Series(device, dtype=object))
    order = np.lexsort((np.arange(len(when)), when, addr, device_code))
    alloc, free = size[order] > 0, size[order] < 0
    same_block = (device_code[order][1:] == device_code[order][:-1]) & (addr[order][1:] == addr[order][:-1])
    paired = np.zeros(len(order), dtype=bool)
    paired[:-1] = alloc[:-1] & free[1:] & same_block  # an allocation followed by its free
    freed_later = np.zeros(len(order), dtype=bool)
    freed_later[1:] = paired[:-1]
    alone_free = free & ~freed_later  # a free of a block allocated before the trace
    first = order[alloc | alone_free]
    free_at = np.full(len(order), -1, dtype=np.int64)
    free_at[np.flatnonzero(paired)] = order[np.flatnonzero(paired) + 1]
    free_at = free_at[alloc | alone_free]
    is_alloc = size[first] > 0
    names = ops["name"].astype(str).to_numpy(dtype=object)
    op = np.array([names[o] if o >= 0 else "" for o in owner[first]], dtype=object)
    op[~is_alloc] = ""
    alloc_ms = np.where(is_alloc, when[first] / 1e6, np.nan)
    free_ms = np.where(~is_alloc, when[first] / 1e6, np.where(free_at >= 0, when[np.maximum(free_at, 0)] / 1e6, np.nan))
    table = pd.DataFrame(
        {
            "device": device[first],
            "op": op,
            "bytes": np.abs(size[first]),
            "alloc_ms": alloc_ms,
            "free_ms": free_ms,
            "lifetime_ms": free_ms - alloc_ms,
        },
        columns=MEMORY_EVENT_COLUMNS,
    )
    return table.sort_values(["alloc_ms", "free_ms"], kind="stable", na_position="first", ignore_index=True)


def op_memory(ops: pd.DataFrame, allocations: pd.DataFrame, owner: np.ndarray, parent: np.ndarray) -> pd.DataFrame:
    """Per device and framework op name (OP_MEMORY_COLUMNS): its calls, and the bytes and count of what
    its calls allocated and freed themselves (self_) and with the ops nested in them."""
    held = owner >= 0
    if not held.any():
        return pd.DataFrame(columns=OP_MEMORY_COLUMNS)
    size = allocations["bytes"].to_numpy(np.int64)
    device = allocations["device"].astype(str).to_numpy(dtype=object)
    names = ops["name"].astype(str)
    framework = framework_ops(ops)
    calls = names[framework].value_counts()
    depth = nesting_depths(parent)
    order = [np.flatnonzero((parent >= 0) & (depth == d)) for d in range(int(depth.max(initial=0)), 0, -1)]
    tables = []
    for dev in sorted(set(device[held])):
        mine = held & (device == dev)
        to, amount = owner[mine], size[mine]
        grown = amount > 0
        own = {
            "self_increase_bytes": sums_by(to, amount, len(ops)),
            "self_alloc_bytes": sums_by(to[grown], amount[grown], len(ops)),
            "self_alloc_count": sums_by(to[grown], np.ones(grown.sum(), dtype=np.int64), len(ops)),
        }
        total = {key.removeprefix("self_"): value.copy() for key, value in own.items()}
        for rows in order:  # children before parents
            for value in total.values():
                np.add.at(value, parent[rows], value[rows])
        per_call = pd.DataFrame({"op": names.to_numpy(dtype=object), **own, **total})
        per_call = per_call[(per_call.drop(columns="op") != 0).any(axis=1).to_numpy() & framework]
        table = per_call.groupby("op", sort=False).sum().reset_index()
        table.insert(0, "device", dev)
        table.insert(2, "calls", calls.reindex(table["op"]).to_numpy(np.int64))
        tables.append(table)
    out = pd.concat(tables, ignore_index=True)[OP_MEMORY_COLUMNS]
    return out.sort_values(["device", "self_increase_bytes", "op"], ascending=[True, False, True], ignore_index=True)

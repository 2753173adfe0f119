"""The nn.Module view (the TensorBoard plugin's Module view, docs/tensorboard.md): every module call path
with its calls and its host and device time, from the `nn.Module: Linear_0` Python frames Kineto records
with `with_stack=True`.

What runs directly in a module is the framework ops, runtime calls and modules nested in it on its
thread (other Python frames are see-through). Host total is the module frame's duration, host self
that minus what runs directly in it (the plugin's definitions). Device total is the device time of the
executions launched by runtime calls anywhere inside it, device self of those launched by runtime
calls directly in it (not inside one of its ops). Pure: the ops table and its launches in, a table out.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.launches import FRAMEWORK_CATEGORIES, Launches, sums_by
from profiler.formats.columns import MODULE_COLUMNS
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.nesting import enclosing_parents, nesting_depths, positions_passing
from profiler.spill import chunked, gathered

#: How Kineto names a module's frame: this prefix, the class name and the instance's number.
MODULE_PREFIX = "nn.Module: "


def module_table(ops: pd.DataFrame, launched: Optional[Launches]) -> pd.DataFrame:
    """One row per module call path (MODULE_COLUMNS), in the order each path was first entered; device
    times empty (NaN) when no device execution is tied to its launch."""
    module = module_rows(ops)
    if not module.any():
        return pd.DataFrame(columns=MODULE_COLUMNS)
    rows = positions_passing(len(ops), lambda at: _nodes(ops.iloc[at], module[at]))
    lane, _ = codes_and_labels(ops["stream"].iloc[rows])
    start = gathered(ops["start_ns"].to_numpy(), rows)
    dur = gathered(ops["dur_ns"].to_numpy(), rows)
    parent = enclosing_parents(lane, start, start + dur)
    is_module = module[rows]
    nested = parent >= 0

    host_self = dur - sums_by(parent[nested], dur[nested], len(rows))
    launched_ns = _launched_ns(ops, launched)[rows] if launched is not None else np.zeros(len(rows), np.int64)
    device_self = sums_by(parent[nested], launched_ns[nested], len(rows))
    device_total = launched_ns.copy()
    depth = nesting_depths(parent)
    for d in range(int(depth.max(initial=0)), 0, -1):  # children before parents
        at = np.flatnonzero(depth == d)
        np.add.at(device_total, parent[at], device_total[at])

    paths = _paths(ops["name"].iloc[rows].astype(str).to_numpy(dtype=object), parent, is_module, depth)
    calls = pd.DataFrame(
        {
            "path": paths[is_module],
            "first_ns": start[is_module],
            "host_total_ms": dur[is_module] / 1e6,
            "host_self_ms": host_self[is_module] / 1e6,
            "device_total_ms": device_total[is_module] / 1e6,
            "device_self_ms": device_self[is_module] / 1e6,
        }
    )
    table = calls.groupby("path", sort=False).agg(
        first_ns=("first_ns", "min"),
        occurrences=("path", "size"),
        host_total_ms=("host_total_ms", "sum"),
        host_self_ms=("host_self_ms", "sum"),
        device_total_ms=("device_total_ms", "sum"),
        device_self_ms=("device_self_ms", "sum"),
    )
    table = table.sort_values(["first_ns"], kind="stable").reset_index()
    table["name"] = [p.rsplit("/", 1)[-1] for p in table["path"]]
    table["parent"] = [p.rsplit("/", 1)[0] if "/" in p else "" for p in table["path"]]
    if launched is None:
        table[["device_total_ms", "device_self_ms"]] = np.nan
    return table[MODULE_COLUMNS]


def module_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row is a module's frame, found a chunk of the table at a time (in a spill file when big)."""
    return chunked(len(ops), bool, lambda at: _module_frames(ops.iloc[at]))


def _module_frames(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row of a window of the ops is a module's frame (names read only for the Python frames)."""
    out = (ops["device"] == "cpu").to_numpy() & (ops["category"] == "python").to_numpy()
    frames = np.flatnonzero(out)
    out[frames] = ops["name"].iloc[frames].astype(str).str.startswith(MODULE_PREFIX).to_numpy()
    return out


def _nodes(ops: pd.DataFrame, module: np.ndarray) -> np.ndarray:
    """Whether each row of a window of the ops (`module`: its module frames) is a node of the module tree: a module
    frame, a runtime call or a framework op, on the host."""
    category = ops["category"]
    on_thread = module | (category == "runtime").to_numpy() | category.isin(FRAMEWORK_CATEGORIES).to_numpy()
    return (ops["device"] == "cpu").to_numpy() & on_thread


def _launched_ns(ops: pd.DataFrame, launched: Launches) -> np.ndarray:
    """Per row: the device time of the executions a runtime call launched (0 for other rows)."""
    out = np.zeros(len(ops), dtype=np.int64)
    executions = np.flatnonzero(launched.call >= 0)
    np.add.at(out, launched.call[executions], ops["dur_ns"].to_numpy()[executions])
    return out


def _paths(names: np.ndarray, parent: np.ndarray, is_module: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each module row's call path: its enclosing modules' names and its own, outermost first, joined by
    "/" (the frame names without MODULE_PREFIX); "" for other rows."""
    paths = np.full(len(names), "", dtype=object)
    for d in range(int(depth.max(initial=0)) + 1):  # parents before children
        at = np.flatnonzero(depth == d)
        up = parent[at]
        inherited = np.where(up >= 0, paths[np.maximum(up, 0)], "")
        own = np.array([str(n)[len(MODULE_PREFIX) :] for n in names[at]], dtype=object)
        paths[at] = np.where(is_module[at], np.where(inherited != "", inherited + "/" + own, own), inherited)
    return np.where(is_module, paths, "")

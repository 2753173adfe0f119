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

from profiler.analysis.launches import FRAMEWORK_CATEGORIES, Launches, with_descendants
from profiler.analysis.ops import gathered_column
from profiler.formats.columns import MODULE_COLUMNS
from profiler.kernels.grouping import code_sums, codes_and_labels, text_matches
from profiler.kernels.nesting import by_depth, children_sums, enclosing_parents, positions_passing, positions_where
from profiler.kernels.paths import PathCodes
from profiler.spill import chunked, chunks, drop_resident, dropping, empty, filled, gathered

#: How Kineto names a module's frame: this prefix, the class name and the instance's number.
MODULE_PREFIX = "nn.Module: "


def module_table(ops: pd.DataFrame, launched: Optional[Launches]) -> pd.DataFrame:
    """One row per module call path (MODULE_COLUMNS), in the order each path was first entered; device
    times empty (NaN) when no device execution is tied to its launch. The tree's nodes (most of a with_stack
    trace's host ops) are worked on a chunk (or a depth's chunk) at a time in spill files; only the module frames'
    figures are gathered whole, a row per module call."""
    module = module_rows(ops)
    if not module.any():
        return pd.DataFrame(columns=MODULE_COLUMNS)
    rows = positions_passing(len(ops), lambda at: _nodes(ops.iloc[at], module[at]))
    lane, _ = codes_and_labels(gathered_column(ops["stream"], rows))
    start = gathered(ops["start_ns"].to_numpy(), rows)
    dur = gathered(ops["dur_ns"].to_numpy(), rows)
    parent = enclosing_parents(lane, start, chunked(len(rows), start.dtype, lambda at: start[at] + dur[at]))
    del lane
    calls = positions_where(gathered(module, rows))  # the module frames among the nodes
    levels = by_depth(parent)
    device_total, device_self = _device_ns(ops, launched, rows, parent, levels)
    path, texts = _paths(gathered_column(ops["name"], gathered(rows, calls)), calls, parent, levels)
    values = [dur, children_sums(parent, dur), device_total, device_self]
    first, count, (host_total, children, *device) = _per_path(path, calls, len(texts), start, values)
    kept = np.flatnonzero(count)
    kept = kept[np.lexsort((first[1][kept], first[0][kept]))]  # by first start, then as first entered
    paths = [texts[code] for code in kept.tolist()]
    table = pd.DataFrame({"path": paths, "occurrences": count[kept]})
    table["name"] = [p.rsplit("/", 1)[-1] for p in paths]
    table["parent"] = [p.rsplit("/", 1)[0] if "/" in p else "" for p in paths]
    table["host_total_ms"], table["host_self_ms"] = host_total[kept] / 1e6, (host_total - children)[kept] / 1e6
    for column, total in zip(["device_total_ms", "device_self_ms"], device):
        table[column] = total[kept] / 1e6 if launched is not None else np.nan
    return table[MODULE_COLUMNS]


def _per_path(
    path: np.ndarray, calls: np.ndarray, n_paths: int, start: np.ndarray, values: list[np.ndarray]
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, list[np.ndarray]]:
    """Per path code (`path`: each module call's, `calls`: their nodes): (its calls' first start, the position of its
    first call), its count of calls and the int64 sums of each of `values` (per node) over its calls, a chunk of calls
    at a time."""
    first = (np.full(n_paths, np.iinfo(np.int64).max), np.full(n_paths, np.iinfo(np.int64).max))
    for at in chunks(len(calls)):
        np.minimum.at(first[0], path[at], start[calls[at]])
        np.minimum.at(first[1], path[at], np.arange(at.start, at.stop))
    count, sums = code_sums(path, n_paths, values, value_rows=calls)
    return first, count, sums


def module_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row is a module's frame, found a chunk of the table at a time (in a spill file when big)."""
    return chunked(len(ops), bool, lambda at: _module_frames(ops.iloc[at]))


def _module_frames(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row of a window of the ops is a module's frame (names read only for the Python frames, each
    distinct name once: a text per frame took ~34 MB per million rows)."""
    out = (ops["device"] == "cpu").to_numpy() & (ops["category"] == "python").to_numpy()
    frames = np.flatnonzero(out)
    out[frames] = text_matches(ops["name"].iloc[frames], lambda name: name.startswith(MODULE_PREFIX))
    return out


def _nodes(ops: pd.DataFrame, module: np.ndarray) -> np.ndarray:
    """Whether each row of a window of the ops (`module`: its module frames) is a node of the module tree: a module
    frame, a runtime call or a framework op, on the host."""
    category = ops["category"]
    on_thread = module | (category == "runtime").to_numpy() | category.isin(FRAMEWORK_CATEGORIES).to_numpy()
    return (ops["device"] == "cpu").to_numpy() & on_thread


def _device_ns(
    ops: pd.DataFrame, launched: Optional[Launches], rows: np.ndarray, parent: np.ndarray, levels: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Per node: the device time launched by runtime calls anywhere inside it (total) and directly in it (self);
    zeros without launches."""
    if launched is None:
        zeros = filled(len(rows), np.int64, 0)
        return zeros, zeros
    own = _launched_ns(ops, launched, rows)
    return with_descendants(own, parent, levels[::-1]), children_sums(parent, own)


def _launched_ns(ops: pd.DataFrame, launched: Launches, rows: np.ndarray) -> np.ndarray:
    """Per node (`rows`: the nodes' rows of the ops, ascending): the device time of the executions it launched (a
    runtime call's; 0 for other nodes), the executions read a chunk of the ops at a time."""
    out = filled(len(rows), np.int64, 0)
    dur = ops["dur_ns"].to_numpy()
    for at in chunks(len(ops)):
        executions = np.flatnonzero(launched.call[at] >= 0)
        call = launched.call[at][executions]
        node = np.minimum(np.searchsorted(rows, call), max(len(rows) - 1, 0))
        found = rows[node] == call
        np.add.at(out, node[found], dur[at][executions[found]])
        drop_resident()
    return out


def _paths(
    names: pd.Categorical | np.ndarray, calls: np.ndarray, parent: np.ndarray, levels: list[np.ndarray]
) -> tuple[np.ndarray, list[str]]:
    """Each module frame's call path (`names`: the frames' names; `calls`: their nodes) as a code into the distinct
    paths' texts: its enclosing modules' names and its own, outermost first, joined by "/" (without
    MODULE_PREFIX). Each node gets the code of the path it is in (`PathCodes`), roots first, then a depth's chunk at
    a time (parents before children); only the distinct names are made text."""
    own, labels = codes_and_labels(names)
    paths, code = PathCodes([str(n)[len(MODULE_PREFIX) :] for n in labels], "/"), empty(len(parent), np.int32)
    name = filled(len(parent), np.int32, -1)  # -1: not a module
    name[calls] = own
    for at in chunks(len(parent)):  # the roots (the others are done below, by depth)
        code[at] = paths.entered(np.zeros(at.stop - at.start, np.int32), np.where(parent[at] < 0, name[at], -1))
    for piece in dropping(levels):
        code[piece] = paths.entered(code[parent[piece]], name[piece])
    text_of, texts = pd.factorize(np.array(paths.texts, dtype=object))  # a path whose names hold "/" may repeat one
    return chunked(len(calls), np.int64, lambda at: text_of[code[calls[at]]], along=calls), texts.tolist()

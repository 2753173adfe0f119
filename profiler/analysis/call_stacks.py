"""Ops by call stack (the TensorBoard plugin's "View CallStack" of its operator view, docs/tensorboard.md):
for traces recorded with `with_stack=True`, each framework op's call stack is the chain of Python frames
around it on its thread (`train.py(42): step`, `nn.Module: Linear_0`, ...), and the op table is grouped
by op name and that stack. Pure: the ops table and its launches in, a table out.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.launches import DeviceTimes, Launches, framework_ops
from profiler.analysis.ops import op_launches, op_table, op_totals
from profiler.formats.columns import OP_STACK_COLUMNS
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.nesting import enclosing_parents, nesting_depths

#: How the frames of a stack are joined in the `stack` column, outermost first.
FRAME_SEPARATOR = " > "


def call_stacks(ops: pd.DataFrame) -> np.ndarray:
    """Per row: the Python frames enclosing it on its thread, outermost first, joined by FRAME_SEPARATOR
    ("" for rows outside every frame, and for rows that are not on the host)."""
    host = np.flatnonzero((ops["device"] == "cpu").to_numpy())
    out = np.full(len(ops), "", dtype=object)
    python = (ops["category"] == "python").to_numpy()[host]
    if not python.any():
        return out
    lane, _ = codes_and_labels(ops["stream"].iloc[host])
    start = ops["start_ns"].to_numpy(np.int64)[host]
    parent = enclosing_parents(lane, start, start + ops["dur_ns"].to_numpy(np.int64)[host])
    depth = nesting_depths(parent)
    names = ops["name"].astype(str).to_numpy(dtype=object)[host]
    inside = np.full(len(host), "", dtype=object)  # the stack a row's children are in
    own = np.full(len(host), "", dtype=object)
    for d in range(int(depth.max(initial=0)) + 1):  # parents before children
        rows = np.flatnonzero(depth == d)
        above = np.where(parent[rows] >= 0, inside[np.maximum(parent[rows], 0)], "")
        own[rows] = above
        frames = rows[python[rows]]
        joined = [f"{a}{FRAME_SEPARATOR}{n}" if a else n for a, n in zip(own[frames], names[frames])]
        inside[rows] = above
        inside[frames] = np.array(joined, dtype=object)
    out[host] = own
    return out


def has_python_frames(ops: pd.DataFrame) -> bool:
    """Whether any op is a Python frame (a trace recorded with_stack=True): asked of a categorical's categories
    first, so a big trace without frames is answered without an array per op."""
    category = ops["category"]
    if isinstance(category.dtype, pd.CategoricalDtype) and "python" not in category.cat.categories:
        return False
    return bool((category == "python").any())


def op_stack_table(
    ops: pd.DataFrame, launched: Optional[Launches] = None, times: Optional[DeviceTimes] = None
) -> pd.DataFrame:
    """Per device, framework op name and call stack (OP_STACK_COLUMNS): count, host and device times.
    Empty when the trace recorded no Python frames."""
    if not has_python_frames(ops):
        return pd.DataFrame(columns=OP_STACK_COLUMNS)
    stacks = call_stacks(ops)
    framework = framework_ops(ops)
    if not (stacks[framework] != "").any():
        return pd.DataFrame(columns=OP_STACK_COLUMNS)
    rows = np.flatnonzero(framework)
    chosen = ops.iloc[rows].assign(stack=stacks[rows])
    figures = op_launches(ops, launched, times)
    totals = op_totals(
        chosen, None if figures is None else figures.take(rows), ["device", "name", "stack"], ["op_type", "category"]
    )
    return op_table(totals, OP_STACK_COLUMNS, ["device", "total_ms", "name"])

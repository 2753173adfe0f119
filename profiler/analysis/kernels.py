"""The kernel table (kernels_{rank}.csv): per device, kernel and launching op, the TensorBoard plugin's
kernel view (docs/tensorboard.md).

Calls, total / mean / max / min duration, the duration-weighted mean of the tracer's blocks per SM and
estimated achieved occupancy (a kernel without the figure weighs in as 0, as the plugin counts it) and
whether the kernel runs on tensor cores. Pure: the ops and their launches in, the table out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.launches import KERNEL_CATEGORIES, Launches
from profiler.analysis.ops import OP_WINDOW_ROWS, op_windows
from profiler.analysis.tensor_cores import tensor_core_kernels
from profiler.formats.columns import KERNEL_COLUMNS
from profiler.kernels.grouping import RunningSums, codes_and_labels, group_rows, is_in, merged_groups


def kernel_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each op is a kernel executed on a device (compute or collective)."""
    return (ops["device"] != "cpu").to_numpy() & is_in(ops["category"], KERNEL_CATEGORIES)


def kernel_table(ops: pd.DataFrame, launched: Launches | None, window_rows: int = OP_WINDOW_ROWS) -> pd.DataFrame:
    """One row per device, kernel name and launching op (op "" when the launch is unknown), the
    longest total first. Summed `window_rows` ops at a time: integer figures merged (`merged_groups`), the
    duration-weighted means' float sums carried from window to window in row order (`RunningSums`), so the
    table is the same whatever the windows."""
    keys = ["device", "name", "op"]
    op_names = codes_and_labels(ops["name"])
    weighted = RunningSums(["blocks", "occupancy", "weight"])
    parts = [
        part
        for window, launched_w in op_windows(ops, launched, window_rows)
        if (part := _kernel_totals(window, launched_w, op_names, weighted)) is not None
    ]
    if not parts:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    t = merged_groups(parts, keys, ["calls", "total_ns"], ["min_ns"], ["max_ns"])
    sums = weighted.of([t[key] for key in keys])
    total = t["total_ns"].to_numpy(np.int64)
    table = pd.DataFrame(
        {
            "device": t["device"],
            "name": t["name"],
            "op": t["op"],
            "calls": t["calls"].to_numpy(np.int64),
            "total_ms": total / 1e6,
            "mean_ms": total / t["calls"].to_numpy(np.int64) / 1e6,
            "max_ms": t["max_ns"].to_numpy(np.int64) / 1e6,
            "min_ms": t["min_ns"].to_numpy(np.int64) / 1e6,
            "blocks_per_sm": _mean(sums["blocks"], sums["weight"]),
            "achieved_occupancy_pct": _mean(sums["occupancy"], sums["weight"]),
            "tensor_cores": np.where(t["tensor_cores"].to_numpy(dtype=bool), "true", "false"),
        }
    )
    order = np.lexsort(
        (table["op"].astype(str), table["name"].astype(str), -table["total_ms"], table["device"].astype(str))
    )
    return table.iloc[order][KERNEL_COLUMNS].reset_index(drop=True)


def _kernel_totals(
    ops: pd.DataFrame,
    launched: Launches | None,
    op_names: tuple[np.ndarray, np.ndarray],
    weighted: RunningSums,
) -> pd.DataFrame | None:
    """A window's kernels per device, name and launching op (named from `op_names`: the whole table's name codes
    and labels): calls, total / min / max ns, tensor cores (of the first); their duration-weighted figures
    added to `weighted`. None when the window has no kernel."""
    rows = np.flatnonzero(kernel_rows(ops))
    if rows.size == 0:
        return None
    kernels = ops.iloc[rows, ops.columns.get_indexer(["device", "name", "dur_ns"])]
    launcher = launched.launcher[rows] if launched is not None else np.full(rows.size, -1)
    codes, labels = op_names
    op = np.where(launcher >= 0, labels[codes[np.maximum(launcher, 0)]], "").astype(object)
    dur = kernels["dur_ns"].to_numpy()
    weight = dur.astype(np.float64)
    weighted.add(
        [kernels["device"], kernels["name"], op],
        {
            "blocks": _filled(ops["blocks_per_sm"].to_numpy()[rows]) * weight,
            "occupancy": _filled(ops["occupancy_pct"].to_numpy()[rows]) * weight,
            "weight": weight,
        },
    )
    g = group_rows(kernels["device"], kernels["name"], op)
    return pd.DataFrame(
        {
            "device": g.values(kernels["device"]),
            "name": g.values(kernels["name"]),
            "op": g.values(op),
            "calls": g.size,
            "total_ns": g.sum(dur),
            "max_ns": g.max(dur),
            "min_ns": g.min(dur),
            "tensor_cores": g.values(tensor_core_kernels(kernels["name"])).astype(bool),
        }
    )


def _filled(values: np.ndarray) -> np.ndarray:
    """A per-kernel figure as float64, NaN (no figure) as 0: such a kernel weighs in as 0, as the plugin counts."""
    return np.nan_to_num(values.astype(np.float64), nan=0.0)


def _mean(weighted: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per group, the weighted sum over the sum of weights (0 for a group of zero weight)."""
    return np.divide(weighted, weight, out=np.zeros(len(weight)), where=weight > 0)

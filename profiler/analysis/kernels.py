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
from profiler.analysis.tensor_cores import tensor_core_kernels
from profiler.formats.columns import KERNEL_COLUMNS
from profiler.kernels.grouping import group_rows


def kernel_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each op is a kernel executed on a device (compute or collective)."""
    return (ops["device"] != "cpu").to_numpy() & ops["category"].isin(KERNEL_CATEGORIES).to_numpy()


def kernel_table(ops: pd.DataFrame, launched: Launches | None) -> pd.DataFrame:
    """One row per device, kernel name and launching op (op "" when the launch is unknown), the
    longest total first."""
    rows = np.flatnonzero(kernel_rows(ops))
    if rows.size == 0:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    used = ["device", "name", "dur_ns", "blocks_per_sm", "occupancy_pct"]
    kernels = ops.iloc[rows, ops.columns.get_indexer(used)]  # the columns it reads: a big table is copied less
    launcher = launched.launcher[rows] if launched is not None else np.full(rows.size, -1)
    names = np.asarray(ops["name"].to_numpy(), dtype=object)
    op = np.where(launcher >= 0, names[np.maximum(launcher, 0)], "").astype(object)
    g = group_rows(kernels["device"], kernels["name"], pd.Series(op, dtype=object))
    dur = kernels["dur_ns"].to_numpy()
    weight = dur.astype(np.float64)
    total = g.sum(dur)
    tensor_cores = tensor_core_kernels(kernels["name"])
    table = pd.DataFrame(
        {
            "device": g.values(kernels["device"]),
            "name": g.values(kernels["name"]),
            "op": g.values(op),
            "calls": g.size,
            "total_ms": total / 1e6,
            "mean_ms": total / g.size / 1e6,
            "max_ms": g.max(dur) / 1e6,
            "min_ms": g.min(dur) / 1e6,
            "blocks_per_sm": _weighted_mean(kernels["blocks_per_sm"].to_numpy(), weight, g.of_row, len(g)),
            "achieved_occupancy_pct": _weighted_mean(kernels["occupancy_pct"].to_numpy(), weight, g.of_row, len(g)),
            "tensor_cores": np.where(g.values(tensor_cores).astype(bool), "true", "false"),
        }
    )
    order = np.lexsort(
        (table["op"].astype(str), table["name"].astype(str), -table["total_ms"], table["device"].astype(str))
    )
    return table.iloc[order][KERNEL_COLUMNS].reset_index(drop=True)


def _weighted_mean(values: np.ndarray, weight: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group, the mean of `values` weighted by `weight` (NaN values count as 0; 0 for a group of
    zero weight)."""
    filled = np.nan_to_num(values.astype(np.float64), nan=0.0)
    num = np.bincount(group, weights=filled * weight, minlength=n)
    den = np.bincount(group, weights=weight, minlength=n)
    return np.divide(num, den, out=np.zeros(n), where=den > 0)

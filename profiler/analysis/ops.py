"""Operator statistics: per device and op type, and per device and op name."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.formats.columns import OP_DETAIL_COLUMNS, OP_TYPE_COLUMNS
from profiler.kernels.grouping import Groups, group_rows
from profiler.model import NOT_WORK_CATEGORIES


def work_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops that are work: without device API calls, device-side waits and annotations
    (model.NOT_WORK_CATEGORIES), which are on the timeline but are not where the time goes."""
    not_work = ops["category"].isin(NOT_WORK_CATEGORIES).to_numpy()
    return ops[~not_work] if not_work.any() else ops


def op_type_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Count, total / self / average time and share of device self time, per device and op type (work
    ops only: `work_ops`)."""
    ops = work_ops(ops)
    if len(ops) == 0:
        return pd.DataFrame(columns=OP_TYPE_COLUMNS)
    g = group_rows(ops["device"], ops["op_type"])
    t = _per_group(ops, g, ["device", "op_type", "category"])
    return _finish(t, OP_TYPE_COLUMNS, ["device", "total_ms", "op_type"])


def op_detail_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Per device and op name: type, count, total / self / avg / min / max time, share, shapes, scope
    (work ops only: `work_ops`)."""
    ops = work_ops(ops)
    if len(ops) == 0:
        return pd.DataFrame(columns=OP_DETAIL_COLUMNS)
    g = group_rows(ops["device"], ops["name"])
    t = _per_group(ops, g, ["device", "name", "op_type", "category"])
    dur = ops["dur_ns"].to_numpy()
    t["min_ms"] = g.min(dur) / 1e6
    t["max_ms"] = g.max(dur) / 1e6
    t["shapes"] = _distinct_shapes(ops, t)
    t["scope"] = [n.rsplit("/", 1)[0] if "/" in n else "" for n in t["name"].astype(str)]
    return _finish(t, OP_DETAIL_COLUMNS, ["device", "total_ms", "name"])


def _per_group(ops: pd.DataFrame, g: Groups, labels: list[str]) -> pd.DataFrame:
    """The labels (key columns, and first values of the others), count, total and self ns per group."""
    t = pd.DataFrame({name: g.values(ops[name]) for name in labels})
    t["count"] = g.size
    t["total_ns"] = g.sum(ops["dur_ns"].to_numpy())
    t["self_ns"] = g.sum(ops["self_ns"].to_numpy())
    return t


def _distinct_shapes(ops: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """';'-joined distinct input shapes per (device, name), in first-seen order."""
    with_shapes = ops[ops["shapes"] != ""]
    if len(with_shapes) == 0:
        return [""] * len(table)
    d = (
        with_shapes.drop_duplicates(["device", "name", "shapes"])
        .groupby(["device", "name"], observed=True)["shapes"]
        .agg(lambda s: ";".join(map(str, s)))
    )
    return [d.get((dev, name), "") for dev, name in zip(table["device"], table["name"])]


def _finish(t: pd.DataFrame, columns: list[str], order: list[str]) -> pd.DataFrame:
    """Times in ms, average, share of the device's self time (the groups partition each device's
    ops, so their self times add up to it), sorted by device, total time (longest first), label."""
    dev_total = t.groupby("device", sort=False)["self_ns"].sum()
    t["total_ms"] = t["total_ns"] / 1e6
    t["self_ms"] = t["self_ns"] / 1e6
    t["avg_ms"] = t["total_ms"] / t["count"]
    denom = t["device"].map(dev_total).to_numpy(dtype=np.float64)
    t["share_pct"] = np.divide(
        t["self_ns"].to_numpy(dtype=np.float64) * 100.0, denom, out=np.zeros(len(t)), where=denom > 0
    )
    t = t.sort_values(order, ascending=[True, False, True], kind="stable")
    return t[columns].reset_index(drop=True)

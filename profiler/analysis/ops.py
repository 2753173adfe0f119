"""Operator statistics: per device and op type, and per device and op name; for framework ops of a
run with a device, the device time of the kernels they launched (analysis/launches.py)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.launches import Launches, framework_ops
from profiler.formats.columns import OP_DETAIL_COLUMNS, OP_DEVICE_COLUMNS, OP_SHAPE_COLUMNS, OP_TYPE_COLUMNS
from profiler.kernels.grouping import Groups, group_rows
from profiler.model import NOT_WORK_CATEGORIES


def work_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each op is work: not a device API call, device-side wait or annotation
    (model.NOT_WORK_CATEGORIES), which are on the timeline but are not where the time goes."""
    return ~ops["category"].isin(NOT_WORK_CATEGORIES).to_numpy()


def _work_columns(ops: pd.DataFrame, work: np.ndarray, used: list[str]) -> pd.DataFrame:
    """The work rows of the columns a table reads: filtering rows copies every column taken, and a big
    trace's op table is hundreds of MB."""
    return ops[used] if work.all() else ops.loc[work, used]


def op_type_table(ops: pd.DataFrame, launched: Optional[Launches] = None) -> pd.DataFrame:
    """Count, total / self / average time and share of device self time, per device and op type (work
    ops only: `work_rows`); with `launched`, the device time of the framework ops' kernels."""
    work = work_rows(ops)
    ops = _work_columns(ops, work, ["device", "op_type", "category", "dur_ns", "self_ns"])
    if len(ops) == 0:
        return pd.DataFrame(columns=OP_TYPE_COLUMNS)
    g = group_rows(ops["device"], ops["op_type"])
    t = per_group(ops, g, ["device", "op_type", "category"])
    add_device_times(t, g, ops, launched, work)
    return with_shares(t, OP_TYPE_COLUMNS, ["device", "total_ms", "op_type"])


def op_detail_table(ops: pd.DataFrame, launched: Optional[Launches] = None) -> pd.DataFrame:
    """Per device and op name: type, count, total / self / avg / min / max time, share, shapes, scope
    (work ops only: `work_rows`); with `launched`, the device time of the framework ops' kernels."""
    work = work_rows(ops)
    ops = _work_columns(ops, work, ["device", "name", "op_type", "category", "dur_ns", "self_ns", "shapes"])
    if len(ops) == 0:
        return pd.DataFrame(columns=OP_DETAIL_COLUMNS)
    g = group_rows(ops["device"], ops["name"])
    t = per_group(ops, g, ["device", "name", "op_type", "category"])
    add_device_times(t, g, ops, launched, work)
    dur = ops["dur_ns"].to_numpy()
    t["min_ms"] = g.min(dur) / 1e6
    t["max_ms"] = g.max(dur) / 1e6
    t["shapes"] = _distinct_shapes(ops, t)
    t["scope"] = [n.rsplit("/", 1)[0] if "/" in n else "" for n in t["name"].astype(str)]
    return with_shares(t, OP_DETAIL_COLUMNS, ["device", "total_ms", "name"])


def per_group(ops: pd.DataFrame, g: Groups, labels: list[str]) -> pd.DataFrame:
    """The labels (key columns, and first values of the others), count, total and self ns per group."""
    t = pd.DataFrame({name: g.values(ops[name]) for name in labels})
    t["count"] = g.size
    t["total_ns"] = g.sum(ops["dur_ns"].to_numpy())
    t["self_ns"] = g.sum(ops["self_ns"].to_numpy())
    return t


def add_device_times(
    t: pd.DataFrame, g: Groups, ops: pd.DataFrame, launched: Optional[Launches], work: np.ndarray
) -> None:
    """The TensorBoard plugin's device columns of each group (docs/tensorboard.md): device self / total
    ms, tensor-core eligibility (of the group's first op) and the tensor-core share of the device self /
    total time. Empty for groups that are not framework ops, and for every group of a run whose
    kernels cannot be tied to ops (`launched` None)."""
    if launched is None:
        for column in OP_DEVICE_COLUMNS:
            t[column] = "" if column == "tc_eligible" else np.nan
        return
    framework = g.values(framework_ops(ops)).astype(bool)
    own, total = g.sum(launched.device_self_ns[work]), g.sum(launched.device_total_ns[work])
    t["device_self_ms"] = np.where(framework, own / 1e6, np.nan)
    t["device_total_ms"] = np.where(framework, total / 1e6, np.nan)
    eligible = g.values(launched.tc_eligible[work]).astype(bool)
    t["tc_eligible"] = np.where(framework, np.where(eligible, "true", "false"), "")
    t["tc_self_pct"] = np.where(framework, _pct(g.sum(launched.tc_self_ns[work]), own), np.nan)
    t["tc_total_pct"] = np.where(framework, _pct(g.sum(launched.tc_total_ns[work]), total), np.nan)


def _pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole in %, 0 where whole is 0."""
    return np.divide(part * 100.0, whole, out=np.zeros(len(whole)), where=whole > 0)


def _distinct_shapes(ops: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """';'-joined distinct input shapes per (device, name), in first-seen order."""
    with_shapes = ops.loc[(ops["shapes"] != "").to_numpy(), ["device", "name", "shapes"]]
    if len(with_shapes) == 0:
        return [""] * len(table)
    d = (
        with_shapes.drop_duplicates(["device", "name", "shapes"])
        .groupby(["device", "name"], observed=True)["shapes"]
        .agg(lambda s: ";".join(map(str, s)))
    )
    return [d.get((dev, name), "") for dev, name in zip(table["device"], table["name"])]


def with_shares(t: pd.DataFrame, columns: list[str], order: list[str]) -> pd.DataFrame:
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


def op_shape_table(ops: pd.DataFrame, launched: Optional[Launches] = None) -> pd.DataFrame:
    """Per device, op name and input shapes (the TensorBoard plugin's "Operator + Input Shape" grouping): as
    op_detail, one row per distinct `shapes` of a name (work ops only: `work_rows`). Empty when no op
    recorded its shapes (record_shapes=False)."""
    work = work_rows(ops)
    ops = _work_columns(ops, work, ["device", "name", "shapes", "op_type", "category", "dur_ns", "self_ns"])
    if not len(ops) or not (ops["shapes"].astype(str) != "").any():
        return pd.DataFrame(columns=OP_SHAPE_COLUMNS)
    g = group_rows(ops["device"], ops["name"], ops["shapes"])
    t = per_group(ops, g, ["device", "name", "shapes", "op_type", "category"])
    add_device_times(t, g, ops, launched, work)
    return with_shares(t, OP_SHAPE_COLUMNS, ["device", "total_ms", "name"])

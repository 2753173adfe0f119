"""Operator statistics: per device and op type, and per device and op name."""
from __future__ import annotations

import numpy as np
import pandas as pd

OP_TYPE_COLUMNS = ["device", "op_type", "category", "count", "total_ms", "self_ms", "avg_ms", "share_pct"]
OP_DETAIL_COLUMNS = ["device", "name", "op_type", "category", "count", "total_ms", "self_ms", "avg_ms", "min_ms",
                     "max_ms", "share_pct", "shapes", "scope"]


def _device_self_total(ops: pd.DataFrame) -> pd.Series:
    return ops.groupby("device", sort=True, observed=True)["self_ns"].sum()


def op_type_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Count, total / self / average time and share of device self time, per device and op type."""
    if len(ops) == 0:
        return pd.DataFrame(columns=OP_TYPE_COLUMNS)
    g = ops.groupby(["device", "op_type"], sort=True, observed=True)
    t = g.agg(category=("category", "first"), count=("dur_ns", "size"), total_ns=("dur_ns", "sum"),
              self_ns=("self_ns", "sum")).reset_index()
    return _finish(t, ops, OP_TYPE_COLUMNS, ["device", "total_ms", "op_type"])


def op_detail_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Per device and op name: type, count, total / self / avg / min / max time, share, shapes, scope."""
    if len(ops) == 0:
        return pd.DataFrame(columns=OP_DETAIL_COLUMNS)
    g = ops.groupby(["device", "name"], sort=True, observed=True)
    t = g.agg(op_type=("op_type", "first"), category=("category", "first"), count=("dur_ns", "size"),
              total_ns=("dur_ns", "sum"), self_ns=("self_ns", "sum"), min_ns=("dur_ns", "min"),
              max_ns=("dur_ns", "max")).reset_index()
    t["min_ms"] = t["min_ns"] / 1e6
    t["max_ms"] = t["max_ns"] / 1e6
    t["shapes"] = _distinct_shapes(ops, t)
    t["scope"] = [n.rsplit("/", 1)[0] if "/" in n else "" for n in t["name"].astype(str)]
    return _finish(t, ops, OP_DETAIL_COLUMNS, ["device", "total_ms", "name"])


def _distinct_shapes(ops: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """';'-joined distinct input shapes per (device, name), in first-seen order."""
    with_shapes = ops[ops["shapes"] != ""]
    if len(with_shapes) == 0:
        return [""] * len(table)
    d = (with_shapes.drop_duplicates(["device", "name", "shapes"])
         .groupby(["device", "name"], observed=True)["shapes"].agg(lambda s: ";".join(map(str, s))))
    return [d.get((dev, name), "") for dev, name in zip(table["device"], table["name"])]


def _finish(t: pd.DataFrame, ops: pd.DataFrame, columns: list[str], order: list[str]) -> pd.DataFrame:
    dev_total = _device_self_total(ops)
    t["total_ms"] = t["total_ns"] / 1e6
    t["self_ms"] = t["self_ns"] / 1e6
    t["avg_ms"] = t["total_ms"] / t["count"]
    denom = t["device"].map(dev_total).to_numpy(dtype=np.float64)
    t["share_pct"] = np.divide(t["self_ns"].to_numpy(dtype=np.float64) * 100.0, denom,
                               out=np.zeros(len(t)), where=denom > 0)
    t = t.sort_values(order, ascending=[True, False, True], kind="stable")
    return t[columns].reset_index(drop=True)

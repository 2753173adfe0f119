"""Operator statistics: per device and op type, and per device and op name; for framework ops of a
run with a device, the device time of the kernels they launched (analysis/launches.py).

Each table is summed a window of OP_WINDOW_ROWS rows at a time, and the windows' per-group sums merged
(`kernels.grouping.merged_groups`): int64 ns sums and counts, min / max and first-seen labels merge exactly,
so the table is the same whatever the windows, and its copies stay a window's size however big the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Optional, Protocol, TypeVar

import numpy as np
import pandas as pd

from profiler.analysis.launches import DeviceTimes, Launches, device_times, framework_ops
from profiler.formats.columns import OP_DETAIL_COLUMNS, OP_DEVICE_COLUMNS, OP_SHAPE_COLUMNS, OP_TYPE_COLUMNS
from profiler.kernels.grouping import group_rows, merged_groups
from profiler.model import NOT_WORK_CATEGORIES
from profiler.spill import chunked, drop_resident, taken

#: Rows of the ops table an op table is summed over at a time (a window's copies: ~25 MB at most).
OP_WINDOW_ROWS = 1 << 18
#: The int64 figures of an op group that merge by adding up (`op_totals`); those of the device only with launches.
DEVICE_SUMS = ["device_self_ns", "device_total_ns", "tc_self_ns", "tc_total_ns"]
SUMS = ["count", "total_ns", "self_ns", *DEVICE_SUMS]


def work_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each op is work: not a device API call, device-side wait or annotation
    (model.NOT_WORK_CATEGORIES), which are on the timeline but are not where the time goes."""
    return ~ops["category"].isin(NOT_WORK_CATEGORIES).to_numpy()


def _work_columns(ops: pd.DataFrame, work: np.ndarray, used: list[str]) -> pd.DataFrame:
    """The work rows of the columns a table reads: filtering rows copies every column taken."""
    return ops[used] if work.all() else ops.loc[work, used]


class _PerRow(Protocol):
    def take(self, rows: slice) -> _PerRow: ...


PerRow = TypeVar("PerRow", bound=_PerRow)


def op_windows(
    ops: pd.DataFrame, per_row: Optional[PerRow], rows: int = OP_WINDOW_ROWS
) -> Iterator[tuple[pd.DataFrame, Optional[PerRow]]]:
    """The ops table `rows` rows at a time, each window with its rows' figures of `per_row` (Launches, ...). The
    pages of spilled columns a window read are handed back before the next (spill.drop_resident): a pass over a
    big import's op table holds one window's pages, not the table's."""
    for lo in range(0, len(ops), rows):
        window = slice(lo, lo + rows)
        yield ops.iloc[window], None if per_row is None else per_row.take(window)
        drop_resident()


def op_rows(ops: pd.DataFrame, columns: list[str], rows: np.ndarray, window_rows: Optional[int] = None) -> pd.DataFrame:
    """ops[columns].iloc[rows], each column gathered on its own `window_rows` (default spill.CHUNK_ROWS) rows at a
    time (`gathered_column`; the index too): into spill files when the run is spilled, with no whole-column
    temporaries (a row filter of the whole table would copy every column, a concatenation of windows their codes)."""
    return pd.DataFrame(
        {column: gathered_column(ops[column], rows, window_rows) for column in columns},
        index=_index_at(ops.index, rows, window_rows),
        copy=False,
    )


def gathered_column(column: pd.Series, rows: np.ndarray, chunk: Optional[int] = None) -> np.ndarray | pd.Categorical:
    """column.iloc[rows] (of a categorical, its codes), gathered `chunk` (default spill.CHUNK_ROWS) rows at a time
    into a spill file when the run is spilled (the device findings' tables too)."""
    coded = isinstance(column.dtype, pd.CategoricalDtype)
    values = column.array.codes if coded else column.to_numpy()
    out = chunked(len(rows), values.dtype, lambda at: values[rows[at]], chunk, along=rows)
    return pd.Categorical.from_codes(out, dtype=column.dtype) if coded else out


def _index_at(index: pd.Index, rows: np.ndarray, chunk: Optional[int]) -> pd.Index:
    """index[rows]: of a range (an op table's), its values computed `chunk` rows at a time (`chunked`)."""
    if not isinstance(index, pd.RangeIndex):
        return index[rows]
    values = chunked(len(rows), np.int64, lambda at: index.start + index.step * rows[at].astype(np.int64), chunk)
    return pd.Index(values, name=index.name, copy=False)


@dataclass(frozen=True)
class OpLaunches:
    """What the op tables read of the launches, per row of the ops table: tensor-core eligibility and the
    device times (made for them: `op_launches`)."""

    tc_eligible: np.ndarray
    times: DeviceTimes

    def take(self, rows: slice | np.ndarray) -> OpLaunches:
        return OpLaunches(taken(self.tc_eligible, rows), self.times.take(rows))


def op_launches(
    ops: pd.DataFrame, launched: Optional[Launches], times: Optional[DeviceTimes] = None
) -> Optional[OpLaunches]:
    """The op tables' launch figures (None without launches); `times` when the caller made them already."""
    if launched is None:
        return None
    return OpLaunches(launched.tc_eligible, times if times is not None else device_times(ops, launched))


def op_totals(
    ops: pd.DataFrame, launched: Optional[OpLaunches], keys: list[str], labels: list[str], extremes: bool = False
) -> Optional[pd.DataFrame]:
    """Per group of the work ops (`work_rows`) by `keys`: the keys, `labels` and whether it is a framework op
    (of its first op), `count` and the int64 ns sums of SUMS (DEVICE_SUMS and `tc_eligible`, of its first op,
    with `launched`: the op tables' launch figures of these rows), with `extremes` the least and greatest
    duration (`min_ns`, `max_ns`); None when no op is work. Windows' totals merge exactly (`merge_op_totals`)."""
    work = work_rows(ops)
    ops = _work_columns(ops, work, list(dict.fromkeys([*keys, *labels, "device", "category", "dur_ns", "self_ns"])))
    if len(ops) == 0:
        return None
    g = group_rows(*(ops[key] for key in keys))
    dur = ops["dur_ns"].to_numpy()
    t = pd.DataFrame({name: g.values(ops[name]) for name in [*keys, *labels]})
    t["framework"] = g.values(framework_ops(ops)).astype(bool)
    t["count"] = g.size
    t["total_ns"] = g.sum(dur)
    t["self_ns"] = g.sum(ops["self_ns"].to_numpy())
    if launched is not None:
        for column in DEVICE_SUMS:
            t[column] = g.sum(getattr(launched.times, column)[work])
        t["tc_eligible"] = g.values(launched.tc_eligible[work]).astype(bool)
    if extremes:
        t["min_ns"], t["max_ns"] = g.min(dur), g.max(dur)
    return t


def merge_op_totals(parts: Sequence[Optional[pd.DataFrame]], keys: list[str]) -> Optional[pd.DataFrame]:
    """The `op_totals` of consecutive windows of rows as those of all their rows (None when none has work)."""
    parts = [part for part in parts if part is not None]
    if not parts:
        return None
    sums = [column for column in SUMS if column in parts[0]]
    extremes = "min_ns" in parts[0]
    return merged_groups(parts, keys, sums, ["min_ns"] if extremes else (), ["max_ns"] if extremes else ())


def summed_totals(
    ops: pd.DataFrame,
    launched: Optional[OpLaunches],
    window_rows: int,
    keys: list[str],
    labels: list[str],
    extremes: bool = False,
) -> Optional[pd.DataFrame]:
    """`op_totals` of the whole ops table, summed `window_rows` rows at a time and merged."""
    windows = op_windows(ops, launched, window_rows)
    return merge_op_totals([op_totals(w, launched_w, keys, labels, extremes) for w, launched_w in windows], keys)


def op_type_table(
    ops: pd.DataFrame,
    launched: Optional[Launches] = None,
    window_rows: int = OP_WINDOW_ROWS,
    times: Optional[DeviceTimes] = None,
) -> pd.DataFrame:
    """Count, total / self / average time and share of device self time, per device and op type (work
    ops only: `work_rows`); with `launched`, the device time of the framework ops' kernels."""
    t = summed_totals(ops, op_launches(ops, launched, times), window_rows, ["device", "op_type"], ["category"])
    if t is None:
        return pd.DataFrame(columns=OP_TYPE_COLUMNS)
    return op_table(t, OP_TYPE_COLUMNS, ["device", "total_ms", "op_type"])


def op_detail_table(
    ops: pd.DataFrame,
    launched: Optional[Launches] = None,
    window_rows: int = OP_WINDOW_ROWS,
    times: Optional[DeviceTimes] = None,
) -> pd.DataFrame:
    """Per device and op name: type, count, total / self / avg / min / max time, share, shapes, scope
    (work ops only: `work_rows`); with `launched`, the device time of the framework ops' kernels."""
    figures = op_launches(ops, launched, times)
    t = summed_totals(ops, figures, window_rows, ["device", "name"], ["op_type", "category"], extremes=True)
    if t is None:
        return pd.DataFrame(columns=OP_DETAIL_COLUMNS)
    t["min_ms"] = t["min_ns"] / 1e6
    t["max_ms"] = t["max_ns"] / 1e6
    shapes = pd.concat([_distinct_shapes(window) for window, _ in op_windows(ops, None, window_rows)])
    t["shapes"] = _joined_shapes(shapes.drop_duplicates(), t)
    t["scope"] = [n.rsplit("/", 1)[0] if "/" in n else "" for n in t["name"].astype(str)]
    return op_table(t, OP_DETAIL_COLUMNS, ["device", "total_ms", "name"])


def _distinct_shapes(ops: pd.DataFrame) -> pd.DataFrame:
    """The distinct (device, name, shapes) of the work ops that recorded input shapes, first seen first:
    a window's merge with those after it (concatenated, duplicates dropped)."""
    with_shapes = ops.loc[work_rows(ops) & (ops["shapes"] != "").to_numpy(), ["device", "name", "shapes"]]
    return with_shapes.astype(object).drop_duplicates()


def _joined_shapes(distinct: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """';'-joined distinct input shapes per (device, name) of `table`, in first-seen order."""
    if len(distinct) == 0:
        return [""] * len(table)
    joined = distinct.groupby(["device", "name"])["shapes"].agg(lambda s: ";".join(map(str, s)))
    return [joined.get((dev, name), "") for dev, name in zip(table["device"], table["name"])]


def op_table(t: pd.DataFrame, columns: list[str], order: list[str]) -> pd.DataFrame:
    """An op table (`columns`) from its merged `op_totals`: the TensorBoard plugin's device columns, times in
    ms, shares, rows in `with_shares`' order."""
    add_device_times(t)
    return with_shares(t, columns, order)


def add_device_times(t: pd.DataFrame) -> None:
    """The TensorBoard plugin's device columns of each group (docs/tensorboard.md): device self / total
    ms, tensor-core eligibility (of the group's first op) and the tensor-core share of the device self /
    total time. Empty for groups that are not framework ops, and for every group of a run whose
    kernels cannot be tied to ops (totals without launches)."""
    if "device_self_ns" not in t:
        for column in OP_DEVICE_COLUMNS:
            t[column] = "" if column == "tc_eligible" else np.nan
        return
    framework = t["framework"].to_numpy(dtype=bool)
    own, total = t["device_self_ns"].to_numpy(np.int64), t["device_total_ns"].to_numpy(np.int64)
    t["device_self_ms"] = np.where(framework, own / 1e6, np.nan)
    t["device_total_ms"] = np.where(framework, total / 1e6, np.nan)
    eligible = t["tc_eligible"].to_numpy(dtype=bool)
    t["tc_eligible"] = np.where(framework, np.where(eligible, "true", "false"), "")
    t["tc_self_pct"] = np.where(framework, _pct(t["tc_self_ns"].to_numpy(np.int64), own), np.nan)
    t["tc_total_pct"] = np.where(framework, _pct(t["tc_total_ns"].to_numpy(np.int64), total), np.nan)


def _pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole in %, 0 where whole is 0."""
    return np.divide(part * 100.0, whole, out=np.zeros(len(whole)), where=whole > 0)


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


def op_shape_table(
    ops: pd.DataFrame,
    launched: Optional[Launches] = None,
    window_rows: int = OP_WINDOW_ROWS,
    times: Optional[DeviceTimes] = None,
) -> pd.DataFrame:
    """Per device, op name and input shapes (the TensorBoard plugin's "Operator + Input Shape" grouping): as
    op_detail, one row per distinct `shapes` of a name (work ops only: `work_rows`). Empty when no op
    recorded its shapes (record_shapes=False)."""
    recorded = any(
        (work_rows(window) & (window["shapes"].astype(str) != "").to_numpy()).any()
        for window, _ in op_windows(ops, None, window_rows)
    )
    if not recorded:
        return pd.DataFrame(columns=OP_SHAPE_COLUMNS)
    figures = op_launches(ops, launched, times)
    t = summed_totals(ops, figures, window_rows, ["device", "name", "shapes"], ["op_type", "category"])
    if t is None:
        return pd.DataFrame(columns=OP_SHAPE_COLUMNS)
    return op_table(t, OP_SHAPE_COLUMNS, ["device", "total_ms", "name"])

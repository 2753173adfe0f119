"""Which framework op launched each device execution, and the device time of every framework op
(the TensorBoard plugin's operator view, docs/tensorboard.md).

A device execution (kernel, memcpy, memset, collective kernel) carries the correlation id of the
runtime call that launched it (`cudaLaunchKernel`, ...); that call runs inside a framework op on its
thread, and the innermost one is the execution's launching op. An op's device self time is the
time of the executions it launched itself; its device total time adds its children's (ops nested in
it on its thread). Pure: the ops table in, arrays over its rows out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Self

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.tensor_cores import TENSOR_CORE_ELIGIBLE_OPS, tensor_core_kernels
from profiler.kernels.grouping import codes_and_labels, is_in, text_matches
from profiler.kernels.nesting import ascending, by_depth, enclosing_parents, position_dtype, positions_where
from profiler.model import DEVICE_WORK_CATEGORIES, op_times

#: Host op categories that are framework ops (an op a user wrote or called), which own launches.
FRAMEWORK_CATEGORIES = ("host", "user")
#: Device categories that are kernels (the plugin's "Kernel" events: compute and collective kernels).
KERNEL_CATEGORIES = ("compute", "comm")


class _RowArrays:
    """A dataclass of arrays, one value per row of the ops table."""

    def take(self, rows: slice | np.ndarray) -> Self:
        """The figures of some rows of the ops table (a window, a selection), in their order (a selection gathered a
        chunk at a time: spill.taken)."""
        return type(self)(**{name: spill.taken(values, rows) for name, values in vars(self).items()})


@dataclass(frozen=True)
class Launches(_RowArrays):
    """Per row of the ops table (-1 / False where a figure does not apply to the row); taken rows (`take`) still
    name rows of the whole table in `call`, `launcher` and `parent`."""

    call: np.ndarray  # device executions: row of the runtime call that launched it, -1 when unknown
    launcher: np.ndarray  # device executions: row of the framework op that launched it, -1 when unknown
    parent: np.ndarray  # framework ops: row of the framework op it is nested in, -1 at a root
    tc_eligible: np.ndarray  # framework ops: tensor-core eligible (by name, by a child, or by its kernels)
    tensor_cores: np.ndarray  # device executions: a tensor-core kernel


@dataclass(frozen=True)
class DeviceTimes(_RowArrays):
    """Per row of the ops table, int64 ns (0 where it does not apply): the device time of the executions each
    framework op launched itself (self) and with the ops nested in it (total), and their tensor-core part.
    Made for the op tables (`device_times`) and dropped after them: 32 B per op, not kept by `Launches`."""

    device_self_ns: np.ndarray
    device_total_ns: np.ndarray
    tc_self_ns: np.ndarray
    tc_total_ns: np.ndarray


def launches(ops: pd.DataFrame) -> Optional[Launches]:
    """The launches of a run's ops, or None when no device execution can be tied to a runtime call
    (no device, or a source without correlation ids).

    Every per-row array, the kept ones and those they are made from, is made a chunk of rows at a time into a
    spill file when the run is spilled (spill.chunked): what grows with the run is file-backed, which the memory
    watcher hands back, not the process's own memory."""
    n, correlation = len(ops), ops["correlation"].to_numpy()
    device, category, name = ops["device"], ops["category"], ops["name"]
    on_host = spill.chunked(n, bool, lambda at: (device.iloc[at] == "cpu").to_numpy())
    executions = spill.chunked(
        n, bool, lambda at: is_in(category.iloc[at], DEVICE_WORK_CATEGORIES) & ~on_host[at] & (correlation[at] >= 0)
    )
    runtime = spill.chunked(
        n, bool, lambda at: (category.iloc[at] == "runtime").to_numpy() & on_host[at] & (correlation[at] >= 0)
    )
    if not executions.any() or not runtime.any():
        return None
    framework = framework_ops(ops)
    owner, parent = _owners(ops, on_host, framework)
    position = position_dtype(n)  # the row arrays are kept with the analysis: half the memory of int64
    ids, calls = _calls_by_id(correlation, runtime)
    call = spill.chunked(
        n, position, lambda at: np.where(executions[at], _call_with_id(correlation[at], ids, calls), -1)
    )
    launcher = spill.chunked(n, position, lambda at: np.where(call[at] >= 0, owner[np.maximum(call[at], 0)], -1))
    tensor_cores = spill.chunked(
        n,
        bool,
        lambda at: executions[at] & is_in(category.iloc[at], KERNEL_CATEGORIES) & tensor_core_kernels(name.iloc[at]),
    )
    tc_self = _launched_time(launcher, ops["dur_ns"].to_numpy(), tensor_cores)
    eligible = spill.chunked(n, bool, lambda at: framework[at] & _eligible_names(name.iloc[at]) | (tc_self[at] > 0))
    spill.drop_resident()  # the op columns' pages read so far, before the nesting depths are made
    tc_eligible = _any_descendant(eligible, parent, by_depth(parent)[::-1])
    return Launches(call=call, launcher=launcher, parent=parent, tc_eligible=tc_eligible, tensor_cores=tensor_cores)


def device_times(ops: pd.DataFrame, launched: Launches) -> DeviceTimes:
    """Each framework op's device self / total time and their tensor-core parts (DeviceTimes): the durations of
    the executions it launched, summed on the op, then up its parents."""
    dur = ops["dur_ns"].to_numpy()
    order = by_depth(launched.parent)[::-1]  # deepest first: children before their parents
    device_self, device_total = _own_and_total(_launched_time(launched.launcher, dur), launched.parent, order)
    tc_self, tc_total = _own_and_total(
        _launched_time(launched.launcher, dur, launched.tensor_cores), launched.parent, order
    )
    return DeviceTimes(
        device_self_ns=device_self, device_total_ns=device_total, tc_self_ns=tc_self, tc_total_ns=tc_total
    )


def _own_and_total(own: np.ndarray, parent: np.ndarray, order: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(own, own with its descendants'), in spill files when the run is spilled, their pages handed back: the op
    tables read them a window at a time, and four int64 per op are too many to keep resident."""
    total = with_descendants(own, parent, order)
    spill.drop_resident()
    return own, total


def framework_ops(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row is a framework op (the rows the op figures are for), made a chunk of rows at a time (in a
    spill file when big)."""
    device, category = ops["device"], ops["category"]
    return spill.chunked(
        len(ops),
        bool,
        lambda at: (device.iloc[at] == "cpu").to_numpy() & is_in(category.iloc[at], FRAMEWORK_CATEGORIES),
    )


def _owners(ops: pd.DataFrame, on_host: np.ndarray, framework: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, parent) per row: a host row's innermost enclosing-or-itself framework op, and a framework
    op's innermost enclosing framework op (other rows -1), by nesting on each host thread. Row positions
    (`position_dtype`: half the memory of int64), made a chunk of host rows at a time into spill files when big."""
    n = len(ops)
    host = positions_where(on_host)
    nested_in = _host_nesting(ops, host)
    is_framework = spill.gathered(framework, host)
    owner = spill.chunked(len(host), host.dtype, lambda at: _framework_owner(at, nested_in, is_framework))
    full_owner, full_parent = spill.filled(n, host.dtype, -1), spill.filled(n, host.dtype, -1)
    for at in spill.chunks(len(host)):
        own, up, rows, framework_at = owner[at], nested_in[at], host[at], is_framework[at]
        full_owner[rows] = np.where(own >= 0, host[np.maximum(own, 0)], -1)
        above = np.where(up >= 0, owner[np.maximum(up, 0)], -1)[framework_at]
        full_parent[rows[framework_at]] = np.where(above >= 0, host[np.maximum(above, 0)], -1)
        spill.drop_resident()
    return full_owner, full_parent


def _framework_owner(at: slice, nested_in: np.ndarray, is_framework: np.ndarray) -> np.ndarray:
    """The owners of the host rows at positions `at` (in the host rows): itself when a framework op, else the
    innermost framework op enclosing it, -1 when none."""
    owner = np.where(is_framework[at], np.arange(at.start, at.stop), nested_in[at])
    pending = np.flatnonzero(owner >= 0)
    pending = pending[~is_framework[owner[pending]]]
    while pending.size:  # climb from a non-framework container (a runtime call) to its framework op
        owner[pending] = nested_in[owner[pending]]
        pending = pending[owner[pending] >= 0]
        pending = pending[~is_framework[owner[pending]]]
    return owner


def _host_nesting(ops: pd.DataFrame, host: np.ndarray) -> np.ndarray:
    """Each of the host rows `host`'s innermost enclosing host row on its thread (a position in `host`, int64 in a
    spill file when big), -1 at a root."""
    codes, _ = codes_and_labels(ops["stream"])  # the whole column's codes: a row filter of it would copy its index
    return enclosing_parents(spill.gathered(codes, host), *op_times(ops, host))


def _calls_by_id(correlation: np.ndarray, runtime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runtime calls' correlation ids, ascending, and their rows, of equal ids the first row first (spilled
    when big): sorted only when the calls are not in id order already (a trace's are)."""
    calls = positions_where(runtime)
    ids = spill.gathered(correlation, calls)
    if not ascending(ids):
        by_id = spill.spilled(np.argsort(ids, kind="stable"))
        calls, ids = spill.gathered(calls, by_id), spill.gathered(ids, by_id)
    return ids, calls


def _call_with_id(correlation: np.ndarray, ids: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """The row of the runtime call with each correlation id (-1 when no call has it; of two calls with one id,
    the first), from `_calls_by_id`."""
    if not len(ids):
        return np.full(len(correlation), -1)
    at = np.clip(np.searchsorted(ids, correlation), 0, len(ids) - 1)
    return np.where(ids[at] == correlation, calls[at], -1)


def _launched_time(launcher: np.ndarray, dur: np.ndarray, which: Optional[np.ndarray] = None) -> np.ndarray:
    """Per row, the summed durations of the executions it launched itself (of those `which` marks): int64, summed
    a chunk of rows at a time into a spill file when big."""
    out = spill.filled(len(launcher), np.int64, 0)
    for at in spill.chunks(len(launcher)):
        to = launcher[at]
        mine = (to >= 0) if which is None else which[at] & (to >= 0)
        np.add.at(out, to[mine], dur[at][mine])
    return out


def _eligible_names(names: pd.Series) -> np.ndarray:
    return text_matches(names, TENSOR_CORE_ELIGIBLE_OPS.__contains__)


def with_descendants(own: np.ndarray, parent: np.ndarray, order: list[np.ndarray]) -> np.ndarray:
    """Per node, `own` summed over it and every node nested in it (`parent`: each node's parent, -1 at a root): the
    pieces of `order` deepest first (`by_depth`'s reversed), each added into its parents, in a spill file when big."""
    total = spill.chunked(len(own), own.dtype, lambda at: own[at])
    for rows in spill.dropping(order):
        np.add.at(total, parent[rows], total[rows])
    return total


def _any_descendant(flag: np.ndarray, parent: np.ndarray, order: list[np.ndarray]) -> np.ndarray:
    out = spill.chunked(len(flag), bool, lambda at: flag[at])
    for rows in spill.dropping(order):
        out[parent[rows[out[rows]]]] = True
    return out

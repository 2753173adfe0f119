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

from profiler.analysis.tensor_cores import TENSOR_CORE_ELIGIBLE_OPS, tensor_core_kernels
from profiler.kernels.grouping import codes_and_labels, is_in, text_matches
from profiler.kernels.nesting import enclosing_parents, nesting_depths, position_dtype
from profiler.model import DEVICE_WORK_CATEGORIES, op_times
from profiler.spill import drop_resident, spilled

#: Host op categories that are framework ops (an op a user wrote or called), which own launches.
FRAMEWORK_CATEGORIES = ("host", "user")
#: Device categories that are kernels (the plugin's "Kernel" events: compute and collective kernels).
KERNEL_CATEGORIES = ("compute", "comm")


class _RowArrays:
    """A dataclass of arrays, one value per row of the ops table."""

    def take(self, rows: slice | np.ndarray) -> Self:
        """The figures of some rows of the ops table (a window, a selection), in their order."""
        return type(self)(**{name: values[rows] for name, values in vars(self).items()})


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
    (no device, or a source without correlation ids)."""
    on_host = (ops["device"] == "cpu").to_numpy()
    correlation = ops["correlation"].to_numpy()
    category = ops["category"]
    executions = is_in(category, DEVICE_WORK_CATEGORIES) & ~on_host & (correlation >= 0)
    runtime = (category == "runtime").to_numpy() & on_host & (correlation >= 0)
    if not executions.any() or not runtime.any():
        return None
    framework = framework_ops(ops)
    owner, parent = _owners(ops, on_host, framework)
    position = position_dtype(len(ops))  # the row arrays are kept with the analysis: half the memory of int64
    call = np.full(len(ops), -1, dtype=position)
    call[executions] = _calls(correlation, runtime, np.flatnonzero(executions))
    launcher = np.where(call >= 0, owner[np.maximum(call, 0)], -1).astype(position)
    del owner

    tensor_cores = np.zeros(len(ops), dtype=bool)
    kernels = np.flatnonzero(executions & is_in(category, KERNEL_CATEGORIES))
    tensor_cores[kernels] = tensor_core_kernels(ops["name"].iloc[kernels])
    tc_self = _launched_time(launcher, ops["dur_ns"].to_numpy(), tensor_cores)
    eligible = framework & _eligible_names(ops["name"]) | (tc_self > 0)
    del tc_self
    # kept for the whole analysis: in spill files when the run is spilled, their pages and the op columns' read so
    # far handed back before the nesting's own arrays are made
    call, launcher, parent, tensor_cores = (spilled(a) for a in (call, launcher, parent, tensor_cores))
    drop_resident()
    tc_eligible = spilled(_any_descendant(eligible, parent, _deepest_first(parent, framework)))
    return Launches(call=call, launcher=launcher, parent=parent, tc_eligible=tc_eligible, tensor_cores=tensor_cores)


def device_times(ops: pd.DataFrame, launched: Launches) -> DeviceTimes:
    """Each framework op's device self / total time and their tensor-core parts (DeviceTimes): the durations of
    the executions it launched, summed on the op, then up its parents."""
    dur = ops["dur_ns"].to_numpy()
    order = _deepest_first(launched.parent, framework_ops(ops))
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
    total = spilled(_with_descendants(own, parent, order))
    own = spilled(own)
    drop_resident()
    return own, total


def framework_ops(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row is a framework op (the rows the op figures are for)."""
    return (ops["device"] == "cpu").to_numpy() & is_in(ops["category"], FRAMEWORK_CATEGORIES)


def _owners(ops: pd.DataFrame, on_host: np.ndarray, framework: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, parent) per row: a host row's innermost enclosing-or-itself framework op, and a framework
    op's innermost enclosing framework op (other rows -1), by nesting on each host thread. Row positions
    (`position_dtype`: half the memory of int64)."""
    host = np.flatnonzero(on_host).astype(position_dtype(len(ops)))
    nested_in = _host_nesting(ops, host)
    is_framework = framework[host]
    owner = np.where(is_framework, np.arange(len(host), dtype=host.dtype), nested_in)
    pending = np.flatnonzero(owner >= 0)
    pending = pending[~is_framework[owner[pending]]]
    while pending.size:  # climb from a non-framework container (a runtime call) to its framework op
        owner[pending] = nested_in[owner[pending]]
        pending = pending[owner[pending] >= 0]
        pending = pending[~is_framework[owner[pending]]]
    above = np.where(nested_in >= 0, owner[np.maximum(nested_in, 0)], -1)
    del nested_in
    full_owner = np.full(len(ops), -1, dtype=host.dtype)
    full_parent = np.full(len(ops), -1, dtype=host.dtype)
    full_owner[host] = np.where(owner >= 0, host[np.maximum(owner, 0)], -1)
    del owner
    full_parent[host[is_framework]] = np.where(above >= 0, host[np.maximum(above, 0)], -1)[is_framework]
    return full_owner, full_parent


def _host_nesting(ops: pd.DataFrame, host: np.ndarray) -> np.ndarray:
    """Each of the host rows `host`'s innermost enclosing host row on its thread (a position in `host`), -1 at
    a root; its inputs dropped on return (a big trace's host ops are millions)."""
    codes, _ = codes_and_labels(ops["stream"])  # the whole column's codes: a row filter of it would copy its index
    return enclosing_parents(codes[host], *op_times(ops, host)).astype(host.dtype)


def _calls(correlation: np.ndarray, runtime: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The row of the runtime call with each row's correlation id (-1 when no call has it; of two
    calls with one id, the first)."""
    calls = np.flatnonzero(runtime)
    ids, first = np.unique(correlation[calls], return_index=True)
    at = np.clip(np.searchsorted(ids, correlation[rows]), 0, len(ids) - 1)
    return np.where(ids[at] == correlation[rows], calls[first[at]], -1)


def _launched_time(launcher: np.ndarray, dur: np.ndarray, which: Optional[np.ndarray] = None) -> np.ndarray:
    """Per row, the summed durations of the executions it launched itself (of those `which` marks)."""
    rows = np.flatnonzero((launcher >= 0) if which is None else which & (launcher >= 0))
    return sums_by(launcher[rows], dur[rows], len(launcher))


def sums_by(to: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per index 0..n-1: the sum of `values` whose `to` is that index."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, to, values)
    return out


def _eligible_names(names: pd.Series) -> np.ndarray:
    return text_matches(names, TENSOR_CORE_ELIGIBLE_OPS.__contains__)


def _deepest_first(parent: np.ndarray, framework: np.ndarray) -> list[np.ndarray]:
    """The framework ops with a parent, by nesting depth, deepest first (children before parents)."""
    depth = nesting_depths(parent)
    rows = np.flatnonzero(framework & (parent >= 0))
    return [rows[depth[rows] == d] for d in range(int(depth[rows].max(initial=0)), 0, -1)]


def _with_descendants(own: np.ndarray, parent: np.ndarray, order: list[np.ndarray]) -> np.ndarray:
    total = own.copy()
    for rows in order:
        np.add.at(total, parent[rows], total[rows])
    return total


def _any_descendant(flag: np.ndarray, parent: np.ndarray, order: list[np.ndarray]) -> np.ndarray:
    out = flag.copy()
    for rows in order:
        out[parent[rows[out[rows]]]] = True
    return out

"""Kineto's memory records and counter events as a `Run`'s `counters` and `allocations` tables.

A "[memory]" instant (profile_memory=True) is one allocation or free of the framework's allocator
(`allocations`) and, after it, the allocator's allocated and reserved totals on that device (two rows of
`counters`); a Chrome "C" event is a sample of one or more counter series. A big trace holds millions of
them, so nothing is kept per row in memory: numbers go into spilled arrays a chunk of rows at a time, text
columns are categoricals (a code per row, spilled) whose categories are in sorted order, so a group-by or a
sort on them sees the order the text itself has.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.importers.kineto_events import SOURCE, Clock, Coded, EventColumns, combine, json_number, to_int
from profiler.kernels.grouping import occurring_sorted
from profiler.kernels.nesting import ascending, bucketed_lexsort, positions_passing
from profiler.model import ALLOCATION_COLUMNS, COUNTER_COLUMNS

#: Kineto's "Device Type" of a memory event (c10::DeviceType) -> the name of the memory's device.
_MEMORY_DEVICE_PREFIX = {0: "host", 1: "cuda"}
#: The counters' text columns (categoricals); the others are numbers.
_COUNTER_TEXTS = ("source", "device", "metric")


def counters(cols: EventColumns, counter_rows: np.ndarray, allocations: pd.DataFrame, clock: Clock) -> pd.DataFrame:
    """The counters (model.COUNTER_COLUMNS) of the "[memory]" instants (their totals, from `allocations`: this
    module's table of them) and of the "C" events `counter_rows`, in (time, device, metric) order (a stable sort a
    range of times at a time: `bucketed_lexsort`), each column put in that order into a spilled array."""
    parts = [*_memory_counters(allocations), _chrome_counters(cols, counter_rows, clock)]
    texts = {column: _sorted_values(Coded.concat(*[part[column] for part in parts])) for column in _COUNTER_TEXTS}
    numbers = {column: spill.concatenated([part[column] for part in parts]) for column in ("time_ns", "value")}
    order = bucketed_lexsort([texts["metric"].codes, texts["device"].codes, numbers["time_ns"]])
    columns: dict[str, Any] = {column: _categorical(texts[column], order) for column in _COUNTER_TEXTS}
    columns.update({column: spill.gathered(values, order) for column, values in numbers.items()})
    return pd.DataFrame(columns, columns=list(COUNTER_COLUMNS), copy=False)


def allocations(cols: EventColumns, rows: np.ndarray, thread_of: np.ndarray, clock: Clock) -> pd.DataFrame:
    """Every allocation and free of the "[memory]" instants `rows` (model.ALLOCATION_COLUMNS), in time order: the
    numbers read a chunk of rows at a time (the args a piece at a time) into spilled arrays, then put in that order
    when they are not in it already (a trace writes them in it: no sort and no gather then)."""
    numbers = {
        "tid": spill.gathered(thread_of, rows),
        "time_ns": spill.chunked(len(rows), np.int64, lambda at: clock.ns(cols.ts_us[rows[at]]), along=rows),
        "bytes": _arg_numbers(cols, rows, "Bytes", lambda v: to_int(v, default=0), np.int64),
        "addr": _arg_numbers(cols, rows, "Addr", lambda v: to_int(v, default=-1), np.int64),
        "allocated_bytes": _arg_numbers(cols, rows, "Total Allocated", _json_numbers, np.float64),
        "reserved_bytes": _arg_numbers(cols, rows, "Total Reserved", _json_numbers, np.float64),
    }
    order = None if ascending(numbers["time_ns"]) else bucketed_lexsort([numbers["time_ns"]])
    columns: dict[str, Any] = {"device": _categorical(_sorted_values(_memory_devices(cols, rows)), order)}
    columns.update({column: _in_order(values, order) for column, values in numbers.items()})
    return pd.DataFrame(columns, columns=list(ALLOCATION_COLUMNS), copy=False)


def _memory_counters(allocations: pd.DataFrame) -> list[dict[str, Any]]:
    """allocated_bytes / reserved_bytes after every allocation Kineto recorded (profile_memory=True), per device
    ("host" for CPU memory, "cuda:N"): the columns of each metric, its rows whose value is a number, in the
    allocations' (time) order. Read from the allocations' own columns: the events' args are read once."""
    device = allocations["device"].array
    coded = Coded(device.codes, list(device.categories))
    time_ns = allocations["time_ns"].to_numpy()
    return [
        _metric_rows(metric, coded, time_ns, allocations[metric].to_numpy())
        for metric in ("allocated_bytes", "reserved_bytes")
    ]


def _metric_rows(metric: str, device: Coded, time_ns: np.ndarray, value: np.ndarray) -> dict[str, Any]:
    """The counter columns of one metric of the "[memory]" instants, its rows whose value is a number: the numbers
    and the device's codes gathered into spilled arrays."""
    kept = positions_passing(len(value), lambda at: ~np.isnan(value[at]))
    return {
        "source": Coded.constant(SOURCE, len(kept)),
        "device": Coded(spill.gathered(device.codes, kept), device.values),
        "metric": Coded.constant(metric, len(kept)),
        "time_ns": spill.gathered(time_ns, kept),
        "value": spill.gathered(value, kept),
    }


def _chrome_counters(cols: EventColumns, rows: np.ndarray, clock: Clock) -> dict[str, Any]:
    """The counter columns of "C" events, a row per numeric series value: metric "<event name>.<series>"."""
    metric, time_ns, value = [], [], []
    events = zip(
        cols.name[rows].decoded(), clock.ns(spill.taken(cols.ts_us, rows)).tolist(), cols.other_args.take(rows)
    )
    for name, t, args in events:
        for series, v in args.items() if isinstance(args, dict) else ():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                try:
                    number = float(v)
                except OverflowError:  # an integer too large for a float: not a sample
                    continue
                metric.append(f"{name}.{series}")
                time_ns.append(t)
                value.append(number)
    return {
        "source": Coded.constant(SOURCE, len(metric)),
        "device": Coded.constant("host", len(metric)),
        "metric": Coded.of(metric),
        "time_ns": np.array(time_ns, dtype=np.int64),
        "value": np.array(value, dtype=np.float64),
    }


def _arg_numbers(cols: EventColumns, rows: np.ndarray, key: str, numbers: Callable, dtype: Any) -> np.ndarray:
    """numbers(the values of args[key]) of the non-complete events `rows`, read a piece of rows at a time (a list of
    Python values per piece, ~100 bytes a row: ~100 MB for a chunk) into a spilled array."""
    return spill.chunked(len(rows), dtype, lambda at: numbers(cols.arg(key, rows[at])), spill.piece_rows(), rows)


def _json_numbers(values: list) -> np.ndarray:
    """json_number of each value, as float64."""
    return np.array([json_number(v) for v in values], dtype=np.float64)


def _memory_devices(cols: EventColumns, rows: np.ndarray) -> Coded:
    """The device of each "[memory]" instant (`_memory_device` of its Device Type / Id args), coded a piece of rows
    at a time (two lists of Python values per piece)."""

    def devices(at: slice) -> Coded:
        dev_type = to_int(cols.arg("Device Type", rows[at]), default=-1)
        dev_id = to_int(cols.arg("Device Id", rows[at]), default=-1)
        return combine(Coded.of(dev_type), Coded.of(dev_id)).mapped(lambda pair: _memory_device(*pair))

    return Coded.chunked(len(rows), devices, spill.piece_rows(), along=rows)


def _memory_device(dev_type: int, dev_id: int) -> str:
    prefix = _MEMORY_DEVICE_PREFIX.get(dev_type, f"device_type_{dev_type}")
    return prefix if prefix == "host" else f"{prefix}:{dev_id}"


def _sorted_values(column: Coded) -> Coded:
    """The column with the values that occur in it, in sorted order (a code's order is its value's), its codes in
    the type pandas keeps for that many categories, recoded a chunk of rows at a time into a spilled array."""
    return Coded(*occurring_sorted(column.codes, column.values))


def _categorical(column: Coded, order: Optional[np.ndarray]) -> pd.Categorical:
    """The column's rows in `order` (None: as they are) as a categorical of its values (its codes gathered into a
    spilled array, which pandas keeps as they are)."""
    return pd.Categorical.from_codes(_in_order(column.codes, order), categories=pd.Index(column.values, dtype=object))


def _in_order(values: np.ndarray, order: Optional[np.ndarray]) -> np.ndarray:
    """values[order] gathered a chunk at a time into a spilled array (spill.gathered), or `values` when `order` is
    None (the rows already in that order)."""
    return values if order is None else spill.gathered(values, order)

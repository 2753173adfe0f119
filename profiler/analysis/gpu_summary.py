"""The GPU summary of the TensorBoard plugin's overview, per device (report_{rank}.json `devices[]`,
docs/tensorboard.md).

Over the steps as the plugin delimits them (analysis/step_activity.py), from the first step's start
to the last one's end:

- utilization_pct: the share of that window in which at least one kernel ran;
- sm_efficiency_pct: the plugin's "Est. SM Efficiency": at each instant the running kernels' blocks
  per SM summed and capped at 1, averaged over the window;
- achieved_occupancy_pct: "Est. Achieved Occupancy", the kernels' estimated occupancy weighted by
  their time in the window;
- tensor_core_pct: "Kernel Time using Tensor Cores", the tensor-core kernels' share of kernel time
  in the window (analysis/tensor_cores.py);
- tc_eligible_pct: the share of the kernel time launched by ops that is launched by the innermost
  tensor-core eligible ops (the plugin's "Kernels with N% time are launched by Tensor Cores eligible
  operators").

Figures a device's kernels do not carry (no blocks per SM, no occupancy) are NaN.
Pure: the ops, their launches and the steps in, one row per device out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.kernels import kernel_rows
from profiler.analysis.launches import Launches
from profiler.analysis.ops import gathered_column
from profiler.analysis.tensor_cores import tensor_core_kernels
from profiler.formats.columns import GPU_SUMMARY_COLUMNS
from profiler.kernels.grouping import code_counts, codes_and_labels
from profiler.kernels.intervals import RunningUnion, in_order, start_ordered
from profiler.kernels.nesting import positions_passing
from profiler.model import op_times
from profiler.spill import chunked, chunks, drop_resident, empty, filled, gathered

#: Kernels read at a time by `_device_summary` (its temporaries: ~10 arrays of 8 B per kernel of a chunk).
SUMMARY_CHUNK = 1 << 16


def gpu_summary(ops: pd.DataFrame, launched: Launches | None, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per device with kernels: `device` and GPU_SUMMARY_COLUMNS. The kernels' rows, names and devices are
    read a chunk at a time (in spill files when the run is spilled): no whole-table temporaries."""
    rows = positions_passing(len(ops), lambda at: kernel_rows(ops.iloc[at]))
    if rows.size == 0 or steps.empty:
        return pd.DataFrame(columns=["device", *GPU_SUMMARY_COLUMNS])
    window = (int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    names = ops["name"]
    tensor_cores = chunked(len(rows), bool, lambda at: tensor_core_kernels(names.iloc[rows[at]]), along=rows)
    codes, labels = codes_and_labels(pd.Series(gathered_column(ops["device"], rows), copy=False))
    bottom = _innermost_eligible(launched, len(ops)) if launched is not None else None
    present = np.flatnonzero(code_counts(codes, len(labels))) - 1  # np.unique's, a chunk at a time
    out = []
    for device, code in sorted((str(labels[code]), code) for code in present):
        # one device: every kernel, no copy of their rows
        mine = (rows, tensor_cores) if len(present) == 1 else _of_code(codes, code, rows, tensor_cores)
        out.append({"device": device, **_device_summary(ops, *mine, window, launched, bottom)})
    return pd.DataFrame(out, columns=["device", *GPU_SUMMARY_COLUMNS])


def _of_code(codes: np.ndarray, code: int, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """The values of `columns` where `codes` is `code`, gathered a chunk at a time (into spill files when big)."""
    at = positions_passing(len(codes), lambda c: codes[c] == code)
    return tuple(gathered(column, at) for column in columns)


def _device_summary(
    ops: pd.DataFrame,
    rows: np.ndarray,
    tensor_cores: np.ndarray,
    window: tuple[int, int],
    launched: Launches | None,
    bottom: np.ndarray | None,
    chunk: int = SUMMARY_CHUNK,
) -> dict[str, float]:
    """GPU_SUMMARY_COLUMNS of one device's kernels (their rows in `ops`, in order), read a chunk of kernels at a
    time: the sums are of integers (exact in any order) but the occupancy's weighted sum, whose terms are kept
    whole, in order, in a spill file when spilling, and summed at once, as they were."""
    dur_ns = ops["dur_ns"].to_numpy()
    blocks_per_sm, occupancy_pct = ops["blocks_per_sm"].to_numpy(), ops["occupancy_pct"].to_numpy()
    start, end = op_times(ops, rows)
    weighted = empty(len(rows), np.float64)  # occupancy x time in the window of the kernels with both
    n_weighted = weight = in_window = tc_in_window = launched_ns = bottom_ns = 0
    for at in chunks(len(rows), chunk):
        clipped = np.maximum(np.minimum(end[at], window[1]) - np.maximum(start[at], window[0]), 0)
        in_window += int(clipped.sum())
        tc_in_window += int(clipped[tensor_cores[at]].sum())
        occupancy = occupancy_pct[rows[at]]
        known = np.isfinite(occupancy) & (occupancy >= 0) & (clipped > 0)
        n_known = int(known.sum())
        weighted[n_weighted : n_weighted + n_known] = occupancy[known] * clipped[known].astype(np.float64)
        n_weighted += n_known
        weight += int(clipped[known].sum())
        if launched is not None:
            launcher = launched.launcher[rows[at]]
            by_op = launcher >= 0
            dur = dur_ns[rows[at]][by_op]
            launched_ns += int(dur.sum())
            bottom_ns += int(dur[bottom[launcher[by_op]]].sum())
        drop_resident()
    return {
        "utilization_pct": _pct(_covered(start, end, window, chunk), window[1] - window[0]),
        "sm_efficiency_pct": _sm_efficiency(start, end, gathered(blocks_per_sm, rows), window),
        # the weights are integers: their float sum was exact, as the int one is
        "achieved_occupancy_pct": float(weighted[:n_weighted].sum() / weight) if n_weighted else float("nan"),
        "tensor_core_pct": _pct(tc_in_window, in_window),
        "tc_eligible_pct": _pct(bottom_ns, launched_ns) if launched is not None else float("nan"),
    }


def _covered(start: np.ndarray, end: np.ndarray, window: tuple[int, int], chunk: int) -> int:
    """How long the intervals cover of `window` (covered_ns), their union taken a chunk at a time."""
    busy = RunningUnion((np.array([window[0]]), np.array([window[1]])))
    for at in start_ordered(start, chunk):
        busy.add(start[at], end[at])
    return busy.totals()[1]


def _pct(part: float, whole: float) -> float:
    return float(part) * 100.0 / float(whole) if whole > 0 else 0.0


def _sm_efficiency(start: np.ndarray, end: np.ndarray, blocks: np.ndarray, window: tuple[int, int]) -> float:
    """The window's mean of min(1, sum of the running kernels' blocks per SM), in % (NaN without the figure)."""
    known = np.isfinite(blocks) & (blocks > 0)
    if not known.any() or window[1] <= window[0]:
        return float("nan")
    filled = sm_filled_ns(start, end, blocks, np.array([window[0]]), np.array([window[1]]))[0]
    return float(filled * 100.0 / (window[1] - window[0]))


#: Kernels swept at a time by `sm_filled_ns` (its copies: ~100 B per kernel of a chunk, not of the run).
SWEEP_CHUNK = 1 << 17


def sm_filled_ns(
    start: np.ndarray,
    end: np.ndarray,
    blocks: np.ndarray,
    w_start: np.ndarray,
    w_end: np.ndarray,
    chunk: int = SWEEP_CHUNK,
) -> np.ndarray:
    """Per window [w_start, w_end), the time the device's SMs are filled (ns): the integral of min(1, sum
    of the running kernels' blocks per SM), the plugin's Est. SM Efficiency times the window. Kernels
    without the figure fill nothing.

    The kernels' starts and ends are swept in time order a block of time at a time (`chunk` kernels in start
    order, with the ends that fall in their block), the level and the integral carried from block to block:
    the same additions in the same order as one sweep of them all, so the same floats. Kernels not in start
    order are swept as one block."""
    known = np.isfinite(blocks) & (blocks > 0)
    if not known.any():
        return np.zeros(len(w_start))
    queries = np.concatenate([np.asarray(w_start, dtype=np.int64), np.asarray(w_end, dtype=np.int64)])
    integral = np.zeros(len(queries))  # up to each query time
    n = len(start)
    chunk = chunk if in_order(start) else n
    pending_end, pending_blocks = end[:0], blocks[:0]  # kernels started in an earlier block, not ended in it
    level, first_time, last = 0.0, None, None  # the running level; the first event's time; the last event's
    lo = 0
    while lo < n:
        hi = n if lo + chunk >= n else int(np.searchsorted(start, start[lo + chunk], "right"))
        mine = known[lo:hi]
        ends = np.concatenate([pending_end, end[lo:hi][mine]])
        ends_blocks = np.concatenate([pending_blocks, blocks[lo:hi][mine]])
        now = ends < start[hi] if hi < n else np.ones(len(ends), dtype=bool)  # before the next block's first start
        pending_end, pending_blocks = ends[~now], ends_blocks[~now]
        times = np.concatenate([start[lo:hi][mine], ends[now]])
        change = np.concatenate([blocks[lo:hi][mine], -ends_blocks[now]]).astype(np.float64)
        lo = hi
        if not len(times):
            continue
        order = np.argsort(times, kind="stable")
        times = times[order]
        fill = np.cumsum(np.concatenate([[level], change[order]]))[1:]  # the level after each event
        level = fill[-1]
        np.minimum(np.maximum(fill, 0.0, out=fill), 1.0, out=fill)
        start_at = 0.0 if last is None else last[2] + last[1] * (times[0] - last[0])
        before = np.cumsum(np.concatenate([[start_at], fill[:-1] * np.diff(times)]))  # the integral up to each event
        first_time = times[0] if first_time is None else first_time
        last = (times[-1], fill[-1], before[-1])
        here = queries >= times[0]  # a query's integral is from the last block starting at or before it
        at = np.searchsorted(times, queries[here], "right") - 1
        integral[here] = before[at] + fill[at] * (queries[here] - times[at])
    integral[queries <= first_time] = 0.0
    integral[queries >= last[0]] = last[2]
    return integral[len(queries) // 2 :] - integral[: len(queries) // 2]


def _innermost_eligible(launched: Launches, n: int) -> np.ndarray:
    """The tensor-core eligible ops none of whose descendants is eligible (the children found a chunk of ops at a
    time: arrays of the ops' size, made a chunk at a time into spill files when big)."""
    has_eligible_child = filled(n, bool, False)
    for at in chunks(n, SUMMARY_CHUNK):
        parent = launched.parent[at]
        has_eligible_child[parent[launched.tc_eligible[at] & (parent >= 0)]] = True
    return chunked(n, bool, lambda at: launched.tc_eligible[at] & ~has_eligible_child[at])

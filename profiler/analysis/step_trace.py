"""The step trace: per step, iteration gap / fp_bp / tail, all-reduce, data wait and profiler overhead.

    step start -- iteration gap -- fp start -- forward+backward -- bp end -- tail -- step end

fp start and bp end come, in order of preference, from the source itself (a device's step
points, hooks), marks (`mark("fp_start")`), forward / backward phases (all `marked`), or are
inferred from the ops and spans recorded on the stepping thread inside the step (`inferred`);
with none of these they are `missing` and the split puts everything into fp_bp.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

import numpy as np
import pandas as pd

from profiler.analysis.device_time import busy_in_windows, comm_in_windows
from profiler.analysis.ops import op_windows
from profiler.formats.columns import DEVICE_BUSY, DEVICE_IDLE, STEP_TRACE_COLUMNS
from profiler.kernels.intervals import assign_steps, covered_ns, union
from profiler.kernels.nesting import positions_passing
from profiler.model import op_times

GAP_PHASES = ("data",)  # host work that belongs to the iteration gap
TAIL_PHASES = ("tail", "optimizer", "all_reduce")  # work after the last backward compute
#: torch.profiler's own range around each DataLoader fetch ("enumerate(DataLoader)#_SingleProcess
#: DataLoaderIter.__next__"): measured data wait, like profview's `data` phase.
TORCH_DATA_SPAN = "enumerate(DataLoader)#"


def per_step(times: np.ndarray, values: np.ndarray, steps: pd.DataFrame, how: str, missing: int = -1) -> np.ndarray:
    """Per step (in `steps` order), `how` ("min" / "max" / "sum") of the values whose times fall
    inside it; `missing` for steps with none."""
    return reduce_per_step(step_positions(assign_steps(times, steps), steps), values, len(steps), how, missing)


def reduce_per_step(pos: np.ndarray, values: np.ndarray, n_steps: int, how: str, missing: int = -1) -> np.ndarray:
    """Per step row, `how` ("min" / "max" / "sum") of the values at those positions (-1: none)."""
    ok = pos >= 0
    every = bool(ok.all())
    pos = pos if every else pos[ok]
    values = np.asarray(values, dtype=np.int64)
    values = values if every else values[ok]
    ufunc, neutral = {
        "min": (np.minimum, np.iinfo(np.int64).max),
        "max": (np.maximum, np.iinfo(np.int64).min),
        "sum": (np.add, 0),
    }[how]
    out = np.full(n_steps, neutral, dtype=np.int64)
    ufunc.at(out, pos, values)
    seen = np.bincount(pos, minlength=n_steps) > 0
    return np.where(seen, out, missing)


def step_positions(step_numbers: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Row of each step number in `steps` (-1 for -1 or unknown numbers)."""
    nums = steps["step"].to_numpy(dtype=np.int64)
    if len(nums) and bool(np.all(np.diff(nums) == 1)):  # consecutive numbers: plain arithmetic
        pos = step_numbers - nums[0]
        return np.where((step_numbers >= 0) & (pos < len(nums)) & (pos >= 0), pos, -1)
    return pd.Index(nums).get_indexer(step_numbers)


def marked_boundaries(
    steps: pd.DataFrame, spans: pd.DataFrame, instants: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """fp start / bp end per step from the source, marks and forward / backward phases (-1 when none)."""
    fp = steps["fp_start_ns"].to_numpy().copy()
    bp = steps["bp_end_ns"].to_numpy().copy()
    marks = instants[instants["kind"] == "mark"]
    fwd = spans[(spans["kind"] == "phase") & (spans["name"] == "forward")]
    bwd = spans[(spans["kind"] == "phase") & (spans["name"] == "backward")]
    fp_marks = marks.loc[marks["name"] == "fp_start", "time_ns"].to_numpy()
    bp_marks = marks.loc[marks["name"] == "bp_end", "time_ns"].to_numpy()
    fwd_start = fwd["start_ns"].to_numpy()
    fp_mark = _combine_min(per_step(fp_marks, fp_marks, steps, "min"), per_step(fwd_start, fwd_start, steps, "min"))
    bp_mark = np.maximum(
        per_step(bp_marks, bp_marks, steps, "max"),
        per_step(bwd["start_ns"].to_numpy(), (bwd["start_ns"] + bwd["dur_ns"]).to_numpy(), steps, "max"),
    )
    fp = np.where(fp >= 0, fp, fp_mark)
    bp = np.where(bp >= 0, bp, bp_mark)
    return fp, bp


def _combine_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise min ignoring -1 (absent)."""
    big = np.iinfo(np.int64).max
    m = np.minimum(np.where(a >= 0, a, big), np.where(b >= 0, b, big))
    return np.where(m == big, -1, m)


def inferred_boundaries(
    steps: pd.DataFrame,
    spans: pd.DataFrame,
    ops: pd.DataFrame,
    step_lane: str = "",
    step_tid: int = -1,
    data_wait: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64)),
) -> tuple[np.ndarray, np.ndarray]:
    """fp start / bp end per step from the compute recorded inside it (-1 when there is none).

    Compute = ops that do not start while the loop waits for data (`data_wait` intervals: the ops
    collating a batch are gap work), plus spans and phases that are neither gap work (data waits)
    nor tail work (`tail`, `optimizer`, `all_reduce`), on the stepping thread (when known). bp end is
    the last compute end before the step's first tail phase begins. Spans and ops are reduced
    separately, the ops a window of rows at a time (`host_op_windows`: min / max merge exactly).
    """
    sp = spans if step_tid < 0 else spans[spans["tid"] == step_tid]
    compute = sp[(~sp["name"].isin(GAP_PHASES + TAIL_PHASES) | (sp["kind"] != "phase")) & ~is_data_wait(sp)]
    tails = sp[(sp["kind"] == "phase") & sp["name"].isin(TAIL_PHASES)]
    tail_starts = tails["start_ns"].to_numpy()
    tail_start = per_step(tail_starts, tail_starts, steps, "min")
    limit = np.where(tail_start >= 0, tail_start, np.iinfo(np.int64).max)
    fp = bp = np.full(len(steps), -1, dtype=np.int64)
    for start, dur in chain([_start_dur(compute)], _host_op_windows(ops, step_lane)):  # a window at a time
        pos = step_positions(assign_steps(start, steps), steps)
        pos[_inside(start, *data_wait)] = -1  # collating a batch: gap work
        fp = _combine_min(fp, reduce_per_step(pos, start, len(steps), "min"))
        end = start + dur
        pos[end > limit[pos]] = -1  # ends after the step's tail began
        bp = np.maximum(bp, reduce_per_step(pos, end, len(steps), "max"))
    return fp, bp


def _inside(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the intervals [start, end)."""
    s, e = union(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
    k = np.searchsorted(s, times, side="right") - 1
    return (k >= 0) & (times < e[np.maximum(k, 0)]) if len(s) else np.zeros(len(times), dtype=bool)


def _start_dur(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return table["start_ns"].to_numpy(dtype=np.int64), table["dur_ns"].to_numpy(dtype=np.int64)


def _host_op_windows(ops: pd.DataFrame, step_lane: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """start / dur of the host ops on the stepping thread (all host ops when it is not known), a window of
    rows of the ops table at a time (`ops.op_windows`)."""
    for window, _ in op_windows(ops, None):
        host = (window["device"] == "cpu").to_numpy()
        if step_lane:
            host = host & (window["stream"] == step_lane).to_numpy()
        start, dur = _start_dur(window)
        yield (start, dur) if host.all() else (start[host], dur[host])


def step_trace(
    steps: pd.DataFrame,
    spans: pd.DataFrame,
    instants: pd.DataFrame,
    ops: pd.DataFrame,
    queues: pd.DataFrame,
    step_tid: int = -1,
    step_lane: str = "",
    origin_unix_ns: int = 0,
    step_source: str = "marked",
) -> pd.DataFrame:
    """One row per step with the phases of DESIGN.md's step trace; gap + fp_bp + tail == total exactly.

    `step_source` says where the step boundaries come from (`marked`, `inferred`, `whole_run`:
    analysis/steps.py) and is written on every row."""
    steps = steps.sort_values("step", kind="stable").reset_index(drop=True)
    start = steps["start_ns"].to_numpy()
    end = steps["end_ns"].to_numpy()
    dw_s, dw_e = data_wait_intervals(spans, queues, step_tid)
    fp_m, bp_m = marked_boundaries(steps, spans, instants)
    fp_i, bp_i = inferred_boundaries(steps, spans, ops, step_lane, step_tid, (dw_s, dw_e))
    fp_src = np.where(fp_m >= 0, "marked", np.where(fp_i >= 0, "inferred", "missing"))
    bp_src = np.where(bp_m >= 0, "marked", np.where(bp_i >= 0, "inferred", "missing"))
    fp = np.clip(np.where(fp_m >= 0, fp_m, np.where(fp_i >= 0, fp_i, start)), start, end)
    bp = np.clip(np.where(bp_m >= 0, bp_m, np.where(bp_i >= 0, bp_i, end)), fp, end)
    all_reduce, overlap = all_reduce_columns(spans, ops, start, end, fp, bp)
    wait = covered_ns(dw_s, dw_e, start, end)
    gap_wait = covered_ns(dw_s, dw_e, start, fp)
    op_count = op_counts(ops, steps)
    measured = data_wait_measured_steps(spans, queues, step_tid, op_count)
    ms = 1e-6
    return pd.DataFrame(
        {
            "step": steps["step"].to_numpy(),
            "start_ms": start * ms,
            "iteration_gap_ms": (fp - start) * ms,
            "fp_bp_ms": (bp - fp) * ms,
            "tail_ms": (end - bp) * ms,
            "total_ms": (end - start) * ms,
            "all_reduce_ms": all_reduce * ms,
            "all_reduce_overlap_ms": overlap * ms,
            "data_wait_ms": np.where(measured | ~measured.any(), wait * ms, np.nan),  # 0: nothing measured it
            "gap_host_ms": np.where(measured, (fp - start - gap_wait) * ms, np.nan),
            "op_count": op_count,
            "profiler_overhead_ms": steps["overhead_ns"].to_numpy() * ms,
            "start_unix_ns": start + origin_unix_ns,
            "fp_start_unix_ns": fp + origin_unix_ns,
            "bp_end_unix_ns": bp + origin_unix_ns,
            "end_unix_ns": end + origin_unix_ns,
            "fp_start_source": fp_src,
            "bp_end_source": bp_src,
            "step_source": np.full(len(steps), step_source, dtype=object),
            **device_columns(ops, start, end, op_count),
        },
        columns=STEP_TRACE_COLUMNS,
    )


def device_columns(
    ops: pd.DataFrame, start: np.ndarray, end: np.ndarray, op_count: np.ndarray
) -> dict[str, np.ndarray]:
    """device_busy_ms / device_idle_ms per step: how long any device executed something in the step,
    and the rest of the step. NaN (an empty cell) for steps without device data: no device in the
    run, no op captured in the step, or the step outside the devices' recorded time."""
    busy, recorded = busy_in_windows(ops, start, end)
    has_data = recorded & (op_count > 0)
    ms = 1e-6
    return {
        DEVICE_BUSY[0]: np.where(has_data, busy * ms, np.nan),
        DEVICE_IDLE[0]: np.where(has_data, (end - start - busy) * ms, np.nan),
    }


def all_reduce_columns(
    spans: pd.DataFrame, ops: pd.DataFrame, start: np.ndarray, end: np.ndarray, fp: np.ndarray, bp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """all_reduce / all_reduce_overlap (ns) per step. In a step where communication kernels ran on a
    device: their union in the step, and the part of it during which compute kernels ran too (the
    kernel-level overlap of HTA's get_comm_comp_overlap). Elsewhere, from the host: the union of
    all-reduce phases and communication ops in the step, and the part of it inside fp..bp."""
    ar_s, ar_e = _comm_intervals(spans, ops)
    device_comm, device_overlap = comm_in_windows(ops, start, end)
    on_device = device_comm > 0
    host_comm = covered_ns(ar_s, ar_e, start, end)
    host_overlap = covered_ns(ar_s, ar_e, fp, bp)
    return np.where(on_device, device_comm, host_comm), np.where(on_device, device_overlap, host_overlap)


def _comm_intervals(spans: pd.DataFrame, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """All-reduce phases and communication ops, as intervals (the comm ops found a chunk of rows at a time)."""
    ar = spans[(spans["kind"] == "phase") & (spans["name"] == "all_reduce")]
    category = ops["category"]
    comm_s, comm_e = op_times(ops, positions_passing(len(ops), lambda at: (category.iloc[at] == "comm").to_numpy()))
    s = np.concatenate([ar["start_ns"].to_numpy(), comm_s])
    e = np.concatenate([(ar["start_ns"] + ar["dur_ns"]).to_numpy(), comm_e])
    return s.astype(np.int64), e.astype(np.int64)


def is_data_wait(spans: pd.DataFrame) -> np.ndarray:
    """Spans that are data waits: `data` phases (each fetch of a ProfiledDataLoader, or the user's
    own) and torch.profiler's DataLoader ranges (TORCH_DATA_SPAN) of imported or captured traces."""
    return _data_phases(spans) | _torch_data_ranges(spans)


def _data_phases(spans: pd.DataFrame) -> np.ndarray:
    return ((spans["kind"] == "phase") & (spans["name"] == "data")).to_numpy()


def _torch_data_ranges(spans: pd.DataFrame) -> np.ndarray:
    names = spans["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # recordings: millions of spans, few names
        torch_data = np.append(names.cat.categories.astype(str).str.startswith(TORCH_DATA_SPAN), False)
        return torch_data[names.cat.codes.to_numpy()]
    return names.astype(str).str.startswith(TORCH_DATA_SPAN).to_numpy()


def data_wait_measured_steps(
    spans: pd.DataFrame, queues: pd.DataFrame, step_tid: int, op_count: np.ndarray
) -> np.ndarray:
    """Per step, whether anything measured the stepping thread's data wait in it. profview's own measures (`data`
    phases, gets from a probed queue, blocked or not) are recorded all along: every step. torch.profiler's
    DataLoader ranges exist only where op capture recorded (an ops_schedule's active steps): those steps (ops
    counted in them). Where not measured, the gap's split is unknown (gap_host_ms NaN; a wait measured in some steps
    only is NaN in the others, not 0: a mean over every step would count the unmeasured ones as never waiting)."""

    def on_thread(tid: pd.Series) -> np.ndarray:
        return (tid == step_tid).to_numpy() if step_tid >= 0 else np.ones(len(tid), dtype=bool)

    gets = (queues["event"] == "get").to_numpy() & on_thread(queues["tid"])
    stepping = on_thread(spans["tid"])
    if gets.any() or (_data_phases(spans) & stepping).any():
        return np.ones(len(op_count), dtype=bool)
    if (_torch_data_ranges(spans) & stepping).any():
        return np.asarray(op_count) > 0
    return np.zeros(len(op_count), dtype=bool)


def data_wait_intervals(spans: pd.DataFrame, queues: pd.DataFrame, step_tid: int) -> tuple[np.ndarray, np.ndarray]:
    """When the stepping thread waited for data: its data-wait spans (`is_data_wait`) and its blocked
    probed-queue gets ([get - wait, get]), as intervals."""
    data = spans[is_data_wait(spans)]
    gets = queues[(queues["event"] == "get") & (queues["wait_ns"] > 0)]
    if step_tid >= 0:
        data = data[data["tid"] == step_tid]
        gets = gets[gets["tid"] == step_tid]
    got = gets["time_ns"].to_numpy(np.int64)
    s = np.concatenate([data["start_ns"].to_numpy(np.int64), got - gets["wait_ns"].to_numpy(np.int64)])
    e = np.concatenate([(data["start_ns"] + data["dur_ns"]).to_numpy(np.int64), got])
    return s, e


def op_counts(ops: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Ops (host and device) that started in each step: 0 in the steps op capture skipped (counted a window of
    rows at a time, `ops.op_windows`)."""
    counts = np.zeros(len(steps), dtype=np.int64)
    for window, _ in op_windows(ops, None):
        pos = step_positions(window["step"].to_numpy(np.int64), steps)
        counts += np.bincount(pos[pos >= 0], minlength=len(steps))
    return counts

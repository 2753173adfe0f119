"""Is forward + backward launch-bound? host_bound (key `host_bound:launch`): most of forward + backward
is time between many tiny ops (per-op launch / dispatch overhead), measured on the device's ops, or
the framework's host ops on the stepping thread when there is no device. A device timeline with its
host's launches recorded answers this from the device instead (device_launch.py: the gaps' causes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.findings.base import Context, Finding, Question, Rule, StepWindow, Threshold, pct_text
from profiler.analysis.findings.device import DeviceTimeline
from profiler.analysis.ops import gathered_column
from profiler.kernels.intervals import WindowCoverage, start_ordered
from profiler.kernels.nesting import positions_passing
from profiler.kernels.selection import median

THRESHOLDS = {
    "host_idle_pct": Threshold(
        30.0, "share of forward + backward that no op covers (device idle / framework overhead)"
    ),
    "launch_short_op_us": Threshold(50.0, "median op duration below which ops count as tiny (launch-bound)"),
    "launch_ops_per_step": Threshold(
        50, "ops per step below which a run is not launch-bound (its idle time is something the ops do not show)"
    ),
}

#: Ops read at a time by the rule: the lane's rows found and gathered, their idle share, median duration and ops per
#: step (temporaries: a few arrays of 8 B per op of a chunk, not of the run).
LANE_CHUNK = 1 << 18

FIX = {
    "torch": "many tiny ops leave the device (or the core) waiting for the framework: use a larger batch, "
    "torch.compile(model) (or CUDA graphs) to remove per-op dispatch, and fuse small elementwise ops",
    "mindspore": "run in graph mode (set_context(mode=GRAPH_MODE)) with graph-kernel fusion, and a larger "
    "batch, so the host launches fewer, larger ops",
    "plain": "the step is dominated by per-op overhead: batch the work into fewer, larger array operations",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    ops: pd.DataFrame
    step_lane: str
    device: DeviceTimeline


def lane_rows(ops: pd.DataFrame, step_lane: str) -> tuple[np.ndarray, bool]:
    """The positions of the ops whose gaps mean idle time, and whether they are device ops: device ops when there
    are any, else framework host ops on the stepping thread; found a chunk of the table at a time (spilled when
    big: a boolean filter would copy every column of those rows)."""
    device = positions_passing(len(ops), lambda at: (ops["device"].iloc[at] != "cpu").to_numpy(), LANE_CHUNK)
    if len(device):
        return device, True
    return positions_passing(len(ops), lambda at: _on_lane(ops.iloc[at], step_lane), LANE_CHUNK), False


def _on_lane(ops: pd.DataFrame, step_lane: str) -> np.ndarray:
    """Whether each op of a window is a host op (not a marker) on the stepping thread (any thread without one)."""
    host = (ops["source"] != "marker").to_numpy()
    return host & (ops["stream"] == step_lane).to_numpy() if step_lane else host


def busy_ns(start: np.ndarray, dur: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """covered_ns(start, start + dur, q_start, q_end), the intervals read a chunk at a time in start order."""
    coverage = WindowCoverage(q_start, q_end)
    for at in start_ordered(start, LANE_CHUNK):
        coverage.add(start[at], start[at] + dur[at])
    return coverage.covered()


def ops_in_steps(step: np.ndarray, steps: np.ndarray) -> int:
    """How many of the ops' `step` are one of `steps`, counted a chunk at a time."""
    return sum(int(np.isin(step[at], steps).sum()) for at in spill.chunks(len(step), LANE_CHUNK))


@dataclass(frozen=True)
class LaneFigures:
    """What the rule weighs, of the lane's ops in the captured steps."""

    idle_share: float  # % of forward + backward no op covers
    idle_ms: float  # that time per step
    median_us: float  # the ops' median duration
    per_step: float  # ops in a captured step, per step
    on_device: bool  # the ops are device ops (else host ops of the stepping thread)


def lane_figures(data: Needs) -> Optional[LaneFigures]:
    """The lane's figures (None without ops or a forward + backward), read a chunk at a time from the ops' rows
    gathered into spill files: whole-array copies of a with_stack run's millions of host ops would grow with it."""
    if data.ops is None or not len(data.ops):
        return None
    rows, on_device = lane_rows(data.ops, data.step_lane)
    steps = data.steps.captured
    if not len(rows) or not len(steps):
        return None
    fp = np.round((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy() * 1e6).astype(np.int64)
    bp = fp + np.round(steps["fp_bp_ms"].to_numpy() * 1e6).astype(np.int64)
    window = float((bp - fp).sum())
    if window <= 0:
        return None
    start, dur, step = (gathered_column(data.ops[c], rows, LANE_CHUNK) for c in ("start_ns", "dur_ns", "step"))
    busy = busy_ns(start, dur, fp, bp).sum()
    in_steps = ops_in_steps(step, steps["step"].to_numpy())
    return LaneFigures(
        idle_share=100.0 * (1.0 - busy / window),
        idle_ms=(window - busy) / 1e6 / len(steps),
        median_us=median(dur, LANE_CHUNK) / 1e3,
        per_step=float(in_steps) / len(steps),
        on_device=on_device,
    )


def find(data: Needs, ctx: Context) -> list[Finding]:
    """host_bound: forward + backward is mostly time between tiny ops (launch / dispatch overhead)."""
    figures = None if data.device.explains_idle else lane_figures(data)
    if figures is None:
        return []
    idle_share, idle_ms, median_us, per_step = figures.idle_share, figures.idle_ms, figures.median_us, figures.per_step
    idle_limit, short = ctx.thresholds["host_idle_pct"], ctx.thresholds["launch_short_op_us"]
    if idle_share < idle_limit or median_us >= short or per_step < ctx.thresholds["launch_ops_per_step"]:
        return []
    where = "the device" if figures.on_device else f"thread {data.step_lane}"
    return [
        data.steps.captured_finding(
            "host_bound",
            idle_ms,
            key="host_bound:launch",
            title=f"Launch-bound: {pct_text(idle_share)} of forward + backward runs no op",
            evidence=(
                f"{per_step:.0f} ops per step with a median duration of {median_us:.1f} µs; ops on {where} cover "
                f"{100 - idle_share:.1f} % of forward + backward, {idle_ms:.2f} ms per step is framework / "
                f"launch overhead [{ctx.file('step_trace')}: fp_bp_ms; {ctx.file('timeline', 'json')}: ops]"
            ),
            threshold=(
                f"idle share of forward + backward >= {idle_limit:g} % (host_idle_pct), median op "
                f"< {short:g} µs (launch_short_op_us), >= {ctx.thresholds['launch_ops_per_step']:g} ops per step "
                "(launch_ops_per_step)"
            ),
            suggestion=FIX[ctx.framework],
            files=[ctx.file("step_trace"), ctx.file("timeline", "json")],
            metrics={"idle_share_pct": idle_share, "median_op_us": median_us, "ops_per_step": per_step},
        )
    ]


QUESTION = Question(
    name="launch", page="timeline", keys=("host_bound:launch",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

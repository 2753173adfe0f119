"""Is forward + backward launch-bound? host_bound (key `host_bound:launch`): most of forward + backward
is time between many tiny ops (per-op launch / dispatch overhead), measured on the device's ops, or
the framework's host ops on the stepping thread when there is no device. A device timeline with its
host's launches recorded answers this from the device instead (device_launch.py: the gaps' causes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, StepWindow, Threshold, pct_text
from profiler.analysis.findings.device import DeviceTimeline
from profiler.kernels.intervals import covered_ns

THRESHOLDS = {
    "host_idle_pct": Threshold(
        30.0, "share of forward + backward that no op covers (device idle / framework overhead)"
    ),
    "launch_short_op_us": Threshold(50.0, "median op duration below which ops count as tiny (launch-bound)"),
    "launch_ops_per_step": Threshold(
        50, "ops per step below which a run is not launch-bound (its idle time is something the ops do not show)"
    ),
}

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


def lane_ops(ops: pd.DataFrame, step_lane: str) -> pd.DataFrame:
    """The ops whose gaps mean idle time: device ops when there are any, else framework host ops on the
    stepping thread."""
    if ops is None or not len(ops):
        return ops
    device = ops[ops["device"] != "cpu"]  # categorical or text: compared without materialising strings
    if len(device):
        return device
    host = ops[ops["source"] != "marker"]
    return host[host["stream"] == step_lane] if step_lane else host


def find(data: Needs, ctx: Context) -> list[Finding]:
    """host_bound: forward + backward is mostly time between tiny ops (launch / dispatch overhead)."""
    if data.device.explains_idle:
        return []
    ops = lane_ops(data.ops, data.step_lane)
    if ops is None or not len(ops):
        return []
    steps = data.steps.captured
    if not len(steps):
        return []
    fp = np.round((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy() * 1e6).astype(np.int64)
    bp = fp + np.round(steps["fp_bp_ms"].to_numpy() * 1e6).astype(np.int64)
    starts = ops["start_ns"].to_numpy(np.int64)
    busy = covered_ns(starts, starts + ops["dur_ns"].to_numpy(np.int64), fp, bp)
    window = float((bp - fp).sum())
    if window <= 0:
        return []
    idle_share = 100.0 * (1.0 - busy.sum() / window)
    median_us = float(np.median(ops["dur_ns"].to_numpy())) / 1e3
    per_step = float(np.isin(ops["step"].to_numpy(), steps["step"].to_numpy()).sum()) / len(steps)
    idle_limit, short = ctx.thresholds["host_idle_pct"], ctx.thresholds["launch_short_op_us"]
    if idle_share < idle_limit or median_us >= short or per_step < ctx.thresholds["launch_ops_per_step"]:
        return []
    idle_ms = (window - busy.sum()) / 1e6 / len(steps)
    where = "the device" if (ops["device"] != "cpu").any() else f"thread {data.step_lane}"
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

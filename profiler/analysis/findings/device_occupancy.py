"""Do the device's kernels fill it? low_occupancy: per device, the time its compute kernels run while
leaving SMs idle, per steady step: the kernels' time minus the time they fill the SMs (the TensorBoard
plugin's Est. SM Efficiency: at each instant the running kernels' blocks per SM summed, capped at 1).
Kernels too small for the GPU (a small batch, tiny tensors, one small GEMM at a time) launch fewer
thread blocks than it has SMs; Kineto traces say how many (`blocks per SM`, `est. achieved occupancy
%`). Collective kernels are left out: a few blocks is how they are built. The evidence names the kernels
that leave the most SM time idle and, when the trace recorded memory, the room a larger batch has."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold
from profiler.analysis.findings.device import (
    MS,
    ROWS,
    DeviceNeeds,
    in_steps_ms,
    memory_room,
    share_title,
    steady_windows,
    text_codes,
)
from profiler.analysis.gpu_summary import sm_filled_ns
from profiler.spill import chunked

THRESHOLDS = {
    "sm_underfill_pct": Threshold(
        10.0,
        "share of step time a device's compute kernels run while leaving SMs idle (their time minus the SMs' "
        "filled time, Est. SM Efficiency) (low_occupancy)",
    ),
}

FIX = {
    "torch": "the kernels launch too few thread blocks to fill the GPU: a larger batch gives every kernel more "
    "blocks{room}; torch.compile fuses small kernels into fewer, larger ones; batch small matrix products "
    "(torch.bmm) instead of looping over them",
    "mindspore": "the kernels are too small to fill the device: a larger batch{room}, and graph mode with "
    "graph-kernel fusion (set_context(enable_graph_kernel=True)) for fewer, larger kernels",
    "plain": "the kernels are too small to fill the device: give each launch more work (a larger batch{room}, "
    "fused kernels)",
}
#: kernels listed in the evidence
TOP_KERNELS = 3


@dataclass(frozen=True)
class Needs(DeviceNeeds):
    device_memory: pd.DataFrame


def find(data: Needs, ctx: Context) -> list[Finding]:
    """low_occupancy: per device, compute kernels leaving SMs idle for at least sm_underfill_pct of the step."""
    out = []
    w_start, w_end = steady_windows(data.steps)
    for device, code in data.device.device_codes(data.steps):
        used = ["name", "start_ns", "end_ns", "blocks_per_sm", "occupancy_pct"]
        kernels = data.device.selected(code, _filling, used)
        if not len(kernels):
            continue
        start, end = kernels["start_ns"].to_numpy(np.int64), kernels["end_ns"].to_numpy(np.int64)
        blocks = kernels["blocks_per_sm"].to_numpy(np.float64)
        busy_ms = in_steps_ms(start, end, data.steps)
        filled_ms = float(sm_filled_ns(start, end, blocks, w_start, w_end).sum()) * MS / len(w_start)
        idle_ms = max(busy_ms - filled_ms, 0.0)
        share = data.steps.share(idle_ms)
        if idle_ms <= 0 or share < ctx.thresholds["sm_underfill_pct"]:
            continue
        out.append(_finding(data, ctx, device, kernels, blocks, (busy_ms, filled_ms, idle_ms), share))
    return out


def _filling(ex: pd.DataFrame) -> np.ndarray:
    """The compute kernels whose trace says how many blocks per SM they launch."""
    blocks = ex["blocks_per_sm"].to_numpy(np.float64)
    return (ex["category"] == "compute").to_numpy() & np.isfinite(blocks) & (blocks > 0)


def _finding(data: Needs, ctx: Context, device: str, kernels, blocks, times, share: float) -> Finding:
    """The finding, with the kernels leaving the most SM time idle: each kernel's figures made a chunk at a time
    (in spill files), summed per name as pandas sums a group."""
    busy_ms, filled_ms, idle_ms = times
    start, end = kernels["start_ns"].to_numpy(np.int64), kernels["end_ns"].to_numpy(np.int64)
    occupancy = kernels["occupancy_pct"].to_numpy(np.float64)
    names, name = text_codes(kernels["name"].array)

    def dur(at: slice) -> np.ndarray:
        return (end[at] - start[at]).astype(np.float64) * MS

    def weighted(values: np.ndarray, at: slice) -> np.ndarray:
        return np.where(np.isfinite(values), values, 0.0) * dur(at)

    per = pd.DataFrame(
        {
            "name": name,
            "idle": chunked(len(start), np.float64, lambda at: dur(at) * (1.0 - np.minimum(blocks[at], 1.0)), ROWS),
            "dur": chunked(len(start), np.float64, dur, ROWS),
            "blocks": chunked(len(start), np.float64, lambda at: blocks[at] * dur(at), ROWS),
            "occupancy": chunked(len(start), np.float64, lambda at: weighted(occupancy[at], at), ROWS),
            # 0: not estimated
            "occupancy_weight": chunked(
                len(start),
                np.float64,
                lambda at: np.where(np.isfinite(occupancy[at]) & (occupancy[at] > 0), dur(at), 0.0),
                ROWS,
            ),
        },
        copy=False,
    )
    top = (
        per.groupby("name")
        .agg(
            idle=("idle", "sum"),
            calls=("dur", "size"),
            dur=("dur", "sum"),
            blocks=("blocks", "sum"),
            occupancy=("occupancy", "sum"),
            weight=("occupancy_weight", "sum"),
        )
        .sort_values("idle", ascending=False)
    )
    top.index = names[top.index.to_numpy()]
    listed = "; ".join(
        f"{str(name)[:80]} x{int(r.calls)} {r.dur:.2f} ms, {r.blocks / r.dur:.2f} blocks per SM"
        + (f", occupancy {r.occupancy / r.weight:.0f} %" if r.weight > 0 else "")
        for name, r in top.head(TOP_KERNELS).iterrows()
    )
    return data.steps.finding(
        "low_occupancy",
        idle_ms,
        key="low_occupancy",
        title=f"Kernels leave {device}'s SMs idle {share_title(share)}",
        evidence=(
            f"compute kernels run {busy_ms:.2f} ms per step but fill the SMs for {filled_ms:.2f} ms (Est. SM "
            f"Efficiency: blocks per SM summed, capped at 1); {idle_ms:.2f} ms per step of SM time idle while they "
            f"run ({data.steps.note}); over the run, the kernels leaving the most: {listed} "
            f"[{ctx.file('kernels')}: blocks_per_sm, achieved_occupancy_pct; {ctx.file('report', 'json')}: devices "
            "sm_efficiency_pct]"
        ),
        threshold=ctx.rule_text("compute kernel time with SMs idle, % of step time", "sm_underfill_pct"),
        suggestion=FIX[ctx.framework].format(room=memory_room(data.device_memory, device)),
        files=[ctx.file("kernels"), ctx.file("report", "json")],
        metrics={"kernel_ms": busy_ms, "sm_filled_ms": filled_ms, "sm_idle_ms": idle_ms},
    )


QUESTION = Question(
    name="device_occupancy",
    page="kernels",
    keys=("low_occupancy",),
    thresholds=THRESHOLDS,
    rank=Rule(Needs, find),
)

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
from profiler.analysis.findings.device import MS, DeviceNeeds, in_steps_ms, memory_room, share_title, steady_windows
from profiler.analysis.gpu_summary import sm_filled_ns

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
    for device, mine in data.device.per_device(data.steps):
        used = ["name", "start_ns", "end_ns", "blocks_per_sm", "occupancy_pct"]  # a row filter copies each column
        kernels = mine.loc[(mine["category"] == "compute").to_numpy(), used]
        blocks = kernels["blocks_per_sm"].to_numpy(np.float64)
        known = np.isfinite(blocks) & (blocks > 0)
        if not known.any():
            continue
        kernels, blocks = kernels[known], blocks[known]
        start, end = kernels["start_ns"].to_numpy(np.int64), kernels["end_ns"].to_numpy(np.int64)
        busy_ms = in_steps_ms(start, end, data.steps)
        filled_ms = float(sm_filled_ns(start, end, blocks, w_start, w_end).sum()) * MS / len(w_start)
        idle_ms = max(busy_ms - filled_ms, 0.0)
        share = data.steps.share(idle_ms)
        if idle_ms <= 0 or share < ctx.thresholds["sm_underfill_pct"]:
            continue
        out.append(_finding(data, ctx, device, kernels, blocks, (busy_ms, filled_ms, idle_ms), share))
    return out


def _finding(data: Needs, ctx: Context, device: str, kernels, blocks, times, share: float) -> Finding:
    busy_ms, filled_ms, idle_ms = times
    dur = (kernels["end_ns"] - kernels["start_ns"]).to_numpy(np.float64) * MS
    occupancy = kernels["occupancy_pct"].to_numpy(np.float64)
    per = pd.DataFrame(
        {
            "name": kernels["name"].astype(str).to_numpy(),
            "idle": dur * (1.0 - np.minimum(blocks, 1.0)),
            "dur": dur,
            "blocks": blocks * dur,
            "occupancy": np.where(np.isfinite(occupancy), occupancy, 0.0) * dur,
            "occupancy_weight": np.where(np.isfinite(occupancy) & (occupancy > 0), dur, 0.0),  # 0: not estimated
        }
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

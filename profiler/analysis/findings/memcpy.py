"""Are copies the device's bottleneck? memcpy_bound: per device, the copy time no kernel overlaps
(host <-> device and device <-> device copies, memsets), with the directions and the pageable copies."""

from __future__ import annotations

import numpy as np

from profiler.analysis.device_time import PAGEABLE_COPY
from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold
from profiler.analysis.findings.device import DeviceNeeds, exposed_ms, in_steps_ms, share_title

THRESHOLDS = {
    "memcpy_pct": Threshold(
        10.0,
        "share of step time the device spends copying (memcpy / memset) with no kernel "
        "running beside it (memcpy_bound)",
    ),
}

FIX = {
    "pageable": {
        "torch": "copies from pageable host memory block the host and cannot overlap: DataLoader(..., "
        "pin_memory=True) and tensor.to(device, non_blocking=True); keep tensors on the device between "
        "steps instead of copying them back and forth",
        "mindspore": "keep data on the device between steps (data sink mode) instead of copying it every step",
        "plain": "copy from pinned (page-locked) host memory asynchronously, and keep data on the device",
    },
    "pinned": {
        "torch": "copies do not overlap compute: prefetch the next batch to the device on a side stream "
        "(non_blocking=True from pinned memory), keep tensors on the device, and avoid device <-> host "
        "round trips (.cpu() / .to('cpu')) in the loop",
        "mindspore": "keep data on the device (data sink mode) and avoid reading tensors back every step",
        "plain": "overlap copies with compute (a side stream) and keep data on the device",
    },
}
#: copy directions as CUDA / HIP name their memcpy executions
DIRECTIONS = ("HtoD", "DtoH", "DtoD")


def find(data: DeviceNeeds, ctx: Context) -> list[Finding]:
    """memcpy_bound: copy time no kernel overlaps, per device."""
    out = []
    for device, mine in data.device.per_device(data.steps):
        copy = mine["category"].isin(("memcpy", "memset")).to_numpy()
        ms = exposed_ms(mine, copy, ~copy, data.steps)
        share = data.steps.share(ms)
        if ms <= 0 or share < ctx.thresholds["memcpy_pct"]:
            continue
        names = mine["name"].astype(str)
        start, end = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        per_direction = {
            d: in_steps_ms(
                start[copy & names.str.contains(d).to_numpy()], end[copy & names.str.contains(d).to_numpy()], data.steps
            )
            for d in DIRECTIONS
        }
        pageable = int((copy & names.str.contains(PAGEABLE_COPY).to_numpy()).sum())
        split = ", ".join(f"{d} {v:.2f} ms" for d, v in per_direction.items())
        out.append(
            data.steps.finding(
                "memcpy_bound",
                ms,
                key="memcpy_bound",
                title=f"Copies keep {device} busy with no kernel running: {share_title(share)}",
                evidence=(
                    f"{ms:.2f} ms per step of copies (memcpy / memset) with no kernel beside them; copy time per "
                    f"step {split} ({data.steps.note}); {pageable} copies over the run to or from pageable host "
                    f"memory [{ctx.file('timeline', 'json')}: Memcpy executions; {ctx.file('report', 'json')}: "
                    f"devices memory_pct]"
                ),
                threshold=ctx.rule_text("exposed copy time, % of step time", "memcpy_pct"),
                suggestion=FIX["pageable" if pageable else "pinned"][ctx.framework],
                files=[ctx.file("report", "json"), ctx.file("timeline", "json")],
                metrics={
                    "exposed_copy_ms": ms,
                    **{f"{d.lower()}_ms": v for d, v in per_direction.items()},
                    "pageable_copies": float(pageable),
                },
            )
        )
    return out


QUESTION = Question(
    name="memcpy", page="timeline", keys=("memcpy_bound",), thresholds=THRESHOLDS, rank=Rule(DeviceNeeds, find)
)

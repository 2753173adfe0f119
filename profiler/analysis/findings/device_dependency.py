"""Does the device wait on something the host did not cause? device_idle (key `device_idle:dependency`):
idle time whose next work was already queued (a dependency on another stream, an event, a peer rank's
collective: HTA's `other`) or whose launch was not recorded."""

from __future__ import annotations

import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold
from profiler.analysis.findings.device import DeviceNeeds, idle_evidence, idle_findings, share_title

THRESHOLDS = {
    "device_dependency_pct": Threshold(
        10.0,
        "share of step time the device is idle with its next work already "
        "queued (waiting on another stream, an event or a peer)",
    ),
}

FIX = {
    "torch": "the next kernel was queued but waited: on another stream (a copy or collective stream the compute "
    "stream synchronises with) or on a peer rank's collective. Check the timeline around the gaps: "
    "overlap communication with compute (DDP bucketing, bucket_cap_mb), balance work across ranks, "
    "and avoid stream-wide waits (torch.cuda.Stream.wait_stream) on work that is not needed yet",
    "mindspore": "queued work waited on another stream or a peer: check the timeline around the gaps, overlap "
    "communication (all_reduce_fusion_config) and balance work across devices",
    "plain": "queued work waited on another stream or a peer: check the timeline around the gaps and remove "
    "waits on work that is not needed yet",
}


def find(data: DeviceNeeds, ctx: Context) -> list[Finding]:
    """device_idle:dependency: the device idle with its next work queued, per device."""

    def build(device: str, ms: float, row: pd.Series, causes: pd.Series) -> Finding:
        share = data.steps.share(ms)
        return data.steps.finding(
            "device_idle",
            ms,
            key="device_idle:dependency",
            title=f"{device} idle with work queued (waiting on a stream or a peer): {share_title(share)}",
            evidence=(
                f"{ms:.2f} ms per step of device idle time before work that was already launched (or whose "
                f"launch was not recorded); " + idle_evidence(device, row, causes, data.steps, ctx)
            ),
            threshold=ctx.rule_text("device idle with work queued, % of step time", "device_dependency_pct"),
            suggestion=FIX[ctx.framework],
            files=[ctx.file("report", "json"), ctx.file("timeline", "json")],
            metrics={"idle_other_ms": ms, "device_idle_pct": float(row["idle_pct"])},
        )

    return idle_findings(data.device, data.steps, ctx, "other", "device_dependency_pct", build)


QUESTION = Question(
    name="device_dependency",
    page="timeline",
    keys=("device_idle:dependency",),
    thresholds=THRESHOLDS,
    rank=Rule(DeviceNeeds, find),
)

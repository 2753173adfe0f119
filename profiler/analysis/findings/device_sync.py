"""Does the device run dry because the host synchronises? device_sync: device idle time in the shadow of
synchronising calls (cudaDeviceSynchronize / cudaStreamSynchronize / cudaEventSynchronize, blocking or
pageable copies: `.item()`, `.cpu()`, `print(tensor)`), with the calls and their call sites."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold
from profiler.analysis.findings.device import (
    MS,
    ROWS,
    DeviceNeeds,
    DeviceTimeline,
    idle_evidence,
    idle_findings,
    share_title,
)
from profiler.kernels.intervals import covered_ns, union
from profiler.spill import chunks

THRESHOLDS = {
    "device_sync_pct": Threshold(
        5.0, "share of step time the device is idle because the host waits in a synchronising call (device_sync)"
    ),
}

FIX = {
    "torch": "the host blocks on the device and then has nothing queued: take .item(), .cpu(), .numpy(), "
    "print(tensor) and if tensor: checks out of the loop (accumulate metrics on the device, read them "
    "every N steps), copy with .to(device, non_blocking=True) from pinned memory, and find hidden "
    "syncs with torch.cuda.set_sync_debug_mode('warn')",
    "mindspore": "the host blocks on the device: read losses / metrics (asnumpy(), print) every N steps instead of "
    "every step, and train in data sink mode so the device runs several steps per host call",
    "plain": "the host waits for the device to finish and then has nothing queued: read results back every N "
    "steps instead of every step, and keep enough work queued",
}
#: call sites listed in the evidence
TOP_SITES = 3


def sync_sites(timeline: DeviceTimeline, device: str) -> pd.DataFrame:
    """Per (sync call, call site): calls, the host's time blocked in them and the device's idle time in
    their shadows (the union of the shadows, over the run; the device's gaps read a chunk at a time), most idle
    first."""
    calls, gaps = timeline.sync, timeline.gaps.get(device)
    g_start, g_end = (
        (np.empty(0, np.int64),) * 2 if gaps is None else (gaps[c].to_numpy() for c in ("start_ns", "end_ns"))
    )
    rows = []
    for (name, site), group in calls.groupby(["name", "call_site"], sort=True):
        shadows = union(group["start_ns"].to_numpy(np.int64), group["shadow_end_ns"].to_numpy(np.int64))
        idle = sum(int(covered_ns(*shadows, g_start[at], g_end[at]).sum()) for at in chunks(len(g_start), ROWS))
        blocked = (group["end_ns"] - group["start_ns"]).sum()
        rows.append(
            {
                "name": name,
                "call_site": site,
                "calls": len(group),
                "blocked_ms": float(blocked) * MS,
                "idle_ms": float(idle) * MS,
            }
        )
    return pd.DataFrame(rows, columns=["name", "call_site", "calls", "blocked_ms", "idle_ms"]).sort_values(
        ["idle_ms", "name", "call_site"], ascending=[False, True, True], kind="stable"
    )


def find(data: DeviceNeeds, ctx: Context) -> list[Finding]:
    """device_sync: the device's idle time in synchronising calls' shadows, per device."""

    def build(device: str, ms: float, row: pd.Series, causes: pd.Series) -> Finding:
        sites = sync_sites(data.device, device).head(TOP_SITES)
        listed = "; ".join(
            f"{r.name} x{r.calls} at {r.call_site or 'top level'} ({r.idle_ms:.2f} ms idle, "
            f"{r.blocked_ms:.2f} ms blocked)"
            for r in sites.itertuples()
        )
        share = data.steps.share(ms)
        return data.steps.finding(
            "device_sync",
            ms,
            key="device_sync",
            title=f"{device} idle while the host synchronises: {share_title(share)}",
            evidence=(
                f"{ms:.2f} ms per step of device idle time falls in synchronising calls' shadows (the call "
                f"until the next launch); over the run: {listed or 'no call recorded'}; "
                + idle_evidence(device, row, causes, data.steps, ctx)
            ),
            threshold=ctx.rule_text("device idle in sync calls, % of step time", "device_sync_pct"),
            suggestion=FIX[ctx.framework],
            files=[ctx.file("report", "json"), ctx.file("timeline", "json")],
            metrics={
                "idle_sync_ms": ms,
                "device_idle_pct": float(row["idle_pct"]),
                "sync_calls": float(len(data.device.sync)),
            },
        )

    return idle_findings(data.device, data.steps, ctx, "sync", "device_sync_pct", build)


QUESTION = Question(
    name="device_sync", page="timeline", keys=("device_sync",), thresholds=THRESHOLDS, rank=Rule(DeviceNeeds, find)
)

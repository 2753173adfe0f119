"""Does the device wait for the host to launch work? host_bound (key `host_bound:device`): device idle
time whose next work the host launched late (HTA's host_wait without syncs and data waits) or only
just in time (launch latency between queued short kernels, HTA's kernel_wait). Many short kernels make
it launch-bound (CUDA graphs, torch.compile, a larger batch); long gaps are host work between launches."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, StepWindow, Threshold
from profiler.analysis.findings.device import (
    ROWS,
    DeviceNeeds,
    DeviceTimeline,
    Spool,
    idle_evidence,
    idle_findings,
    median,
    share_title,
    steady_windows,
)
from profiler.analysis.stakes import LAUNCH_GAPS
from profiler.spill import chunks

THRESHOLDS = {
    "device_host_wait_pct": Threshold(
        10.0, "share of step time the device is idle waiting for the host to launch its next work (host_bound:device)"
    ),
    "launch_gap_us": Threshold(
        100.0,
        "idle gaps shorter than this are launch gaps: a device waiting for the host "
        "mostly in such gaps is launch-bound (else: host work between launches)",
    ),
}

FIX = {
    "launch": {
        "torch": "the device finishes each short kernel before the host launches the next: capture the step in "
        "CUDA graphs (torch.cuda.graphs / torch.compile(mode='reduce-overhead')), fuse small ops with "
        "torch.compile, use foreach / fused optimizers, or a larger batch so each kernel does more",
        "mindspore": "run in graph mode (set_context(mode=GRAPH_MODE)) with graph-kernel fusion and data sink "
        "mode, and a larger batch, so the host launches fewer, larger kernels",
        "plain": "launch fewer, larger kernels: fuse small operations, batch the work, or record the sequence "
        "once and replay it (CUDA graphs)",
    },
    "host": {
        "torch": "the device waits while the host does other work between launches: profile the host side "
        "(Python, data preparation, logging), move that work out of the loop or overlap it "
        "(DataLoader workers, a side thread), and keep work queued ahead (avoid per-step syncs)",
        "mindspore": "the device waits for host work between launches: move Python callbacks out of the loop and "
        "use graph mode with data sink so the device runs several steps per host call",
        "plain": "the device waits for host work between launches: move that work out of the loop or overlap it "
        "with the device's work",
    },
}


def host_gap_figures(
    timeline: DeviceTimeline, device: str, steps: StepWindow, launch_gap_us: float
) -> dict[str, float]:
    """In the steady steps: the device's gaps waiting for the host (host or launch cause), their count
    per step, median length (µs) and the share of their time in gaps shorter than `launch_gap_us`, and
    the device's executions per step with their median length (µs); read a chunk of gaps and executions at a
    time (integer sums; the lengths whose medians are taken in spill files)."""
    w_start, w_end = steady_windows(steps)
    gaps = timeline.gaps[device]
    g_start, g_end = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy()
    host, launch = gaps["host_ns"].to_numpy(), gaps["launch_ns"].to_numpy()
    lengths, durations = Spool(), Spool()
    waited_ns = short_ns = 0
    for at in chunks(len(gaps), ROWS):
        waited = host[at] + launch[at]
        keep = (waited > 0) & _inside(g_start[at], w_start, w_end)
        length, waited = (g_end[at] - g_start[at])[keep], waited[keep]
        lengths.add(length)
        waited_ns += int(waited.sum())
        short_ns += int(waited[length < launch_gap_us * 1e3].sum())
    ex = timeline.executions
    e_start, e_end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    for at, _ in timeline.positions(dict(timeline.device_codes(steps))[device], start_order=False):
        durations.add((e_end[at] - e_start[at])[_inside(e_start[at], w_start, w_end)])
    lengths, durations = lengths.array(), durations.array()
    n = max(len(w_start), 1)
    return {
        "gaps_per_step": float(len(lengths)) / n,
        "median_gap_us": (median(lengths) or 0.0) / 1e3,
        "short_gap_share_pct": 100.0 * float(short_ns) / max(float(waited_ns), 1.0),
        "executions_per_step": float(len(durations)) / n,
        "median_execution_us": (median(durations) or 0.0) / 1e3,
    }


def _inside(t: np.ndarray, w_start: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Whether each time falls in one of the steady steps."""
    order = np.argsort(w_start)
    s, e = w_start[order], w_end[order]
    at = np.searchsorted(s, t, side="right") - 1
    return (at >= 0) & (t < e[np.maximum(at, 0)])


def find(data: DeviceNeeds, ctx: Context) -> list[Finding]:
    """host_bound:device: the device idle waiting for the host's launches, per device."""

    def build(device: str, ms: float, row: pd.Series, causes: pd.Series) -> Finding:
        fig = host_gap_figures(data.device, device, data.steps, ctx.thresholds["launch_gap_us"])
        launch = fig["short_gap_share_pct"] >= 50.0
        share = data.steps.share(ms)
        what = "Launch-bound" if launch else "Host-bound"
        return data.steps.finding(
            "host_bound",
            ms,
            key="host_bound:device",
            win=LAUNCH_GAPS if launch else None,
            title=f"{what}: {device} idle waiting for the host to launch work, {share_title(share)}",
            evidence=(
                f"{ms:.2f} ms per step of device idle time waiting for the next launch: "
                f"{fig['gaps_per_step']:.0f} such gaps per step, median {fig['median_gap_us']:.1f} µs, "
                f"{fig['short_gap_share_pct']:.1f} % of the time in gaps under {ctx.thresholds['launch_gap_us']:g} µs, "
                f"between "
                f"{fig['executions_per_step']:.0f} executions per step of median {fig['median_execution_us']:.1f} "
                f"µs; " + idle_evidence(device, row, causes, data.steps, ctx)
            ),
            threshold=(
                ctx.rule_text("device idle waiting for launches, % of step time", "device_host_wait_pct")
                + f"; launch-bound when most of that time is in gaps < {ctx.thresholds['launch_gap_us']:g} µs "
                "(launch_gap_us)"
            ),
            suggestion=FIX["launch" if launch else "host"][ctx.framework],
            files=[ctx.file("report", "json"), ctx.file("timeline", "json")],
            metrics={
                "idle_host_ms": float(causes["host"]),
                "idle_launch_ms": float(causes["launch"]),
                "device_idle_pct": float(row["idle_pct"]),
                **fig,
            },
        )

    return idle_findings(data.device, data.steps, ctx, "launch", "device_host_wait_pct", build)


QUESTION = Question(
    name="device_launch",
    page="timeline",
    keys=("host_bound:device",),
    thresholds=THRESHOLDS,
    rank=Rule(DeviceNeeds, find),
)

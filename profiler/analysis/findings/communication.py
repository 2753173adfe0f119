"""Is communication hidden behind compute? comm_bound: the all-reduce time forward + backward does not overlap.

On one rank from its device timeline when it has communication kernels (the kernel-level overlap of
HTA's get_comm_comp_overlap: communication kernel time no compute kernel overlaps), else from its step
trace; for the job from the cluster's figures, where the time ranks spend waiting for a slower rank is
taken out (that wait is the straggler question's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from profiler.analysis.findings.base import (
    Context,
    Finding,
    Question,
    Rule,
    StepWindow,
    Threshold,
    exposed_comm,
    pct_text,
)
from profiler.analysis.findings.device import DeviceTimeline, exposed_ms, in_steps_ms
from profiler.analysis.stakes import overlap_win

THRESHOLDS = {
    "comm_exposed_pct": Threshold(10.0, "share of step time spent in communication not overlapped with compute"),
}

FIX = {
    "torch": "overlap the gradient all-reduce with backward: DistributedDataParallel buckets it already; "
    "tune bucket_cap_mb, set gradient_as_bucket_view=True, and use no_sync() for gradient "
    "accumulation micro-batches",
    "mindspore": "fuse and overlap the all-reduce (set_auto_parallel_context(all_reduce_fusion_config=[...]) "
    "or comm_fusion) and check the network between the ranks",
    "plain": "overlap communication with compute (start the all-reduce of early layers' gradients during "
    "backward) and bucket small tensors into larger messages",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    device: DeviceTimeline


def find(data: Needs, ctx: Context) -> list[Finding]:
    """comm_bound on one rank: communication kernels no compute kernel overlaps, or (without them)
    the step trace's communication that does not overlap forward + backward."""
    ex = data.device.executions
    if len(ex) and (ex["category"] == "comm").any():
        return _device_findings(data, ctx)
    steps = data.steps
    exposed = float(exposed_comm(steps.steady).mean())
    share = ctx.reaches(steps.share(exposed), "comm_exposed_pct")
    if share is None:
        return []
    comm, overlap = steps.per_step("all_reduce_ms"), steps.per_step("all_reduce_overlap_ms")
    f = ctx.file("step_trace")
    return [
        steps.finding(
            "comm_bound",
            exposed,
            title=f"Communication not hidden behind compute: {pct_text(share)} of the step",
            evidence=(
                f"all-reduce {comm:.2f} ms per step, of which {overlap:.2f} ms overlaps compute and "
                f"{exposed:.2f} ms is exposed ({steps.note}) [{f}: all_reduce_ms, all_reduce_overlap_ms]"
            ),
            threshold=ctx.rule_text("exposed communication, % of step time", "comm_exposed_pct"),
            suggestion=FIX[ctx.framework],
            files=[f],
            metrics={"all_reduce_ms": comm, "overlap_ms": overlap, "exposed_ms": exposed},
            win=overlap_win(exposed, steps.per_step("fp_bp_ms")),
        )
    ]


def _device_findings(data: Needs, ctx: Context) -> list[Finding]:
    """comm_bound per device from its kernels: communication time with no compute kernel beside it."""
    ex, steps = data.device.executions, data.steps
    out = []
    for device in sorted(ex.loc[(ex["category"] == "comm").to_numpy(), "device"].astype(str).unique()):
        mine = ex[(ex["device"] == device).to_numpy()]
        comm, compute = (mine["category"] == "comm").to_numpy(), (mine["category"] == "compute").to_numpy()
        exposed = exposed_ms(mine, comm, compute, steps)
        share = ctx.reaches(steps.share(exposed), "comm_exposed_pct")
        if share is None or exposed <= 0:
            continue
        start, end = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        total = in_steps_ms(start[comm], end[comm], steps)
        overlap = data.device.row(device)["comm_compute_overlap_pct"]
        out.append(
            steps.finding(
                "comm_bound",
                exposed,
                title=f"Communication not hidden behind compute: {pct_text(share)} of the step",
                evidence=(
                    f"communication kernels run {total:.2f} ms per step on {device}, {exposed:.2f} ms of it with no "
                    f"compute kernel beside them ({steps.note}); over the run {overlap:.1f} % of communication "
                    f"kernel time overlaps compute kernels [{ctx.file('report', 'json')}: devices "
                    f"comm_compute_overlap_pct]"
                ),
                threshold=ctx.rule_text(
                    "communication kernel time without compute, % of step time", "comm_exposed_pct"
                ),
                suggestion=FIX[ctx.framework],
                files=[ctx.file("report", "json"), ctx.file("timeline", "json")],
                metrics={"comm_kernel_ms": total, "exposed_ms": exposed, "comm_compute_overlap_pct": float(overlap)},
                win=overlap_win(exposed, steps.per_step("fp_bp_ms")),
            )
        )
    return out


@dataclass(frozen=True)
class ClusterNeeds:
    communication: Mapping[str, float]


def find_cluster(data: ClusterNeeds, ctx: Context) -> list[Finding]:
    """comm_bound for the job: exposed transfer on every rank (waiting for stragglers excluded)."""
    comm = data.communication
    share = comm["exposed_transfer_share_pct"]
    limit = ctx.thresholds["comm_exposed_pct"]
    if share < limit:
        return []
    return [
        Finding(
            kind="comm_bound",
            at_stake_ms=comm["exposed_transfer_ms"],
            at_stake_pct=share,
            title=f"Communication not hidden behind compute: {share:.1f} % of the step on every rank",
            evidence=(
                f"mean over ranks: communication {comm['comm_ms']:.2f} ms per step, {comm['comm_overlap_ms']:.2f} ms "
                f"overlapping forward + backward, {comm['exposed_comm_ms']:.2f} ms exposed, of which "
                f"{comm['wait_ms']:.2f} ms is waiting for slower ranks [cluster_step_trace.csv: comm_ms, "
                f"comm_overlap_ms, wait_ms]"
            ),
            threshold=f"exposed communication without waiting >= {limit:g} % of step time (comm_exposed_pct)",
            suggestion=FIX[ctx.framework],
            files=["cluster_step_trace.csv"],
            metrics={k: comm[k] for k in ("comm_ms", "comm_overlap_ms", "exposed_comm_ms", "wait_ms")},
        )
    ]


QUESTION = Question(
    name="communication",
    page="overview",
    keys=("comm_bound",),
    thresholds=THRESHOLDS,
    rank=Rule(Needs, find),
    cluster=Rule(ClusterNeeds, find_cluster),
)

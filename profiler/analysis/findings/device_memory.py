"""Is the device's memory nearly full? device_memory: per device whose allocations were recorded
(profile_memory=True) and whose memory the trace states (deviceProperties `totalGlobalMem`), the memory
the largest step reserves against it. Near the capacity a longer input or a larger batch fails with an
out-of-memory error, and the caching allocator empties its cache and retries inside the step: a risk,
not time yet (no stake; medium severity)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, StepWindow, Threshold
from profiler.analysis.findings.device import GB

THRESHOLDS = {
    "device_memory_pct": Threshold(
        90.0, "memory the largest step reserves, % of the device's memory, from which it is nearly full (device_memory)"
    ),
}

FIX = {
    "torch": "keep headroom: mixed precision (torch.autocast) halves the activations, activation checkpointing "
    "(torch.utils.checkpoint) recomputes them instead of keeping them, and a smaller batch with gradient "
    "accumulation keeps the effective batch; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lowers the "
    "fragmentation between allocated and reserved memory",
    "mindspore": "keep headroom: mixed precision (amp_level='O2'), recomputation (cell.recompute()) and a "
    "smaller batch with gradient accumulation",
    "plain": "keep headroom: a lower precision, recomputing intermediate results, or a smaller batch",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    device_memory: pd.DataFrame


def find(data: Needs, ctx: Context) -> list[Finding]:
    """device_memory: a device whose largest step reserves at least device_memory_pct of its memory."""
    out = []
    for row in data.device_memory.itertuples(index=False):
        total = float(row.total_bytes)
        if math.isnan(total) or total <= 0:
            continue
        pct = 100.0 * float(row.peak_reserved_bytes) / total
        if pct < ctx.thresholds["device_memory_pct"]:
            continue
        finding = data.steps.finding(
            "device_memory",
            0.0,
            key="device_memory",
            title=f"{row.device} memory nearly full: the largest step reserves {pct:.0f} % of its {total / GB:.1f} GB",
            evidence=(
                f"peak allocated {row.peak_allocated_bytes / GB:.2f} GB (at {row.peak_time_ms:.1f} ms), peak reserved "
                f"{row.peak_reserved_bytes / GB:.2f} GB of the device's {total / GB:.2f} GB (deviceProperties "
                f"totalGlobalMem), over the {len(data.steps.analysed)} analysed steps; a longer input or a larger "
                f"batch runs out of memory [{ctx.file('memory')}: allocated_bytes, reserved_bytes]"
            ),
            threshold=f"largest step's reserved memory >= {ctx.thresholds['device_memory_pct']:g} % of the "
            "device's memory (device_memory_pct)",
            suggestion=FIX[ctx.framework],
            files=[ctx.file("memory"), ctx.file("op_memory")],
            metrics={
                "peak_allocated_bytes": float(row.peak_allocated_bytes),
                "peak_reserved_bytes": float(row.peak_reserved_bytes),
                "total_bytes": total,
                "reserved_pct": pct,
            },
        )
        finding.severity = "medium"
        out.append(finding)
    return out


QUESTION = Question(
    name="device_memory", page="memory", keys=("device_memory",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

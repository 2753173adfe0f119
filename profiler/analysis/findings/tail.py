"""Is the work after backward long? tail_bound: backward's end to the step's end (optimizer, logging,
saving), without the exposed communication the communication question reports."""

from __future__ import annotations

from dataclasses import dataclass

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

THRESHOLDS = {
    "tail_pct": Threshold(
        15.0, "tail share of step time (without exposed communication) that makes the run tail-bound"
    ),
}

FIX = {
    "torch": "the time after backward is the optimizer and per-step extras: use a fused / foreach optimizer "
    "(torch.optim.AdamW(..., fused=True)), and log, sync (.item()) or checkpoint less often",
    "mindspore": "the time after backward is the optimizer and callbacks: use a fused optimizer, and log or "
    "save checkpoints less often (CheckpointConfig(save_checkpoint_steps=...))",
    "plain": "the work after the last backward compute (update, logging, checkpointing) is large: fuse the "
    "update, and log or checkpoint less often",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow


def find(data: Needs, ctx: Context) -> list[Finding]:
    """tail_bound: bp end -> step end, without the exposed communication."""
    steps = data.steps
    tail = float((steps.steady["tail_ms"] - exposed_comm(steps.steady)).clip(lower=0).mean())
    share = ctx.reaches(steps.share(tail), "tail_pct")
    if share is None:
        return []
    f = ctx.file("step_trace")
    return [
        steps.finding(
            "tail_bound",
            tail,
            title=f"Tail after backward (optimizer, logging, saving) takes {pct_text(share)}",
            evidence=(
                f"tail {tail:.2f} ms without exposed communication, against a mean step of {steps.mean_ms:.2f} ms "
                f"({steps.note}) [{f}: tail_ms, all_reduce_ms, total_ms]"
            ),
            threshold=ctx.rule_text("tail share of step time", "tail_pct"),
            suggestion=FIX[ctx.framework],
            files=[f],
            metrics={"tail_ms": tail, "tail_share_pct": share},
        )
    ]


QUESTION = Question(name="tail", page="overview", keys=("tail_bound",), thresholds=THRESHOLDS, rank=Rule(Needs, find))

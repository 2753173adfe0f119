"""What did the profiler itself cost and lose? profiler_overhead: its own measured time inside the
steps; dropped_events: records the memory budget (or a failed write) dropped while recording;
damaged_raw_store: records lost with damaged raw-store chunks. The last two make every figure an undercount.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.analysis.findings.base import MB, Context, Finding, Question, Rule, StepWindow, Threshold, pct_text
from profiler.store.raw import CUT_SHORT

THRESHOLDS = {
    "profiler_overhead_pct": Threshold(5.0, "share of step time the profiler itself took"),
}

FIXES: dict[str, dict[str, str]] = {
    "profiler_overhead": {
        "torch": "record less: capture ops on a few steps only (Profiler(ops_schedule=schedule(wait=..., "
        "active=3))), keep record_shapes / with_stack off, and no spans inside tight inner loops",
        "mindspore": "record less: profile a few steps with a schedule and keep spans out of tight inner loops",
        "plain": "record less: a schedule(wait=..., active=...) window, and no op() / span() in tight inner loops",
    },
    "dropped_events": dict.fromkeys(
        ("torch", "mindspore", "plain"),
        "give the recording room between flushes: raise memory_budget_mb (Profiler(memory_budget_mb=...)), or "
        "flush more often (a smaller flush_interval_s); record fewer spans in tight inner loops",
    ),
    "damaged_raw_store": dict.fromkeys(
        ("torch", "mindspore", "plain"),
        "the raw store was damaged after it was written (a killed run tears at most its last chunk): keep the "
        "raw/ files whole when copying them (no partial copies, no editing), and re-run `profview analyse`",
    ),
    "killed_while_writing": dict.fromkeys(
        ("torch", "mindspore", "plain"),
        "nothing to repair: everything flushed before the kill is analysed. A normal exit stops the Profiler (an "
        "atexit hook); a SIGKILL (out of memory, a scheduler's time limit) loses at most the records of the last "
        "flush_interval_s (0.2 s by default: a smaller one loses less)",
    ),
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    recording: Mapping[str, Any]  # profiler_info "recording": what was dropped or lost


def find(data: Needs, ctx: Context) -> list[Finding]:
    """The profiler's overhead, then what it lost."""
    return _overhead_findings(data.steps, ctx) + _loss_findings(data.recording, ctx)


def _overhead_findings(steps: StepWindow, ctx: Context) -> list[Finding]:
    """profiler_overhead: the profiler's own measured time inside the steps."""
    overhead = steps.per_step("profiler_overhead_ms")
    share = ctx.reaches(steps.share(overhead), "profiler_overhead_pct")
    if share is None:
        return []
    f = ctx.file("step_trace")
    return [
        steps.finding(
            "profiler_overhead",
            overhead,
            title=f"The profiler itself takes {pct_text(share)} of each step",
            evidence=f"profiler_overhead_ms {overhead:.3f} ms per step ({steps.note}) [{f}: profiler_overhead_ms]",
            threshold=ctx.rule_text("profiler overhead, % of step time", "profiler_overhead_pct"),
            suggestion=FIXES["profiler_overhead"][ctx.framework],
            files=[f],
            metrics={"overhead_ms": overhead},
        )
    ]


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0 else 0


def _loss_severity(lost: int, total: int) -> str:
    """high when a tenth or more of what was recorded is missing (the figures above it are then unsure)."""
    share = lost / total if total else 1.0
    return "high" if share >= 0.1 else "medium" if share >= 0.01 else "low"


def _loss_findings(recording: Mapping[str, Any], ctx: Context) -> list[Finding]:
    """dropped_events and damaged_raw_store from profiler_info's recording section."""
    rec = recording if isinstance(recording, Mapping) else {}
    kept = _count(rec.get("events"))
    f = ctx.file("profiler_info", "json")
    out = []
    dropped = _count(rec.get("dropped_events"))
    if dropped:
        budget = rec.get("memory_budget_bytes")
        budget_text = (
            f" with a memory budget of {budget / MB:.3g} MB"
            if isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget > 0
            else ""
        )
        share = 100.0 * dropped / (dropped + kept)
        out.append(
            Finding(
                kind="dropped_events",
                at_stake_ms=0.0,
                at_stake_pct=0.0,
                title=(
                    f"{dropped:,} recorded events ({share:.1f} %) were dropped while recording: the figures miss them"
                ),
                evidence=(
                    f"{dropped:,} of {dropped + kept:,} events were dropped{budget_text} because the buffers were "
                    f"full between two flushes (or a write failed) [{f}: recording.dropped_events]"
                ),
                threshold="any dropped event",
                suggestion=FIXES["dropped_events"][ctx.framework],
                files=[f],
                severity=_loss_severity(dropped, dropped + kept),
                metrics={"dropped_events": dropped, "dropped_pct": share},
            )
        )
    lost, damaged = _count(rec.get("lost_events")), _count(rec.get("torn_chunks"))
    if damaged:
        share = 100.0 * lost / (lost + kept) if lost + kept else 0.0
        killed = _killed_while_writing(rec.get("damaged_chunks"))
        out.append(
            Finding(
                kind="damaged_raw_store",
                at_stake_ms=0.0,
                at_stake_pct=0.0,
                title=(
                    f"The run was killed while writing its raw store: {lost:,} recorded events lost with the chunk "
                    "it was writing"
                    if killed
                    else f"{damaged} raw-store chunk(s) were damaged and skipped: {lost:,} recorded events lost with "
                    "them"
                ),
                evidence=(
                    f"{damaged} damaged chunk(s), {lost:,} events lost, {kept:,} analysed; which chunks, where: "
                    f"[{f}: recording.damaged_chunks]"
                ),
                threshold="any damaged chunk",
                suggestion=FIXES["killed_while_writing" if killed else "damaged_raw_store"][ctx.framework],
                files=[f],
                severity=_loss_severity(lost, lost + kept) if lost else "low",
                metrics={"damaged_chunks": damaged, "lost_events": lost, "lost_pct": share},
            )
        )
    return out


def _killed_while_writing(damaged: Any) -> bool:
    """Whether every skipped chunk is one a file ends inside (a kill interrupted its write), none corrupt."""
    chunks = damaged if isinstance(damaged, list) else []
    return bool(chunks) and all(isinstance(c, Mapping) and CUT_SHORT in str(c.get("why", "")) for c in chunks)


QUESTION = Question(
    name="recording",
    page="overview",
    keys=("profiler_overhead", "dropped_events", "damaged_raw_store"),
    thresholds=THRESHOLDS,
    rank=Rule(Needs, find),
)

"""Do a few slow steps cost the run? step_outliers: slow (often periodic) steps — a checkpoint, an
evaluation — that add up to a real share of the run. The outlier rule is one rule everywhere
(`analysis/steps.outlier_steps`); every other question measures the steps it leaves (`StepWindow.steady`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from profiler.analysis.findings.base import Context, Finding, Question, Rule, StepWindow, Threshold, pct_text
from profiler.analysis.steps import outlier_rule_text
from profiler.formats.columns import PHASE_COLUMNS

THRESHOLDS = {
    "outlier_min_pct": Threshold(20.0, "how far above the median step a step must be to count as an outlier"),
    "outlier_excess_pct": Threshold(5.0, "share of step time that outlier steps add above the median"),
}

FIX = {
    "torch": "find the periodic work (evaluation, checkpoint saving, logging, garbage collection): do it less "
    "often or asynchronously, and gc.freeze() after start-up",
    "mindspore": "find the periodic work (evaluation, checkpoint saving, logging callbacks): save or log less "
    "often, or asynchronously",
    "plain": "find the periodic work (evaluation, checkpoint saving, logging, garbage collection) and do it "
    "less often or asynchronously",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow


def period(steps: np.ndarray) -> Optional[int]:
    """The period of the slow steps, if one explains them: every p-th step from some step on.

    Each candidate p (a distance between two slow steps) is scored by the slow steps it
    explains (step % p is the common residue) times its coverage (explained / occurrences
    expected between the first and last explained step); it needs >= 3 explained steps, at
    least 60 % of the slow ones and 75 % coverage, so one unrelated hiccup does not hide the period.
    """
    steps = np.unique(steps.astype(np.int64))
    if len(steps) < 3:
        return None
    best, best_score = None, 0.0
    for p in np.unique(np.diff(steps)):
        if p < 2:
            continue
        residues, counts = np.unique(steps % p, return_counts=True)
        hits = steps[steps % p == residues[np.argmax(counts)]]
        coverage = len(hits) / ((hits[-1] - hits[0]) // p + 1)
        score = len(hits) * coverage
        if len(hits) >= 3 and len(hits) >= 0.6 * len(steps) and coverage >= 0.75 and score > best_score:
            best, best_score = int(p), score
    return best


def find(data: Needs, ctx: Context) -> list[Finding]:
    """step_outliers: a few slow (often periodic) steps that add up to a real share of the run."""
    steps = data.steps.analysed
    slow = data.steps.outliers
    if not len(slow):
        return []
    median = steps.median(numeric_only=True)
    # the slow steps' extra data wait is the input rule's (a loader delivering in bursts), and the profiler's
    # own extra time (a capture window exported, its trace compressed) is not the loop's: neither is theirs
    extra = sum(
        (slow[c] - median[c]).clip(lower=0).fillna(0.0)  # a wait not measured in a step: none taken out
        for c in ("data_wait_ms", "profiler_overhead_ms")
        if c in slow
    )
    excess = float((slow["total_ms"] - median["total_ms"] - extra).clip(lower=0).sum()) / len(steps)
    mean_all = float(steps["total_ms"].mean())
    share = 100.0 * excess / mean_all if mean_all > 0 else 0.0  # of the whole run: outliers included
    if share < ctx.thresholds["outlier_excess_pct"]:
        return []
    grown = {col: float(slow[col].mean() - median[col]) for col in PHASE_COLUMNS}
    phase = max(grown, key=grown.get)
    every_p = period(slow["step"].to_numpy())
    every = f", every {every_p} steps" if every_p else ""
    listed = ", ".join(str(int(s)) for s in slow["step"].head(8)) + (" …" if len(slow) > 8 else "")
    one = len(slow) == 1
    f = ctx.file("step_trace")
    return [
        Finding(
            kind="step_outliers",
            at_stake_ms=excess,
            at_stake_pct=share,
            title=(
                f"{'One slow step adds' if one else f'{len(slow)} slow steps{every} add'} {pct_text(share)} to the run"
            ),
            evidence=(
                f"{'step' if one else 'steps'} {listed} {'takes' if one else 'take'} "
                f"{slow['total_ms'].mean():.2f} ms{'' if one else ' on average'} against a median of "
                f"{median['total_ms']:.2f} ms; the extra time is mostly in {phase[:-3]} (+{grown[phase]:.2f} ms) "
                f"[{f}: step, total_ms, {phase}]"
            ),
            threshold=ctx.rule_text(
                f"time outlier steps ({outlier_rule_text(ctx.thresholds['outlier_min_pct'])}) add, % of step time",
                "outlier_excess_pct",
            ),
            suggestion=FIX[ctx.framework],
            files=[f],
            metrics={"outliers": float(len(slow)), "period_steps": float(every_p or 0), "excess_ms_per_step": excess},
        )
    ]


QUESTION = Question(
    name="outliers", page="overview", keys=("step_outliers",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

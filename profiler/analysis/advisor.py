"""The advisor: ranked bottleneck findings with evidence and a fix (report_{rank}.json), and the verdict.

Pure: what one rank offers (`results.RankData`: the step trace, op tables, the run's ops, the queue
summary, the counters, ...), the context (rank, framework, thresholds) in, a JSON-ready report out.
The questions are the finding modules of `analysis/findings/` (one per symptom of DESIGN.md's table:
input pipeline, host work between steps, operators, launch overhead, tail, communication, outlier
steps, memory growth, the profiler itself); each is given only the data it declares and returns a
finding only when its documented threshold fires, so a run with no problem gets the verdict
"balanced" instead of an invented one. This module ranks what they find, and decides the verdict.

Figures are totals over the analysed steps (the warm-up steps left out), divided by their count:
means, so that shares add up over the run and bimodal or alternating step times (a 2-worker loader
delivering in bursts) are weighed by the time they really take; medians appear only as evidence.
A few outlier steps (a periodic checkpoint, an evaluation) are the step_outliers rule's: the other
rules measure the steady steps (the analysed steps without the outliers), so the same seconds are
not reported twice (`findings.base.StepWindow`).

Every finding says how much of the step is at stake (ms per step and % of the mean step), the
numbers it rests on and the output files they come from, the threshold that fired, and a
suggestion in the terms of the framework that produced the run (torch / mindspore / plain
Python). Multi-rank findings (straggler_rank, the cluster's comm_bound) have the same shape plus
a `rank`; the cluster analysis (cluster.py) gets them from `cluster_findings` and stores them in
cluster_summary.json (docs/formats.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Optional, Protocol

import pandas as pd

from profiler.analysis.findings import QUESTIONS
from profiler.analysis.findings.base import (
    BALANCED,
    Context,
    Finding,
    Question,
    StepWindow,
    Threshold,
    data_wait_measured,
)
from profiler.analysis.steps import median_of
from profiler.errors import ProfviewError
from profiler.formats.columns import PHASE_COLUMNS
from profiler.importers.registry import importer_for
from profiler.memory import give_back_freed_memory
from profiler.model import RunInfo, data_origin

REPORT_SCHEMA_VERSION = 1

#: the thresholds of the step statistics and of the verdict; each question declares its own
VERDICT_THRESHOLDS = {
    "warmup_steps": Threshold(1, "first steps left out of every statistic (lazy initialisation, allocator warm-up)"),
    "severity_high_pct": Threshold(20.0, "a finding with at least this % of the mean step at stake is high severity"),
    "severity_medium_pct": Threshold(8.0, "... at least this % is medium severity (below: low)"),
    "device_idle_pct": Threshold(
        50.0,
        "a device idle at least this % of its window is never balanced: the largest "
        "cause of its idle time is reported as high severity",
    ),
}

#: Every threshold, its default and what it means (docs/formats.md "report", docs/tuning-guide.md).
THRESHOLD_DOCS: dict[str, tuple[float, str]] = {
    name: (t.default, t.doc)
    for table in (VERDICT_THRESHOLDS, *(q.thresholds for q in QUESTIONS))
    for name, t in table.items()
}
DEFAULT_THRESHOLDS: dict[str, float] = {name: value for name, (value, _) in THRESHOLD_DOCS.items()}

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


# ----------------------------------------------------------------------------- thresholds


def resolve_thresholds(*overrides: Optional[Mapping[str, Any]]) -> dict[str, float]:
    """The defaults with each override applied in turn; an unknown name or a non-number is a ProfviewError."""
    out = dict(DEFAULT_THRESHOLDS)
    for layer in overrides:
        for name, value in (layer or {}).items():
            if name not in DEFAULT_THRESHOLDS:
                raise ProfviewError(f"unknown advisor threshold {name!r} (known: {', '.join(DEFAULT_THRESHOLDS)})")
            try:
                out[name] = float(str(value).rstrip("%"))
            except ValueError:
                raise ProfviewError(f"advisor threshold {name} wants a number, not {value!r}") from None
    return out


def parse_threshold(text: str) -> tuple[str, float]:
    """`name=value` (a trailing % is allowed) from the command line."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ProfviewError(f"--threshold wants name=value (e.g. input_gap_pct=15), not {text!r}")
    name = name.strip()
    return name, resolve_thresholds({name: value.strip()})[name]


def severity_of(pct: float, thresholds: Mapping[str, float]) -> str:
    """high / medium / low from the share of the mean step at stake."""
    if pct >= thresholds["severity_high_pct"]:
        return "high"
    return "medium" if pct >= thresholds["severity_medium_pct"] else "low"


# ----------------------------------------------------------------------------- whose terms


#: sources whose presence in a recording make it a torch run (attach(), op capture)
TORCH_SOURCES = ("torch", "torch_hooks")
#: sources whose presence make it a MindSpore run (its training callback, MindSpore's profiler beside it)
MINDSPORE_SOURCES = ("mindspore",)


def framework_of(info: RunInfo) -> str:
    """torch / mindspore / plain: whose terms the suggestions use. An imported run uses its importer's
    (Importer.framework); a recording that used attach() or torch op capture is a torch run, whether or
    not framework="torch" was passed."""
    importer = importer_for(data_origin(info))
    imported = importer.framework if importer is not None else "plain"
    config = info.get("config") if isinstance(info.get("config"), Mapping) else {}
    sources = info.get("sources") if isinstance(info.get("sources"), Mapping) else {}
    if imported == "torch" or config.get("framework") == "torch" or any(s in sources for s in TORCH_SOURCES):
        return "torch"
    if any(s in sources for s in MINDSPORE_SOURCES):
        return "mindspore"
    return imported


# ----------------------------------------------------------------------------- the report


class RankFacts(Protocol):
    """What the advisor itself reads of a rank (`results.RankData`); the questions read what they declare."""

    steps: StepWindow
    step_source: str  # marked | inferred | whole_run (analysis/steps.py)
    step_source_note: str  # the sentence saying how steps were found, when not marked


#: Findings that measure one cause from two sides, so that only one may charge it: (the host's view, the
#: device's view). The host's data wait and the device idle inside it are one wait.
SAME_CAUSE = (({"input_bound", "transmission_bound"}, "input_bound:device"),)


def one_charge_per_cause(findings: list[Finding]) -> list[Finding]:
    """The findings with every cause charged once: of a host finding and a device finding of the same cause
    (SAME_CAUSE), the host's stays (it measures the whole wait) and says how much of it the device sat idle."""
    out = list(findings)
    for host_keys, device_key in SAME_CAUSE:
        host = [f for f in out if (f.key or f.kind) in host_keys]
        device = [f for f in out if f.key == device_key]
        if host and device:
            for f in device:
                out.remove(f)
            idle = sum(f.at_stake_ms for f in device)
            host[0].evidence += f"; the device sits idle {idle:.2f} ms a step of it ({device_key}, charged here once)"
    return out


def with_severity(findings: list[Finding], thresholds: Mapping[str, float]) -> list[Finding]:
    """The findings, each with its stake turned into what its fix can win (profiler.analysis.stakes) and
    its severity: the one its rule fixed, else from that share."""
    for f in findings:
        f.achievable()
        f.severity = f.severity or severity_of(f.at_stake_pct, thresholds)
    return findings


def rank_findings(findings: list[Finding], thresholds: Mapping[str, float]) -> list[Finding]:
    """The findings with their severity, in report order: severity, then time at stake."""
    return sorted(
        with_severity(findings, thresholds), key=lambda f: (SEVERITY_ORDER[f.severity], -f.at_stake_ms, f.kind)
    )


#: the per-step figures report["steps"] gives (the Overview's key figures and --summary read them)
KEY_FIGURES = (*PHASE_COLUMNS, "data_wait_ms", "gap_host_ms", "all_reduce_ms", "profiler_overhead_ms")


def key_figures(data: RankFacts) -> dict[str, Any]:
    """report["steps"]: what the figures rest on (analysed steps, warm-up, outliers, captured steps) and
    the mean step's split, so every page shows the advisor's own numbers. The step figures are over the
    steady steps (`StepWindow.steady`: the analysed steps without the outliers), as every finding's are;
    `wall_ms` is the analysed steps' summed time (outliers included)."""
    steps = data.steps
    steady = steps.steady
    present = [c for c in KEY_FIGURES if c in steady and steady[c].notna().any()]  # gap_host_ms: unmeasured
    return {
        "analysed": int(len(steps.analysed)),
        "warmup_skipped": int(steps.skipped),
        "outliers": int(len(steps.analysed) - len(steady)),
        "steady": int(len(steady)),
        "rule": steps.note,
        "mean_ms": round(steps.mean_ms, 4),
        "median_ms": round(median_of(steady["total_ms"].to_numpy()), 4),
        "wall_ms": round(float(steps.analysed["total_ms"].sum()), 4),
        "mean_phase_ms": {c: round(steps.per_step(c), 4) for c in present},
        "share_pct": {c: round(share_pct(steady, c), 3) for c in present},
        "op_captured_steps": int(len(steps.captured)) if "op_count" in steps.analysed else None,
        "data_wait_measured": data_wait_measured(steps),
        # only for steps that were not marked (absent: step() / annotations / the device marked them)
        **({"source": data.step_source, "source_note": data.step_source_note} if data.step_source != "marked" else {}),
    }


def share_pct(steps: pd.DataFrame, column: str) -> float:
    """A column's % of the step time, over the steps where it is a number (a data wait measured in some steps only,
    op capture's: of their time); NaN when none is (not measured), 0 when their time is."""
    measured = steps[column].notna()
    if not measured.any():
        return float("nan")
    total = float(steps["total_ms"][measured].sum())
    return 100.0 * float(steps[column][measured].sum()) / total if total > 0 else 0.0


def headline(verdict: str, findings: list[Finding], data: RankFacts) -> str:
    """One sentence for the top of the report: the top problem (or none) and the mean step's split."""
    steps = data.steps
    gap = steps.per_step("iteration_gap_ms")
    gap_text = f"iteration gap {gap:.2f} ms"
    if data_wait_measured(steps):
        split_gap = steps.per_split_step("iteration_gap_ms")  # the gap of the steps that measured the wait
        in_gap = split_gap - steps.per_step("gap_host_ms")
        wait = steps.per_step("data_wait_ms")  # wherever it falls: DataLoader ranges inside ProfilerStep too
        inside = wait - in_gap
        where = (
            f" of a {split_gap:.2f} ms gap in the {len(steps.split)} steps that measured it" if steps.split_note else ""
        )
        gap_text += (
            f" ({wait:.2f} ms data wait{where}, {inside:.2f} ms of it inside forward + backward)"
            if inside >= 0.005
            else f" ({in_gap:.2f} ms data wait{where})"
        )
    split = (
        f"mean steady step {steps.mean_ms:.2f} ms: {gap_text}, forward + backward "
        f"{steps.per_step('fp_bp_ms'):.2f} ms, tail {steps.per_step('tail_ms'):.2f} ms"
    )
    if verdict == BALANCED:
        return f"no high-severity bottleneck ({split})"
    return f"{findings[0].title}: fix this first ({split})"


def advise(data: RankFacts, ctx: Context, questions: tuple[Question, ...] = QUESTIONS) -> dict[str, Any]:
    """Ask every question of one rank and return report_{rank}.json: verdict, headline, ranked findings, thresholds."""
    if not len(data.steps.analysed):
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "verdict": BALANCED,
            "headline": "No steps to analyse.",
            "framework": ctx.framework,
            "findings": [],
            "thresholds": dict(ctx.thresholds),
            "steps": {"analysed": 0, "warmup_skipped": 0},
        }
    found = rank_findings(one_charge_per_cause(list(_rank_answers(data, ctx, questions))), ctx.thresholds)
    verdict = found[0].kind if found and found[0].severity == "high" else BALANCED
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "verdict": verdict,
        "headline": headline(verdict, found, data),
        "framework": ctx.framework,
        "steps": key_figures(data),
        "thresholds": dict(ctx.thresholds),
        "findings": [f.to_json() for f in found],
    }


def _rank_answers(data: RankFacts, ctx: Context, questions: tuple[Question, ...]) -> Iterator[Finding]:
    """Every question's findings on one rank, the spilled pages each read and the heap it freed handed back before
    the next (memory.give_back_freed_memory: a big import's op columns), so the questions do not pile them up."""
    for q in questions:
        if q.rank:
            yield from q.rank.answer(data, ctx)
            give_back_freed_memory()


def cluster_findings(data: object, ctx: Context, questions: tuple[Question, ...] = QUESTIONS) -> list[dict[str, Any]]:
    """Ask every question that has a cluster rule of the job (`cluster.ClusterData`): cluster_summary.json's
    findings, each with its severity, the most time at stake first."""
    found = with_severity([f for q in questions if q.cluster for f in q.cluster.answer(data, ctx)], ctx.thresholds)
    return sorted((f.to_json() for f in found), key=lambda f: -f["at_stake_ms"])

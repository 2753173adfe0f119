"""The live view's analysis: the recent window of a growing recording, read by the same advisor.

Pure: the Run of a recording's last N steps (`store.follow` cuts them at a step boundary,
`store.interpret` reads them) in; out, the same `Analysis` that `analyse()` writes
(`results.analyse_run`: the step trace, op tables, queue summary and the advisor's report), and
the few figures the live views show (`LiveFigures`). The only difference from analysing the whole
recording is the input: a window that starts after the run's first steps holds no warm-up step,
so nothing in it is left out as warm-up.

Step times and rates come from the step samples alone (`step_times`), so they cover every step
of the run at a few bytes a step, whatever the window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.analysis.advisor import resolve_thresholds
from profiler.analysis.results import Analysis, analyse_run
from profiler.model import Run

#: the mean step's split the live views show: (step trace column, label)
SPLIT = (("iteration_gap_ms", "gap"), ("data_wait_ms", "data wait"), ("fp_bp_ms", "fp+bp"), ("tail_ms", "tail"))


def window_thresholds(run: Run, thresholds: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The thresholds for a window of `run`: the given ones, and no warm-up steps left out when the
    window starts after the run's warm-up (its first steps are then ordinary steps)."""
    out = dict(thresholds or {})
    config = run.info.get("config") if isinstance(run.info.get("config"), dict) else {}
    warmup = resolve_thresholds(config.get("advisor_thresholds"), thresholds)["warmup_steps"]
    first = int(run.steps["step"].min()) if len(run.steps) else 0
    if first >= warmup:
        out["warmup_steps"] = 0
    return out


def window_analysis(run: Run, thresholds: Optional[Mapping[str, Any]] = None) -> Analysis:
    """analyse_run on a window of a recording (see window_thresholds)."""
    return analyse_run(run, window_thresholds(run, thresholds))


@dataclass
class QueueNow:
    """One probed queue in the window: its size at the last probe, capacity, and how often a get found it empty."""

    name: str
    size: int
    capacity: int
    mean_size: float
    empty_ratio: Optional[float]


@dataclass
class LiveFigures:
    """What the live views show of the analysed window."""

    first_step: int
    last_step: int
    steps: int  # steps the advisor's figures are over
    mean_ms: float
    split_ms: dict = field(default_factory=dict)  # SPLIT column -> mean ms per step
    split_pct: dict = field(default_factory=dict)  # SPLIT column -> % of the steps' time
    data_wait_measured: bool = False
    verdict: str = "balanced"
    headline: str = ""
    top: Optional[dict] = None  # the top finding (kind, severity, title, at_stake_pct)
    findings: int = 0
    queues: list = field(default_factory=list)  # QueueNow
    report: dict = field(default_factory=dict)


def live_figures(analysis: Analysis) -> Optional[LiveFigures]:
    """The live figures of an analysed window (None when it has no step)."""
    trace, report = analysis.step_trace, analysis.extra_json.get("report", {})
    if not len(trace):
        return None
    figures = report.get("steps") if isinstance(report.get("steps"), dict) else {}
    phases = figures.get("mean_phase_ms", {}) or {}
    shares = figures.get("share_pct", {}) or {}
    findings = report.get("findings") or []
    top = findings[0] if findings else None
    return LiveFigures(
        first_step=int(trace["step"].min()),
        last_step=int(trace["step"].max()),
        steps=int(figures.get("analysed", len(trace))),
        mean_ms=float(figures.get("mean_ms", trace["total_ms"].mean())),
        split_ms={c: float(phases.get(c, 0.0)) for c, _ in SPLIT},
        split_pct={c: float(shares.get(c, 0.0)) for c, _ in SPLIT},
        data_wait_measured=bool(figures.get("data_wait_measured")),
        verdict=str(report.get("verdict", "balanced")),
        headline=str(report.get("headline", "")),
        top={k: top.get(k) for k in ("kind", "severity", "title", "at_stake_pct", "at_stake_ms")} if top else None,
        findings=len(findings),
        queues=queues_now(analysis.run.queues, analysis.extra_json.get("queue_summary")),
        report=report,
    )


def queues_now(queues: pd.DataFrame, summary: Optional[Mapping[str, Any]] = None) -> list[QueueNow]:
    """Per probed queue: the size after its last probe, its capacity, mean size and empty ratio in the window."""
    if queues is None or not len(queues):
        return []
    stats = {}
    for row in (summary or {}).get("queues", []) if isinstance(summary, Mapping) else []:
        if isinstance(row, Mapping) and "queue" in row:
            stats[str(row["queue"])] = row
    out = []
    ordered = queues.sort_values("time_ns", kind="stable")
    for name, q in ordered.groupby("queue", sort=True, observed=True):
        row = stats.get(str(name), {})
        empty = row.get("empty_ratio")
        out.append(
            QueueNow(
                name=str(name),
                size=int(q["size"].iloc[-1]),
                capacity=int(q["capacity"].max()),
                mean_size=float(q["size"].mean()),
                empty_ratio=float(empty) if isinstance(empty, (int, float)) and empty == empty else None,
            )
        )
    return out


def step_times(t: np.ndarray, step: np.ndarray, window_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step numbers, end times, durations in ns) of the steps whose start is known from the step
    samples alone: step k runs from step k-1's end when no recording window starts between them
    (the first step of a window runs from the window's start, as interpret() has it)."""
    order = np.argsort(t, kind="stable")
    t, step = np.asarray(t, np.int64)[order], np.asarray(step, np.int64)[order]
    if len(t) == 0:
        return step, t, t
    starts = np.sort(np.asarray(window_starts, np.int64))
    prev_t = np.concatenate([[np.iinfo(np.int64).min], t[:-1]])
    prev_step = np.concatenate([[-2], step[:-1]])
    # the latest window start at or before each step end
    i = np.searchsorted(starts, t, side="right") - 1
    win_start = (
        np.where(i >= 0, starts[np.maximum(i, 0)], np.iinfo(np.int64).min)
        if len(starts)
        else np.full(len(t), np.iinfo(np.int64).min)
    )  # no window start read (a damaged store)
    continues = (prev_step == step - 1) & (win_start <= prev_t)
    begin = np.where(continues, prev_t, win_start)
    known = continues | (i >= 0)
    return step[known], t[known], (t - begin)[known]


def rate_per_s(durations_ns: np.ndarray) -> float:
    """Steps per second over these step durations (0 when none)."""
    total = float(np.sum(durations_ns))
    return len(durations_ns) * 1e9 / total if total > 0 else 0.0

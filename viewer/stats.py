"""Numbers shared by the report pages and the terminal summary: step phases, outliers, top ops,
findings. Pure functions over the loaded tables, so both outputs always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.analysis.advisor import DEFAULT_THRESHOLDS
from profiler.analysis.findings.base import StepWindow
from profiler.analysis.findings.input_pipeline import MEASURE_DATA_WAIT
from profiler.analysis.steps import analysed_steps, median_of
from profiler.formats import columns
from viewer.theme import ALL_REDUCE, PHASES

StepRange = Optional[tuple[Optional[int], Optional[int]]]


def select_steps(steps: pd.DataFrame, window: StepRange) -> pd.DataFrame:
    """The steps inside an inclusive `(first, last)` range (either end open)."""
    if window is None:
        return steps
    first, last = window
    keep = np.ones(len(steps), dtype=bool)
    if first is not None:
        keep &= steps["step"].to_numpy() >= first
    if last is not None:
        keep &= steps["step"].to_numpy() <= last
    return steps[keep]


def phase_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per phase (and step total, all-reduce): mean, median (`median_of`), p95, max in ms and share of step time."""
    total = float(steps["total_ms"].sum()) or 1.0
    rows = []
    for col, label, _ in PHASES + [ALL_REDUCE, ("total_ms", "step", "")]:
        if col not in steps:
            continue
        values = steps[col].to_numpy(dtype=np.float64)
        rows.append(
            {
                "phase": label,
                "mean_ms": values.mean(),
                "median_ms": median_of(values),
                "p95_ms": np.percentile(values, 95),
                "max_ms": values.max(),
                "share_pct": 100.0 * values.sum() / total,
            }
        )
    return pd.DataFrame(rows)


def threshold(report: Optional[dict[str, Any]], name: str) -> float:
    """The run's advisor threshold `name` (report_{rank}.json's thresholds), else the advisor's default."""
    thresholds = report.get("thresholds") if isinstance(report, dict) else None
    value = number(thresholds.get(name)) if isinstance(thresholds, dict) else None
    return value if value is not None else float(DEFAULT_THRESHOLDS[name])


def step_window(steps: pd.DataFrame, report: Optional[dict[str, Any]], window: StepRange = None) -> StepWindow:
    """The steps every figure is over, by the advisor's rules and the run's thresholds: the warm-up
    steps left out, the outliers apart from the steady steps (`StepWindow`), so every page and the
    summary show the verdict's own mean, median and outliers. A --steps selection is taken whole
    (no warm-up), its outliers apart."""
    min_pct = threshold(report, "outlier_min_pct")
    if window is not None:
        return StepWindow(select_steps(steps, window), 0, min_pct)
    analysed, skipped = analysed_steps(steps, int(threshold(report, "warmup_steps")))
    return StepWindow(analysed, skipped, min_pct)


def profiler_cost_text(report: Any) -> str:
    """What the profiler itself cost, in words, from report["profiler_cost"] ("" when the report does not
    say): its time per step, torch.profiler's events held during op capture, profview's buffers."""
    cost = report.get("profiler_cost") if isinstance(report, dict) else None
    if not isinstance(cost, dict):
        return ""
    parts = []
    overhead, share = number(cost.get("overhead_ms_per_step")), number(cost.get("overhead_pct"))
    if overhead is not None:
        parts.append(f"{overhead:.2f} ms per step" + (f" ({share:.1f} % of the step)" if share is not None else ""))
    mb = cost.get("memory_mb") if isinstance(cost.get("memory_mb"), dict) else {}
    per_step, held = number(mb.get("torch_per_captured_step")), number(mb.get("torch_held_max"))
    if per_step is not None and held is not None:
        parts.append(
            f"torch.profiler's op capture held about {per_step:.1f} MB of host memory per captured step "
            f"({held:.0f} MB at most, until each capture window's export: the RSS climb during op capture, "
            "which the memory_growth rule leaves out)"
        )
    buffers = number(mb.get("recorder_buffers_peak"))
    if buffers is not None:
        parts.append(f"profview's recording buffers {buffers:.1f} MB at most")
    return "The profiler's own cost: " + "; ".join(parts) + "." if parts else ""


def verdict_phases(steps: pd.DataFrame, report: Optional[dict[str, Any]]) -> pd.DataFrame:
    """phase_table over the verdict's steady steps, by phase label ("step" for the whole step): the
    figures --summary's step table shows, for scripts that print a run's figures."""
    return phase_table(step_window(steps, report).steady).set_index("phase")


def outliers(window: StepWindow) -> pd.DataFrame:
    """The outlier steps of a step window, slowest first."""
    return window.outliers.sort_values("total_ms", ascending=False, kind="stable")


def dominant_phase(steps: pd.DataFrame) -> tuple[str, float]:
    """The phase with the largest share of step time, and that share."""
    table = phase_table(steps)
    phases = table[table["phase"].isin([label for _, label, _ in PHASES])]
    best = phases.loc[phases["share_pct"].idxmax()]
    return str(best["phase"]), float(best["share_pct"])


def top_ops(op_detail: pd.DataFrame, n: int) -> pd.DataFrame:
    """The `n` ops with the most total time on each device, by device."""
    ordered = op_detail.sort_values(["device", "total_ms"], ascending=[True, False])
    return ordered.groupby("device", sort=True).head(n)


def shares_with_other(op_type: pd.DataFrame, device: str, n: int) -> pd.DataFrame:
    """A device's op types by share: the top `n`, then one "other" row for the rest."""
    rows = op_type[op_type["device"] == device].sort_values("share_pct", ascending=False)
    head, rest = rows.head(n), rows.iloc[n:]
    out = head[["op_type", "share_pct", "total_ms", "count"]].reset_index(drop=True)
    if len(rest):
        other = {
            "op_type": f"other ({len(rest)} types)",
            "share_pct": rest["share_pct"].sum(),
            "total_ms": rest["total_ms"].sum(),
            "count": rest["count"].sum(),
        }
        out = pd.concat([out, pd.DataFrame([other])], ignore_index=True)
    return out


FINDING_FIELDS = (
    "kind",
    "key",
    "severity",
    "title",
    "at_stake_ms",
    "at_stake_pct",
    "evidence",
    "threshold",
    "suggestion",
)


def findings(report: Optional[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The verdict and findings of a report_{rank}.json, tolerating missing or odd fields."""
    if not report:
        return "", []
    verdict = report.get("verdict", "")
    if verdict and report.get("headline"):  # the advisor's one-sentence reason
        verdict = f"{verdict} — {report['headline']}"
    items = report.get("findings", [])
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            out.append({key: item.get(key, "") for key in FINDING_FIELDS})
    return ("" if verdict is None else str(verdict)), out


def number(value: Any) -> Optional[float]:
    """A float, or None when the value is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class KeyFigures:
    """report_{rank}.json "steps": the advisor's figures, for every page to show the same numbers."""

    rule: str  # which steps: "mean over N steps, the first k left out ..."
    mean_ms: float
    median_ms: Optional[float]  # None: an older report without it
    wall_ms: float
    shares: list[tuple[str, float]]  # (label, % of the steady steps' time)
    note: str  # how steps were found (when not marked), what was not measured


def key_figures(report: Optional[dict[str, Any]]) -> Optional[KeyFigures]:
    """The advisor's key figures, or None for a report without them (older outputs, no steps)."""
    steps = report.get("steps") if isinstance(report, dict) else None
    if not isinstance(steps, dict) or number(steps.get("mean_ms")) is None:
        return None
    shares = steps.get("share_pct") if isinstance(steps.get("share_pct"), dict) else {}
    labels = [*columns.PHASES, columns.DATA_WAIT, columns.GAP_HOST, columns.ALL_REDUCE]
    measured = bool(steps.get("data_wait_measured"))
    picked = [
        (label, number(shares.get(col)))
        for col, label in labels
        if number(shares.get(col)) is not None and (measured or col not in ("data_wait_ms", "gap_host_ms"))
    ]
    advice = MEASURE_DATA_WAIT.get(str(report.get("framework")), MEASURE_DATA_WAIT["plain"])
    note = "" if measured else f"data wait not measured: the iteration gap is data loading or host work ({advice})"
    source = str(steps.get("source_note") or "")  # steps inferred / one whole-run step
    note = "; ".join(part for part in (source, note) if part)
    return KeyFigures(
        rule=str(steps.get("rule", "")),
        mean_ms=float(steps["mean_ms"]),
        median_ms=number(steps.get("median_ms")),
        wall_ms=number(steps.get("wall_ms")) or 0.0,
        shares=picked,
        note=note,
    )


def queue_verdict_text(summary: Optional[dict[str, Any]]) -> str:
    """The queue analysis's verdict in words: its kind and its reason."""
    verdict = summary.get("verdict") if isinstance(summary, dict) else None
    if not isinstance(verdict, dict) or not verdict.get("kind"):
        return ""
    reason = str(verdict.get("reason", ""))
    return f"{verdict['kind']}" + (f" — {reason}" if reason else "")

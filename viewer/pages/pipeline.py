"""Data pipeline: how full each probed queue was over time, and which stage starves the next."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from profiler.formats import columns
from viewer.context import Context
from viewer.findings import on_page
from viewer.findings import render as render_findings
from viewer.formatting import fmt_pct
from viewer.html import absent, esc, plot_text, section, table
from viewer.page import Live, Page
from viewer.series import add_line
from viewer.stats import findings, key_figures, number
from viewer.theme import PALETTE, styled

#: Queue statistics shown, in order (queue_summary json has more; docs/formats.md lists them).
PREFERRED = [
    "queue",
    "role",
    "capacity",
    "empty_ratio",
    "full_ratio",
    "time_empty_ratio",
    "time_full_ratio",
    "mean_size",
    "max_size",
    "get_wait_ms",
    "get_wait_per_step_ms",
    "put_wait_ms",
]
STAGE_COLUMNS = ["stage", "input_queue", "output_queue", "input_full_ratio", "output_empty_ratio", "slow"]


def occupancy(queues: pd.DataFrame) -> tuple[go.Figure, list[str]]:
    """One row per queue: size over time (step line), capacity dashed. Returns notes on thinning."""
    by_queue = list(queues.groupby("queue", sort=True))  # not `== name`: pandas' text `==` misses "\x00"
    names = [name for name, _ in by_queue]
    fig = make_subplots(
        rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=[plot_text(n) for n in names]
    )
    notes = []
    for i, ((name, q), color) in enumerate(zip(by_queue, PALETTE * len(names)), start=1):
        note = add_line(
            fig, q["time_ms"].to_numpy(), q["size"].to_numpy(), plot_text(name), color, i, "size %{y:.1f}", shape="hv"
        )
        if note:
            notes.append(note)
        capacity = int(q["capacity"].max())
        if capacity > 0:
            fig.add_hline(y=capacity, line=dict(color="#9AA5B1", dash="dash", width=1), row=i, col=1)
        fig.update_yaxes(title_text="size", rangemode="tozero", row=i, col=1)
    fig.update_xaxes(title_text="time (ms)", row=len(names), col=1)
    return styled(fig, height=max(260, 170 * len(names)), showlegend=False), notes


def summary_rows(summary: dict[str, Any] | None, queues: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Per-queue statistics from queue_summary json (any reasonable shape), else from the csv."""
    raw = summary.get("queues", summary) if isinstance(summary, dict) else None
    if isinstance(raw, dict):
        raw = [dict(v, queue=k) for k, v in raw.items() if isinstance(v, dict)]
    if isinstance(raw, list) and any(isinstance(r, dict) for r in raw):
        return [r for r in raw if isinstance(r, dict)]
    if queues is None:
        return []
    rows = []
    for name, q in queues.groupby("queue", sort=True):
        capacity = int(q["capacity"].max())
        rows.append(
            {
                "queue": name,
                "capacity": capacity,
                "empty_ratio": float((q["size"] == 0).mean()),
                "full_ratio": float((q["size"] >= capacity).mean()) if capacity > 0 else 0.0,
                "mean_size": float(q["size"].mean()),
                "get_wait_ms": float(q["wait_ms"].sum()) if "wait_ms" in q else 0.0,
            }
        )
    return rows


def ratio_bars(rows: list[dict[str, Any]]) -> go.Figure:
    """Empty and full ratios per queue, side by side."""
    names = [plot_text(r.get("queue", "?")) for r in rows]
    fig = go.Figure()
    for key, label, color in (("empty_ratio", "empty", "#C0392B"), ("full_ratio", "full", "#6BA368")):
        values = [100 * (number(r.get(key)) or 0.0) for r in rows]
        fig.add_bar(
            x=names,
            y=values,
            name=label,
            marker_color=color,
            hovertemplate=f"%{{x}}<br>{label} %{{y:.1f}} % of the time<extra></extra>",
        )
    return styled(
        fig,
        barmode="group",
        bargap=0.55 if len(rows) < 3 else 0.3,
        yaxis=dict(title="% of probes", range=[0, 100]),
        xaxis=dict(type="category"),
    )


def _cell(key: str, value: Any) -> str:
    """A statistic as text: ratios as percentages, numbers trimmed, null as a dash."""
    if value is None or value == "":
        return "—"
    v = number(value)
    if isinstance(value, bool) or v is None:
        return str(value)
    if key.endswith("_ratio"):
        return fmt_pct(100 * v)
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def _stat_table(rows: list[dict[str, Any]], preferred: list[str]) -> str:
    """The preferred columns that the rows have (every scalar column when they have none of them)."""
    keys = [k for k in preferred if any(k in r for r in rows)]
    if len(keys) < 2:
        keys = sorted({k for r in rows for k, v in r.items() if not isinstance(v, (dict, list))})
    return table(
        [k.replace("_", " ") for k in keys],
        [[_cell(k, r.get(k)) for k in keys] for r in rows],
        [k not in ("queue", "role", "stage", "input_queue", "output_queue") for k in keys],
    )


def _verdict(summary: dict[str, Any] | None) -> str:
    """The summary's verdict (kind and reason) and bottleneck stage, however they are given."""
    if not isinstance(summary, dict):
        return ""
    verdict = summary.get("verdict")
    if isinstance(verdict, dict):
        kind, reason = verdict.get("kind"), verdict.get("reason")
        kind = str(kind or "").replace("_", " ")
        text = f"{kind}: {reason}" if kind and reason else str(reason or kind)
        stage = verdict.get("bottleneck_stage")
    else:
        text, stage = str(verdict or ""), None
    pipeline = summary.get("pipeline") if isinstance(summary.get("pipeline"), dict) else {}
    stage = stage or pipeline.get("bottleneck_stage") or summary.get("bottleneck_stage") or summary.get("bottleneck")
    html = f'<div class="verdict">{esc(text)}</div>' if text else ""
    if stage:
        html += f"<p><b>Slowest stage:</b> {esc(stage)}</p>"
    return html


def _stages(summary: dict[str, Any] | None) -> str:
    """The pipeline stages table (input full, output empty: the slow stage), when the summary has one."""
    pipeline = summary.get("pipeline") if isinstance(summary, dict) else None
    stages = pipeline.get("stages") if isinstance(pipeline, dict) else None
    rows = [r for r in stages if isinstance(r, dict)] if isinstance(stages, list) else []
    if not rows:
        return ""
    return section(
        "Pipeline stages",
        _stat_table(rows, STAGE_COLUMNS),
        "A stage whose input queue is full while its output queue is empty is the slow one.",
    )


def _step_verdict(ctx: Context) -> str:
    """What the data pipeline means for the step, in the advisor's words: the same verdict and figures
    as the Overview; the queue statistics below are its evidence."""
    _, items = findings(ctx.run.report)
    hits = on_page(items, "pipeline")
    if hits:
        return section(
            "What it costs the step",
            render_findings("", hits),
            "The advisor's reading of the iteration gap (as on the Overview): measured data wait "
            "against other host work between steps.",
        )
    figures = key_figures(ctx.run.report)
    shares = dict(figures.shares) if figures is not None else {}
    wait = shares.get(columns.DATA_WAIT[1])
    if wait is None:
        return ""
    return section(
        "What it costs the step",
        f'<div class="verdict">The loop waited for data {fmt_pct(wait)} of '
        f"the time ({esc(figures.rule)}): below the input_gap_pct line, the input pipeline keeps up.</div>",
    )


def build(ctx: Context) -> str:
    """The data pipeline tab."""
    run = ctx.run
    rows = summary_rows(run.queue_summary, run.data_queue)
    if run.data_queue is None and not rows:
        return _step_verdict(ctx) + section(
            "Data pipeline",
            absent("No data-queue probes were recorded in this run (no data_queue csv or queue_summary json)."),
        )
    source = "queue_summary json" if run.queue_summary else "computed from the data_queue csv"
    parts = [
        _step_verdict(ctx),
        section(
            "Queue statistics",
            _verdict(run.queue_summary) + _stat_table(rows, PREFERRED) + "<br>" + ctx.figure(ratio_bars(rows)),
            f"The queue analysis (evidence): empty: a get found the queue empty (the producer is too "
            f"slow); full: a put found it full (the consumer is too slow). Source: {source}.",
        ),
        _stages(run.queue_summary),
    ]
    if run.data_queue is not None and len(run.data_queue):
        fig, notes = occupancy(run.data_queue)
        parts.append(section("Queue occupancy over time", ctx.figure(fig), "; ".join(notes)))
    else:
        parts.append(
            section("Queue occupancy over time", absent("No data_queue csv: occupancy over time is not available."))
        )
    return "".join(parts)


#: Re-built live: the recent window's queues and what they cost the step.
PAGE = Page("pipeline", "Data pipeline", build, live=Live.REFRESHED)

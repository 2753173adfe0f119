"""Overview: where each step's time went, how steps vary, and the verdict."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from profiler.analysis.findings.base import StepWindow
from profiler.analysis.steps import median_of, outlier_rule_text
from viewer.context import Context
from viewer.device_figures import device_bars, device_figures, device_table
from viewer.findings import render as render_findings
from viewer.formatting import fmt_ms, fmt_pct, fmt_seconds
from viewer.html import absent, cards, esc, section, table
from viewer.page import Live, Page
from viewer.stats import findings, key_figures, outliers, phase_table, select_steps, step_window
from viewer.theme import ALL_REDUCE, PHASES, styled


def step_bars(steps: pd.DataFrame) -> go.Figure:
    """Stacked bars per step (gap / fp_bp / tail), all-reduce as markers on top."""
    fig = go.Figure()
    x = steps["step"].to_numpy()
    for col, label, color in PHASES:
        fig.add_bar(
            x=x,
            y=steps[col],
            name=label,
            marker_color=color,
            hovertemplate=f"step %{{x}}<br>{label}: %{{y:.2f}} ms<extra></extra>",
        )
    col, label, color = ALL_REDUCE
    if col in steps and steps[col].any():
        fig.add_scatter(
            x=x,
            y=steps[col],
            name=label,
            mode="markers",
            marker=dict(color=color, symbol="diamond", size=6),
            hovertemplate=f"step %{{x}}<br>{label}: %{{y:.2f}} ms<extra></extra>",
        )
    bargap = 0.15 if len(steps) < 200 else 0
    return styled(fig, barmode="stack", bargap=bargap, xaxis_title="step", yaxis_title="ms")


def distribution(steps: pd.DataFrame) -> go.Figure:
    """Histogram of step time with a box above it, so spread and outliers read at a glance."""
    fig = go.Figure()
    fig.add_histogram(
        x=steps["total_ms"],
        name="steps",
        marker_color="#3366A8",
        opacity=0.85,
        hovertemplate="%{x} ms: %{y} steps<extra></extra>",
        yaxis="y",
    )
    fig.add_box(
        x=steps["total_ms"],
        name="step time",
        marker_color="#3366A8",
        boxpoints="outliers",
        yaxis="y2",
        customdata=steps["step"],
        hovertemplate="step %{customdata}: %{x:.2f} ms<extra></extra>",
    )
    return styled(
        fig,
        showlegend=False,
        xaxis_title="step time (ms)",
        yaxis=dict(domain=[0, 0.75], title="steps"),
        yaxis2=dict(domain=[0.8, 1], visible=False),
    )


def _phase_section(window: StepWindow) -> str:
    phases = phase_table(window.steady)
    rows = [
        (r.phase, fmt_ms(r.mean_ms), fmt_ms(r.median_ms), fmt_ms(r.p95_ms), fmt_ms(r.max_ms), fmt_pct(r.share_pct))
        for r in phases.itertuples()
    ]
    return table(
        ["phase", "mean", "median", "p95", "max", "share of step time"], rows, [False, True, True, True, True, True]
    )


def _outlier_section(window: StepWindow) -> str:
    slow = outliers(window)
    rule = outlier_rule_text(window.outlier_min_pct)
    if not len(slow):
        return f'<p class="note">No outlier steps (step time {esc(rule)}).</p>'
    median = median_of(window.steady["total_ms"].to_numpy())
    rows = [
        (
            int(r.step),
            fmt_ms(r.total_ms),
            f"{r.total_ms / median:.2f}x",
            fmt_ms(r.iteration_gap_ms),
            fmt_ms(r.fp_bp_ms),
            fmt_ms(r.tail_ms),
        )
        for r in slow.head(15).itertuples()
    ]
    more = f" (15 of {len(slow)} shown)" if len(slow) > 15 else ""
    return (
        f'<p class="note">{len(slow)} outlier step(s) (step time {esc(rule)}){esc(more)}; the figures above '
        f"leave them out.</p>"
        + table(["step", "time", "vs median step", "iteration gap", "forward + backward", "tail"], rows, [True] * 6)
    )


def _key_figures(ctx: Context, window: StepWindow) -> tuple[list[tuple[str, str]], str]:
    """The advisor's own figures (the verdict rests on them), or, for a --steps selection, the selection's."""
    figures = key_figures(ctx.run.report)
    if figures is not None and ctx.options.steps is None:
        kpis = [("mean steady step", fmt_ms(figures.mean_ms))]
        kpis += [("median step", fmt_ms(figures.median_ms))] if figures.median_ms is not None else []
        kpis += [("wall time", fmt_seconds(figures.wall_ms))]
        kpis += [(f"{label}", fmt_pct(share)) for label, share in figures.shares]
        note = (
            f"The verdict's figures: {figures.rule}; shares of those steps' time; the wall time includes "
            f"the outlier steps."
        )
        return kpis, note + (f" {figures.note}." if figures.note else "")
    table = phase_table(window.steady).set_index("phase")
    kpis = [
        ("steps", f"{len(window.steady):,}"),
        ("mean step", fmt_ms(table.loc["step", "mean_ms"])),
        ("median step", fmt_ms(table.loc["step", "median_ms"])),
        ("outlier steps", f"{len(window.outliers):,}"),
    ]
    kpis += [(f"{label} share", fmt_pct(table.loc[label, "share_pct"])) for _, label, _ in PHASES]
    scope = "the selected steps (--steps)" if ctx.options.steps is not None else "the recorded steps"
    return kpis, f"Over {scope}: {window.note} (the advisor's rules)."


def _device_section(ctx: Context) -> str:
    """How busy each device was, on what, and why it waited (report_{rank}.json's "devices"); "" without devices."""
    devices = device_figures(ctx.run.report)
    if not devices:
        return ""
    note = (
        "From each device's own timeline: window = first to last execution, all streams; shares of the window "
        "(communication and memory overlap compute); comm overlap = share of communication time with compute "
        "running. Over the whole run, not the selected steps."
    )
    return section("Device time", device_table(devices) + ctx.figure(device_bars(devices)), note)


def _findings_section(ctx: Context) -> str:
    verdict, items = findings(ctx.run.report)
    if not verdict and not items:
        return absent(f"No bottleneck report (report_{ctx.run.rank}.json) in this directory.")
    return render_findings(verdict, items)


def _count(value) -> int:
    """A count from profiler_info (0 when it is not a whole number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _recording_note(ctx: Context) -> str:
    """Dropped events, torn chunks and warnings: never hidden."""
    info = ctx.run.info
    rec = info.get("recording", {}) if isinstance(info.get("recording"), dict) else {}
    notes = []
    dropped, torn = _count(rec.get("dropped_events")), _count(rec.get("torn_chunks"))
    if dropped:
        notes.append(f"{dropped:,} events were dropped while recording ({rec.get('dropped_reason', '')}).")
    if torn:
        notes.append(f"{torn} raw-store chunk(s) were cut short by a crash and skipped.")
    notes += [str(w) for w in info.get("warnings", []) if w]
    sources = info.get("sources", {}) if isinstance(info.get("sources"), dict) else {}
    off = [
        f"{name}: {s.get('status')}"
        for name, s in sources.items()
        if isinstance(s, dict) and str(s.get("status", "ok")) != "ok"
    ]
    if off:
        notes.append("Sources not recorded — " + "; ".join(off) + ".")
    return "".join(f'<p class="note">{esc(n)}</p>' for n in notes)


def build(ctx: Context) -> str:
    """The overview tab."""
    run = ctx.run
    parts = [section("Verdict and findings", _findings_section(ctx) + _recording_note(ctx)), _device_section(ctx)]
    if run.step_trace is None or not len(run.step_trace):
        return "".join(parts) + section(
            "Step breakdown", absent("No step trace (step_trace csv): no step() calls were recorded.")
        )
    window = step_window(run.step_trace, run.report, ctx.options.steps)
    steps = select_steps(run.step_trace, ctx.options.steps)  # the pictures: every step shown
    if not len(steps):
        return "".join(parts) + section("Step breakdown", absent("No steps in the selected --steps range."))
    kpis, kpi_note = _key_figures(ctx, window)
    note = (
        "Each step: iteration gap (previous step end to first forward compute), forward + backward, "
        "tail (last backward compute to step end). All-reduce is part of these and shown separately."
    )
    parts += [
        section("Key figures", cards(kpis), kpi_note),
        section("Step breakdown", ctx.figure(step_bars(steps)), note),
        '<div class="grid2">',
        section("Averages and shares", _phase_section(window), f"Over the steady steps: {window.note}."),
        section("Step-time distribution", ctx.figure(distribution(steps))),
        "</div>",
        "<br>",
        section("Outlier steps", _outlier_section(window)),
    ]
    return "".join(parts)


#: Re-built live: the verdict and step figures of the recent window.
PAGE = Page("overview", "Overview", build, live=Live.REFRESHED)

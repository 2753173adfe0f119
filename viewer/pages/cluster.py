"""Cluster: every rank's step breakdown side by side, and the slowest rank."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from viewer.html import absent, cards, fmt_ms, section, table
from viewer.report import Context
from viewer.stats import select_steps
from viewer.theme import PALETTE, PHASES, styled


def rank_means(ctx: Context) -> pd.DataFrame:
    """Mean phase times per rank (ranks with a step trace only)."""
    rows = []
    for run in ctx.runs:
        if run.step_trace is None or not len(run.step_trace):
            continue
        steps = select_steps(run.step_trace, ctx.options.steps)
        row = {"rank": run.rank, "steps": len(steps)}
        row.update({col: float(steps[col].mean()) for col, _, _ in PHASES + [("total_ms", "", "")]})
        rows.append(row)
    return pd.DataFrame(rows)


def breakdown(means: pd.DataFrame) -> go.Figure:
    """Stacked mean phase times, one bar per rank."""
    fig = go.Figure()
    x = [f"rank {r}" for r in means["rank"]]
    for col, label, color in PHASES:
        fig.add_bar(x=x, y=means[col], name=label, marker_color=color,
                    hovertemplate=f"%{{x}}<br>{label}: %{{y:.2f}} ms<extra></extra>")
    return styled(fig, barmode="stack", yaxis_title="mean ms per step", xaxis=dict(type="category"))


def step_lines(ctx: Context) -> go.Figure:
    """Step time per step, one line per rank: a straggler shows as the top line."""
    fig = go.Figure()
    for i, run in enumerate(r for r in ctx.runs if r.step_trace is not None):
        steps = select_steps(run.step_trace, ctx.options.steps)
        fig.add_scatter(x=steps["step"], y=steps["total_ms"], mode="lines", name=f"rank {run.rank}",
                        line=dict(color=PALETTE[i % len(PALETTE)], width=1.5),
                        hovertemplate=f"rank {run.rank}, step %{{x}}: %{{y:.2f}} ms<extra></extra>")
    return styled(fig, xaxis_title="step", yaxis_title="step time (ms)")


def build(ctx: Context) -> str:
    """The cluster tab."""
    if len(ctx.runs) < 2:
        return section("Cluster", absent("Only one rank wrote to this directory; the cluster view compares "
                                         "ranks of a multi-process job."))
    means = rank_means(ctx)
    if not len(means):
        return section("Cluster", absent("No rank has a step trace."))
    slow = means.loc[means["total_ms"].idxmax()]
    fast = means.loc[means["total_ms"].idxmin()]
    spread = slow["total_ms"] - fast["total_ms"]
    kpis = [("ranks", str(len(means))), ("slowest rank", f"rank {int(slow['rank'])}"),
            ("its mean step", fmt_ms(slow["total_ms"])), ("spread slowest − fastest", fmt_ms(spread))]
    rows = [[int(r["rank"]), int(r["steps"])] + [fmt_ms(r[c]) for c, _, _ in PHASES] + [fmt_ms(r["total_ms"])]
            for _, r in means.iterrows()]
    headers = ["rank", "steps"] + [label for _, label, _ in PHASES] + ["step"]
    return (section("Ranks", cards(kpis))
            + '<div class="grid2">'
            + section("Mean step breakdown per rank", ctx.figure(breakdown(means)))
            + section("Step time per rank", ctx.figure(step_lines(ctx)))
            + "</div><br>"
            + section("Per-rank averages", table(headers, rows, [True] * len(headers))))

"""Cluster: every rank's step breakdown side by side, the straggler and the wait it causes.

With the cluster files of a multi-rank directory (cluster_summary.json, cluster_step_trace.csv,
written by `profiler.analyse()` on rank 0 or `profview analyse DIR`) the page shows the ranks
present / missing, the straggler, a rank x step heatmap of busy time (step minus the wait at the
collectives: the straggler is the bright row), per-rank stacked bars that separate compute from
communication and waiting, and the cluster's findings. Without them it falls back to the ranks'
own step traces.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from profiler.formats.tables import CSV_REQUIRED
from viewer.context import Context
from viewer.device_figures import device_bars, device_figures, device_table
from viewer.formatting import fmt_ms, fmt_pct
from viewer.html import absent, cards, esc, section, table
from viewer.page import Page
from viewer.stats import findings, number, select_steps
from viewer.tables import COMM_OP_COLUMNS, sortable_table
from viewer.theme import ALL_REDUCE, COMM_SPLIT_STYLE, PALETTE, PHASES, styled

#: the per-rank stacked bar: what a mean step is made of (sums to the step when waits are exposed)
STACK = [
    ("iteration_gap_ms", "iteration gap", PHASES[0][2]),
    ("fp_bp_excl_comm_ms", "forward + backward (no comm in flight)", PHASES[1][2]),
    ("comm_overlap_ms", "communication overlapping compute", "#9DB4D3"),
    ("tail_excl_comm_ms", "tail without communication", PHASES[2][2]),
    ("transfer_ms", "exposed communication (transfer)", ALL_REDUCE[2]),
    ("wait_ms", "waiting for slower ranks", "#F1A9A0"),
]


# ---- from the ranks' own step traces (no cluster files) ---------------------------------------


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


def stacked(means: pd.DataFrame, parts: list[tuple[str, str, str]]) -> go.Figure:
    """Stacked mean times (`parts`: column, label, colour), one bar per rank."""
    fig = go.Figure()
    x = [f"rank {int(r)}" for r in means["rank"]]
    for col, label, color in parts:
        fig.add_bar(
            x=x,
            y=means[col],
            name=label,
            marker_color=color,
            hovertemplate=f"%{{x}}<br>{label}: %{{y:.2f}} ms<extra></extra>",
        )
    return styled(fig, barmode="stack", yaxis_title="mean ms per step", xaxis=dict(type="category"))


def step_lines(ctx: Context) -> go.Figure:
    """Step time per step, one line per rank: a straggler shows as the top line."""
    fig = go.Figure()
    for i, run in enumerate(r for r in ctx.runs if r.step_trace is not None):
        steps = select_steps(run.step_trace, ctx.options.steps)
        fig.add_scatter(
            x=steps["step"],
            y=steps["total_ms"],
            mode="lines",
            name=f"rank {run.rank}",
            line=dict(color=PALETTE[i % len(PALETTE)], width=1.5),
            hovertemplate=f"rank {run.rank}, step %{{x}}: %{{y:.2f}} ms<extra></extra>",
        )
    return styled(fig, xaxis_title="step", yaxis_title="step time (ms)")


def _rank_table(means: pd.DataFrame) -> str:
    rows = [
        [int(r["rank"]), int(r["steps"])] + [fmt_ms(r[c]) for c, _, _ in PHASES] + [fmt_ms(r["total_ms"])]
        for _, r in means.iterrows()
    ]
    headers = ["rank", "steps"] + [label for _, label, _ in PHASES] + ["step"]
    return table(headers, rows, [True] * len(headers))


# ---- device time per rank (report_{rank}.json's "devices", or the cluster summary's copy) -------


def _device_section(ctx: Context, summary: dict[str, Any] | None) -> str:
    """Each rank's devices: busy / idle, on what, and why they waited; "" when no rank has a device.
    From cluster_summary.json's `device_time` when it has one, else from the ranks' own reports."""
    records = summary.get("device_time") if isinstance(summary, dict) else None
    if isinstance(records, list):
        by_rank = {}
        for record in records:
            if isinstance(record, dict) and isinstance(record.get("rank"), int):
                by_rank.setdefault(record["rank"], []).append(record)
    else:
        by_rank = {run.rank: (run.report or {}).get("devices") for run in ctx.runs}
    ranks, devices = [], []
    for rank in sorted(by_rank):
        for figures in device_figures({"devices": by_rank[rank]}):
            ranks.append(rank)
            devices.append(figures)
    if not devices:
        return ""
    labels = [f"rank {rank} {d.device}" for rank, d in zip(ranks, devices)]
    return section(
        "Device time per rank",
        device_table(devices, ranks) + ctx.figure(device_bars(devices, labels)),
        "From each device's own timeline (report_{rank}.json's devices): shares of the device's window, "
        "first to last execution; comm overlap = share of communication time with compute running.",
    )


# ---- from the cluster files -------------------------------------------------------------------


def busy_heatmap(steps: pd.DataFrame) -> go.Figure:
    """Rank x step heatmap of busy time (step minus wait): the rank the others wait for is the bright row."""
    grid = steps.pivot(index="rank", columns="step", values="busy_ms").sort_index()
    wait = steps.pivot(index="rank", columns="step", values="wait_ms").reindex_like(grid)
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(),
            x=grid.columns.to_numpy(),
            y=[f"rank {int(r)}" for r in grid.index],
            customdata=wait.to_numpy(),
            colorscale="YlOrRd",
            colorbar=dict(title="busy ms"),
            hovertemplate="%{y}, step %{x}<br>busy %{z:.2f} ms<br>waiting %{customdata:.2f} ms<extra></extra>",
        )
    )
    return styled(
        fig, height=max(260, 60 + 22 * len(grid)), xaxis_title="step", yaxis=dict(type="category", autorange="reversed")
    )


def cluster_means(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank mean of the stacked parts; exposed communication split into transfer and waiting."""
    parts = [c for c in CSV_REQUIRED["cluster_step_trace"][1] if c not in ("rank", "step", "slowest_rank")]
    means = steps.groupby("rank", sort=True)[parts].mean().reset_index()
    means["transfer_ms"] = (means["exposed_comm_ms"] - means["wait_ms"]).clip(lower=0)
    means["steps"] = steps.groupby("rank", sort=True).size().to_numpy()
    return means


def _coverage_cards(summary: dict[str, Any], means: pd.DataFrame) -> str:
    ranks = summary.get("ranks", {}) if isinstance(summary.get("ranks"), dict) else {}
    comm = summary.get("communication") or {}
    straggler = summary.get("straggler") or {}
    present = ranks.get("present", list(means["rank"]))
    items = [("ranks with data", f"{len(present)} of {ranks.get('world_size', len(present))}")]
    if ranks.get("missing"):
        items.append(("missing ranks", str(len(ranks["missing"]))))
    if straggler:
        items.append(("straggler", f"rank {straggler.get('rank')}"))
        excess = number(straggler.get("excess_ms"))
        if excess is not None:
            items.append(("it is slower by", fmt_ms(excess) + " / step"))
    for key, label in (("comm_share_pct", "communication share"), ("wait_share_pct", "waiting share")):
        value = number(comm.get(key))
        if value is not None:
            items.append((label, fmt_pct(value)))
    return cards(items)


def _notes(summary: dict[str, Any]) -> str:
    warnings = [str(w) for w in summary.get("warnings", []) if w] if isinstance(summary.get("warnings"), list) else []
    clock = summary.get("clock", {}) if isinstance(summary.get("clock"), dict) else {}
    method = {
        "offset_to_rank0": "measured clock offsets to rank 0",
        "unix_clock": "the ranks' Unix clocks (no offset was measured)",
    }.get(clock.get("method"))
    if method:
        unc = number(clock.get("max_uncertainty_ns"))
        warnings.append(
            f"Ranks are aligned by {method}" + (f", uncertainty up to {fmt_ms(unc / 1e6)}." if unc else ".")
        )
    return "".join(f'<p class="note">{esc(w)}</p>' for w in warnings)


def _findings_table(summary: dict[str, Any]) -> str:
    _, items = findings(summary)
    if not items:
        return absent("No cluster finding: no straggler, and communication is hidden behind compute.")
    rows = [[f["severity"], f["title"], f["evidence"], f["suggestion"]] for f in items]
    return table(["severity", "finding", "evidence", "suggestion"], rows)


def _cluster_page(summary: dict[str, Any], steps: pd.DataFrame, ctx: Context) -> str:
    steps = select_steps(steps, ctx.options.steps)
    if not len(steps):
        return section("Cluster", absent("No step of the cluster step trace is in the selected range."))
    means = cluster_means(steps)
    rows = [
        [int(r["rank"]), int(r["steps"])] + [fmt_ms(r[c]) for c in ("total_ms", "busy_ms", "comm_ms", "wait_ms")]
        for _, r in means.iterrows()
    ]
    headers = ["rank", "steps", "step", "busy", "communication", "waiting"]
    return (
        section("Ranks", _coverage_cards(summary, means) + _notes(summary))
        + section("Findings", _findings_table(summary))
        + section(
            "Busy time per rank and step",
            ctx.figure(busy_heatmap(steps)),
            "busy = step time minus the time spent waiting for other ranks at the collectives",
        )
        + '<div class="grid2">'
        + section("Mean step per rank", ctx.figure(stacked(means, STACK)))
        + section("Step time per rank", ctx.figure(step_lines(ctx)))
        + "</div><br>"
        + section("Per-rank averages", table(headers, rows, [True] * len(headers)))
        + _comm_split_section(ctx)
        + _comm_ops_section(ctx)
        + _device_section(ctx, summary)
    )


def _comm_split_section(ctx: Context) -> str:
    """Each rank's mean step split into computation, overlap, communication and other (cluster_comm_split csv)."""
    split = ctx.runs[0].cluster_comm_split
    if split is None or not len(split):
        return ""
    means = split.groupby("rank", sort=True)[list(COMM_SPLIT_STYLE)].mean().reset_index()
    parts = [(column, label, color) for column, (label, color) in COMM_SPLIT_STYLE.items()]
    return section(
        "Computation and communication per rank",
        ctx.figure(stacked(means, parts)),
        "Mean per step, as the TensorBoard plugin's distributed view splits it: a rank with more communication "
        "and less overlap than the others waits at the collectives.",
    )


#: cluster_comm_ops csv's columns as the table shows them: every rank's collectives with their data transfer time
CLUSTER_COMM_OP_TABLE = [
    ("rank", "rank", "int"),
    *COMM_OP_COLUMNS,
    ("transfer_ms", "data transfer ms", "num"),
    ("mean_transfer_ms", "mean data transfer ms", "num"),
]


def _comm_ops_section(ctx: Context) -> str:
    """Every rank's collectives with their data transfer time (cluster_comm_ops csv)."""
    ops = ctx.runs[0].cluster_comm_ops
    if ops is None or not len(ops):
        return ""
    return section(
        "Collectives per rank",
        sortable_table(ctx, ops, CLUSTER_COMM_OP_TABLE, "total_ms", "filter by collective…"),
        "Data transfer: each call's kernels as long as the fastest rank's (the rest of a longer one waited for "
        "the slowest peer), as the TensorBoard plugin's distributed view; empty when the ranks disagree on a "
        "collective's calls.",
    )


def build(ctx: Context) -> str:
    """The cluster tab."""
    summary, steps = ctx.runs[0].cluster_summary, ctx.runs[0].cluster_step_trace
    if summary is not None and steps is not None and len(steps):
        return _cluster_page(summary, steps, ctx)
    if len(ctx.runs) < 2:
        return section(
            "Cluster",
            absent("Only one rank wrote to this directory; the cluster view compares ranks of a multi-process job."),
        )
    means = rank_means(ctx)
    if not len(means):
        return section("Cluster", absent("No rank has a step trace."))
    slow = means.loc[means["total_ms"].idxmax()]
    fast = means.loc[means["total_ms"].idxmin()]
    spread = slow["total_ms"] - fast["total_ms"]
    kpis = [
        ("ranks", str(len(means))),
        ("slowest rank", f"rank {int(slow['rank'])}"),
        ("its mean step", fmt_ms(slow["total_ms"])),
        ("spread slowest − fastest", fmt_ms(spread)),
    ]
    return (
        section("Ranks", cards(kpis))
        + '<div class="grid2">'
        + section("Mean step breakdown per rank", ctx.figure(stacked(means, PHASES)))
        + section("Step time per rank", ctx.figure(step_lines(ctx)))
        + "</div><br>"
        + section("Per-rank averages", _rank_table(means))
        + _device_section(ctx, None)
    )


#: Not live: the live report follows one rank, and the cluster files come from analysing every rank.
PAGE = Page("cluster", "Cluster", build)

"""Kernels: the TensorBoard plugin's overview and kernel view (docs/tensorboard.md): each step's time by
activity, the GPU summary, the kernels that took the device's time and every kernel with the op that
launched it."""

from __future__ import annotations

import plotly.graph_objects as go

from viewer.context import Context
from viewer.device_figures import device_figures, gpu_summary_table
from viewer.findings import page_section
from viewer.formatting import short_labels
from viewer.html import plot_text, section
from viewer.page import Page
from viewer.tables import COMM_OP_COLUMNS, sortable_table
from viewer.theme import CATEGORY_COLORS, COMM_SPLIT_STYLE, OTHER, styled

#: The label and colour of each activity of step_activity_{rank}.csv (its columns between step and total_ms, in order).
ACTIVITY_STYLE = {
    "kernel_ms": ("kernel", CATEGORY_COLORS["compute"]),
    "memcpy_ms": ("memcpy", CATEGORY_COLORS["memcpy"]),
    "memset_ms": ("memset", CATEGORY_COLORS["memset"]),
    "communication_ms": ("communication", CATEGORY_COLORS["comm"]),
    "runtime_ms": ("runtime", "#E39B3B"),
    "dataloader_ms": ("data loader", "#D4A017"),
    "cpu_exec_ms": ("CPU exec", CATEGORY_COLORS["host"]),
    "other_ms": ("other", OTHER),
}

#: Columns of the kernel table: (kernels column, header, kind).
KERNEL_COLUMNS = [
    ("device", "device", "text"),
    ("name", "kernel", "text"),
    ("op", "launched by", "text"),
    ("calls", "calls", "int"),
    ("total_ms", "total ms", "num"),
    ("mean_ms", "mean ms", "num"),
    ("max_ms", "max ms", "num"),
    ("min_ms", "min ms", "num"),
    ("blocks_per_sm", "blocks per SM", "num"),
    ("achieved_occupancy_pct", "achieved occupancy %", "num"),
    ("tensor_cores", "tensor cores", "text"),
]


def step_bars(table, parts: dict[str, tuple[str, str]]) -> go.Figure:
    """One stacked bar per step of `table`: each of `parts` (column -> label, colour), in their order."""
    labels = [str(step) for step in table["step"]]
    fig = go.Figure(
        [
            go.Bar(
                name=label,
                x=labels,
                y=table[column],
                marker_color=color,
                hovertemplate=f"step %{{x}}<br>{label}: %{{y:.3f}} ms<extra></extra>",
            )
            for column, (label, color) in parts.items()
        ]
    )
    return styled(fig, barmode="stack", xaxis=dict(title="step", type="category"), yaxis_title="ms")


#: Columns of the communication ops table: (comm_ops column, header, kind).


def top_kernels(kernels, top: int) -> go.Figure:
    """The kernels (all launching ops together) with the most total time, longest at the top."""
    totals = kernels.groupby("name", sort=False)[["total_ms", "calls"]].sum().nlargest(top, "total_ms").iloc[::-1]
    names = [str(name) for name in totals.index]
    fig = go.Figure(
        go.Bar(
            x=totals["total_ms"],
            y=[plot_text(label) for label in short_labels(names)],
            orientation="h",
            customdata=list(zip(totals["calls"], [plot_text(name) for name in names])),
            hovertemplate="%{customdata[1]}<br>%{x:.3f} ms in %{customdata[0]} calls<extra></extra>",
        )
    )
    return styled(
        fig,
        height=max(220, 26 * len(totals) + 80),
        xaxis_title="total ms",
        yaxis=dict(type="category", automargin=True),
        margin=dict(l=10, r=30, t=20, b=44),
    )


def build(ctx: Context) -> str:
    """The kernels tab."""
    run = ctx.run
    parts = [page_section(run.report, "kernels")]
    summary = gpu_summary_table(device_figures(run.report))
    if summary:
        parts.append(
            section(
                "GPU summary",
                summary,
                "Over the steps as the TensorBoard plugin delimits them: utilization (any kernel running), "
                "SM efficiency (blocks per SM of the running kernels, capped at 1), occupancy (weighted by "
                "kernel time), tensor-core kernel time, and the kernel time of tensor-core eligible ops.",
            )
        )
    if run.step_activity is not None and len(run.step_activity):
        parts.append(
            section(
                "Step time by activity",
                ctx.figure(step_bars(run.step_activity, ACTIVITY_STYLE)),
                "Every instant of a step goes to the first activity running then, in the legend's order "
                "(the TensorBoard plugin's overview).",
            )
        )
    if run.kernels is not None and len(run.kernels):
        parts.append(
            section(
                f"Top {ctx.options.top_ops} kernels",
                ctx.figure(top_kernels(run.kernels, ctx.options.top_ops)),
                "By total time; a kernel's full name is in its hover and in the table.",
            )
        )
        parts.append(
            section(
                "Kernels",
                sortable_table(ctx, run.kernels, KERNEL_COLUMNS, "total_ms", "filter by kernel or op…"),
                "One row per kernel and the op that launched it; blocks per SM and occupancy are the "
                "tracer's estimates, averaged by duration.",
            )
        )
    if run.comm_split is not None and len(run.comm_split):
        parts.append(
            section(
                "Computation and communication",
                ctx.figure(step_bars(run.comm_split, COMM_SPLIT_STYLE)),
                "Per step: compute kernels (or the host's work, without kernels) and collectives, apart and at "
                "once (the TensorBoard plugin's distributed view).",
            )
        )
    if run.comm_ops is not None and len(run.comm_ops):
        parts.append(
            section(
                "Collectives",
                sortable_table(ctx, run.comm_ops, COMM_OP_COLUMNS, "total_ms", "filter by collective…"),
                "Latency: from each call's host range to the end of the kernels it launched; bytes: the message "
                "sizes the trace recorded.",
            )
        )
    return "".join(parts)


def shown(ctx: Context) -> bool:
    run = ctx.run
    return any(table is not None and len(table) for table in (run.kernels, run.step_activity, run.comm_ops))


PAGE = Page("kernels", "Kernels", build, shown=shown)

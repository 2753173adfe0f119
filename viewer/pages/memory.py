"""Memory: the TensorBoard plugin's memory view (docs/tensorboard.md) for runs recorded with
`profile_memory=True`: each device's allocated and reserved memory over time with the steps marked, the
peak of each step, the memory statistics of every op and the blocks' lives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from profiler.analysis.memory import step_peaks
from viewer.context import Context
from viewer.findings import page_section
from viewer.formatting import fmt_bytes
from viewer.html import esc, section
from viewer.page import Page
from viewer.tables import sortable_table
from viewer.theme import PALETTE, styled

#: Points of a device's curve drawn at most (above it, each bucket of points keeps its highest).
CURVE_POINTS = 20_000
#: Memory events listed at most (the largest blocks first); the file has them all.
EVENT_ROWS = 20_000

OP_MEMORY_COLUMNS = [
    ("device", "device", "text"),
    ("op", "op", "text"),
    ("calls", "calls", "int"),
    ("self_increase_bytes", "self increase B", "int"),
    ("self_alloc_bytes", "self allocated B", "int"),
    ("self_alloc_count", "self allocations", "int"),
    ("increase_bytes", "increase B", "int"),
    ("alloc_bytes", "allocated B", "int"),
    ("alloc_count", "allocations", "int"),
]
EVENT_COLUMNS = [
    ("device", "device", "text"),
    ("op", "allocated by", "text"),
    ("bytes", "bytes", "int"),
    ("alloc_ms", "allocated at ms", "num"),
    ("free_ms", "freed at ms", "num"),
    ("lifetime_ms", "lifetime ms", "num"),
]


def peak_preserving(points: pd.DataFrame, limit: int) -> pd.DataFrame:
    """At most `limit` rows of a device's curve: each of `limit` equal runs of rows keeps its highest
    allocated point, so the drawn curve keeps every peak."""
    if len(points) <= limit:
        return points
    bucket = np.arange(len(points)) * limit // len(points)
    allocated = points["allocated_bytes"].fillna(-np.inf).to_numpy()
    keep = pd.Series(allocated).groupby(bucket).idxmax().to_numpy()
    return points.iloc[keep]


def memory_curves(curve: pd.DataFrame, steps: pd.DataFrame | None) -> go.Figure:
    """Allocated (solid) and reserved (dotted) memory of each device over time, the steps shaded alternately."""
    fig = go.Figure()
    for i, (device, points) in enumerate(curve.groupby("device", sort=True)):
        points = peak_preserving(points, CURVE_POINTS)
        color = PALETTE[i % len(PALETTE)]
        for column, dash in (("allocated_bytes", "solid"), ("reserved_bytes", "dot")):
            if points[column].notna().any():
                label = f"{device} {column.split('_')[0]}"
                fig.add_trace(
                    go.Scattergl(
                        x=points["time_ms"],
                        y=points[column] / 2**20,
                        name=label,
                        mode="lines",
                        line=dict(color=color, dash=dash, shape="hv"),
                        hovertemplate=f"{label}<br>%{{x:.3f}} ms: %{{y:.3f}} MiB<extra></extra>",
                    )
                )
    if steps is not None and len(steps):
        for k, (start, total) in enumerate(zip(steps["start_ms"], steps["total_ms"])):
            if k % 2 == 0:
                fig.add_vrect(x0=start, x1=start + total, fillcolor="#B0B7BF", opacity=0.15, line_width=0)
    return styled(fig, xaxis_title="time (ms)", yaxis_title="MiB")


def peak_table(curve: pd.DataFrame, steps: pd.DataFrame) -> str:
    """Each step's highest allocated memory per device, as an HTML table."""
    start = steps["start_ms"].to_numpy(float)
    peaks = step_peaks(curve, start, start + steps["total_ms"].to_numpy(float))
    if not len(peaks):
        return ""
    wide = peaks.pivot(index="step_index", columns="device", values="peak_bytes")
    head = "".join(f"<th class='num'>{esc(device)} peak</th>" for device in wide.columns)
    body = "".join(
        f"<tr><td>{int(steps['step'].iloc[index])}</td>"
        + "".join(f"<td class='num'>{fmt_bytes(v) if v == v else ''}</td>" for v in row)
        + "</tr>"
        for index, row in zip(wide.index, wide.to_numpy())
    )
    return (
        f"<div class='table-scroll'><table class='data'><thead><tr><th>step</th>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def build(ctx: Context) -> str:
    """The memory tab."""
    run = ctx.run
    parts = [page_section(run.report, "memory")]
    if run.memory is not None and len(run.memory):
        peaks = run.memory.groupby("device")["allocated_bytes"].max()
        summary = esc(", ".join(f"{device} {fmt_bytes(value)}" for device, value in peaks.items()))
        parts.append(
            section(
                "Memory over time",
                ctx.figure(memory_curves(run.memory, run.step_trace)),
                f"Peak allocated: {summary}. Allocated: what tensors hold; reserved (dotted): what the "
                "allocator holds from the device. Steps are shaded alternately.",
            )
        )
        if run.step_trace is not None and len(run.step_trace):
            table = peak_table(run.memory, run.step_trace)
            if table:
                parts.append(section("Peak per step", table, "The highest allocated memory within each step."))
    if run.op_memory is not None and len(run.op_memory):
        parts.append(
            section(
                "Memory by op",
                sortable_table(ctx, run.op_memory, OP_MEMORY_COLUMNS, "self_increase_bytes", "filter by op…"),
                "Self: allocations and frees made by the op itself; the others add the ops nested in it. "
                "Increase: allocated minus freed.",
            )
        )
    if run.memory_events is not None and len(run.memory_events):
        events = run.memory_events
        note = ""
        if len(events) > EVENT_ROWS:
            note = f" The {EVENT_ROWS:,} largest of {len(events):,} blocks; memory_events csv has them all."
            events = events.nlargest(EVENT_ROWS, "bytes")
        parts.append(
            section(
                "Memory blocks",
                sortable_table(ctx, events, EVENT_COLUMNS, "bytes", "filter by op…"),
                "Each block from its allocation to its free; empty times: allocated before or still held "
                "after the recording." + note,
            )
        )
    return "".join(parts)


def shown(ctx: Context) -> bool:
    run = ctx.run
    return any(table is not None and len(table) for table in (run.memory, run.op_memory, run.memory_events))


PAGE = Page("memory", "Memory", build, shown=shown)

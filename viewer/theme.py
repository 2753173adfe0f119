"""One look for every figure: phase and category colours, fonts, margins.

Phases keep their colour on every page (overview bars, cluster bars, the timeline), so a
reader learns once that orange is the iteration gap.
"""

from __future__ import annotations

import plotly.graph_objects as go

from profiler.formats import columns

#: Each step-trace figure's colour, by column.
COLUMN_COLORS = {"iteration_gap_ms": "#E39B3B", "fp_bp_ms": "#3366A8", "tail_ms": "#6BA368", "all_reduce_ms": "#C0392B"}
#: (step_trace column, label, colour) of the phases (profiler.formats.columns.PHASES), and of all-reduce
PHASES = [(column, label, COLUMN_COLORS[column]) for column, label in columns.PHASES]
ALL_REDUCE = (*columns.ALL_REDUCE, COLUMN_COLORS[columns.ALL_REDUCE[0]])

CATEGORY_COLORS = {
    "compute": "#3366A8",
    "comm": "#C0392B",
    "memcpy": "#8E6CB8",
    "memset": "#B08BD6",
    "host": "#7A8B99",
    "user": "#2A9D8F",
    "python": "#C9B458",
    "phase": "#9DB4D3",
    "span": "#B5651D",
    "step": "#B0B7BF",
}
#: The parts of the TensorBoard plugin's computation / communication split (comm_split csv columns).
COMM_SPLIT_STYLE = {
    "computation_ms": ("computation", "#3366A8"),
    "overlap_ms": ("overlap", "#8E6CB8"),
    "communication_ms": ("communication", "#C0392B"),
    "other_ms": ("other", "#C9CED4"),
}
PALETTE = ["#3366A8", "#E39B3B", "#6BA368", "#C0392B", "#8E6CB8", "#2A9D8F", "#B5651D", "#7A8B99", "#D4A017", "#5DA5DA"]
OTHER = "#C9CED4"
FONT = "Inter, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def category_color(category: str, index: int = 0) -> str:
    """The colour of an op category; unknown categories take palette colours in turn."""
    return CATEGORY_COLORS.get(category, PALETTE[index % len(PALETTE)])


def styled(fig: go.Figure, height: int = 360, **layout) -> go.Figure:
    """Apply the report's common layout (overridable through `layout`) to a figure and return it."""
    base = dict(
        template="plotly_white",
        height=height,
        font=dict(family=FONT, size=12, color="#1F2933"),
        margin=dict(l=60, r=20, t=36, b=44),
        hoverlabel=dict(font=dict(family=FONT, size=12)),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0, traceorder="normal"),
        colorway=PALETTE,
    )
    fig.update_layout(**{**base, **layout})
    fig.update_annotations(font=dict(size=13, color="#3E4C59"))  # subplot titles
    return fig

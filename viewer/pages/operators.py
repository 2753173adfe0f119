"""Operators: which op types take each device's time, and every op in a sortable table."""

from __future__ import annotations

import plotly.graph_objects as go

from viewer.context import Context
from viewer.formatting import short_labels
from viewer.html import absent, plot_text, section
from viewer.page import Live, Page
from viewer.stats import shares_with_other
from viewer.tables import sortable_table
from viewer.theme import OTHER, PALETTE, styled

#: Columns of the detail table: (op_detail column, header, kind).
DETAIL_COLUMNS = [
    ("device", "device", "text"),
    ("name", "name", "text"),
    ("op_type", "type", "text"),
    ("category", "category", "text"),
    ("count", "count", "int"),
    ("total_ms", "total ms", "num"),
    ("self_ms", "self ms", "num"),
    ("avg_ms", "avg ms", "num"),
    ("min_ms", "min ms", "num"),
    ("max_ms", "max ms", "num"),
    ("share_pct", "share %", "num"),
    ("device_self_ms", "device self ms", "num"),
    ("device_total_ms", "device total ms", "num"),
    ("tc_eligible", "tensor-core eligible", "text"),
    ("tc_total_pct", "tensor cores %", "num"),
    ("shapes", "shapes", "text"),
]
#: Columns of the table by op and input shapes: the detail columns without min / max, shapes second.
SHAPE_COLUMNS = [DETAIL_COLUMNS[1], ("shapes", "input shapes", "text")] + [
    c for c in DETAIL_COLUMNS if c[0] not in ("name", "shapes", "min_ms", "max_ms")
]


def type_shares(op_type, device: str, top: int) -> go.Figure:
    """Horizontal bars of a device's op-type shares: the top types, then "other"."""
    rows = shares_with_other(op_type, device, top).iloc[::-1]
    colors = [OTHER if name.startswith("other (") else PALETTE[0] for name in rows["op_type"]]
    # a kernel's C++ signature as its function's short name on the axis, the full name in the hover
    labels = [plot_text(label) for label in short_labels(rows["op_type"])]
    fig = go.Figure(
        go.Bar(
            x=rows["share_pct"],
            y=labels,
            orientation="h",
            marker_color=colors,
            customdata=list(zip(rows["total_ms"], rows["count"], [plot_text(n) for n in rows["op_type"]])),
            text=[f"{v:.1f} %" for v in rows["share_pct"]],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{customdata[2]}<br>%{x:.1f} % of device time<br>%{customdata[0]:.2f} ms in "
            "%{customdata[1]} calls<extra></extra>",
        )
    )
    height = max(220, 26 * len(rows) + 80)
    return styled(
        fig,
        height=height,
        xaxis_title="share of device self time (%)",
        yaxis=dict(type="category", automargin=True),
        margin=dict(l=10, r=50, t=20, b=44),
    )


#: what the tab says when the run has no op table: how to get one
NO_OPS = (
    "No op table (op_type / op_detail csv) in this run: per-operator timings are recorded only when asked "
    "for. PyTorch: profiler.attach(model, optimizer) captures them (ops=True, the default; ops_schedule= "
    'picks the steps), Profiler(framework="torch") from the start, `profview run --ops train.py` on a few '
    "steps without changing the script; MindSpore: ProfviewCallback(mindspore_profiler=True). A Kineto trace "
    "or a MindSpore / Ascend profiler directory opened with profview brings its own."
)


#: Columns of the table by op and call stack: the input-shape table's, with the stack for the shapes.
STACK_COLUMNS = [("stack", "call stack", "text") if c[0] == "shapes" else c for c in SHAPE_COLUMNS]
#: Columns of the module table: (modules column, header, kind).
MODULE_COLUMNS = [
    ("path", "module", "text"),
    ("occurrences", "calls", "int"),
    ("host_total_ms", "host total ms", "num"),
    ("host_self_ms", "host self ms", "num"),
    ("device_total_ms", "device total ms", "num"),
    ("device_self_ms", "device self ms", "num"),
]


def build(ctx: Context) -> str:
    """The operators tab."""
    run = ctx.run
    has_types = run.op_type is not None and len(run.op_type)
    if not has_types and (run.op_detail is None or not len(run.op_detail)):
        return section("Operators", absent(NO_OPS))
    parts = []
    if has_types:
        figs = []
        for device in sorted(run.op_type["device"].unique()):
            figs.append(
                section(
                    f"Op types on {device}",
                    ctx.figure(type_shares(run.op_type, device, ctx.options.top_ops)),
                    f"Top {ctx.options.top_ops} types by share of self time; the rest as 'other'.",
                )
            )
        parts.append('<div class="grid2">' + "".join(figs) + "</div><br>")
    else:
        parts.append(section("Op types", absent("No op-type table (op_type csv) in this run.")))
    if run.op_detail is not None and len(run.op_detail):
        parts.append(
            section(
                "Op details",
                sortable_table(ctx, run.op_detail, DETAIL_COLUMNS, "total_ms", "filter by name, type, shape…"),
                "Click a header to sort; type to filter. Times are summed over the profiled steps.",
            )
        )
    else:
        parts.append(section("Op details", absent("No op detail table (op_detail csv) in this run.")))
    if run.op_shapes is not None and len(run.op_shapes):
        parts.append(
            section(
                "Ops by input shape",
                sortable_table(ctx, run.op_shapes, SHAPE_COLUMNS, "total_ms", "filter by name or shape…"),
                "One row per op name and input shapes (recorded with record_shapes=True): which call of an op "
                "takes the time.",
            )
        )
    if run.op_stacks is not None and len(run.op_stacks):
        parts.append(
            section(
                "Ops by call stack",
                sortable_table(ctx, run.op_stacks, STACK_COLUMNS, "total_ms", "filter by name or frame…"),
                "One row per op and the Python frames it was called from, outermost first (recorded with "
                "with_stack=True): which line of the program the op's time comes from.",
            )
        )
    if run.modules is not None and len(run.modules):
        parts.append(
            section(
                "Modules",
                sortable_table(ctx, run.modules, MODULE_COLUMNS, "host_total_ms", "filter by module path…"),
                "One row per nn.Module call path (recorded with with_stack=True). Self: the module's own "
                "time, without the ops and modules it calls; device: the kernels launched inside it.",
            )
        )
    return "".join(parts)


#: Live as loaded: the op table's rows travel in a data block, which the live refresh does not resend.
PAGE = Page("operators", "Operators", build, live=Live.AT_LOAD)

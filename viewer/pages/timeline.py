"""Timeline: each step's phases, then host threads and device streams, on one time axis.

Read from the columnar event file (events_{rank}.arrow), never from the Chrome trace. The whole
run is busy-ness per lane at several zoom levels (viewer.lod), swapped by the page's script as the
reader zooms; chosen step windows are drawn event by event, with hover and labels. The page says
what each level aggregates and what a window left out.
"""

from __future__ import annotations

import base64
from typing import Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from profiler.errors import InputError
from profiler.formats.columns import TIMELINE_FULL
from viewer.context import Context
from viewer.html import absent, esc, plot_text, section
from viewer.lod import Levels, Window, busy_levels, nesting, step_windows, window_events
from viewer.page import Page
from viewer.series import add_line
from viewer.stats import step_window
from viewer.theme import PALETTE, PHASES, category_color, styled
from viewer.trace import Timeline

BUSY_SCALE = [[0.0, "#FFFFFF"], [0.02, "#E8EEF7"], [0.5, "#7FA3D1"], [1.0, "#1F4E8C"]]
PHASE_ROW = "phases"
STEP_ROW = "steps"
STEP_COLOR = "#B0B7BF"


def phase_segments(steps: pd.DataFrame, t0_ms: float = -np.inf, t1_ms: float = np.inf) -> list[pd.DataFrame]:
    """Per phase (theme.PHASES order): the steps' segments overlapping [t0, t1] (step, start, dur in ms)."""
    start = steps["start_ms"].to_numpy(dtype=np.float64)
    end = start + steps["total_ms"].to_numpy(dtype=np.float64)
    keep = (start < t1_ms) & (end > t0_ms)
    out, at = [], start.copy()
    for column, _, _ in PHASES:
        dur = steps[column].to_numpy(dtype=np.float64)
        out.append(
            pd.DataFrame(
                {
                    "step": steps["step"].to_numpy()[keep],
                    "start": at[keep],
                    "dur": dur[keep],
                    "total": steps["total_ms"].to_numpy()[keep],
                }
            )
        )
        at = at + dur
    return out


def add_phase_row(fig: go.Figure, segments: list[pd.DataFrame], legend: bool, **where) -> None:
    """The phase row: one bar per step and phase, in the Overview's colours."""
    for (_column, label, color), seg in zip(PHASES, segments):
        fig.add_bar(
            base=seg["start"],
            x=seg["dur"],
            y=[PHASE_ROW] * len(seg),
            orientation="h",
            name=label,
            legendgroup=label,
            showlegend=legend,
            marker=dict(color=color, line=dict(width=0)),
            customdata=np.stack([seg["step"], seg["dur"], seg["start"], seg["total"]], axis=1) if len(seg) else None,
            hovertemplate=f"<b>{label}</b><br>step %{{customdata[0]}}<br>duration: %{{customdata[1]:.3f}} ms"
            "<br>start: %{customdata[2]:.3f} ms<br>step time: %{customdata[3]:.3f} ms"
            "<extra></extra>",
            **where,
        )


def overview_figure(
    tl: Timeline, levels: Levels, steps: Optional[pd.DataFrame], queues: Optional[pd.DataFrame]
) -> go.Figure:
    """Phase row, busy-ness heatmap of every host thread and device stream, queue fill below."""
    with_queues = queues is not None and len(queues) > 0
    with_steps = steps is not None and len(steps) > 0
    rows = 1 + with_steps + with_queues
    heights = ([0.12] if with_steps else []) + [0.88 if not with_queues else 0.6] + ([0.28] if with_queues else [])
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.04, row_heights=heights)
    heat_row = 2 if with_steps else 1
    labels = [plot_text(tl.lanes["label"][lane]) for lane in levels.lanes]
    busy, started = levels.level(0)
    edges = levels.edges_ms(0)
    fig.add_heatmap(
        x=(edges[:-1] + edges[1:]) / 2,
        y=labels,
        z=np.round(busy * 100, 1),
        customdata=started,
        zmin=0,
        zmax=100,
        colorscale=BUSY_SCALE,
        name="busy %",
        showlegend=False,
        colorbar=dict(title="busy %", len=0.5, y=0.75, yanchor="top", thickness=12),
        hovertemplate="%{y}<br>%{x:.3f} ms<br>busy %{z:.0f} %<br>%{customdata:,} events started<extra></extra>",
        row=heat_row,
        col=1,
    )
    if with_steps:
        add_phase_row(fig, phase_segments(steps), legend=True, row=1, col=1)
        fig.update_yaxes(type="category", fixedrange=True, row=1, col=1)
    if with_queues:
        for i, (name, q) in enumerate(queues.groupby("queue", sort=True)):
            capacity = q["capacity"].to_numpy()
            fill = np.where(capacity > 0, 100.0 * q["size"] / np.maximum(capacity, 1), q["size"])
            add_line(
                fig,
                q["time_ms"].to_numpy(),
                fill,
                plot_text(f"queue {name}"),
                PALETTE[i % len(PALETTE)],
                rows,
                "%{y:.0f} % full",
                shape="hv",
                legend=True,
            )
        fig.update_yaxes(title_text="queue fill %", row=rows, col=1)
    fig.update_yaxes(type="category", autorange="reversed", automargin=True, row=heat_row, col=1)
    fig.update_xaxes(title_text="time (ms)", row=rows, col=1)
    height = 140 + 28 * (len(labels) + 1) + (70 if with_steps else 0) + (180 if with_queues else 0)
    return styled(
        fig,
        height=max(340, height),
        barmode="overlay",
        showlegend=True,
        margin=dict(l=10, r=20, t=20, b=44),
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0),
    )


def _b64(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values).tobytes()).decode("ascii")


def lod_payload(levels: Levels, note_id: str) -> dict:
    """The zoom levels for the page's script: busy (0..255) and events started (uint16, or uint32 when a
    bin holds more), per level."""
    out = []
    for level in range(levels.levels):
        busy, started = levels.level(level)
        wide = int(started.max(initial=0)) >= 2**16
        out.append(
            {
                "bins": levels.bins(level),
                "busy": _b64(np.round(busy * 255).astype(np.uint8)),
                "started": _b64(np.minimum(started, 2**32 - 1).astype("<u4" if wide else "<u2")),
                "wide": wide,
            }
        )
    return {
        "t0": levels.t0_ns / 1e6,
        "t1": levels.t1_ns / 1e6,
        "lanes": len(levels.lanes),
        "levels": out,
        "note": note_id,
    }


def detail_figure(tl: Timeline, window: Window, steps: Optional[pd.DataFrame]) -> go.Figure:
    """The window's phases and every drawn event as a labelled bar on its lane (nested events on rows below)."""
    ev = window.events
    lane = ev["lane"].to_numpy()
    start_ns = ev["start_ns"].to_numpy()
    end_ns = start_ns + np.maximum(ev["dur_ns"].to_numpy(), 0)
    depth, _ = nesting(lane, start_ns, end_ns)
    kinds = tl.lanes["kind"].to_numpy()
    lane_labels = tl.lanes["label"].to_numpy()
    kind_rank = {"steps": 0, "host": 1, "device": 2}
    rows = [
        STEP_ROW if kinds[ln] == "steps" else plot_text(lane_labels[ln] if d == 0 else f"{lane_labels[ln]} ›{d}")
        for ln, d in zip(lane, depth)
    ]
    names = tl.names(ev["name"].to_numpy())
    cats = tl.categories(ev["category"].to_numpy())
    args = tl.args(ev["args"].to_numpy())
    frame = pd.DataFrame(
        {
            "row": rows,
            "order": [kind_rank.get(kinds[ln], 3) * 10**9 + ln * 1000 + d for ln, d in zip(lane, depth)],
            "start": start_ns / 1e6,
            "dur": ev["dur_ns"].to_numpy() / 1e6,
            "self": ev["self_ns"].to_numpy() / 1e6,
            "name": [plot_text(n) for n in names],
            "cat": cats,
            "step": ["" if s < 0 else int(s) for s in ev["step"].to_numpy()],
            "args": [_args_text(a) for a in args],
        }
    )
    order = frame.drop_duplicates("row").sort_values("order")["row"].tolist()
    fig = go.Figure()
    if steps is not None and len(steps):
        add_phase_row(fig, phase_segments(steps, window.t0_ms, window.t1_ms), legend=True)
        order = [PHASE_ROW] + order
    for i, (cat, part) in enumerate(frame.groupby("cat", sort=True)):
        color = STEP_COLOR if cat == "step" else category_color(cat, i)
        fig.add_bar(
            base=part["start"],
            x=part["dur"],
            y=part["row"],
            orientation="h",
            name=plot_text(cat or "event"),
            marker=dict(color=color, line=dict(width=0.5, color="#FFFFFF")),
            text=part["name"],
            textposition="inside",
            insidetextanchor="start",
            textfont=dict(size=10),
            cliponaxis=True,
            customdata=np.stack(
                [part["name"], part["start"], part["dur"], part["step"], part["self"], part["args"]], axis=1
            ),
            hovertemplate="<b>%{customdata[0]}</b><br>start: %{customdata[1]:.3f} ms<br>"
            "duration: %{customdata[2]:.3f} ms<br>self time: %{customdata[4]:.3f} ms<br>"
            "step: %{customdata[3]}<br>%{customdata[5]}<extra>" + plot_text(cat) + "</extra>",
        )
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=order, autorange="reversed", automargin=True)
    fig.update_xaxes(title_text="time (ms)", range=[window.t0_ms, window.t1_ms])
    return styled(
        fig,
        height=max(300, 120 + 30 * len(order)),
        barmode="overlay",
        bargap=0.2,
        uniformtext=dict(minsize=8, mode="hide"),
        margin=dict(l=10, r=20, t=36, b=44),
    )


def _args_text(args: Optional[dict]) -> str:
    """An event's args for the hover, one escaped `key: value` per line."""
    if not args:
        return ""
    return "<br>".join(plot_text(f"{k}: {v}") for k, v in args.items())


def _window_note(tl: Timeline, window: Window, written: dict) -> str:
    """What the window draws, and where every event is: the Chrome trace when it holds them all
    (profiler_info `timeline`, docs/formats.md), else `profview export --chrome`."""
    if window.total == len(window.events):
        return f"All {window.total:,} events overlapping this window are drawn."
    trace = tl.path.name.replace("events_", "timeline_").replace(".arrow", ".json")
    every = (
        f"Open {trace} in Perfetto for every event."
        if written.get("content", TIMELINE_FULL) == TIMELINE_FULL
        else f"{written.get('file', trace)} holds the key steps only ({written.get('steps')}): profview export "
        f"--chrome DIR --steps A:B writes every event of any steps."
    )
    return (
        f"{len(window.events):,} longest of {window.total:,} events overlapping this window are drawn; "
        f"the other {window.total - len(window.events):,} (each ≤ {window.hidden_max_ms * 1000:.1f} µs, "
        f"{window.hidden_ms:.2f} ms in all) are counted in the busy-ness view above. {every}"
    )


def _windows_section(ctx: Context, tl: Timeline, ops_per_step: dict[int, int]) -> str:
    run = ctx.run
    steady = step_window(run.step_trace, run.report).steady if run.step_trace is not None else None
    choices = step_windows(run.step_trace, ctx.options.steps, ops_per_step, typical=steady)
    if not choices:
        return absent("No step trace: no step windows to draw in detail.")
    group = ctx.new_id("windows")
    options, panes = [], []
    for i, (label, t0, t1) in enumerate(choices):
        window = window_events(tl, label, t0, t1, ctx.options.detail_events)
        key = f"w{i}"
        options.append(f'<option value="{key}">{esc(label)}</option>')
        panes.append(
            f'<div class="window{" active" if i == 0 else ""}" data-window="{key}">'
            f'<p class="note">{esc(_window_note(tl, window, run.info.get("timeline") or {}))}</p>'
            f"{ctx.figure(detail_figure(tl, window, run.step_trace))}</div>"
        )
    tools = (
        f'<div class="window-tools">window: <select data-windows="{group}" aria-label="window">'
        f"{''.join(options)}</select> — choose another range with <code>profview DIR --steps A:B</code></div>"
    )
    return tools + f'<div id="{group}">{"".join(panes)}</div>'


def _levels_note(tl: Timeline, levels: Levels) -> str:
    """What every zoom level aggregates."""
    complete = int(levels.started.sum())
    rows = []
    for level in range(levels.levels):
        _, started = levels.level(level)
        rows.append(
            f"level {level}: {levels.bins(level):,} bins of {levels.bin_ms(level):.3g} ms, "
            f"≤ {int(started.max(initial=0)):,} events per bin"
        )
    other = {k: v for k, v in tl.phase_counts.items() if k != "X"}
    kinds = {"i": "instants", "C": "counter values", "s": "flow starts", "f": "flow ends"}
    rest = ", ".join(f"{v:,} {kinds.get(k, repr(k))}" for k, v in sorted(other.items()))
    steps_lane = int(sum(tl.file.lane_rows(ln)[1] for ln in range(len(tl.lanes)) if tl.lanes["kind"][ln] == "steps"))
    if not levels.lanes:
        return (
            f"{tl.events:,} events in {tl.path.name}: no host thread or device stream recorded a span or an "
            f"op, so there is no busy-ness to draw; the {steps_lane:,} steps are the phase row."
        )
    return (
        f"{tl.events:,} events in {tl.path.name}. All {complete:,} complete events of the host threads and "
        f"device streams are aggregated into busy-ness per lane (nested events count once) at "
        f"{levels.levels} zoom levels — {'; '.join(rows)}; zooming in swaps in the finer level, so no "
        f"level leaves an event out. The {steps_lane:,} steps are the phase row. Not drawn here: "
        f"{rest or 'nothing'} (counters and queues have their own pages). The windows below draw events "
        f"one by one."
    )


def build(ctx: Context) -> str:
    """The timeline tab."""
    run = ctx.run
    try:
        tl = run.timeline()
    except InputError as exc:
        return section("Timeline", absent(str(exc)))
    if tl is None:
        trace = run.timeline_path
        hint = (
            f" {trace.name} is there, but the viewer reads only the event file: re-run "
            f"`profview analyse {run.directory}` to write it."
            if trace is not None
            else ""
        )
        return section("Timeline", absent(f"No event file (events_{run.rank}.arrow) in this run.{hint}"))
    drawn = [
        lane for lane in range(len(tl.lanes)) if tl.lanes["kind"][lane] != "steps" and tl.file.lane_rows(lane)[1] > 0
    ]
    if not tl.complete:
        return section("Timeline", absent(f"{tl.path.name} holds no complete events to draw."))
    ctx.progress.stage("timeline: level of detail")
    t0, t1 = tl.time_range_ns()
    levels = busy_levels(tl, drawn, t0, max(t1, t0 + 1000))
    note_id = ctx.new_id("lod-note")
    lod = ctx.data(lod_payload(levels, note_id))
    figure = ctx.figure(overview_figure(tl, levels, run.step_trace, run.data_queue))
    figure = figure.replace('<div class="plot', f'<div data-lod="{lod}" class="plot', 1)
    status = (
        f'<p class="note" style="margin-top:8px" id="{note_id}">'
        f"zoom level 0: {levels.bins(0):,} bins of {levels.bin_ms(0):.3g} ms</p>"
    )
    return section("Whole run: phases and busy-ness per lane", figure + status, _levels_note(tl, levels)) + section(
        "Step windows in detail", _windows_section(ctx, tl, levels.ops_per_step)
    )


#: Not live: it reads the event file, which only the analysis of a whole run writes.
PAGE = Page("timeline", "Timeline", build)

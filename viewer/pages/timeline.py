"""Timeline: host threads, device streams and queues on one time axis, with step boundaries.

The whole run is shown as busy-ness per lane (see viewer.lod); a few step windows are drawn
event by event. The page says what was aggregated and points to the Chrome trace for Perfetto.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viewer.html import absent, esc, plot_text, section
from viewer.lod import Busy, Window, busy_bins, depths, step_windows, window_events
from viewer.context import Context
from viewer.series import add_line
from viewer.theme import PALETTE, category_color, styled
from viewer.trace import Trace, read_trace

BUSY_SCALE = [[0.0, "#FFFFFF"], [0.02, "#E8EEF7"], [0.5, "#7FA3D1"], [1.0, "#1F4E8C"]]


def overview_figure(trace: Trace, busy: Busy, steps: Optional[pd.DataFrame],
                    queues: Optional[pd.DataFrame]) -> go.Figure:
    """Busy-ness heatmap of every lane, step starts on top, queue fill below."""
    with_queues = queues is not None and len(queues) > 0
    fig = make_subplots(rows=2 if with_queues else 1, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[0.7, 0.3] if with_queues else [1.0])
    labels = [plot_text(label) for label in trace.lanes["label"]]
    centres = (busy.edges_ms[:-1] + busy.edges_ms[1:]) / 2
    fig.add_heatmap(x=centres, y=labels, z=busy.busy * 100, customdata=busy.started, zmin=0, zmax=100,
                    colorscale=BUSY_SCALE, colorbar=dict(title="busy %", len=0.6, y=1, yanchor="top", thickness=12),
                    hovertemplate="%{y}<br>%{x:.2f} ms ± " + f"{busy.bin_ms / 2:.3g}" +
                                  " ms<br>busy %{z:.0f} %<br>%{customdata} events started<extra></extra>",
                    row=1, col=1)
    if steps is not None and len(steps):
        fig.add_scatter(x=steps["start_ms"], y=["step starts"] * len(steps), mode="markers",
                        marker=dict(symbol="line-ns-open", size=14, color="#1F2933"),
                        customdata=np.stack([steps["step"], steps["total_ms"]], axis=1),
                        hovertemplate="step %{customdata[0]} starts at %{x:.2f} ms<br>"
                                      "step time %{customdata[1]:.2f} ms<extra></extra>", row=1, col=1)
    if with_queues:
        for i, (name, q) in enumerate(queues.groupby("queue", sort=True)):
            capacity = q["capacity"].to_numpy()
            fill = np.where(capacity > 0, 100.0 * q["size"] / np.maximum(capacity, 1), q["size"])
            add_line(fig, q["time_ms"].to_numpy(), fill, plot_text(name), PALETTE[i % len(PALETTE)], 2,
                     "%{y:.0f} % full", shape="hv", legend=True)
        fig.update_yaxes(title_text="queue fill %", row=2, col=1)
    fig.update_yaxes(type="category", autorange="reversed", automargin=True, row=1, col=1)
    fig.update_xaxes(title_text="time (ms)", row=2 if with_queues else 1, col=1)
    height = 120 + 28 * (len(labels) + 1) + (180 if with_queues else 0)
    return styled(fig, height=max(320, height), showlegend=with_queues, margin=dict(l=10, r=20, t=20, b=44),
                  legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0))


def _step_of(events: list[dict[str, Any]], start_ms: np.ndarray, steps: Optional[pd.DataFrame]) -> list:
    """Each event's step: from its args when the writer put it there, else from step boundaries."""
    found = [e.get("args", {}).get("step") if isinstance(e.get("args"), dict) else None for e in events]
    if steps is not None and len(steps) and any(s is None for s in found):
        bounds = steps["start_ms"].to_numpy()
        index = np.searchsorted(bounds, start_ms, side="right") - 1
        numbers = steps["step"].to_numpy()
        found = [s if s is not None else (int(numbers[i]) if i >= 0 else -1) for s, i in zip(found, index)]
    return ["" if s is None else s for s in found]


def detail_figure(trace: Trace, window: Window, steps: Optional[pd.DataFrame]) -> go.Figure:
    """Every shown event of a window as a bar on its lane (nested events on rows below)."""
    idx = window.shown
    events = trace.details(idx)
    start = trace.ts_us[idx] / 1000.0
    dur = trace.dur_us[idx] / 1000.0
    lane = trace.lane[idx]
    depth = depths(lane, start, start + dur)
    labels = trace.lanes["label"].to_numpy()
    rows = [plot_text(labels[l] if d == 0 else f"{labels[l]} ›{d}") for l, d in zip(lane, depth)]
    frame = pd.DataFrame({
        "row": rows, "order": lane * 1000 + depth, "start": start, "dur": dur,
        "name": [plot_text(e.get("name", "")) for e in events],
        "cat": [str(e.get("cat", "")) for e in events],
        "type": [plot_text((e.get("args") or {}).get("op_type", e.get("cat", ""))
                           if isinstance(e.get("args"), dict) else e.get("cat", "")) for e in events],
        "step": _step_of(events, start, steps)})
    order = frame.drop_duplicates("row").sort_values("order")["row"].tolist()
    fig = go.Figure()
    for i, (cat, part) in enumerate(frame.groupby("cat", sort=True)):
        fig.add_bar(base=part["start"], x=part["dur"], y=part["row"], orientation="h",
                    name=plot_text(cat or "event"), marker=dict(color=category_color(cat, i), line=dict(width=0)),
                    customdata=np.stack([part["name"], part["type"], part["step"], part["start"]], axis=1),
                    hovertemplate="<b>%{customdata[0]}</b><br>type: %{customdata[1]}<br>"
                                  "duration: %{x:.3f} ms<br>start: %{customdata[3]:.3f} ms<br>"
                                  "step: %{customdata[2]}<extra></extra>")
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=order, autorange="reversed",
                     automargin=True)
    fig.update_xaxes(title_text="time (ms)", range=[window.t0_ms, window.t1_ms])
    return styled(fig, height=max(300, 110 + 30 * len(order)), barmode="overlay", bargap=0.25,
                  margin=dict(l=10, r=20, t=36, b=44))


def _window_note(trace: Trace, window: Window) -> str:
    if window.total == len(window.shown):
        return f"All {window.total:,} events overlapping this window are drawn."
    return (f"{len(window.shown):,} longest of {window.total:,} events overlapping this window are drawn; "
            f"the other {window.total - len(window.shown):,} (each ≤ {window.hidden_max_ms * 1000:.1f} µs, "
            f"{window.hidden_ms:.2f} ms in all) are counted in the busy-ness view above. Open "
            f"{trace.path.name} in Perfetto for every event.")


def _windows_section(ctx: Context, trace: Trace) -> str:
    run = ctx.run
    choices = step_windows(run.step_trace, ctx.options.steps)
    if not choices:
        return absent("No step trace: no step windows to draw in detail.")
    group = ctx.new_id("windows")
    options, panes = [], []
    for i, (label, t0, t1) in enumerate(choices):
        window = window_events(trace, label, t0, t1, ctx.options.detail_events)
        key = f"w{i}"
        options.append(f'<option value="{key}">{esc(label)}</option>')
        panes.append(f'<div class="window{" active" if i == 0 else ""}" data-window="{key}">'
                     f'<p class="note">{esc(_window_note(trace, window))}</p>'
                     f"{ctx.figure(detail_figure(trace, window, run.step_trace))}</div>")
    tools = (f'<div class="window-tools">window: <select data-windows="{group}" aria-label="window">'
             f'{"".join(options)}</select> — choose another range with <code>profview DIR --steps A:B</code></div>')
    return tools + f'<div id="{group}">{"".join(panes)}</div>'


def _overview_note(trace: Trace, busy: Busy) -> str:
    complete = len(trace.ts_us)
    other = {k: v for k, v in trace.phase_counts.items() if k != "X"}
    rest = ", ".join(f"{v:,} '{k}'" for k, v in sorted(other.items()))
    return (f"{trace.events:,} events in {trace.path.name}: the {complete:,} complete events are aggregated "
            f"into busy-ness per lane ({busy.busy.shape[1]:,} bins of {busy.bin_ms:.3g} ms; nested events count "
            f"once). Not drawn here: {rest or 'nothing'} (metadata, counters, instants, flows — counters and "
            f"queues are on their own pages). For full fidelity open {trace.path.name} in ui.perfetto.dev.")


def build(ctx: Context) -> str:
    """The timeline tab."""
    run = ctx.run
    if run.timeline_path is None:
        return section("Timeline", absent("No timeline file (timeline json) in this run."))
    trace = read_trace(run.timeline_path, ctx.progress)
    if not len(trace.ts_us):
        return section("Timeline", absent(f"{run.timeline_path.name} holds no complete ('X') events to draw."))
    start = trace.ts_us / 1000.0
    t0, t1 = float(start.min()), float((start + trace.dur_us / 1000.0).max())
    busy = busy_bins(trace, t0, max(t1, t0 + 1e-3))
    return (section("Whole run: busy-ness per lane", ctx.figure(overview_figure(trace, busy, run.step_trace,
                                                                                run.data_queue)),
                    _overview_note(trace, busy))
            + section("Step windows in detail", _windows_section(ctx, trace)))

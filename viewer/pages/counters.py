"""Counters: GPU utilisation, memory and power, host CPU and memory, user counters, over time."""

from __future__ import annotations

import pandas as pd
from plotly.subplots import make_subplots

from viewer.context import Context
from viewer.html import absent, plot_text, section
from viewer.page import Live, Page
from viewer.series import add_line
from viewer.stats import profiler_cost_text
from viewer.theme import PALETTE, styled

#: Preferred order of metrics; others follow alphabetically.
ORDER = [
    "gpu_util_pct",
    "mem_used_bytes",
    "power_w",
    "sm_clock_mhz",
    "temperature_c",
    "process_cpu_pct",
    "system_cpu_pct",
    "rss_bytes",
    "threads",
]


def _unit(metric: str) -> tuple[float, str]:
    """Bytes show as GiB, everything else as recorded: (scale to divide by, label)."""
    if metric.endswith("_bytes"):
        return 2.0**30, metric[: -len("_bytes")] + " (GiB)"
    return 1.0, metric


def counter_figure(counters: pd.DataFrame):
    """One row per (device, metric), sharing the time axis; returns the figure and thinning notes."""
    groups = sorted(
        counters.groupby(["device", "metric"], sort=False).groups,
        key=lambda k: (k[0], ORDER.index(k[1]) if k[1] in ORDER else len(ORDER), k[1]),
    )
    titles = [plot_text(f"{device} · {_unit(metric)[1]}") for device, metric in groups]
    fig = make_subplots(
        rows=len(groups), cols=1, shared_xaxes=True, vertical_spacing=0.25 / max(len(groups), 1), subplot_titles=titles
    )
    notes = []
    for i, (device, metric) in enumerate(groups, start=1):
        rows = counters[(counters["device"] == device) & (counters["metric"] == metric)]
        scale, unit = _unit(metric)
        note = add_line(
            fig,
            rows["time_ms"].to_numpy(),
            rows["value"].to_numpy() / scale,
            plot_text(f"{device} {unit}"),
            PALETTE[i % len(PALETTE)],
            i,
            "%{y:.3~f}",
        )
        if note:
            notes.append(note)
        fig.update_yaxes(rangemode="tozero", row=i, col=1)
    fig.update_xaxes(title_text="time (ms)", row=len(groups), col=1)
    return styled(fig, height=max(260, 150 * len(groups)), showlegend=False), notes


def _status(ctx: Context) -> str:
    sources = ctx.run.info.get("sources", {})
    if not isinstance(sources, dict):
        return ""
    parts = [
        f"{name}: {s.get('status')}"
        for name, s in sources.items()
        if isinstance(s, dict) and name in ("nvml", "host_counters", "gpu", "psutil")
    ]
    return "Sources — " + "; ".join(parts) + "." if parts else ""


def build(ctx: Context) -> str:
    """The counters tab."""
    counters = ctx.run.device_counters
    if counters is None or not len(counters):
        return section("Counters", absent("No sampled counters (device_counters csv) in this run. " + _status(ctx)))
    fig, notes = counter_figure(counters)
    cost = profiler_cost_text(ctx.run.report)  # beside the memory curves: what the profiler itself held
    return section("Device and host counters", ctx.figure(fig), " ".join([cost, _status(ctx)] + notes).strip())


#: Live as loaded: the recent window's counters.
PAGE = Page("counters", "Counters", build, live=Live.AT_LOAD)

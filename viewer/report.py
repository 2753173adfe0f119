"""Building the one-file HTML report: pages as tabs, figures as JSON, plotly.js inlined once.

Figures are serialised with plotly's own `to_json` into a single escaped JSON block and drawn
by a small script when their tab is first shown, so a report with many figures opens fast and
hidden tabs never lay out at the wrong size. plotly.min.js comes from the installed plotly
package, so the file works offline.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Optional

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from profiler._version import __version__
from viewer import assets
from viewer.errors import InputError
from viewer.html import esc, safe_json_text, script_json
from viewer.progress import Progress
from viewer.rundata import RunData


@dataclass(frozen=True)
class Options:
    """What the user asked for: the rank to show, a step range, and detail budgets."""

    rank: Optional[int] = None
    steps: Optional[tuple[Optional[int], Optional[int]]] = None
    top_ops: int = 12
    table_rows: int = 500
    detail_events: int = 4000
    fail_if_slower_pct: Optional[float] = None     # the compare tab's CI gate, when one was given


@dataclass
class Context:
    """What every page builder gets: the runs, the chosen one, options, and figure registration."""

    runs: list[RunData]
    options: Options = field(default_factory=Options)
    progress: Progress = field(default_factory=Progress.silent)
    compare: Optional[list[RunData]] = None         # NEW run(s) of the compare tab (`--compare`); the runs are BASE
    figures: dict[str, str] = field(default_factory=dict)
    data_blocks: dict[str, str] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)

    @property
    def run(self) -> RunData:
        """The rank the per-rank pages show (--rank, else the lowest)."""
        if self.options.rank is None:
            return self.runs[0]
        for run in self.runs:
            if run.rank == self.options.rank:
                return run
        ranks = ", ".join(str(r.rank) for r in self.runs)
        raise InputError(f"rank {self.options.rank} is not in {self.runs[0].directory} (ranks: {ranks})")

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def figure(self, fig: go.Figure, css: str = "") -> str:
        """Register a figure and return the placeholder div the script draws it into."""
        key = self.new_id("fig")
        self.figures[key] = fig.to_json(validate=False)
        return f'<div class="plot {esc(css)}" data-fig="{key}"></div>'

    def data(self, payload) -> str:
        """Register a JSON payload for a page script; returns the id of its <script> block."""
        key = self.new_id("data")
        self.data_blocks[key] = script_json(payload)
        return key


@dataclass(frozen=True)
class Page:
    """One tab: a key for the URL fragment, a title, and a builder returning the body HTML."""

    key: str
    title: str
    build: Callable[[Context], str]


def pages(ctx: Optional[Context] = None) -> list[Page]:
    """The report's tabs, in order (a compare tab second when `ctx` has a run to compare with)."""
    from viewer.pages import cluster, compare, counters, operators, overview, pipeline, timeline
    diff = [Page("compare", "Compare", compare.build)] if ctx is not None and ctx.compare else []
    return [Page("overview", "Overview", overview.build), *diff, Page("operators", "Operators", operators.build),
            Page("pipeline", "Data pipeline", pipeline.build), Page("timeline", "Timeline", timeline.build),
            Page("counters", "Counters", counters.build), Page("cluster", "Cluster", cluster.build)]


def _header(ctx: Context) -> str:
    run = ctx.run
    info = run.info
    bits = [str(run.shown_path), f"rank {run.rank} of {len(ctx.runs)} rank(s) here",
            f"host {info.get('host', '?')}", f"data from {info.get('data_origin', 'profview')}"]
    return (f"<h1>profview — {esc(run.shown_path.name)}</h1>"
            f'<div class="meta">{" · ".join(esc(b) for b in bits)}</div>')


def build_report(ctx: Context) -> str:
    """The complete HTML document for `ctx`."""
    bodies = []
    tabs = pages(ctx)
    for i, page in enumerate(tabs):
        ctx.progress.update("building report", i, len(tabs))
        bodies.append(f'<div class="page" id="page-{page.key}">{page.build(ctx)}</div>')
    ctx.progress.update("building report", len(tabs), len(tabs))
    nav = "".join(f'<button data-page="{p.key}">{esc(p.title)}</button>' for p in tabs)
    figures = "{" + ",".join(f'"{k}":{v}' for k, v in ctx.figures.items()) + "}"
    blocks = "".join(f'<script type="application/json" id="{k}">{v}</script>' for k, v in ctx.data_blocks.items())
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"generator\" content=\"profview {esc(__version__)}\">"
        f"<title>profview report — {esc(ctx.run.shown_path.name)}</title>"
        f"<style>{assets.CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<header>{_header(ctx)}<nav>{nav}</nav></header><main>{''.join(bodies)}</main>"
        f'<footer class="note" style="padding:0 28px 20px">built by profview {esc(__version__)} on {stamp}</footer>'
        f'<script type="application/json" id="pv-figures">{safe_json_text(figures)}</script>{blocks}'
        f"<script>{assets.JS}</script></body></html>\n")

"""Building the one-file HTML report: pages as tabs, figures as JSON, plotly.js inlined once.

Figures are serialised with plotly's own `to_json` into a single escaped JSON block and drawn
by a small script when their tab is first shown, so a report with many figures opens fast and
hidden tabs never lay out at the wrong size. plotly.min.js comes from the installed plotly
package, so the file works offline.
"""

from __future__ import annotations

from datetime import datetime, timezone

from plotly.offline import get_plotlyjs

from profiler._version import __version__
from viewer import assets
from viewer.context import Context
from viewer.html import esc, safe_json_text
from viewer.page import Live, Page
from viewer.pages import cluster, compare, counters, kernels, memory, operators, overview, pipeline, timeline

#: The report's tabs, in order. A new page is a module of viewer/pages/ ending with its `PAGE`, and a line here.
PAGES: tuple[Page, ...] = (
    overview.PAGE,
    compare.PAGE,
    operators.PAGE,
    kernels.PAGE,
    memory.PAGE,
    pipeline.PAGE,
    timeline.PAGE,
    counters.PAGE,
    cluster.PAGE,
)


def pages(ctx: Context) -> list[Page]:
    """The tabs `ctx` shows: the pages that have something for it, and in the live report only the live ones."""
    return [page for page in PAGES if page.shown(ctx) and not (ctx.live and page.live is Live.HIDDEN)]


def _header(ctx: Context) -> str:
    run = ctx.run
    info = run.info
    bits = [
        str(run.shown_path),
        f"rank {run.rank} of {len(ctx.runs)} rank(s) here",
        f"host {info.get('host', '?')}",
        f"data from {info.get('data_origin', 'profview')}",
    ]
    return f'<h1>profview — {esc(run.shown_path.name)}</h1><div class="meta">{" · ".join(esc(b) for b in bits)}</div>'


def build_report(ctx: Context) -> str:
    """The complete HTML document for `ctx`."""
    bodies = []
    tabs = pages(ctx)
    for i, page in enumerate(tabs):
        ctx.progress.stage("building report", i, len(tabs))
        bodies.append(f'<div class="page" id="page-{page.key}">{page.build(ctx)}</div>')
    ctx.progress.stage("building report", len(tabs), len(tabs))
    nav = "".join(f'<button data-page="{p.key}">{esc(p.title)}</button>' for p in tabs)
    blocks = "".join(f'<script type="application/json" id="{k}">{v}</script>' for k, v in ctx.data_blocks.items())
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="generator" content="profview {esc(__version__)}">'
        f"<title>profview report — {esc(ctx.run.shown_path.name)}</title>"
        f"<style>{assets.CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<header>{_header(ctx)}<nav>{nav}</nav></header><main>{''.join(bodies)}</main>"
        f'<footer class="note" style="padding:0 28px 20px">built by profview {esc(__version__)} on {stamp}</footer>'
        f'<script type="application/json" id="pv-figures">{safe_json_text(ctx.figures_json())}</script>{blocks}'
        f"<script>{assets.JS}</script></body></html>\n"
    )

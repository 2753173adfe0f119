"""What every page builder gets (`Context`) and what the user asked for (`Options`).

Its own module, below the pages and the report, so that pages never import the report that
assembles them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Optional

import plotly.graph_objects as go

from profiler.errors import InputError
from profiler.progress import Progress
from viewer.html import esc, script_json
from viewer.rundata import RunData


@dataclass(frozen=True)
class Options:
    """What the user asked for: the rank to show, a step range, and detail budgets."""

    rank: Optional[int] = None
    steps: Optional[tuple[Optional[int], Optional[int]]] = None
    top_ops: int = 12
    table_rows: int = 500
    detail_events: int = 4000
    fail_if_slower_pct: Optional[float] = None  # the compare tab's CI gate, when one was given


@dataclass
class Context:
    """What every page builder gets: the runs, the chosen one, options, and figure registration."""

    runs: list[RunData]
    options: Options = field(default_factory=Options)
    progress: Progress = field(default_factory=Progress.silent)
    compare: Optional[list[RunData]] = None  # NEW run(s) of the compare tab (`--compare`); the runs are BASE
    live: bool = False  # the live report of a recording in progress (viewer.live_report)
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

    def figures_json(self) -> str:
        """Every registered figure, as one JSON object text: figure key -> plotly's JSON of it."""
        return "{" + ",".join(f'"{k}":{v}' for k, v in self.figures.items()) + "}"

    def data(self, payload) -> str:
        """Register a JSON payload for a page script; returns the id of its <script> block."""
        key = self.new_id("data")
        self.data_blocks[key] = script_json(payload)
        return key

"""Thinning long time series for plotting: at most a few thousand points per line, honestly.

A queue probed at every put / get or a counter sampled for hours has far more points than a
plot has pixels; each bin keeps its mean, min and max so spikes stay visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_POINTS = 2000


@dataclass
class Series:
    """A (possibly binned) series: x, the mean y per point, and the y range each point covers."""

    x: np.ndarray
    y: np.ndarray
    low: np.ndarray
    high: np.ndarray
    binned_from: int = 0  # original number of points when binned, 0 when raw

    @property
    def note(self) -> str:
        """What was done to the series, for the page."""
        return (
            f"{self.binned_from:,} samples binned into {len(self.x):,} points (mean, with min-max band)"
            if self.binned_from
            else ""
        )


def thin(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> Series:
    """The series as is when short enough, else binned on x into `max_points` bins."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) <= max_points:
        return Series(x, y, y, y)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    edges = np.linspace(x[0], x[-1], max_points + 1)
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, max_points - 1)
    counts = np.bincount(which, minlength=max_points)
    keep = counts > 0
    sums = np.bincount(which, weights=y, minlength=max_points)
    low = np.full(max_points, np.inf)
    high = np.full(max_points, -np.inf)
    np.minimum.at(low, which, y)
    np.maximum.at(high, which, y)
    centres = (edges[:-1] + edges[1:]) / 2
    return Series(centres[keep], sums[keep] / counts[keep], low[keep], high[keep], binned_from=len(x))


def add_line(
    fig,
    x: np.ndarray,
    y: np.ndarray,
    name: str,
    color: str,
    row: int,
    hover: str,
    shape: str = "linear",
    legend: bool = False,
) -> str:
    """Add a thinned line (with its min-max band when binned) to subplot `row`; returns the thinning note.

    `name` must already be escaped for plotly; `hover` is the y part of the hover template.
    """
    s = thin(x, y)
    if s.binned_from:
        fig.add_scatter(
            x=s.x,
            y=s.high,
            mode="lines",
            line=dict(width=0),
            showlegend=False,
            name=f"{name} max",
            hoverinfo="skip",
            row=row,
            col=1,
        )
        fig.add_scatter(
            x=s.x,
            y=s.low,
            mode="lines",
            line=dict(width=0),
            fill="tonexty",
            name=f"{name} min",
            fillcolor="rgba(122,139,153,0.22)",
            showlegend=False,
            hoverinfo="skip",
            row=row,
            col=1,
        )
    fig.add_scatter(
        x=s.x,
        y=s.y,
        mode="lines",
        name=name,
        showlegend=legend,
        line=dict(color=color, width=1.5, shape=shape),
        hovertemplate=f"{name}<br>%{{x:.1f}} ms: {hover}<extra></extra>",
        row=row,
        col=1,
    )
    return f"{name}: {s.note}" if s.binned_from else ""

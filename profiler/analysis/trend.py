"""Is a sampled counter (host RSS, device memory) rising for good? The robust trend of a series.

Allocators grow in steps: a loop that keeps nothing can add tens of MB in a few jumps while its
arenas, caches and thread pools settle, then stay flat. A leak adds memory at every step, for as
long as the loop runs. `sustained_growth` tells them apart with the rule docs/formats.md states
(report_{rank}.json, `memory_growth`):

- enough data: at least `MIN_POINTS` samples over at least `min_span_s` seconds, or, in a shorter
  run, strong growth: the trend grows the series by at least `STRONG_GROWTH` of its level in the
  first part of the span (a loop that keeps every step's graph doubles its RSS in seconds; what a
  short run must not be judged on is a modest rise, which a warm-up also gives);
- the Theil-Sen slope (median of the pairwise slopes: one spike or a GC drop does not move it)
  grows the series by at least `min_growth` over the span;
- the growth is well beyond the series' own jitter: at least `NOISE_RATIO` times the robust spread
  (1.4826 x median absolute deviation) of the values around the fitted line;
- it is sustained: the span is cut into `BINS` equal parts, and the median of at least
  `RISING_BINS` of the `BINS - 1` parts after the first is above the previous part's median by at
  least a quarter of the rise the slope predicts for one part. A warm-up that levels off, or a
  few allocator jumps, leave parts flat.

`counter_trend` is the slope alone for the live views, `None` until there are enough samples.
Pure numpy, deterministic: long series use a fixed sample of the pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

#: fewest samples a trend is computed from
MIN_POINTS = 16
#: fewest seconds a trend is judged over by default (the advisor's memory_trend_s, the live views)
MIN_SPAN_S = 5.0
#: pairs of points the Theil-Sen slope uses at most (beyond: a fixed-seed sample of them)
MAX_PAIRS = 50_000
#: the growth must be at least this many times the spread of the values around the line
NOISE_RATIO = 4.0
#: the span is cut into this many parts; the median must rise from one part to the next at least RISING_BINS times
BINS = 8
RISING_BINS = 6
#: a part "rises" when its median is above the previous one's by this share of the rise the slope predicts
RISE_SHARE = 0.25
#: growth, as a share of the series' level in the first part, that is judged in a run shorter than min_span_s
STRONG_GROWTH = 0.5


@dataclass(frozen=True)
class Trend:
    """A counter's robust trend over a span of samples."""

    slope_per_s: float  # Theil-Sen slope, counter units per second
    grown: float  # slope x span: how much the trend grew the counter
    spread: float  # robust spread of the values around the fitted line (1.4826 x MAD)
    rising_bins: int  # times the median rose from one part of the span to the next (of BINS - 1)
    span_s: float
    points: int
    start_level: float = 0.0  # the median of the first part of the span

    @property
    def strong(self) -> bool:
        """Whether the trend grows the series by at least STRONG_GROWTH of where it started."""
        return self.start_level > 0 and self.grown >= STRONG_GROWTH * self.start_level


def theil_sen_slope(t: np.ndarray, v: np.ndarray, max_pairs: int = MAX_PAIRS) -> float:
    """Median of the pairwise slopes (v per unit of t): a trend that one spike or a GC drop does not
    move. Over `max_pairs` pairs, a fixed-seed sample of them (the same series gives the same slope)."""
    t, v = np.asarray(t, np.float64), np.asarray(v, np.float64)
    n = len(t)
    if n * (n - 1) // 2 <= max_pairs:
        i, j = np.triu_indices(n, k=1)
    else:
        rng = np.random.default_rng(0)
        i, j = rng.integers(0, n, max_pairs), rng.integers(0, n, max_pairs)
    dt = t[j] - t[i]
    ok = dt != 0
    return float(np.median((v[j] - v[i])[ok] / dt[ok])) if ok.any() else 0.0


def counter_trend(t_ns: np.ndarray, values: np.ndarray, min_span_s: float = 0.0) -> Optional[float]:
    """The Theil-Sen slope per second of a counter sampled at `t_ns`, or None with fewer than
    MIN_POINTS samples or a span under `min_span_s` seconds (no trend before there is data for one)."""
    t = np.asarray(t_ns, np.float64)
    if len(t) < MIN_POINTS or (t.max() - t.min()) / 1e9 < max(min_span_s, 1e-9):
        return None
    return theil_sen_slope(t / 1e9, values)


def trend_of(t_ns: np.ndarray, values: np.ndarray) -> Optional[Trend]:
    """The robust trend of a series (see the module doc), None with fewer than MIN_POINTS samples."""
    order = np.argsort(t_ns, kind="stable")
    t = (np.asarray(t_ns, np.float64)[order] - np.min(t_ns)) / 1e9
    v = np.asarray(values, np.float64)[order]
    span = float(t[-1]) if len(t) else 0.0
    if len(t) < MIN_POINTS or span <= 0:
        return None
    slope = theil_sen_slope(t, v)
    residual = v - slope * t
    spread = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
    part = np.minimum((t / span * BINS).astype(np.int64), BINS - 1)
    medians = np.array([np.median(v[part == k]) if (part == k).any() else np.nan for k in range(BINS)])
    rises = np.diff(medians)
    rising = int((rises >= RISE_SHARE * slope * span / BINS).sum()) if slope > 0 else 0
    return Trend(
        slope_per_s=slope,
        grown=slope * span,
        spread=spread,
        rising_bins=rising,
        span_s=span,
        points=len(t),
        start_level=float(medians[0]),
    )


def sustained_growth(t_ns: np.ndarray, values: np.ndarray, min_growth: float, min_span_s: float) -> Optional[Trend]:
    """The trend of a series when it grows for good (the module doc's rule), else None."""
    trend = trend_of(t_ns, values)
    if (
        trend is None
        or (trend.span_s < min_span_s and not trend.strong)
        or trend.slope_per_s <= 0
        or trend.grown < min_growth
        or trend.grown < NOISE_RATIO * trend.spread
        or trend.rising_bins < RISING_BINS
    ):
        return None
    return trend

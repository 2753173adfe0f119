"""The memory trend (profiler/analysis/trend.py), the rule behind the memory_growth finding, on series:
a steady leak, spikes and GC drops, staircases, a warm-up that levels off, noise, too short a span,
long series. The finding on real loops is tests/e2e/test_memory_trend_loops.py."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.trend import (
    BINS,
    MIN_POINTS,
    MIN_SPAN_S,
    counter_trend,
    sustained_growth,
    theil_sen_slope,
    trend_of,
)

MB = float(1 << 20)


def series(seconds: float, every_s: float = 0.1):
    t = np.arange(0.0, seconds, every_s)
    return (t * 1e9).astype(np.int64), t


def test_theil_sen_ignores_spikes_and_gc_drops():
    t_ns, t = series(20)
    rng = np.random.default_rng(1)
    v = 500 * MB + 3 * MB * t + rng.normal(0, 0.2 * MB, len(t))
    v[::7] += 200 * MB  # spikes
    v[3::11] -= 150 * MB  # drops
    assert theil_sen_slope(t, v) / MB == pytest.approx(3.0, rel=0.03)
    trend = sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S)
    assert trend is not None and trend.slope_per_s / MB == pytest.approx(3.0, rel=0.03)


def test_a_steady_leak_is_sustained_and_its_growth_is_the_slope_times_the_span():
    t_ns, t = series(10)
    v = 300 * MB + 2 * MB * t + np.random.default_rng(2).normal(0, 0.5 * MB, len(t))
    trend = sustained_growth(t_ns, v, 10 * MB, MIN_SPAN_S)
    assert trend is not None
    assert trend.grown / MB == pytest.approx(2 * trend.span_s, rel=0.05)
    assert trend.rising_bins == BINS - 1 and trend.points == len(t)


@pytest.mark.parametrize("jumps, sustained", [(3, False), (5, False), (16, True)])
def test_a_staircase_is_a_leak_only_when_it_climbs_throughout(jumps, sustained):
    """A few allocator jumps leave most parts of the span flat; a coarse-grained leak (a GPU caching
    allocator's segments) has jumps in every part once the run is long enough."""
    t_ns, t = series(12)
    at = (np.arange(1, jumps + 1) - 0.5) * t[-1] / jumps
    v = 400 * MB + (120 / jumps) * MB * (t[:, None] >= at[None, :]).sum(axis=1)
    assert (sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S) is not None) is sustained


def test_a_warmup_that_levels_off_is_not_growth_and_one_that_goes_on_leaking_is():
    t_ns, t = series(12)
    warm = 200 * MB * np.minimum(t / 2, 1.0)  # 200 MB over the first 2 s
    assert sustained_growth(t_ns, 300 * MB + warm, 32 * MB, MIN_SPAN_S) is None
    leaking = sustained_growth(t_ns, 300 * MB + warm + 8 * MB * t, 32 * MB, MIN_SPAN_S)
    assert leaking is not None and leaking.slope_per_s / MB > 8


def test_growth_within_the_noise_is_not_a_trend():
    t_ns, t = series(30)
    rng = np.random.default_rng(3)
    v = 800 * MB + 1.5 * MB * t + rng.normal(0, 40 * MB, len(t))  # +45 MB under +-40 MB of jitter
    trend = trend_of(t_ns, v)
    assert trend.grown / MB > 32 and trend.grown < 4 * trend.spread
    assert sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S) is None


def test_too_short_or_too_little_is_no_trend():
    t_ns, t = series(3)  # 30 samples over 3 s
    v = 1000 * MB + 50 * MB * t  # +150 MB on 1 GB: a modest rise, which a warm-up also gives
    assert sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S) is None
    assert sustained_growth(t_ns, v, 32 * MB, 2.0) is not None
    assert counter_trend(t_ns, v, MIN_SPAN_S) is None
    assert counter_trend(t_ns[: MIN_POINTS - 1], v[: MIN_POINTS - 1]) is None
    assert counter_trend(t_ns, v, 2.0) / MB == pytest.approx(50.0)


def test_strong_steady_growth_in_a_short_run_is_a_leak():
    """The loop that keeps every step's loss and logits (issue 33): host RSS 446 MB -> 1.20 GB over 60
    steps and 2.7 s, rising in every sample. Shorter than memory_trend_s, but the growth is more than
    half of where it started: judged, and found."""
    t_ns, t = series(2.7, 2.7 / 59)  # 60 samples
    v = 446 * MB + (1229 - 446) * MB * t / t[-1] + np.random.default_rng(7).normal(0, 2 * MB, len(t))
    trend = sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S)
    assert trend is not None and trend.strong and trend.span_s < MIN_SPAN_S
    assert trend.grown / MB == pytest.approx(1229 - 446, rel=0.05)


@pytest.mark.parametrize(
    "shape",
    ["warmup_plateau", "three_step_staircase", "modest_rise"],
)
def test_a_short_run_that_does_not_grow_strongly_and_for_good_is_not_a_leak(shape):
    """The other side of the short-run rule, in the same 2.7 s and 60 samples: a warm-up that doubles
    RSS then stays flat, three jumps of +50 % each, and a steady rise of 20 % are not judged leaks."""
    t_ns, t = series(2.7, 2.7 / 59)
    noise = np.random.default_rng(8).normal(0, 1 * MB, len(t))
    if shape == "warmup_plateau":  # doubles in the first 0.4 s, flat afterwards
        v = 446 * MB + 446 * MB * np.minimum(t / 0.4, 1.0) + noise
    elif shape == "three_step_staircase":  # jumps at 0.7, 1.4 and 2.1 s
        v = 446 * MB * (1 + 0.5 * ((t >= 0.7).astype(float) + (t >= 1.4) + (t >= 2.1))) + noise
    else:
        v = 446 * MB * (1 + 0.2 * t / t[-1]) + noise
    assert sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S) is None


def test_long_series_use_a_fixed_sample_of_pairs():
    t_ns, t = series(600, 0.05)  # 12,000 samples: 72 million pairs
    v = 1000 * MB + 0.25 * MB * t + np.random.default_rng(4).normal(0, 2 * MB, len(t))
    first, second = trend_of(t_ns, v), trend_of(t_ns, v.copy())
    assert first == second
    assert first.slope_per_s / MB == pytest.approx(0.25, rel=0.02)

"""The memory trend (profiler/analysis/trend.py) and the memory_growth finding built on it.

Real loops (tests/memory_loops.py, each in a process of its own, recorded and analysed by profview):
a leak of 2 MB a step is reported with that rate; a loop that keeps nothing, a warm-up that fills
200 MB and then keeps nothing, and three allocator-like jumps of 24 MB spread over the run (growth
a straight line through them would call 85 MB, the false alarm of issue 22), are not. Then the
rule on series.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from support.cli import REPO, python_env

from profiler.analysis.trend import (
    BINS,
    MIN_POINTS,
    MIN_SPAN_S,
    RISING_BINS,
    counter_trend,
    sustained_growth,
    theil_sen_slope,
    trend_of,
)

MB = float(1 << 20)
STEPS, STEP_S = 80, 0.1
PATTERNS = ("leak", "warmup", "stairs", "flat")


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    """pattern -> output directory of a finished, analysed run (the three run side by side)."""
    root = tmp_path_factory.mktemp("memory_loops")
    procs = {
        p: subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests" / "support" / "memory_loops.py"),
                str(root / p),
                p,
                str(STEPS),
                str(STEP_S),
            ],
            cwd=REPO,
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in PATTERNS
    }
    for _pattern, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    return {p: root / p for p in PATTERNS}


def growth_findings(out) -> list[dict]:
    report = json.loads((out / "report_0.json").read_text())
    return [f for f in report["findings"] if f["kind"] == "memory_growth"]


def steady_rss(out) -> tuple[np.ndarray, np.ndarray]:
    """(time ns, RSS bytes) sampled inside the analysed steps (the first step is the warm-up)."""
    steps = pd.read_csv(out / "step_trace_0.csv")
    steps = steps[steps["step"] >= 1]
    lo, hi = steps["start_ms"].min(), (steps["start_ms"] + steps["total_ms"]).max()
    c = pd.read_csv(out / "device_counters_0.csv")
    rss = c[(c["metric"] == "rss_bytes") & (c["time_ms"] >= lo) & (c["time_ms"] < hi)]
    return (rss["time_ms"].to_numpy() * 1e6).astype(np.int64), rss["value"].to_numpy(np.float64)


def test_a_real_leak_is_reported_with_its_rate(loops):
    found = growth_findings(loops["leak"])
    assert len(found) == 1, found
    f = found[0]
    assert 2 * 0.75 < f["metrics"]["mb_per_step"] < 2 * 1.3, f["evidence"]  # 2 MB kept a step
    assert f["metrics"]["grown_mb"] > 100 and f["metrics"]["seconds_to_limit"] > 0
    assert f["key"] == "memory_growth:host:rss_bytes" and "limit is reached in" in f["title"]
    assert f"the median of each 1/{BINS} of the span above the previous one's" in f["evidence"]
    assert "references" in f["suggestion"] and "tracemalloc" in f["suggestion"]


def test_a_loop_that_keeps_nothing_is_not_reported(loops):
    t, v = steady_rss(loops["flat"])
    assert len(v) > 100 and growth_findings(loops["flat"]) == []


def test_a_warmup_plateau_is_not_a_leak(loops):
    out = loops["warmup"]
    c = pd.read_csv(out / "device_counters_0.csv")
    rss = c[c["metric"] == "rss_bytes"]["value"]
    assert (rss.max() - rss.min()) / MB > 150  # the warm-up did fill 200 MB
    assert growth_findings(out) == []
    t, v = steady_rss(out)
    assert (v[-1] - v[len(v) // 2]) / MB < 8  # and the second half kept nothing


def test_allocator_jumps_spread_over_the_run_are_not_a_leak(loops):
    out = loops["stairs"]
    t, v = steady_rss(out)
    assert (v[-1] - v[0]) / MB > 60  # the three 24 MB jumps happened inside the analysed steps
    assert growth_findings(out) == []
    trend = trend_of(t, v)
    # big enough and long enough for the old straight-line rule, but only a few parts of the run rise
    assert trend.grown / MB > 32 and trend.span_s > MIN_SPAN_S
    assert trend.rising_bins <= 4 < RISING_BINS


# ---- the rule on series ----------------------------------------------------------------------------------


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
    v = 100 * MB + 50 * MB * t
    assert sustained_growth(t_ns, v, 32 * MB, MIN_SPAN_S) is None
    assert sustained_growth(t_ns, v, 32 * MB, 2.0) is not None
    assert counter_trend(t_ns, v, MIN_SPAN_S) is None
    assert counter_trend(t_ns[: MIN_POINTS - 1], v[: MIN_POINTS - 1]) is None
    assert counter_trend(t_ns, v, 2.0) / MB == pytest.approx(50.0)


def test_long_series_use_a_fixed_sample_of_pairs():
    t_ns, t = series(600, 0.05)  # 12,000 samples: 72 million pairs
    v = 1000 * MB + 0.25 * MB * t + np.random.default_rng(4).normal(0, 2 * MB, len(t))
    first, second = trend_of(t_ns, v), trend_of(t_ns, v.copy())
    assert first == second
    assert first.slope_per_s / MB == pytest.approx(0.25, rel=0.02)

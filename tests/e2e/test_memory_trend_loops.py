"""The memory_growth finding (profiler/analysis/trend.py) on real loops (tests/support/memory_loops.py,
each in a process of its own, recorded and analysed by profview): a leak of 2 MB a step is reported with
that rate; a loop that keeps nothing, a warm-up that fills 200 MB and then keeps nothing, and three
allocator-like jumps of 24 MB spread over the run (growth a straight line through them would call 85 MB,
the false alarm of issue 22), are not. The rule on series is tests/integration/test_memory_trend.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.trend import BINS, MIN_SPAN_S, RISING_BINS, trend_of

from support.cli import REPO, python_env

pytestmark = pytest.mark.timing

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

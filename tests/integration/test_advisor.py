"""The advisor's thresholds (parsed, resolved, documented) and its verdicts on real foreign captures.

The loops with one problem each are tests/support/advisor_loops.py (live: tests/e2e/test_advisor_loops.py;
recorded: tests/integration/test_recorded_advisor.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler import ProfviewError
from profiler.analysis.advisor import DEFAULT_THRESHOLDS, parse_threshold, resolve_thresholds
from profiler.analysis.steps import outlier_steps


def test_threshold_errors():
    assert parse_threshold("tail_pct=30%") == ("tail_pct", 30.0)
    assert resolve_thresholds(None, {"tail_pct": "7"})["tail_pct"] == 7.0
    assert resolve_thresholds() == DEFAULT_THRESHOLDS
    with pytest.raises(ProfviewError, match="unknown advisor threshold 'tail'"):
        resolve_thresholds({"tail": 3})
    with pytest.raises(ProfviewError, match="wants a number"):
        parse_threshold("tail_pct=lots")
    with pytest.raises(ProfviewError, match="name=value"):
        parse_threshold("tail_pct")


def test_every_threshold_is_documented_with_its_default():
    text = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text()
    for name, value in DEFAULT_THRESHOLDS.items():
        assert f"| `{name}` | {value:g} |" in text, name


# ----------------------------------------------------------------------------- real captures


def test_real_ascend_capture(captures):
    """WideDeep on an Ascend 910 (MindInsight's JOB3): exposed all-reduce, in MindSpore's terms.

    Its HWTS log (a ring buffer) holds the tasks of 15 of the 322 steps: op figures are per
    captured step (188 tasks a step), not the 9 a step that dividing by every step would give."""
    from viewer.inputs import load_input

    run = load_input(captures / "ascend" / "JOB3")[0]
    report = run.report
    assert report["framework"] == "mindspore" and report["verdict"] == "comm_bound"
    f = report["findings"][0]
    steps = run.step_trace.iloc[1:]
    steady = steps.drop(index=outlier_steps(steps, DEFAULT_THRESHOLDS["outlier_min_pct"]).index)
    exposed = (steady["all_reduce_ms"] - steady["all_reduce_overlap_ms"]).clip(lower=0).mean()
    assert f["at_stake_ms"] == pytest.approx(exposed, abs=1e-3)
    assert f["at_stake_pct"] == pytest.approx(100 * exposed / steady["total_ms"].mean(), abs=0.01)
    assert "all_reduce_fusion_config" in f["suggestion"]
    assert report["steps"]["op_captured_steps"] == (steps["op_count"] > 0).sum() == 14  # of 15, one is warm-up
    launch = [x for x in report["findings"] if x["key"] == "host_bound:launch"]
    assert all(x["metrics"]["ops_per_step"] > 150 for x in launch)


def test_real_mindspore_cpu_capture_is_balanced(captures):
    from viewer.inputs import load_input

    report = load_input(captures / "mindspore_cpu")[0].report
    assert report["verdict"] == "balanced" and report["framework"] == "mindspore"
    low = [f for f in report["findings"] if f["kind"] == "op_hotspot"]
    assert low and low[0]["severity"] == "low" and "Conv2D" in low[0]["title"] and "amp_level" in low[0]["suggestion"]


def test_the_headline_says_where_the_data_wait_falls():
    """The ResNet50 tutorial trace's shape (issue 33): the DataLoader ranges fall inside ProfilerStep, so
    inside forward + backward, and the iteration gap is nearly empty: the headline says the data wait
    and that it lies inside forward + backward, never "0.00 ms data wait"."""
    from types import SimpleNamespace

    import pandas as pd

    from profiler.analysis.advisor import BALANCED, headline
    from profiler.analysis.findings.base import StepWindow

    def steps(gap_ms: float, gap_host_ms: float, wait_ms: float) -> SimpleNamespace:
        trace = pd.DataFrame(
            {
                "step": range(6),
                "iteration_gap_ms": gap_ms,
                "gap_host_ms": gap_host_ms,
                "data_wait_ms": wait_ms,
                "fp_bp_ms": 174.56,
                "tail_ms": 1.0,
                "total_ms": gap_ms + 174.56 + 1.0,
            }
        )
        return SimpleNamespace(steps=StepWindow(trace.iloc[1:], 1, 20.0))

    text = headline(BALANCED, [], steps(0.01, 0.01, 56.74))
    assert "iteration gap 0.01 ms (56.74 ms data wait, 56.74 ms of it inside forward + backward)" in text
    assert "(0.00 ms data wait)" not in text
    text = headline(BALANCED, [], steps(60.0, 3.26, 56.74))  # the wait in the gap, where it usually is
    assert "iteration gap 60.00 ms (56.74 ms data wait)" in text

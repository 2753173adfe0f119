"""What a fix can win (profiler/analysis/stakes.py): the table by key, the device-generation model of the
precision findings, and the ranking and severities that follow from it."""

from __future__ import annotations

import pytest

from profiler.analysis.advisor import DEFAULT_THRESHOLDS, rank_findings
from profiler.analysis.findings.base import Finding
from profiler.analysis.stakes import (
    WHOLE,
    fp32_matrix_win,
    fp64_win,
    overlap_win,
    precision_detour_win,
    win_for,
)

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}
A100 = {"id": 0, "name": "NVIDIA A100-PG509-200", "computeMajor": 8, "computeMinor": 0}
P100 = {"id": 0, "name": "Tesla P100-PCIE-16GB", "computeMajor": 6, "computeMinor": 0}
T4 = {"id": 0, "name": "Tesla T4", "computeMajor": 7, "computeMinor": 5}
RTX3090 = {"id": 0, "name": "NVIDIA GeForce RTX 3090", "computeMajor": 8, "computeMinor": 6}


def finding(kind: str, ms: float, step_ms: float = 174.56, key: str = "", **kw) -> Finding:
    return Finding(
        kind=kind,
        key=key,
        title=kind,
        at_stake_ms=ms,
        at_stake_pct=100 * ms / step_ms,
        evidence="e",
        threshold="t",
        suggestion="s",
        files=[],
        **kw,
    )


@pytest.mark.parametrize(
    "key, share",
    [
        ("input_bound", 1.0),
        ("input_bound:device", 1.0),
        ("op_hotspot:cast:cpu", 1.0),
        ("op_hotspot:norm:cuda:0", 0.5),
        ("op_hotspot:aten::mm:cpu", 0.0),  # a dominant ordinary op: where the compute goes
        ("tail_bound", 0.8),
        ("host_bound:launch", 0.7),
        ("compute_bound", 0.0),
        ("a_plugins_finding", 1.0),
    ],
)
def test_the_table_by_the_longest_matching_key(key, share):
    assert win_for(key).share == share
    assert win_for("a_plugins_finding") is WHOLE


def test_tensor_cores_by_device_generation():
    """TF32 exists from Ampere on; Volta / Turing tensor cores take float16; nothing before Volta."""
    a100, v100, t4, p100, unknown = (fp32_matrix_win(p) for p in (A100, V100, T4, P100, None))
    assert a100.share == v100.share == t4.share == unknown.share == 0.5 and p100.share == 0.25
    assert "TF32" in a100.why and "A100" in a100.why
    assert "float16 autocast" in v100.why and "no TF32 before Ampere" in v100.why and "7.0" in v100.why
    assert "7.5" in t4.why and "no tensor cores before Volta" in p100.why
    assert "unknown generation" in unknown.why
    assert fp32_matrix_win({"computeMajor": "7"}).why == unknown.why  # a damaged property: unknown


def test_float64_by_its_rate_on_the_device():
    assert fp64_win(A100).share == fp64_win(V100).share == fp64_win(P100).share == 0.5  # full-rate float64
    assert fp64_win(RTX3090).share == fp64_win(T4).share == 0.9  # 1/32 or 1/64 of float32's rate
    assert fp64_win(None).share == 0.5


def test_a_float64_detour_wins_its_casts_and_half_its_float64_work():
    win = precision_detour_win(cast_ms=2.0, total_ms=10.0)
    assert win.share == pytest.approx((2.0 + 8.0 / 2) / 10.0) and "2.00 ms" in win.why
    assert precision_detour_win(0.0, 0.0) is WHOLE


def test_exposed_communication_is_won_up_to_the_backward_length():
    assert overlap_win(30.0, 25.0).share == pytest.approx(25.0 / 30.0)
    assert overlap_win(30.0, 300.0).share == 1.0 and overlap_win(0.0, 1.0) is WHOLE


def test_achievable_keeps_the_cause_and_says_the_assumption_once():
    f = finding("tail_bound", 40.0)
    f.achievable()
    assert f.at_stake_ms == pytest.approx(32.0) and f.at_stake_pct == pytest.approx(100 * 32.0 / 174.56)
    assert f.metrics == {"cause_ms": 40.0, "cause_pct": pytest.approx(100 * 40 / 174.56), "win_pct": 80.0}
    assert f.evidence.endswith("(80 % of the 40.00 ms: " + win_for("tail_bound").why + ")")
    f.achievable()  # applied once only
    assert f.at_stake_ms == pytest.approx(32.0) and f.evidence.count("a fix can win") == 1
    nothing = finding("memory_growth", 0.0)
    assert nothing.achievable().metrics == {} and nothing.evidence == "e"


def test_the_v100_data_wait_outranks_its_float32_kernels():
    """Issue 33's ResNet50 tutorial trace (V100, num_workers=0): float32 matrix kernels take 37.3 % of the
    step (65.18 ms), the loop waits for data 56.74 ms (32.5 %). Removing the wait wins all of it; float16
    autocast on a V100 wins about half of the kernels' time: input_bound is the verdict, the tensor-core
    finding below it (medium), and the data wait's severity stays high."""
    wait = finding("input_bound", 56.74)
    fp32 = finding("device_precision", 65.18, key="device_precision:fp32", win=fp32_matrix_win(V100))
    ranked = rank_findings([fp32, wait], DEFAULT_THRESHOLDS)
    assert [f.kind for f in ranked] == ["input_bound", "device_precision"]
    assert ranked[0].severity == "high" and ranked[0].at_stake_ms == pytest.approx(56.74)
    assert ranked[1].severity == "medium" and ranked[1].at_stake_ms == pytest.approx(65.18 / 2)
    on_a100 = finding("device_precision", 65.18, key="device_precision:fp32", win=fp32_matrix_win(A100))
    assert "TF32" in rank_findings([on_a100], DEFAULT_THRESHOLDS)[0].evidence


# ----------------------------------------------------------------------------- the profiler's own cost


def test_torch_capture_memory_is_the_rss_climb_of_its_windows():
    """torch.profiler holds a window's events until its export: per window, RSS just before the export
    minus RSS when the window began to record; per captured step over every window, the most in one."""
    from profiler.capture.torch_capture import held_memory

    mb = 1 << 20
    entries = [
        {"first_step": 0, "last_step": 9, "memory": {"rss_start_bytes": 500 * mb, "rss_end_bytes": 800 * mb}},
        {"first_step": 20, "last_step": 29, "memory": {"rss_start_bytes": 520 * mb, "rss_end_bytes": 720 * mb}},
        {"first_step": 40, "last_step": 49},  # an older index line: no memory figures
        {"first_step": "x", "last_step": 9, "memory": {"rss_start_bytes": 1, "rss_end_bytes": 2}},  # damaged
        {"first_step": 50, "last_step": 50, "memory": {"rss_start_bytes": 0, "rss_end_bytes": 10}},  # unread
    ]
    memory = held_memory(entries)
    assert memory == {
        "held_bytes_max": 300 * mb,
        "held_bytes_per_captured_step": (300 + 200) * mb / 20,
        "windows": 2,
        "captured_steps": 20,
    }
    assert held_memory([{"first_step": 0, "last_step": 3}]) == {}


def test_the_report_says_the_profilers_time_and_memory_per_source():
    import pandas as pd

    from profiler.analysis.findings.base import StepWindow
    from profiler.analysis.results import profiler_cost

    mb = 1 << 20
    trace = pd.DataFrame({"step": range(5), "total_ms": 100.0, "profiler_overhead_ms": 2.0})
    steps = StepWindow(trace.iloc[1:], 1, 20.0)
    info = {
        "profiler_memory": {
            "recorder": {"buffer_peak_bytes": 3 * mb},
            "torch": {"held_bytes_max": 900 * mb, "held_bytes_per_captured_step": 30.5 * mb, "windows": 1},
        }
    }
    assert profiler_cost(info, steps) == {
        "overhead_ms_per_step": 2.0,
        "overhead_pct": 2.0,
        "memory_mb": {"recorder_buffers_peak": 3.0, "torch_per_captured_step": 30.5, "torch_held_max": 900.0},
    }
    damaged = {"profiler_memory": {"recorder": {"buffer_peak_bytes": -1}, "torch": "x"}}
    assert profiler_cost(damaged, steps)["memory_mb"] == {}
    assert profiler_cost({}, steps)["memory_mb"] == {}


def test_the_data_wait_seen_from_the_host_and_from_the_device_is_charged_once():
    """A DataLoader wait on a GPU run is the loop's data wait (input_bound) and the device's idle time inside
    it (input_bound:device): one cause, one finding; the host's stays and says the device's idle time."""
    from profiler.analysis.advisor import one_charge_per_cause

    host, device = finding("input_bound", 56.74), finding("input_bound", 50.0, key="input_bound:device")
    other = finding("tail_bound", 10.0)
    kept = one_charge_per_cause([device, host, other])
    assert kept == [host, other] and "device sits idle 50.00 ms a step" in host.evidence
    alone = finding("input_bound", 50.0, key="input_bound:device")
    assert one_charge_per_cause([alone, other]) == [alone, other]  # without the host's view, the device's stays


def test_an_op_findings_share_is_of_the_captured_step_without_the_profilers_own_time():
    """torch.profiler's window start lands in the first captured step (here 30 ms of its 40): an op finding's
    share divides by the captured steps' mean without it, (10 + 10 + 10) / 3, not (40 + 10 + 10) / 3; the
    profiler_overhead finding has those 30 ms. A step whose overhead exceeds its time counts 0, not less."""
    import pandas as pd

    from profiler.analysis.findings.base import StepWindow

    steps = pd.DataFrame(
        {
            "step": [1, 2, 3, 4],
            "total_ms": [40.0, 10.0, 10.0, 10.0],
            "profiler_overhead_ms": [30.0, 0.0, 0.0, 12.0],
            "op_count": [500, 500, 500, 0],
        }
    )
    window = StepWindow(steps, skipped=0, outlier_min_pct=50.0)
    assert window.captured_user_ms().tolist() == [10.0, 10.0, 10.0]
    finding = window.captured_finding("host_bound", 2.5, title="", evidence="", threshold="", suggestion="", files=[])
    assert finding.at_stake_pct == pytest.approx(25.0)
    window = StepWindow(steps.assign(profiler_overhead_ms=[45.0, 0.0, 0.0, 0.0]), skipped=0, outlier_min_pct=50.0)
    assert window.captured_user_ms().tolist() == [0.0, 10.0, 10.0]

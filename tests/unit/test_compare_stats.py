"""How `profview compare` decides, on synthetic step traces whose answer is known.

The verdict is the mean step of the analysed steps with a seeded block-bootstrap interval
(profiler/analysis/compare.py). Each case states the true change and checks the verdict, the
interval, the CI gate, and that the medians (kept as evidence) say what they say.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.compare import (
    MIN_STEPS_FOR_INTERVAL,
    RunTables,
    block_length,
    bootstrap_means,
    compare_runs,
    expanded_tail,
    mean_change,
    t_quantile,
    verdict,
)
from profiler.formats.names import SCHEMA_VERSION, rank_file
from viewer.cli import main
from viewer.pages.compare import render_text


def trace(total_ms, gap_share: float = 0.3, op_count=None) -> pd.DataFrame:
    """A step trace (every formats column the comparison reads) with these step times; the gap is
    `gap_share` of each step, forward + backward the rest; steps back to back from 0."""
    total = np.asarray(total_ms, dtype=np.float64)
    start = np.concatenate([[0.0], np.cumsum(total)[:-1]])
    gap = gap_share * total
    frame = pd.DataFrame(
        {
            "step": np.arange(len(total)),
            "start_ms": start,
            "iteration_gap_ms": gap,
            "fp_bp_ms": total - gap,
            "tail_ms": 0.0,
            "total_ms": total,
            "all_reduce_ms": 0.0,
            "all_reduce_overlap_ms": 0.0,
            "data_wait_ms": gap,
            "gap_host_ms": 0.0,
            "op_count": 0 if op_count is None else op_count,
            "profiler_overhead_ms": 0.0,
        }
    )
    return frame


def periodic(pattern, repeats: int, noise_ms: float, seed: int) -> np.ndarray:
    """`pattern` (ms) repeated, plus independent Gaussian noise."""
    rng = np.random.default_rng(seed)
    steps = np.tile(np.asarray(pattern, dtype=np.float64), repeats)
    return steps + rng.normal(0.0, noise_ms, len(steps))


def judge(base, new, gate=None) -> dict:
    """The verdict on two step-time arrays (no warm-up left out: they are the analysed steps)."""
    return compare_runs(
        RunTables("base", trace(base), warmup_steps=0),
        RunTables("new", trace(new), warmup_steps=0),
        fail_if_slower_pct=gate,
    ).verdict


# ----------------------------------------------------------------------------- the four cases of the issue


def test_slow_steps_fixed_while_the_median_stays_is_faster():
    """Two steps in three are fast (100 ms); the third waits for data (460 ms -> 160 ms after the fix).
    The median is a fast step in both runs; the mean (and the wall time) drops by 45 %."""
    base = periodic([100, 100, 460], 20, 2.0, seed=1)  # mean 220 ms, median ~100 ms
    new = periodic([100, 100, 160], 20, 2.0, seed=2)  # mean 120 ms, median ~100 ms
    v = judge(base, new, gate=5)
    assert abs(v["median_delta_pct"]) < 3  # the median barely moves ...
    assert v["delta_pct"] == pytest.approx(100 * (120 / 220 - 1), abs=2)  # ... the mean drops by 45 %
    assert (v["outcome"], v["significant"]) == ("faster", True)
    assert v["ci_high_pct"] < -30 and v["ci_low_pct"] > -60  # the interval is well away from 0
    assert v["ci_low_pct"] <= v["delta_pct"] <= v["ci_high_pct"]
    assert v["base_wall_ms"] == pytest.approx(base.sum(), abs=0.01) and v["new_wall_ms"] == pytest.approx(
        new.sum(), abs=0.01
    )
    assert v["base_span_ms"] == pytest.approx(base.sum(), abs=0.01)  # back-to-back steps: span == wall time
    assert (v["failed"], v["exit_code"]) == (False, 0) and v["gate"].startswith("pass: NEW is faster")
    # the same pair the other way round: significantly slower by ~80 %, the 5 % gate fails and says so
    r = judge(new, base, gate=5)
    assert (r["outcome"], r["failed"], r["exit_code"]) == ("slower", True, 1)
    assert r["ci_low_pct"] > 40
    assert (
        r["gate"].startswith("FAIL: NEW's mean analysed step is significantly slower, +8")
        and "95 % interval +" in r["gate"]
    )


def test_alternating_fast_slow_steps_the_fix_halves_the_slow_ones():
    """Two DataLoader workers: steps alternate fast / slow. Halving the slow ones is found, with the
    interval on the right side of 0, whatever the block size the alternation leads to."""
    base = periodic([60, 450], 30, 3.0, seed=3)  # mean 255 ms
    new = periodic([60, 240], 30, 3.0, seed=4)  # mean 150 ms
    v = judge(base, new, gate=5)
    assert v["delta_pct"] == pytest.approx(100 * (150 / 255 - 1), abs=2)  # -41 %
    assert v["outcome"] == "faster" and v["ci_high_pct"] < -25 and v["exit_code"] == 0
    assert v["interval_method"]["block_steps"]["base"] >= 2  # the alternation is kept inside blocks


def test_identical_distributions_are_no_significant_change_and_pass_the_gate():
    """The same bimodal, periodic process twice (independent noise): nothing changed."""
    base = periodic([100, 100, 460], 20, 2.0, seed=5)
    new = periodic([100, 100, 460], 20, 2.0, seed=6)
    v = judge(base, new, gate=5)
    assert abs(v["delta_pct"]) < 0.5
    assert (v["outcome"], v["significant"], v["failed"], v["exit_code"]) == ("no significant change", False, False, 0)
    assert v["ci_low_pct"] < 0 < v["ci_high_pct"]
    assert v["gate"].startswith("pass: no significant change")
    # the very same steps in another order: the means are equal, so is the verdict
    shuffled = np.random.default_rng(7).permutation(base)
    same = judge(base, shuffled, gate=0)
    assert same["delta_ms"] == pytest.approx(0, abs=1e-9) and same["outcome"] == "no significant change"
    assert same["exit_code"] == 0


def test_pure_noise_of_the_same_mean_is_no_change():
    """Independent noise around the same mean, 200 steps a run.

    sd 5 %: the standard error of the change is 0.5 %, the 2 % noise floor 4 of them: every one
    of 20 seeds says no significant change. sd 20 %: the standard error is 2 %, about the floor,
    so the interval decides: a 95 % interval is wrong about 1 time in 20 (here 2 of 40 seeds;
    at most 4 asserted), and the 5 % gate, 2.5 standard errors away, fails none.
    """
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        v = verdict(trace(rng.normal(100.0, 5.0, 200)), trace(rng.normal(100.0, 5.0, 200)), fail_if_slower_pct=5)
        assert (v["outcome"], v["exit_code"]) == ("no significant change", 0), seed
    verdicts = []
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        verdicts.append(
            verdict(trace(rng.normal(100.0, 20.0, 200)), trace(rng.normal(100.0, 20.0, 200)), fail_if_slower_pct=5)
        )
    assert sum(v["significant"] for v in verdicts) <= 4
    assert sum(v["failed"] for v in verdicts) == 0
    assert sum(v["ci_low_pct"] < 0 < v["ci_high_pct"] for v in verdicts) >= 36


def test_a_real_five_percent_slowdown_with_tight_noise_is_slower():
    rng = np.random.default_rng(11)
    base, new = rng.normal(100.0, 1.0, 60), rng.normal(105.0, 1.0, 60)
    v = judge(base, new, gate=2)
    assert v["delta_pct"] == pytest.approx(5.0, abs=0.6)
    assert (v["outcome"], v["significant"]) == ("slower", True)
    assert 3.5 < v["ci_low_pct"] < v["delta_pct"] < v["ci_high_pct"] < 6.5
    assert (v["failed"], v["exit_code"]) == (True, 1)  # 5 % slower fails a 2 % gate ...
    assert judge(base, new, gate=10)["exit_code"] == 0  # ... and passes a 10 % one
    assert judge(base, new, gate=10)["gate"].startswith("pass: NEW is slower by +5")


def test_a_change_inside_the_noise_floor_is_not_significant():
    """1 % slower, measured very precisely: the interval excludes 0, but 1 % is within the 2 % floor."""
    rng = np.random.default_rng(12)
    v = judge(rng.normal(100.0, 0.3, 100), rng.normal(101.0, 0.3, 100), gate=0.5)
    assert v["ci_low_pct"] > 0.5
    assert (v["outcome"], v["exit_code"]) == ("no significant change", 0)
    assert "within the 2 % noise floor" in v["reason"]


# ----------------------------------------------------------------------------- the interval itself


def test_interval_matches_normal_theory_on_independent_steps():
    """400 independent steps a run: the 95 % interval's half-width is 1.96 standard errors (within 10 %)."""
    rng = np.random.default_rng(13)
    base, new = rng.normal(100.0, 10.0, 400), rng.normal(103.0, 10.0, 400)
    row = mean_change(trace(base), trace(new), ["total_ms"]).iloc[0]
    se = np.sqrt(base.var(ddof=1) / 400 + new.var(ddof=1) / 400)
    half = (row["ci_high_ms"] - row["ci_low_ms"]) / 2
    assert half == pytest.approx(1.96 * se, rel=0.10)
    assert (row["ci_low_ms"] + row["ci_high_ms"]) / 2 == pytest.approx(new.mean() - base.mean(), abs=0.25 * se)


def test_block_length_follows_the_autocorrelation():
    rng = np.random.default_rng(14)
    independent = rng.normal(100.0, 10.0, 400)
    drifting = 100 + np.cumsum(rng.normal(0.0, 1.0, 400)) * 0.5 + rng.normal(0.0, 1.0, 400)
    alternating = np.tile([60.0, 450.0], 200) + rng.normal(0.0, 3.0, 400)
    assert block_length(independent) <= 2
    assert block_length(drifting) >= 10
    assert block_length(alternating) >= 10
    assert block_length(np.full(50, 7.0)) == 1 and block_length(np.arange(3.0)) == 1
    assert all(block_length(x) <= 60 for x in (independent, drifting, alternating))  # 3 sqrt(400)


def test_bootstrap_is_seeded_and_resamples_whole_blocks():
    values = np.column_stack([np.arange(10.0), 2 * np.arange(10.0)])
    a = bootstrap_means(values, 50, np.random.default_rng(0), size=3)
    b = bootstrap_means(values, 50, np.random.default_rng(0), size=3)
    assert np.array_equal(a, b)
    assert np.allclose(a[:, 1], 2 * a[:, 0])  # every column resampled with the same steps
    assert np.allclose(bootstrap_means(np.full((9, 1), 4.0), 20, np.random.default_rng(1), size=2), 4.0)
    # block size 1 on a constant-step series: the resample mean is exactly that mean
    ones = bootstrap_means(np.arange(5.0), 2000, np.random.default_rng(2), size=5)
    assert np.allclose(ones, 2.0)  # one block of all 5 steps (circular): always the mean
    rng_verdicts = [
        json.dumps(judge(periodic([100, 300], 10, 5, 1), periodic([100, 250], 10, 5, 2)), sort_keys=True)
        for _ in range(2)
    ]
    assert rng_verdicts[0] == rng_verdicts[1]  # deterministic output


def test_t_quantile_and_expanded_tail():
    # Student's t 97.5 % quantiles (tables): 2 -> 4.303, 4 -> 2.776, 10 -> 2.228, 30 -> 2.042
    for df, exact in ((2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert t_quantile(0.975, df) == pytest.approx(exact, rel=0.01 if df == 2 else 0.001)
    assert expanded_tail(0.95, (1.0, 1.0), (1000, 1000)) == pytest.approx(0.025, abs=0.001)  # many blocks: plain
    assert expanded_tail(0.95, (1.0, 1.0), (5, 5)) < 0.01  # few: much wider
    assert expanded_tail(0.95, (0.0, 0.0), (5, 5)) == pytest.approx(0.025)


def test_too_few_steps_decides_by_the_mean_alone_and_says_so():
    n = MIN_STEPS_FOR_INTERVAL - 1
    v = judge([100.0] * n, [120.0] * n, gate=5)
    assert v["ci_low_pct"] is None and v["interval_method"] is None
    assert (v["outcome"], v["exit_code"]) == ("slower", 1)
    assert "too few analysed steps" in v["reason"] and "too few analysed steps" in v["gate"]


def test_phases_and_headline_agree():
    """The phase table's step row is the verdict's numbers; a phase that moved is significant, one that
    did not is not."""
    base = trace(periodic([100, 100, 460], 20, 2.0, seed=1), gap_share=0.5)
    new = trace(periodic([100, 100, 160], 20, 2.0, seed=2), gap_share=0.5)
    new["iteration_gap_ms"] = 50.0  # the gap: half of each step -> 50 ms flat
    new["fp_bp_ms"] = new["total_ms"] - new["iteration_gap_ms"]
    c = compare_runs(RunTables("b", base, warmup_steps=0), RunTables("n", new, warmup_steps=0))
    rows = c.phases.set_index("column")
    v = c.verdict
    for key, col in (("delta_ms", "delta_ms"), ("ci_low_ms", "ci_low_ms"), ("ci_high_ms", "ci_high_ms")):
        assert rows.at["total_ms", col] == pytest.approx(v[key], abs=1e-3)
    assert bool(rows.at["total_ms", "significant"]) and bool(rows.at["iteration_gap_ms", "significant"])
    assert not bool(rows.at["tail_ms", "significant"])  # 0 ms in both
    assert list(c.phases.columns[:6]) == ["phase", "column", "base_mean_ms", "new_mean_ms", "delta_ms", "delta_pct"]
    text = render_text(c)
    assert text.splitlines()[1].startswith("Verdict: faster. Mean analysed step")
    assert "the median barely moved, the slow steps did" in text
    assert "Findings: Neither run has an advisor report" in text


# ----------------------------------------------------------------------------- ops per captured step


def test_op_figures_divide_by_the_steps_that_captured_ops():
    ops = pd.DataFrame(
        {"device": ["cpu"], "op_type": ["aten::mm"], "count": [9], "total_ms": [30.0], "self_ms": [30.0]}
    )
    sampled = trace([10.0] * 12, op_count=[0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 0, 0])  # 3 of 12 steps captured ops
    every = trace([10.0] * 12, op_count=5)
    c = compare_runs(
        RunTables("b", sampled, op_type=ops, warmup_steps=0),
        RunTables("n", every, op_type=ops.assign(total_ms=120.0, self_ms=120.0, count=36), warmup_steps=0),
    )
    row = c.op_types.iloc[0]
    assert row["base_per_step_ms"] == pytest.approx(10.0) and row["new_per_step_ms"] == pytest.approx(10.0)
    assert c.op_steps["base"] == {
        "steps": 3,
        "recorded_steps": 12,
        "basis": "steps_with_ops",
        "note": "3 of 12 steps captured ops",
    }
    assert "per step that captured ops (op_count > 0): BASE 3 of 12 steps, NEW 12 of 12" in render_text(c)
    # an older step trace without op_count: every recorded step, and the text says so
    old = compare_runs(
        RunTables("b", sampled.drop(columns=["op_count"]), op_type=ops, warmup_steps=0),
        RunTables("n", every, op_type=ops, warmup_steps=0),
    )
    assert old.op_types.iloc[0]["base_per_step_ms"] == pytest.approx(30.0 / 12)
    assert old.op_steps["base"]["basis"] == "all_steps"
    assert "BASE: the step trace has no op_count column (an older output): divided by all 12 steps" in render_text(old)


# ----------------------------------------------------------------------------- the command line


def write_run(directory: Path, total_ms) -> Path:
    """A minimal profview output directory: profiler_info and a step trace."""
    directory.mkdir(parents=True)
    info = {"schema_version": SCHEMA_VERSION, "rank": 0, "world_size": 1}
    (directory / rank_file("profiler_info", 0)).write_text(json.dumps(info))
    trace(total_ms).to_csv(directory / rank_file("step_trace", 0), index=False)
    return directory


def test_cli_on_synthetic_runs(tmp_path, capsys):
    base = write_run(tmp_path / "a", np.concatenate([[400.0], periodic([100, 100, 460], 20, 2.0, seed=1)]))
    new = write_run(tmp_path / "b", np.concatenate([[400.0], periodic([100, 100, 160], 20, 2.0, seed=2)]))
    assert main(["compare", str(base), str(new), "--fail-if-slower", "5%"]) == 0
    text = capsys.readouterr().out
    assert "Verdict: faster." in text and "CI gate (--fail-if-slower 5%): pass: NEW is faster" in text
    assert "Resolved: none" not in text  # no reports: the text says there was nothing to compare
    assert main(["compare", str(new), str(base), "--fail-if-slower", "5%", "--json", "-"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 2 and doc["verdict"]["outcome"] == "slower" and doc["verdict"]["failed"]
    assert doc["verdict"]["base_steps"] == 60  # the warm-up step left out
    assert main(["compare", str(base), str(base), "--fail-if-slower", "0"]) == 0
    assert "Verdict: no significant change." in capsys.readouterr().out

"""The scenario bank judged on recordings: every scenario's real loop (tests/support/scenario_bank.py),
recorded once by scripts/record_fixtures.py into tests/data/recorded/scenarios/, re-analysed here and
judged exactly as tests/e2e/test_scenario_bank.py judges a live run: the injection took effect by the
loop's own clock (its sanity check, on the recorded measurements), and profview says what a correct
profiler must say (verdict, finding kind, the key numbers against what the loop measured)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from profiler.analysis.compare import phase_deltas

from support.recorded import analysed_copy, recorded_names, truth
from support.scenario_bank import SCENARIOS, Outcome, WrongVerdict

RECORDINGS = recorded_names("scenarios")


def test_every_scenario_of_the_bank_is_recorded():
    assert RECORDINGS == sorted(SCENARIOS), "re-record with scripts/record_fixtures.py"


@pytest.mark.parametrize("name", RECORDINGS)
def test_recorded_scenario(name, tmp_path):
    sc = SCENARIOS[name]
    out = analysed_copy("scenarios", name, tmp_path / name)
    outcome = Outcome.load(name, out, truth("scenarios", name))
    assert not sc.sanity(outcome), f"{name}: the recording's own measurements say the injection did not hold"
    problems = sc.judge(outcome)
    if problems:
        raise WrongVerdict(
            f"{name}: injected {sc.injected}; expected {sc.expected}; profview says {outcome.top}. "
            f"Key figures: {sc.figures(outcome)}. Wrong: " + "; ".join(problems)
        )


def test_a_wait_measured_only_in_the_captured_steps_is_theirs(tmp_path):
    """torch.profiler's DataLoader ranges measure the wait only in the steps op capture recorded: the split is
    over those steps (the others' data_wait_ms and gap_host_ms empty, not 0 and the whole gap), and the report
    says so (before: 0 in 21 of 29 steps, whose gap became "host work between steps", the verdict host_bound)."""
    name = "data_sleep_w2_ops_8_of_30"
    out = analysed_copy("scenarios", name, tmp_path / name)
    steps = pd.read_csv(out / "step_trace_0.csv")
    captured = steps["step"].isin(truth("scenarios", name)["captured_steps"]).to_numpy()
    assert 0 < captured.sum() < len(steps)
    assert steps["data_wait_ms"][~captured].isna().all() and steps["gap_host_ms"][~captured].isna().all()
    assert steps["data_wait_ms"][captured].notna().all() and (steps["data_wait_ms"][captured] > 0).all()
    report = json.loads((out / "report_0.json").read_text())
    figures = report["steps"]
    assert figures["outliers"] == 0  # the steady steps: the analysed ones
    steady = steps.iloc[figures["warmup_skipped"] :]
    measured = steady[steady["data_wait_ms"].notna()]
    want_share = 100 * measured["data_wait_ms"].sum() / measured["total_ms"].sum()
    assert figures["share_pct"]["data_wait_ms"] == pytest.approx(want_share, abs=1e-3)
    assert figures["mean_phase_ms"]["data_wait_ms"] == pytest.approx(measured["data_wait_ms"].mean(), abs=1e-4)
    split_gap = measured["iteration_gap_ms"].mean()
    assert f"of a {split_gap:.2f} ms gap in the {len(measured)} steps that measured it" in report["headline"]
    top = report["findings"][0]
    assert top["kind"] == "input_bound"
    assert f"the data wait was measured in {len(measured)} of the {len(steady)} steps" in top["evidence"]
    assert f"iteration gap {split_gap:.2f} ms, of it {measured['gap_host_ms'].mean():.2f} ms" in top["evidence"]
    phases = phase_deltas(steady, steady).set_index("phase")  # compare: the same split
    assert phases.loc["data wait", "base_share_pct"] == pytest.approx(want_share)
    assert phases.loc["data wait", "base_mean_ms"] == pytest.approx(measured["data_wait_ms"].mean())

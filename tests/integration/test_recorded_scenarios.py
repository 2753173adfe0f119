"""The scenario bank judged on recordings: every scenario's real loop (tests/support/scenario_bank.py),
recorded once by scripts/record_fixtures.py into tests/data/recorded/scenarios/, re-analysed here and
judged exactly as tests/e2e/test_scenario_bank.py judges a live run: the injection took effect by the
loop's own clock (its sanity check, on the recorded measurements), and profview says what a correct
profiler must say (verdict, finding kind, the key numbers against what the loop measured)."""

from __future__ import annotations

import pytest

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

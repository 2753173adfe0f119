"""The scenario bank (tests/support/scenario_bank.py): one test per real PyTorch loop with one injected bottleneck.

Each test runs the loop in this process into its own tmp directory, then:

1. checks that the injection took effect, by the loop's own clock (a plain assertion: a failure here
   is a broken scenario or a machine too loaded to produce it, not a profview bug; such a run is
   repeated once first, a run whose injection held never is);
2. checks that profview says what a correct profiler must say (verdict / finding kind and the key
   numbers it claims, with generous margins); a miss raises `WrongVerdict`.

Scenarios profview gets wrong today are `xfail(strict=True, raises=WrongVerdict)` with the current
wrong behaviour as the reason: the suite stays green, a fix turns the test into an XPASS failure
(then remove the entry from `WRONG_TODAY` in scenario_bank.py), and any other breakage still fails.
The few whose wrong answer depends on timing are `strict=False` (`flaky_today`).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from support.scenario_bank import SCENARIOS, WrongVerdict, run_scenario

pytestmark = pytest.mark.timing


def _param(name: str):
    sc = SCENARIOS[name]
    marks = []
    if sc.wrong_today:
        marks.append(
            pytest.mark.xfail(
                strict=not sc.flaky_today,
                raises=WrongVerdict,
                reason=("FLAKY TODAY (wrong in some runs): " if sc.flaky_today else "") + sc.wrong_today,
            )
        )
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(name) for name in SCENARIOS])
def test_scenario(name, tmp_path):
    sc = SCENARIOS[name]
    outcome = run_scenario(sc, tmp_path / name, attempts=2)  # again only if the injection did not hold
    assert not outcome.insane, f"{name}: the injected bottleneck did not take effect ({outcome.figures}): " + "; ".join(
        outcome.insane
    )
    if outcome.problems:
        raise WrongVerdict(
            f"{name}: injected {sc.injected}; expected {sc.expected}; profview says {outcome.top}. "
            f"Key figures: {outcome.figures}. Wrong: " + "; ".join(outcome.problems)
        )


def test_the_bank_is_big_enough_and_every_wrong_answer_is_explained():
    assert len(SCENARIOS) >= 24
    for sc in SCENARIOS.values():
        assert sc.expected and sc.injected
        assert not sc.flaky_today or sc.wrong_today, f"{sc.name}: flaky_today without a wrong_today reason"

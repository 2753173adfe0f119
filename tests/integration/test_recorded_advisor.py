"""The advisor on recordings of loops that each have one problem (tests/support/advisor_loops.py),
recorded once by scripts/record_fixtures.py into tests/data/recorded/advisor/: each re-analysed here and
checked with the same check tests/e2e/test_advisor_loops.py applies to a live run."""

from __future__ import annotations

import json

import pytest

from support.advisor_loops import LOOPS, check_straggler
from support.recorded import analysed_copy, recorded_names


def test_every_loop_is_recorded():
    assert recorded_names("advisor") == sorted([*LOOPS, "straggler_ranks"]), "re-record with scripts/record_fixtures.py"


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_recorded_loop(name, tmp_path):
    out = analysed_copy("advisor", name, tmp_path / name)
    LOOPS[name].check(json.loads((out / "report_0.json").read_text()), out)


def test_straggler_rank_from_recorded_rank_step_traces(tmp_path):
    """The cluster analysis emits straggler_rank in the advisor's finding shape (same fields, plus rank)."""
    out = analysed_copy("advisor", "straggler_ranks", tmp_path / "job")
    check_straggler(out)

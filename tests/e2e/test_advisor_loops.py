"""The advisor on live runs: each loop of tests/support/advisor_loops.py is built to have exactly one
problem, recorded by a real Profiler as it runs, analysed, and the problem must rank first (each loop's
check). tests/integration/test_recorded_advisor.py applies the same checks to a recording of each loop."""

from __future__ import annotations

import pytest

from support.advisor_loops import LOOPS, check_straggler, run_straggler_ranks

pytestmark = pytest.mark.timing


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loop(name, tmp_path):
    loop = LOOPS[name]
    if loop.torch:
        pytest.importorskip("torch")
    loop.check(loop.run(tmp_path), tmp_path)


def test_straggler_rank_from_real_rank_step_traces(tmp_path):
    run_straggler_ranks(tmp_path)
    check_straggler(tmp_path)

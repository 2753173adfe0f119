"""`profview compare` of a plain loop's real runs before / after a prefetch fix: the verdict (faster,
its interval clear of 0), the phases (the iteration gap's ~40 ms of loading gone, forward + backward
unchanged), the findings resolved, and the --fail-if-slower gate, all on steps timed for real."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from viewer.cli import main

from support.compare_loops import before_after_prefetch

pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def before_after(tmp_path_factory) -> tuple[Path, Path]:
    """The plain loop's runs without, then with prefetch."""
    return before_after_prefetch(tmp_path_factory.mktemp("prefetch"))


def test_plain_loop_before_after_prefetch(before_after, tmp_path, capsys):
    before, after = before_after
    out = tmp_path / "verdict.json"
    assert main(["compare", str(before), str(after), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    phases = {p["column"]: p for p in doc["phases"]}
    gap_delta = phases["iteration_gap_ms"]["delta_ms"]
    assert gap_delta < -30  # ~40 ms of loading moved off the step
    # forward + backward did not change: its median moved by less than half the gap's change, even when a
    # busy machine stretches the sleeps of one run more than the other's (17 ms apart at load 15)
    assert abs(phases["fp_bp_ms"]["median_delta_ms"]) < 0.5 * -gap_delta
    # before: nothing measured the wait (gap_bound); a busy machine may add a slow-steps finding on either side
    assert "gap_bound" in [f["kind"] for f in doc["findings"]["resolved"]]
    assert not {"gap_bound", "input_bound"} & {f["kind"] for f in doc["findings"]["introduced"]}
    v = doc["verdict"]
    assert v["outcome"] == "faster" and v["delta_pct"] < -20 and v["ci_high_pct"] < 0  # ~ -40 % on a quiet machine
    stats = {r["statistic"]: r for r in doc["step_time_distribution"]}
    assert stats["mean"]["new_ms"] == v["new_mean_step_ms"] and stats["median"]["new_ms"] == v["new_median_step_ms"]
    assert stats["steps"]["base_ms"] == 29  # the warm-up step is left out
    base = pd.read_csv(before / "step_trace_0.csv").iloc[1:]
    assert v["base_mean_step_ms"] == pytest.approx(base["total_ms"].mean(), abs=1e-3)
    assert stats["wall"]["base_ms"] == pytest.approx(base["total_ms"].sum(), abs=1e-3)
    assert phases["total_ms"]["delta_ms"] == pytest.approx(v["delta_ms"], abs=1e-3)  # the tables agree with the verdict
    assert phases["total_ms"]["ci_low_ms"] == pytest.approx(v["ci_low_ms"], abs=1e-3)
    assert "Verdict: faster. Mean analysed step" in capsys.readouterr().out
    # the gate: after -> before is slower than 5 %, exit 1; a generous limit passes
    assert main(["compare", str(after), str(before), "--fail-if-slower", "5%"]) == 1
    assert main(["compare", str(after), str(before), "--fail-if-slower", "500"]) == 0

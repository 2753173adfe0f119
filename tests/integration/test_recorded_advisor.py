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


def test_the_report_says_what_the_op_capture_held_in_memory(tmp_path):
    """The float64 scenario captured ops with record_shapes on every step: profiler_info says how much host
    memory each capture window climbed while torch.profiler held its events (from the RSS the capture read
    at the window's start and just before its export, in raw/*-torch.jsonl), and report_0.json and
    --summary say it per captured step, next to the profiler's time, with profview's own buffers."""
    from profiler.capture.torch_capture import held_memory
    from viewer.cli import main

    out = analysed_copy("scenarios", "float64_ops_every_step", tmp_path / "run")
    entries = [json.loads(line) for p in (out / "raw").glob("*-torch.jsonl") for line in p.read_text().splitlines()]
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["profiler_memory"]["torch"] == held_memory(entries) and info["profiler_memory"]["torch"]["windows"] == 1
    cost = json.loads((out / "report_0.json").read_text())["profiler_cost"]
    torch_memory = info["profiler_memory"]["torch"]
    assert cost["memory_mb"]["torch_per_captured_step"] == round(
        torch_memory["held_bytes_per_captured_step"] / 2**20, 3
    )
    assert cost["memory_mb"]["recorder_buffers_peak"] > 0 and cost["overhead_ms_per_step"] >= 0
    assert main([str(out), "--summary"]) == 0

"""`profview analyse DIR` re-runs the core analysis from DIR/raw; the viewer then reads the result."""

from __future__ import annotations

from pathlib import Path

from support.cli import run_profview
from support.viewer_fixtures import profile_loop


def test_analyse_rewrites_outputs_then_summary_reads_them(tmp_path):
    run = profile_loop(tmp_path / "run", rank=0, world_size=1, steps=10)
    for output in run.glob("*_0.*"):
        output.unlink()
    result = run_profview("analyse", run)
    assert result.returncode == 0, result.stderr
    written = [Path(line) for line in result.stdout.split("\n") if line.strip()]
    assert any(p.name == "step_trace_0.csv" for p in written) and all(p.exists() for p in written)
    summary = run_profview(run, "--summary")
    assert summary.returncode == 0, summary.stderr
    assert "Step breakdown over 10 recorded step(s)" in summary.stdout
    assert "verdict:" in result.stderr and f"Next: profview {run}" in result.stderr

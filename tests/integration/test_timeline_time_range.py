"""Any time range reaches the timeline: a MindInsight-era Ascend directory whose step trace reads the
device counter at ~1.5e13 ticks while its op timeline keeps its own millisecond base, so that
the steps land ~1.5e14 ns away from the ops (too wide for the trace's old fixed-width field: the
report ended in `ValueError ... fixed-width field`), gives a report, a Chrome trace and an event
file with the same times."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
TICK_NS = 10
SHIFT_TICKS = 15_000_000_000_000 - 43_806_850_547  # the first step starts at 1.5e13 ticks


def shifted_gold(gold: Path, out: Path) -> Path:
    """run_1_gold with the step trace's device times moved to ~1.5e13 ticks (durations unchanged)."""
    shutil.copytree(gold, out)
    steps = out / "step_trace_raw_1_detail_time.csv"
    frame = pd.read_csv(steps, dtype=str, keep_default_na=False)
    for column in frame.columns:
        if column.endswith("_point"):
            values = pd.to_numeric(frame[column])
            frame[column] = np.where(values > 0, values + SHIFT_TICKS, values).astype(np.int64).astype(str)
    frame.to_csv(steps, index=False, lineterminator="\r\n" if b"\r\n" in (gold / steps.name).read_bytes() else "\n")
    return out


def test_huge_device_times_give_a_report_and_exact_timelines(captures, tmp_path):
    run = shifted_gold(captures / "ascend" / "run_1_gold", tmp_path / "gold_shifted")
    report = tmp_path / "r.html"
    result = subprocess.run(
        [sys.executable, "-m", "viewer.cli", str(run), "-o", str(report)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and report.stat().st_size > 1e6
    out = tmp_path / "imported"
    result = subprocess.run(
        [sys.executable, "-m", "viewer.cli", "import-mindspore", str(run), "-o", str(out)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=REPO,
        timeout=600,
    )
    if result.returncode != 0:  # the importer's command name differs: import through the API
        from profiler.postprocess.imported import import_mindspore_dir

        import_mindspore_dir(run, out)
    trace_path = next(out.glob("timeline_*.json"))
    events = [e for e in json.loads(trace_path.read_text())["traceEvents"] if e.get("ph") == "X"]
    from profiler.export.event_file import read_event_file

    f = read_event_file(next(out.glob("events_*.arrow")))
    start = f.column("start_ns", 0, f.complete_rows)
    dur = f.column("dur_ns", 0, f.complete_rows)
    assert f.complete_rows == len(events) and start.max() > 1.4e14  # steps far from the ops
    ts = np.array([e["ts"] for e in events])  # same rows, same order
    assert np.all(np.abs(ts * 1000 - start) <= 0.5 + np.abs(start) * 2e-16)
    ends = np.array([e["ts"] + e["dur"] for e in events])
    assert np.all(np.abs(ends * 1000 - (start + dur)) <= 0.5 + np.abs(start) * 2e-16)
    steps = sorted((e for e in events if e.get("cat") == "step"), key=lambda e: e["ts"])
    assert len(steps) > 300 and all(a["ts"] + a["dur"] == b["ts"] for a, b in zip(steps, steps[1:]))

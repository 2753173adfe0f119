"""What timeline_{rank}.json holds past `timeline_max_events`: the key steps only (median, slowest,
outliers, found by how long the steps really took), on a multi-thread recording with injected slow
steps; `profview export --chrome` of that run writes the whole trace again from the event file, and
wants exactly one target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.export.chrome_from_events import step_counts, trace_plan
from profiler.export.event_file import read_event_file
from profiler.export.key_steps import key_steps
from profiler.formats.documents import read_profiler_info
from profiler.postprocess.recording import load_rank
from viewer.cli import main

from support.chrome_trace import record_threads, rows_in_steps, trace_rows, trace_steps

pytestmark = pytest.mark.timing

OUTLIER_S, SLOWEST_S = 0.3, 0.6  # a step's sleep: outliers 10x, the slowest 20x the others (ORDINARY_S)
OUTLIERS, SLOWEST = (12, 20), 7


def expected_key_steps(out: Path) -> tuple[int, int, set[int]]:
    """Median, slowest and outlier steps by the report's rule, from step_trace_0.csv (warm-up step 0 left out)."""
    trace = pd.read_csv(out / "step_trace_0.csv")
    steps = trace[trace["step"] > trace["step"].min()]
    total = steps["total_ms"].to_numpy()
    by_time = steps.sort_values(["total_ms", "step"])
    median = int(by_time["step"].iloc[(len(steps) - 1) // 2])
    q1, mid, q3 = np.percentile(total, [25, 50, 75])
    fence = max(q3 + 1.5 * (q3 - q1), mid * 1.2)
    return median, int(steps.loc[steps["total_ms"].idxmax(), "step"]), set(steps.loc[total > fence, "step"].tolist())


@pytest.fixture(scope="module")
def over_limit(tmp_path_factory) -> Path:
    """A 24-step recording past a `timeline_max_events` of 100, with the injected outliers and slowest step."""
    out = tmp_path_factory.mktemp("over") / "profiler_data"
    slow = {SLOWEST: SLOWEST_S, **dict.fromkeys(OUTLIERS, OUTLIER_S)}
    record_threads(out, 24, slow, timeline_max_events=100)  # ~12 events a step: ~290 in all
    return out


def test_past_the_limit_the_trace_holds_exactly_the_median_slowest_and_outlier_steps(over_limit):
    out = over_limit
    info = read_profiler_info(out / "profiler_info_0.json")
    tl = info["timeline"]
    median, slowest, outliers = expected_key_steps(out)
    assert slowest == SLOWEST and set(OUTLIERS) | {SLOWEST} <= outliers  # the injected ones, 10-20x the others
    assert tl["content"] == "key steps" and tl["max_events"] == 100 and tl["events"] > 250
    assert (tl["median_step"], tl["slowest_step"], set(tl["outlier_steps"])) == (median, slowest, outliers)
    assert tl["outlier_steps_left_out"] == [] and tl["steps"] == sorted({median, slowest} | outliers)
    assert trace_steps(out / "timeline_0.json") == tl["steps"]
    rows = [
        line
        for line in (out / "timeline_0.json").read_text().splitlines()
        if line.startswith('{"ph":"') and '"ph":"M"' not in line
    ]
    assert len(rows) == tl["events_written"] <= 100
    assert {"timeline_0.json", "events_0.arrow"} <= set(info["outputs"])
    assert "profview export --chrome" in tl["rest"]
    # the whole run is there on demand, and the trace holds its rows of those steps
    assert main(["export", str(out), "--chrome", "-o", str(out.parent / "whole.json")]) == 0
    assert trace_steps(out.parent / "whole.json") == list(range(24))
    wanted = np.array(tl["steps"])
    ef = read_event_file(out / "events_0.arrow")
    assert trace_rows(out / "timeline_0.json")[0] == rows_in_steps(
        out.parent / "whole.json", ef, lambda s: np.isin(s, wanted)
    )


def test_outliers_that_do_not_fit_are_left_out_slowest_kept(over_limit, tmp_path):
    """With room for about two steps the median and the slowest stay; the outliers are said left out."""
    ef = read_event_file(over_limit / "events_0.arrow")
    key = key_steps(load_rank(over_limit, 0))
    per_step = step_counts(ef, [SLOWEST])[0]
    plan = trace_plan(ef, key, 2 * per_step + 1)
    assert plan.steps == tuple(sorted({key.median, SLOWEST}))
    assert set(plan.left_out) == set(key.outliers) - {SLOWEST}
    assert trace_plan(ef, key, ef.rows).steps is None


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--chrome", "--to", "mlflow"], "wants one target"),
        ([], "wants one target"),
        (["--to", "mlflow", "--steps", "1:2"], "go with --chrome"),
    ],
)
def test_export_wants_exactly_one_target(over_limit, capsys, argv, says):
    assert main(["export", str(over_limit), *argv]) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

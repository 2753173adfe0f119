"""The report pages pick their findings from the findings registry (each question names its page): on
a real loop with a slow loader and a periodic slow step, the report has input_bound and step_outliers,
and the Data pipeline page shows only the first, its question's page's finding."""

from __future__ import annotations

import json
import time

import pytest

from profiler import Profiler

pytestmark = pytest.mark.timing


def test_the_data_pipeline_page_shows_the_data_findings_only(tmp_path):
    """A real loop with a slow loader and a slow step every 5 steps: the report has input_bound and
    step_outliers; the Data pipeline page shows input_bound (its question's page), not step_outliers."""
    from viewer.context import Context as ViewerContext
    from viewer.inputs import load_input
    from viewer.pages import pipeline

    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False)
    for i in range(16):
        with p.phase("data"):
            time.sleep(0.008)  # the loop waits for data about half the step
        with p.phase("forward"):
            time.sleep(0.006)
        if i % 5 == 4:
            with p.span("checkpoint"):
                time.sleep(0.08)  # a periodic slow step
        p.step()
    p.analyse(progress=False)
    kinds = {f["kind"] for f in json.loads((tmp_path / "report_0.json").read_text())["findings"]}
    assert {"input_bound", "step_outliers"} <= kinds
    html = pipeline.build(ViewerContext(load_input(tmp_path)))
    assert "What it costs the step" in html and "Input pipeline: the loop waits for data" in html
    assert '<span class="note">input_bound</span>' in html  # a finding row, its kind under the title
    assert '<span class="note">step_outliers</span>' not in html and "slow steps, every 5 steps add" not in html

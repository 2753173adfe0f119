"""The Operators tab of a run recorded without op capture says how to get an op table."""

from __future__ import annotations

import html
import time

from profiler import Profiler
from viewer.context import Context
from viewer.inputs import load_input
from viewer.pages.operators import NO_OPS
from viewer.report import build_report


def test_a_run_without_ops_says_how_to_capture_them(tmp_path):
    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False)  # no attach(), no framework
    for _ in range(6):
        with p.phase("forward"):
            time.sleep(0.002)
        p.step()
    p.analyse(progress=False)
    assert not list(tmp_path.glob("op_*_0.csv"))
    page = build_report(Context(load_input(tmp_path)))
    shown = html.unescape(page)
    assert NO_OPS in shown and html.escape(NO_OPS) in page  # the hint, escaped as every text is
    for way in (
        "attach(model, optimizer)",
        'framework="torch"',
        "profview run --ops",
        "ProfviewCallback(mindspore_profiler=True)",
    ):
        assert way in NO_OPS
    assert "No op-type table" not in shown and "No op detail table" not in shown

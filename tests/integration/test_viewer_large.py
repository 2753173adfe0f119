"""A 10-million-event run: the report is built (level of detail keeps it small) and says what it aggregated."""

from __future__ import annotations

import re
import time

from viewer.context import Context
from viewer.inputs import load_input
from viewer.report import build_report

from support.viewer_fixtures import Spec, write_run

EVENTS = 10_000_000
STEPS = 200


def test_ten_million_events(tmp_path):
    per_step = -(-(EVENTS - 3 * STEPS) // (2 * STEPS))  # round up: at least EVENTS events
    directory = write_run(tmp_path / "big", Spec(steps=STEPS, ops_per_step=per_step, queues=False, counters=False))
    started = time.perf_counter()
    html = build_report(Context(load_input(directory)))
    seconds = time.perf_counter() - started
    size = len(html.encode("utf-8"))
    print(f"10M events: built in {seconds:.1f} s, {size / 1e6:.1f} MB")
    assert size < 30e6
    assert seconds < 120, "far over the 30 s target even on a loaded machine"
    total = re.search(r"([\d,]+) events in events_0\.arrow", html)
    assert total and int(total.group(1).replace(",", "")) >= EVENTS
    assert re.search(r"longest of [\d,]+ events overlapping this window are drawn", html)

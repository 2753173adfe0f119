"""The timeline page on a real PyTorch loop whose ops were captured on a few steps only
(`ops_schedule`), in a real browser: hover durations, the phase row, the default window, zooming;
and its Chrome trace loaded in speedscope without a warning."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from support.speedscope import QuietHandler, speedscope_release
from support.viewer_browser import (
    ALL_TABS_DRAWN,
    close_driver,
    console_errors,
    new_driver,
    require_chromium,
    screenshot,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
STEPS = 16


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory) -> Path:
    """16 steps of a small CNN under attach(); torch.profiler ops on steps 11-13 only."""
    from profiler import schedule

    from support.torch_loops import profiled_cnn_run

    out = tmp_path_factory.mktemp("sampled") / "profiler_data"
    profiled_cnn_run(out, steps=STEPS, framework="torch", ops_schedule=schedule(wait=10, warmup=1, active=3))
    return out


@pytest.fixture(scope="module")
def report(sampled_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "viewer.cli", str(sampled_run), "-o", str(out)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def driver():
    d = new_driver()
    yield d
    close_driver(d)


@pytest.fixture(scope="module")
def timeline_page(driver, report):
    driver.get(report.as_uri())
    driver.execute_async_script(ALL_TABS_DRAWN)
    driver.execute_script("profview.show('timeline')")
    return driver


def events_of(run: Path) -> pd.DataFrame:
    from profiler.export.event_file import read_event_file

    f = read_event_file(run / "events_0.arrow")
    frame = pd.DataFrame({c: f.column(c) for c in ("ph", "lane", "start_ns", "dur_ns", "name", "category", "step")})
    frame["name"] = [f.names[i] for i in frame["name"]]
    frame["category"] = [f.categories[i] for i in frame["category"]]
    return frame


OP_CATEGORIES = ("host", "compute", "user", "comm", "runtime")


def test_ops_were_sampled(sampled_run):
    ev = events_of(sampled_run)
    op_steps = sorted(set(ev.loc[ev["category"].isin(OP_CATEGORIES), "step"]))
    assert 1 <= len(op_steps) <= 4 and min(op_steps) >= 9, op_steps


def test_default_window_holds_ops(timeline_page, sampled_run):
    d = timeline_page
    label = d.execute_script("return document.querySelector('#page-timeline select option').textContent")
    assert label.startswith("median captured step"), label
    step = int(re.search(r"step (\d+)", label).group(1))
    ev = events_of(sampled_run)
    ops = ev[ev["category"].isin(OP_CATEGORIES) & (ev["step"] == step)]
    assert len(ops) > 20
    drawn = d.execute_script("""
        const div = document.querySelector('#page-timeline .window.active div.plot');
        return div.data.filter(t => t.type === 'bar' && t.customdata && t.customdata.length)
                       .map(t => [t.name, t.customdata.length]);""")
    per_trace = dict(drawn)
    assert per_trace.get("host", 0) >= len(ops), per_trace
    options = d.execute_script(
        "return Array.from(document.querySelectorAll('#page-timeline select option')).map(o => o.textContent)"
    )
    assert any(o.startswith("captured window: steps") for o in options), options
    screenshot(d, "timeline-default-window")


def test_hover_shows_the_duration_of_the_bar(timeline_page, sampled_run):
    """Hover a known bar (the longest op of the window) with the mouse: the tooltip's duration and start
    are the event file's, not the bar's end."""
    from selenium.webdriver.common.action_chains import ActionChains

    d = timeline_page
    label = d.execute_script("return document.querySelector('#page-timeline select option').textContent")
    step = int(re.search(r"step (\d+)", label).group(1))
    ev = events_of(sampled_run)
    ops = ev[ev["category"].isin(OP_CATEGORIES) & (ev["step"] == step)]
    target = ops.loc[ops["dur_ns"].idxmax()]
    found = d.execute_script(
        """
        const div = document.querySelector('#page-timeline .window.active div.plot');
        const name = arguments[0], start = arguments[1];
        for (let c = 0; c < div.data.length; c++) {
          const t = div.data[c];
          if (t.type !== 'bar' || !t.customdata) continue;
          for (let p = 0; p < t.customdata.length; p++) {
            if (t.customdata[p][0] === name && Math.abs(t.customdata[p][1] - start) < 1e-6) return [c, p];
          }
        }
        return null;""",
        target["name"],
        target["start_ns"] / 1e6,
    )
    assert found, f"{target['name']} not drawn"
    bar = d.execute_script(
        """
        const div = document.querySelector('#page-timeline .window.active div.plot');
        const traces = div.querySelectorAll('.barlayer .trace');
        return traces[arguments[0]].querySelectorAll('.point')[arguments[1]];""",
        *found,
    )
    ActionChains(d).move_to_element(bar).perform()
    deadline = time.monotonic() + 10
    text = ""
    while "duration" not in text and time.monotonic() < deadline:
        time.sleep(0.1)
        text = d.execute_script(
            "return Array.from(document.querySelectorAll('#page-timeline .hoverlayer .hovertext'))"
            ".map(e => e.textContent).join('|')"
        )
    duration = float(re.search(r"duration: ([\d.]+) ms", text).group(1))
    start = float(re.search(r"start: ([\d.]+) ms", text).group(1))
    assert duration == pytest.approx(target["dur_ns"] / 1e6, abs=0.0006), text
    assert start == pytest.approx(target["start_ns"] / 1e6, abs=0.0006), text
    assert f"step: {step}" in text and "self time:" in text and target["name"] in text
    end = (target["start_ns"] + target["dur_ns"]) / 1e6
    assert abs(duration - end) > 1.0, "the tooltip must not show the bar's end"
    screenshot(d, "timeline-hover")


def test_phase_row_matches_the_step_trace(timeline_page, sampled_run):
    """The phase row's bars: the step trace's phases, in the Overview's colours."""
    from viewer.theme import COLUMN_COLORS

    d = timeline_page
    csv = pd.read_csv(sampled_run / "step_trace_0.csv")
    traces = d.execute_script("""
        const div = document.querySelector('#page-timeline div.plot[data-lod]');
        const bars = div.querySelectorAll('.barlayer .trace');
        let k = -1;
        return div._fullData.map((t, i) => {
          if (t.type === 'bar') k += 1;
          if (t.type !== 'bar') return null;
          const point = bars[k] && bars[k].querySelector('.point path');
          return {name: t.name, x: Array.from(t.x), base: Array.from(t.base),
                  fill: point ? getComputedStyle(point).fill : null};
        }).filter(t => t);""")
    by_name = {t["name"]: t for t in traces}
    for column, label in (
        ("iteration_gap_ms", "iteration gap"),
        ("fp_bp_ms", "forward + backward"),
        ("tail_ms", "tail"),
    ):
        t = by_name[label]
        assert np.allclose(t["x"], csv[column], atol=1e-6), label
        hexa = COLUMN_COLORS[column].lstrip("#")
        assert t["fill"] == "rgb({}, {}, {})".format(*(int(hexa[i : i + 2], 16) for i in (0, 2, 4))), label
    assert np.allclose(by_name["iteration gap"]["base"], csv["start_ms"], atol=1e-6)
    names = d.execute_script(
        "return Array.from(document.querySelectorAll('#page-timeline .legendtext')).map(e => e.textContent)"
    )
    assert not [n for n in names if re.fullmatch(r"trace \d+", n)], names


def test_steps_stay_on_one_row(timeline_page):
    d = timeline_page
    rows = d.execute_script(
        "return Array.from(document.querySelectorAll('#page-timeline .ytick text')).map(e => e.textContent)"
    )
    assert "steps" in rows and not any(r.startswith("steps ›") for r in rows)


def test_zooming_swaps_in_a_finer_level(timeline_page):
    d = timeline_page
    level = d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const div = document.querySelector('#page-timeline div.plot[data-lod]');
        const lod = JSON.parse(document.getElementById(div.dataset.lod).textContent);
        const mid = (lod.t0 + lod.t1) / 2, half = (lod.t1 - lod.t0) / 40;
        Plotly.relayout(div, {'xaxis.range': [mid - half, mid + half]});
        (function poll() { if (div.dataset.level) done([Number(div.dataset.level), lod.levels.length,
           document.getElementById(lod.note).textContent]); else setTimeout(poll, 20); })();""")
    assert level[0] == min(5, level[1] - 1) and "aggregate" in level[2]
    assert console_errors(d) == []


def test_trace_loads_in_speedscope_without_warnings(sampled_run, tmp_path):
    """speedscope warns when an end does not match the open frame (overlapping spans after float
    arithmetic, e.g. consecutive steps): none here."""

    require_chromium()
    site = tmp_path / "site"
    shutil.copytree(speedscope_release(), site)
    shutil.copy(sampled_run / "timeline_0.json", site / "timeline_0.json")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    d = new_driver()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        d.get(base + "index.html#profileURL=" + urllib.parse.quote(base + "timeline_0.json", safe=""))
        deadline = time.monotonic() + 60
        while "MainThread" not in d.execute_script("return document.body.innerText"):
            assert time.monotonic() < deadline, "speedscope did not show the trace"
            time.sleep(0.2)
        logs = [e["message"] for e in d.get_log("browser")]
        bad = [m for m in logs if "Tried to end" in m or "still open" in m or "stack was empty" in m]
        assert bad == [], bad[:3]
    finally:
        close_driver(d)
        server.shutdown()

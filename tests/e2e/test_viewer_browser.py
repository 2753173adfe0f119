"""The HTML report in a real browser, built from a real profiled loop (two ranks) and from a
synthetic directory with every optional file (queues, counters, findings)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from support.viewer_browser import ALL_TABS_DRAWN, close_driver, console_errors, new_driver, screenshot
from support.viewer_fixtures import XSS, Spec, profile_loop, write_run

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("real") / "profiler_data"
    for rank in (0, 1):
        profile_loop(directory, rank)
    return directory


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("synthetic") / "run", Spec(steps=60, ops_per_step=40, ranks=2))


def build(directory: Path, out: Path, *extra: str) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "viewer.cli", str(directory), "-o", str(out), *extra],
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


def open_report(driver, path: Path) -> dict:
    driver.get(path.as_uri())
    return driver.execute_async_script(ALL_TABS_DRAWN)


@pytest.mark.parametrize("which", ["real_run", "synthetic_run"])
def test_every_tab_renders(which, request, driver, tmp_path):
    directory = request.getfixturevalue(which)
    report = build(directory, tmp_path / "report.html")
    counts = open_report(driver, report)
    assert set(counts) == {"overview", "operators", "pipeline", "timeline", "counters", "cluster"}
    for tab, (plots, drawn) in counts.items():
        assert plots == drawn, f"{tab}: {drawn} of {plots} plots drawn"
    for tab in ("overview", "operators", "timeline", "cluster", "counters"):
        assert counts[tab][0] >= 1, f"{tab} has no plot"
    assert counts["pipeline"][0] >= 2, "queue ratios and occupancy"
    assert console_errors(driver) == []
    for tab in counts:
        driver.execute_script("profview.show(arguments[0])", tab)
        screenshot(driver, f"report-{which}-{tab}")
    html = report.read_text()
    assert html.count("Plotly=") <= 2 and len(re.findall(r"plotly\.js v\d", html)) == 1, "plotly.js inlined once"
    assert "<script src=" not in html and "<link " not in html, "nothing loaded from outside the file"


def test_xss_op_name_is_text(real_run, driver, tmp_path):
    report = build(real_run, tmp_path / "report.html")
    open_report(driver, report)
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        _ = driver.switch_to.alert.text
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0
    driver.execute_script("profview.show('operators')")
    cells = driver.execute_script(
        "return Array.from(document.querySelectorAll('#page-operators td')).map(td => td.textContent)"
    )
    assert XSS in cells
    labels = driver.execute_script(
        "return Array.from(document.querySelectorAll('#page-operators svg text')).map(t => t.textContent)"
    )
    assert XSS in labels
    assert console_errors(driver) == []


def test_op_table_filters_and_sorts(synthetic_run, driver, tmp_path):
    report = build(synthetic_run, tmp_path / "report.html")
    driver.get(report.as_uri())
    driver.execute_script("profview.show('operators')")
    rows = "return document.querySelectorAll('#page-operators div.sortable tbody tr').length"
    before = driver.execute_script(rows)
    box = driver.find_element("css selector", "#page-operators div.sortable input")
    box.send_keys("MatMul")
    after = driver.execute_script(rows)
    assert 0 < after < before
    names = driver.execute_script(
        "return Array.from(document.querySelectorAll('#page-operators div.sortable tbody tr td:nth-child(2)'))"
        ".map(td => td.textContent)"
    )
    assert all("MatMul" in n for n in names)
    header = driver.find_elements("css selector", "#page-operators div.sortable th")[4]  # count
    header.click()
    header.click()
    counts = driver.execute_script(
        "return Array.from(document.querySelectorAll('#page-operators div.sortable tbody tr td:nth-child(5)'))"
        ".map(td => Number(td.textContent.replace(/,/g, '')))"
    )
    assert counts == sorted(counts)


def test_steps_option_sets_the_detail_window(synthetic_run, driver, tmp_path):
    report = build(synthetic_run, tmp_path / "report.html", "--steps", "10:12", "--rank", "1")
    open_report(driver, report)
    text = driver.execute_script("return document.querySelector('#page-timeline select').textContent")
    assert "steps 10–12" in text
    assert "rank 1 of 2" in driver.execute_script("return document.querySelector('header').textContent")


def test_serve_mode_answers_on_loopback(synthetic_run):
    proc = subprocess.Popen(
        [sys.executable, "-m", "viewer.cli", str(synthetic_run), "--no-browser"],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=REPO,
    )
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "serving" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.status == 200
            assert b"profview" in response.read(4096)
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "etc/passwd", timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

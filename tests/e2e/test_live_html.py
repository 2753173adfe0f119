"""`profview DIR --live`: the report of a recording in progress, refreshed from the growing raw store."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from viewer.live_report import LiveReport
from viewer.page import Live
from viewer.report import PAGES
from viewer.server import ReportServer

from support.cli import REPO, profview_command, python_env
from support.live_helpers import start_recorder, wait_for

pytestmark = pytest.mark.timing

EVIL = "<img src=x onerror=alert(1)>"


class LiveServer:
    """The live report's updater and its server in threads of this process (port 0: a free one)."""

    def __init__(self, directory: Path, interval_s: float = 0.5) -> None:
        self.live = LiveReport(directory, interval_s=interval_s).start()
        self.server = ReportServer(self.live.routes()).start()
        self.url = self.server.url

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read()

    def json(self, have: int | None = None) -> dict:
        return json.loads(self.get("live.json" + (f"?have={have}" if have is not None else "")))

    def stop(self) -> None:
        self.server.close()
        self.live.stop()


@pytest.fixture
def live_server():
    servers = []
    yield lambda directory: servers.append(LiveServer(directory)) or servers[-1]
    for server in servers:
        server.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith(("profview-live", "profview-server"))]


@pytest.fixture
def growing(tmp_path):
    """A recording process running for a while (its op type is an HTML injection attempt)."""
    out = tmp_path / "run"
    proc = start_recorder(out, steps=4000, data_s=0.004, op_type=EVIL, analyse=False)
    assert wait_for(lambda: any((out / "raw").glob("*.pvraw")) if (out / "raw").is_dir() else False, 60)
    yield out, proc
    proc.kill()
    proc.wait()


def test_the_live_json_step_count_grows_with_the_recording(growing, live_server):
    out, proc = growing
    server = live_server(out)
    assert server.url.startswith("http://127.0.0.1:")
    assert wait_for(lambda: server.json()["steps"] > 0, 60, every=0.2)
    first = server.json()
    assert wait_for(lambda: server.json()["steps"] > first["steps"] + 20, 60, every=0.2)
    second = server.json()
    assert proc.poll() is None and not second["ended"]
    assert second["steps"] > first["steps"] and second["version"] >= first["version"]
    # the pages come with the status only when the asker's version is older
    assert "pages" in server.json(have=0)
    current = server.json()
    assert set(current["pages"]) == {"overview", "pipeline"} and current["figures"]
    assert {p.key for p in PAGES if p.live is Live.REFRESHED} == {"overview", "pipeline"}
    assert "pages" not in server.json(have=current["version"])
    overview = current["pages"]["overview"]
    assert "input_bound" in overview and "Verdict and findings" in overview
    assert EVIL not in overview and "&lt;img src=x onerror=alert(1)&gt;" in overview  # escaped
    assert EVIL not in json.dumps(current["figures"])
    page = server.get("").decode()
    assert 'id="pv-live"' in page and EVIL not in page
    # the pages with a live mode, from the window in memory: the operators page has the window's ops
    assert re.findall(r'<button data-page="(\w+)">', page) == ["overview", "operators", "pipeline", "counters"]
    assert "MatMul_3" in page and "No op detail table" not in page and "rss (GiB)" in page
    assert "steps so far" in current["status"] and current["window"][1] < current["steps"]


def test_the_live_page_updates_in_a_browser(growing, live_server):
    from support.viewer_browser import close_driver, console_errors, new_driver, screenshot

    out, _ = growing
    server = live_server(out)
    assert wait_for(lambda: server.json()["steps"] > 0, 60, every=0.2)
    driver = new_driver()
    try:
        driver.get(server.url)
        banner = driver.find_element("id", "pv-live")
        first_steps = int(banner.get_attribute("data-version") and banner.get_attribute("data-steps") or 0)
        first_version = int(banner.get_attribute("data-version"))
        assert wait_for(lambda: int(banner.get_attribute("data-version")) > first_version, 60, every=0.2)
        assert wait_for(lambda: int(banner.get_attribute("data-steps") or 0) > first_steps, 30, every=0.2)
        overview = driver.find_element("id", "page-overview")
        assert "input_bound" in overview.text
        assert wait_for(
            lambda: driver.execute_script(
                "return Array.from(document.querySelectorAll('#page-overview div.plot'))"
                ".filter(d => d.offsetParent !== null).every(d => d.dataset.done && d.querySelector('svg.main-svg'))"
            ),
            30,
            every=0.2,
        )
        driver.find_element("css selector", "nav button[data-page=pipeline]").click()
        assert wait_for(
            lambda: driver.execute_script(
                "const p = Array.from(document.querySelectorAll('#page-pipeline div.plot'))"
                ".filter(d => d.offsetParent !== null); return p.length > 0 && p.every(d => d.dataset.done)"
            ),
            30,
            every=0.2,
        )
        assert "host_queue" in driver.find_element("id", "page-pipeline").text
        assert driver.execute_script("return document.querySelectorAll('img[src=x]').length") == 0
        screenshot(driver, "live_overview")
        assert console_errors(driver) == []
    finally:
        close_driver(driver)


@pytest.mark.parametrize("case", ["no_raw", "with_output"])
def test_live_bad_input_is_one_sentence(tmp_path, case):
    target = tmp_path / "x"
    target.mkdir()
    args = ["--live", "--no-browser"] + (["-o", str(tmp_path / "r.html")] if case == "with_output" else [])
    if case == "with_output":
        (target / "raw").mkdir()
    result = subprocess.run(
        profview_command(str(target), *args), cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profview: error: ")

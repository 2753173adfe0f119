"""The exported Chrome trace (timeline_{rank}.json) opens in speedscope's offline build.

speedscope is installed from the npm registry at test time into a cache directory
($PROFVIEW_NPM_CACHE, default ~/.cache/profview-tests), once; the test serves its release
build and our trace on 127.0.0.1 and loads it with `#profileURL=` in headless Chromium.
"""

from __future__ import annotations

import functools
import shutil
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer

import pytest

from support.speedscope import QuietHandler, speedscope_release
from support.viewer_browser import close_driver, console_errors, new_driver, require_chromium, screenshot
from support.viewer_fixtures import XSS, profile_loop

pytestmark = pytest.mark.browser


def test_timeline_opens_in_speedscope(tmp_path):
    require_chromium()
    run = profile_loop(tmp_path / "run", rank=0, world_size=1, steps=12)
    site = tmp_path / "site"
    shutil.copytree(speedscope_release(), site)
    shutil.copy(run / "timeline_0.json", site / "timeline_0.json")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = new_driver()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        driver.get(base + "index.html#profileURL=" + urllib.parse.quote(base + "timeline_0.json", safe=""))
        deadline = time.monotonic() + 60
        while "MainThread" not in driver.execute_script("return document.body.innerText"):
            assert time.monotonic() < deadline, "speedscope did not show the trace"
            time.sleep(0.2)
        logs = [e["message"] for e in driver.get_log("browser")]
        assert not [m for m in logs if "Tried to end" in m or "still open" in m], "spans overlap in speedscope"
        driver.find_element("xpath", "//*[text()='Sandwich']").click()
        deadline = time.monotonic() + 30
        text = ""
        while "forward" not in text and time.monotonic() < deadline:
            time.sleep(0.2)
            text = driver.execute_script("return document.body.innerText")
        for name in ("forward", "backward", XSS):
            assert name in text, f"{name!r} not shown by speedscope"
        assert driver.execute_script("return document.querySelectorAll('img[src=x]').length") == 0
        assert console_errors(driver) == []
        screenshot(driver, "speedscope-sandwich")
    finally:
        close_driver(driver)
        server.shutdown()

"""Headless Chromium for the viewer tests: skipped locally without Chromium, required under CI."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

#: Shows each tab in turn; calls back with {tab: [plots, drawn plots with an SVG]} once all are drawn.
ALL_TABS_DRAWN = """
const done = arguments[arguments.length - 1];
const keys = Array.from(document.querySelectorAll('nav button')).map(b => b.dataset.page);
const counts = {};
function waitTab(i) {
  if (i >= keys.length) { done(counts); return; }
  profview.show(keys[i]);
  const page = document.getElementById('page-' + keys[i]);
  (function poll() {
    const plots = Array.from(page.querySelectorAll('div.plot')).filter(d => d.offsetParent !== null);
    if (plots.every(d => d.dataset.done)) {
      counts[keys[i]] = [plots.length, plots.filter(d => d.querySelector('svg.main-svg')).length];
      waitTab(i + 1);
    } else { setTimeout(poll, 20); }
  })();
}
waitTab(0);
"""


def require_chromium() -> None:
    """Skip (locally) or fail (CI) when the browser is missing."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        reason = f"{', '.join(missing)} not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def new_driver(width: int = 1400, height: int = 1000):
    """A fresh headless Chromium (own profile directory) with browser console logging."""
    require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="profview-chromium-")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_script_timeout(120)
    driver.profile_dir = profile
    return driver


def close_driver(driver) -> None:
    driver.quit()
    shutil.rmtree(driver.profile_dir, ignore_errors=True)


def console_errors(driver) -> list[str]:
    """SEVERE browser console entries since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(driver, name: str) -> Path:
    """A full-page screenshot under test-artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(1000, height), 6000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path

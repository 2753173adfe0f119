"""Report benchmark: build time and HTML size at 1e5, 1e6 and 1e7 timeline events, and browser
load time (until every plot of every tab is drawn, in headless Chromium).

    python benchmarks/bench_report.py [--events 1e5,1e6,1e7] [--keep DIR] [--no-browser]

Targets (docs/viewer.md): 1e7 events build < 30 s, HTML < 30 MB, browser load < 5 s.
Synthetic runs are written by tests/viewer_fixtures.py (the output format of docs/formats.md).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from viewer.context import Context
from viewer.report import build_report  # noqa: E402
from viewer.inputs import load_input  # noqa: E402
from viewer_fixtures import Spec, write_run  # noqa: E402

STEPS = 200
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def synthetic_run(directory: Path, events: int) -> Path:
    """A run whose timeline holds about `events` events (2 per op plus 3 per step)."""
    if not (directory / "profiler_info_0.json").exists():
        write_run(directory, Spec(steps=STEPS, ops_per_step=max(1, (events - 3 * STEPS) // (2 * STEPS))))
    return directory


def build(directory: Path, out: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds to load the directory and build the report; bytes written.

    CPU time is printed too because on a shared machine wall time mostly measures the neighbours.
    """
    started, cpu = time.perf_counter(), time.process_time()
    html = build_report(Context(load_input(directory)))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    out.write_text(html, encoding="utf-8")
    return seconds, cpu, out.stat().st_size


def browser_load(page: Path) -> float:
    """Seconds from navigation until every plot on every tab is drawn."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    with tempfile.TemporaryDirectory() as profile:
        for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--no-first-run", "--disable-sync", "--window-size=1400,1000",
                    f"--user-data-dir={profile}"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        try:
            started = time.perf_counter()
            driver.get(page.as_uri())
            driver.execute_async_script(ALL_TABS_DRAWN)
            return time.perf_counter() - started
        finally:
            driver.quit()


#: Shows each tab in turn and calls back once all its plots are drawn (shared with the tests).
ALL_TABS_DRAWN = """
const done = arguments[arguments.length - 1];
const keys = Array.from(document.querySelectorAll('nav button')).map(b => b.dataset.page);
function waitTab(i) {
  if (i >= keys.length) { done(true); return; }
  profview.show(keys[i]);
  const page = document.getElementById('page-' + keys[i]);
  (function poll() {
    const plots = Array.from(page.querySelectorAll('div.plot')).filter(d => d.offsetParent !== null);
    if (plots.every(d => d.dataset.done)) { waitTab(i + 1); } else { setTimeout(poll, 20); }
  })();
}
waitTab(0);
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1e5,1e6,1e7", help="comma-separated event counts")
    parser.add_argument("--keep", type=Path, help="keep the synthetic runs here (re-used when present)")
    parser.add_argument("--no-browser", action="store_true", help="skip the browser load measurement")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="profview-bench-"))
    print(f"{'events':>12} {'build s':>9} {'cpu s':>7} {'HTML MB':>9} {'load s':>8}")
    for count in (int(float(x)) for x in args.events.split(",")):
        directory = synthetic_run(base / f"run-{count}", count)
        seconds, cpu, size = build(directory, base / f"report-{count}.html")
        load = "-" if args.no_browser else f"{browser_load(base / f'report-{count}.html'):.2f}"
        print(f"{count:>12,} {seconds:>9.2f} {cpu:>7.2f} {size / 1e6:>9.2f} {load:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

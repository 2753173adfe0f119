"""Re-take the tuning guide's screenshots (docs/img/*.png) from sample_runs/example_profile.

    python scripts/docs_screenshots.py        # needs /usr/bin/chromium and chromedriver (+ selenium)

Each image is one tab of a report built exactly as `profview DIR -o report.html` builds it, shown
in headless Chromium at 1400 px wide after every plot of the tab is drawn.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from viewer.cli import main  # noqa: E402

from support.viewer_browser import close_driver, new_driver  # noqa: E402

EXAMPLE = REPO / "sample_runs" / "example_profile"
IMAGES = REPO / "docs" / "img"

#: image name -> (stage directory, stage to compare with or None, tab key)
SHOTS = {
    "overview_input_bound": ("a_one_worker", None, "overview"),
    "pipeline_queue_empty": ("a_one_worker", None, "pipeline"),
    "overview_op_hotspot": ("c_float64", None, "overview"),
    "operators_cast": ("c_float64", None, "operators"),
    "compare_prefetch": ("a_one_worker", "b_prefetch", "compare"),
}

#: Shows one tab and calls back once every plot on it is drawn.
SHOW_TAB = """
const done = arguments[arguments.length - 1];
profview.show(arguments[0]);
const page = document.getElementById('page-' + arguments[0]);
(function poll() {
  const plots = Array.from(page.querySelectorAll('div.plot')).filter(d => d.offsetParent !== null);
  if (plots.every(d => d.dataset.done)) { done(plots.length); } else { setTimeout(poll, 50); }
})();
"""


def take(driver, html: Path, tab: str, image: Path) -> None:
    """Open `html`, show `tab`, and save the whole page as `image`."""
    driver.get(html.as_uri())
    driver.execute_async_script(SHOW_TAB, tab)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(max(900, height), 4000))
    driver.save_screenshot(str(image))
    driver.set_window_size(1400, 1000)


def main_() -> int:
    driver = new_driver()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, (stage, other, tab) in SHOTS.items():
                html = Path(tmp) / f"{name}.html"
                args = [str(EXAMPLE / stage), "-o", str(html)]
                if other:
                    args += ["--compare", str(EXAMPLE / other)]
                if main(args) != 0:
                    return 1
                take(driver, html, tab, IMAGES / f"{name}.png")
                print(f"docs/img/{name}.png: {stage} {tab}" + (f" (vs {other})" if other else ""))
    finally:
        close_driver(driver)
    return 0


if __name__ == "__main__":
    sys.exit(main_())

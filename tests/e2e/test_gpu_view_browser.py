"""The Overview's "Device time" (issue #21, phase 2) in headless Chromium: on the real Kineto trace
with NCCL kernels imported by `profview import`, its table holds report_0.json's "devices" figures and
its bar (compute, non-compute, idle by cause: the whole window) is drawn with those shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.device_report import expected_row, import_nccl_data, profview, section_rows

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def nccl_dir(captures: Path, tmp_path_factory) -> Path:
    """nccl_data.json.gz imported by `profview import`."""
    return import_nccl_data(captures, tmp_path_factory.mktemp("nccl") / "run")


def test_overview_shows_the_device_time_in_a_browser(nccl_dir: Path, tmp_path: Path) -> None:
    """The Overview's Device time table holds the report's figures, and its bar (compute,
    non-compute, idle by cause: the whole window) is drawn in headless Chromium."""
    from support.viewer_browser import close_driver, console_errors, new_driver

    (device,) = json.loads((nccl_dir / "report_0.json").read_text())["devices"]
    out = tmp_path / "report.html"
    assert profview(str(nccl_dir), "-o", str(out)).returncode == 0
    html = out.read_text()
    (row,) = section_rows(html, "overview", "Device time")
    expected = expected_row(device)
    assert row[0] == "cuda:0" and row[1] == "661 ms"
    assert [cell.replace(" %", "") for cell in row[2:8]] == expected[1:7] and row[8] == expected[7]

    driver = new_driver()
    try:
        driver.get(out.as_uri())
        bars = driver.execute_async_script("""
const done = arguments[arguments.length - 1];
profview.show('overview');
const heading = Array.from(document.querySelectorAll('#page-overview h2')).find(h => h.textContent === 'Device time');
const plot = heading.parentElement.querySelector('div.plot');
(function poll() {
  if (plot.dataset.done && plot.querySelector('svg.main-svg')) {
    done(plot.data.map(t => [t.name, t.x[0]]));
  } else { setTimeout(poll, 20); }
})();""")
        assert console_errors(driver) == []
    finally:
        close_driver(driver)
    shares = dict(bars)
    assert sum(shares.values()) == pytest.approx(100.0, abs=0.01)
    assert shares["compute"] == pytest.approx(device["compute_pct"], abs=1e-6)
    assert shares["idle: host work (launching too slowly)"] == pytest.approx(
        100 * device["idle_host_ms"] / device["window_ms"], abs=1e-3
    )


def test_kernels_page_shows_the_tensorboard_views_in_a_browser(nccl_dir: Path, tmp_path: Path) -> None:
    """The Kernels tab: the GPU summary table holds the report's figures, the step bars stack each step's
    activities to its length (step_activity_0.csv), and the kernel table lists every kernels_0.csv row."""
    import pandas as pd

    from support.viewer_browser import close_driver, console_errors, new_driver

    (device,) = json.loads((nccl_dir / "report_0.json").read_text())["devices"]
    steps = pd.read_csv(nccl_dir / "step_activity_0.csv")
    kernels = pd.read_csv(nccl_dir / "kernels_0.csv")
    out = tmp_path / "report.html"
    assert profview(str(nccl_dir), "-o", str(out)).returncode == 0
    (row,) = section_rows(out.read_text(), "kernels", "GPU summary")
    assert row == ["cuda:0"] + [
        f"{device[key]:.1f} %"
        for key in (
            "utilization_pct",
            "sm_efficiency_pct",
            "achieved_occupancy_pct",
            "tensor_core_pct",
            "tc_eligible_pct",
        )
    ]
    driver = new_driver()
    try:
        driver.get(out.as_uri())
        drawn = driver.execute_async_script("""
const done = arguments[arguments.length - 1];
profview.show('kernels');
const heading = Array.from(document.querySelectorAll('#page-kernels h2'))
  .find(h => h.textContent === 'Step time by activity');
const plot = heading.parentElement.querySelector('div.plot');
(function poll() {
  const rows = Array.from(document.querySelectorAll('#page-kernels h2')).find(h => h.textContent === 'Kernels')
    .parentElement.querySelectorAll('table.sortable tbody tr');
  if (plot.dataset.done && plot.querySelector('svg.main-svg') && rows.length) {
    done({bars: plot._fullData.map(t => [t.name, Array.from(t.y)]), rows: rows.length});
  } else { setTimeout(poll, 20); }
})();""")
        assert console_errors(driver) == []
    finally:
        close_driver(driver)
    stacked = [sum(values[i] for _, values in drawn["bars"]) for i in range(len(steps))]
    assert stacked == pytest.approx(steps["total_ms"].tolist(), abs=1e-6)
    assert dict(drawn["bars"])["communication"] == pytest.approx(steps["communication_ms"].tolist())
    assert drawn["rows"] == len(kernels)

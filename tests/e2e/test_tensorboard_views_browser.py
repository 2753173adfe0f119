"""The TensorBoard plugin's memory, module and distributed views in headless Chromium: on the recorded
training loop with `profile_memory=True, with_stack=True` (tests/data/recorded/views/torch_memory_modules)
the Memory tab's curve is drawn up to the run's peak, its per-step peaks are the curve's, and the tables
list every row of op_memory_0.csv and modules_0.csv; on two real NCCL ranks, the Kernels tab's
computation / communication bars add up to each step and the Cluster tab shows each rank's split."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis.memory import step_peaks

from support.device_report import profview, section_rows
from support.recorded import analysed_copy

pytestmark = pytest.mark.browser


def test_memory_and_module_views_in_a_browser(tmp_path: Path) -> None:
    from support.viewer_browser import close_driver, console_errors, new_driver

    run = analysed_copy("views", "torch_memory_modules", tmp_path / "run")
    curve = pd.read_csv(run / "memory_0.csv")
    steps = pd.read_csv(run / "step_trace_0.csv")
    op_memory = pd.read_csv(run / "op_memory_0.csv")
    modules = pd.read_csv(run / "modules_0.csv")
    out = tmp_path / "report.html"
    assert profview(str(run), "-o", str(out)).returncode == 0
    peaks = step_peaks(curve, steps["start_ms"].to_numpy(), (steps["start_ms"] + steps["total_ms"]).to_numpy())
    rows = section_rows(out.read_text(), "memory", "Peak per step")
    assert [int(r[0]) for r in rows] == [int(steps["step"].iloc[i]) for i in peaks["step_index"]]

    driver = new_driver()
    try:
        driver.get(out.as_uri())
        drawn = driver.execute_async_script("""
const done = arguments[arguments.length - 1];
profview.show('memory');
const heading = Array.from(document.querySelectorAll('#page-memory h2'))
  .find(h => h.textContent === 'Memory over time');
const plot = heading.parentElement.querySelector('div.plot');
(function poll() {
  const rows = document.querySelectorAll('#page-memory table.sortable tbody tr');
  if (plot.dataset.done && plot.querySelector('.main-svg') && rows.length) {
    profview.show('operators');
    const modules = Array.from(document.querySelectorAll('#page-operators h2'))
      .find(h => h.textContent === 'Modules').parentElement.querySelectorAll('table.sortable tbody tr');
    done({traces: plot._fullData.map(t => [t.name, Math.max(...Array.from(t.y))]),
          rows: document.querySelectorAll('#page-memory table.sortable')[0].querySelectorAll('tbody tr').length,
          modules: Array.from(modules).map(r => r.cells[0].textContent)});
  } else { setTimeout(poll, 20); }
})();""")
        assert console_errors(driver) == []
    finally:
        close_driver(driver)
    traces = dict(drawn["traces"])
    assert traces["host allocated"] == pytest.approx(curve["allocated_bytes"].max() / 2**20)
    assert drawn["rows"] == len(op_memory)
    assert sorted(drawn["modules"]) == sorted(modules["path"])


def test_distributed_views_in_a_browser(captures: Path, tmp_path: Path) -> None:
    from profiler.export.cluster import write_cluster_outputs
    from profiler.importers.kineto import read_kineto_trace

    from support.viewer_browser import close_driver, console_errors, new_driver

    runs = {}
    for rank in (0, 1):
        path = captures / "kineto" / f"sampled_rank-{rank}.json.gz"
        assert profview("import", str(path), "-o", str(tmp_path)).returncode == 0
        runs[rank] = read_kineto_trace(path)
    write_cluster_outputs(tmp_path, lambda directory, rank: runs[rank])
    split = pd.read_csv(tmp_path / "comm_split_0.csv")
    comm_ops = pd.read_csv(tmp_path / "comm_ops_0.csv")
    cluster = pd.read_csv(tmp_path / "cluster_comm_split.csv")
    out = tmp_path / "report.html"
    assert profview(str(tmp_path), "-o", str(out)).returncode == 0
    driver = new_driver()
    try:
        driver.get(out.as_uri())
        drawn = driver.execute_async_script("""
const done = arguments[arguments.length - 1];
const plotUnder = (page, title) => Array.from(document.querySelectorAll('#page-' + page + ' h2'))
  .find(h => h.textContent === title).parentElement;
profview.show('kernels');
const bars = plotUnder('kernels', 'Computation and communication').querySelector('div.plot');
(function poll() {
  const rows = plotUnder('kernels', 'Collectives').querySelectorAll('table.sortable tbody tr');
  if (bars.dataset.done && bars.querySelector('.main-svg') && rows.length) {
    profview.show('cluster');
    const ranks = plotUnder('cluster', 'Computation and communication per rank').querySelector('div.plot');
    (function wait() {
      if (ranks.dataset.done && ranks.querySelector('.main-svg')) {
        done({steps: bars._fullData.map(t => [t.name, Array.from(t.y)]), rows: rows.length,
              ranks: ranks._fullData.map(t => [t.name, Array.from(t.y)])});
      } else { setTimeout(wait, 20); }
    })();
  } else { setTimeout(poll, 20); }
})();""")
        assert console_errors(driver) == []
    finally:
        close_driver(driver)
    stacked = [sum(values[i] for _, values in drawn["steps"]) for i in range(len(split))]
    assert stacked == pytest.approx(split["total_ms"].tolist(), abs=1e-6)
    assert dict(drawn["steps"])["communication"] == pytest.approx(split["communication_ms"].tolist())
    assert drawn["rows"] == len(comm_ops)
    means = cluster.groupby("rank")["overlap_ms"].mean()
    assert dict(drawn["ranks"])["overlap"] == pytest.approx(means.tolist())

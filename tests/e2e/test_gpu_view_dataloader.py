"""The DataLoader story (issue #21, phase 2): a ResNet-like CNN trained from a real torch DataLoader
whose Dataset sleeps, traced by torch.profiler (tests/support/dataloader_story.py) and imported by
`profview import`. With 0 workers the step trace's data wait is torch's DataLoader ranges, step by
step, and the report says input_bound; with 4 it does not, and `profview compare` says faster, the
data wait gone. Real time decides it: the batches' loading against the model's step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.formats.tables import read_csv

from support.device_report import REPO, profview

pytestmark = pytest.mark.timing


DATA_RANGE = "enumerate(DataLoader)#"


def measured_data_wait(trace: Path) -> dict[int, tuple[float, float]]:
    """Per ProfilerStep#N of a torch.profiler trace, straight from its JSON: (the time inside
    torch's DataLoader ranges, the step's length), in ms."""
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e["name"].startswith("ProfilerStep#")
    }
    loads = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith(DATA_RANGE)]
    return {
        n: (sum(min(e, end) - max(s, start) for s, e in loads if s < end and e > start) / 1000, (end - start) / 1000)
        for n, (start, end) in steps.items()
    }


def share_pct(per_step: dict[int, tuple[float, float]], steps) -> float:
    return 100.0 * sum(per_step[n][0] for n in steps) / sum(per_step[n][1] for n in steps)


@pytest.fixture(scope="module")
def dataloader_runs(tmp_path_factory) -> dict[int, tuple[Path, Path]]:
    """The story's two traces (tests/support/dataloader_story.py: 0 and 4 workers), each imported with
    `profview import`: {workers: (trace, output directory)}."""
    base = tmp_path_factory.mktemp("dataloader")
    runs = {}
    for workers in (0, 4):
        trace, out = base / f"workers{workers}.json", base / f"workers{workers}"
        made = subprocess.run(
            [sys.executable, str(REPO / "tests" / "support" / "dataloader_story.py"), str(workers), str(trace)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
        )
        assert made.returncode == 0, made.stderr
        imported = profview("import", str(trace), "-o", str(out))
        assert imported.returncode == 0, imported.stderr
        runs[workers] = (trace, out)
    return runs


def test_dataloader_without_workers_is_input_bound(dataloader_runs) -> None:
    """0 workers: each step waits 400 ms for its batch inside torch's `enumerate(DataLoader)#...
    __next__` range. The step trace's data_wait_ms is that range's time, step by step, the report
    says input_bound with the share those ranges measure (over the steps after the warm-up one)."""
    trace, out = dataloader_runs[0]
    measured = measured_data_wait(trace)
    rows = read_csv(out / "step_trace_0.csv", "step_trace")
    assert sorted(rows["step"]) == sorted(measured) and len(measured) == 11
    for step, wait in zip(rows["step"], rows["data_wait_ms"]):
        assert wait == pytest.approx(measured[int(step)][0], abs=0.01)
        assert measured[int(step)][0] >= 400 * 0.99  # 8 items x 50 ms, asleep
    report = json.loads((out / "report_0.json").read_text())
    assert report["verdict"] == "input_bound"
    (finding,) = [f for f in report["findings"] if f["kind"] == "input_bound"]
    analysed = sorted(measured)[report["steps"]["warmup_skipped"] :]
    assert share_pct(measured, analysed) > 40
    assert finding["metrics"]["data_wait_share_pct"] == pytest.approx(share_pct(measured, analysed), abs=3)
    assert finding["title"].startswith("Input pipeline: the loop waits for data")


def test_dataloader_with_four_workers_is_not_and_compare_says_faster(dataloader_runs) -> None:
    """4 workers: the batches are ready when the loop asks (a few ms in the DataLoader range): no
    input_bound finding; `profview compare` of the two says the second is faster, its data wait gone."""
    trace, out = dataloader_runs[4]
    measured = measured_data_wait(trace)
    report = json.loads((out / "report_0.json").read_text())
    assert report["verdict"] != "input_bound"
    assert "input_bound" not in {f["kind"] for f in report["findings"]}
    assert share_pct(measured, sorted(measured)[1:]) < 10

    result = profview("compare", str(dataloader_runs[0][1]), str(out))
    assert result.returncode == 0, result.stderr
    verdict = re.search(
        r"^Verdict: faster\. Mean analysed step ([\d.]+) ms -> ([\d.]+) ms: -[\d.]+ ms \(-([\d.]+) %",
        result.stdout,
        re.M,
    )
    assert verdict, result.stdout
    before, after = float(verdict.group(1)), float(verdict.group(2))
    assert after < before - 300  # the 400 ms wait, less the noise
    wait_row = next(line for line in result.stdout.splitlines() if line.startswith("data wait "))
    cells = wait_row[len("data wait ") :].split()
    assert "*" in cells  # significant
    assert float(cells[0]) >= 400 * 0.99 and float(cells[1]) < 40  # BASE, NEW mean ms per step

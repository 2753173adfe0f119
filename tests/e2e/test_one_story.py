"""One story per page: every figure has one definition, and the same figure never shows two values.

Real loops are recorded and analysed; the mean / median step, the outlier count, the gap's split,
the findings' changes and the run / watch status lines are read back from every place that shows
them (report_{rank}.json, `--summary`, the HTML pages, `compare`) and must agree.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler
from viewer.cli import main

pytestmark = pytest.mark.timing

REPO = Path(__file__).resolve().parents[2]
PERIOD = 7  # every 7th step (3, 10, 17, ...) is slow: a periodic checkpoint
SLOW_S = 0.060  # ... by 60 ms on a ~12 ms step: far beyond the outlier rule's fences
WARMUP_S = 0.090  # step 0 (the warm-up the advisor leaves out) is slower still


def loop(out: Path, steps: int = 50, gap_s: float = 0.003, measured: bool = False, **thresholds: float) -> Path:
    """A plain Python loop: a `gap_s` data load (timed by profiler.iterate when `measured`, else not),
    forward and backward, a slow warm-up step 0 and a slow step every PERIOD steps."""

    def batches():
        for i in range(steps):
            time.sleep(gap_s + (WARMUP_S if i == 0 else 0.0))
            yield i

    p = Profiler(output_path=out, host_counters=False, gpu_counters=False, advisor_thresholds=thresholds)
    source = p.iterate(batches()) if measured else batches()
    for i in source:
        with p.phase("forward"):
            time.sleep(0.004)
        with p.phase("backward"):
            time.sleep(0.004 + (SLOW_S if i % PERIOD == 3 else 0.0))
        p.step()
    p.analyse(progress=False)
    return out


def summary_of(directory: Path, capsys, *args: str) -> str:
    capsys.readouterr()
    assert main([str(directory), "--summary", *args]) == 0
    return capsys.readouterr().out


def html_of(directory: Path, tmp_path: Path, *args: str) -> str:
    out = tmp_path / f"{directory.name}.html"
    assert main([str(directory), "-o", str(out), *args]) == 0
    return out.read_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return loop(tmp_path_factory.mktemp("story") / "run")


def test_one_mean_median_and_outlier_count_in_report_summary_and_pages(run, tmp_path, capsys):
    report = json.loads((run / "report_0.json").read_text())
    figures = report["steps"]
    trace = pd.read_csv(run / "step_trace_0.csv")
    slow = [int(s) for s in trace["step"] if s % PERIOD == 3]
    # the warm-up step 0 is the slowest of all, yet it is no outlier: it is left out before the rule looks
    assert int(trace["total_ms"].idxmax()) == 0 and figures["warmup_skipped"] == 1
    # every injected slow step is an outlier (a loaded machine may stretch another step past the fences)
    html = html_of(run, tmp_path)
    listed = {
        int(s)
        for s in re.findall(
            r'<tr><td class="num">(\d+)</td><td class="num">[\d.,]+ ms</td>'
            r'<td class="num">[\d.]+x</td>',
            html,
        )
    }
    count = figures["outliers"]
    assert set(slow) <= listed and 0 not in listed and len(listed) == count
    assert figures["steady"] == len(trace) - 1 - count
    steady = trace[(trace["step"] > 0) & ~trace["step"].isin(listed)]["total_ms"].to_numpy()
    assert figures["mean_ms"] == pytest.approx(steady.mean(), abs=1e-3)
    assert figures["median_ms"] == pytest.approx(np.sort(steady)[(len(steady) - 1) // 2], abs=1e-3)
    outlier_finding = next(f for f in report["findings"] if f["kind"] == "step_outliers")
    assert outlier_finding["metrics"]["outliers"] == count
    assert outlier_finding["title"].startswith(f"{count} slow steps")

    text = summary_of(run, capsys)
    mean, median = f"{figures['mean_ms']:.2f}", f"{figures['median_ms']:.2f}"
    assert f"mean steady step {mean} ms, median step {median} ms" in text  # the verdict figures
    assert f"fix this first (mean steady step {mean} ms" in text  # the verdict line
    assert set(re.findall(r"mean steady step (\d+\.\d+) ms", text)) == {mean}
    step_row = next(line for line in text.splitlines() if line.startswith("step "))
    table_mean, table_median = (float(v) for v in step_row.split()[1:3])
    assert table_mean == pytest.approx(figures["mean_ms"], abs=2e-3)
    assert table_median == pytest.approx(figures["median_ms"], abs=2e-3)
    assert f"Outlier steps ({count}):" in text and " 0 (" not in text.split("Outlier steps")[1].splitlines()[0]
    assert f"{count} outlier step(s)" in html
    assert f">{mean} ms<" in html and f">{median} ms<" in html  # the Key figures cards
    # the Timeline's median step window is the summary's median step
    labels = re.findall(r"median step: step (\d+) \((\d+\.\d) ms", html)
    assert labels and {t for _, t in labels} == {f"{figures['median_ms']:.1f}"}
    assert int(labels[0][0]) not in listed and int(labels[0][0]) != 0


def test_unmeasured_gap_reads_as_unmeasured_in_step_trace_report_and_compare(run, tmp_path, capsys):
    measured = loop(tmp_path / "measured", steps=30, measured=True)
    raw = (run / "step_trace_0.csv").read_text().splitlines()
    column = raw[0].split(",").index("gap_host_ms")
    assert {line.split(",")[column] for line in raw[1:]} == {""}  # empty: not measured
    assert pd.read_csv(measured / "step_trace_0.csv")["gap_host_ms"].notna().all()
    steps = json.loads((run / "report_0.json").read_text())["steps"]
    assert steps["data_wait_measured"] is False and "gap_host_ms" not in steps["share_pct"]

    capsys.readouterr()
    assert main(["compare", str(run), str(measured)]) == 0
    text = capsys.readouterr().out
    rows = {
        line.split("  ")[0]: line
        for line in text.splitlines()
        if line.startswith(("data wait", "other host work in the gap"))
    }
    for label in ("data wait", "other host work in the gap"):
        base, new = rows[label][len(label) :].split()[:2]
        assert base == "not"  # "not measured" in BASE
        assert "not measured" in rows[label] and float(rows[label].split("not measured")[1].split()[0]) >= 0
    html = html_of(run, tmp_path, "--compare", str(measured))
    compare_tab = html[html.index('data-page="compare"') :]
    assert re.search(r"<td[^>]*>other host work in the gap</td><td[^>]*>not measured</td>", compare_tab)
    assert re.search(r"<td[^>]*>data wait</td><td[^>]*>not measured</td>", compare_tab)


def test_a_severity_drop_is_improved_not_resolved(tmp_path, capsys):
    # severities by wide bands, so that machine load cannot move the gap finding across one:
    # BASE's gap is ~75 % of the step (high), NEW's ~20 % (medium)
    bands = {"severity_high_pct": 45.0, "severity_medium_pct": 5.0, "outlier_excess_pct": 1000.0}
    base = loop(tmp_path / "base", steps=24, gap_s=0.030, **bands)
    new = loop(tmp_path / "new", steps=24, gap_s=0.002, **bands)
    severity = {
        side: next(
            f["severity"] for f in json.loads((d / "report_0.json").read_text())["findings"] if f["kind"] == "gap_bound"
        )
        for side, d in (("base", base), ("new", new))
    }
    assert severity == {"base": "high", "new": "medium"}
    capsys.readouterr()
    out = tmp_path / "compare.json"
    assert main(["compare", str(base), str(new), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Resolved: none" in text
    assert re.search(r"Improved: \[high -> medium\] Iteration gap takes", text)
    doc = json.loads(out.read_text())["findings"]
    assert [f["kind"] for f in doc["improved"]] == ["gap_bound"] and not doc["resolved"]
    html = html_of(base, tmp_path, "--compare", str(new))
    assert re.search(r"<td[^>]*>improved</td><td[^>]*>high → medium</td><td[^>]*>Iteration gap takes", html)


def test_the_gap_advice_is_one_advice_on_the_page(run, capsys):
    text = summary_of(run, capsys)
    note = next(line for line in text.splitlines() if "data wait not measured" in line)
    fix = next(line for line in text.splitlines() if "fix: measure the data wait" in line)
    advice = note.split("(", 1)[1].rstrip(")")
    assert "profiler.iterate(loader)" in advice and fix.split("fix: ", 1)[1].startswith(advice)


def test_run_in_plain_mode_prints_one_final_status_line(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "viewer.cli",
            "run",
            "-o",
            str(out),
            str(REPO / "sample_runs" / "plain_torch_loop.py"),
            "--steps",
            "12",
            "--read-ms",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (done.stdout + done.stderr).splitlines()
    ended = [line for line in lines if line.startswith("profview-watch") and "status=ended" in line]
    assert len(ended) == 1 and "steps=12" in ended[0]


def test_multirank_summary_leads_with_the_cluster(tmp_path, capsys):
    pytest.importorskip("torch.distributed")
    from support.multirank import assert_ok, launch

    job = launch(tmp_path / "job", 2, "--steps", "6", "--delay-rank", "1", "--delay-ms", "40")
    assert_ok(job)
    summary = json.loads((job.out / "cluster_summary.json").read_text())
    straggler = summary["straggler"]
    assert straggler["rank"] == 1 and straggler["phase"] == "fp_bp_excl_comm_ms"
    text = summary_of(job.out, capsys)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Cluster: 2 ranks (0, 1)"))
    detail = lines.index("Rank 0 in detail:")
    assert first < detail < next(i for i, line in enumerate(lines) if line.startswith("Step breakdown"))
    head = "\n".join(lines[first:detail])
    assert (
        f"straggler: rank 1, busy {straggler['excess_ms']:.2f} ms per step longer than the others; the "
        f"phase it is slowest in: forward + backward without communication "
        f"(+{straggler['phase_excess_ms']['fp_bp_excl_comm_ms']:.2f} ms per step)"
    ) in head
    for rank in (0, 1):
        verdict = json.loads((job.out / f"report_{rank}.json").read_text())["verdict"]
        assert f"  rank {rank}: {verdict}" in head
    assert "Rank 1 is a straggler" in head

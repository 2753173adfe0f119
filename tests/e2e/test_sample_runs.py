"""The sample runs, run as a user runs them (a subprocess, fewer steps): their printed conclusions
tell the tuning story, the numbers they print are the ones in the files, and `profview compare`
on the before / after prefetch stages reports the gap delta, the resolved finding and the CI gate.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from viewer.cli import main

pytestmark = [pytest.mark.timing, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STAGE = re.compile(
    r"^\[(?P<name>\w+)\].*?\n\s+median step (?P<step>[\d.]+) ms — iteration gap (?P<gap>[\d.]+) ms "
    r"\((?P<gap_pct>\d+) % of step time\).*?\n\s+advisor: (?P<verdict>\w+) — (?P<top>[^\n]*)",
    re.M | re.S,
)


def run_sample(script: str, *args: str) -> str:
    """Run sample_runs/`script` like a user would; return what it printed."""
    done = subprocess.run(
        [sys.executable, str(REPO / "sample_runs" / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def stages(stdout: str) -> dict[str, dict[str, str]]:
    """The printed stage blocks, by stage name."""
    return {
        m["name"]: {**m.groupdict(), "block": stdout[m.start() :].split("\n[", 1)[0]} for m in STAGE.finditer(stdout)
    }


def verdict_steps(directory: Path) -> dict:
    """The advisor's own step figures (report_0.json "steps"), which --summary's verdict figures print."""
    return json.loads((directory / "report_0.json").read_text())["steps"]


@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> tuple[Path, dict[str, dict[str, str]], str]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("resnet")
    stdout = run_sample("resnet_cifar_torch.py", "--out", str(out), "--steps", "12")
    return out, stages(stdout), stdout


def test_resnet_tuning_story(resnet):
    out, st, stdout = resnet
    assert list(st) == ["a_one_worker", "b_prefetch", "c_float64", "d_fixed"], stdout
    a, b, c, d = (st[k] for k in st)
    # Every effect below is far from the line it is judged by (measured ranges, quiet and under load, in
    # the comments): the stages are built so (see the sample's docstring).
    # (a) one worker: the loop waits for data ~60 % of its time on a quiet machine (38-66 % with the load
    # check's two busy loops: the store's latency is calibrated once, the compute slows down with the
    # load), which the advisor rates high from 20 %: input_bound. The queue is empty at most gets (80-100 %)
    assert a["verdict"] == "input_bound" and float(a["gap_pct"]) >= 20, a["block"]
    empty = float(re.search(r"loader queue: empty at (\d+) % of gets.*data_process", a["block"])[1])
    assert empty >= 60
    # (b) four workers: the gap collapses (~4 %), the step is faster (~0.4x), input_bound is resolved
    assert float(b["gap_pct"]) < 15 and float(b["step"]) < 0.8 * float(a["step"])
    assert re.search(r"vs a_one_worker: .*faster.*findings resolved: [^;]*input_bound", b["block"])
    # (c) float64 GroupNorm, ReLU and residual sums: Cast ~15-35 % of op time (its line: 8 %) against ~2-4 %
    # in the float32 stages. The float64 norm itself is slower too (5-6 % of op time in float32, 15-16 % in
    # c, quiet or at load 4): it is float64 work, charged once with the casts to precision_waste (below)
    cast = float(re.search(r"op time: Cast (\d+) %", c["block"])[1])
    d_cast, d_norm = map(float, re.search(r"op time: Cast (\d+) %, normalisation (\d+) %", d["block"]).groups())
    assert cast > 3 * max(d_cast, 1) and d_norm < 12
    report = json.loads((out / "c_float64" / "report_0.json").read_text())
    # the float64 ops and their casts, charged together, rank first (30-65 % of the step; high from 20 %) ...
    assert report["verdict"] == report["findings"][0]["kind"] == "precision_waste"
    assert re.search(r"vs b_prefetch: .*introduced: [^;]*precision_waste", c["block"])
    # ... and once: a Cast or normalisation hotspot, if any, reports only op time precision_waste does not hold
    for f in report["findings"]:
        if f["key"].startswith(("op_hotspot:cast", "op_hotspot:norm")):
            assert "left out" in f["evidence"], f
    # (d) fixed: the float64 detour is resolved. (Step times of c and d are not compared here: on a machine
    # shared with other jobs their difference drowns in the load.)
    fixed = json.loads((out / "d_fixed" / "report_0.json").read_text())
    assert not [f for f in fixed["findings"] if f["kind"] == "precision_waste"]
    assert not [f for f in fixed["findings"] if f["kind"] == "op_hotspot" and f["title"].startswith("Cast")]
    assert re.search(r"vs c_float64: .*findings resolved: [^;]*precision_waste", d["block"])
    # the demo's first stage captures ops with record_shapes on every step: the report says what that cost
    # in host memory (torch.profiler holds a window's events until its export), next to its time
    cost = json.loads((out / "a_one_worker" / "report_0.json").read_text())["profiler_cost"]
    assert cost["memory_mb"]["torch_per_captured_step"] > 1 and cost["memory_mb"]["torch_held_max"] > 10, cost
    # the printed numbers are the advisor's (one figure, one value: the sample, --summary and the report agree)
    for name in st:
        figures = verdict_steps(out / name)
        assert float(st[name]["gap_pct"]) == pytest.approx(figures["share_pct"]["iteration_gap_ms"], abs=0.51)
        assert float(st[name]["step"]) == pytest.approx(figures["median_ms"], abs=0.051)


def test_compare_before_after_prefetch(resnet, tmp_path, capsys):
    out, _, _ = resnet
    a, b = out / "a_one_worker", out / "b_prefetch"
    verdict_file = tmp_path / "compare.json"
    assert (
        main(
            [
                "compare",
                str(a),
                str(b),
                "--json",
                str(verdict_file),
                "--fail-if-slower",
                "5%",
                "-o",
                str(tmp_path / "compare.html"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    doc = json.loads(verdict_file.read_text())
    phases = {p["column"]: p for p in doc["phases"]}
    base, new = (pd.read_csv(d / "step_trace_0.csv").iloc[1:] for d in (a, b))
    expected_gap = new["iteration_gap_ms"].mean() - base["iteration_gap_ms"].mean()
    assert phases["iteration_gap_ms"]["delta_ms"] == pytest.approx(expected_gap, abs=1e-3)
    assert phases["iteration_gap_ms"]["median_delta_ms"] == pytest.approx(
        new["iteration_gap_ms"].median() - base["iteration_gap_ms"].median(), abs=1e-3
    )
    assert expected_gap < -0.3 * base["total_ms"].mean()
    assert doc["verdict"]["outcome"] == "faster" and doc["verdict"]["exit_code"] == 0
    assert doc["verdict"]["delta_pct"] == pytest.approx(
        100 * (new["total_ms"].mean() / base["total_ms"].mean() - 1), abs=1e-2
    )
    assert doc["verdict"]["ci_high_pct"] < 0
    assert "input_bound" in [f["kind"] for f in doc["findings"]["resolved"]]
    assert "Resolved: [high] Input pipeline" in text and "CI gate (--fail-if-slower 5%): pass" in text
    html = (tmp_path / "compare.html").read_text()
    assert 'data-page="compare"' in html and "Findings resolved and introduced" in html
    # the other way round NEW is slower: the gate fails with exit code 1
    assert main(["compare", str(b), str(a), "--fail-if-slower", "5%", "--json", "-"]) == 1
    gate = json.loads(capsys.readouterr().out)["verdict"]
    assert gate["failed"] and gate["outcome"] == "slower" and gate["delta_pct"] > 5
    assert main(["compare", str(b), str(a)]) == 0  # no gate: slower is reported, not failed


def test_numpy_mlp_conclusion(tmp_path):
    stdout = run_sample("numpy_mlp.py", "--out", str(tmp_path), "--steps", "20")
    m = re.search(r"median step ([\d.]+) ms: iteration gap ([\d.]+) ms \((\d+) %", stdout)
    assert m, stdout
    figures = verdict_steps(tmp_path)  # the advisor's figures, as --summary prints them
    assert float(m[1]) == pytest.approx(figures["median_ms"], abs=0.051)
    assert float(m[3]) == pytest.approx(figures["share_pct"]["iteration_gap_ms"], abs=0.51)


def test_example_profile_tells_the_story(capsys):
    example = REPO / "sample_runs" / "example_profile"
    verdicts = {d.name: json.loads((d / "report_0.json").read_text())["verdict"] for d in sorted(example.iterdir())}
    assert verdicts == {"a_one_worker": "input_bound", "b_prefetch": "balanced", "c_float64": "precision_waste"}
    # c's float64 mistake: the float64 ops and their casts, charged together, lead (about half the step at
    # stake); the Cast family (~27 % of op time) is reported beside it
    findings = json.loads((example / "c_float64" / "report_0.json").read_text())["findings"]
    assert findings[0]["kind"] == "precision_waste" and findings[0]["at_stake_pct"] > 25
    cast = next(f for f in findings if f["key"] == "op_hotspot:cast:cpu")
    assert cast["metrics"]["share_pct"] > 12
    assert main(["compare", str(example / "a_one_worker"), str(example / "b_prefetch"), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"]["resolved"][0]["kind"] == "input_bound" and doc["verdict"]["outcome"] == "faster"
    assert sum(f.stat().st_size for f in example.rglob("*") if f.is_file()) < 2_000_000


def test_docs_images_exist():
    guide = (REPO / "docs" / "tuning-guide.md").read_text()
    images = re.findall(r"\]\((img/[^)]+\.png)\)", guide)
    assert len(images) >= 4
    for image in images:
        assert (REPO / "docs" / image).is_file(), image


def test_ascend_reference_device_feed_vs_sink(tmp_path, capsys):
    """Sink mode on the reference Ascend-style device: compare resolves the input finding. The loader
    decodes on the CPU (2 passes, about half a step's compute), so its share of the step does not
    depend on how busy the machine is: a sleeping loader drowns in a step that takes seconds at load 15."""
    stdout = run_sample(
        "ascend_reference_device.py", "--out", str(tmp_path), "--steps", "12", "--loader-ms", "0", "--decode", "2"
    )
    assert "sink mode hides the 0 ms + 2 decode pass(es) loader" in stdout
    feed_report = json.loads((tmp_path / "feed" / "report_0.json").read_text())
    assert "input_bound" in [f["kind"] for f in feed_report["findings"]]
    assert main(["compare", str(tmp_path / "feed"), str(tmp_path / "sink"), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "input_bound" in [f["kind"] for f in doc["findings"]["resolved"]]
    gap = {p["column"]: p for p in doc["phases"]}["iteration_gap_ms"]
    # the decode is off the step: at least half of the feed's gap leaves it, whatever the machine's speed
    assert gap["new_median_ms"] < 0.5 * gap["base_median_ms"]
    assert gap["significant"] and gap["ci_high_ms"] < -0.25 * gap["base_median_ms"]
    # The step as a whole: 11 analysed steps whose all-reduce tails swing widely on this shared machine;
    # the mean step's interval is often that wide, so "no significant change" is an honest answer too.
    # It is never slower, and "faster" comes with its interval.
    v = doc["verdict"]
    assert v["outcome"] in ("faster", "no significant change") and v["ci_low_pct"] < 0
    assert v["outcome"] != "faster" or v["ci_high_pct"] < 0
    assert set(pd.read_csv(tmp_path / "sink" / "op_type_0.csv")["device"]) >= {"npu:0"}

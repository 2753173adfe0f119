"""`profview compare`: real runs before / after a fix, real Kineto traces before / after a change.

The Kineto pair (diff_control -> diff_test, a GPU workload before and after a change) is compared
through the viewer's input dispatch, and every per-kernel delta is checked against totals
computed here straight from the raw trace JSON.
"""

from __future__ import annotations

import gzip
import json
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from profiler import Profiler
from profiler.analysis.compare import RunTables, compare_runs, phase_deltas, verdict
from viewer.cli import main
from viewer.inputs import load_input
from viewer.pages.compare import comparison


def loop(out: Path, prefetch: bool, steps: int = 30) -> Path:
    """A plain loop whose batches take 40 ms to load; with prefetch they load during the 60 ms step.
    30 steps (~3 s): enough for the mean step's interval to stay clear of 0 on a busy machine, and
    the loading far above what a loaded machine adds to each sleep (tens of ms at load 15 on 2 cores)."""

    def batches():
        for i in range(steps + 4):
            time.sleep(0.040)
            yield i

    p = Profiler(output_path=out, host_counters=False, gpu_counters=False)
    source = p.prefetch(batches(), depth=4) if prefetch else batches()
    for _i, _ in zip(range(steps), source):
        with p.phase("forward"):
            time.sleep(0.030)
        with p.phase("backward"):
            time.sleep(0.030)
        p.step()
    p.analyse(progress=False)
    return out


@pytest.fixture(scope="module")
def before_after(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("prefetch")
    return loop(root / "before", prefetch=False), loop(root / "after", prefetch=True)


def test_plain_loop_before_after_prefetch(before_after, tmp_path, capsys):
    before, after = before_after
    out = tmp_path / "verdict.json"
    assert main(["compare", str(before), str(after), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    phases = {p["column"]: p for p in doc["phases"]}
    gap_delta = phases["iteration_gap_ms"]["delta_ms"]
    assert gap_delta < -30  # ~40 ms of loading moved off the step
    # forward + backward did not change: its median moved by less than half the gap's change, even when a
    # busy machine stretches the sleeps of one run more than the other's (17 ms apart at load 15)
    assert abs(phases["fp_bp_ms"]["median_delta_ms"]) < 0.5 * -gap_delta
    # before: nothing measured the wait (gap_bound); a busy machine may add a slow-steps finding on either side
    assert "gap_bound" in [f["kind"] for f in doc["findings"]["resolved"]]
    assert not {"gap_bound", "input_bound"} & {f["kind"] for f in doc["findings"]["introduced"]}
    v = doc["verdict"]
    assert v["outcome"] == "faster" and v["delta_pct"] < -20 and v["ci_high_pct"] < 0  # ~ -40 % on a quiet machine
    stats = {r["statistic"]: r for r in doc["step_time_distribution"]}
    assert stats["mean"]["new_ms"] == v["new_mean_step_ms"] and stats["median"]["new_ms"] == v["new_median_step_ms"]
    assert stats["steps"]["base_ms"] == 29  # the warm-up step is left out
    base = pd.read_csv(before / "step_trace_0.csv").iloc[1:]
    assert v["base_mean_step_ms"] == pytest.approx(base["total_ms"].mean(), abs=1e-3)
    assert stats["wall"]["base_ms"] == pytest.approx(base["total_ms"].sum(), abs=1e-3)
    assert phases["total_ms"]["delta_ms"] == pytest.approx(v["delta_ms"], abs=1e-3)  # the tables agree with the verdict
    assert phases["total_ms"]["ci_low_ms"] == pytest.approx(v["ci_low_ms"], abs=1e-3)
    assert "Verdict: faster. Mean step" in capsys.readouterr().out
    # the gate: after -> before is slower than 5 %, exit 1; a generous limit passes
    assert main(["compare", str(after), str(before), "--fail-if-slower", "5%"]) == 1
    assert main(["compare", str(after), str(before), "--fail-if-slower", "500"]) == 0


def test_view_with_compare_tab(before_after, tmp_path, capsys):
    before, after = before_after
    report = tmp_path / "r.html"
    assert main([str(before), "--compare", str(after), "-o", str(report)]) == 0
    html = report.read_text()
    assert html.index('data-page="overview"') < html.index('data-page="compare"') < html.index('data-page="operators"')
    assert "Step phases" in html and "Data queues" in html
    assert main([str(before), "--compare", str(after), "--summary"]) == 0
    assert "profview compare — BASE" in capsys.readouterr().out
    assert main([str(before), "-o", str(tmp_path / "plain.html")]) == 0
    assert 'data-page="compare"' not in (tmp_path / "plain.html").read_text()


def test_bad_inputs(before_after, tmp_path, capsys):
    before, _ = before_after
    assert main(["compare", str(before), str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(before), str(before), "--fail-if-slower", "lots"])
    assert exc.value.code == 2


def test_verdict_and_phase_arithmetic():
    base = pd.DataFrame(
        {
            "total_ms": [10.0, 10.0, 12.0],
            "iteration_gap_ms": [4.0, 5.0, 6.0],
            "fp_bp_ms": [5.0, 4.0, 5.0],
            "tail_ms": [1.0, 1.0, 1.0],
        }
    )
    new = base.assign(total_ms=[11.0, 11.0, 11.5])
    v = verdict(base, new, fail_if_slower_pct=3)  # 3 steps: too few for an interval, the mean's change decides
    assert v["delta_pct"] == pytest.approx(100 * (33.5 / 32 - 1), abs=1e-3)  # means 10.67 -> 11.17: +4.7 %
    assert (v["outcome"], v["failed"], v["exit_code"], v["ci_low_pct"]) == ("slower", True, 1, None)
    assert "too few analysed steps" in v["reason"] and "decided by the change alone" in v["reason"]
    assert verdict(base, new, fail_if_slower_pct=10)["exit_code"] == 0
    same = verdict(base, base, fail_if_slower_pct=0)
    assert (same["outcome"], same["exit_code"]) == ("no significant change", 0)
    phases = phase_deltas(base, new).set_index("column")
    assert phases.at["total_ms", "delta_ms"] == pytest.approx(0.5)  # means 32/3 -> 33.5/3
    assert phases.at["total_ms", "median_delta_ms"] == pytest.approx(1.0)  # medians 10 -> 11
    assert phases.at["iteration_gap_ms", "base_share_pct"] == pytest.approx(100 * 15 / 32)
    ops_b = pd.DataFrame(
        {
            "device": ["cpu", "cpu"],
            "op_type": ["A", "B"],
            "count": [3, 1],
            "total_ms": [3.0, 1.0],
            "self_ms": [3.0, 1.0],
        }
    )
    ops_n = pd.DataFrame(
        {
            "device": ["cpu", "cpu"],
            "op_type": ["A", "C"],
            "count": [3, 2],
            "total_ms": [1.5, 2.0],
            "self_ms": [1.5, 2.0],
        }
    )
    c = compare_runs(
        RunTables("b", base, op_type=ops_b, warmup_steps=0), RunTables("n", new, op_type=ops_n, warmup_steps=0)
    )
    rows = c.op_types.set_index("op_type")
    assert rows.at["A", "delta_per_step_ms"] == pytest.approx(-0.5) and rows.at["A", "status"] == "both"
    assert rows.at["B", "status"] == "gone" and rows.at["C", "status"] == "new"
    assert list(c.op_types["op_type"]) == ["C", "A", "B"]  # largest per-step change first


# ----------------------------------------------------------------------------- Kineto


def kernel_totals(path: Path) -> dict[str, tuple[int, float]]:
    """(count, total ms) per kernel name, straight from the trace JSON."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    out: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            out[e["name"]][0] += 1
            out[e["name"]][1] += float(e["dur"]) / 1e3
    return {k: (n, ms) for k, (n, ms) in out.items()}


def test_kineto_diff_control_vs_test(captures, tmp_path):
    control, test = captures / "kineto" / "diff_control.json.gz", captures / "kineto" / "diff_test.json.gz"
    c = comparison(load_input(control), load_input(test))
    base, new = kernel_totals(control), kernel_totals(test)
    assert set(c.ops["device"]) == {"cpu", "cuda"}  # one GPU each (cuda:3, then cuda:1): compared by kind
    device_ops = c.ops[c.ops["device"] == "cuda"]
    kernels = device_ops.groupby("name")[["base_count", "new_count", "delta_total_ms"]].sum()
    names = set(base) | set(new)
    assert names <= set(kernels.index)
    for name in names:
        (bn, bms), (nn, nms) = base.get(name, (0, 0.0)), new.get(name, (0, 0.0))
        row = kernels.loc[name]
        assert (row["base_count"], row["new_count"]) == (bn, nn), name
        assert row["delta_total_ms"] == pytest.approx(nms - bms, abs=1e-3), name
    biggest = max(names, key=lambda n: abs(new.get(n, (0, 0.0))[1] - base.get(n, (0, 0.0))[1]))
    top_cuda = kernels.loc[sorted(names)].sort_values("delta_total_ms", key=abs, ascending=False).index[0]
    assert top_cuda == biggest
    out = tmp_path / "kineto.json"
    assert main(["compare", str(control), str(test), "--json", str(out)]) in (0, 1)
    doc = json.loads(out.read_text())
    assert doc["verdict"]["base_steps"] > 0 and doc["ops"]

"""`profview compare`: real runs before / after a fix (the report's compare tab and bad inputs; the
verdict on the time the fix saves is tests/e2e/test_compare_loops.py), real Kineto traces before /
after a change.

The Kineto pair (diff_control -> diff_test, a GPU workload before and after a change) is compared
through the viewer's input dispatch, and every per-kernel delta is checked against totals
computed here straight from the raw trace JSON.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis.compare import RunTables, compare_runs, phase_deltas, verdict
from viewer.cli import main
from viewer.inputs import load_input
from viewer.pages.compare import comparison

from support.compare_loops import before_after_prefetch


@pytest.fixture(scope="module")
def before_after(tmp_path_factory) -> tuple[Path, Path]:
    """The plain loop's runs without, then with prefetch."""
    return before_after_prefetch(tmp_path_factory.mktemp("prefetch"))


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

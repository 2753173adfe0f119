"""The advisor on real runs: each run is built to have exactly one problem, which must rank first.

Every loop below is real code profiled by a real Profiler: the problems are injected delays
(a slow loader, a slow link, a slow all-reduce) or real heavy work (float64 casts, thousands of
tiny ops, a periodic checkpoint written to disk). The report is the one analyse() writes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler, ProfviewError
from profiler.analysis.advisor import DEFAULT_THRESHOLDS, parse_threshold, resolve_thresholds
from profiler.analysis.cluster import cluster_summary
from profiler.analysis.findings import question_of
from profiler.analysis.steps import outlier_steps
from profiler.data.pipeline import device_prefetch, prefetch

RNG = np.random.default_rng(0)
A = RNG.standard_normal((64, 64)).astype(np.float32)


def compute(repeats: int) -> None:
    """Real work: `repeats` small matmuls (small enough that BLAS stays on one thread)."""
    x = A
    for _ in range(repeats):
        x = np.tanh(x @ A) * 0.1


def device_ms(ms: float) -> None:
    """A phase of about `ms` milliseconds: a little real work, then waiting as on an accelerator.

    Waiting (not spinning) keeps the phase lengths the test relies on stable on a loaded machine; the
    injected delays are tens of milliseconds or more, so that a loaded machine's hiccups (a process
    switched out for 50-200 ms now and then: slow outlier steps; every sleep waking up late, up to
    45 ms at load 17 on 2 cores) never add up to as much as the problem a test injects, and never
    outrank it.
    """
    compute(2)
    time.sleep(ms / 1e3)


def train(out: Path, steps: int, body: Callable[[Profiler, int], None], **kw) -> dict:
    """Run `body(profiler, step)` `steps` times with step() after each, analyse, return the report."""
    p = Profiler(output_path=out, host_counters=False, gpu_counters=False, **kw)
    for i in range(steps):
        body(p, i)
        p.step()
    p.analyse(progress=False)
    return json.loads((out / f"report_{p.rank}.json").read_text())


def fwd_bwd(p: Profiler, ms: float = 6.0) -> None:
    with p.phase("forward"):
        device_ms(ms / 2)
    with p.phase("backward"):
        device_ms(ms / 2)


def first(report: dict) -> dict:
    assert report["findings"], report["headline"]
    return report["findings"][0]


def assert_fields(finding: dict) -> None:
    for key in (
        "kind",
        "severity",
        "title",
        "at_stake_ms",
        "at_stake_pct",
        "evidence",
        "threshold",
        "suggestion",
        "files",
        "metrics",
    ):
        assert key in finding, key
    assert any(name in finding["evidence"] for name in finding["files"])
    assert question_of(finding["key"]) is not None, finding["key"]  # its question declares the key it carries


# ----------------------------------------------------------------------------- one problem per run


def test_input_bound_plain_loop(tmp_path):
    def body(p, i):
        with p.phase("data"):
            time.sleep(0.060)  # a slow loader, no prefetch
        fwd_bwd(p, 20.0)

    report = train(tmp_path, 16, body)
    f = first(report)
    assert_fields(f)
    assert (f["kind"], f["severity"], report["verdict"]) == ("input_bound", "high", "input_bound")
    # 60 ms of an ~80 ms step; every sleep may wake up late on a loaded machine (45 ms late at load 17)
    assert f["at_stake_pct"] >= 40 and 60 <= f["at_stake_ms"] <= 130
    assert "profiler.prefetch" in f["suggestion"]  # plain Python: the profiler's own prefetch
    assert "input_gap_pct" in f["threshold"]


def test_input_bound_from_queue_verdict(tmp_path):
    def slow_source():
        for i in range(10_000):
            time.sleep(0.200)  # 20 x the step: ahead of the step's own late wake-ups under load
            yield i

    state = {}

    def body(p, i):
        if i == 0:
            state["it"] = iter(prefetch(slow_source(), depth=4))
        next(state["it"])
        fwd_bwd(p, 10.0)

    report = train(tmp_path, 16, body)
    state["it"].close()
    f = first(report)
    assert f["kind"] == "input_bound" and f["severity"] == "high"
    assert "queue_summary_0.json" in f["files"] and "input pipeline is too slow" in f["evidence"]


def test_transmission_bound_from_queue_verdict(tmp_path):
    def slow_copy(batch):
        time.sleep(0.200)  # a slow host -> device link: 20 x the step, as above
        return batch

    state = {}

    def body(p, i):
        if i == 0:
            state["it"] = iter(device_prefetch(prefetch(range(10_000), depth=4), slow_copy, depth=2))
        next(state["it"])
        fwd_bwd(p, 10.0)

    report = train(tmp_path, 16, body)
    state["it"].close()
    f = first(report)
    assert (f["kind"], f["severity"]) == ("transmission_bound", "high")
    assert "host->device" in f["evidence"]


def test_host_work_between_steps_when_the_queues_keep_up(tmp_path):
    state = {}

    def body(p, i):
        if i == 0:
            state["it"] = iter(p.prefetch(range(10_000), depth=4))  # data is always ready
        next(state["it"])
        time.sleep(0.030)  # per-step host work (metrics, logging) before the forward
        fwd_bwd(p, 20.0)

    report = train(tmp_path, 16, body)
    state["it"].close()
    f = first(report)
    assert (f["kind"], f["severity"]) == ("host_bound", "high")
    assert f["title"].startswith("Host work between steps") and "queue_summary_0.json" in f["files"]
    assert not [x for x in report["findings"] if x["kind"] == "input_bound"]


def test_tail_bound(tmp_path):
    big = RNG.standard_normal(2_000_000).astype(np.float32)

    def body(p, i):
        fwd_bwd(p, 4.0)
        with p.phase("optimizer"):  # a slow, unfused update
            for _ in range(6):
                big[:] = big * 0.999 + 0.001

    report = train(tmp_path, 16, body)
    f = first(report)
    assert (f["kind"], f["severity"]) == ("tail_bound", "high")
    assert f["at_stake_pct"] >= 25


def test_comm_bound(tmp_path):
    def body(p, i):
        fwd_bwd(p, 25.0)
        with p.phase("all_reduce"):  # a gradient all-reduce on a slow network, after backward
            time.sleep(0.030)

    report = train(tmp_path, 16, body)
    f = first(report)
    assert (f["kind"], f["severity"]) == ("comm_bound", "high")
    assert f["metrics"]["exposed_ms"] >= 29 and f["metrics"]["overlap_ms"] == 0  # a 30 ms sleep, nothing beside it
    assert not [x for x in report["findings"] if x["kind"] == "tail_bound"]  # comm is not counted twice


def test_step_outliers_periodic_checkpoint(tmp_path):
    weights = RNG.standard_normal(12_000_000).astype(np.float32)  # 48 MB "checkpoint"

    def body(p, i):
        fwd_bwd(p, 5.0)
        if i % 5 == 4:
            with p.phase("tail"):
                with open(tmp_path / "ckpt.npy", "wb") as f:
                    np.save(f, weights)
                    f.flush()
                    os.fsync(f.fileno())
                time.sleep(0.03)  # and a slow network file system

    report = train(tmp_path, 21, body)
    f = first(report)
    assert f["kind"] == "step_outliers"
    assert f["metrics"]["outliers"] >= 4 and f["metrics"]["period_steps"] == 5, f["evidence"]
    assert all(str(s) in f["evidence"] for s in (4, 9, 14, 19))
    assert "every 5 steps" in f["title"] and "tail" in f["evidence"]
    assert not [x for x in report["findings"] if x["kind"] == "tail_bound"]  # the typical step's tail is short


def test_profiler_overhead(tmp_path):
    def body(p, i):
        op = p.op("tiny")
        with p.phase("forward"):
            for _ in range(20_000):  # spans in a tight inner loop
                with op:
                    pass

    report = train(tmp_path, 8, body)
    f = first(report)
    assert f["kind"] == "profiler_overhead" and f["severity"] in ("high", "medium")
    assert f["at_stake_pct"] >= 8


def test_balanced_run_has_no_high_finding(tmp_path):
    def body(p, i):
        fwd_bwd(p, 40.0)
        with p.phase("optimizer"):
            compute(1)

    report = train(tmp_path, 16, body)
    assert report["verdict"] == "balanced"
    assert report["headline"].startswith("no high-severity bottleneck")
    assert not [f for f in report["findings"] if f["severity"] == "high"]


# ----------------------------------------------------------------------------- torch


torch = pytest.importorskip("torch")


def torch_train(out: Path, model, steps: int, batch, **kw) -> dict:
    nn = torch.nn
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    p = Profiler(output_path=out, framework="torch", host_counters=False, gpu_counters=False, **kw)
    p.attach(model, opt)
    x, y = batch
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    p.analyse(progress=False)
    return json.loads((out / "report_0.json").read_text())


class Float64Norm(torch.nn.Module):
    """BatchNorm computed in float64 'for stability': a cast in, a cast out, a slow norm."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(channels).double()

    def forward(self, x):
        return self.bn(x.double()).float()


def test_op_hotspot_cast_and_batchnorm(tmp_path):
    torch.set_num_threads(1)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 1), Float64Norm(8), nn.ReLU(), Float64Norm(8), nn.Conv2d(8, 3, 1))
    x = torch.randn(8, 3, 64, 64)
    # BatchNorm in float64 takes ~55 % of op time, the casts ~16 %: a lower hotspot line catches both
    report = torch_train(tmp_path, model, 10, (x, torch.randn(8, 3, 64, 64)), advisor_thresholds={"op_hotspot_pct": 10})
    kinds = [(f["kind"], f["title"]) for f in report["findings"][:2]]
    assert [k for k, _ in kinds] == ["op_hotspot", "op_hotspot"], report["findings"]
    titles = " ".join(t for _, t in kinds)
    assert "Cast" in titles and "BatchNorm" in titles
    assert report["framework"] == "torch"
    cast = next(f for f in report["findings"] if f["title"].startswith("Cast"))
    assert "autocast" in cast["suggestion"] and "aten::copy_" in cast["evidence"]
    ops = pd.read_csv(tmp_path / "op_type_0.csv")  # the evidence is the op table's numbers
    norm = ops[ops["op_type"].str.contains("batch_?norm", case=False, regex=True)]["share_pct"].sum()
    bn = next(f for f in report["findings"] if f["title"].startswith("BatchNorm"))
    assert bn["metrics"]["share_pct"] == pytest.approx(norm, abs=0.01)


def test_host_bound_many_tiny_ops(tmp_path):
    torch.set_num_threads(1)
    nn = torch.nn
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(40)])
    report = torch_train(tmp_path, model, 30, (torch.randn(4, 8), torch.randn(4, 8)))
    f = first(report)
    assert f["kind"] == "host_bound" and f["severity"] == "high", report["findings"]
    assert f["metrics"]["median_op_us"] < 50 and f["metrics"]["idle_share_pct"] >= 30
    assert "torch.compile" in f["suggestion"]


# ----------------------------------------------------------------------------- multi-rank


def test_straggler_rank_from_real_rank_step_traces(tmp_path):
    """The cluster analysis emits straggler_rank in the advisor's finding shape (same fields, plus rank)."""
    infos, traces = {}, {}
    for rank, ms in ((0, 20.0), (1, 20.0), (2, 60.0)):  # 40 ms more: far above a loaded machine's late wake-ups
        out = tmp_path / f"r{rank}"
        train(out, 12, lambda p, i, ms=ms: fwd_bwd(p, ms), rank=rank, world_size=3)
        traces[rank] = pd.read_csv(out / f"step_trace_{rank}.csv")
        infos[rank] = json.loads((out / f"profiler_info_{rank}.json").read_text())
    doc, _ = cluster_summary(infos, traces)
    found = [f for f in doc["findings"] if f["kind"] == "straggler_rank"]
    assert [f["rank"] for f in found] == [2]
    assert_fields(found[0])
    assert found[0]["severity"] == "high" and 25 <= found[0]["at_stake_ms"] <= 60
    doc, _ = cluster_summary({r: infos[r] for r in (0, 1)}, {r: traces[r] for r in (0, 1)})
    assert not [f for f in doc["findings"] if f["kind"] == "straggler_rank" and f["severity"] == "high"]


# ----------------------------------------------------------------------------- thresholds


def test_thresholds_from_config_and_overrides(tmp_path):
    def body(p, i):
        with p.phase("data"):
            time.sleep(0.002)  # ~10 % of the step: far below 50, far above 5, also on a loaded machine
        fwd_bwd(p, 16.0)

    report = train(tmp_path, 12, body, advisor_thresholds={"input_gap_pct": 50})
    assert report["thresholds"]["input_gap_pct"] == 50
    assert not [f for f in report["findings"] if f["kind"] == "input_bound"]
    info = json.loads((tmp_path / "profiler_info_0.json").read_text())
    assert info["config"]["advisor_thresholds"] == {"input_gap_pct": 50}

    from viewer.cli import main

    assert main(["analyse", str(tmp_path), "--threshold", "input_gap_pct=5%"]) == 0
    report = json.loads((tmp_path / "report_0.json").read_text())
    assert report["thresholds"]["input_gap_pct"] == 5
    assert "input_bound" in [f["kind"] for f in report["findings"]]


def test_threshold_errors():
    assert parse_threshold("tail_pct=30%") == ("tail_pct", 30.0)
    assert resolve_thresholds(None, {"tail_pct": "7"})["tail_pct"] == 7.0
    assert resolve_thresholds() == DEFAULT_THRESHOLDS
    with pytest.raises(ProfviewError, match="unknown advisor threshold 'tail'"):
        resolve_thresholds({"tail": 3})
    with pytest.raises(ProfviewError, match="wants a number"):
        parse_threshold("tail_pct=lots")
    with pytest.raises(ProfviewError, match="name=value"):
        parse_threshold("tail_pct")


def test_every_threshold_is_documented_with_its_default():
    text = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    for name, value in DEFAULT_THRESHOLDS.items():
        assert f"| `{name}` | {value:g} |" in text, name


# ----------------------------------------------------------------------------- real captures


def test_real_ascend_capture(captures):
    """WideDeep on an Ascend 910 (MindInsight's JOB3): exposed all-reduce, in MindSpore's terms.

    Its HWTS log (a ring buffer) holds the tasks of 15 of the 322 steps: op figures are per
    captured step (188 tasks a step), not the 9 a step that dividing by every step would give."""
    from viewer.inputs import load_input

    run = load_input(captures / "ascend" / "JOB3")[0]
    report = run.report
    assert report["framework"] == "mindspore" and report["verdict"] == "comm_bound"
    f = report["findings"][0]
    steps = run.step_trace.iloc[1:]
    steady = steps.drop(index=outlier_steps(steps, DEFAULT_THRESHOLDS["outlier_min_pct"]).index)
    exposed = (steady["all_reduce_ms"] - steady["all_reduce_overlap_ms"]).clip(lower=0).mean()
    assert f["at_stake_ms"] == pytest.approx(exposed, abs=1e-3)
    assert f["at_stake_pct"] == pytest.approx(100 * exposed / steady["total_ms"].mean(), abs=0.01)
    assert "all_reduce_fusion_config" in f["suggestion"]
    assert report["steps"]["op_captured_steps"] == (steps["op_count"] > 0).sum() == 14  # of 15, one is warm-up
    launch = [x for x in report["findings"] if x["key"] == "host_bound:launch"]
    assert all(x["metrics"]["ops_per_step"] > 150 for x in launch)


def test_real_mindspore_cpu_capture_is_balanced(captures):
    from viewer.inputs import load_input

    report = load_input(captures / "mindspore_cpu")[0].report
    assert report["verdict"] == "balanced" and report["framework"] == "mindspore"
    low = [f for f in report["findings"] if f["kind"] == "op_hotspot"]
    assert low and low[0]["severity"] == "low" and "Conv2D" in low[0]["title"] and "amp_level" in low[0]["suggestion"]

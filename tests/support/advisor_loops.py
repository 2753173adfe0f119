"""Loops that each have exactly one problem, and what the advisor must say about each.

Every loop is real code profiled by a real Profiler: the problems are injected delays (a slow loader,
a slow link, a slow all-reduce) or real heavy work (float64 casts, many tiny ops, a periodic checkpoint
written to disk). `LOOPS[name].run(out)` runs one and analyses it; `LOOPS[name].check(report, out)`
asserts what a correct advisor says about what was recorded in `out`.

tests/e2e/test_advisor_loops.py runs every loop for real (the timed tier); scripts/record_fixtures.py
records each once into tests/data/recorded/advisor/<name>/ and tests/integration/test_recorded_advisor.py
re-analyses those recordings and applies the same checks (the deterministic tier).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from profiler import Profiler
from profiler.analysis.cluster import cluster_summary
from profiler.analysis.findings import question_of
from profiler.data.pipeline import device_prefetch, prefetch

RNG = np.random.default_rng(0)
A = RNG.standard_normal((64, 64)).astype(np.float32)

Body = Callable[[Profiler, int], None]


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


def fwd_bwd(p: Profiler, ms: float = 6.0) -> None:
    with p.phase("forward"):
        device_ms(ms / 2)
    with p.phase("backward"):
        device_ms(ms / 2)


def train(out: Path, steps: int, body: Body, **kw) -> dict:
    """Run `body(profiler, step)` `steps` times with step() after each, analyse, return the report."""
    p = Profiler(output_path=out, host_counters=False, gpu_counters=False, **kw)
    for i in range(steps):
        body(p, i)
        p.step()
    p.analyse(progress=False)
    return json.loads((out / f"report_{p.rank}.json").read_text())


def first(report: dict) -> dict:
    assert report["findings"], report["headline"]
    return report["findings"][0]


def assert_fields(finding: dict) -> None:
    """A finding has every field the report promises, names its files in its evidence, and its key's
    question is registered."""
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


@dataclass(frozen=True)
class Loop:
    """One loop with one problem: `run(out)` records and analyses it (returns the report); `check`
    asserts what the advisor must say about the recording in `out`."""

    run: Callable[[Path], dict]
    check: Callable[[dict, Path], None]
    torch: bool = False  # needs PyTorch

    @property
    def name(self) -> str:
        """The loop's name: its recording function's without `run_`."""
        return self.run.__name__.removeprefix("run_")


# ----------------------------------------------------------------------------- plain Python


def run_input_bound_plain(out: Path) -> dict:
    def body(p, i):
        with p.phase("data"):
            time.sleep(0.060)  # a slow loader, no prefetch
        fwd_bwd(p, 20.0)

    return train(out, 16, body)


def check_input_bound_plain(report: dict, out: Path) -> None:
    f = first(report)
    assert_fields(f)
    assert (f["kind"], f["severity"], report["verdict"]) == ("input_bound", "high", "input_bound")
    # 60 ms of an ~80 ms step; every sleep may wake up late on a loaded machine (45 ms late at load 17)
    assert f["at_stake_pct"] >= 40 and 60 <= f["at_stake_ms"] <= 130
    assert "profiler.prefetch" in f["suggestion"]  # plain Python: the profiler's own prefetch
    assert "input_gap_pct" in f["threshold"]


def run_input_bound_queue(out: Path) -> dict:
    def slow_source():
        for i in range(10_000):
            time.sleep(0.200)  # 20 x the step: ahead of the step's own late wake-ups under load
            yield i

    state: dict = {}

    def body(p, i):
        if i == 0:
            state["it"] = iter(prefetch(slow_source(), depth=4))
        next(state["it"])
        fwd_bwd(p, 10.0)

    report = train(out, 16, body)
    state["it"].close()
    return report


def check_input_bound_queue(report: dict, out: Path) -> None:
    f = first(report)
    assert f["kind"] == "input_bound" and f["severity"] == "high"
    assert "queue_summary_0.json" in f["files"] and "input pipeline is too slow" in f["evidence"]


def run_transmission_bound_queue(out: Path) -> dict:
    def slow_copy(batch):
        time.sleep(0.200)  # a slow host -> device link: 20 x the step, as above
        return batch

    state: dict = {}

    def body(p, i):
        if i == 0:
            state["it"] = iter(device_prefetch(prefetch(range(10_000), depth=4), slow_copy, depth=2))
        next(state["it"])
        fwd_bwd(p, 10.0)

    report = train(out, 16, body)
    state["it"].close()
    return report


def check_transmission_bound_queue(report: dict, out: Path) -> None:
    f = first(report)
    assert (f["kind"], f["severity"]) == ("transmission_bound", "high")
    assert "host->device" in f["evidence"]


def run_host_work_between_steps(out: Path) -> dict:
    state: dict = {}

    def body(p, i):
        if i == 0:
            state["it"] = iter(p.prefetch(range(10_000), depth=4))  # data is always ready
        next(state["it"])
        time.sleep(0.030)  # per-step host work (metrics, logging) before the forward
        fwd_bwd(p, 20.0)

    report = train(out, 16, body)
    state["it"].close()
    return report


def check_host_work_between_steps(report: dict, out: Path) -> None:
    f = first(report)
    assert (f["kind"], f["severity"]) == ("host_bound", "high")
    assert f["title"].startswith("Host work between steps") and "queue_summary_0.json" in f["files"]
    assert not [x for x in report["findings"] if x["kind"] == "input_bound"]


def run_tail_bound(out: Path) -> dict:
    big = RNG.standard_normal(2_000_000).astype(np.float32)

    def body(p, i):
        fwd_bwd(p, 4.0)
        with p.phase("optimizer"):  # a slow, unfused update
            for _ in range(6):
                big[:] = big * 0.999 + 0.001

    return train(out, 16, body)


def check_tail_bound(report: dict, out: Path) -> None:
    f = first(report)
    assert (f["kind"], f["severity"]) == ("tail_bound", "high")
    assert f["at_stake_pct"] >= 25


def run_comm_bound(out: Path) -> dict:
    def body(p, i):
        fwd_bwd(p, 25.0)
        with p.phase("all_reduce"):  # a gradient all-reduce on a slow network, after backward
            time.sleep(0.030)

    return train(out, 16, body)


def check_comm_bound(report: dict, out: Path) -> None:
    f = first(report)
    assert (f["kind"], f["severity"]) == ("comm_bound", "high")
    assert f["metrics"]["exposed_ms"] >= 29 and f["metrics"]["overlap_ms"] == 0  # a 30 ms sleep, nothing beside it
    assert not [x for x in report["findings"] if x["kind"] == "tail_bound"]  # comm is not counted twice


def run_step_outliers_checkpoint(out: Path) -> dict:
    weights = RNG.standard_normal(12_000_000).astype(np.float32)  # 48 MB "checkpoint"

    def body(p, i):
        fwd_bwd(p, 5.0)
        if i % 5 == 4:
            with p.phase("tail"):
                with open(out / "ckpt.npy", "wb") as f:
                    np.save(f, weights)
                    f.flush()
                    os.fsync(f.fileno())
                time.sleep(0.03)  # and a slow network file system

    out.mkdir(parents=True, exist_ok=True)
    report = train(out, 21, body)
    (out / "ckpt.npy").unlink()
    return report


def check_step_outliers_checkpoint(report: dict, out: Path) -> None:
    f = first(report)
    assert f["kind"] == "step_outliers"
    assert f["metrics"]["outliers"] >= 4 and f["metrics"]["period_steps"] == 5, f["evidence"]
    assert all(str(s) in f["evidence"] for s in (4, 9, 14, 19))
    assert "every 5 steps" in f["title"] and "tail" in f["evidence"]
    assert not [x for x in report["findings"] if x["kind"] == "tail_bound"]  # the typical step's tail is short


def run_profiler_overhead(out: Path) -> dict:
    def body(p, i):
        op = p.op("tiny")
        with p.phase("forward"):
            for _ in range(20_000):  # spans in a tight inner loop
                with op:
                    pass

    return train(out, 8, body)


def check_profiler_overhead(report: dict, out: Path) -> None:
    f = first(report)
    assert f["kind"] == "profiler_overhead" and f["severity"] in ("high", "medium")
    assert f["at_stake_pct"] >= 8


def run_balanced(out: Path) -> dict:
    def body(p, i):
        fwd_bwd(p, 40.0)
        with p.phase("optimizer"):
            compute(1)

    return train(out, 16, body)


def check_balanced(report: dict, out: Path) -> None:
    assert report["verdict"] == "balanced"
    assert report["headline"].startswith("no high-severity bottleneck")
    assert not [f for f in report["findings"] if f["severity"] == "high"]


def run_thresholds_from_config(out: Path) -> dict:
    def body(p, i):
        with p.phase("data"):
            time.sleep(0.002)  # ~10 % of the step: far below 50, far above 5, also on a loaded machine
        fwd_bwd(p, 16.0)

    return train(out, 12, body, advisor_thresholds={"input_gap_pct": 50})


def check_thresholds_from_config(report: dict, out: Path) -> None:
    assert report["thresholds"]["input_gap_pct"] == 50
    assert not [f for f in report["findings"] if f["kind"] == "input_bound"]
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["config"]["advisor_thresholds"] == {"input_gap_pct": 50}

    from viewer.cli import main

    assert main(["analyse", str(out), "--threshold", "input_gap_pct=5%"]) == 0
    report = json.loads((out / "report_0.json").read_text())
    assert report["thresholds"]["input_gap_pct"] == 5
    assert "input_bound" in [f["kind"] for f in report["findings"]]


# ----------------------------------------------------------------------------- torch


def torch_train(out: Path, model, steps: int, batch, **kw) -> dict:
    """Train `model` on one batch with SGD for `steps` steps, attached (op capture on), analyse."""
    import torch

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


def float64_norm(channels: int):
    """BatchNorm computed in float64 'for stability': a cast in, a cast out, a slow norm."""
    import torch

    class Float64Norm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(channels).double()

        def forward(self, x):
            return self.bn(x.double()).float()

    return Float64Norm()


def run_float64_batchnorm_detour(out: Path) -> dict:
    """A BatchNorm kept in float64 between float32 convolutions (a cast in, a cast out, forward and
    backward), attached with op capture but without record_shapes (issue 33)."""
    import torch

    nn = torch.nn
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = nn.Sequential(nn.Conv2d(3, 8, 1), float64_norm(8), nn.ReLU(), float64_norm(8), nn.Conv2d(8, 3, 1))
        x = torch.randn(8, 3, 64, 64)
        return torch_train(out, model, 10, (x, torch.randn(8, 3, 64, 64)))
    finally:
        torch.set_num_threads(threads)


def check_float64_batchnorm_detour(report: dict, out: Path) -> None:
    """The detour is one cause with one stake, found without input types: a high precision_waste is the
    verdict and holds the float64 BatchNorm and its casts, which no op_hotspot charges again."""
    f = first(report)
    assert_fields(f)
    assert (report["verdict"], f["kind"], f["severity"]) == ("precision_waste", "precision_waste", "high")
    assert "1.bn (BatchNorm2d)" in f["evidence"] and "3.bn (BatchNorm2d)" in f["evidence"]
    assert not [x for x in report["findings"] if x["key"].startswith(("op_hotspot:cast", "op_hotspot:norm"))]
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["config"]["record_shapes"] is False  # no input types: the modules' float64 parameters told
    # BatchNorm (~55 % of op time) and the casts (~20 %) are in it. The finding covers the steady steps (no
    # warm-up, no outlier): compare it with the median step's BatchNorm and casts, the warm-up step left out
    # (under load the warm-up step is far slower, and a mean over every step is no measure of the others)
    from profiler.postprocess.recording import load_rank

    ops = load_rank(out, 0).ops
    chosen = ops["op_type"].astype(str).str.contains("batch_?norm|copy_|_to_copy", case=False, regex=True).to_numpy()
    chosen = chosen & (ops["device"] == "cpu").to_numpy() & (ops["step"] >= 0).to_numpy()
    per_step = ops[chosen].groupby("step")["self_ns"].sum().sort_index() / 1e6
    assert len(per_step) >= 4
    assert f["metrics"]["self_ms_per_step"] >= 0.8 * per_step.iloc[1:].median()


def run_cast_hotspot_bfloat16(out: Path) -> dict:
    """Layers cast to bfloat16 and back around every block (manual casts, not autocast): dtype conversions
    that no float64 detour owns, so the Cast op_hotspot reports them."""
    import torch

    nn = torch.nn

    class Bf16Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(32, 32)

        def forward(self, x):
            return self.linear(x.bfloat16().float())  # a round trip through bfloat16 for nothing

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = nn.Sequential(*[Bf16Block() for _ in range(6)])
        return torch_train(out, model, 12, (torch.randn(8192, 32), torch.randn(8192, 32)))
    finally:
        torch.set_num_threads(threads)


def check_cast_hotspot_bfloat16(report: dict, out: Path) -> None:
    cast = [f for f in report["findings"] if f["key"] == "op_hotspot:cast:cpu"]
    assert cast and cast[0]["severity"] in ("high", "medium"), report["findings"]
    assert "charged to float64" not in cast[0]["evidence"]  # nothing of it is a float64 detour's
    assert not [f for f in report["findings"] if f["kind"] == "precision_waste"]
    ops = pd.read_csv(out / "op_type_0.csv")
    casts = ops[ops["op_type"].isin(["aten::to", "aten::_to_copy", "aten::copy_"])]["share_pct"].sum()
    assert cast[0]["metrics"]["share_pct"] >= casts - 1e-6


def run_host_bound_many_tiny_ops(out: Path) -> dict:
    import torch

    nn = torch.nn
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # each layer wrapped in containers, as real models nest their modules: module calls that run no op
        # (framework overhead), so that load cannot bring the idle share near the line (45 % -> 38 % bare)
        model = nn.Sequential(
            *[nn.Sequential(nn.Sequential(nn.Linear(8, 8)), nn.Sequential(nn.Tanh())) for _ in range(40)]
        )
        # 60 steps, not 30: the first few steps after warm-up run slower on a loaded machine, and over 30
        # steps of ~5 ms that step_outliers stake (up to 28 %) outranked the launch-bound one (~27 %)
        return torch_train(out, model, 60, (torch.randn(4, 8), torch.randn(4, 8)))
    finally:
        torch.set_num_threads(threads)


def check_host_bound_many_tiny_ops(report: dict, out: Path) -> None:
    f = first(report)
    assert f["kind"] == "host_bound" and f["severity"] == "high", report["findings"]
    assert f["metrics"]["median_op_us"] < 50 and f["metrics"]["idle_share_pct"] >= 30
    assert "torch.compile" in f["suggestion"]


#: Every loop, by name: how it is recorded and what the advisor must say about it.
LOOPS: dict[str, Loop] = {
    loop.name: loop
    for loop in (
        Loop(run_input_bound_plain, check_input_bound_plain),
        Loop(run_input_bound_queue, check_input_bound_queue),
        Loop(run_transmission_bound_queue, check_transmission_bound_queue),
        Loop(run_host_work_between_steps, check_host_work_between_steps),
        Loop(run_tail_bound, check_tail_bound),
        Loop(run_comm_bound, check_comm_bound),
        Loop(run_step_outliers_checkpoint, check_step_outliers_checkpoint),
        Loop(run_profiler_overhead, check_profiler_overhead),
        Loop(run_balanced, check_balanced),
        Loop(run_thresholds_from_config, check_thresholds_from_config),
        Loop(run_float64_batchnorm_detour, check_float64_batchnorm_detour, torch=True),
        Loop(run_cast_hotspot_bfloat16, check_cast_hotspot_bfloat16, torch=True),
        Loop(run_host_bound_many_tiny_ops, check_host_bound_many_tiny_ops, torch=True),
    )
}


# ----------------------------------------------------------------------------- multi-rank

#: The straggler job: (rank, ms of forward + backward); rank 2 takes 40 ms more, far above a loaded
#: machine's late wake-ups.
STRAGGLER_RANKS = ((0, 20.0), (1, 20.0), (2, 60.0))


def run_straggler_ranks(out: Path) -> None:
    """Three ranks recorded one after another into out/r<rank> (each its own directory, as the
    cluster analysis reads them from the ranks' step traces)."""
    for rank, ms in STRAGGLER_RANKS:
        train(out / f"r{rank}", 12, lambda p, i, ms=ms: fwd_bwd(p, ms), rank=rank, world_size=len(STRAGGLER_RANKS))


def check_straggler(out: Path) -> None:
    """The cluster analysis of the straggler job's ranks names rank 2 in the advisor's finding shape (same
    fields, plus rank), with its excess bounded by what was injected; ranks 0 and 1 alone have none."""
    doc, _ = cluster_summary(*rank_files(out))
    found = [f for f in doc["findings"] if f["kind"] == "straggler_rank"]
    assert [f["rank"] for f in found] == [2]
    assert_fields(found[0])
    assert found[0]["severity"] == "high" and 25 <= found[0]["at_stake_ms"] <= 60
    doc, _ = cluster_summary(*rank_files(out, ranks=(0, 1)))
    assert not [f for f in doc["findings"] if f["kind"] == "straggler_rank" and f["severity"] == "high"]


def rank_files(out: Path, ranks: Optional[tuple[int, ...]] = None) -> tuple[dict, dict]:
    """(profiler_info by rank, step trace by rank) of the straggler job recorded in `out`."""
    infos, traces = {}, {}
    for rank, _ in STRAGGLER_RANKS:
        if ranks is None or rank in ranks:
            traces[rank] = pd.read_csv(out / f"r{rank}" / f"step_trace_{rank}.csv")
            infos[rank] = json.loads((out / f"r{rank}" / f"profiler_info_{rank}.json").read_text())
    return infos, traces

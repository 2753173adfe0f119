"""Step inference (profiler/analysis/steps.py): runs whose data marks no step get their steps from the
period of their launch sequence; only a run that repeats nothing is one step (whole_run).

Real captures (the MindSpore 2.x CPU capture, Kineto traces with their ProfilerStep#N annotations
taken out), real profview recordings of loops that never call step() (ground truth from the loop's
own clock), and synthetic sequences for the properties (noise, a capture that begins inside an
iteration, periods inside the iteration, a name logged every few steps, speed).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import Profiler
from profiler.analysis.results import analyse_run
from profiler.analysis.steps import (
    INFERRED,
    MARKED,
    WHOLE_RUN,
    Lane,
    boundary_name,
    ensure_steps,
    find_period,
    iteration_starts,
    names_role,
    work_reach,
)
from profiler.errors import ProfilerUsageWarning
from profiler.importers.kineto import read_kineto_trace
from profiler.importers.mindspore import read_mindspore_dir
from viewer.stats import key_figures

ITERATIONS = 15


# ----------------------------------------------------------------------------- helpers


def _outputs(out: Path) -> tuple[pd.DataFrame, dict, dict]:
    """step_trace, profiler_info and report of rank 0."""
    return (
        pd.read_csv(out / "step_trace_0.csv"),
        json.loads((out / "profiler_info_0.json").read_text()),
        json.loads((out / "report_0.json").read_text()),
    )


def _ms(perf_ns: np.ndarray, info: dict) -> np.ndarray:
    """perf_counter_ns readings of the loop on the outputs' time axis (ms since the run's origin)."""
    return (np.asarray(perf_ns, dtype=np.int64) - int(info["clock"]["origin_monotonic_ns"])) / 1e6


def _analyse(p: Profiler) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p.analyse(progress=False, quiet=True)
    return [str(w.message) for w in caught if issubclass(w.category, ProfilerUsageWarning)]


def _numpy_loop(
    out: Path, start_inside: bool = False, stop_inside: bool = False
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A loop of four numpy ops per iteration recorded with profiler.op, 5 ms of unrecorded data loading
    before each iteration, a setup op before the loop and an eval op after it, step() never called.
    `start_inside`: the Profiler starts inside iteration 0, after its first op; `stop_inside`: the
    recording is analysed inside the last iteration, after its first op (no eval op).

    Returns per iteration the loop's clock just before its first recorded op and just after its last.
    """
    a = np.random.default_rng(0).random((64, 64))
    p = None
    if not start_inside:
        p = Profiler(out, host_counters=False, gpu_counters=False)
        with p.op("setup"):
            time.sleep(0.002)
    first, last = [], []
    for i in range(ITERATIONS):
        time.sleep(0.005)  # data loading, not recorded
        first.append(time.perf_counter_ns())
        if p is None:
            b = a @ a
            p = Profiler(out, host_counters=False, gpu_counters=False)
        else:
            with p.op("matmul", op_type="MatMul"):
                b = a @ a
        if stop_inside and i == ITERATIONS - 1:
            last.append(time.perf_counter_ns())
            return np.array(first), np.array(last), _analyse(p)
        with p.op("relu", op_type="Relu"):
            b = np.maximum(b, 0)
        with p.op("matmul_grad", op_type="MatMul"):
            c = b @ a.T
        with p.op("sgd", op_type="Update"):
            a -= 1e-6 * c
        last.append(time.perf_counter_ns())
    with p.op("eval"):
        time.sleep(0.002)
    return np.array(first), np.array(last), _analyse(p)


def _lane(codes: np.ndarray, start: np.ndarray, dur: np.ndarray) -> Lane:
    names = np.array([f"op{i}" for i in range(int(codes.max()) + 1)], dtype=object)
    is_op = np.ones(len(names), dtype=bool)
    return Lane("synthetic", "device", codes, names, is_op, ~is_op, names_role(names, is_op), start, start + dur)


def _iterations(unit: np.ndarray, n: int, gap_ns: int = 2_000_000, seed: int = 0):
    """n repetitions of `unit` (names), 5-20 us launches, `gap_ns` idle before each repetition."""
    rng = np.random.default_rng(seed)
    codes = np.tile(unit, n).astype(np.int64)
    first = np.tile(np.arange(len(unit)) == 0, n)
    dur = rng.integers(5_000, 20_000, len(codes))
    start = np.cumsum(np.where(first, gap_ns, rng.integers(0, 2_000, len(codes))) + np.concatenate([[0], dur[:-1]]))
    return codes, start.astype(np.int64), dur.astype(np.int64)


def _cuts(codes, start, dur):
    lane = _lane(codes, start, dur)
    period, why = find_period(codes, int(codes.max()) + 1)
    assert period is not None, why
    reach = work_reach(lane, period)
    boundary = boundary_name(lane, period, reach)
    cuts, work_before = iteration_starts(lane, boundary, reach)
    return period, boundary, cuts, work_before


# ----------------------------------------------------------------------------- real captures


def test_mindspore_cpu_capture_has_its_50_steps_each_with_the_whole_graph(captures):
    """Graph mode: every kernel of the graph runs once per step, so each of the 50 steps holds the same
    43 launches; steps tile the capture and begin with the graph's first kernel."""
    run = read_mindspore_dir(captures / "mindspore_cpu" / "cnn_50steps_ascend_ms")[0]
    with pytest.warns(ProfilerUsageWarning, match=r"no step markers: steps inferred .* period 43 ops, 50 steps"):
        run = ensure_steps(run)
    steps = run.steps
    assert len(steps) == 50
    assert (steps["start_ns"].to_numpy()[1:] == steps["end_ns"].to_numpy()[:-1]).all()  # they tile
    assert steps["start_ns"].iloc[0] == run.ops["start_ns"].min()
    assert steps["end_ns"].iloc[-1] == (run.ops["start_ns"] + run.ops["dur_ns"]).max()
    assert (run.ops["step"] >= 0).all()
    contents = run.ops.groupby("step")["name"].apply(lambda names: frozenset(Counter(names).items()))
    assert len(contents) == 50 and contents.nunique() == 1  # the same multiset in every step
    assert len(run.ops) == 50 * 43
    first = run.ops.sort_values("start_ns", kind="stable").groupby("step")["name"].first()
    assert set(first) == {"Default/network-WithLossCell/_backbone-Net/features-SequentialCell/0-Conv2d/Conv2D-op0"}
    assert run.info["step_boundaries"]["source"] == INFERRED

    analysis = analyse_run(run)
    assert set(analysis.step_trace["step_source"]) == {INFERRED}
    assert (analysis.step_trace["op_count"] == 43).all()
    report = analysis.extra_json["report"]["steps"]
    assert report["source"] == INFERRED and "period 43 ops, 50 steps" in report["source_note"]
    assert "period 43 ops, 50 steps" in key_figures(analysis.extra_json["report"]).note


def test_summary_shows_how_the_steps_were_found(captures):
    """`profview DIR --summary` (and the Overview: the same key figures) says the steps are inferred."""
    done = subprocess.run(
        [sys.executable, "-m", "viewer.cli", str(captures / "mindspore_cpu"), "--summary"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "steps inferred from the op launch sequence (cpu thread 0): period 43 ops, 50 steps" in done.stdout


def _without_step_annotations(path: Path, out: Path) -> Path:
    trace = json.loads(gzip.open(path).read())
    trace["traceEvents"] = [
        e
        for e in trace["traceEvents"]
        if not (isinstance(e, dict) and re.match(r"ProfilerStep#\d+", str(e.get("name", ""))))
    ]
    out.write_text(json.dumps(trace))
    return out


@pytest.mark.parametrize("trace", ["diff_control", "diff_test", "nccl_data"])
def test_kineto_trace_without_profiler_steps_gets_as_many_steps(captures, tmp_path, trace):
    """The same trace with its ProfilerStep#N annotations taken out: as many steps, +-1 at the edges
    (the cut lands after the optimizer step, the annotation at prof.step()), and the same step time."""
    path = captures / "kineto" / f"{trace}.json.gz"
    marked = read_kineto_trace(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = ensure_steps(read_kineto_trace(_without_step_annotations(path, tmp_path / f"{trace}.json")))
    assert run.info["step_boundaries"]["source"] == INFERRED
    assert abs(len(run.steps) - len(marked.steps)) <= 1
    full = run.steps.iloc[1:-1] if len(run.steps) > len(marked.steps) else run.steps.iloc[:-1]
    marked_ms = np.median(marked.steps["end_ns"] - marked.steps["start_ns"]) / 1e6
    inferred_ms = np.median(full["end_ns"] - full["start_ns"]) / 1e6
    assert inferred_ms == pytest.approx(marked_ms, rel=0.15)


def test_kineto_trace_without_profiler_steps_is_cut_after_the_optimizer(captures, tmp_path):
    """nccl_data's loop ends each iteration with optimizer.step() and prof.step(): the inferred steps
    begin within 1 ms of the annotations (after the Optimizer.step#SGD.step annotation ends)."""
    path = captures / "kineto" / "nccl_data.json.gz"
    marked = read_kineto_trace(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = ensure_steps(read_kineto_trace(_without_step_annotations(path, tmp_path / "nccl.json")))
    assert run.info["step_boundaries"]["boundary_rule"] == "after the optimizer step"
    assert len(run.steps) == len(marked.steps) == 3
    offset = marked.info["clock"]["origin_unix_ns"] - run.info["clock"]["origin_unix_ns"]
    starts = run.steps["start_ns"].to_numpy()[1:]
    assert np.abs(starts - (marked.steps["start_ns"].to_numpy()[1:] + offset)).max() < 1e6


# ----------------------------------------------------------------------------- real recordings without step()


def test_numpy_loop_without_step_gets_its_iterations_and_boundaries(tmp_path):
    first, last, warned = _numpy_loop(tmp_path)
    trace, info, report = _outputs(tmp_path)
    assert any("no profiler.step() call was recorded: steps inferred" in w for w in warned)
    assert len(trace) == ITERATIONS and set(trace["step_source"]) == {INFERRED}
    assert info["step_boundaries"]["period"] == 4 and not info["step_boundaries"]["partial_first_step"]
    assert report["steps"]["source"] == INFERRED and "profiler.step()" in report["steps"]["source_note"]
    # step k begins where iteration k-1's last op ended: the unrecorded data loading is step k's gap
    start = trace["start_ms"].to_numpy()
    assert np.all(np.abs(start[1:] - _ms(last[:-1], info)) < 0.5)
    assert np.all(start[1:] < _ms(first[1:], info) - 3.0)  # well before the next first op
    assert (trace["iteration_gap_ms"].iloc[1:] > 4.0).all()  # the 5 ms sleep
    assert trace["op_count"].tolist() == [5] + [4] * (ITERATIONS - 2) + [5]  # setup / eval at the edges


def test_recording_that_starts_inside_an_iteration_gets_a_partial_first_step(tmp_path):
    first, last, warned = _numpy_loop(tmp_path, start_inside=True)
    trace, info, _ = _outputs(tmp_path)
    assert info["step_boundaries"]["partial_first_step"] is True
    assert len(trace) == ITERATIONS  # 1 partial + 14 whole iterations
    assert trace["op_count"].tolist() == [3] + [4] * (ITERATIONS - 2) + [5]
    start = trace["start_ms"].to_numpy()
    assert np.all(np.abs(start[1:] - _ms(last[:-1], info)) < 0.5)


def test_recording_that_ends_inside_an_iteration_gets_a_partial_last_step(tmp_path):
    first, last, warned = _numpy_loop(tmp_path, stop_inside=True)
    trace, info, _ = _outputs(tmp_path)
    assert info["step_boundaries"]["partial_last_step"] is True
    assert "the last one partial" in info["step_boundaries"]["note"]
    assert len(trace) == ITERATIONS  # 14 whole iterations + 1 partial
    assert trace["op_count"].tolist() == [5] + [4] * (ITERATIONS - 2) + [1]
    start = trace["start_ms"].to_numpy()
    assert np.all(np.abs(start[1:] - _ms(last[:-1], info)) < 0.5)


def test_torch_loop_with_phases_and_no_step_is_cut_after_the_optimizer(tmp_path):
    """A torch loop with data / forward / backward / optimizer phases and no step(): one step per
    iteration, each ending where the loop's optimizer phase ended, the data wait in the gap."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    data_start, opt_end = [], []
    for _ in range(ITERATIONS):
        data_start.append(time.perf_counter_ns())
        with p.phase("data"):
            time.sleep(0.008)
            x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
        with p.phase("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with p.phase("backward"):
            opt.zero_grad()
            loss.backward()
        with p.phase("optimizer"):
            opt.step()
        opt_end.append(time.perf_counter_ns())
    _analyse(p)
    trace, info, report = _outputs(tmp_path)
    assert len(trace) == ITERATIONS and set(trace["step_source"]) == {INFERRED}
    assert info["step_boundaries"]["boundary_rule"] == "after the optimizer step"
    start = trace["start_ms"].to_numpy()
    assert np.all(np.abs(start[1:] - _ms(opt_end[:-1], info)) < 0.5)
    assert np.all(start[1:] <= _ms(data_start[1:], info) + 0.5)
    assert (trace["data_wait_ms"].iloc[1:] > 7.0).all() and (trace["fp_start_source"] == MARKED).all()
    assert report["steps"]["source"] == INFERRED  # the verdict: scenario step_forgotten (scenario_bank.py)


def test_random_op_names_fall_back_to_one_step_and_say_why(tmp_path):
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    for _ in range(60):
        with p.op(f"op-{uuid.uuid4().hex[:8]}"):
            pass
    warned = _analyse(p)
    trace, info, report = _outputs(tmp_path)
    assert len(trace) == 1 and trace["step_source"].tolist() == [WHOLE_RUN]
    assert any("analysed as one step" in w and "no repeating launch sequence" in w for w in warned)
    assert info["step_boundaries"]["source"] == WHOLE_RUN
    assert "no name occurs 3 times or more" in info["step_boundaries"]["reason"]
    assert report["steps"]["source"] == WHOLE_RUN and "profiler.step()" in report["steps"]["source_note"]


def test_marked_steps_say_so_and_the_report_is_unchanged(tmp_path):
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    for _ in range(5):
        with p.phase("forward"):
            time.sleep(0.001)
        p.step()
    assert _analyse(p) == []
    trace, info, report = _outputs(tmp_path)
    assert set(trace["step_source"]) == {MARKED}
    assert "step_boundaries" not in info and "source" not in report["steps"]


# ----------------------------------------------------------------------------- properties (synthetic sequences)


def test_exact_period_and_the_longest_idle_gap_begins_the_iteration():
    unit = np.array([7, 1, 2, 3, 1, 2, 3, 4, 5])  # 1 2 3 repeat inside the iteration
    codes, start, dur = _iterations(np.roll(unit, -3), 30)  # the sequence starts mid-iteration ...
    codes, start, dur = codes[2:], start[2:], dur[2:]
    gap = np.tile(np.roll(unit, -3) == 7, 30)[2:]
    start = start + np.cumsum(np.where(gap, 3_000_000, 0))  # ... and 3 ms idle precede op7
    period, boundary, cuts, work_before = _cuts(codes, start, dur)
    assert period.launches == 9 and boundary.code == 7 and boundary.rule == "longest idle gap"
    assert work_before and len(cuts) == 30  # a partial iteration, then 30 cuts
    assert np.array_equal(np.searchsorted(start, cuts, side="left"), np.flatnonzero(codes == 7))


def test_irregular_launches_at_the_edges_and_between_iterations():
    rng = np.random.default_rng(1)
    codes, start, dur = _iterations(np.arange(20), 40)
    extra = rng.integers(0, len(codes), 60)  # 60 loader ops of 30 names at random
    codes = np.insert(codes, extra, 100 + rng.integers(0, 30, 60))
    codes = np.concatenate([[200, 201, 202, 5, 6], codes, [203, 3, 204]])  # junk at both ends
    period, why = find_period(codes, int(codes.max()) + 1)
    assert period is not None and period.repetitions in (40, 41) and 20 <= period.launches <= 23
    assert (period.per_period[:20] == 1).all() and (period.per_period[100:] == 0).all()


def test_a_period_inside_the_iteration_is_not_the_iteration_when_loop_names_say_so():
    """12 identical layers, then the loss and torch's Optimizer.step#SGD.step annotation: the layer
    period is regular too, but it leaves the optimizer step irregular; the iteration makes it regular.
    (Without such a name the two cannot be told apart: a name every 12 iterations looks the same.)"""
    layer = [10, 11, 12, 13]
    unit = np.array([0, 1, *layer * 12, 2, 3, 4, 5])  # 12 identical layers, then loss / optimizer
    codes, start, dur = _iterations(unit, 20)
    names = np.array([f"aten::op{i}" for i in range(14)], dtype=object)
    names[4] = "Optimizer.step#SGD.step"
    loop = names_role(names, np.zeros(14, dtype=bool)) != ""
    period, why = find_period(codes, 14, loop)
    assert period is not None and period.repetitions == 20 and period.launches == len(unit)
    period, why = find_period(codes, 14)  # no loop names: the shortest period
    assert period is not None and period.repetitions == 240


def test_a_name_logged_every_few_steps_does_not_make_steps_of_several_iterations():
    unit = np.arange(10)
    codes, start, dur = _iterations(unit, 50)
    log = np.flatnonzero(codes == 9)[4::5] + 1  # a metrics op after every 5th iteration
    codes = np.insert(codes, log, 50)
    period, why = find_period(codes, 51)
    assert period is not None and period.repetitions == 50
    names = np.array(["data", "forward", "backward", "optimizer", *[f"op{i}" for i in range(47)]], dtype=object)
    loop = names_role(names, np.zeros(51, dtype=bool)) != ""  # phases: the same answer
    assert find_period(codes, 51, loop)[0].repetitions == 50


@pytest.mark.parametrize(
    "codes",
    [
        np.random.default_rng(2).integers(0, 8, 3000),  # random order over a small alphabet
        np.full(500, 3),  # one name only: its period says nothing
        np.arange(1000),  # nothing repeats
    ],
)
def test_no_period(codes):
    period, why = find_period(codes.astype(np.int64), int(codes.max()) + 1)
    assert period is None and why


def test_a_million_launches_take_well_under_a_few_seconds():
    """Vectorised: one pass per candidate anchor and a bounded table (measured ~0.2 s here, idle)."""
    unit = np.random.default_rng(3).integers(0, 300, 1000)
    unit[0] = 1000
    codes, start, dur = _iterations(unit, 1000)
    started = time.perf_counter()
    period, boundary, cuts, _ = _cuts(codes, start, dur)
    assert time.perf_counter() - started < 10.0  # generous: a busy 2-core machine
    assert period.repetitions == 1000 and boundary.code == 1000 and len(cuts) == 1000

"""attach(model, optimizer) against the loop's own clock: the step boundaries the hooks mark (forward
call, backward() returning, optimizer.step() returning) agree with the loop's timestamps step by step,
also over gradient-accumulation micro-batches, an injected data-loading sleep shows as that much more
iteration gap, and a wrapper optimizer's own work lands in the step it ends, not in the next one's gap."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from support.hooked_loops import OPT_WORK_S, Lookahead, attached, close_per_step, quiet_profiler, train_steps  # noqa: E402
from support.torch_loops import cifar_batch, profiled_cnn_run, read_csv, small_cnn  # noqa: E402

pytestmark = pytest.mark.timing

torch.set_num_threads(1)


def test_boundaries_match_ground_truth(tmp_path):
    """fp start = the forward call, bp end = backward() returning, step end = optimizer.step() returning."""
    model, optimizer, (x, y), p = attached(tmp_path)
    truth = []
    t_prev = time.perf_counter_ns()
    for _ in range(8):
        time.sleep(0.005)
        optimizer.zero_grad()
        t_fp = time.perf_counter_ns()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        t_bp = time.perf_counter_ns()
        time.sleep(0.003)  # tail work before the optimizer
        optimizer.step()
        t_end = time.perf_counter_ns()
        truth.append((t_prev, t_fp, t_bp, t_end))
        t_prev = t_end
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    truth = np.array(truth, dtype=np.float64) / 1e6
    # step 0 starts when recording starts, before the loop's first timestamp: compare from step 1
    close_per_step(trace["iteration_gap_ms"][1:], truth[1:, 1] - truth[1:, 0])
    close_per_step(trace["fp_bp_ms"], truth[:, 2] - truth[:, 1])
    close_per_step(trace["tail_ms"], truth[:, 3] - truth[:, 2])
    assert (trace["tail_ms"] >= 3.0).all()


def test_injected_data_loading_sleep_shows_as_iteration_gap(tmp_path):
    """A 20 ms sleep in data loading: the iteration gap grows by what the sleeps really took."""
    slept = []

    def slow_loading():
        t0 = time.perf_counter_ns()
        time.sleep(0.020)
        slept.append((time.perf_counter_ns() - t0) / 1e6)

    base = read_csv(profiled_cnn_run(tmp_path / "base", steps=8).output_path, "step_trace")
    slow = read_csv(profiled_cnn_run(tmp_path / "slow", steps=8, load=slow_loading).output_path, "step_trace")
    extra_gap = slow["iteration_gap_ms"][1:].median() - base["iteration_gap_ms"][1:].median()
    assert extra_gap == pytest.approx(np.median(slept[1:]), abs=2.0)
    assert (slow["iteration_gap_ms"][1:].to_numpy() >= np.array(slept[1:])).all()  # each step's own sleep


def test_gradient_accumulation_spans_all_micro_batches(tmp_path):
    """Two forward/backward micro-batches per optimizer step: fp start is the first forward,
    bp end the last backward, and steps are optimizer steps."""
    model, optimizer, (x, y), p = attached(tmp_path)
    spans = []
    for _ in range(8):
        optimizer.zero_grad()
        t_fp = 0
        for half in (x[:16], x[16:]):
            time.sleep(0.002)  # the second one is between micro-batches: inside fp..bp
            t_fp = t_fp or time.perf_counter_ns()
            nn.functional.cross_entropy(model(half), y[:16]).backward()
        spans.append((time.perf_counter_ns() - t_fp) / 1e6)
        optimizer.step()
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    assert len(trace) == 8
    close_per_step(trace["fp_bp_ms"], spans)


def test_a_wrapper_optimizer_work_lands_in_the_step_it_ends(tmp_path):
    """Attaching the wrapper's inner optimizer: the wrapper's own work before inner.step() comes
    before the step end, so it is that step's tail or compute, and one step per iteration."""
    torch.manual_seed(0)
    model, (x, y) = small_cnn(), cifar_batch()
    inner = torch.optim.SGD(model.parameters(), lr=0.01)
    p = quiet_profiler(tmp_path)
    p.attach(model, inner, ops=False)
    train_steps(model, Lookahead(inner), x, y, 6)
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    assert len(trace) == 6
    assert (trace["iteration_gap_ms"].iloc[1:] < OPT_WORK_S * 1e3 * 0.5).all()  # not in the next step's gap

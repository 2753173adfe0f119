"""attach(model, optimizer): the step trace of a real PyTorch loop with no phase() / step() calls.

The step boundaries checked against the loop's own clock (also with gradient accumulation), an injected
data-loading sleep, and where a wrapper optimizer's own work lands are in tests/e2e/test_torch_hooks_timing.py."""

import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from profiler import ProfilerUsageWarning  # noqa: E402

from support.hooked_loops import (  # noqa: E402
    OPT_WORK_S,
    Lookahead,
    SlowSGD,
    attached,
    quiet_profiler,
    train_steps,
)
from support.torch_loops import cifar_batch, profiled_cnn_run, read_csv, small_cnn  # noqa: E402

torch.set_num_threads(1)


def test_phases_sum_to_total_from_hooks_alone(tmp_path):
    profiled_cnn_run(tmp_path, steps=6)
    trace = read_csv(tmp_path, "step_trace")
    assert list(trace["step"]) == list(range(6))
    parts = trace["iteration_gap_ms"] + trace["fp_bp_ms"] + trace["tail_ms"]
    assert np.allclose(parts, trace["total_ms"], atol=3e-6)
    assert (trace[["iteration_gap_ms", "fp_bp_ms", "tail_ms"]] > 0).all().all()
    assert set(trace["fp_start_source"]) == {"marked"} and set(trace["bp_end_source"]) == {"marked"}


def test_explicit_step_is_ignored_with_one_warning(tmp_path):
    model, optimizer, (x, y), p = attached(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            p.step()
    assert [str(w.message) for w in caught if w.category is ProfilerUsageWarning] == [
        "profiler.step() ignored: the optimizer hook installed by attach() ends each step "
        "(pass step_on_optimizer=False to attach() to call step() yourself)"
    ]
    p.analyse(progress=False)
    assert len(read_csv(tmp_path, "step_trace")) == 3


def test_step_on_optimizer_false_leaves_steps_to_the_loop(tmp_path):
    model, optimizer, (x, y), p = attached(tmp_path, step_on_optimizer=False)
    for i in range(6):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        if i % 2:
            optimizer.step()
            p.step()  # one profiler step per optimizer step
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    assert len(trace) == 3
    assert set(trace["bp_end_source"]) == {"marked"}


def test_hooks_are_removed_when_the_profiler_stops(tmp_path):
    model, optimizer, (x, _), p = attached(tmp_path)
    assert "forward" in model.__dict__ and "step" in optimizer.__dict__
    assert not model._forward_pre_hooks  # no module hook: torch's fast __call__ path stays
    expected = nn.Sequential.forward(model, x)
    assert torch.equal(model(x), expected)  # the wrapper passes the call on unchanged
    p.stop()
    assert "forward" not in model.__dict__ and not model._forward_pre_hooks and not model._forward_hooks
    assert "step" not in optimizer.__dict__  # the class's step applies again
    assert all(p._post_accumulate_grad_hooks is None or not p._post_accumulate_grad_hooks for p in model.parameters())


def test_after_the_first_backward_pass_only_its_last_gradients_stay_hooked(tmp_path):
    """The first backward pass is marked by an engine callback; it leaves hooks only on the
    parameters it accumulated last (the first layer's, in a sequential CNN), which mark the
    following passes. A frozen parameter is never hooked."""
    from profiler.capture.torch_hooks import BP_END_PARAMS, TorchHooks

    torch.manual_seed(0)
    model, (x, y) = small_cnn(), cifar_batch()
    first = next(model.parameters())
    first.requires_grad_(False)  # frozen: not hooked, not chosen
    optimizer = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.01)
    p = quiet_profiler(tmp_path)
    p.attach(model, optimizer, ops=False)

    def hooked():
        return [name for name, q in model.named_parameters() if q._post_accumulate_grad_hooks]

    trainable = [name for name, q in model.named_parameters() if q.requires_grad]
    assert hooked() == trainable
    order = []  # the test's own record of the first pass
    mine = [
        q.register_post_accumulate_grad_hook(lambda q, n=n: order.append(n))
        for n, q in model.named_parameters()
        if q.requires_grad
    ]
    for step in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step == 0:
            for handle in mine:
                handle.remove()
        assert sorted(hooked()) == sorted(order[-BP_END_PARAMS:])
    assert len(order) == len(trainable) and set(order[-BP_END_PARAMS:]) <= set(trainable[:3])  # input side last
    hooks = next(s for s in p.sources if isinstance(s, TorchHooks))
    assert all(name in hooks.details["bp_end"] for name in order[-BP_END_PARAMS:])
    p.analyse(progress=False)
    assert list(read_csv(tmp_path, "step_trace")["bp_end_source"]) == ["marked"] * 3


def test_forward_wrapper_keeps_an_instance_forward_and_keyword_arguments(tmp_path):
    """A forward set on the instance before attach() (as some libraries do) is wrapped, called with
    the caller's keyword arguments, and put back on stop(); a user's own forward hook still runs."""

    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    model = Scaled()
    calls = []

    def own_forward(x, scale=1.0):
        calls.append(scale)
        return x * scale * 2

    model.forward = own_forward
    seen = []
    model.register_forward_hook(lambda module, args, out: seen.append(out.sum().item()))
    p = quiet_profiler(tmp_path)
    p.attach(model, ops=False)
    out = model(torch.ones(3), scale=5.0)
    p.step()
    model(torch.ones(3))
    p.step()
    assert calls == [5.0, 1.0] and out.sum().item() == 30.0 and seen == [30.0, 6.0]
    p.stop()
    assert model.forward is own_forward
    p.analyse(progress=False)
    assert list(read_csv(tmp_path, "step_trace")["fp_start_source"]) == ["marked", "marked"]


def test_inference_and_tuple_outputs(tmp_path):
    """No grad: no bp end (and no error); several outputs: one bp end per backward pass."""

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2), nn.Linear(8, 3)

        def forward(self, x):
            h = self.body(x).relu()
            return {"a": self.a(h), "b": (self.b(h),)}

    model = TwoHeads()
    p = quiet_profiler(tmp_path)
    p.attach(model, ops=False)
    x = torch.randn(4, 8)
    with torch.no_grad():
        model(x)
    p.step()
    out = model(x)
    (out["a"].sum() + out["b"][0].sum()).backward()
    p.step()
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    assert list(trace["fp_start_source"]) == ["marked", "marked"]
    assert trace["bp_end_source"][1] == "marked" and trace["bp_end_source"][0] != "marked"


def test_second_attach_that_also_steps_is_refused(tmp_path):
    model, optimizer, _, p = attached(tmp_path)
    with pytest.raises(Exception, match="already"):
        p.attach(model, optimizer, ops=False)
    p.stop()


# ---- exactly one step per outermost optimizer.step() ------------------------------------------


@pytest.mark.parametrize("case", ["subclass", "wrapper", "scheduler_after", "scheduler_before", "zero_grad_last"])
def test_one_step_per_outermost_optimizer_step(tmp_path, case):
    torch.manual_seed(0)
    torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)  # SGD.step is patched by torch now
    model, (x, y) = small_cnn(), cifar_batch()
    inner = (SlowSGD if case == "subclass" else torch.optim.SGD)(model.parameters(), lr=0.01)
    stepper = Lookahead(inner) if case == "wrapper" else inner
    scheduler = torch.optim.lr_scheduler.StepLR(inner, 2) if case == "scheduler_before" else None
    p = quiet_profiler(tmp_path)
    p.attach(model, inner, ops=False)
    if case == "scheduler_after":
        scheduler = torch.optim.lr_scheduler.StepLR(inner, 2)
    steps = 8
    train_steps(model, stepper, x, y, steps, zero_grad_first=case != "zero_grad_last", scheduler=scheduler)
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    assert list(trace["step"]) == list(range(steps)), case  # one step per iteration, never two
    if case in ("subclass",):
        # the subclass's own work is in the optimizer phase: the tail, not the next step's compute
        assert (trace["tail_ms"].iloc[1:] >= OPT_WORK_S * 1e3 * 0.8).all()
    if case == "scheduler_after":
        assert scheduler.get_last_lr()[0] == pytest.approx(0.01 * 0.1 ** (steps // 2))
    p_step = inner.__dict__.get("step")
    assert p_step is None or getattr(p_step, "_wrapped_by_lr_sched", False)  # our wrapper is gone


def test_grad_scaler_skipped_steps_still_end_the_step(tmp_path):
    """GradScaler.step skips optimizer.step() on inf gradients; the iteration is still one step."""
    torch.manual_seed(0)
    model, (x, y) = small_cnn(), cifar_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    p = quiet_profiler(tmp_path)
    p.attach(model, optimizer, ops=False)
    before = [q.detach().clone() for q in model.parameters()]
    train_steps(model, optimizer, x, y, 1, scaler=scaler, poison={0})
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # really skipped
    train_steps(model, optimizer, x, y, 6, scaler=scaler, poison={2, 3})
    p.analyse(progress=False)
    trace = read_csv(tmp_path, "step_trace")
    assert list(trace["step"]) == list(range(7))
    assert torch.amp.GradScaler.step.__name__ == "step" and not hasattr(torch.amp.GradScaler.step, "__wrapped__")


def test_float64_modules_get_forward_and_backward_spans_and_nothing_else_is_hooked(tmp_path):
    """attach() marks the modules that hold float64 parameters (a BatchNorm kept in float64) with a span
    over each forward call and one over its backward; a float32 model gets no such hook; an in-place op
    on the module's output (ReLU(inplace=True)) still works (tensor hooks, not module backward hooks)."""
    from profiler.model import FLOAT64_MODULE_SPAN
    from profiler.postprocess.recording import load_rank

    class Float64Norm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(4).double()

        def forward(self, x):
            return self.bn(x.double()).float()

    model = nn.Sequential(nn.Conv2d(3, 4, 1), Float64Norm(), nn.ReLU(inplace=True), nn.Conv2d(4, 3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    p = quiet_profiler(tmp_path / "f64")
    p.attach(model, optimizer, ops=False)
    x, y = torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    p.analyse(progress=False)
    run = load_rank(tmp_path / "f64", 0)
    names = run.spans["name"].astype(str)
    forward, backward = FLOAT64_MODULE_SPAN + "1.bn (BatchNorm2d)", FLOAT64_MODULE_SPAN + "1.bn (BatchNorm2d) backward"
    assert (names == forward).sum() == 3 and (names == backward).sum() == 3
    info = json.loads((tmp_path / "f64" / "profiler_info_0.json").read_text())
    assert info["sources"]["torch_hooks"]["float64_modules"] == "1.bn (BatchNorm2d)"
    fwd = run.spans[(names == forward).to_numpy()]
    bwd = run.spans[(names == backward).to_numpy()]
    assert (bwd["start_ns"].to_numpy() > fwd["start_ns"].to_numpy() + fwd["dur_ns"].to_numpy()).all()  # after

    model32 = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
    p = quiet_profiler(tmp_path / "f32")
    p.attach(model32, torch.optim.SGD(model32.parameters(), lr=0.01), ops=False)
    model32(x).sum().backward()
    p.analyse(progress=False)
    info = json.loads((tmp_path / "f32" / "profiler_info_0.json").read_text())
    assert "float64_modules" not in info["sources"]["torch_hooks"]
    spans = load_rank(tmp_path / "f32", 0).spans
    assert not spans["name"].astype(str).str.startswith(FLOAT64_MODULE_SPAN).any()

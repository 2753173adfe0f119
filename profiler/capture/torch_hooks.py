"""PyTorch hooks that give the step trace its boundaries without any manual phase() call.

`TorchHooks(model, optimizer)` (what `profiler.attach(model, optimizer)` adds) installs, on the
*root* module and the optimizer only:

- **fp start** — the root module's `forward` is wrapped, on the instance, by a C `Emitter` that
  marks `fp_start` and passes the call on to the original forward unchanged. The step trace takes
  the first mark in each step (gradient-accumulation micro-batches give several). Not a forward
  pre-hook: any hook on a module sends torch's `Module.__call__` down its slow path (~4.5 us a step on
  a 0.4 ms MLP step, more than 1 %; benchmarks/bench_step_overhead.py), while the wrapper costs
  what one emit() costs. `stop()` restores the module's own `forward` (an instance `forward` the
  user had set, e.g. by another library, is wrapped and put back the same way).
- **bp end** — in the first backward pass, every parameter that requires grad has a
  post-accumulate-grad hook; the first to fire queues a callback on the autograd engine
  (`queue_callback`, the mechanism DDP uses to finalise its buckets), which runs once the whole
  pass has executed: it marks `bp_end` and keeps hooked only the parameter whose gradient that pass
  accumulated last (`BP_END_PARAMS`; a C `Emitter` marking `bp_end`). From then on bp end is the
  accumulation of that gradient, the end of the backward pass as the engine orders it,
  at ~0.35 us a hook instead of ~0.6 us for every parameter plus ~3 us for the callback
  (benchmarks/bench_step_overhead.py). Frozen or unused parameters, several outputs or any loss
  do not move it. Several backward passes in one step (micro-batches) give several marks; the step
  trace keeps the last. DDP queues its own finalise callback (which waits for the gradient
  all-reduce) after the accumulation, so that wait lands in the tail, as the step trace defines it.
  A graph that changes between steps so that this parameter gets no gradient marks no bp end
  (the step trace then infers it); `torch.autograd.grad()` without `.backward()` accumulates
  nothing and marks none either.
- **tail / step end** — `optimizer.step` is wrapped on the instance (`_OptimizerStep`): the
  *outermost* call is an `optimizer` phase (a tail phase) and, with `step_on_optimizer=True` (the
  default), ends the profiler step: the training loop needs no `profiler.step()`. Exactly one step
  per outermost call: a subclass whose `step` calls `super().step()`, or a wrapper optimizer that
  calls the attached one, nests inside it (torch's own step hooks would fire once per patched
  class level). The wrapper is a bound method, so an `LRScheduler` created later wraps it as it
  wraps any optimizer. `GradScaler.step(optimizer)` of an attached optimizer is the outermost
  call too (patched while attached): a step the scaler skips (inf / NaN gradients) still ends.

- **float64 modules** — a module holding float64 parameters or buffers of its own (a BatchNorm kept in
  float64 between float32 layers) gets a span over each forward call and over its backward
  (`torch_dtypes.py`): the precision finding charges what runs in them, and the casts around them, without
  `record_shapes`. A model without float64 modules gets no such hook.

All times are host times: on a GPU, bp end is when the host finished issuing backward work.
torch is imported lazily so that `import profiler` never imports it.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any, Callable, Optional

from profiler.capture.base import Host, Source
from profiler.capture.distributed import DDP_BUCKET, Collectives, instrument_ddp, is_ddp
from profiler.capture.torch_dtypes import float64_module_hooks
from profiler.record.recorder import hot
from profiler.store.kinds import COMM, MARK, PHASE

if TYPE_CHECKING:
    from profiler.record.recorder import Recorder


#: Parameters kept hooked for bp end after the first backward pass: the last ones it accumulated.
#: One, so that each backward pass gives one mark (the engine's order is the same every pass of
#: the same graph).
BP_END_PARAMS = 1


class TorchHooks(Source):
    """Module / autograd / optimizer hooks that mark fp start, bp end and the step end.

    Args:
        model: the root module (its forward marks fp start, its backward pass bp end).
        optimizer: its `step()` is the `optimizer` phase and, with `step_on_optimizer`, ends each
            profiler step (the Profiler then ignores `step()` calls).

    With a `Collectives` source in the same Profiler, a DistributedDataParallel model's gradient
    buckets are timed too (`instrument_ddp`).
    """

    name = "torch_hooks"

    def __init__(self, model: Any, optimizer: Any = None, *, step_on_optimizer: bool = True) -> None:
        super().__init__()
        self._model = model
        self._optimizer = optimizer
        self.step_on_optimizer = step_on_optimizer and optimizer is not None
        self._end_step: Optional[Callable[[], Any]] = None  # the Profiler's step end (bind)
        self._recorder: Optional[Recorder] = None
        self._handles: list = []
        self._first_pass: list = []  # parameters in the order the first backward pass accumulated them
        self._first_pass_hooks: list = []
        self.details.update(
            {
                "model": type(model).__name__,
                "optimizer": type(optimizer).__name__ if optimizer is not None else None,
                "step_on_optimizer": self.step_on_optimizer,
                "bp_end": "autograd engine callback after the first backward pass, then the gradient "
                "it accumulated last",
            }
        )

    def bind(self, profiler: Host) -> None:
        """Take over the Profiler's step ends (step_on_optimizer), and time a DDP model's buckets
        when the Profiler captures collectives."""
        if self.step_on_optimizer:
            self._end_step = profiler.take_over_steps(self)
        if is_ddp(self._model) and any(isinstance(s, Collectives) for s in profiler.sources):
            instrument_ddp(self._model, self._bucket_code)

    def _bucket_code(self) -> int:
        """The sample code of a DDP bucket's all-reduce in the current recording (0: not recording)."""
        recorder = self._recorder
        return recorder.point_code(COMM, DDP_BUCKET, "all_reduce") if recorder is not None else 0

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, recorder: Recorder) -> None:
        import torch

        self._recorder = recorder
        self._queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        self._fp_code = recorder.point_code(MARK, "fp_start")  # the codes profiler.mark() records
        self._bp_code = recorder.point_code(MARK, "bp_end")
        optimizer_phase = recorder.span(PHASE, "optimizer")  # = profiler.phase("optimizer")
        model = self._model
        self._handles = [_ForwardWrapper(model, hot.Emitter(self._fp_code, model.forward))]
        self._first_pass_hooks = [
            p.register_post_accumulate_grad_hook(self._on_first_pass_gradient)
            for p in model.parameters()
            if p.requires_grad
        ]
        self._handles += self._first_pass_hooks
        if self._optimizer is not None:
            self._handles.append(_OptimizerStep(self._optimizer, optimizer_phase, self._end_step))
        float64_handles, float64_names = float64_module_hooks(model, recorder)  # none in a float32 model
        self._handles += float64_handles
        if float64_names:
            self.details["float64_modules"] = ", ".join(float64_names)

    def stop(self) -> None:
        self._recorder = None
        for handle in self._handles:
            handle.remove()
        self._handles, self._first_pass_hooks, self._first_pass = [], [], []

    # ---- bp end: the first backward pass picks the parameters to hook -------------------------

    def _on_first_pass_gradient(self, param: Any) -> None:
        if not self._first_pass:
            self._queue_callback(self._on_first_pass_done)
        self._first_pass.append(param)

    def _on_first_pass_done(self) -> None:
        """End of the first backward pass: mark it, and hook only the gradient(s) it finished with."""
        hot.emit(self._bp_code)
        for handle in self._first_pass_hooks:
            handle.remove()
        last = self._first_pass[-BP_END_PARAMS:]  # each parameter accumulates once a pass
        self._first_pass_hooks, self._first_pass = [], []
        emitter = hot.Emitter(self._bp_code)
        self._handles += [param.register_post_accumulate_grad_hook(emitter) for param in last]
        names = {id(param): name for name, param in self._model.named_parameters()}
        self.details["bp_end"] = "accumulation of the gradient the first backward pass finished with: " + ", ".join(
            names.get(id(param), "?") for param in last
        )


class _ForwardWrapper:
    """`module.forward = wrapper` on the instance, undone by remove() (a hook handle's interface).

    remove() puts back exactly what was there: the instance attribute the module had, or none
    (then the class's forward applies again). It leaves alone a forward someone set after us.
    """

    def __init__(self, module: Any, wrapper: Any) -> None:
        self._module, self._wrapper = module, wrapper
        self._had_own = "forward" in module.__dict__
        self._own = module.__dict__.get("forward")
        module.forward = wrapper

    def remove(self) -> None:
        if self._module is None:
            return  # removed already (hook handles allow that too)
        if self._module.__dict__.get("forward") is self._wrapper:
            if self._had_own:
                self._module.forward = self._own
            else:
                del self._module.forward
        self._module = self._wrapper = self._own = None


class _OptimizerStep:
    """`optimizer.step` replaced on the instance by a bound method whose outermost call is the
    optimizer phase and ends the step; nested calls (super().step(), a wrapper calling the attached
    optimizer, GradScaler.step calling optimizer.step) pass straight through. remove() undoes it."""

    def __init__(self, optimizer: Any, phase: Any, end_step: Optional[Callable[[], Any]]) -> None:
        self._optimizer = optimizer
        self._phase = phase
        self._end_step = end_step
        self._attached = True
        self._depth = 0
        self._inner = optimizer.__dict__.get("step")  # an instance step set before us (an LR scheduler's)

        def step(opt: Any, *args: Any, **kwargs: Any) -> Any:
            return self.call(lambda: self.original(*args, **kwargs))

        if getattr(self._inner, "_wrapped_by_lr_sched", False):
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]  # the scheduler's check still holds
        self._method = types.MethodType(step, optimizer)  # a bound method: LRScheduler wraps its __func__
        optimizer.__dict__["step"] = self._method
        _ATTACHED[id(optimizer)] = self
        _patch_grad_scaler()

    def call(self, run: Callable[[], Any]) -> Any:
        """Run `run` (the step itself) as the outermost optimizer step, or pass it through when nested."""
        if self._depth or not self._attached:
            return run()
        self._depth = 1
        try:
            with self._phase:
                out = run()
        finally:
            self._depth = 0
        if self._end_step is not None:
            self._end_step()
        return out

    def original(self, *args: Any, **kwargs: Any) -> Any:
        """The step this wrapper replaced: the instance's own, else the class's."""
        if self._inner is not None:
            return self._inner(*args, **kwargs)
        return type(self._optimizer).step(self._optimizer, *args, **kwargs)

    def remove(self) -> None:
        """Put back the step we replaced; if something wrapped ours since (an LR scheduler), ours
        stays in its chain as a plain pass-through."""
        if not self._attached:
            return
        self._attached = False
        optimizer = self._optimizer
        if optimizer.__dict__.get("step") is self._method:
            if self._inner is not None:
                optimizer.__dict__["step"] = self._inner
            else:
                del optimizer.__dict__["step"]
        if _ATTACHED.get(id(optimizer)) is self:
            del _ATTACHED[id(optimizer)]
        if not _ATTACHED:
            _unpatch_grad_scaler()


#: id(optimizer) -> its _OptimizerStep, while attached (GradScaler.step looks its optimizer up here)
_ATTACHED: dict[int, _OptimizerStep] = {}
_SCALER_STEP: list = []  # (GradScaler, its own step) while it is patched


def _patch_grad_scaler() -> None:
    """While an optimizer is attached, GradScaler.step(opt) of an attached optimizer is its outermost
    step: the phase and the step end happen even when the scaler skips opt.step() (inf gradients)."""
    if _SCALER_STEP:
        return
    scaler = getattr(sys.modules.get("torch.amp.grad_scaler"), "GradScaler", None)
    if scaler is None:
        return
    own = scaler.step

    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        wrapper = _ATTACHED.get(id(optimizer))
        if wrapper is None or wrapper._optimizer is not optimizer:
            return own(self, optimizer, *args, **kwargs)
        return wrapper.call(lambda: own(self, optimizer, *args, **kwargs))

    step.__wrapped__ = own  # type: ignore[attr-defined]
    _SCALER_STEP.append((scaler, own))
    scaler.step = step


def _unpatch_grad_scaler() -> None:
    if _SCALER_STEP:
        scaler, own = _SCALER_STEP.pop()
        scaler.step = own

"""PyTorch hooks that give the step trace its boundaries without any manual phase() call.

`profiler.attach(model, optimizer)` installs, on the *root* module and the optimizer only:

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
- **tail / step end** — the optimizer's step pre / post hooks wrap `optimizer.step()` in an
  `optimizer` phase (a tail phase), and the post hook ends the profiler step
  (`step_on_optimizer=True`, the default): the training loop needs no `profiler.step()`. Both are
  C `Emitter`s; the post hook passes on to the profiler's C stepper.

All times are host times: on a GPU, bp end is when the host finished issuing backward work.
torch is imported lazily so that `import profiler` never imports it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from profiler.record.recorder import hot
from profiler.store.kinds import MARK, PHASE
from profiler.capture.base import Source

if TYPE_CHECKING:
    from profiler.record.recorder import Recorder


#: Parameters kept hooked for bp end after the first backward pass: the last ones it accumulated.
#: One, so that each backward pass gives one mark (the engine's order is the same every pass of
#: the same graph).
BP_END_PARAMS = 1


class TorchHooks(Source):
    """Module / autograd / optimizer hooks that mark fp start, bp end and the step end."""

    name = "torch_hooks"

    def __init__(self, model: Any, optimizer: Any = None, end_step: Optional[Callable[[], Any]] = None) -> None:
        """`end_step`, when given (the profiler's step()), is called after each optimizer.step()."""
        super().__init__()
        self._model = model
        self._optimizer = optimizer
        self.step_on_optimizer = end_step is not None and optimizer is not None
        self._end_step = end_step if self.step_on_optimizer else None
        self._handles: list = []
        self._first_pass: list = []      # parameters in the order the first backward pass accumulated them
        self._first_pass_hooks: list = []
        self.details.update({
            "model": type(model).__name__,
            "optimizer": type(optimizer).__name__ if optimizer is not None else None,
            "step_on_optimizer": self.step_on_optimizer,
            "bp_end": "autograd engine callback after the first backward pass, then the gradient "
                      "it accumulated last",
        })

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, recorder: "Recorder") -> None:
        import torch

        self._queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        self._fp_code = recorder.point_code(MARK, "fp_start")      # the codes profiler.mark() records
        self._bp_code = recorder.point_code(MARK, "bp_end")
        optimizer_phase = recorder.span(PHASE, "optimizer")         # = profiler.phase("optimizer")
        model = self._model
        self._handles = [_ForwardWrapper(model, hot.Emitter(self._fp_code, model.forward))]
        self._first_pass_hooks = [p.register_post_accumulate_grad_hook(self._on_first_pass_gradient)
                                  for p in model.parameters() if p.requires_grad]
        self._handles += self._first_pass_hooks
        if self._optimizer is not None:
            self._handles += [self._optimizer.register_step_pre_hook(hot.Emitter(optimizer_phase.begin_code)),
                              self._optimizer.register_step_post_hook(hot.Emitter(optimizer_phase.end_code,
                                                                                  self._end_step))]

    def stop(self) -> None:
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
        last = self._first_pass[-BP_END_PARAMS:]          # each parameter accumulates once a pass
        self._first_pass_hooks, self._first_pass = [], []
        emitter = hot.Emitter(self._bp_code)
        self._handles += [param.register_post_accumulate_grad_hook(emitter) for param in last]
        names = {id(param): name for name, param in self._model.named_parameters()}
        self.details["bp_end"] = ("accumulation of the gradient the first backward pass finished with: "
                                  + ", ".join(names.get(id(param), "?") for param in last))


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
            return                                   # removed already (hook handles allow that too)
        if self._module.__dict__.get("forward") is self._wrapper:
            if self._had_own:
                self._module.forward = self._own
            else:
                del self._module.forward
        self._module = self._wrapper = self._own = None


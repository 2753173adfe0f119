"""PyTorch hooks that give the step trace its boundaries without any manual phase() call.

`profiler.attach(model, optimizer)` installs, on the *root* module and the optimizer only:

- **fp start** — a forward pre-hook marks `fp_start` at every forward of the root module; the step
  trace takes the first in each step (gradient-accumulation micro-batches give several). The hook
  is a C `Emitter`: torch's own dispatch of a forward pre-hook (~3.5 us on a 0.4 ms MLP step,
  benchmarks/bench_step_overhead.py) costs more than recording the mark.
- **bp end** — every parameter that requires grad gets a post-accumulate-grad hook (installed once).
  The first of them to fire in a backward pass queues a callback on the autograd engine
  (`queue_callback`, the mechanism DDP uses to finalise its buckets); the engine runs it once the
  whole backward pass has executed, and it marks `bp_end`. So bp end is the end of backward, not
  the last gradient some hook happened to see: frozen or unused parameters, several outputs or any
  loss do not move it, and it costs one event per backward pass. (Per-forward hooks on the model's
  outputs would do the same at ~4x the cost: registering a tensor hook is ~15 us a step.)
  Several backward passes in one step (micro-batches) give several marks; the step trace keeps the
  last. DDP queues its own finalise callback (which waits for the gradient all-reduce) after ours,
  so that wait lands in the tail, as the step trace defines it. `torch.autograd.grad()` without
  `.backward()` accumulates nothing and so marks no bp end (the step trace then infers it).
- **tail / step end** — the optimizer's step pre / post hooks wrap `optimizer.step()` in an
  `optimizer` phase (a tail phase; the pre hook is a C `Emitter`), and the post hook ends the
  profiler step (`step_on_optimizer=True`, the default): the training loop needs no `profiler.step()`.

All times are host times: on a GPU, bp end is when the host finished issuing backward work.
torch is imported lazily so that `import profiler` never imports it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..record.recorder import MARK, PHASE, hot
from .base import Source

if TYPE_CHECKING:
    from ..profiler import Profiler
    from ..record.recorder import Recorder


class TorchHooks(Source):
    """Module / autograd / optimizer hooks that mark fp start, bp end and the step end."""

    name = "torch_hooks"

    def __init__(self, profiler: "Profiler", model: Any, optimizer: Any = None,
                 step_on_optimizer: bool = True) -> None:
        super().__init__()
        self._profiler = profiler
        self._model = model
        self._optimizer = optimizer
        self.step_on_optimizer = bool(step_on_optimizer and optimizer is not None)
        self._handles: list = []
        self._bp_queued = False          # a bp_end callback is queued on the running backward pass
        self.details.update({
            "model": type(model).__name__,
            "optimizer": type(optimizer).__name__ if optimizer is not None else None,
            "step_on_optimizer": self.step_on_optimizer,
            "bp_end": "autograd engine callback after the backward pass",
        })

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, recorder: "Recorder") -> None:
        import torch

        self._queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        self._fp_code = recorder.point_code(MARK, "fp_start")      # the codes profiler.mark() records
        self._bp_code = recorder.point_code(MARK, "bp_end")
        self._optimizer_phase = recorder.span(PHASE, "optimizer")   # = profiler.phase("optimizer")
        model = self._model
        self._optimizer_end = self._optimizer_phase.end_code
        self._handles = [model.register_forward_pre_hook(hot.Emitter(self._fp_code))]
        self._handles += [p.register_post_accumulate_grad_hook(self._on_gradient)
                          for p in model.parameters() if p.requires_grad]
        if self._optimizer is not None:
            self._handles += [self._optimizer.register_step_pre_hook(hot.Emitter(self._optimizer_phase.begin_code)),
                              self._optimizer.register_step_post_hook(self._on_optimizer_done)]

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # ---- hooks -----------------------------------------------------------------------------

    def _on_gradient(self, param: Any) -> None:
        if not self._bp_queued:
            self._bp_queued = True
            self._queue_callback(self._on_backward_done)

    def _on_backward_done(self) -> None:
        self._bp_queued = False
        hot.emit(self._bp_code)

    def _on_optimizer_done(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        hot.emit(self._optimizer_end)
        if self.step_on_optimizer:
            self._profiler._stepper()          # ends the profiler step (its C fast path when armed)


def attach(profiler: "Profiler", model: Any, optimizer: Any = None, *, ops: bool = True,
           step_on_optimizer: bool = True) -> TorchHooks:
    """Install the hooks on `model` / `optimizer` and, with `ops`, start torch op capture.

    Returns the hooks source (already started when the profiler is recording).
    """
    from ..errors import ProfviewError
    from .torch_capture import TorchCapture

    hooks = TorchHooks(profiler, model, optimizer, step_on_optimizer)
    if hooks.step_on_optimizer and any(isinstance(s, TorchHooks) and s.step_on_optimizer for s in profiler.sources):
        raise ProfviewError("an optimizer attached earlier already ends the steps; attach this one "
                            "with step_on_optimizer=False")
    new: list[Source] = [hooks]
    if ops and not any(isinstance(s, TorchCapture) for s in profiler.sources):
        new.append(TorchCapture.for_profiler(profiler))
    for source in new:
        profiler.add_source(source)
    return hooks

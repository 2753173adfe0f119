"""PyTorch hooks that give the step trace its boundaries without any manual phase() call.

`profiler.attach(model, optimizer)` installs, on the *root* module and the optimizer only:

- **fp start** — a forward pre-hook marks `fp_start` at the first forward of each step (later
  forwards in the same step, e.g. gradient-accumulation micro-batches, cost one integer compare).
- **bp end** — a forward hook registers a gradient hook on the model's outputs that require grad.
  When backward reaches the first of them, it queues a callback on the autograd engine
  (`queue_callback`, the mechanism DDP uses to finalise its buckets), which runs once the whole
  backward pass has executed, and marks `bp_end` there. This is robust where per-parameter hooks are
  not: frozen or unused parameters, several outputs, any loss; and it costs one event per backward.
  Several backward passes in one step (micro-batches) give several marks; the step trace keeps the
  last. DDP queues its own finalise callback (which waits for the gradient all-reduce) later than
  ours, so that wait lands in the tail, as the step trace defines it.
- **tail / step end** — the optimizer's step pre / post hooks wrap `optimizer.step()` in an
  `optimizer` phase (a tail phase), and the post hook ends the profiler step
  (`step_on_optimizer=True`, the default): the training loop needs no `profiler.step()`.

All times are host times: on a GPU, bp end is when the host finished issuing backward work.
torch is imported lazily so that `import profiler` never imports it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
        self._fp_step = -1               # the step whose fp_start is already marked
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
        self._tree_leaves = torch.utils._pytree.tree_leaves
        self._tensor = torch.Tensor
        self._is_grad_enabled = torch.is_grad_enabled
        model = self._model
        self._handles = [model.register_forward_pre_hook(self._on_forward),
                         model.register_forward_hook(self._on_forward_done)]
        if self._optimizer is not None:
            self._handles += [self._optimizer.register_step_pre_hook(self._on_optimizer_start),
                              self._optimizer.register_step_post_hook(self._on_optimizer_done)]

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # ---- hooks -----------------------------------------------------------------------------

    def _on_forward(self, module: Any, args: Any) -> None:
        step = self._profiler.step_num
        if step != self._fp_step:
            self._fp_step = step
            self._profiler.mark("fp_start")

    def _on_forward_done(self, module: Any, args: Any, output: Any) -> None:
        if not self._is_grad_enabled():
            return
        for leaf in self._tree_leaves(output):
            if isinstance(leaf, self._tensor) and leaf.requires_grad:
                leaf.register_hook(self._on_backward_start)

    def _on_backward_start(self, grad: Any) -> None:
        if not self._bp_queued:
            self._bp_queued = True
            self._queue_callback(self._on_backward_done)

    def _on_backward_done(self) -> None:
        self._bp_queued = False
        self._profiler.mark("bp_end")

    def _on_optimizer_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_phase().__enter__()

    def _on_optimizer_done(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_phase().__exit__(None, None, None)
        if self.step_on_optimizer:
            self._profiler._end_step()

    def _optimizer_phase(self):
        return self._profiler.phase("optimizer")


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

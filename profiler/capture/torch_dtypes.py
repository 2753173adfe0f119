"""Where a model computes in float64, without `record_shapes`: spans around the float64 modules.

torch.profiler records op input types only with `record_shapes=True` (memory and time on every captured
op). Without it, the float64 detour of a model (a BatchNorm kept in float64 between float32 layers: a
cast in, float64 work, a cast out, and the same backwards) is still knowable from the model itself:
`float64_module_hooks` finds the modules that hold float64 parameters or buffers of their own (`.double()`
layers) and marks, on those modules only, a span over each forward call and over its backward (from the
gradient of its output to the gradient of its input, through tensor hooks: no module backward hook, which
would wrap the outputs and refuse a later in-place op). A model without float64 modules gets no hook at all.

The spans are user spans named `FLOAT64_MODULE_SPAN` + the module's path and type (+ " backward");
profiler/analysis/float64.py charges the ops inside them, and the casts right around them, to the float64
detour (docs/formats.md, `precision_waste`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from profiler.model import FLOAT64_MODULE_SPAN
from profiler.record.recorder import hot
from profiler.store.kinds import SPAN

if TYPE_CHECKING:
    from profiler.record.recorder import Recorder


def float64_modules(model: Any) -> list[tuple[str, Any]]:
    """(path, module) of every module holding a float64 parameter or buffer of its own."""
    import torch

    out = []
    for path, module in model.named_modules():
        own = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        if any(t.dtype == torch.float64 for t in own):
            out.append((path or type(module).__name__, module))
    return out


def float64_module_hooks(model: Any, recorder: Recorder) -> tuple[list[Any], list[str]]:
    """Forward and backward spans on the float64 modules of `model`: (hook handles, the modules' names)."""
    handles, names = [], []
    for path, module in float64_modules(model):
        name = f"{FLOAT64_MODULE_SPAN}{path} ({type(module).__name__})"
        forward, backward = recorder.span(SPAN, name), recorder.span(SPAN, name + " backward")
        handles.append(module.register_forward_pre_hook(_ForwardBegin(forward.begin_code)))
        handles.append(module.register_forward_hook(_ForwardEnd(forward.end_code, backward)))
        names.append(f"{path} ({type(module).__name__})")
    return handles, names


class _ForwardBegin:
    """Forward pre-hook: the forward span begins."""

    def __init__(self, code: int) -> None:
        self.code = code

    def __call__(self, module: Any, args: Any) -> None:
        hot.emit(self.code)


class _ForwardEnd:
    """Forward hook: the forward span ends; the backward span will begin when the output's gradient is
    computed and end when the input's is."""

    def __init__(self, code: int, backward: Any) -> None:
        self.code, self.backward = code, backward

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        hot.emit(self.code)
        first_in = next((a for a in args if getattr(a, "requires_grad", False)), None)
        out = output if getattr(output, "requires_grad", False) else None
        if out is not None and first_in is not None and getattr(out, "grad_fn", None) is not None:
            begin, end = self.backward.begin_code, self.backward.end_code
            out.register_hook(lambda grad: hot.emit(begin))
            first_in.register_hook(lambda grad: hot.emit(end))

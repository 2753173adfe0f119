"""A small CNN with a Profiler attached (hooks only, no op capture), and the per-step comparison of what
the hooks measured with the loop's own clock; used by tests/integration/test_torch_hooks.py and
tests/e2e/test_torch_hooks_timing.py."""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn as nn

from profiler import Profiler

from support.torch_loops import cifar_batch, small_cnn

#: The per-step tolerance of close_per_step.
TOL_MS = 1.0


def quiet_profiler(out, **kwargs) -> Profiler:
    """A Profiler without host or GPU counters."""
    return Profiler(out, host_counters=False, gpu_counters=False, **kwargs)


def attached(out, **attach_kwargs):
    """A fresh CNN, its SGD optimizer, one batch, and a Profiler attached to them (no op capture)."""
    torch.manual_seed(0)
    model, batch = small_cnn(), cifar_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    p = quiet_profiler(out)
    p.attach(model, optimizer, ops=False, **attach_kwargs)
    return model, optimizer, batch, p


def close_per_step(measured, truth) -> None:
    """Per-step agreement within TOL_MS for most steps (typically 0.05 ms): on a busy machine the
    OS or another thread holding the GIL (up to the 5 ms switch interval) can delay the loop
    between a hook and the test's own timestamp."""
    err = np.abs(np.asarray(measured) - np.asarray(truth))
    assert np.median(err) < TOL_MS / 4 and (err < TOL_MS).mean() >= 0.6, err


OPT_WORK_S = 0.02  # work done inside the optimizer's own step: it must land in the tail


class SlowSGD(torch.optim.SGD):
    """A subclass whose step does its own work, then calls super().step() (both levels are patched
    by torch: an SGD was created before, so SGD.step carries torch's hooks too)."""

    def step(self, closure=None):
        time.sleep(OPT_WORK_S)
        return super().step(closure)


class Lookahead:
    """A wrapper optimizer (not a torch Optimizer) that steps the attached inner one."""

    def __init__(self, inner):
        self.inner = inner

    def zero_grad(self):
        self.inner.zero_grad()

    def step(self):
        time.sleep(OPT_WORK_S)
        self.inner.step()


def train_steps(model, optimizer, x, y, steps, zero_grad_first=True, scaler=None, scheduler=None, poison=()):
    """`steps` training steps on one batch; `scaler` (a GradScaler) skips the steps in `poison`."""
    for i in range(steps):
        if zero_grad_first:
            optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            if i in poison:  # inf gradients: the scaler skips this step
                next(model.parameters()).grad.fill_(float("inf"))
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if not zero_grad_first:
            optimizer.zero_grad()

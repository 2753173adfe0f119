"""Real PyTorch training loops on the CPU for the torch capture / hooks tests and the benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import pandas as pd
import torch
import torch.nn as nn

from profiler import Profiler

BATCH = 32


def small_cnn() -> nn.Module:
    """A CIFAR-sized CNN: conv / batch norm / relu blocks, pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    )


def cifar_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One synthetic CIFAR-sized batch: images 3x32x32, labels in 0..9."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, 3, 32, 32, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    steps: int,
    load: Callable[[], None] = lambda: None,
    step_end: Optional[Callable[[], None]] = None,
) -> None:
    """The training loop: `load()` stands in for data loading; `step_end` for profiler.step()."""
    x, y = batch
    for _ in range(steps):
        load()
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step_end is not None:
            step_end()


def profiled_cnn_run(out: Path, steps: int = 6, load: Callable[[], None] = lambda: None, **profiler_kwargs) -> Profiler:
    """Train the CNN for `steps` steps under a Profiler attached to it, and analyse."""
    torch.manual_seed(0)
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    profiler = Profiler(out, host_counters=False, gpu_counters=False, **profiler_kwargs)
    profiler.attach(model, optimizer)
    train(model, optimizer, cifar_batch(), steps, load=load)
    profiler.analyse(progress=False)
    return profiler


def torch_capture_of(profiler: Profiler):
    """The TorchOps source of a profiler."""
    return next(s for s in profiler.sources if s.name == "torch")


def read_csv(out: Path, stem: str) -> pd.DataFrame:
    return pd.read_csv(out / f"{stem}_0.csv", keep_default_na=False)

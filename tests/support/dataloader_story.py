"""A ResNet-like CNN trained on the CPU from a real torch DataLoader whose Dataset is slow, profiled by
torch.profiler and exported with its own export_chrome_trace: the traces of tests/integration/test_gpu_view.py's
DataLoader story.

    python tests/support/dataloader_story.py NUM_WORKERS TRACE.json

Each batch costs BATCH * ITEM_SLEEP_S = 400 ms of loading (`time.sleep` in __getitem__: I/O-like, no
CPU), more than the model's step (150-350 ms on a loaded 2-core machine, less on an idle one). With
0 workers the loop waits that long every step. With 4 workers the iterator is created first and the
workers fill their prefetch queue (4 workers x prefetch_factor 4 = 16 batches) before the 1 + STEPS
steps begin, and they deliver 4 batches per 400 ms meanwhile: the loop never waits for a batch
(what remains is the scheduling of its own process on a loaded machine, ~20 ms in some steps).
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

BATCH = 8
ITEM_SLEEP_S = 0.05
STEPS = 11  # profiled (after one warm-up step); the advisor leaves the first out
PREFETCH = 4
#: How long the workers get to fill their prefetch queue: 3x the time each needs for its PREFETCH batches.
FILL_S = 3 * PREFETCH * BATCH * ITEM_SLEEP_S


class SlowImages(Dataset):
    """Synthetic 3x32x32 images whose loading sleeps ITEM_SLEEP_S each (a slow disk / decoder)."""

    def __len__(self) -> int:
        return BATCH * (STEPS + 8)

    def __getitem__(self, i: int):
        time.sleep(ITEM_SLEEP_S)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


class Block(nn.Module):
    """A residual block: two 3x3 conv + batch norm, the input added back."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, padding=1, bias=False),
            nn.BatchNorm2d(c),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def resnet_like(c: int = 24) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1, bias=False),
        nn.BatchNorm2d(c),
        nn.ReLU(),
        Block(c),
        Block(c),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(c, 10),
    )


def main(num_workers: int, trace: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # A batch from a worker is shared memory the loop opens by name: no handshake with the worker per
    # batch (file descriptors need the worker scheduled, 10-30 ms on a loaded machine).
    torch.multiprocessing.set_sharing_strategy("file_system")
    model = resnet_like()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    extra = {"prefetch_factor": PREFETCH} if num_workers else {}
    loader = DataLoader(SlowImages(), batch_size=BATCH, num_workers=num_workers, **extra)
    batches = iter(loader)
    if num_workers:
        time.sleep(FILL_S)
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1)
    ) as prof:
        for _ in range(1 + STEPS):
            x, y = next(batches)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(trace)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

"""A plain PyTorch training script with no profview code in it: run it under `profview run`.

    profview run sample_runs/plain_torch_loop.py [--steps 300] [--workers 1]

A small CNN trains on synthetic CIFAR-sized images from a real DataLoader whose dataset reads
each image from a simulated slow store (a sleep), so with one worker the loop waits for data
most of the time: the live view shows the split and the `input_bound` verdict while it runs.
`--workers 4` gives the loader enough workers to keep up.
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    """Synthetic 3x32x32 images, each read from a store that takes `read_s` seconds."""

    def __init__(self, n: int, read_s: float) -> None:
        self.n, self.read_s = n, read_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.read_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), int(i % 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--read-ms", type=float, default=1.5, help="time to read one image")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(
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
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(
        SlowImages(args.steps * args.batch, args.read_ms / 1e3),
        batch_size=args.batch,
        num_workers=args.workers,
        shuffle=True,
    )
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step:4d}  loss {loss.item():.3f}")
    print(f"trained {step + 1} steps")


if __name__ == "__main__":
    main()

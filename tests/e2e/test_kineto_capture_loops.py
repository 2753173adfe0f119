"""torch.profiler's DataLoader ranges, imported: a real training loop (a small residual CNN over a
dataset whose every item sleeps) traced here with 0 and with 4 DataLoader workers; the imported step
trace's data wait is those ranges, step by step, and what the workers save is measured in real time."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from profiler.analysis.results import analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace

pytestmark = pytest.mark.timing


class SlowImages:
    """A map-style dataset whose every item takes FETCH_S to load (sleeping: the time is the same on
    a busy machine): CIFAR-sized images and labels."""

    FETCH_S = 0.005

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        import torch

        time.sleep(self.FETCH_S)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


def _resnet_like():
    """A small residual CNN: stem, two residual blocks, pooled linear head."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(channels, channels, 3, padding=1),
                nn.BatchNorm2d(channels),
                nn.ReLU(),
                nn.Conv2d(channels, channels, 3, padding=1),
                nn.BatchNorm2d(channels),
            )

        def forward(self, x):
            return nn.functional.relu(x + self.body(x))

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        Block(16),
        Block(16),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def _record_training(path: Path, workers: int) -> Path:
    """A real training loop over SlowImages (batches of 8: 40 ms of loading each) under torch.profiler,
    with `workers` DataLoader workers; its steps 3..6 are traced to `path`."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = _resnet_like()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(SlowImages(), batch_size=8, num_workers=workers)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=2, warmup=1, active=4, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            prof.step()
            if i == 7:
                break
    return path


@pytest.fixture(scope="module")
def loader_traces(tmp_path_factory, torch_one_thread) -> dict[int, Path]:
    """Traces torch.profiler records here of the same loop with 0 and with 4 DataLoader workers."""
    out = tmp_path_factory.mktemp("loader")
    return {workers: _record_training(out / f"workers{workers}.json", workers) for workers in (0, 4)}


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 4 workers on 2 cores: they sleep
def test_dataloader_ranges_are_the_measured_data_wait(loader_traces) -> None:
    """torch.profiler's `enumerate(DataLoader)#..._next__` ranges are the data wait of the imported
    trace, step by step: with num_workers=0 every fetch loads a batch (>= 40 ms of sleeping), with 4
    workers the batches are ready ahead and the wait is a fraction of it."""
    waits = {}
    for workers, path in loader_traces.items():
        run = ensure_steps(read_kineto_trace(path))
        trace = analyse_run(run).step_trace
        assert trace["step"].tolist() == [3, 4, 5, 6]
        fetches = run.spans[run.spans["name"].str.startswith("enumerate(DataLoader)#")]
        assert len(fetches) == 4 and (run.ops["name"].astype(str).str.startswith("enumerate(").sum() == 0)
        step_of = np.searchsorted(run.steps["start_ns"].to_numpy(), fetches["start_ns"].to_numpy(), side="right") - 1
        per_step = np.bincount(step_of, weights=fetches["dur_ns"].to_numpy(), minlength=4) / 1e6
        assert trace["data_wait_ms"].to_numpy() == pytest.approx(per_step, abs=1e-6)
        # the fetch (and the ops collating its batch) is the iteration gap, not forward + backward
        assert (trace["iteration_gap_ms"] >= trace["data_wait_ms"]).all()
        assert trace["device_busy_ms"].isna().all() and trace["device_idle_ms"].isna().all()  # a CPU run
        waits[workers] = trace["data_wait_ms"].mean()
    fetch_ms = 8 * SlowImages.FETCH_S * 1000
    assert waits[0] >= fetch_ms
    assert waits[4] < 0.5 * waits[0]

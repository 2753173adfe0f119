"""What `profview run` installs in a script's process, in-process: run-time patches and their undo
(integrations/patching.py), the model found from an optimizer and the torch follower
(integrations/torch_auto.py). tests/e2e/test_run_command.py runs the whole launcher on real scripts."""

from __future__ import annotations

import importlib
import sys
import time

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from profiler import Profiler, TorchHooks  # noqa: E402
from profiler.integrations.patching import Patches  # noqa: E402
from profiler.integrations.torch_auto import TorchFollower, find_model  # noqa: E402

torch.set_num_threads(1)
FETCH_S = 0.03


class Wrapper(nn.Module):
    """A module holding another and nothing else (as DistributedDataParallel does)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


class SlowSamples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i):
        time.sleep(FETCH_S / 4)
        return torch.full((16,), float(i)), i % 4


def test_find_model_is_the_outermost_module_holding_the_optimizer_parameters():
    inner = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    outer = Wrapper(inner)
    head = nn.Linear(2, 2)
    with_more = nn.Sequential(inner, head)  # holds them too, and a parameter of its own
    params = {id(p) for p in inner.parameters()}
    assert find_model(params) is outer
    assert find_model({id(p) for p in with_more.parameters()}) is with_more
    assert find_model({id(p) for p in head.parameters()}) is head
    assert find_model({id(torch.zeros(1, requires_grad=True))}) is None


def test_patches_after_import_and_undo(tmp_path, monkeypatch):
    (tmp_path / "profview_late_module.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = []
    patches = Patches()
    patches.after_import("profview_late_module", got.append)
    hooks = len(sys.meta_path)
    assert got == []
    import profview_late_module

    assert got == [profview_late_module] and len(sys.meta_path) == hooks - 1
    patches.replace(profview_late_module, "VALUE", 42)
    assert profview_late_module.VALUE == 42
    patches.undo()
    assert profview_late_module.VALUE == 41
    never = Patches()
    never.after_import("profview_other_late_module", got.append)
    never.undo()  # undone before the import: the hook is gone
    assert len(sys.meta_path) == hooks - 1
    (tmp_path / "profview_other_late_module.py").write_text("")
    importlib.import_module("profview_other_late_module")

    assert got == [profview_late_module]


def test_the_follower_attaches_the_first_optimizer_and_times_loader_fetches(tmp_path):
    originals = (torch.optim.Optimizer.__init__, torch.utils.data.DataLoader.__iter__)
    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    patches = Patches()
    follower = TorchFollower(p, patches, lambda: True)
    follower.install()  # torch is imported: patched now
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.optim.SGD(model.parameters(), lr=0.01)  # a second optimizer is not followed
    assert follower.model is model and follower.optimizer is optimizer
    assert [type(s) for s in p.sources] == [TorchHooks]
    loader = torch.utils.data.DataLoader(SlowSamples(), batch_size=4)
    batches = iter(loader)
    assert len(batches) == 3
    for x, y in batches:  # no profiler.step(): the optimizer ends the steps
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    patches.undo()
    assert (torch.optim.Optimizer.__init__, torch.utils.data.DataLoader.__iter__) == originals
    p.analyse(progress=False, quiet=True)
    steps = pd.read_csv(tmp_path / "step_trace_0.csv")
    assert steps["step"].tolist() == [0, 1, 2]
    assert (steps["data_wait_ms"] >= FETCH_S * 1e3).all()  # four samples of FETCH_S / 4 per batch
    assert (steps["fp_bp_ms"] > 0).all()


def test_a_profiled_data_loader_under_the_follower_is_timed_and_probed_once(tmp_path):
    """A script that already wraps its DataLoader in ProfiledDataLoader, run by `profview run`: the follower's
    DataLoader patch leaves the loader it iterates alone (each fetch was two nested `data` phases, and the worker
    queue two probes: 2 puts and 2 gets per batch, its sizes counted twice)."""
    import json

    from profiler.data.torch_data import ProfiledDataLoader

    p = Profiler(tmp_path, host_counters=False, gpu_counters=False)
    patches = Patches()
    TorchFollower(p, patches, lambda: True).install()
    loader = ProfiledDataLoader(torch.utils.data.DataLoader(SlowSamples(), batch_size=4, num_workers=2))
    try:
        batches = [x for x, _ in loader]
        for _ in batches:
            p.step()
    finally:
        patches.undo()
    p.analyse(progress=False, quiet=True)
    timeline = json.loads((tmp_path / "timeline_0.json").read_text())
    events = timeline["traceEvents"] if isinstance(timeline, dict) else timeline
    assert len(batches) == 3 and sum(e.get("name") == "data" for e in events) == 3 + 1  # + the one that ends it
    queue = pd.read_csv(tmp_path / "data_queue_0.csv")
    assert queue.groupby("event").size().to_dict() == {"get": 3, "put": 3}
    assert queue["size"].max() <= queue["capacity"].max()

"""A small real training loop recorded with the op options the TensorBoard plugin's memory and module
views need (`profile_memory=True`, `with_modules=True`, and `with_stack=True`, without which torch 2.13
writes no module frames): its fixture is tests/data/recorded/views/torch_memory_modules
(scripts/record_fixtures.py), read by tests/integration/test_memory_and_modules.py.

What the loop does that the views must show: a block module called twice per forward (one module, two
calls per step), modules nested two deep, and a 1 MiB tensor allocated in one step and freed two steps
later (a block whose life crosses steps)."""

from __future__ import annotations

from pathlib import Path

from profiler import Profiler

STEPS = 6
#: bytes of the tensor held across steps: allocated in step HELD_FROM, freed in step HELD_FROM + 2
HELD_BYTES = 1 << 20
HELD_FROM = 2


def build_model():
    import torch

    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(64, 64)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.block(self.block(x)))  # one module, called twice

    return Net()


def run(out: Path) -> dict:
    """Record the loop into `out` (nothing analysed) and return what it did."""
    import torch

    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 10)
    p = Profiler(
        output_path=out,
        framework="torch",
        host_counters=False,
        gpu_counters=False,
        profile_memory=True,
        with_stack=True,
        with_modules=True,
    )
    held = []
    with p:
        for step in range(STEPS):
            if step == HELD_FROM:
                held.append(torch.ones(HELD_BYTES // 4))  # float32: HELD_BYTES
            if step == HELD_FROM + 2:
                held.clear()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            p.step()
    return {"steps": STEPS, "held_bytes": HELD_BYTES, "held_from_step": HELD_FROM, "block_calls_per_step": 2}

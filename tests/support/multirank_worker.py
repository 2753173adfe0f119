"""One rank of a small DDP training job on CPU (gloo), profiled; launched like torchrun by tests/e2e/test_multirank.py.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python multirank_worker.py OUT [options]

Options inject the faults the tests look for: `--delay-rank R --delay-ms D` sleeps D ms inside
rank R's forward (a straggler); `--kill-rank R --kill-after K` makes rank R die with os._exit after
K steps (no clean stop, no analyse); the survivors' next all-reduce fails or times out, they stop
profiling and analyse what they have. Every rank prints one JSON line with what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from profiler import Profiler


class Net(nn.Module):
    """A small MLP whose forward can be slowed down (the injected straggler)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.body(x)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--delay-rank", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-after", type=int, default=3)
    p.add_argument("--step-sleep-ms", type=float, default=0.0, help="host work between steps (iteration gap)")
    p.add_argument("--ranks", type=str, default="", help="profile only these ranks (comma-separated)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="gloo timeout: a dead peer fails collectives")
    p.add_argument("--cluster-timeout-s", type=float, default=60.0)
    p.add_argument("--broadcast", action="store_true", help="also call dist.broadcast / all_gather each step")
    return p.parse_args()


def main() -> int:
    args = parse()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = Net(args.delay_ms / 1e3 if rank == args.delay_rank else 0.0)
    model = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ranks = [int(r) for r in args.ranks.split(",")] if args.ranks else None
    profiler = Profiler(args.out, ranks=ranks, host_counters=False, gpu_counters=False, flush_interval_s=0.05)
    profiler.attach(model, optimizer, ops=False)
    gen = torch.Generator().manual_seed(rank)
    done, error = 0, ""
    try:
        for step in range(args.steps):
            if rank == args.kill_rank and step == args.kill_after:
                time.sleep(0.2)  # let the flusher write what this rank recorded
                os._exit(17)
            time.sleep(args.step_sleep_ms / 1e3)
            x, y = torch.randn(32, 64, generator=gen), torch.randint(0, 10, (32,), generator=gen)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if args.broadcast:
                dist.broadcast(torch.ones(256), src=0)
                dist.all_gather([torch.zeros(16) for _ in range(dist.get_world_size())], torch.ones(16))
            optimizer.step()
            optimizer.zero_grad()
            done += 1
    except RuntimeError as exc:  # a peer died: the collective failed or timed out
        error = str(exc).splitlines()[0][:200]
    written = profiler.analyse(progress=False, cluster_timeout_s=args.cluster_timeout_s)
    print(
        json.dumps({"rank": rank, "steps": done, "error": error, "written": sorted(p.name for p in written)}),
        flush=True,
    )
    if not error:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

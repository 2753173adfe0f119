"""A small ResNet on synthetic CIFAR-10-sized data (PyTorch, CPU), tuned in four profiled stages.

    python sample_runs/resnet_cifar_torch.py [--out profiler_data/resnet] [--steps 30] [--stages abcd]
    profview profiler_data/resnet/a_one_worker --compare profiler_data/resnet/b_prefetch

The story of MindSpore's ResNet-50 migration / performance-tuning guide, on a CPU:

  a_one_worker   one DataLoader worker reads and augments every image from a slow file store
                 (its latency is set so that a batch takes 2.5 times the compute) and cannot keep
                 up: the loader queue is empty at every get and
                 the iteration gap is about half the step. The advisor says input_bound.
  b_prefetch     four workers with prefetch_factor=4 (the advisor's suggestion): the queue stays
                 full, the gap collapses and the step time drops.
  c_float64      a "numerically careful" variant computes every normalisation (GroupNorm), activation
                 (ReLU) and residual sum in float64: a cast in and a cast out around each, forward and
                 backward. Cast (aten::to / _to_copy / copy_) takes ~15-20 % of op time, 5-8x the
                 float32 stages'; the advisor points at it.
  d_fixed        float32 throughout again: balanced.

Each stage is a profile directory under --out; the script prints each stage's step breakdown,
the advisor's verdict and the change against the previous stage, computed exactly as
`profview compare PREVIOUS STAGE` computes it. The model runs on one thread (torch.set_num_threads(1))
so that on a two-core machine the loader workers have the other core.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from profiler import ProfiledDataLoader, Profiler
from profiler.analysis.compare import interval_text
from profiler.analysis.findings.operators import OP_FAMILIES
from viewer.inputs import load_input
from viewer.pages.compare import comparison
from viewer.stats import verdict_phases

BATCH = 32
LOAD_TO_COMPUTE = 2.5  # one worker needs this many times the compute time to load a batch (stage a)
MEAN = np.array([0.49, 0.48, 0.45], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.25, 0.24, 0.26], dtype=np.float32).reshape(3, 1, 1)


class SyntheticCIFAR(Dataset):
    """CIFAR-10-sized images (3x32x32 uint8, 10 classes) made once; each read pays the store's latency
    and does the usual augmentation (pad-4 random crop, horizontal flip, normalise) in numpy."""

    def __init__(self, n: int, read_ms: float, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=n)
        self.read_ms = read_ms

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.read_ms / 1e3)
        return self.augmented(i)

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        """A batch read in one request to the store (the DataLoader calls this when it exists): one wait
        for all its images' latency. One sleep, not one per image: each sleep wakes up late on a busy
        machine, and 32 late wake-ups a batch made even four workers too slow for the model at load 4."""
        time.sleep(len(indices) * self.read_ms / 1e3)
        return [self.augmented(i) for i in indices]

    def augmented(self, i: int) -> tuple[torch.Tensor, int]:
        """Image `i` after the pad-4 random crop, the random flip and normalisation."""
        rng = np.random.default_rng(i)
        padded = np.pad(self.images[i], ((0, 0), (4, 4), (4, 4)), mode="reflect")
        y, x = rng.integers(0, 9, size=2)
        img = padded[:, y : y + 32, x : x + 32]
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img.astype(np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(img)), int(self.labels[i])


GROUPS = 8  # GroupNorm groups (GroupNorm: a ResNet for small per-device batches)


class Float64GroupNorm(nn.GroupNorm):
    """GroupNorm computed in float64 "for stability" (stage c's mistake): a cast in, a cast out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.double()).float()


class Float64ReLU(nn.Module):
    """ReLU computed in float64 "for accuracy" (stage c's mistake): a cast in, a cast out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.double()).float()


def norm_layer(careful: bool, channels: int) -> nn.Module:
    """GroupNorm, or the float64 one of stage c (its parameters in float64 too)."""
    return Float64GroupNorm(GROUPS, channels).double() if careful else nn.GroupNorm(GROUPS, channels)


def act_layer(careful: bool) -> nn.Module:
    """ReLU, or the float64 one of stage c."""
    return Float64ReLU() if careful else nn.ReLU(inplace=True)


class Block(nn.Module):
    """ResNet basic block: conv-norm-relu-conv-norm plus the shortcut; `careful` does the norms, the
    activation and the residual sum in float64 (stage c)."""

    def __init__(self, cin: int, cout: int, stride: int, careful: bool = False) -> None:
        super().__init__()
        self.careful = careful
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            norm_layer(careful, cout),
            act_layer(careful),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            norm_layer(careful, cout),
        )
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm_layer(careful, cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        body, short = self.body(x), self.short(x)
        if self.careful:
            return torch.relu(body.double() + short.double()).float()
        return torch.relu(body + short)


def resnet8(careful: bool = False) -> nn.Module:
    """A CIFAR ResNet with GroupNorm and one basic block per stage (32, 64, 128 channels: the convolutions
    carry the compute, so the float64 mistake's casts stand out by themselves)."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False),
        norm_layer(careful, 32),
        act_layer(careful),
        Block(32, 32, 1, careful),
        Block(32, 64, 2, careful),
        Block(64, 128, 2, careful),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )


#: stage -> (directory name, what it changes, loader options, float64 "care")
STAGES: dict[str, tuple[str, str, dict, bool]] = {
    "a": (
        "a_one_worker",
        "one loader worker, no prefetch to speak of",
        {"num_workers": 1, "prefetch_factor": 2},
        False,
    ),
    "b": (
        "b_prefetch",
        "4 loader workers, prefetch_factor=4",
        {"num_workers": 4, "prefetch_factor": 4, "persistent_workers": True},
        False,
    ),
    "c": (
        "c_float64",
        "GroupNorm, ReLU and residual sums in float64 (casts around each)",
        {"num_workers": 4, "prefetch_factor": 4, "persistent_workers": True},
        True,
    ),
    "d": (
        "d_fixed",
        "back to float32 throughout",
        {"num_workers": 4, "prefetch_factor": 4, "persistent_workers": True},
        False,
    ),
}


def store_latency_ms(batches: int = 6) -> float:
    """Per-image latency of the simulated file store: one worker then loads a batch in about
    LOAD_TO_COMPUTE times this machine's forward + backward time, so stage a is input-bound
    (gap ~ half the step) on a fast machine and a slow one alike. The fastest of the timed batches, not
    their median: a busy moment while timing (another job's burst) must not slow the store down for good,
    which left even stage b's four workers behind the model on a loaded machine."""
    model = resnet8()
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        nn.functional.cross_entropy(model(x), y).backward()
        times.append(time.perf_counter() - t0)
    return LOAD_TO_COMPUTE * float(np.min(times[1:])) * 1e3 / BATCH


def train_stage(
    out: Path, steps: int, loader_options: dict, careful: bool, read_ms: float, gzip_timeline: bool = False
) -> Path:
    """Profile `steps` training steps of resnet8 (float64 `careful` or not) with the given loader into `out`
    (emptied first)."""
    shutil.rmtree(out, ignore_errors=True)  # a raw store holds one recording: start afresh
    torch.manual_seed(0)
    model = resnet8(careful)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = ProfiledDataLoader(
        DataLoader(SyntheticCIFAR(BATCH * (steps + 1), read_ms), batch_size=BATCH, shuffle=False, **loader_options)
    )
    profiler = Profiler(
        output_path=out, framework="torch", gpu_counters=False, gzip_timeline=gzip_timeline, record_shapes=True
    )  # input types: the float64 ops of stage c
    profiler.attach(model, optimizer)  # fp start, bp end and the step end come from hooks
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # ends the profiler step (attach)
        if i + 1 == steps:
            break
    profiler.analyse(progress=False)
    return out


def stage_line(name: str, what: str, directory: Path) -> str:
    """Median step, its split, and the advisor's verdict, from the files analyse() wrote (the step
    figures as `profview --summary` shows them: the verdict's steady steps)."""
    run = load_input(directory)[0]
    phases = verdict_phases(run.step_trace, run.report)
    m, share = phases["median_ms"], phases["share_pct"]
    report = run.report or {}
    top = (report.get("findings") or [{}])[0]
    lines = [
        f"[{name}] {what}:",
        f"    median step {m['step']:.1f} ms — iteration gap {m['iteration gap']:.1f} ms "
        f"({share['iteration gap']:.0f} % of step time), forward+backward {m['forward + backward']:.1f} ms, "
        f"tail {m['tail']:.1f} ms",
        f"    advisor: {report.get('verdict')} — {top.get('title', 'no finding')}",
    ]
    queue = (run.queue_summary or {}).get("verdict") or {}
    if queue:
        stats = {q["queue"]: q for q in run.queue_summary.get("queues", [])}
        feed = stats.get(queue.get("feed_queue"), {})
        lines.append(
            f"    loader queue: empty at {100 * (feed.get('empty_ratio') or 0):.0f} % of gets, "
            f"full at {100 * (feed.get('full_ratio') or 0):.0f} % (queue verdict: {queue.get('kind')})"
        )
    if run.op_type is not None and len(run.op_type):
        shares = run.op_type.set_index("op_type")["share_pct"]
        cast = shares[shares.index.str.contains(OP_FAMILIES["cast"][0])].sum()
        norm = shares[shares.index.str.contains(OP_FAMILIES["norm"][0])].sum()
        lines.append(f"    op time: Cast {cast:.0f} %, normalisation {norm:.0f} %")
    return "\n".join(lines)


def change_line(previous: Path, current: Path) -> str:
    """The change against the previous stage, as `profview compare previous current` reports it."""
    c = comparison(load_input(previous), load_input(current))
    v = c.verdict
    phases = c.phases.set_index("column")
    resolved = ", ".join(f["kind"] for f in c.findings["resolved"]) or "none"
    introduced = ", ".join(f["kind"] for f in c.findings["introduced"]) or "none"
    return (
        f"    vs {previous.name}: mean step {v['base_mean_step_ms']:.1f} -> {v['new_mean_step_ms']:.1f} ms "
        f"({v['delta_pct']:+.0f} %, {interval_text(v)}: {v['outcome']}); "
        f"iteration gap {phases.at['iteration_gap_ms', 'delta_ms']:+.1f} ms, "
        f"forward+backward {phases.at['fp_bp_ms', 'delta_ms']:+.1f} ms; findings resolved: {resolved}; "
        f"introduced: {introduced}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("profiler_data/resnet"))
    ap.add_argument("--steps", type=int, default=30, help="profiled steps per stage (default 30)")
    ap.add_argument("--stages", default="abcd", help="which stages to run, in order (default abcd)")
    ap.add_argument("--gzip-timeline", action="store_true", help="write timeline_0.json.gz (smaller)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    # 4 workers on 2 cores is deliberate: they spend most of their time waiting for the file store
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    read_ms = store_latency_ms()
    print(f"simulated file store: {read_ms:.2f} ms per image ({read_ms * BATCH:.0f} ms per batch of {BATCH})")
    previous = None
    for key in args.stages:
        name, what, options, careful = STAGES[key]
        directory = train_stage(args.out / name, args.steps, options, careful, read_ms, args.gzip_timeline)
        print(stage_line(name, what, directory))
        if previous is not None:
            print(change_line(previous, directory))
        previous = directory
    print(f"See: profview {args.out / STAGES[args.stages[0]][0]}   (or add --compare DIR for the diff page)")


if __name__ == "__main__":
    main()

"""A bank of real PyTorch training loops, each injecting ONE bottleneck, with the verdict a correct profiler gives.

    from support.scenario_bank import SCENARIOS, run_scenario
    outcome = run_scenario(SCENARIOS["data_sleep_w1"], tmp_dir)
    outcome.problems      # [] when profview said what a correct profiler must say
    outcome.insane        # [] when the injection had the intended effect (the loop's own clocks)

Used by tests/e2e/test_scenario_bank.py (one test per scenario) and benchmarks/bench_verdicts.py (the table,
quiet and under a busy background process). Everything is real: torch DataLoaders with real worker
processes, real models, real optimizers, real `torch.distributed` (gloo) processes. Only the public API
of profview is used (`from profiler import ...`, `Profiler.attach / phase / step / analyse`, the files
analyse() writes), so the bank survives moves inside the package.

Each scenario is a small function that trains a tiny model for ~20-40 steps into its own output
directory, measures what it injected with its own clock (`time.perf_counter`, independent of
profview) and returns those measurements (`truth`). Then:

- `sanity(outcome)`: the injection really had the intended effect (e.g. the loop measured that it
  waited for data >= 50 % of its time). A failure here is a broken scenario, never a profview bug.
- `judge(outcome)`: what a correct profiler must say: the verdict / the finding kind, and the key
  numbers the finding claims (with generous margins, never at a threshold's edge). Each problem is a
  sentence; [] means right.
- `wrong_today` (from `WRONG_TODAY`): when profview gets it wrong today, the precise current wrong
  behaviour. The test is an xfail(strict=True, raises=WrongVerdict) with this reason, so it turns into
  an XPASS failure once fixed; `flaky_today` scenarios (wrong in some runs only: their answer today
  depends on timing) are xfail(strict=False).

Only one Profiler may record at a time in a process: run scenarios one after another.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run from a checkout without installing (and the DDP workers)
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from profiler import ProfiledDataLoader, Profiler, ProfilerAction, schedule  # noqa: E402

#: bottleneck verdicts of report_{rank}.json (docs/formats.md "report")
BOTTLENECKS = (
    "input_bound",
    "transmission_bound",
    "host_bound",
    "gap_bound",
    "op_hotspot",
    "tail_bound",
    "comm_bound",
    "step_outliers",
    "memory_growth",
    "profiler_overhead",
    "straggler_rank",
)
WARMUP = 1  # the advisor's default warmup_steps: statistics start at step 1

# ----------------------------------------------------------------------------------------- outcome


@dataclass
class Outcome:
    """What a scenario's run left behind: profview's files, the loop's own measurements, the wall time."""

    name: str
    out: Path
    truth: dict[str, Any]
    seconds: float = 0.0
    report: dict = field(default_factory=dict)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    queue: Optional[dict] = None
    info: dict = field(default_factory=dict)
    op_type: Optional[pd.DataFrame] = None
    cluster: Optional[dict] = None
    problems: list[str] = field(default_factory=list)  # judge(): what profview got wrong
    insane: list[str] = field(default_factory=list)  # sanity(): what the injection failed to do
    figures: str = ""

    @classmethod
    def load(cls, name: str, out: Path, truth: dict, rank: int = 0) -> Outcome:
        o = cls(name, out, truth)
        read = lambda stem: json.loads((out / stem).read_text()) if (out / stem).is_file() else None
        o.report = read(f"report_{rank}.json") or {}
        o.info = read(f"profiler_info_{rank}.json") or {}
        o.queue = read(f"queue_summary_{rank}.json")
        o.cluster = read("cluster_summary.json")
        if (out / f"step_trace_{rank}.csv").is_file():
            o.steps = pd.read_csv(out / f"step_trace_{rank}.csv")
        if (out / f"op_type_{rank}.csv").is_file():
            o.op_type = pd.read_csv(out / f"op_type_{rank}.csv")
        return o

    @property
    def verdict(self) -> str:
        return str(self.report.get("verdict", "<no report>"))

    @property
    def findings(self) -> list[dict]:
        return list(self.report.get("findings") or [])

    def finding(self, kind: str) -> Optional[dict]:
        """The first (highest-ranked) finding of this kind, or None."""
        return next((f for f in self.findings if f.get("kind") == kind), None)

    @property
    def top(self) -> str:
        """The verdict and the top finding's title, as `profview DIR --summary` leads with them."""
        first = self.findings[0] if self.findings else None
        title = f"{first['kind']}/{first['severity']}: {first['title']}" if first else "no finding"
        return f"{self.verdict} ({title})"

    @property
    def analysed(self) -> pd.DataFrame:
        """The step trace rows the advisor's statistics use (the warm-up step left out)."""
        return self.steps.iloc[WARMUP:] if len(self.steps) - WARMUP >= 3 else self.steps

    def mean(self, column: str) -> float:
        return float(self.analysed[column].mean()) if len(self.analysed) else float("nan")

    def median(self, column: str) -> float:
        return float(self.analysed[column].median()) if len(self.analysed) else float("nan")

    @property
    def right(self) -> bool:
        return not self.problems and not self.insane


@dataclass(frozen=True)
class Scenario:
    """One training loop with one injected bottleneck and what a correct profiler says about it."""

    name: str
    injected: str  # what the loop does wrong, in one line
    expected: str  # the verdict / finding a correct profiler gives
    loop: Callable[[Path], dict]  # trains into the directory, returns its own measurements
    judge: Callable[[Outcome], list[str]]  # [] = profview says what a correct profiler must say
    sanity: Callable[[Outcome], list[str]]  # [] = the injection had the intended effect
    figures: Callable[[Outcome], str]  # key figures for the benchmark's table
    wrong_today: str = ""  # non-empty: profview's current wrong answer (xfail reason)
    flaky_today: bool = False  # wrong_today happens in some runs only (xfail, not strict)
    multiprocess: bool = False  # spawns its own processes (DDP)


class WrongVerdict(AssertionError):
    """profview did not say what a correct profiler says about a scenario (the tests' xfail raises= this,
    so a scenario that breaks in any other way still fails)."""


# ----------------------------------------------------------------------------------------- checks


def near(value: float, target: float, rel: float = 0.35, abs_ms: float = 3.0) -> bool:
    """Within rel x target + abs_ms of the target: generous, for a busy 2-core machine."""
    return abs(value - target) <= rel * abs(target) + abs_ms


def verdict_is(o: Outcome, kind: str) -> list[str]:
    if o.verdict == kind:
        return []
    return [f"verdict is {o.top}, expected {kind}"]


def high_finding(o: Outcome, kind: str) -> list[str]:
    f = o.finding(kind)
    if f is None:
        return [f"no {kind} finding (findings: {[x['kind'] + '/' + x['severity'] for x in o.findings]})"]
    if f["severity"] != "high":
        return [f"{kind} finding is only {f['severity']} ({f['at_stake_pct']:.1f} % at stake)"]
    return []


def step_count_is(o: Outcome, iterations: int, what: str = "training iterations") -> list[str]:
    n = len(o.steps)
    return [] if n == iterations else [f"step_trace_0.csv has {n} steps for {iterations} {what}"]


def share_ms(o: Outcome, part: str) -> float:
    """The loop's own `part` (ms per iteration, after the first) as a % of its mean iteration."""
    t = o.truth
    return 100.0 * np.mean(t[part][WARMUP:]) / np.mean(t["iter_ms"][WARMUP:])


def truth_mean(o: Outcome, part: str) -> float:
    return float(np.mean(o.truth[part][WARMUP:]))


# ----------------------------------------------------------------------------------------- building blocks


def mlp(inputs: int = 256, hidden: int = 512, depth: int = 3, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(inputs, hidden), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden, classes))


def busy_wait(seconds: float) -> None:
    """CPU-bound work (decoding, augmentation) that holds the core and the GIL for `seconds`."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


class SlowDataset(Dataset):
    """Feature vectors whose __getitem__ costs `item_ms`: sleeping (I/O bound: a slow file store)
    or spinning (CPU bound: decoding / augmentation in Python)."""

    def __init__(self, n: int, item_ms: float, cpu: bool, features: int = 256, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, features, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.item_s, self.cpu = item_ms / 1e3, cpu

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.item_s:
            busy_wait(self.item_s) if self.cpu else time.sleep(self.item_s)
        return self.x[i], self.y[i]


def loader(
    batch: int, steps: int, item_ms: float = 0.0, cpu: bool = False, workers: int = 0, features: int = 256
) -> ProfiledDataLoader:
    """A real torch DataLoader (real worker processes when workers > 0) wrapped by ProfiledDataLoader."""
    options = {"num_workers": workers}
    if workers:
        options["prefetch_factor"] = 2
    ds = SlowDataset(batch * (steps + 2), item_ms, cpu, features)
    return ProfiledDataLoader(DataLoader(ds, batch_size=batch, shuffle=False, **options))


class BatchedDataset(Dataset):
    """Whole batches per index (pre-batched shards, DataLoader(batch_size=None)): the cheapest loader,
    or, with `read_ms`, shards read from a slow store (one time.sleep per batch)."""

    def __init__(self, batch: int, n: int, features: int, read_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, batch, features, generator=g)
        self.y = torch.randint(0, 10, (n, batch), generator=g)
        self.read_s = read_ms / 1e3

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.read_s:
            time.sleep(self.read_s)
        return self.x[i].clone(), self.y[i].clone()


def fast_loader(batch: int, steps: int, features: int = 256, workers: int = 2) -> ProfiledDataLoader:
    """A DataLoader of pre-batched data with `workers` workers: batches are ready long before they are needed."""
    return ProfiledDataLoader(
        DataLoader(BatchedDataset(batch, steps + 2, features), batch_size=None, num_workers=workers)
    )


class StartTogether:
    """worker_init_fn: every worker waits until the same moment (perf_counter is CLOCK_MONOTONIC, one clock
    for all processes), as workers start on an idle machine, whatever forking them cost on a busy one."""

    def __init__(self, delay_s: float) -> None:
        self.at = time.perf_counter() + delay_s

    def __call__(self, worker_id: int) -> None:
        time.sleep(max(0.0, self.at - time.perf_counter()))


def memory_batches(batch: int, n: int, features: int = 256, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches already in memory (no DataLoader): a synthetic benchmark, a cached dataset."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, features, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(n)]


def new_profiler(out: Path, **kw) -> Profiler:
    kw.setdefault("host_counters", False)
    kw.setdefault("gpu_counters", False)
    return Profiler(out, **kw)


class Clock:
    """The loop's own clock: per-iteration durations of named parts, and of whole iterations."""

    def __init__(self) -> None:
        self.parts: dict[str, list[float]] = {}
        self.ends: list[float] = [time.perf_counter()]
        self._t = 0.0

    def begin(self) -> None:
        self._t = time.perf_counter()

    def end(self, part: str) -> None:
        self.parts.setdefault(part, []).append(1e3 * (time.perf_counter() - self._t))

    def iteration(self) -> None:
        self.ends.append(time.perf_counter())

    def timed(self, iterable, part: str = "wait_ms"):
        """Yield from `iterable`, timing each next() as `part`."""
        it = iter(iterable)
        while True:
            self.begin()
            try:
                item = next(it)
            except StopIteration:
                return
            self.end(part)
            yield item

    def truth(self, **extra) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.parts)
        out["iter_ms"] = list(1e3 * np.diff(self.ends))
        out["iterations"] = len(self.ends) - 1
        out.update(extra)
        return out


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


# ----------------------------------------------------------------------------------------- input bound

DATA_STEPS = 30  # 29 analysed steps (odd: see data_sleep_w2)
DATA_BATCH = 32


def attached_training(
    out: Path, model: nn.Module, optimizer: torch.optim.Optimizer, data, steps: int, ops_schedule=None
) -> Clock:
    """The plain loop: `steps` training steps on `data` with attach(model, optimizer) marking them (and
    capturing ops on `ops_schedule`, when given), each batch's wait timed by the loop's own clock; analysed.
    Returns the clock."""
    clock = Clock()
    profiler = new_profiler(out, **({"ops_schedule": ops_schedule} if ops_schedule is not None else {}))
    profiler.attach(model, optimizer, ops=ops_schedule is not None)
    for i, (x, y) in enumerate(clock.timed(data)):
        train_step(model, optimizer, x, y)
        clock.iteration()
        if i + 1 == steps:
            break
    profiler.analyse(progress=False)
    return clock


def data_loop(workers: int, batch_ms: float, cpu: bool, steps: int = DATA_STEPS) -> Callable[[Path], dict]:
    """Slow __getitem__ (batch_ms per batch of DATA_BATCH items, per worker), torch DataLoader with
    `workers` processes, a small MLP (~3 ms forward + backward), step boundaries from attach()."""

    def run(out: Path) -> dict:
        torch.manual_seed(0)
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        data = loader(DATA_BATCH, steps, batch_ms / DATA_BATCH, cpu, workers)
        return attached_training(out, model, optimizer, data, steps).truth(batch_ms=batch_ms, workers=workers)

    return run


def shard_loop(workers: int, batch_ms: float, steps: int) -> Callable[[Path], dict]:
    """Pre-batched shards read from a slow store (time.sleep(batch_ms) per __getitem__, one batch each),
    `workers` DataLoader workers that start together; the small MLP; attach()."""

    def run(out: Path) -> dict:
        torch.manual_seed(0)
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        shards = BatchedDataset(DATA_BATCH, steps + 2, 256, read_ms=batch_ms)
        data = ProfiledDataLoader(
            DataLoader(shards, batch_size=None, num_workers=workers, worker_init_fn=StartTogether(0.5))
        )
        return attached_training(out, model, optimizer, data, steps).truth(batch_ms=batch_ms, workers=workers)

    return run


def capture_only_loop(workers: int, batch_ms: float, active: int, steps: int = DATA_STEPS) -> Callable[[Path], dict]:
    """A plain torch DataLoader (nothing of profview's times its fetches: no ProfiledDataLoader, no iterate())
    with `workers` processes and a slow __getitem__, attach(model, optimizer) with op capture on `active` steps
    (an ops_schedule): torch.profiler's DataLoader ranges, in those steps only, are all that measures the wait."""

    def run(out: Path) -> dict:
        torch.manual_seed(0)
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        items = SlowDataset(DATA_BATCH * (steps + 2), batch_ms / DATA_BATCH, False)
        data = DataLoader(items, batch_size=DATA_BATCH, num_workers=workers, prefetch_factor=2)
        kw, captured = op_schedule(active, steps)
        clock = attached_training(out, model, optimizer, data, steps, kw["ops_schedule"])
        return clock.truth(batch_ms=batch_ms, workers=workers, captured=len(captured), captured_steps=captured)

    return run


def judge_input_captured(o: Outcome) -> list[str]:
    """judge_input, and the wait is what the captured steps measured: a number there, empty (not 0) in the
    others, whose gap the report does not call host work."""
    problems = judge_input(o)
    captured = o.steps["step"].isin(o.truth["captured_steps"])
    if o.steps["data_wait_ms"][~captured].notna().any() or o.steps["gap_host_ms"][~captured].notna().any():
        problems.append("data_wait_ms / gap_host_ms given in steps that did not measure the data wait")
    if o.steps["data_wait_ms"][captured].isna().any():
        problems.append("data_wait_ms empty in a captured step")
    if o.finding("host_bound") is not None:
        problems.append("the unmeasured steps' gap reported as host work")
    return problems


def judge_input(o: Outcome) -> list[str]:
    wait = truth_mean(o, "wait_ms")
    problems = verdict_is(o, "input_bound")
    f = o.finding("input_bound")
    if f is not None and not near(f["at_stake_ms"], wait):
        problems.append(
            f"input_bound puts {f['at_stake_ms']:.1f} ms per step at stake, the loop waited "
            f"{wait:.1f} ms per step on average"
        )
    gap = o.mean("iteration_gap_ms")
    if not near(gap, wait):
        problems.append(f"mean iteration gap {gap:.1f} ms, the loop waited {wait:.1f} ms per step for data")
    return problems


def sane_input(o: Outcome) -> list[str]:
    share = share_ms(o, "wait_ms")
    return [] if share >= 50 else [f"the loop waited for data only {share:.0f} % of its time (want >= 50 %)"]


def figures_input(o: Outcome) -> str:
    q = (o.queue or {}).get("verdict") or {}
    stats = {x["queue"]: x for x in (o.queue or {}).get("queues", [])}
    empty = stats.get(q.get("feed_queue"), {}).get("empty_ratio")
    queue = f"; queue {q.get('kind')} (empty {100 * empty:.0f} %)" if q else "; no queue probed"
    return (
        f"loop waits {truth_mean(o, 'wait_ms'):.1f} ms/step = {share_ms(o, 'wait_ms'):.0f} %; "
        f"gap mean {o.mean('iteration_gap_ms'):.1f} median {o.median('iteration_gap_ms'):.1f} ms{queue}"
    )


def input_scenario(name: str, workers: int, batch_ms: float, cpu: bool, steps: int = DATA_STEPS) -> Scenario:
    kind = "busy-loop (CPU-bound)" if cpu else "time.sleep (I/O-bound)"
    per = f"{batch_ms:.0f} ms per batch per worker" if workers else f"{batch_ms:.0f} ms per batch"
    return Scenario(
        name,
        f"slow __getitem__, {kind}, {per}, DataLoader num_workers={workers}, {steps} steps",
        "input_bound",
        data_loop(workers, batch_ms, cpu, steps),
        judge_input,
        sane_input,
        figures_input,
    )


# ----------------------------------------------------------------------------------------- compute bound


def compute_bound(out: Path) -> dict:
    """A wider MLP (~50 ms forward + backward) fed by 2 workers that have each batch ready long before."""
    torch.manual_seed(0)
    steps = 24
    model = mlp(hidden=1024)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = fast_loader(256, steps)
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for i, (x, y) in enumerate(clock.timed(data)):
        clock.begin()
        train_step(model, optimizer, x, y)
        clock.end("compute_ms")
        clock.iteration()
        if i + 1 == steps:
            break
    profiler.analyse(progress=False)
    return clock.truth()


def loop_outlier_share(o: Outcome) -> float:
    """The outlier rule (Tukey's fence and median + 20 %) on the loop's OWN iteration times: the % of
    the mean iteration that its slow iterations add. Other jobs on a loaded machine make real slow steps."""
    t = np.asarray(o.truth["iter_ms"][WARMUP:], dtype=float)
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    slow = t[t > max(q3 + 1.5 * (q3 - q1), 1.2 * med)]
    return 100.0 * float((slow - med).sum()) / len(t) / float(t.mean())


def judge_balanced(o: Outcome) -> list[str]:
    """Nothing injected: no high-severity finding, except step_outliers when the loop's own clock saw
    those slow steps too (the machine's other jobs, not an invention)."""
    real = loop_outlier_share(o)
    high = [
        f
        for f in o.findings
        if f["severity"] == "high" and not (f["kind"] == "step_outliers" and real >= 0.5 * f["at_stake_pct"])
    ]
    if not high:
        return []
    kinds = [f"{f['kind']} ({f['at_stake_pct']:.0f} %)" for f in high]
    return [
        f"verdict is {o.top}, expected balanced; high-severity findings on a loop with nothing injected: "
        f"{kinds} (the loop's own slow iterations "
        f"add {real:.0f} %)"
    ]


def sane_compute(o: Outcome) -> list[str]:
    share = share_ms(o, "compute_ms")
    return [] if share >= 80 else [f"forward + backward + optimizer only {share:.0f} % of the loop's time"]


def figures_compute(o: Outcome) -> str:
    return (
        f"compute {share_ms(o, 'compute_ms'):.0f} % by the loop's clock; fp_bp median "
        f"{o.median('fp_bp_ms'):.1f} ms, gap {o.median('iteration_gap_ms'):.1f} ms, "
        f"tail {o.median('tail_ms'):.1f} ms"
    )


# ----------------------------------------------------------------------------------------- host bound

HOST_STEPS = 30


def log_slowly(loss: torch.Tensor, sleep_ms: float) -> None:
    """Logging that blocks: a synchronous write to a slow sink (remote logger, network file system)."""
    _ = f"loss={loss.item():.4f}"
    time.sleep(sleep_ms / 1e3)


def host_log_loop(with_loader: bool, sleep_ms: float = 40.0, iterate: bool = False) -> Callable[[Path], dict]:
    """After optimizer.step(), a synchronous log call that sleeps `sleep_ms`; batches come from a fast
    2-worker DataLoader (`with_loader`) or are already in memory (then fetched through
    profiler.iterate() when `iterate`: the data wait measured, else not measured at all)."""

    def run(out: Path) -> dict:
        torch.manual_seed(0)
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        data = fast_loader(DATA_BATCH, HOST_STEPS) if with_loader else memory_batches(DATA_BATCH, HOST_STEPS)
        clock = Clock()
        profiler = new_profiler(out)
        profiler.attach(model, optimizer, ops=False)
        if iterate:
            data = profiler.iterate(data)
        for i, (x, y) in enumerate(clock.timed(data)):
            loss = train_step(model, optimizer, x, y)
            clock.begin()
            log_slowly(loss, sleep_ms)
            clock.end("host_ms")
            clock.iteration()
            if i + 1 == HOST_STEPS:
                break
        profiler.analyse(progress=False)
        return clock.truth(sleep_ms=sleep_ms)

    return run


def per_sample_metrics(logits: torch.Tensor, y: torch.Tensor, stats: dict) -> None:
    """Metrics computed in Python, one `.item()` per sample: a confusion matrix and per-class
    confidence / entropy, the way many training scripts do it."""
    probs = logits.detach().softmax(1)
    for i in range(len(y)):
        label, pred = int(y[i].item()), int(probs[i].argmax().item())
        stats["confusion"][label][pred] += 1
        row = probs[i].tolist()
        stats["entropy"][label] += -sum(p * math.log(p + 1e-12) for p in row)
        ranked = sorted(range(len(row)), key=row.__getitem__, reverse=True)
        stats["top3"] += label in ranked[:3]
        stats["rank"][label] += ranked.index(label)
        for c, p in enumerate(row):  # per-class mean probability, calibration bins
            stats["mean_prob"][c] += p
            stats["bins"][min(int(p * 10), 9)] += 1
        stats["confidence"][label] += probs[i, label].item()


def host_metrics_loop(out: Path) -> dict:
    """After optimizer.step(), per-sample metrics in Python with .item() syncs; a fast 2-worker loader of
    pre-batched data."""
    torch.manual_seed(0)
    batch = 1024
    model = mlp(32, hidden=128, depth=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = fast_loader(batch, HOST_STEPS, features=32)
    stats = {
        "confusion": [[0] * 10 for _ in range(10)],
        "entropy": [0.0] * 10,
        "confidence": [0.0] * 10,
        "top3": 0,
        "rank": [0] * 10,
        "mean_prob": [0.0] * 10,
        "bins": [0] * 10,
    }
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for i, (x, y) in enumerate(clock.timed(data)):
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits, y).backward()
        optimizer.step()
        clock.begin()
        per_sample_metrics(logits, y, stats)
        clock.end("host_ms")
        clock.iteration()
        if i + 1 == HOST_STEPS:
            break
    profiler.analyse(progress=False)
    return clock.truth()


def judge_host_gap(o: Outcome) -> list[str]:
    problems = verdict_is(o, "host_bound")
    host = truth_mean(o, "host_ms")
    f = o.finding("host_bound")
    if f is not None and not near(f["at_stake_ms"], host, rel=0.4):
        problems.append(f"host_bound puts {f['at_stake_ms']:.1f} ms at stake, the loop's host work took {host:.1f} ms")
    wrong = o.finding("input_bound")
    wait = truth_mean(o, "wait_ms") if "wait_ms" in o.truth else 0.0
    # the fetch itself may cost a few ms a batch (a worker's batch crosses processes, and on a busy machine the
    # workers starve while the loop computes metrics): a finding at about the loop's own measured wait is
    # right whatever its severity (the verdict is host_bound, above); one above what the loop waited is not
    if wrong is not None and wrong["at_stake_ms"] > 1.5 * wait + 1.0:
        problems.append(
            f"an input_bound finding ({wrong['severity']}, {wrong['at_stake_ms']:.1f} ms) on a loop that "
            f"waited {wait:.1f} ms per step for data"
        )
    return problems


def judge_gap_unmeasured(o: Outcome) -> list[str]:
    """Nothing measured the data wait: the report must say the gap is data loading or host work, and
    must not call it the input pipeline."""
    problems = verdict_is(o, "gap_bound")
    if o.finding("input_bound") is not None:
        problems.append("an input_bound finding although no data wait was measured")
    return problems


def judge_host_after_step(o: Outcome) -> list[str]:
    """Work after attach()'s step end (optimizer.step()) is host work between steps, at about its cost."""
    problems = verdict_is(o, "host_bound")
    work = float(np.median(o.truth["tail_work_ms"][WARMUP:]))
    f = o.finding("host_bound")
    if f is not None and not near(f["at_stake_ms"], work, rel=0.4):
        problems.append(
            f"host_bound puts {f['at_stake_ms']:.1f} ms at stake, the work after optimizer.step() "
            f"took {work:.1f} ms per step (median)"
        )
    if o.finding("input_bound") is not None:
        problems.append("an input_bound finding on a loop whose data is in memory")
    return problems


def sane_host(o: Outcome) -> list[str]:
    share = share_ms(o, "host_ms")
    wait = share_ms(o, "wait_ms")
    problems = [] if share >= 50 else [f"host work only {share:.0f} % of the loop's time (want >= 50 %)"]
    if wait > 30:
        problems.append(f"the loop waited for data {wait:.0f} % of its time (want <= 30 %): the data is not ready")
    return problems


def figures_host(o: Outcome) -> str:
    q = ((o.queue or {}).get("verdict") or {}).get("kind", "no queue probed")
    return (
        f"host work {truth_mean(o, 'host_ms'):.1f} ms/step = {share_ms(o, 'host_ms'):.0f} % (loop clock); "
        f"gap median {o.median('iteration_gap_ms'):.1f} ms; queue: {q}"
    )


# ----------------------------------------------------------------------------------------- tail

TAIL_STEPS = 30


class ManyTensors(nn.Module):
    """A model with many small parameter tensors (blocks of Linear + LayerNorm): the per-tensor Python
    work of clipping / EMA / a loop optimizer dominates, as on a real model with hundreds of tensors."""

    def __init__(self, blocks: int = 40, width: int = 64) -> None:
        super().__init__()
        self.inp = nn.Linear(256, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width)) for _ in range(blocks))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for b in self.blocks:
            x = x + torch.relu(b(x))
        return self.head(x)


def judge_tail(o: Outcome) -> list[str]:
    problems = verdict_is(o, "tail_bound")
    work = float(np.median(o.truth["tail_work_ms"][WARMUP:]))  # a regular per-step cost: its median
    f = o.finding("tail_bound")
    if f is not None and f["at_stake_ms"] < 0.6 * work:
        problems.append(
            f"tail_bound puts {f['at_stake_ms']:.1f} ms at stake, the injected tail work took "
            f"{work:.1f} ms per step (median)"
        )
    for wrong in ("input_bound", "host_bound"):
        if o.finding(wrong) is not None and o.finding(wrong)["severity"] == "high":
            problems.append(f"a high {wrong} finding for work done after backward")
    return problems


def sane_tail(o: Outcome) -> list[str]:
    share = share_ms(o, "tail_work_ms")
    return [] if share >= 30 else [f"the injected tail work is only {share:.0f} % of the loop's time (want >= 30 %)"]


def figures_tail(o: Outcome) -> str:
    return (
        f"tail work {truth_mean(o, 'tail_work_ms'):.1f} ms/step = {share_ms(o, 'tail_work_ms'):.0f} % "
        f"(loop clock); median gap {o.median('iteration_gap_ms'):.1f}, fp_bp {o.median('fp_bp_ms'):.1f}, "
        f"tail {o.median('tail_ms'):.1f} ms"
    )


def grad_clip_loop(out: Path) -> dict:
    """clip_grad_norm_(foreach=False) between backward and optimizer.step() on a model of ~160 tensors."""
    torch.manual_seed(0)
    model = ManyTensors()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = memory_batches(16, TAIL_STEPS)
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        clock.begin()
        for _ in range(4):  # clipping per parameter group of a 4-group schedule, foreach off
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        clock.end("tail_work_ms")
        optimizer.step()
        clock.iteration()
    profiler.analyse(progress=False)
    return clock.truth()


class WeightEMA:
    """An exponential moving average of the weights, updated tensor by tensor (as many scripts do)."""

    def __init__(self, model: nn.Module, decay: float = 0.999) -> None:
        self.decay = decay
        self.shadow = [p.detach().clone() for p in model.parameters()]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for _ in range(4):  # four EMA copies (several decays), as in some recipes
            for s, p in zip(self.shadow, model.parameters()):
                s.mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)


def ema_loop(manual_step: bool) -> Callable[[Path], dict]:
    """EMA of the weights right after optimizer.step(). `manual_step`: phases + profiler.step() at the
    end of the iteration (after the EMA); else attach(model, optimizer) ends the step at optimizer.step(),
    so the EMA is host work between steps (batches fetched through profiler.iterate: measured)."""

    def run(out: Path) -> dict:
        torch.manual_seed(0)
        model = ManyTensors()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        ema = WeightEMA(model)
        batches = memory_batches(16, TAIL_STEPS)
        clock = Clock()
        profiler = new_profiler(out)
        if not manual_step:
            profiler.attach(model, optimizer, ops=False)
            batches = profiler.iterate(batches)
        for x, y in batches:
            if manual_step:
                with profiler.phase("forward"):
                    optimizer.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(model(x), y)
                with profiler.phase("backward"):
                    loss.backward()
                with profiler.phase("optimizer"):
                    optimizer.step()
            else:
                train_step(model, optimizer, x, y)
            clock.begin()
            ema.update(model)
            clock.end("tail_work_ms")
            if manual_step:
                profiler.step()
            clock.iteration()
        profiler.analyse(progress=False)
        return clock.truth()

    return run


class PythonAdam(torch.optim.Optimizer):
    """Adam written as a per-tensor Python loop (no foreach, no fused kernel): a slow optimizer."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["t"], state["m"], state["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                state["t"] += 1
                g = p.grad.add(p, alpha=group["weight_decay"])
                state["m"].mul_(b1).add_(g, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = state["m"] / (1 - b1 ** state["t"])
                v_hat = state["v"] / (1 - b2 ** state["t"])
                p.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))
        return None


def python_optimizer_loop(out: Path) -> dict:
    """A per-tensor Python Adam on a model of ~160 tensors; attach() times optimizer.step() as the tail."""
    torch.manual_seed(0)
    model = ManyTensors()
    optimizer = PythonAdam(model.parameters())
    batches = memory_batches(16, TAIL_STEPS)
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        clock.begin()
        optimizer.step()
        clock.end("tail_work_ms")
        clock.iteration()
    profiler.analyse(progress=False)
    return clock.truth()


# ----------------------------------------------------------------------------- optimizer subclasses / wrappers


class ClampingSGD(torch.optim.SGD):
    """SGD that clamps every gradient element-wise in a Python loop first, then calls super().step()."""

    @torch.no_grad()
    def step(self, closure=None):
        for _ in range(6):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.clamp_(-1.0, 1.0).nan_to_num_(0.0)
        return super().step(closure)


def subclass_loop(out: Path) -> dict:
    """An SGD subclass whose step() does slow work and calls super().step(). The script also trains a
    linear probe with a plain torch.optim.SGD (constructed before the profiler), as real scripts do:
    torch then hooks SGD.step as well as ClampingSGD.step."""
    torch.manual_seed(0)
    probe = nn.Linear(10, 2)
    probe_optimizer = torch.optim.SGD(probe.parameters(), lr=0.1)  # patches torch.optim.SGD.step (torch does that)
    model = ManyTensors()
    optimizer = ClampingSGD(model.parameters(), lr=0.01)
    batches = memory_batches(16, TAIL_STEPS)
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        clock.begin()
        optimizer.step()
        clock.end("tail_work_ms")
        clock.iteration()
    profiler.analyse(progress=False)
    del probe_optimizer
    return clock.truth()


def judge_subclass(o: Outcome) -> list[str]:
    return step_count_is(o, o.truth["iterations"], "optimizer.step() calls") + judge_tail(o)


class Lookahead(torch.optim.Optimizer):
    """Lookahead (Zhang et al. 2019) as timm writes it: an Optimizer subclass around a base optimizer that
    shares its param_groups and does NOT call Optimizer.__init__ (it has no defaults of its own)."""

    def __init__(self, base: torch.optim.Optimizer, alpha: float = 0.5, k: int = 6) -> None:
        from collections import OrderedDict, defaultdict

        self._base_optimizer = base
        self.param_groups = base.param_groups
        self.defaults = base.defaults
        self.state = defaultdict(dict)
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self.alpha, self.k, self._steps = alpha, k, 0
        self._slow = [p.detach().clone() for group in base.param_groups for p in group["params"]]

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._base_optimizer.step(closure)
        self._steps += 1
        if self._steps % self.k == 0:
            fast = [p for group in self.param_groups for p in group["params"]]
            for slow, p in zip(self._slow, fast):
                slow.add_(p - slow, alpha=self.alpha)
                p.copy_(slow)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._base_optimizer.zero_grad(set_to_none)


def lookahead_loop(out: Path) -> dict:
    """attach(model, Lookahead(SGD)): the wrapper is what the loop steps; input-bound (20 ms batches, no workers)."""
    torch.manual_seed(0)
    model = mlp()
    optimizer = Lookahead(torch.optim.SGD(model.parameters(), lr=0.01))
    data = loader(DATA_BATCH, DATA_STEPS, 20.0 / DATA_BATCH, False, workers=0)
    return attached_training(out, model, optimizer, data, DATA_STEPS).truth()


def judge_wrapped_input(o: Outcome) -> list[str]:
    return step_count_is(o, o.truth["iterations"]) + judge_input(o)


def grad_scaler_loop(out: Path) -> dict:
    """Mixed precision with torch.amp.GradScaler: scaler.step(optimizer) skips optimizer.step() while the
    initial scale (65536) overflows float16 gradients; input-bound (30 ms batches, no workers). The model is
    small (~2 ms a step): float16 on a CPU is slow, and a larger one made the step as long as the wait on
    a loaded machine (43 % waiting at load 14-17 with hidden=256)."""
    torch.manual_seed(0)
    model = mlp(hidden=64, depth=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    data = loader(DATA_BATCH, DATA_STEPS, 30.0 / DATA_BATCH, False, workers=0)
    clock = Clock()
    skipped = 0
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for i, (x, y) in enumerate(clock.timed(data)):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x * 100), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped += scaler.get_scale() < scale
        clock.iteration()
        if i + 1 == DATA_STEPS:
            break
    profiler.analyse(progress=False)
    return clock.truth(skipped=int(skipped))


def sane_scaler(o: Outcome) -> list[str]:
    problems = sane_input(o)
    if o.truth["skipped"] < 1:
        problems.append("GradScaler skipped no optimizer step: nothing to test")
    return problems


def grad_accumulation_loop(out: Path) -> dict:
    """4 micro-batches per optimizer.step() (gradient accumulation); nothing else injected."""
    torch.manual_seed(0)
    accumulate, micro = 4, 48
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = memory_batches(64, micro)
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for i, (x, y) in enumerate(batches):
        (F.cross_entropy(model(x), y) / accumulate).backward()
        if (i + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            clock.iteration()
    profiler.analyse(progress=False)
    return clock.truth(micro_batches=micro, accumulate=accumulate)


def judge_accumulation(o: Outcome) -> list[str]:
    problems = step_count_is(o, o.truth["iterations"], "optimizer steps")
    per_step = truth_mean(o, "iter_ms")
    fp_bp = o.median("fp_bp_ms")
    if not fp_bp >= 0.6 * per_step:
        problems.append(
            f"median forward + backward {fp_bp:.1f} ms, an optimizer step of "
            f"{o.truth['accumulate']} micro-batches took {per_step:.1f} ms"
        )
    return problems + judge_balanced(o)


def figures_steps(o: Outcome) -> str:
    extra = f", skipped optimizer steps {o.truth['skipped']}" if "skipped" in o.truth else ""
    return (
        f"{len(o.steps)} profiler steps for {o.truth['iterations']} iterations{extra}; median step "
        f"{o.median('total_ms'):.1f} ms (loop {np.median(o.truth['iter_ms'][WARMUP:]):.1f} ms)"
    )


# ----------------------------------------------------------------------------------------- outliers

OUTLIER_STEPS = 30
EVERY = 5


class RecModel(nn.Module):
    """A small recommender: a 250k x 64 sparse embedding table (64 MB) and an MLP over 4 looked-up ids.
    A step touches a few rows; a checkpoint writes the whole table."""

    def __init__(self, rows: int = 250_000, dim: int = 64, fields: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(rows, dim, sparse=True)
        self.mlp = mlp(dim * fields, 256, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.emb(ids).flatten(1))


def id_batches(batch: int, n: int, rows: int = 250_000, fields: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randint(0, rows, (batch, fields), generator=g), torch.randint(0, 10, (batch,), generator=g))
        for _ in range(n)
    ]


def checkpoint_loop(out: Path) -> dict:
    """torch.save of the model + optimizer state (~64 MB) every 5 steps, after optimizer.step(), over the
    last one. A checkpoint is ~7 x a step (26 MB was ~3 x: on a loaded machine the spread of the other
    steps can lift the outlier fence to a spike's height)."""
    torch.manual_seed(0)
    model = RecModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = id_batches(128, OUTLIER_STEPS)
    ckpt = out.parent / f"{out.name}_checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for i, (x, y) in enumerate(batches):
        train_step(model, optimizer, x, y)
        clock.begin()
        if (i + 1) % EVERY == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": i}, ckpt / "last.pt")
        clock.end("spike_ms")
        clock.iteration()
    profiler.analyse(progress=False)
    shutil.rmtree(ckpt, ignore_errors=True)
    return clock.truth()


def eval_loop(out: Path) -> dict:
    """Every 5 steps, an evaluation pass over 12 held-out batches (model.eval(), torch.no_grad())."""
    torch.manual_seed(0)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = memory_batches(DATA_BATCH, OUTLIER_STEPS)
    held_out = memory_batches(128, 12, seed=1)
    accuracies = []
    clock = Clock()
    profiler = new_profiler(out)
    profiler.attach(model, optimizer, ops=False)
    for i, (x, y) in enumerate(batches):
        train_step(model, optimizer, x, y)
        clock.begin()
        if (i + 1) % EVERY == 0:
            model.eval()
            with torch.no_grad():
                accuracies.append(sum(float((model(hx).argmax(1) == hy).float().mean()) for hx, hy in held_out) / 12)
            model.train()
        clock.end("spike_ms")
        clock.iteration()
    profiler.analyse(progress=False)
    return clock.truth(evaluations=len(accuracies))


def judge_outliers(o: Outcome) -> list[str]:
    problems = verdict_is(o, "step_outliers")
    f = o.finding("step_outliers")
    if f is None:
        return problems
    period = f["metrics"].get("period_steps")
    if period != EVERY:
        problems.append(f"step_outliers names period {period}, the spikes come every {EVERY} steps")
    spiked = set(range(EVERY, len(o.steps), EVERY))  # the spike after iteration k*5-1 is in step k*5's gap
    slow = set(o.analysed.loc[o.analysed["total_ms"] > 1.5 * o.median("total_ms"), "step"].astype(int))
    if not spiked <= slow:
        problems.append(
            f"steps {sorted(spiked - slow)} hold a spike but are not 1.5 x the median step in step_trace_0.csv"
        )
    if not len(spiked) <= f["metrics"].get("outliers", 0) <= len(spiked) + 3:
        problems.append(f"{f['metrics'].get('outliers'):.0f} outlier steps, {len(spiked)} spikes injected")
    return problems


def sane_outliers(o: Outcome) -> list[str]:
    spikes = [s for s in o.truth["spike_ms"] if s > 1.0]
    median_iter = float(np.median(o.truth["iter_ms"]))
    if len(spikes) < 4 or float(np.median(spikes)) < 1.5 * median_iter:
        return [f"spikes {np.round(spikes, 1).tolist()} ms are not >= 1.5 x the median iteration {median_iter:.1f} ms"]
    return []


def figures_outliers(o: Outcome) -> str:
    spikes = [s for s in o.truth["spike_ms"] if s > 1.0]
    f = o.finding("step_outliers") or {"metrics": {}}
    return (
        f"{len(spikes)} spikes of {np.median(spikes):.1f} ms on a {np.median(o.truth['iter_ms']):.1f} ms step; "
        f"outliers {f['metrics'].get('outliers', 0):.0f}, period {f['metrics'].get('period_steps', 0):.0f}"
    )


# ----------------------------------------------------------------------------------------- ops

OP_STEPS = 24


class Float64Net(nn.Module):
    """Blocks whose bias is kept and added in float64 "to keep the sums exact": each block casts the
    activations up, adds, and casts them back down (forward and backward)."""

    def __init__(self, width: int = 512, blocks: int = 24) -> None:
        super().__init__()
        self.inp = nn.Linear(32, width)
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(width, dtype=torch.float64)) for _ in range(blocks))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for bias in self.biases:
            x = (x.double() + bias).float()
        return self.head(torch.relu(x))


def op_schedule(active: int, steps: int = OP_STEPS) -> tuple[dict, list[int]]:
    """Profiler kwargs that capture ops on `active` steps of `steps` (all when 0), and which steps those are."""
    if not active:
        return {}, list(range(steps))
    sched = schedule(wait=10, warmup=1, active=active, repeat=1)
    records = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    return {"ops_schedule": sched}, [k for k in range(steps) if sched(k) in records]


def float64_loop(ops_schedule_active: int = 0) -> Callable[[Path], dict]:
    """Float64 layers and casts; attach(model, optimizer) captures ops on every step, or on
    `ops_schedule_active` steps only (ops_schedule=schedule(wait=..., warmup=1, active=K))."""

    def run(out: Path) -> dict:
        torch.manual_seed(0)
        model = Float64Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = memory_batches(256, OP_STEPS, features=32)
        kw, captured = op_schedule(ops_schedule_active)
        clock = Clock()
        profiler = new_profiler(out, record_shapes=True, **kw)  # input types: the float64 ops
        profiler.attach(model, optimizer)
        for x, y in batches:
            train_step(model, optimizer, x, y)
            clock.iteration()
        profiler.analyse(progress=False)
        return clock.truth(captured=len(captured), captured_steps=captured)

    return run


CAST = r"(?:^Cast|aten::to$|aten::_to_copy|aten::copy_|ToCopyBackward)"


def judge_float64(o: Outcome) -> list[str]:
    """precision_waste is the verdict and holds the casts (the float64 adds and the casts around them,
    charged together); a Cast op_hotspot may report only casts precision_waste does not charge: no
    millisecond is charged twice (issue 33)."""
    problems = verdict_is(o, "precision_waste")
    if o.op_type is None:
        return problems + ["no op_type_0.csv"]
    rows = o.op_type[o.op_type["op_type"].astype(str).str.contains(CAST)]
    per_captured = float(rows["self_ms"].sum()) / o.truth["captured"]
    waste = o.finding("precision_waste")
    if waste is None or waste["at_stake_ms"] < 0.9 * per_captured:
        return problems + [
            f"precision_waste finding {waste and waste['at_stake_ms']} ms does not hold the "
            f"{per_captured:.2f} ms of casts per captured step"
        ]
    if waste["severity"] != "high":
        problems.append(f"precision_waste is {waste['severity']} ({waste['at_stake_pct']:.1f} % of the step)")
    claimed = waste["metrics"]["cast_ms_per_step"]
    cast = next((f for f in o.findings if str(f.get("key", "")).startswith("op_hotspot:cast")), None)
    if cast is not None and cast["at_stake_ms"] > max(per_captured - claimed, 0.0) + 0.05:
        problems.append(
            f"the Cast op_hotspot charges {cast['at_stake_ms']:.2f} ms per step, but of the {per_captured:.2f} ms "
            f"of casts precision_waste already charges {claimed:.2f} ms"
        )
    return problems


def sane_float64(o: Outcome) -> list[str]:
    if o.op_type is None:
        return ["no op_type_0.csv: no ops were captured"]
    rows = o.op_type[o.op_type["op_type"].astype(str).str.contains(CAST)]
    per_step = float(rows["self_ms"].sum()) / o.truth["captured"]
    share = 100 * per_step / truth_mean(o, "iter_ms")  # what the Cast finding's at_stake_pct should be
    return [] if share >= 25 else [f"casts per captured step are only {share:.0f} % of the mean step (want >= 25 %)"]


def figures_float64(o: Outcome) -> str:
    if o.op_type is None:
        return "no ops"
    rows = o.op_type[o.op_type["op_type"].astype(str).str.contains(CAST)]
    cast = next((f for f in o.findings if str(f.get("key", "")).startswith("op_hotspot:cast")), None)
    stake = f"{cast['at_stake_ms']:.2f} ms ({cast['severity']})" if cast else "none"
    return (
        f"casts {rows['self_ms'].sum() / o.truth['captured']:.2f} ms per captured step "
        f"({o.truth['captured']} captured), {rows['share_pct'].sum():.0f} % of op time; finding stake {stake}"
    )


class TinyBlock(nn.Module):
    """One tiny element-wise block: x -> tanh(x * scale + shift), a few microseconds of work, after a few
    microseconds of Python (the stand-in for a model's own Python between its ops: argument checks, config
    look-ups). That Python is host time no op covers, as on a launch-bound GPU; it makes the idle share of
    forward + backward about 60 % rather than 45 %, so that two busy loops on the cores cannot push the
    launch-bound stake under the 20 % line (docs/testing.md)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(width))
        self.shift = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if sum(i * i for i in range(x.shape[-1] * 40)) < 0:  # never true: the block's own Python work
            raise ValueError("unreachable")
        return torch.tanh(x * self.scale + self.shift)


class TinyOps(nn.Module):
    """A deep stack of tiny modules on a 4 x 8 tensor: every op is a few microseconds, so the step is
    spent in Python and dispatch between ops (launch-bound on a GPU, framework-bound on a CPU)."""

    def __init__(self, depth: int = 60, width: int = 8) -> None:
        super().__init__()
        self.inp = nn.Linear(32, width)
        self.body = nn.Sequential(*(TinyBlock(width) for _ in range(depth)))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.inp(x)))


def tiny_ops_loop(ops_schedule_active: int = 0, steps: int = OP_STEPS) -> Callable[[Path], dict]:
    """Hundreds of tiny ops per step (forward + backward) for `steps` steps, op capture through attach() on
    every step, or on `ops_schedule_active` steps only."""

    def run(out: Path) -> dict:
        return _tiny_ops(out, ops_schedule_active, steps)

    return run


def _tiny_ops(out: Path, active: int, steps: int) -> dict:
    torch.manual_seed(0)
    model = TinyOps()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    batches = memory_batches(4, steps, features=32)
    clock = Clock()
    kw, captured = op_schedule(active, steps)
    profiler = new_profiler(out, **kw)
    profiler.attach(model, optimizer)
    for x, y in batches:
        clock.begin()
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        clock.end("fp_bp_ms")
        optimizer.step()
        clock.iteration()
    profiler.analyse(progress=False)
    return clock.truth(captured=len(captured), captured_steps=captured)


def judge_tiny_ops(o: Outcome) -> list[str]:
    problems = verdict_is(o, "host_bound")
    f = o.finding("host_bound")
    if f is None or o.op_type is None:
        return problems
    per_captured = float(o.op_type["count"].sum()) / o.truth["captured"]
    if not near(f["metrics"].get("ops_per_step", 0), per_captured, rel=0.25, abs_ms=0):
        problems.append(
            f"host_bound counts {f['metrics'].get('ops_per_step'):.0f} ops per step; op_type_0.csv "
            f"holds {per_captured:.0f} per captured step ({o.truth['captured']} captured)"
        )
    idle = f["metrics"].get("idle_share_pct", 0)
    if idle > 80:
        problems.append(
            f"host_bound says {idle:.0f} % of forward + backward runs no op: steps without op capture counted as idle"
        )
    return problems


def sane_tiny_ops(o: Outcome) -> list[str]:
    # Forward + backward measures 40-50 % of the loop (the optimizer's own tiny ops and the capture take the
    # rest); the sanity bar sits far below that so load cannot trip it.
    share = share_ms(o, "fp_bp_ms")
    return [] if share >= 25 else [f"forward + backward only {share:.0f} % of the loop (want >= 25 %)"]


def figures_tiny_ops(o: Outcome) -> str:
    f = o.finding("host_bound") or {"metrics": {}}
    m = f["metrics"]
    return (
        f"fp_bp median {o.median('fp_bp_ms'):.1f} ms; ops/step {m.get('ops_per_step', 0):.0f}, "
        f"median op {m.get('median_op_us', 0):.1f} us, idle {m.get('idle_share_pct', 0):.0f} %"
    )


# ----------------------------------------------------------------------------------------- memory growth


def memory_growth_loop(out: Path, short: bool = False) -> dict:
    """The leak below, in a fresh Python process: in a long-lived one (the test session) the heap that
    earlier tests freed absorbs hundreds of MB of new allocations, and RSS, what the finding reads, stays flat.
    `short`: no logging pause, the whole run lasts a few seconds (shorter than memory_trend_s)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "memory-worker", str(out), *(["short"] if short else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the memory_growth worker failed:\n{done.stderr[-2000:]}")
    return json.loads((out / "truth.json").read_text())


def memory_growth_worker(out: Path, short: bool = False) -> None:
    """`memory-worker OUT [short]`: the leaking loop, its truth written to OUT/truth.json."""
    (out / "truth.json").write_text(json.dumps(_leaking_loop(out) if not short else _short_leaking_loop(out)))


def _short_leaking_loop(out: Path) -> dict:
    """A loop that keeps every step's loss and logits with their graphs, 60 steps and no pause: RSS more
    than doubles in a few seconds, a run shorter than memory_trend_s (issue 33)."""
    import psutil

    torch.manual_seed(0)
    steps = 60
    model = mlp(hidden=512, depth=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = memory_batches(2048, steps)
    kept = []
    proc = psutil.Process()
    rss = [proc.memory_info().rss]
    clock = Clock()
    profiler = new_profiler(out, host_counters=True, counter_interval_s=0.02)
    profiler.attach(model, optimizer, ops=False)
    started = time.perf_counter()
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward(retain_graph=True)
        optimizer.step()
        kept.append((loss, logits))  # meant: loss.item(); the logits keep the graph's activations alive
        rss.append(proc.memory_info().rss)
        clock.iteration()
    seconds = time.perf_counter() - started
    time.sleep(0.05)  # one more counter sample after the last step
    profiler.analyse(progress=False)
    del kept
    return clock.truth(rss_start_mb=rss[0] / 2**20, rss_end_mb=rss[-1] / 2**20, loop_s=seconds)


def _leaking_loop(out: Path) -> dict:
    """The classic leak: `history.append(loss_per_sample)` keeps each step's graph (and its activations) alive."""
    import psutil

    torch.manual_seed(0)
    steps = 60
    model = mlp(hidden=1024, depth=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = memory_batches(256, steps)
    history = []
    proc = psutil.Process()
    rss = [proc.memory_info().rss]
    clock = Clock()
    profiler = new_profiler(out, host_counters=True, counter_interval_s=0.05)
    profiler.attach(model, optimizer, ops=False)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        losses = F.cross_entropy(model(x), y, reduction="none")
        losses.mean().backward(retain_graph=True)
        optimizer.step()
        history.append(losses)  # meant: losses.mean().item()
        history.append(torch.randn(512, 1024))  # plus a cached copy of the batch's hidden features
        rss.append(proc.memory_info().rss)
        time.sleep(0.1)  # logging: the run lasts longer than memory_trend_s (5 s)
        clock.iteration()
    time.sleep(0.15)  # one more counter sample after the last step
    profiler.analyse(progress=False)
    grown = (rss[-1] - rss[0]) / 2**20
    del history
    return clock.truth(rss_growth_mb=grown)


def sane_short_memory(o: Outcome) -> list[str]:
    start, end = o.truth["rss_start_mb"], o.truth["rss_end_mb"]
    return (
        [] if end >= 1.5 * start else [f"RSS grew only {start:.0f} -> {end:.0f} MB (want at least half as much again)"]
    )


def figures_short_memory(o: Outcome) -> str:
    f = o.finding("memory_growth")
    found = f"; finding: {f['title']}" if f else ""
    t = o.truth
    rss = f"RSS {t['rss_start_mb']:.0f} -> {t['rss_end_mb']:.0f} MB"
    return f"{rss} in {t['loop_s']:.1f} s ({t['iterations']} steps){found}"


def judge_memory(o: Outcome) -> list[str]:
    f = o.finding("memory_growth")
    if f is None:
        return [f"no memory_growth finding (verdict {o.top})"]
    return []


def sane_memory(o: Outcome) -> list[str]:
    grown = o.truth["rss_growth_mb"]
    return [] if grown >= 60 else [f"RSS grew only {grown:.0f} MB over the run (want >= 60 MB)"]


def figures_memory(o: Outcome) -> str:
    counters = o.out / "device_counters_0.csv"
    seen = ""
    if counters.is_file():
        c = pd.read_csv(counters)
        rss = c[c["metric"] == "rss_bytes"]["value"]
        if len(rss):
            seen = f"; device_counters rss {rss.iloc[0] / 2**20:.0f} -> {rss.iloc[-1] / 2**20:.0f} MB"
    return f"RSS +{o.truth['rss_growth_mb']:.0f} MB over {o.truth['iterations']} steps (loop){seen}"


# ----------------------------------------------------------------------------------------- step() forgotten


def forgotten_step_loop(out: Path) -> dict:
    """Phases marked, profiler.step() never called (no attach either); the loop is input-bound
    (20 ms batches, no workers). One step spanning the run would hide that: the phases repeat once
    an iteration, so the steps can be inferred from them."""
    torch.manual_seed(0)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = loader(DATA_BATCH, 20, 20.0 / DATA_BATCH, False, workers=0)
    clock = Clock()
    profiler = new_profiler(out)
    for i, (x, y) in enumerate(clock.timed(data)):
        with profiler.phase("forward"):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
        with profiler.phase("backward"):
            loss.backward()
        with profiler.phase("optimizer"):
            optimizer.step()
        clock.iteration()  # profiler.step() forgotten here
        if i + 1 == 20:
            break
    profiler.analyse(progress=False)
    return clock.truth()


def judge_forgotten(o: Outcome) -> list[str]:
    """Without step() a correct profiler finds the iterations in the repeating phases (data, forward,
    backward, optimizer), says the steps are inferred, and judges the loop on them: input-bound."""
    problems = judge_input(o) + step_count_is(o, o.truth["iterations"])
    sources = sorted(set(o.steps["step_source"])) if "step_source" in o.steps else []
    if sources != ["inferred"]:
        problems.append(f"step_trace_0.csv step_source is {sources}, expected ['inferred']")
    steps = o.report.get("steps") or {}
    if steps.get("source") != "inferred" or "step()" not in str(steps.get("source_note", "")):
        problems.append(
            f"report steps do not say they were inferred and that step() gives exact boundaries "
            f"(source {steps.get('source')!r}, note {steps.get('source_note')!r})"
        )
    return problems


def sane_forgotten(o: Outcome) -> list[str]:
    ran = [] if o.truth["iterations"] == 20 else [f"the loop ran {o.truth['iterations']} iterations"]
    return ran + sane_input(o)


def figures_forgotten(o: Outcome) -> str:
    return (
        f"{len(o.steps)} step rows ({sorted(set(o.steps.get('step_source', [])))}), "
        f"{(o.report.get('steps') or {}).get('source_note', '')[:80]!r}; " + figures_input(o)
    )


# ----------------------------------------------------------------------------------------- manual phases


def manual_phases_loop(out: Path) -> dict:
    """The README's quickstart API (phases + profiler.step()); input-bound (1 worker, 40 ms batches)."""
    torch.manual_seed(0)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = loader(DATA_BATCH, DATA_STEPS, 40.0 / DATA_BATCH, False, workers=1)
    clock = Clock()
    profiler = new_profiler(out)
    for i, (x, y) in enumerate(clock.timed(data)):
        with profiler.phase("forward"):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
        with profiler.phase("backward"):
            loss.backward()
        with profiler.phase("optimizer"):
            optimizer.step()
        profiler.step()
        clock.iteration()
        if i + 1 == DATA_STEPS:
            break
    profiler.analyse(progress=False)
    return clock.truth()


# ----------------------------------------------------------------------------------------- DDP straggler

DDP_STEPS = 20
DDP_SLOW_RANK = 1
DDP_EXTRA_MS = 40.0
DDP_DEADLINE_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_loop(out: Path) -> dict:
    """2 ranks (gloo on CPU, DDP); rank 1's input pipeline costs 40 ms more per step (time.sleep before
    its forward). Launched like torchrun: this module's __main__ is the worker."""
    port = free_port()
    procs = {}
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        procs[rank] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "ddp-worker", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results: dict[int, Any] = {}
    errors = []
    for rank, p in procs.items():
        try:
            stdout, stderr = p.communicate(timeout=DDP_DEADLINE_S)
        except subprocess.TimeoutExpired as exc:
            for q in procs.values():
                q.kill()
            raise RuntimeError(f"DDP rank {rank} did not finish within {DDP_DEADLINE_S} s") from exc
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if p.returncode != 0 or not lines:
            errors.append(f"rank {rank} exited {p.returncode}: {stderr[-2000:]}")
        else:
            results[rank] = json.loads(lines[-1])
    if errors:
        raise RuntimeError("; ".join(errors))
    return {
        "ranks": results,
        "iter_ms": results[DDP_SLOW_RANK]["iter_ms"],
        "iterations": DDP_STEPS,
        "extra_ms": results[DDP_SLOW_RANK]["extra_ms"],
    }


def ddp_worker(out: Path) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = memory_batches(DATA_BATCH, DDP_STEPS, seed=rank)
    clock = Clock()
    profiler = Profiler(out, host_counters=False, gpu_counters=False)
    profiler.attach(model, optimizer, ops=False)
    for x, y in batches:
        clock.begin()
        time.sleep((DDP_EXTRA_MS if rank == DDP_SLOW_RANK else 2.0) / 1e3)  # the slow rank's input pipeline
        clock.end("extra_ms")
        train_step(model, optimizer, x, y)
        clock.iteration()
    profiler.analyse(progress=False, cluster_timeout_s=120)
    truth = clock.truth()
    print(json.dumps({"rank": rank, "iter_ms": truth["iter_ms"], "extra_ms": truth["extra_ms"]}), flush=True)
    dist.destroy_process_group()


def judge_ddp(o: Outcome) -> list[str]:
    c = o.cluster
    if not c:
        return ["no cluster_summary.json"]
    problems = []
    straggler = c.get("straggler") or {}
    if straggler.get("rank") != DDP_SLOW_RANK:
        problems.append(f"cluster straggler is {straggler.get('rank')}, the slow rank is {DDP_SLOW_RANK}")
    elif not near(straggler.get("excess_ms", 0.0), DDP_EXTRA_MS - 2.0, rel=0.4):
        problems.append(f"straggler excess {straggler.get('excess_ms'):.1f} ms, injected {DDP_EXTRA_MS - 2:.0f} ms")
    kinds = [(f.get("kind"), f.get("rank")) for f in c.get("findings", [])]
    if ("straggler_rank", DDP_SLOW_RANK) not in kinds:
        problems.append(f"no straggler_rank finding for rank {DDP_SLOW_RANK} in cluster_summary.json ({kinds})")
    return problems


def sane_ddp(o: Outcome) -> list[str]:
    slow = float(np.mean(o.truth["extra_ms"]))
    return [] if slow >= DDP_EXTRA_MS * 0.9 else [f"the slow rank slept only {slow:.1f} ms per step"]


def figures_ddp(o: Outcome) -> str:
    s = (o.cluster or {}).get("straggler") or {}
    return (
        f"straggler rank {s.get('rank')}, excess {s.get('excess_ms', 0):.1f} ms in {s.get('phase')}; "
        f"cluster findings {[f.get('kind') for f in (o.cluster or {}).get('findings', [])]}"
    )


# ----------------------------------------------------------------------------------------- the bank


def _bank() -> list[Scenario]:
    s: list[Scenario] = []
    for workers, ms in ((0, 20.0), (1, 40.0)):
        s.append(input_scenario(f"data_sleep_w{workers}", workers, ms, cpu=False))
    # 20 steps, 19 analysed: an odd number (see WRONG_TODAY)
    s.append(
        Scenario(
            "data_sleep_w2",
            "slow __getitem__, time.sleep (I/O-bound): pre-batched shards, 240 ms per "
            "shard, DataLoader num_workers=2 starting together, 20 steps",
            "input_bound",
            shard_loop(2, 240.0, 20),
            judge_input,
            sane_input,
            figures_input,
        )
    )
    s.append(input_scenario("data_sleep_w8", 8, 400.0, cpu=False))
    s.append(
        Scenario(
            "data_sleep_w2_ops_8_of_30",
            "slow __getitem__, time.sleep (I/O-bound), 60 ms per batch per worker, a plain DataLoader "
            "num_workers=2 (nothing of profview's times its fetches); ops captured on 8 of 30 steps",
            "input_bound",
            capture_only_loop(2, 60.0, active=8),
            judge_input_captured,
            sane_input,
            figures_input,
        )
    )
    # 8 spinning workers also slow the loop's own step (they share its 2 cores): 400 ms a batch keeps the
    # wait well above half the loop's time on a loaded machine (120 ms gave 47 % at load 14-17, 240 ms 58 %
    # at load 17 and under 50 % at load 19)
    for workers, ms in ((0, 20.0), (1, 40.0), (2, 60.0), (8, 400.0)):
        s.append(input_scenario(f"data_cpu_w{workers}", workers, ms, cpu=True))
    s += [
        Scenario(
            "compute_bound",
            "nothing: a ~50 ms MLP step fed by 2 fast workers (pre-batched)",
            "balanced",
            compute_bound,
            judge_balanced,
            sane_compute,
            figures_compute,
        ),
        Scenario(
            "host_log_sleep_loader",
            "a blocking 40 ms log call after optimizer.step(); fast 2-worker DataLoader (pre-batched)",
            "host_bound",
            host_log_loop(True),
            judge_host_gap,
            sane_host,
            figures_host,
        ),
        Scenario(
            "host_log_sleep_memory",
            "a blocking 40 ms log call after optimizer.step(); batches already in "
            "memory, nothing measures the data wait",
            "gap_bound",
            host_log_loop(False),
            judge_gap_unmeasured,
            sane_host,
            figures_host,
        ),
        Scenario(
            "host_log_sleep_iterate",
            "a blocking 40 ms log call after optimizer.step(); batches in memory fetched through profiler.iterate()",
            "host_bound",
            host_log_loop(False, iterate=True),
            judge_host_gap,
            sane_host,
            figures_host,
        ),
        Scenario(
            "host_item_metrics",
            "per-sample metrics in Python with .item() after optimizer.step(); fast loader",
            "host_bound",
            host_metrics_loop,
            judge_host_gap,
            sane_host,
            figures_host,
        ),
        Scenario(
            "tail_grad_clip",
            "clip_grad_norm_(foreach=False) x4 between backward and optimizer.step()",
            "tail_bound",
            grad_clip_loop,
            judge_tail,
            sane_tail,
            figures_tail,
        ),
        Scenario(
            "tail_ema_attach",
            "per-tensor EMA of the weights after optimizer.step(); attach() ends the step "
            "at optimizer.step(), so the EMA is host work between steps",
            "host_bound",
            ema_loop(manual_step=False),
            judge_host_after_step,
            sane_tail,
            figures_tail,
        ),
        Scenario(
            "tail_ema_manual",
            "per-tensor EMA of the weights after optimizer.step(); phases + profiler.step() last",
            "tail_bound",
            ema_loop(manual_step=True),
            judge_tail,
            sane_tail,
            figures_tail,
        ),
        Scenario(
            "tail_python_optimizer",
            "Adam as a per-tensor Python loop (no foreach / fused)",
            "tail_bound",
            python_optimizer_loop,
            judge_tail,
            sane_tail,
            figures_tail,
        ),
        Scenario(
            "opt_subclass_super_step",
            "SGD subclass: slow clamping, then super().step(); plain SGD also in use",
            "tail_bound, steps == iterations",
            subclass_loop,
            judge_subclass,
            sane_tail,
            figures_tail,
        ),
        Scenario(
            "opt_wrapper_lookahead",
            "timm-style Lookahead(SGD) attached; input-bound (20 ms batches, 0 workers)",
            "input_bound, steps == iterations",
            lookahead_loop,
            judge_wrapped_input,
            sane_input,
            figures_steps,
        ),
        Scenario(
            "opt_grad_scaler",
            "GradScaler(float16 autocast) skips optimizer.step() on overflow; input-bound (30 ms batches)",
            "input_bound, steps == iterations",
            grad_scaler_loop,
            judge_wrapped_input,
            sane_scaler,
            figures_steps,
        ),
        Scenario(
            "grad_accumulation",
            "4 micro-batches per optimizer.step(); nothing else",
            "balanced, steps == optimizer steps",
            grad_accumulation_loop,
            judge_accumulation,
            lambda o: [],
            figures_steps,
        ),
        Scenario(
            "checkpoint_every_5",
            "torch.save(model + optimizer state, 64 MB) every 5 steps",
            "step_outliers (every 5 steps)",
            checkpoint_loop,
            judge_outliers,
            sane_outliers,
            figures_outliers,
        ),
        Scenario(
            "eval_every_5",
            "an evaluation pass (12 batches, no_grad) every 5 steps",
            "step_outliers (every 5 steps)",
            eval_loop,
            judge_outliers,
            sane_outliers,
            figures_outliers,
        ),
        Scenario(
            "float64_ops_every_step",
            "float64 bias sums + casts; attach() op capture on every step",
            "precision_waste first, high, holding the casts (no Cast op_hotspot for the same casts)",
            float64_loop(),
            judge_float64,
            sane_float64,
            figures_float64,
        ),
        Scenario(
            "float64_ops_8_of_24",
            "float64 bias sums + casts; ops on 8 of 24 steps (ops_schedule)",
            "precision_waste first, high, holding the casts (no Cast op_hotspot for them), per captured step",
            float64_loop(8),
            judge_float64,
            sane_float64,
            figures_float64,
        ),
        Scenario(
            "tiny_ops_every_step",
            "~1800 tiny ops per step (60 tiny modules on 4 x 8 tensors); ops every step",
            "host_bound (launch-bound)",
            tiny_ops_loop(),
            judge_tiny_ops,
            sane_tiny_ops,
            figures_tiny_ops,
        ),
        Scenario(
            "tiny_ops_8_of_48",
            # 48 steps, not 24: torch.profiler's window start and export (70-200 ms, more under load) are
            # profiler_overhead spread over every step; over 24 steps of ~10 ms they outranked the
            # launch-bound finding under two busy loops
            "the same tiny-op model; ops on 8 of 48 steps (ops_schedule)",
            "host_bound (launch-bound), per captured step",
            tiny_ops_loop(8, steps=48),
            judge_tiny_ops,
            sane_tiny_ops,
            figures_tiny_ops,
        ),
        Scenario(
            "memory_growth",
            "a list keeps every step's loss graph and a 2 MB tensor",
            "memory_growth finding",
            memory_growth_loop,
            judge_memory,
            sane_memory,
            figures_memory,
        ),
        Scenario(
            "memory_growth_short",
            "every step's loss and logits kept with their graphs, 60 steps and no pause: RSS more than "
            "doubles in a few seconds (shorter than memory_trend_s)",
            "memory_growth finding",
            lambda out: memory_growth_loop(out, short=True),
            judge_memory,
            sane_short_memory,
            figures_short_memory,
        ),
        Scenario(
            "step_forgotten",
            "Profiler() with phases, profiler.step() never called; input-bound loop",
            "input_bound, on 20 steps inferred from the repeating phases (step_source inferred; the report "
            "says so and that step() gives exact boundaries)",
            forgotten_step_loop,
            judge_forgotten,
            sane_forgotten,
            figures_forgotten,
        ),
        Scenario(
            "manual_phases_input",
            "quickstart API (phases + step()); 1 worker, 40 ms batches",
            "input_bound",
            manual_phases_loop,
            judge_input,
            sane_input,
            figures_input,
        ),
        Scenario(
            "ddp_slow_rank",
            "2 DDP ranks (gloo); rank 1 sleeps 40 ms more per step before forward",
            "straggler_rank 1 (cluster_summary.json)",
            ddp_loop,
            judge_ddp,
            sane_ddp,
            figures_ddp,
            multiprocess=True,
        ),
    ]
    return s


#: What profview answers today where it is wrong (the tests' xfail reasons), and whether it is wrong in
#: every run (strict) or only in some (flaky: its answer depends on timing). Diagnoses: docs/tuning-guide.md
#: "Known wrong verdicts" and the report of the change that added the bank.
WRONG_TODAY: dict[str, tuple[str, bool]] = {}


def _with_today(sc: Scenario) -> Scenario:
    if sc.name not in WRONG_TODAY:
        return sc
    reason, flaky = WRONG_TODAY[sc.name]
    return replace(sc, wrong_today=reason, flaky_today=flaky)


SCENARIOS: dict[str, Scenario] = {sc.name: _with_today(sc) for sc in _bank()}
assert set(WRONG_TODAY) <= set(SCENARIOS), set(WRONG_TODAY) - set(SCENARIOS)


def run_scenario(sc: Scenario, out: Path, attempts: int = 1) -> Outcome:
    """Run one scenario into `out` (emptied first) in this process, and judge what profview wrote.

    With attempts > 1 the scenario is run again (at most that many times in all) while its own clock
    says the injection did not take effect (`insane`, e.g. the machine was so loaded that a "fast"
    loader was not); a run whose injection held is never repeated, whatever profview said.
    """
    for _ in range(attempts - 1):
        o = _run_once(sc, out)
        if not o.insane:
            return o
    return _run_once(sc, out)


def _run_once(sc: Scenario, out: Path) -> Outcome:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model on one core: the loader workers / the other rank get the other
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            truth = sc.loop(out)
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - started
    o = Outcome.load(sc.name, out, truth)
    o.seconds = seconds
    o.insane = sc.sanity(o)
    o.problems = sc.judge(o)
    try:
        o.figures = sc.figures(o)
    except Exception as exc:  # figures are for the table only
        o.figures = f"<figures failed: {exc!r}>"
    return o


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "ddp-worker":
        ddp_worker(Path(sys.argv[2]))
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "memory-worker":
        memory_growth_worker(Path(sys.argv[2]), short=sys.argv[3:] == ["short"])
    else:
        import tempfile

        names = sys.argv[1:] or list(SCENARIOS)
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                o = run_scenario(SCENARIOS[name], Path(tmp) / name)
                print(
                    f"{name}: {o.seconds:.1f}s right={o.right} got {o.top}\n    {o.figures}"
                    f"\n    problems={o.problems}\n    insane={o.insane}",
                    flush=True,
                )

"""Step inference (profiler/analysis/steps.py): time to find the steps of a run that marks none.

    python benchmarks/bench_step_inference.py [--sizes 1e6,1e7] [--period 1000]

A synthetic recording of user ops as `Profiler` stores it (categorical columns): a loop thread whose
iterations launch `period` ops of ~300 names (names repeat inside an iteration, as aten ops do),
2 ms idle before each iteration, and a loader thread adding 5 % ops of its own at random times. For
each size: `ensure_steps` end to end (lanes, period, boundaries, placing every op in its step),
checked against the loop's own iteration count.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

from profiler.analysis.steps import ensure_steps
from profiler.model import OP_COLUMNS, THREAD_COLUMNS, Run, conform


def synthetic_run(n_ops: int, period: int, seed: int = 0) -> tuple[Run, int]:
    rng = np.random.default_rng(seed)
    unit = rng.integers(0, 300, period)
    unit[0] = 300  # the iteration's first op
    iterations = n_ops // period
    codes = np.tile(unit, iterations)
    first = np.tile(np.arange(period) == 0, iterations)
    dur = rng.integers(1_000, 20_000, len(codes))
    start = np.cumsum(np.where(first, 2_000_000, rng.integers(0, 2_000, len(codes))) + np.concatenate([[0], dur[:-1]]))
    n_load = len(codes) // 20
    codes = np.concatenate([codes, 301 + rng.integers(0, 5, n_load)])
    start = np.concatenate([start, np.sort(rng.integers(0, int(start[-1]), n_load))])
    dur = np.concatenate([dur, np.full(n_load, 5_000)])
    stream = np.concatenate([np.zeros(len(codes) - n_load, np.int8), np.ones(n_load, np.int8)])
    names = [f"aten::op{i}" for i in range(306)]
    ops = conform(
        {
            "device": pd.Categorical.from_codes(np.zeros(len(codes), np.int8), ["cpu"]),
            "stream": pd.Categorical.from_codes(stream, ["MainThread", "loader"]),
            "name": pd.Categorical.from_codes(codes, names),
            "op_type": pd.Categorical.from_codes(codes, names),
            "start_ns": start,
            "dur_ns": dur,
            "self_ns": dur,
        },
        OP_COLUMNS,
    )
    threads = conform({"tid": [0, 1], "os_tid": [1, 2], "name": ["MainThread", "loader"]}, THREAD_COLUMNS)
    return Run(info={"data_origin": "profview"}, ops=ops, threads=threads), iterations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="ops of the loop thread, comma-separated")
    ap.add_argument("--period", type=int, default=1000, help="ops per iteration")
    args = ap.parse_args()
    for size in (int(float(s)) for s in args.sizes.split(",")):
        run, iterations = synthetic_run(size, args.period)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            run = ensure_steps(run)
            seconds = time.perf_counter() - started
        found = run.info["step_boundaries"]
        print(
            f"{len(run.ops):>12,} ops: {seconds:6.2f} s ({1e9 * seconds / len(run.ops):5.0f} ns/op), "
            f"{len(run.steps)} steps for {iterations} iterations, period {found.get('period')}, "
            f"boundary rule: {found.get('boundary_rule')}"
        )


if __name__ == "__main__":
    main()

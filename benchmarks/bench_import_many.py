"""Benchmark: `profview import` of a job's rank traces one after another against `--jobs N` processes.

Builds R rank traces (default 8) of about E events each (default 200,000) from the real
tests/data/kineto/sampled_rank-0.json.gz (replicated as bench_kineto_import.py does, each with its own
rank in distributedInfo), then times, each in a fresh `profview` process on the same files: one
`profview import` per trace (one after another), and one `profview import ALL -o DIR --jobs N`
(parallel, with the cluster files). Prints both wall times and their ratio, and checks that both
directories hold the same per-rank files, byte for byte.

    .venv/bin/python benchmarks/bench_import_many.py [--ranks 8] [--events 200000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_kineto_import import SEED_TRACE, replicated_trace  # noqa: E402

from profiler.importers.kineto_events import load_trace_object  # noqa: E402

PROFVIEW = str(Path(sys.executable).with_name("profview"))


def rank_traces(directory: Path, ranks: int, events: int) -> list[Path]:
    """`ranks` traces of about `events` events, rank 0..ranks-1 of one job."""
    trace = replicated_trace(load_trace_object(SEED_TRACE), events)
    paths = []
    for rank in range(ranks):
        trace["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
        path = directory / f"rank{rank}.pt.trace.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    return paths


def timed(label: str, commands: list[list[str]]) -> float:
    t0 = time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    print(f"{label}: {seconds:.1f} s", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_import_many_") as tmp:
        traces = rank_traces(Path(tmp), args.ranks, args.events)
        size = sum(p.stat().st_size for p in traces) / 1e6
        print(f"{args.ranks} traces, {size:.0f} MB in all")
        alone, together = Path(tmp) / "alone", Path(tmp) / "together"
        serial = timed("one after another", [[PROFVIEW, "import", str(p), "-o", str(alone)] for p in traces])
        parallel = timed(
            f"--jobs {args.jobs}",
            [[PROFVIEW, "import", *map(str, traces), "-o", str(together), "--jobs", str(args.jobs)]],
        )
        print(f"ratio --jobs {args.jobs} / one after another: {parallel / serial:.2f}")
        same = all(filecmp.cmp(p, together / p.name, shallow=False) for p in alone.iterdir())
        print(f"per-rank files identical: {same}; cluster files: {sorted(p.name for p in together.glob('cluster_*'))}")


if __name__ == "__main__":
    main()

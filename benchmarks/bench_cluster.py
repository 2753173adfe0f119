"""Cluster benchmark: what one rank writes per step, and what merging N ranks costs.

    python benchmarks/bench_cluster.py [--ranks 8 64 256] [--steps 200]

1. Bytes per rank per step: a DDP-like step recorded by the real Profiler (fp_start / bp_end
   marks and an optimizer phase as attach() records them, four gradient-bucket collectives,
   optionally 50 user ops), flushed to the raw store; raw bytes and analysed output bytes per step.
2. Merge cost: N synthetic rank directories (profiler_info + step_trace of `--steps` steps, a
   straggler among them) merged by `write_cluster_outputs` (read every rank's files, the cluster
   analysis, cluster_summary.json / cluster_step_trace.csv, and the merged timeline of at most
   TIMELINE_RANKS ranks loaded from a real raw store). Time, output sizes and peak memory per N
   (`--ranks 4096 --steps 1000` is the 4096-rank job of docs/performance.md, measured).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler import Profiler
from profiler.capture.distributed import COMM, DDP_BUCKET
from profiler.export.cluster import TIMELINE_RANKS, write_cluster_outputs
from profiler.export.csv_json import write_csv, write_json
from profiler.formats.columns import STEP_TRACE_COLUMNS
from profiler.postprocess.recording import analyse_directory, load_rank
from profiler.record.recorder import hot, now_ns

BUCKETS = 4


def record_steps(out: Path, steps: int, user_ops: int) -> Profiler:
    """Record `steps` DDP-like steps (marks, optimizer phase, bucket collectives, `user_ops` ops each)."""
    profiler = Profiler(out, host_counters=False, gpu_counters=False)
    bucket = profiler._point(COMM, DDP_BUCKET, "all_reduce")
    optimizer = profiler.phase("optimizer")
    op = profiler.op("MatMul")
    for _ in range(steps):
        profiler.mark("fp_start")
        for _ in range(user_ops):
            with op:
                pass
        for _ in range(BUCKETS):
            t0 = now_ns()
            hot.sample(t0, bucket, 1000, 25 << 20)
        profiler.mark("bp_end")
        with optimizer:
            pass
        profiler.step()
    profiler.stop()
    return profiler


def bytes_per_step(steps: int, user_ops: int) -> dict[str, float]:
    """Raw store and analysed output bytes per step of one rank."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        record_steps(out, steps, user_ops)
        raw = sum(p.stat().st_size for p in (out / "raw").glob("*.pvraw"))
        analyse_directory(out, progress=False)
        outputs = {p.name.split("_")[0]: p.stat().st_size for p in out.iterdir() if p.is_file()}
        return {
            "raw": raw / steps,
            "step_trace": outputs.get("step", 0) / steps,
            "timeline": outputs.get("timeline", 0) / steps,
            "all_outputs": sum(outputs.values()) / steps,
        }


def synthetic_ranks(directory: Path, ranks: int, steps: int, template: Path) -> None:
    """`ranks` ranks' analysed outputs (rank 3 a straggler), sharing one real raw store for the timeline."""
    rng = np.random.default_rng(0)
    (directory / "raw").mkdir(parents=True)
    for r in range(ranks):
        n = steps
        fp_bp = 40 + rng.normal(0, 0.5, n) + (8 if r == 3 else 0)
        wait = np.where(r == 3, 0.0, 8.0) + rng.normal(0, 0.2, n).clip(0)
        trace = pd.DataFrame({c: np.zeros(n) for c in STEP_TRACE_COLUMNS})
        trace["step"] = np.arange(n)
        trace["iteration_gap_ms"], trace["fp_bp_ms"], trace["tail_ms"] = 2.0, fp_bp, 3.0 + wait
        trace["total_ms"] = trace["iteration_gap_ms"] + trace["fp_bp_ms"] + trace["tail_ms"]
        trace["start_ms"] = np.concatenate([[0], np.cumsum(trace["total_ms"])[:-1]])
        trace["all_reduce_ms"], trace["all_reduce_overlap_ms"] = 10.0 + wait, 8.0
        trace["fp_start_source"] = trace["bp_end_source"] = "marked"
        write_csv(trace, directory / f"step_trace_{r}.csv")
        write_json(
            {
                "rank": r,
                "world_size": ranks,
                "recording": {"stopped_cleanly": True},
                "config": {"ranks": None},
                "clock": {
                    "origin_monotonic_ns": 10**12 + r * 1000,
                    "origin_unix_ns": 10**18 + r * 1000,
                    "offset_to_rank0_ns": r * 1000,
                    "offset_uncertainty_ns": 20_000,
                },
            },
            directory / f"profiler_info_{r}.json",
        )
    for raw in template.glob("*.pvraw"):
        shutil.copy(raw, directory / "raw" / raw.name)


def load_as_rank(template_dir: Path):
    """A run loader for the merged timeline: the template's run, relabelled as the asked-for rank."""

    def load(directory: Path, rank: int):
        run = load_rank(template_dir, 0)
        run.info["rank"] = rank
        return run

    return load


def merge_cost(ranks: int, steps: int, template: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        synthetic_ranks(out, ranks, steps, template / "raw")
        before = psutil.Process().memory_info().rss
        t0 = time.perf_counter()
        written = write_cluster_outputs(out, load_as_rank(template))
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        sizes = {p.name: p.stat().st_size for p in written}
        return {
            "seconds": seconds,
            "ms_per_rank": 1e3 * seconds / ranks,
            "step_table_bytes_per_rank_step": sizes["cluster_step_trace.csv"] / (ranks * steps),
            "summary_bytes": sizes["cluster_summary.json"],
            "timeline_bytes": sizes["cluster_timeline.json"],
            "peak_rss_mb": peak / 2**20,
            "merge_rss_growth_mb": max(peak - before, 0) / 2**20,
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    print("bytes per rank per step (raw store / step_trace csv / timeline json / all outputs):")
    for ops in (0, 50):
        b = bytes_per_step(2000, ops)
        print(
            f"  {BUCKETS} buckets, {ops:3d} user ops: raw {b['raw']:7.0f} B   step_trace {b['step_trace']:5.0f} B"
            f"   timeline {b['timeline']:7.0f} B   all outputs {b['all_outputs']:7.0f} B"
        )
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp)
        record_steps(template, args.steps, 0)
        print(f"merge cost, {args.steps} steps per rank, timeline of at most {TIMELINE_RANKS} ranks:")
        for n in args.ranks:
            m = merge_cost(n, args.steps, template)
            print(
                f"  {n:5d} ranks: {m['seconds']:6.2f} s ({m['ms_per_rank']:.1f} ms / rank)   cluster_step_trace "
                f"{m['step_table_bytes_per_rank_step']:.0f} B / rank-step   summary {m['summary_bytes'] / 1e3:.0f} kB"
                f"   timeline {m['timeline_bytes'] / 1e6:.2f} MB   peak RSS {m['peak_rss_mb']:.0f} MB (the merge "
                f"added up to {m['merge_rss_growth_mb']:.0f} MB)",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Cluster analysis without processes: clock offsets, straggler / wait rules, rank coverage, imported GPU traces."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.cluster import (
    clock_shifts,
    cluster_summary,
    compact_ranks,
    rank_coverage,
    timeline_ranks,
)
from profiler.capture.distributed import estimate_offsets, payload_bytes
from profiler.formats.columns import STEP_TRACE_COLUMNS

# ---- clock offsets ----------------------------------------------------------------------------


def simulated_rounds(offsets_ns: np.ndarray, rounds: int, rng: np.random.Generator) -> np.ndarray:
    """all_gather rounds on ranks whose clocks read true time + offset: (rank, round, (before, after))."""
    world = len(offsets_ns)
    stamps = np.empty((world, rounds, 2), dtype=np.int64)
    t = 1_000_000_000
    for k in range(rounds):
        enter = t + rng.integers(0, 2_000_000 if k == 0 else 20_000, world)  # round 0: ranks arrive spread out
        release = enter.max() + rng.integers(5_000, 40_000)  # nobody leaves before the last enters
        leave = release + rng.integers(1_000, 30_000, world)
        stamps[:, k, 0] = enter + offsets_ns
        stamps[:, k, 1] = leave + offsets_ns
        t = leave.max() + 10_000
    return stamps


def test_offsets_are_recovered_within_their_uncertainty():
    rng = np.random.default_rng(3)
    true = np.array([0, 123_456_789, -987_654, 5_000_000_000])
    offset, uncertainty, consistent = estimate_offsets(simulated_rounds(true + 777, 8, rng))
    assert consistent.all()
    rel = true - true[0]
    assert (np.abs(offset - rel) <= uncertainty).all()
    assert (uncertainty[1:] < 100_000).all() and uncertainty[0] < 100_000


def test_inconsistent_bounds_fall_back_to_the_min_round_trip_round():
    stamps = np.array([[[0, 100], [1000, 1100]], [[500, 600], [-5000, -4900]]])  # rank 1's clock jumped
    offset, uncertainty, consistent = estimate_offsets(stamps)
    assert not consistent[1] and consistent[0]
    assert offset[1] == 500 and uncertainty[1] == 100


def test_payload_bytes_per_collective():
    torch = pytest.importorskip("torch")
    t = torch.ones(10)
    assert payload_bytes("all_reduce", (t,), {}) == 40
    assert payload_bytes("broadcast", (), {"tensor": t}) == 40
    assert payload_bytes("all_gather", ([t, t], t), {}) == 40
    assert payload_bytes("reduce_scatter", (t, [t, t, t]), {}) == 120
    assert payload_bytes("barrier", (), {}) == 0


# ---- synthetic ranks --------------------------------------------------------------------------


def trace(gap, fp_bp, tail, comm, overlap, steps=10, start_ms=0.0, first_step=0) -> pd.DataFrame:
    """A step trace with constant phases (ms)."""
    n = steps
    total = gap + fp_bp + tail
    t = pd.DataFrame({c: np.zeros(n) for c in STEP_TRACE_COLUMNS})
    t["step"] = np.arange(first_step, first_step + n)
    t["start_ms"] = start_ms + total * np.arange(n)
    t["iteration_gap_ms"], t["fp_bp_ms"], t["tail_ms"], t["total_ms"] = gap, fp_bp, tail, total
    t["all_reduce_ms"], t["all_reduce_overlap_ms"] = comm, overlap
    return t


def info(rank, world=4, offset=0, origin_mono=0, clean=True, ranks=None):
    return {
        "rank": rank,
        "world_size": world,
        "recording": {"stopped_cleanly": clean},
        "config": {"ranks": ranks},
        "clock": {
            "origin_monotonic_ns": origin_mono,
            "origin_unix_ns": 10**18 + origin_mono,
            "offset_to_rank0_ns": offset,
            "offset_uncertainty_ns": 1000,
        },
    }


def test_a_slow_forward_is_the_straggler_and_the_others_wait():
    # rank 2 computes 20 ms longer; the others wait 20 ms in the all-reduce (in their tail)
    traces = {r: trace(2, 50, 25, comm=23, overlap=0) for r in (0, 1, 3)}
    traces[2] = trace(2, 70, 5, comm=3, overlap=0)
    doc, table = cluster_summary({r: info(r) for r in traces}, traces)
    assert doc["straggler"]["rank"] == 2 and doc["straggler"]["phase"] == "fp_bp_excl_comm_ms"
    assert doc["straggler"]["excess_ms"] == pytest.approx(20.0)
    assert doc["straggler"]["others_wait_ms"] == pytest.approx(20.0)
    assert (table["slowest_rank"] == 2).all()
    assert (
        table.loc[table["rank"] != 2, "wait_ms"].eq(20).all() and table.loc[table["rank"] == 2, "wait_ms"].eq(0).all()
    )
    finding = next(f for f in doc["findings"] if f["kind"] == "straggler_rank")
    assert finding["rank"] == 2 and finding["severity"] == "high"
    assert doc["communication"]["wait_ms"] == pytest.approx(15.0)
    assert not any(f["kind"] == "comm_bound" for f in doc["findings"])  # the exposed comm is waiting


def test_balanced_ranks_have_no_straggler_but_can_be_comm_bound():
    traces = {r: trace(1, 40, 30, comm=28 + 0.1 * r, overlap=0) for r in range(4)}
    doc, _ = cluster_summary({r: info(r) for r in traces}, traces)
    assert doc["straggler"] is None
    comm = next(f for f in doc["findings"] if f["kind"] == "comm_bound")
    assert comm["at_stake_ms"] == pytest.approx(28.0, abs=0.2)


def test_missing_not_profiled_and_stopped_early_ranks():
    traces = {0: trace(1, 10, 1, 1, 0), 1: trace(1, 10, 1, 1, 0, steps=4), 3: trace(1, 10, 1, 1, 0)}
    infos = {
        0: info(0, world=6, ranks=[0, 1, 2, 3]),
        1: info(1, world=6, clean=False, ranks=[0, 1, 2, 3]),
        3: info(3, world=6, ranks=[0, 1, 2, 3]),
    }
    cov = rank_coverage(infos, traces)
    assert cov["missing"] == [2] and cov["not_profiled"] == [4, 5] and cov["present"] == [0, 1, 3]
    assert cov["stopped_early"] == {"1": {"last_step": 3, "stopped_cleanly": False}}
    doc, table = cluster_summary(infos, traces)
    assert doc["warnings"][0] == "1 of 6 ranks wrote no data: 2; the others are analysed"
    assert "rank 1 did not stop cleanly (killed?): its data ends at step 3, the cluster's at step 9" in doc["warnings"]
    assert len(table) == 24 and doc["steps"]["all_ranks"] == 4


def test_clock_shifts_put_ranks_on_the_reference_axis():
    # rank 1's clock reads 5 ms ahead of rank 0's; its recording started 2 ms (true time) after rank 0's
    infos = {0: info(0, origin_mono=1_000_000_000), 1: info(1, origin_mono=1_007_000_000, offset=5_000_000)}
    shifts, clock = clock_shifts(infos)
    assert shifts == {0: 0, 1: 2_000_000} and clock["method"] == "offset_to_rank0"
    infos[1]["clock"]["offset_to_rank0_ns"] = None
    shifts, clock = clock_shifts(infos)
    assert shifts[1] == 7_000_000 and clock["method"] == "unix_clock"


def test_timeline_sample_keeps_reference_straggler_and_extremes():
    present = list(range(100))
    per_rank = [{"rank": r, "busy_ms": 10.0 + (r == 57) * 5 - (r == 12) * 3} for r in present]
    doc = {"ranks": {"present": present}, "straggler": {"rank": 57}, "per_rank": per_rank}
    chosen = timeline_ranks(doc, 16)
    assert len(chosen) == 16 and {0, 57, 12} <= set(chosen)
    assert timeline_ranks({"ranks": {"present": [0, 1, 2]}}, 16) == [0, 1, 2]


def test_compact_ranks():
    assert compact_ranks([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"


# ---- two real multi-rank GPU traces (Kineto) --------------------------------------------------


def kernel_breakdown_from_json(path) -> dict:
    """Device time per category computed straight from the trace file (the test's own reading)."""
    events = json.load(gzip.open(path))["traceEvents"]
    out = {"compute_ms": 0.0, "comm_ms": 0.0, "memcpy_ms": 0.0, "memset_ms": 0.0, "comm_count": 0}
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name, dur = e.get("cat"), e.get("name", ""), float(e.get("dur", 0)) / 1e3
        if cat == "kernel" and "nccl" in name.lower():
            out["comm_ms"] += dur
            out["comm_count"] += 1
        elif cat == "kernel":
            out["compute_ms"] += dur
        elif cat == "gpu_memcpy":
            out["memcpy_ms"] += dur
        elif cat == "gpu_memset":
            out["memset_ms"] += dur
    return out


def test_two_imported_gpu_ranks_breakdown_and_cluster(captures, tmp_path):
    from profiler.analysis.results import analyse_run
    from profiler.analysis.steps import ensure_steps
    from profiler.export.cluster import write_cluster_files
    from profiler.importers.kineto import read_kineto_traces

    paths = [captures / "kineto" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
    runs = read_kineto_traces(paths)
    analyses = {run.rank: analyse_run(ensure_steps(run)) for run in runs}
    doc, table = cluster_summary(
        {r: a.run.info for r, a in analyses.items()},
        {r: a.step_trace for r, a in analyses.items()},
        ops_by_rank={r: a.run.ops for r, a in analyses.items()},
    )
    assert doc["ranks"]["world_size"] == 128 and doc["ranks"]["present"] == [0, 1]
    assert len(doc["ranks"]["missing"]) == 126 and "126 of 128 ranks wrote no data: 2-127" in doc["warnings"][0]
    devices = {d["rank"]: d for d in doc["devices"]}
    assert devices[0]["device"] == "cuda:0" and devices[1]["device"] == "cuda:1"
    for rank, path in zip((0, 1), paths):
        expected = kernel_breakdown_from_json(path)
        for key in ("compute_ms", "comm_ms", "memcpy_ms", "memset_ms"):
            assert devices[rank][key] == pytest.approx(expected[key], abs=0.01), (rank, key)
        assert devices[rank]["comm_count"] == expected["comm_count"] == 10
        assert 0 <= devices[rank]["comm_overlap_compute_ms"] <= devices[rank]["comm_ms"]
    assert sorted(table["step"].unique()) == [551, 552] and len(table) == 4
    # both ranks communicate for most of each step: the per-rank comm share is reported
    assert all(r["comm_share_pct"] > 0 for r in doc["per_rank"])
    written = write_cluster_files(tmp_path, doc, table, runs)
    events = json.loads((tmp_path / "cluster_timeline.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert names[0] == "host (rank 0)" and names[1] == "host (rank 1)"
    # each rank's collectives: their host ranges (nccl:all_reduce, ...) and their kernels on its GPU
    assert {e["pid"] for e in events if e.get("cat") == "comm"} == {0, 1, 1000, 2000}
    assert {p.name for p in written} == {"cluster_step_trace.csv", "cluster_timeline.json", "cluster_summary.json"}

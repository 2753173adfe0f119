"""Multi-process runs on CPU: real ranks (gloo, DDP) launched like torchrun, profiled, then checked.

Each scenario is one job of tests/support/multirank_worker.py processes; the jobs are module fixtures so
that the checks share them. Every process has a generous deadline and is killed when it passes it,
so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch.distributed")

from profiler.postprocess.recording import analyse_directory

from support.multirank import DELAY_MS, Job, assert_ok, launch

pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory) -> Job:
    """2 ranks, rank 1's forward sleeps 30 ms every step."""
    return launch(
        tmp_path_factory.mktemp("straggler"), 2, "--steps", "6", "--delay-rank", "1", "--delay-ms", str(DELAY_MS)
    )


@pytest.fixture(scope="module")
def four_rank_job(tmp_path_factory) -> Job:
    """4 ranks with DDP buckets plus explicit broadcast / all_gather calls."""
    return launch(tmp_path_factory.mktemp("four"), 4, "--steps", "4", "--broadcast")


@pytest.fixture(scope="module")
def killed_job(tmp_path_factory) -> Job:
    """3 ranks; rank 2 dies with os._exit after 3 steps, the others' next all-reduce fails."""
    return launch(
        tmp_path_factory.mktemp("killed"),
        3,
        "--steps",
        "8",
        "--kill-rank",
        "2",
        "--kill-after",
        "3",
        "--step-sleep-ms",
        "20",
        "--timeout-s",
        "30",
        "--cluster-timeout-s",
        "8",
    )


def timeline_events(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def check_rank_files(job: Job, rank: int, steps: int) -> pd.DataFrame:
    """Every per-rank file is there and the step trace sums; returns the step trace."""
    for name in (
        f"profiler_info_{rank}.json",
        f"step_trace_{rank}.csv",
        f"timeline_{rank}.json",
        f"op_type_{rank}.csv",
        f"report_{rank}.json",
    ):
        assert (job.out / name).is_file(), name
    assert list((job.out / "raw").glob(f"r{rank}-p*.pvraw"))
    trace = job.csv(f"step_trace_{rank}.csv")
    assert len(trace) == steps
    parts = trace["iteration_gap_ms"] + trace["fp_bp_ms"] + trace["tail_ms"]
    np.testing.assert_allclose(parts, trace["total_ms"], atol=1e-5)
    assert (trace[["iteration_gap_ms", "fp_bp_ms", "tail_ms"]] >= 0).all().all()
    assert (trace["all_reduce_ms"] > 0).all(), "an all_reduce span in every step"
    assert (trace["fp_start_source"] == "marked").all() and (trace["bp_end_source"] == "marked").all()
    return trace


def merged_processes(job: Job) -> dict[int, str]:
    events = timeline_events(job.out / "cluster_timeline.json")
    return {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}


# ---- 2 ranks: a straggler ---------------------------------------------------------------------


def test_two_ranks_write_their_files_with_collectives_in_every_step(straggler_job):
    assert_ok(straggler_job)
    for rank in range(2):
        check_rank_files(straggler_job, rank, steps=6)
        detail = straggler_job.csv(f"op_detail_{rank}.csv")
        buckets = detail[detail["name"] == "all_reduce (DDP bucket)"]
        assert len(buckets) == 1 and int(buckets["count"].iloc[0]) >= 6
        assert buckets["category"].iloc[0] == "comm"
        info = straggler_job.json(f"profiler_info_{rank}.json")
        assert info["rank"] == rank and info["world_size"] == 2
        assert info["clock"]["offset_method"].startswith("all_gather")
        assert 0 <= info["clock"]["offset_uncertainty_ns"] < 50e6
    assert straggler_job.json("profiler_info_0.json")["clock"]["offset_to_rank0_ns"] == 0
    counters = straggler_job.csv("device_counters_0.csv")
    comm_bytes = counters[counters["metric"] == "comm_bytes"]["value"]
    assert len(comm_bytes) >= 6 and (comm_bytes > 0).all()


def test_merged_timeline_has_one_aligned_process_per_rank(straggler_job):
    assert merged_processes(straggler_job) == {0: "host (rank 0)", 1: "host (rank 1)"}
    events = timeline_events(straggler_job.out / "cluster_timeline.json")
    steps = [e for e in events if e.get("cat") == "step"]
    ends = {(e["pid"], e["args"]["step"]): e["ts"] + e["dur"] for e in steps}
    assert {s for _, s in ends} == set(range(6))
    # the all-reduce synchronises the ranks: step ends line up once the clocks are aligned. What each
    # rank does after it (the optimizer step) is scheduled on its own: ~1 ms apart on a quiet machine,
    # 10-20 ms at load 5 (steps of ~60 ms); the bound is half a step: each rank's times start at its own
    # origin, so a wrong shift moves a rank by the processes' start-up gap (~110 ms here)
    gaps_ms = [abs(ends[(0, s)] - ends[(1, s)]) / 1e3 for s in range(1, 6)]
    step_ms = np.median([e["dur"] for e in steps]) / 1e3
    assert np.median(gaps_ms) < max(10.0, step_ms / 2), (gaps_ms, step_ms)
    comm = [e for e in events if e.get("cat") == "comm"]
    assert {e["pid"] for e in comm} == {0, 1}


def test_merged_timeline_past_its_limit_holds_the_clusters_key_steps(straggler_job, tmp_path):
    """Within the limit the merged timeline is every event (as analyse() wrote it); past it, each rank's
    events of the cluster's median and slowest steps (by the slowest rank's step time), said in the summary."""
    import shutil

    from profiler.export.cluster import write_cluster_outputs
    from profiler.postprocess.recording import load_rank

    copy = tmp_path / "job"
    shutil.copytree(straggler_job.out, copy)
    write_cluster_outputs(copy, load_rank)
    original = (straggler_job.out / "cluster_timeline.json").read_bytes()
    assert (copy / "cluster_timeline.json").read_bytes() == original
    full = json.loads((copy / "cluster_summary.json").read_text())["timeline"]
    rows = [e for e in timeline_events(copy / "cluster_timeline.json") if e["ph"] == "X"]
    assert full["content"] == "full" and full["events"] == full["events_written"] == len(rows) > 12

    write_cluster_outputs(copy, load_rank, max_events=1)
    summary = json.loads((copy / "cluster_summary.json").read_text())
    capped = summary["timeline"]
    table = pd.read_csv(copy / "cluster_step_trace.csv")
    pace = table[table["step"] >= 1].groupby("step")["total_ms"].max()  # warm-up step 0 left out
    by_time = pace.sort_values(kind="stable")
    median, slowest = int(by_time.index[(len(by_time) - 1) // 2]), int(pace.idxmax())
    assert capped["content"] == "key steps" and capped["max_events"] == 1 and capped["events"] == full["events"]
    assert (capped["median_step"], capped["slowest_step"]) == (median, slowest)
    assert capped["steps"] == sorted({median, slowest} | set(capped["steps"])) and "export --chrome" in capped["rest"]
    kept = [e for e in timeline_events(copy / "cluster_timeline.json") if e["ph"] == "X"]
    assert capped["events_written"] == len(kept) < len(rows)
    # each rank keeps exactly its rows that start inside the chosen steps' windows
    windows = {(e["pid"], e["args"]["step"]): (e["ts"], e["ts"] + e["dur"]) for e in rows if e["cat"] == "step"}
    chosen = [w for (pid, step), w in windows.items() if step in capped["steps"]]
    inside = [
        e
        for e in rows
        if any(
            windows[(e["pid"], s)][0] <= e["ts"] < windows[(e["pid"], s)][1]
            for s in capped["steps"]
            if (e["pid"], s) in windows
        )
    ]
    assert len(chosen) == 2 * len(capped["steps"])
    assert sorted(map(json.dumps, kept)) == sorted(map(json.dumps, inside))


def test_the_delayed_rank_is_the_straggler_and_the_others_wait_at_the_all_reduce(straggler_job):
    summary = straggler_job.json("cluster_summary.json")
    assert summary["straggler"]["rank"] == 1
    assert summary["straggler"]["phase"] == "fp_bp_excl_comm_ms"
    assert summary["straggler"]["excess_ms"] == pytest.approx(DELAY_MS, abs=15.0)
    kinds = {(f["kind"], f.get("rank")) for f in summary["findings"]}
    assert ("straggler_rank", 1) in kinds
    # rank 0 spends the delay waiting in the all-reduce: its all_reduce_ms is ~30 ms longer
    # (medians over the steps: a loaded machine can deschedule a rank for a step)
    ar0 = straggler_job.csv("step_trace_0.csv")["all_reduce_ms"].median()
    ar1 = straggler_job.csv("step_trace_1.csv")["all_reduce_ms"].median()
    assert ar0 - ar1 == pytest.approx(DELAY_MS, abs=15.0)
    table = straggler_job.csv("cluster_step_trace.csv")
    assert len(table) == 12 and (table.loc[table["rank"] == 0, "slowest_rank"] == 1).sum() >= 4
    assert table.loc[table["rank"] == 0, "wait_ms"].median() == pytest.approx(DELAY_MS, abs=15.0)


# ---- 4 ranks ----------------------------------------------------------------------------------


def test_four_ranks_every_rank_profiled_and_merged(four_rank_job):
    assert_ok(four_rank_job)
    for rank in range(4):
        check_rank_files(four_rank_job, rank, steps=4)
        types = four_rank_job.csv(f"op_type_{rank}.csv")
        comm = types[types["category"] == "comm"].set_index("op_type")["count"]
        assert comm["broadcast"] == 4 and comm["all_gather"] == 4 and comm["all_reduce"] >= 4
        counters = four_rank_job.csv(f"device_counters_{rank}.csv")
        sizes = set(counters.loc[counters["metric"] == "comm_bytes", "value"])
        assert {256 * 4.0, 16 * 4.0} <= sizes  # the broadcast and all_gather payloads
    assert set(merged_processes(four_rank_job)) == {0, 1, 2, 3}
    summary = four_rank_job.json("cluster_summary.json")
    assert summary["ranks"]["present"] == [0, 1, 2, 3] and summary["ranks"]["missing"] == []
    assert len(four_rank_job.csv("cluster_step_trace.csv")) == 16
    assert four_rank_job.results[0]["written"].count("cluster_summary.json") == 1
    assert all("cluster_summary.json" not in four_rank_job.results[r]["written"] for r in (1, 2, 3))


# ---- a rank killed mid-run --------------------------------------------------------------------


def test_a_killed_rank_is_reported_and_the_others_are_analysed(killed_job):
    assert killed_job.codes[2] == 17 and 2 not in killed_job.results
    for rank in (0, 1):
        assert killed_job.codes[rank] == 0, killed_job.stderr[rank]
        assert killed_job.results[rank]["error"], "the survivors' collective failed"
        check_rank_files(killed_job, rank, steps=3)
    summary = killed_job.json("cluster_summary.json")
    assert summary["ranks"]["present"] == [0, 1, 2]
    assert summary["ranks"]["stopped_early"]["2"]["stopped_cleanly"] is False
    assert any("rank 2 did not stop cleanly" in w for w in summary["warnings"])
    assert 1 <= len(killed_job.csv("step_trace_2.csv")) <= 3  # rank 0 analysed the dead rank's store


def test_profview_analyse_merges_the_ranks_that_exist(killed_job, tmp_path):
    """World size 3, one rank's data gone entirely: the others are analysed, the rank is missing."""
    import shutil

    copy = tmp_path / "job"
    shutil.copytree(killed_job.out / "raw", copy / "raw")
    for raw in (copy / "raw").glob("r2-*"):
        raw.unlink()
    written = {p.name for p in analyse_directory(copy, progress=False)}
    assert {"cluster_summary.json", "cluster_step_trace.csv", "cluster_timeline.json"} <= written
    summary = json.loads((copy / "cluster_summary.json").read_text())
    assert summary["ranks"]["missing"] == [2] and summary["ranks"]["world_size"] == 3
    assert any("1 of 3 ranks wrote no data: 2" in w for w in summary["warnings"])


# ---- a subset of ranks ------------------------------------------------------------------------


def test_ranks_option_profiles_a_subset_without_deadlock(tmp_path):
    job = launch(tmp_path, 2, "--steps", "3", "--ranks", "0")
    assert_ok(job)
    assert job.results[1]["written"] == []
    assert not (tmp_path / "profiler_info_1.json").exists()
    assert not list((tmp_path / "raw").glob("r1-*"))
    check_rank_files(job, 0, steps=3)
    summary = job.json("cluster_summary.json")
    assert summary["ranks"]["not_profiled"] == [1] and summary["ranks"]["missing"] == []


# ---- the viewer's cluster page ----------------------------------------------------------------


def test_cluster_page_shows_heatmap_bars_and_the_straggler(straggler_job, tmp_path):
    import shutil

    from viewer.context import Context
    from viewer.inputs import load_input
    from viewer.pages import cluster

    copy = tmp_path / "loaded"  # pages read RunData only: the files may be gone once loaded
    shutil.copytree(straggler_job.out, copy)
    ctx = Context(load_input(copy))
    shutil.rmtree(copy)
    html = cluster.build(ctx)
    figures = "".join(ctx.figures.values())
    assert "Busy time per rank and step" in html and "waiting for slower ranks" in figures
    assert "Rank 1 is a straggler" in html and "measured clock offsets to rank 0" in html
    report = tmp_path / "report.html"
    from viewer.cli import main

    assert main([str(straggler_job.out), "-o", str(report)]) == 0
    assert '"type":"heatmap"' in report.read_text()


def test_cluster_page_refuses_a_malformed_cluster_table(straggler_job, tmp_path, capsys):
    import shutil

    from viewer.cli import main

    copy = tmp_path / "job"
    shutil.copytree(straggler_job.out, copy)
    (copy / "cluster_step_trace.csv").write_text("rank,step\n0,0\n")
    assert main([str(copy), "-o", str(tmp_path / "r.html")]) == 1
    assert "cluster_step_trace.csv is malformed: missing column(s)" in capsys.readouterr().err

"""Every finding rule, table in, findings out: each key a question declares is produced by its rule alone
from the tables of a recorded loop (tests/data/recorded/), a real capture (tests/data/kineto) or hand-built
tables, and its stake is the figure those tables give. The tables are computed once per source; each rule
then answers in milliseconds. The whole advisor on the same recordings: test_recorded_advisor.py and
test_recorded_scenarios.py."""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.advisor import framework_of, resolve_thresholds
from profiler.analysis.cluster import cluster_summary
from profiler.analysis.findings import QUESTIONS, question_of
from profiler.analysis.findings.base import Context, Finding, StepWindow, exposed_comm
from profiler.analysis.findings.recording import Needs as RecordingNeeds
from profiler.analysis.findings.recording import find as recording_find
from profiler.analysis.float64 import CAST_OP_NAME
from profiler.analysis.results import RankData, analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.postprocess.recording import load_rank

from support.advisor_loops import rank_files
from support.recorded import RECORDED, analysed_copy

REPO = Path(__file__).resolve().parents[2]
KINETO = REPO / "tests" / "data" / "kineto"


@functools.cache
def tables(source: str, **thresholds) -> tuple[RankData, Context]:
    """The tables a rule reads (RankData) and its context, of `source`: `recorded/<group>/<name>` (rank 0 of
    a recorded loop) or `kineto/<trace>` (a real capture, imported as `profview import` does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inferred steps, an old schema: said elsewhere
        if source.startswith("kineto/"):
            run = ensure_steps(read_kineto_trace(KINETO / f"{source.split('/', 1)[1]}.json.gz"))
        else:
            run = load_rank(RECORDED / source.split("/", 1)[1], 0)
    analysis = analyse_run(run)
    config = run.info.get("config") if isinstance(run.info.get("config"), dict) else {}
    th = resolve_thresholds(config.get("advisor_thresholds"), thresholds)
    return RankData(analysis, th), Context(run.rank, framework_of(run.info), th)


def answer(key: str, source: str, **thresholds) -> list[Finding]:
    """The findings the rule of `key`'s question gives on `source`'s tables, alone (no other rule runs)."""
    data, ctx = tables(source, **dict(sorted(thresholds.items())))
    return question_of(key).rank.answer(data, ctx)


def one(found: list[Finding], key: str) -> Finding:
    """The one finding of `key` (a key or a key prefix) among `found`."""
    mine = [f for f in found if (f.key or f.kind) == key or (f.key or f.kind).startswith(key + ":")]
    assert len(mine) == 1, [f.key or f.kind for f in found]
    return mine[0]


# ----------------------------------------------------------------------------- the cases, by key


@dataclass(frozen=True)
class Case:
    """Where a key's finding comes from and what its figures must be against the tables."""

    source: str
    check: Callable[[Finding, RankData], None]
    thresholds: tuple = ()
    pick: str = ""  # the key of the one finding checked, when the rule gives several (default: the case's key)


def steady(data: RankData) -> pd.DataFrame:
    return data.steps.steady


def stake_is(column: str) -> Callable[[Finding, RankData], None]:
    """The stake is the mean of a step-trace column over the steady steps, its share of the mean steady step."""

    def check(f: Finding, data: RankData) -> None:
        mean = float(steady(data)[column].mean())
        assert f.at_stake_ms == pytest.approx(mean, rel=1e-9, abs=1e-9)
        assert f.at_stake_pct == pytest.approx(100 * mean / float(steady(data)["total_ms"].mean()), rel=1e-9)
        assert f.severity == ""  # the advisor gives the severity, from the rank of every finding

    return check


def input_bound(f: Finding, data: RankData) -> None:
    """The stake is the data wait of every analysed step, the outliers' too (their excess own time is
    step_outliers'), as a share of the mean steady step."""
    mean = float(data.steps.analysed["data_wait_ms"].mean())
    assert f.at_stake_ms == pytest.approx(mean, rel=1e-9, abs=1e-9)
    assert f.at_stake_pct == pytest.approx(100 * mean / float(steady(data)["total_ms"].mean()), rel=1e-9)
    assert f.severity == ""
    assert f.kind == "input_bound" and f.at_stake_pct >= 50  # the loop waits for data most of its time


def transmission_bound(f: Finding, data: RankData) -> None:
    stake_is("data_wait_ms")(f, data)
    assert f.kind == "transmission_bound" and "host->device" in f.evidence


def host_gap(f: Finding, data: RankData) -> None:
    stake_is("gap_host_ms")(f, data)
    assert f.title.startswith("Host work between steps")


def gap_bound(f: Finding, data: RankData) -> None:
    stake_is("iteration_gap_ms")(f, data)
    assert steady(data)["gap_host_ms"].isna().all()  # nothing measured the data wait


def launch_bound(f: Finding, data: RankData) -> None:
    assert f.metrics["median_op_us"] < 50 and f.metrics["idle_share_pct"] >= 30
    assert f.metrics["ops_per_step"] >= 50 and 0 < f.at_stake_ms < float(steady(data)["fp_bp_ms"].mean())


def cast_hotspot(f: Finding, data: RankData) -> None:
    assert f.title.startswith("Cast") and f.key == "op_hotspot:cast:cpu"
    ops = data.op_type
    cast = ops[ops["op_type"].isin(["aten::to", "aten::_to_copy", "aten::copy_"])]["share_pct"].sum()
    assert f.metrics["share_pct"] >= cast - 1e-6  # the family holds at least these three


def test_a_float64_detour_is_charged_once():
    """The float64 loop's casts are the precision finding's (with the float64 work between them): the
    Cast and normalisation hotspots leave those ops out, so no millisecond is charged twice."""
    source = "recorded/scenarios/float64_ops_every_step"
    data, ctx = tables(source)
    (waste,) = answer("precision_waste", source)
    hotspots = [f for f in answer("op_hotspot", source) if f.key.startswith(("op_hotspot:cast", "op_hotspot:norm"))]
    charged = data.ops[data.float64_ops & data.ops["step"].isin(data.steps.captured["step"]).to_numpy()]
    assert waste.at_stake_ms == pytest.approx(charged["self_ns"].sum() / 1e6 / len(data.steps.captured))
    for f in hotspots:  # whatever a hotspot still reports is op time the precision finding does not hold
        assert "left out" in f.evidence
    ops = data.ops
    casts = (
        ops["name"].astype(str).str.contains(CAST_OP_NAME).to_numpy()
        & ops["step"].isin(data.steps.captured["step"]).to_numpy()
    )
    unclaimed_casts = float(ops["self_ns"].to_numpy()[casts & ~data.float64_ops].sum()) / 1e6
    cast = [f for f in hotspots if f.key.startswith("op_hotspot:cast")]
    assert sum(f.at_stake_ms for f in cast) <= unclaimed_casts / len(data.steps.captured) + 1e-9


def test_op_time_sums_read_a_chunk_of_ops_at_a_time_are_the_whole_masks(monkeypatch):
    """The op hotspot's sums (operators._self_ns: per device and op types, of the captured steps, of the ops
    another finding charges or of the others) read 7 ops at a time are the whole-table masks' sums, exactly."""
    from profiler import spill
    from profiler.analysis.findings import operators

    data, _ = tables("recorded/scenarios/float64_ops_every_step")
    needs = operators.Needs(data.steps, data.op_type, data.ops, data.float64_ops)
    ops, steps = data.ops, data.steps.captured["step"].to_numpy()
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    for device in {str(d) for d in ops["device"]}:
        for types in ({"aten::to", "aten::_to_copy", "aten::copy_"}, {"aten::add", "aten::sum"}):
            of = (ops["device"] == device).to_numpy() & ops["op_type"].isin(types).to_numpy()
            in_steps = of & ops["step"].isin(steps).to_numpy()
            for mask, chunked in (
                (of & data.float64_ops, operators._self_ns(needs, device, types, None, True)),
                (in_steps, operators._self_ns(needs, device, types, steps, None)),
                (in_steps & ~data.float64_ops, operators._self_ns(needs, device, types, steps, False)),
            ):
                assert chunked == int(ops["self_ns"].to_numpy()[mask].sum())
    for charged in (True, False):  # not vacuous: casts both charged to the detour and not
        assert operators._self_ns(needs, "cpu", {"aten::to", "aten::sum"}, steps, charged) > 0


def precision_waste(f: Finding, data: RankData) -> None:
    assert f.kind == "precision_waste" and "float64" in f.title and f.at_stake_pct >= 5


def tail_bound(f: Finding, data: RankData) -> None:
    tail = (steady(data)["tail_ms"] - exposed_comm(steady(data))).clip(lower=0).mean()
    assert f.at_stake_ms == pytest.approx(float(tail), rel=1e-6)


def comm_bound(f: Finding, data: RankData) -> None:
    stake = float(exposed_comm(steady(data)).mean())
    assert f.at_stake_ms == pytest.approx(stake, rel=1e-9) and f.metrics["overlap_ms"] == 0


def step_outliers(f: Finding, data: RankData) -> None:
    assert f.metrics["period_steps"] == 5 and f.metrics["outliers"] >= 4 and "every 5 steps" in f.title
    slow = sorted(data.steps.outliers["step"])
    assert len(slow) == f.metrics["outliers"] and sum(b - a == 5 for a, b in zip(slow, slow[1:])) >= 3


def memory_growth(f: Finding, data: RankData) -> None:
    assert f.key == "memory_growth:host:rss_bytes" and f.metrics["mb_per_step"] > 1 and f.at_stake_ms == 0


def profiler_overhead(f: Finding, data: RankData) -> None:
    stake_is("profiler_overhead_ms")(f, data)
    assert f.at_stake_pct >= 8


def device_idle(cause: str) -> Callable[[Finding, RankData], None]:
    """A device finding's stake is its idle cause per steady step, from the devices breakdown."""

    def check(f: Finding, data: RankData) -> None:
        assert f.at_stake_ms > 0 and f.at_stake_pct > 0
        assert cause in " ".join(f"{k}" for k in f.metrics) or cause in f.evidence

    return check


def any_positive(f: Finding, data: RankData) -> None:
    assert f.at_stake_ms > 0 and f.evidence and f.suggestion


CASES: dict[str, Case] = {
    "input_bound": Case("recorded/scenarios/data_sleep_w0", input_bound),
    "transmission_bound": Case("recorded/advisor/transmission_bound_queue", transmission_bound),
    "host_bound:gap": Case("recorded/scenarios/host_log_sleep_loader", host_gap),
    "gap_bound": Case("recorded/scenarios/host_log_sleep_memory", gap_bound),
    "host_bound:launch": Case("recorded/scenarios/tiny_ops_every_step", launch_bound),
    "op_hotspot": Case("recorded/advisor/cast_hotspot_bfloat16", cast_hotspot, pick="op_hotspot:cast:cpu"),
    "precision_waste": Case("recorded/scenarios/float64_ops_every_step", precision_waste),
    "tail_bound": Case("recorded/scenarios/tail_grad_clip", tail_bound),
    "comm_bound": Case("recorded/advisor/comm_bound", comm_bound),
    "step_outliers": Case("recorded/scenarios/checkpoint_every_5", step_outliers),
    "memory_growth": Case("recorded/scenarios/memory_growth", memory_growth),
    "profiler_overhead": Case("recorded/advisor/profiler_overhead", profiler_overhead),
    "device_sync": Case("kineto/alexnet", device_idle("sync"), (("device_sync_pct", 0),)),
    "host_bound:device": Case("kineto/alexnet", any_positive),
    "input_bound:device": Case("kineto/diff_control", any_positive, (("input_gap_pct", 0),)),
    "device_idle:dependency": Case("kineto/sampled_rank-0", any_positive),
    "memcpy_bound": Case("kineto/diff_test", any_positive),
    "device_precision": Case("kineto/diff_test", any_positive),
    "compute_bound": Case("kineto/diff_control", any_positive),
    "low_occupancy": Case("kineto/diff_control", any_positive, (("sm_underfill_pct", 0),)),
}
#: keys whose findings come from hand-built tables below, from the cluster, or from hand-made traces
#: (device_memory: no real capture here records memory on a GPU; tests/unit/test_device_findings.py)
ELSEWHERE = {"dropped_events", "damaged_raw_store", "straggler_rank", "device_memory"}


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_rule_alone_gives_its_finding_from_the_tables(key):
    case = CASES[key]
    found = answer(key, case.source, **dict(case.thresholds))
    f = one(found, case.pick or key)
    data, _ = tables(case.source, **dict(sorted(case.thresholds)))
    case.check(f, data)


def test_every_key_has_a_case_and_every_kind_of_the_docs_is_a_key():
    keys = {k for q in QUESTIONS for k in q.keys}
    assert set(CASES) | ELSEWHERE == keys
    text = (REPO / "docs" / "formats.md").read_text()
    table = text[text.index("| kind | fires when | its cause") :].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)`", table, re.M))
    assert documented == {k.split(":")[0] for k in keys}  # the report's kinds table lists every kind, no other


def test_a_leak_in_a_run_shorter_than_memory_trend_s_is_found():
    """The recorded short leak (scenario memory_growth_short: every step's loss and logits kept, no pause):
    its loop lasted less than memory_trend_s and its RSS grew by more than half, so the rule judges it
    (before issue 33 it wanted 5 s of samples whatever the growth, and said nothing)."""
    from profiler.analysis.trend import MIN_SPAN_S

    from support.recorded import truth

    measured = truth("scenarios", "memory_growth_short")
    assert measured["loop_s"] < MIN_SPAN_S and measured["rss_end_mb"] >= 1.5 * measured["rss_start_mb"]
    f = one(answer("memory_growth", "recorded/scenarios/memory_growth_short"), "memory_growth")
    assert f.metrics["grown_mb"] >= 0.5 * measured["rss_start_mb"] and "any span when it grows" in f.threshold


@pytest.mark.parametrize("source", ["recorded/scenarios/memory_growth", "recorded/scenarios/memory_growth_short"])
def test_memory_growth_read_in_chunks_is_the_one_chunk_answer(source, monkeypatch):
    """The counter samples the rule watches are found a chunk of rows at a time (findings/memory.py): tiny
    chunks give the same finding, every figure equal."""
    whole = answer("memory_growth", source)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 3)
    assert len(tables(source)[0].counters) > 30 and len(whole) == 1  # many chunks
    assert answer("memory_growth", source) == whole


# ----------------------------------------------------------------------------- hand-built tables


def window(steps: int = 10, step_ms: float = 100.0, overhead_ms: float = 0.0) -> StepWindow:
    """A step window of `steps` equal steps (the first left out as warm-up)."""
    trace = pd.DataFrame(
        {
            "step": np.arange(steps),
            "total_ms": step_ms,
            "profiler_overhead_ms": overhead_ms,
            "start_ms": np.arange(steps) * step_ms,
        }
    )
    return StepWindow(trace.iloc[1:], 1, 20.0)


CTX = Context(rank=0, framework="plain", thresholds=resolve_thresholds())


@pytest.mark.parametrize(
    "recording, kinds",
    [
        ({}, []),
        ({"events": 1000, "dropped_events": 0, "torn_chunks": 0}, []),
        ({"events": 900, "dropped_events": 100}, ["dropped_events"]),
        ({"events": 1000, "torn_chunks": 2, "lost_events": 50}, ["damaged_raw_store"]),
        ({"events": 1000, "torn_chunks": 1, "lost_events": 0}, ["damaged_raw_store"]),
        ({"events": "lots", "dropped_events": None}, []),  # a damaged profiler_info: nothing invented
    ],
)
def test_what_the_recording_lost_is_said_and_nothing_else(recording, kinds):
    found = recording_find(RecordingNeeds(window(), recording), CTX)
    assert [f.kind for f in found] == kinds
    for f in found:
        assert f.at_stake_ms == 0 and f.at_stake_pct == 0  # no time at stake: every figure is an undercount


def test_a_chunk_cut_short_by_a_kill_is_told_from_corruption():
    """A file that ends inside a chunk (a kill interrupted the write) needs no repair; a checksum mismatch does."""
    cut = {"why": "the chunk is cut short (the run was probably killed while writing)"}
    corrupt = {"why": "checksum mismatch (damaged bytes)"}
    for chunks, killed in (([cut], True), ([cut, corrupt], False), ([corrupt], False), (None, False)):
        rec = {"events": 1000, "torn_chunks": len(chunks or [1]), "lost_events": 8, "damaged_chunks": chunks}
        (f,) = recording_find(RecordingNeeds(window(), rec), CTX)
        assert f.kind == "damaged_raw_store" and f.metrics["lost_events"] == 8
        assert f.title.startswith("The run was killed while writing") == killed
        assert ("nothing to repair" in f.suggestion) == killed and ("copying" in f.suggestion) != killed


def test_dropped_share_is_of_everything_recorded():
    (f,) = recording_find(RecordingNeeds(window(), {"events": 900, "dropped_events": 100}), CTX)
    assert f.metrics == {"dropped_events": 100, "dropped_pct": pytest.approx(10.0)}


@pytest.mark.parametrize("overhead_ms, expected", [(0.0, []), (4.0, []), (5.0, ["profiler_overhead"])])
def test_profiler_overhead_fires_at_its_threshold(overhead_ms, expected):
    found = recording_find(RecordingNeeds(window(overhead_ms=overhead_ms), {}), CTX)
    assert [f.kind for f in found] == expected


def test_straggler_rank_from_recorded_rank_step_traces(tmp_path):
    """The cluster rule on three recorded ranks' step traces (rank 2 does 40 ms more work a step)."""
    out = analysed_copy("advisor", "straggler_ranks", tmp_path / "job")
    doc, _ = cluster_summary(*rank_files(out))
    (f,) = [f for f in doc["findings"] if f["kind"] == "straggler_rank"]
    traces = rank_files(out)[1]
    busy = {r: float(t.iloc[1:]["fp_bp_ms"].median()) for r, t in traces.items()}
    assert f["rank"] == 2 and busy[2] > busy[0] + 30 and busy[2] > busy[1] + 30


@pytest.mark.parametrize(
    "source",
    [f"kineto/{t}" for t in ("alexnet", "diff_control", "diff_test", "nccl_data", "sampled_rank-0", "sampled_rank-1")]
    + [
        "recorded/scenarios/float64_ops_every_step",
        "recorded/scenarios/data_sleep_w0",
        "recorded/advisor/float64_batchnorm_detour",
        "recorded/advisor/cast_hotspot_bfloat16",
    ],
)
def test_no_two_findings_of_a_report_charge_the_same_cause(source):
    """Issue 33: a cause seen from two sides (the host's data wait and the device's idle time inside it; a
    float64 detour's casts and the Cast hotspot) is charged by one finding only."""
    from profiler.analysis.advisor import SAME_CAUSE, advise

    data, ctx = tables(source, input_gap_pct=0)  # every input finding that could fire, fires
    keys = [f["key"] for f in advise(data, ctx)["findings"]]
    for host_keys, device_key in SAME_CAUSE:
        assert not (set(keys) & host_keys and device_key in keys), keys
    if "precision_waste" in keys:
        found = advise(data, ctx)["findings"]
        for f in found:
            if f["key"].startswith(("op_hotspot:cast", "op_hotspot:norm")):
                assert "charged to float64 by precision_waste, left out" in f["evidence"] or not data.float64_ops.any()

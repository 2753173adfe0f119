"""The findings registry: one module per question, each given only the data it declares.

A toy question declared here (as a new finding module would be) reads a real Kineto capture's
device timeline; the registered questions are checked for what they declare (needs, thresholds,
keys). That the Data pipeline page picks its findings from the registry, on a real loop whose findings
come from the time its steps took, is tests/e2e/test_findings_pages.py.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import pandas as pd
import pytest

from profiler.analysis.advisor import DEFAULT_THRESHOLDS, VERDICT_THRESHOLDS, advise, framework_of, resolve_thresholds
from profiler.analysis.cluster import ClusterData, device_breakdown
from profiler.analysis.findings import QUESTIONS, question_of
from profiler.analysis.findings.base import Context, Finding, Question, Rule
from profiler.analysis.results import RankData, analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace


@dataclass(frozen=True)
class DeviceTimeline:
    """A GPU question's needs: the device timeline and the op table, nothing else."""

    ops: pd.DataFrame
    op_type: pd.DataFrame


RECEIVED: dict = {}


def memcpy_time(data: DeviceTimeline, ctx: Context) -> list[Finding]:
    """A toy rule: the device's memcpy time, as a low finding."""
    RECEIVED.update(ops=data.ops, op_type=data.op_type)
    device = data.ops[(data.ops["device"] != "cpu").to_numpy()]
    memcpy_ms = float(device.loc[(device["category"] == "memcpy").to_numpy(), "dur_ns"].sum()) / 1e6
    return [
        Finding(
            kind="memcpy_time",
            title=f"memcpy takes {memcpy_ms:.3f} ms",
            at_stake_ms=0.0,
            at_stake_pct=0.0,
            evidence=f"[{ctx.file('timeline', 'json')}: memcpy]",
            threshold="any",
            suggestion="-",
            files=[ctx.file("timeline", "json")],
            severity="low",
            metrics={"memcpy_ms": memcpy_ms},
        )
    ]


TOY = Question(name="memcpy", page="timeline", keys=("memcpy_time",), rank=Rule(DeviceTimeline, memcpy_time))


@pytest.fixture(scope="module")
def alexnet(captures):
    """A real Kineto capture (AlexNet on one GPU), analysed as `profview import` does (its steps inferred)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the capture has no ProfilerStep: steps are inferred, with a warning
        return analyse_run(ensure_steps(read_kineto_trace(captures / "kineto" / "alexnet.json.gz")))


def rank_context(analysis) -> tuple[RankData, Context]:
    th = resolve_thresholds()
    return RankData(analysis, th), Context(analysis.run.rank, framework_of(analysis.run.info), th)


def test_a_question_that_needs_the_device_timeline_gets_it_and_nothing_else(alexnet):
    data, ctx = rank_context(alexnet)
    RECEIVED.clear()
    found = TOY.rank.answer(data, ctx)
    assert RECEIVED["ops"] is alexnet.run.ops and RECEIVED["op_type"] is alexnet.op_type
    # nothing it did not ask for was computed: the step window, the memory limits, the torch buffering steps
    assert not {"steps", "memory_limits", "buffering_steps", "recording", "step_lane"} & set(vars(data))
    # its figure is the device's memcpy time the cluster analysis measures independently (16 memcpy kernels)
    breakdown = device_breakdown({0: alexnet.run.ops})
    assert found[0].metrics["memcpy_ms"] == pytest.approx(float(breakdown["memcpy_ms"].sum()))
    assert int(breakdown["memcpy_count"].sum()) == 16 and found[0].metrics["memcpy_ms"] > 0


def test_a_new_question_joins_the_report_with_one_registration(alexnet):
    data, ctx = rank_context(alexnet)
    plain = advise(data, ctx)
    report = advise(data, ctx, QUESTIONS + (TOY,))
    added = [f for f in report["findings"] if f["kind"] == "memcpy_time"]
    assert len(added) == 1 and added[0]["key"] == "memcpy_time" and added[0]["files"] == ["timeline_0.json"]
    assert len(report["findings"]) == len(plain["findings"]) + 1
    assert report["verdict"] == plain["verdict"]  # a low finding does not change it
    assert [f for f in report["findings"] if f["kind"] != "memcpy_time"] == plain["findings"]
    assert question_of("memcpy_time", QUESTIONS + (TOY,)) is TOY and question_of("memcpy_time") is None


def test_a_need_nobody_offers_is_named_with_what_is_offered(alexnet):
    @dataclass(frozen=True)
    class Typo:
        opz: pd.DataFrame

    data, ctx = rank_context(alexnet)
    with pytest.raises(
        AttributeError, match=r"a finding needs 'opz', which RankData does not offer \(it offers .*op_type"
    ):
        Rule(Typo, memcpy_time).answer(data, ctx)


def test_every_registered_need_is_offered():
    rank_offers = {name for name in dir(RankData) if not name.startswith("_")}
    cluster_offers = {f.name for f in fields(ClusterData)}
    for q in QUESTIONS:
        assert q.rank or q.cluster, q.name
        if q.rank:
            assert {f.name for f in fields(q.rank.needs)} <= rank_offers, q.name
        if q.cluster:
            assert {f.name for f in fields(q.cluster.needs)} <= cluster_offers, q.name
    # the launch question reads the steps, the ops, the stepping thread and the device timeline (which
    # answers instead when it records the launches); the tail question the steps only
    by_name = {q.name: q for q in QUESTIONS}
    assert [f.name for f in fields(by_name["launch"].rank.needs)] == ["steps", "ops", "step_lane", "device"]
    assert [f.name for f in fields(by_name["tail"].rank.needs)] == ["steps"]


def test_thresholds_are_the_verdicts_and_each_questions_own():
    names = list(VERDICT_THRESHOLDS) + [name for q in QUESTIONS for name in q.thresholds]
    assert len(names) == len(set(names))  # no question redefines another's
    assert list(DEFAULT_THRESHOLDS) == names
    by_name = {q.name: q for q in QUESTIONS}
    assert by_name["input"].thresholds["input_gap_pct"].default == DEFAULT_THRESHOLDS["input_gap_pct"] == 10.0
    assert set(by_name["straggler"].thresholds) == {"straggler_pct"} and by_name["straggler"].rank is None


def test_keys_find_their_question():
    assert question_of("host_bound:gap").name == "input"
    assert question_of("host_bound:launch").name == "launch"
    assert question_of("host_bound") is None  # shared kind: only its key says whose
    assert question_of("op_hotspot:cast:cuda:0").name == "operators"
    assert question_of("memory_growth:host:rss_bytes").page == "counters"
    assert question_of("straggler_rank").page == "cluster"
    keys = [k for q in QUESTIONS for k in q.keys]
    assert len(keys) == len(set(keys))


def test_every_question_names_a_report_page():
    from viewer.report import PAGES

    assert {q.page for q in QUESTIONS} <= {page.key for page in PAGES}

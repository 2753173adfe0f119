"""The advisor: ranked bottleneck findings with evidence and a fix (report_{rank}.json).

Pure: the analysed tables of one rank (step trace, op tables, the run's ops, the queue summary,
the counters) and a set of thresholds in, a JSON-ready report out. Each rule looks at one symptom
of DESIGN.md's table (input pipeline, host work between steps, operators, host / launch overhead,
tail, communication, outlier steps, memory growth, the profiler itself) and returns a finding
only when its documented threshold fires, so a run with no problem gets the verdict "balanced"
instead of an invented one.

Figures are totals over the analysed steps (the warm-up steps left out), divided by their count:
means, so that shares add up over the run and bimodal or alternating step times (a 2-worker loader
delivering in bursts) are weighed by the time they really take; medians appear only as evidence.
A few outlier steps (a periodic checkpoint, an evaluation) are the step_outliers rule's: the other
rules measure the steady steps (the analysed steps without the outliers), so the same seconds are
not reported twice. Op figures are per *captured* step (steps with ops: `op_count` > 0), so ops
captured on K of N steps are not divided by N. The iteration gap is split by measurement, not
inferred: `data_wait_ms` (ProfiledDataLoader fetches, probed-queue waits) against `gap_host_ms`
(everything else between steps).

Every finding says how much of the step is at stake (ms per step and % of the mean step), the
numbers it rests on and the output files they come from, the threshold that fired, and a
suggestion in the terms of the framework that produced the run (torch / mindspore / plain
Python). Multi-rank findings (straggler_rank, the cluster's comm_bound) have the same shape plus
a `rank`; the cluster analysis (cluster.py) makes them with `Finding` and stores them in
cluster_summary.json (docs/formats.md).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError
from profiler.formats import PHASE_COLUMNS
from profiler.analysis.advice_text import OP_FAMILIES, SUGGESTIONS
from profiler.analysis.steps import analysed_steps, outlier_rule_text, outlier_steps
from profiler.kernels.intervals import covered_ns

REPORT_SCHEMA_VERSION = 1

#: Every threshold, its default and what it means (docs/formats.md "report", docs/tuning-guide.md).
THRESHOLD_DOCS: dict[str, tuple[float, str]] = {
    "warmup_steps": (1, "first steps left out of every statistic (lazy initialisation, allocator warm-up)"),
    "severity_high_pct": (20.0, "a finding with at least this % of the mean step at stake is high severity"),
    "severity_medium_pct": (8.0, "... at least this % is medium severity (below: low)"),
    "input_gap_pct": (10.0, "share of step time spent waiting for data (or, when nothing measures the wait, in "
                            "the iteration gap; or in other host work between steps) that makes a finding"),
    "op_hotspot_pct": (20.0, "share of a device's op time taken by an avoidable op family "
                             "(BatchNorm / normalisation, layout transforms)"),
    "cast_hotspot_pct": (8.0, "share of a device's op time taken by dtype conversions (Cast): pure "
                               "overhead, so a lower line"),
    "op_dominant_pct": (50.0, "share of op time taken by one op type that is reported (as low severity)"),
    "host_idle_pct": (30.0, "share of forward + backward that no op covers (device idle / framework overhead)"),
    "launch_short_op_us": (50.0, "median op duration below which ops count as tiny (launch-bound)"),
    "launch_ops_per_step": (50, "ops per step below which a run is not launch-bound (its idle time is something "
                                "the ops do not show)"),
    "tail_pct": (15.0, "tail share of step time (without exposed communication) that makes the run tail-bound"),
    "comm_exposed_pct": (10.0, "share of step time spent in communication not overlapped with compute"),
    "outlier_min_pct": (20.0, "how far above the median step a step must be to count as an outlier"),
    "outlier_excess_pct": (5.0, "share of step time that outlier steps add above the median"),
    "straggler_pct": (10.0, "how far a rank's busy time (step minus exposed communication) may exceed "
                            "the ranks' median before it is a straggler"),
    "profiler_overhead_pct": (5.0, "share of step time the profiler itself took"),
    "memory_growth_mb": (32.0, "growth of host RSS / device memory over the analysed steps (MB) that, when "
                               "steady, makes a memory_growth finding"),
}
DEFAULT_THRESHOLDS: dict[str, float] = {name: value for name, (value, _) in THRESHOLD_DOCS.items()}

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
BALANCED = "balanced"


@dataclass(frozen=True)
class AdvisorInput:
    """What the rules read: one rank's analysed tables and the thresholds in force."""

    steps: pd.DataFrame                       # the step trace without the warm-up steps
    op_type: pd.DataFrame
    ops: pd.DataFrame                         # the run's op executions (for idle time)
    queue_summary: Optional[Mapping[str, Any]]
    framework: str                            # torch | mindspore | plain
    rank: int
    step_lane: str                            # host thread that called step()
    thresholds: Mapping[str, float]
    skipped_steps: int = 0
    counters: Optional[pd.DataFrame] = None   # the run's counters (memory growth)
    memory_limits: Mapping[str, float] = field(default_factory=dict)   # "source|device" -> bytes
    buffering_steps: frozenset = frozenset()  # steps where torch.profiler held its events in memory
    recording: Mapping[str, Any] = field(default_factory=dict)   # profiler_info "recording": what was lost
    step_source: str = "marked"               # marked | inferred | whole_run (analysis/steps.py)
    step_source_note: str = ""                # the sentence saying how steps were found, when not marked

    @functools.cached_property
    def steady(self) -> pd.DataFrame:
        """The analysed steps without the outlier steps (the step_outliers rule reports those)."""
        slow = outlier_steps(self.steps, self.thresholds["outlier_min_pct"]) if len(self.steps) else self.steps
        return self.steps.drop(index=slow.index) if len(slow) < len(self.steps) else self.steps

    @property
    def mean_step_ms(self) -> float:
        """The mean steady step: the denominator of every share, so shares add up over those steps."""
        return float(self.steady["total_ms"].mean()) if len(self.steady) else 0.0

    def per_step(self, column: str) -> float:
        """A column's total over the steady steps divided by their count (its mean), 0 when absent."""
        return float(self.steady[column].mean()) if column in self.steady and len(self.steady) else 0.0

    @functools.cached_property
    def captured(self) -> pd.DataFrame:
        """The analysed steps that recorded ops (op capture on an ops_schedule skips the others)."""
        if "op_count" not in self.steps:
            return self.steps
        return self.steps[self.steps["op_count"] > 0]

    def op_ms_per_step(self, device: str, op_types: "set[str]") -> float:
        """Self time of these op types on `device`, per captured analysed step (ms)."""
        ops, steps = self.ops, self.captured
        if ops is None or not len(ops) or not len(steps):
            return 0.0
        mask = ((ops["device"] == device) & ops["op_type"].isin(op_types)).to_numpy()
        mask = mask & ops["step"].isin(steps["step"]).to_numpy()
        return float(ops["self_ns"].to_numpy()[mask].sum()) / 1e6 / len(steps)

    @property
    def data_measured(self) -> bool:
        """Whether anything measured the loop's data wait (ProfiledDataLoader, prefetch, probed queues)."""
        return bool((self.steps.get("data_wait_ms", pd.Series(dtype=float)) > 0).any()) or bool(self.queue_summary)

    def file(self, stem: str, ext: str = "csv") -> str:
        """This rank's output file `stem`, as the evidence names it."""
        return f"{stem}_{self.rank}.{ext}"


@dataclass
class Finding:
    """One ranked problem; `to_json` gives the report_{rank}.json entry."""

    kind: str
    title: str
    at_stake_ms: float
    at_stake_pct: float
    evidence: str
    threshold: str
    suggestion: str
    files: list[str]
    metrics: dict[str, float] = field(default_factory=dict)
    severity: str = ""
    rank: Optional[int] = None
    key: str = ""                             # what makes two runs' findings the same problem (compare)

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "key": self.key or self.kind, "severity": self.severity, "title": self.title,
               "at_stake_ms": round(float(self.at_stake_ms), 3), "at_stake_pct": round(float(self.at_stake_pct), 2),
               "evidence": self.evidence, "threshold": self.threshold, "suggestion": self.suggestion,
               "files": self.files, "metrics": {k: round(float(v), 4) for k, v in self.metrics.items()}}
        if self.rank is not None:
            out["rank"] = int(self.rank)
        return out


# ----------------------------------------------------------------------------- thresholds


def resolve_thresholds(*overrides: Optional[Mapping[str, Any]]) -> dict[str, float]:
    """The defaults with each override applied in turn; an unknown name or a non-number is a ProfviewError."""
    out = dict(DEFAULT_THRESHOLDS)
    for layer in overrides:
        for name, value in (layer or {}).items():
            if name not in DEFAULT_THRESHOLDS:
                raise ProfviewError(f"unknown advisor threshold {name!r} (known: {', '.join(DEFAULT_THRESHOLDS)})")
            try:
                out[name] = float(str(value).rstrip("%"))
            except ValueError:
                raise ProfviewError(f"advisor threshold {name} wants a number, not {value!r}") from None
    return out


def parse_threshold(text: str) -> tuple[str, float]:
    """`name=value` (a trailing % is allowed) from the command line."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ProfviewError(f"--threshold wants name=value (e.g. input_gap_pct=15), not {text!r}")
    name = name.strip()
    return name, resolve_thresholds({name: value.strip()})[name]


def severity_of(pct: float, thresholds: Mapping[str, float]) -> str:
    """high / medium / low from the share of the mean step at stake."""
    if pct >= thresholds["severity_high_pct"]:
        return "high"
    return "medium" if pct >= thresholds["severity_medium_pct"] else "low"


# ----------------------------------------------------------------------------- inputs


#: sources whose presence in a recording make it a torch run (attach(), op capture)
TORCH_SOURCES = ("torch", "torch_hooks")
#: sources whose presence make it a MindSpore run (its training callback, MindSpore's profiler beside it)
MINDSPORE_SOURCES = ("mindspore",)


def framework_of(info: Mapping[str, Any]) -> str:
    """torch / mindspore / plain: whose terms the suggestions use. A recording that used attach()
    or torch op capture is a torch run, whether or not framework="torch" was passed."""
    origin = str(info.get("data_origin", "profview"))
    config = info.get("config") if isinstance(info.get("config"), Mapping) else {}
    sources = info.get("sources") if isinstance(info.get("sources"), Mapping) else {}
    if origin == "kineto" or config.get("framework") == "torch" or any(s in sources for s in TORCH_SOURCES):
        return "torch"
    if origin in ("mindspore", "ascend") or any(s in sources for s in MINDSPORE_SOURCES):
        return "mindspore"
    return "plain"


def _share(part_ms: float, inp: AdvisorInput) -> float:
    mean = inp.mean_step_ms
    return 100.0 * part_ms / mean if mean > 0 else 0.0


def _finding(inp: AdvisorInput, kind: str, stake_ms: float, **kw: Any) -> Finding:
    return Finding(kind=kind, at_stake_ms=stake_ms, at_stake_pct=_share(stake_ms, inp), **kw)


def _fires(inp: AdvisorInput, ms: float, threshold: str) -> Optional[float]:
    """The share of the mean step `ms` is, when it reaches the threshold `threshold` (a % of step time); else None."""
    share = _share(ms, inp)
    return share if share >= inp.thresholds[threshold] else None


def _rule_text(inp: AdvisorInput, what: str, threshold: str) -> str:
    """The `threshold` field: "<what> >= <value> % (<name>)"."""
    return f"{what} >= {inp.thresholds[threshold]:g} % ({threshold})"


def _suggest(kind: str, inp: AdvisorInput) -> str:
    return SUGGESTIONS[kind][inp.framework]


def _pct(value: float) -> str:
    return f"{value:.1f} %"


def warmup_note(analysed: int, skipped: int, outliers: int = 0) -> str:
    """Which steps a mean is over, in words: the warm-up rule and the outliers left to their own rule."""
    skipped_text = f", the first {skipped} left out as warm-up (warmup_steps)" if skipped else ""
    outlier_text = f", {outliers} outlier step(s) left to step_outliers" if outliers else ""
    return f"mean over {analysed - outliers} steps{skipped_text}{outlier_text}"


def _steps_note(inp: AdvisorInput) -> str:
    return warmup_note(len(inp.steps), inp.skipped_steps, len(inp.steps) - len(inp.steady))


# ----------------------------------------------------------------------------- rules


#: queue_summary verdict kinds (analysis/queues.py) -> the advisor's finding kind.
QUEUE_KINDS = {"data_process": "input_bound", "data_transmission": "transmission_bound", "compute": BALANCED}


def queue_verdict(summary: Optional[Mapping[str, Any]]) -> tuple[Optional[str], str]:
    """(input_bound / transmission_bound / balanced, the queue analysis's reason) from queue_summary; None without one."""
    verdict = summary.get("verdict") if isinstance(summary, Mapping) else None
    if not isinstance(verdict, Mapping):
        return None, ""
    return QUEUE_KINDS.get(str(verdict.get("kind"))), str(verdict.get("reason", ""))


def input_rule(inp: AdvisorInput) -> list[Finding]:
    """The iteration gap, split by measurement: input_bound / transmission_bound for the time the
    loop waited for data, host_bound (gap) for the rest; gap_bound when nothing measured the wait."""
    gap = inp.per_step("iteration_gap_ms")
    if not inp.data_measured:
        if _fires(inp, gap, "input_gap_pct") is None:
            return []
        return [_gap_finding(inp, gap)]
    host = inp.per_step("gap_host_ms")
    return _data_wait_finding(inp, gap) + _host_gap_finding(inp, gap, host)


def _gap_evidence(inp: AdvisorInput, gap: float, wait: float, host: float) -> tuple[str, list[str]]:
    """The measured split of the gap, and the queue analysis's reading when queues were probed."""
    files = [inp.file("step_trace")]
    evidence = (f"the loop waited {wait:.2f} ms for data per step of {inp.mean_step_ms:.2f} ms; iteration gap "
                f"{gap:.2f} ms, of it {host:.2f} ms other host work ({_steps_note(inp)}) "
                f"[{files[0]}: iteration_gap_ms, gap_host_ms, data_wait_ms, total_ms]")
    verdict, reason = queue_verdict(inp.queue_summary)
    if verdict is not None:
        files.append(inp.file("queue_summary", "json"))
        evidence += f"; queues: {reason} [{files[1]}: verdict]"
    return evidence, files


def _data_wait_finding(inp: AdvisorInput, gap: float) -> list[Finding]:
    """The loop's data wait over *every* analysed step, wherever it falls in the step (micro-batches are
    fetched inside forward + backward): a loader that delivers in bursts makes a few steps wait long, and
    those steps are the input pipeline's, not outliers."""
    steps = inp.steps
    wait = float(steps["data_wait_ms"].mean())
    mean = float(steps["total_ms"].mean())
    share = 100.0 * wait / mean if mean > 0 else 0.0
    if share < inp.thresholds["input_gap_pct"]:
        return []
    evidence, files = _gap_evidence(inp, gap, wait, inp.per_step("gap_host_ms"))
    evidence += f"; the data wait is over all {len(steps)} analysed steps (mean step {mean:.2f} ms)"
    kind = "transmission_bound" if queue_verdict(inp.queue_summary)[0] == "transmission_bound" else "input_bound"
    title = (f"Input pipeline: the loop waits for data {_pct(share)} of the time" if kind == "input_bound"
             else f"Data transfer: batches reach the device late ({_pct(share)} of the step)")
    return [Finding(kind=kind, at_stake_ms=wait, at_stake_pct=share, title=title, evidence=evidence,
                     threshold=_rule_text(inp, "data wait, % of step time", "input_gap_pct"),
                     suggestion=_suggest(kind, inp), files=files,
                     metrics={"iteration_gap_ms": gap, "data_wait_ms": wait, "data_wait_share_pct": share})]


def _host_gap_finding(inp: AdvisorInput, gap: float, host: float) -> list[Finding]:
    share = _fires(inp, host, "input_gap_pct")
    if share is None:
        return []
    evidence, files = _gap_evidence(inp, gap, inp.per_step("data_wait_ms"), host)
    return [_finding(inp, "host_bound", host, key="host_bound:gap",
                     title=f"Host work between steps takes {_pct(share)} of the step (not data loading)",
                     evidence=evidence, threshold=_rule_text(inp, "other host work in the gap, % of step time",
                                                             "input_gap_pct"),
                     suggestion=_suggest("host_gap", inp), files=files,
                     metrics={"iteration_gap_ms": gap, "gap_host_ms": host, "gap_host_share_pct": share})]


def _gap_finding(inp: AdvisorInput, gap: float) -> Finding:
    share = _share(gap, inp)
    f = inp.file("step_trace")
    return _finding(inp, "gap_bound", gap,
                    title=f"Iteration gap takes {_pct(share)} of the step (data loading or host work: not measured)",
                    evidence=(f"iteration gap {gap:.2f} ms of a mean step of {inp.mean_step_ms:.2f} ms "
                              f"({_steps_note(inp)}); no data wait was measured, so a slow loader cannot be told "
                              f"from host work between steps [{f}: iteration_gap_ms, data_wait_ms, total_ms]"),
                    threshold=_rule_text(inp, "iteration gap share", "input_gap_pct"),
                    suggestion=_suggest("gap_bound", inp), files=[f],
                    metrics={"iteration_gap_ms": gap, "gap_share_pct": share})


def _exposed_comm(steps: pd.DataFrame) -> pd.Series:
    return (steps["all_reduce_ms"] - steps["all_reduce_overlap_ms"]).clip(lower=0)


def comm_rule(inp: AdvisorInput) -> list[Finding]:
    """comm_bound: communication that does not overlap forward + backward."""
    exposed = float(_exposed_comm(inp.steady).mean())
    share = _fires(inp, exposed, "comm_exposed_pct")
    if share is None:
        return []
    comm, overlap = inp.per_step("all_reduce_ms"), inp.per_step("all_reduce_overlap_ms")
    f = inp.file("step_trace")
    return [_finding(
        inp, "comm_bound", exposed, title=f"Communication not hidden behind compute: {_pct(share)} of the step",
        evidence=(f"all-reduce {comm:.2f} ms per step, of which {overlap:.2f} ms overlaps forward + backward and "
                  f"{exposed:.2f} ms is exposed ({_steps_note(inp)}) [{f}: all_reduce_ms, all_reduce_overlap_ms]"),
        threshold=_rule_text(inp, "exposed communication, % of step time", "comm_exposed_pct"),
        suggestion=_suggest("comm_bound", inp), files=[f],
        metrics={"all_reduce_ms": comm, "overlap_ms": overlap, "exposed_ms": exposed})]


def tail_rule(inp: AdvisorInput) -> list[Finding]:
    """tail_bound: bp end -> step end, without the exposed communication comm_rule reports."""
    tail = float((inp.steady["tail_ms"] - _exposed_comm(inp.steady)).clip(lower=0).mean())
    share = _fires(inp, tail, "tail_pct")
    if share is None:
        return []
    f = inp.file("step_trace")
    return [_finding(
        inp, "tail_bound", tail, title=f"Tail after backward (optimizer, logging, saving) takes {_pct(share)}",
        evidence=(f"tail {tail:.2f} ms without exposed communication, against a mean step of {inp.mean_step_ms:.2f} ms "
                  f"({_steps_note(inp)}) [{f}: tail_ms, all_reduce_ms, total_ms]"),
        threshold=_rule_text(inp, "tail share of step time", "tail_pct"),
        suggestion=_suggest("tail_bound", inp), files=[f], metrics={"tail_ms": tail, "tail_share_pct": share})]


def _op_finding(inp: AdvisorInput, kind: str, stake_ms: float, **kw: Any) -> Finding:
    """A finding about op time: its share is of the mean step of the analysed steps that captured ops."""
    mean = float(inp.captured["total_ms"].mean()) if len(inp.captured) else 0.0
    return Finding(kind=kind, at_stake_ms=stake_ms, at_stake_pct=100.0 * stake_ms / mean if mean > 0 else 0.0, **kw)


def _captured_note(inp: AdvisorInput) -> str:
    n, total = len(inp.captured), len(inp.steps)
    return f"per captured step ({n} of the {total} analysed steps captured ops)" if n < total else "per step"


def op_family_rule(inp: AdvisorInput) -> list[Finding]:
    """op_hotspot: an avoidable op family (Cast, normalisation, layout) above op_hotspot_pct of a device's op time."""
    table = inp.op_type
    if table is None or not len(table):
        return []
    out = []
    names = table["op_type"].astype(str)
    for family, (pattern, label, suggestion) in OP_FAMILIES.items():
        limit_name = "cast_hotspot_pct" if family == "cast" else "op_hotspot_pct"
        limit = inp.thresholds[limit_name]
        member = names.str.contains(pattern)
        for device, rows in table[member].groupby("device", sort=True):
            share = float(rows["share_pct"].sum())
            if share < limit:
                continue
            stake = inp.op_ms_per_step(device, set(rows["op_type"].astype(str)))
            top = rows.sort_values("self_ms", ascending=False).head(4)
            listed = ", ".join(f"{r.op_type} {r.share_pct:.1f} %" for r in top.itertuples())
            f = inp.file("op_type")
            out.append(_op_finding(
                inp, "op_hotspot", stake, title=f"{label} ops take {_pct(share)} of {device} op time",
                key=f"op_hotspot:{family}:{device}",
                evidence=(f"{listed} of {device} self time over the run; {stake:.2f} ms {_captured_note(inp)} "
                          f"[{f}: op_type, self_ms, share_pct; {inp.file('step_trace')}: op_count]"),
                threshold=f"{family} family share >= {limit:g} % of op time ({limit_name})",
                suggestion=suggestion[inp.framework], files=[f, inp.file("op_detail")],
                metrics={"share_pct": share, "self_ms_per_step": stake}))
    return out


def dominant_op_rule(inp: AdvisorInput) -> list[Finding]:
    """op_hotspot (low): one ordinary op type with most of a device's op time — where compute goes, not a fault."""
    table = inp.op_type
    if table is None or not len(table):
        return []
    limit = inp.thresholds["op_dominant_pct"]
    names = table["op_type"].astype(str)
    avoidable = np.zeros(len(table), dtype=bool)
    for pattern, _, _ in OP_FAMILIES.values():
        avoidable |= names.str.contains(pattern).to_numpy()
    big = table[(~avoidable) & (table["share_pct"] >= limit)]
    out = []
    for r in big.itertuples():
        stake = inp.op_ms_per_step(str(r.device), {str(r.op_type)})
        f = inp.file("op_type")
        finding = _op_finding(
            inp, "op_hotspot", stake, title=f"{r.op_type} does most of the work on {r.device} ({_pct(r.share_pct)})",
            key=f"op_hotspot:{r.op_type}:{r.device}",
            evidence=(f"{r.op_type}: {r.count} calls, {r.self_ms:.2f} ms self time, {stake:.2f} ms "
                      f"{_captured_note(inp)} [{f}: share_pct, self_ms]"),
            threshold=f"one op type >= {limit:g} % of op time (op_dominant_pct; reported as low severity)",
            suggestion=_suggest("op_dominant", inp),
            files=[f], metrics={"share_pct": float(r.share_pct), "self_ms_per_step": stake})
        finding.severity = "low"
        out.append(finding)
    return out


def lane_ops(ops: pd.DataFrame, step_lane: str) -> pd.DataFrame:
    """The ops whose gaps mean idle time: device ops when there are any, else framework host ops on the stepping thread."""
    if ops is None or not len(ops):
        return ops
    device = ops[ops["device"] != "cpu"]        # categorical or text: compared without materialising strings
    if len(device):
        return device
    host = ops[ops["source"] != "marker"]
    return host[host["stream"] == step_lane] if step_lane else host


def host_rule(inp: AdvisorInput) -> list[Finding]:
    """host_bound: forward + backward is mostly time between tiny ops (launch / dispatch overhead)."""
    ops = lane_ops(inp.ops, inp.step_lane)
    if ops is None or not len(ops):
        return []
    steps = inp.captured
    if not len(steps):
        return []
    fp = np.round((steps["start_ms"] + steps["iteration_gap_ms"]).to_numpy() * 1e6).astype(np.int64)
    bp = fp + np.round(steps["fp_bp_ms"].to_numpy() * 1e6).astype(np.int64)
    starts = ops["start_ns"].to_numpy(np.int64)
    busy = covered_ns(starts, starts + ops["dur_ns"].to_numpy(np.int64), fp, bp)
    window = float((bp - fp).sum())
    if window <= 0:
        return []
    idle_share = 100.0 * (1.0 - busy.sum() / window)
    median_us = float(np.median(ops["dur_ns"].to_numpy())) / 1e3
    per_step = float(np.isin(ops["step"].to_numpy(), steps["step"].to_numpy()).sum()) / len(steps)
    idle_limit, short = inp.thresholds["host_idle_pct"], inp.thresholds["launch_short_op_us"]
    if idle_share < idle_limit or median_us >= short or per_step < inp.thresholds["launch_ops_per_step"]:
        return []
    idle_ms = (window - busy.sum()) / 1e6 / len(steps)
    where = "the device" if (ops["device"] != "cpu").any() else f"thread {inp.step_lane}"
    return [_op_finding(
        inp, "host_bound", idle_ms, key="host_bound:launch",
        title=f"Launch-bound: {_pct(idle_share)} of forward + backward runs no op",
        evidence=(f"{per_step:.0f} ops per step with a median duration of {median_us:.1f} µs; ops on {where} cover "
                  f"{100 - idle_share:.1f} % of forward + backward, {idle_ms:.2f} ms per step is framework / "
                  f"launch overhead [{inp.file('step_trace')}: fp_bp_ms; {inp.file('timeline', 'json')}: ops]"),
        threshold=(f"idle share of forward + backward >= {idle_limit:g} % (host_idle_pct), median op "
                   f"< {short:g} µs (launch_short_op_us), >= {inp.thresholds['launch_ops_per_step']:g} ops per step "
                   "(launch_ops_per_step)"),
        suggestion=_suggest("host_bound", inp), files=[inp.file("step_trace"), inp.file("timeline", "json")],
        metrics={"idle_share_pct": idle_share, "median_op_us": median_us, "ops_per_step": per_step})]


def _period(steps: np.ndarray) -> Optional[int]:
    """The period of the slow steps, if one explains them: every p-th step from some step on.

    Each candidate p (a distance between two slow steps) is scored by the slow steps it
    explains (step % p is the common residue) times its coverage (explained / occurrences
    expected between the first and last explained step); it needs >= 3 explained steps, at
    least 60 % of the slow ones and 75 % coverage, so one unrelated hiccup does not hide the period.
    """
    steps = np.unique(steps.astype(np.int64))
    if len(steps) < 3:
        return None
    best, best_score = None, 0.0
    for p in np.unique(np.diff(steps)):
        if p < 2:
            continue
        residues, counts = np.unique(steps % p, return_counts=True)
        hits = steps[steps % p == residues[np.argmax(counts)]]
        coverage = len(hits) / ((hits[-1] - hits[0]) // p + 1)
        score = len(hits) * coverage
        if len(hits) >= 3 and len(hits) >= 0.6 * len(steps) and coverage >= 0.75 and score > best_score:
            best, best_score = int(p), score
    return best


def outlier_rule(inp: AdvisorInput) -> list[Finding]:
    """step_outliers: a few slow (often periodic) steps that add up to a real share of the run."""
    slow = outlier_steps(inp.steps, inp.thresholds["outlier_min_pct"])
    if not len(slow):
        return []
    median = inp.steps.median(numeric_only=True)
    # the slow steps' extra data wait is the input rule's (a loader delivering in bursts), and the profiler's
    # own extra time (a capture window exported, its trace compressed) is not the loop's: neither is theirs
    extra = sum((slow[c] - median[c]).clip(lower=0) for c in ("data_wait_ms", "profiler_overhead_ms") if c in slow)
    excess = float((slow["total_ms"] - median["total_ms"] - extra).clip(lower=0).sum()) / len(inp.steps)
    mean_all = float(inp.steps["total_ms"].mean())
    share = 100.0 * excess / mean_all if mean_all > 0 else 0.0       # of the whole run: outliers included
    if share < inp.thresholds["outlier_excess_pct"]:
        return []
    grown = {col: float(slow[col].mean() - median[col]) for col in PHASE_COLUMNS}
    phase = max(grown, key=grown.get)
    period = _period(slow["step"].to_numpy())
    every = f", every {period} steps" if period else ""
    listed = ", ".join(str(int(s)) for s in slow["step"].head(8)) + (" …" if len(slow) > 8 else "")
    one = len(slow) == 1
    f = inp.file("step_trace")
    return [Finding(
        kind="step_outliers", at_stake_ms=excess, at_stake_pct=share,
        title=f"{'One slow step adds' if one else f'{len(slow)} slow steps{every} add'} {_pct(share)} to the run",
        evidence=(f"{'step' if one else 'steps'} {listed} {'takes' if one else 'take'} "
                  f"{slow['total_ms'].mean():.2f} ms{'' if one else ' on average'} against a median of "
                  f"{median['total_ms']:.2f} ms; the extra time is mostly in {phase[:-3]} (+{grown[phase]:.2f} ms) "
                  f"[{f}: step, total_ms, {phase}]"),
        threshold=_rule_text(inp, f"time outlier steps ({outlier_rule_text(inp.thresholds['outlier_min_pct'])}) add, "
                                  "% of step time", "outlier_excess_pct"),
        suggestion=_suggest("step_outliers", inp), files=[f],
        metrics={"outliers": float(len(slow)), "period_steps": float(period or 0), "excess_ms_per_step": excess})]


#: memory counters watched for steady growth, and how each is named in a finding
MEMORY_METRICS = {"rss_bytes": "Host memory (RSS)", "mem_used_bytes": "Device memory"}
#: fewest steps (steady, without torch op capture) a memory trend is judged on
MEMORY_MIN_STEPS = 8
MB = float(1 << 20)


def theil_sen_slope(t: np.ndarray, v: np.ndarray) -> float:
    """Median of the pairwise slopes: a trend that one spike or a GC drop does not move."""
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt > 0
    return float(np.median((v[j] - v[i])[ok] / dt[ok])) if ok.any() else 0.0


def rank_correlation(t: np.ndarray, v: np.ndarray) -> float:
    """Spearman's rank correlation of v with t (1: v only ever rises)."""
    rt, rv = np.argsort(np.argsort(t)), pd.Series(v).rank().to_numpy()
    if rv.std() == 0:
        return 0.0
    return float(np.corrcoef(rt, rv)[0, 1])


def steady_growth(t_ns: np.ndarray, values: np.ndarray, max_points: int = 256) -> Optional[tuple[float, float]]:
    """(slope per ns, rank correlation) when `values` grow steadily over the window: a rising trend in
    rank order, still rising in the second half (not an allocator warm-up that has levelled off)."""
    if len(t_ns) < 8:
        return None
    keep = np.unique(np.linspace(0, len(t_ns) - 1, min(len(t_ns), max_points)).astype(np.int64))
    t, v = t_ns[keep].astype(np.float64), values[keep].astype(np.float64)
    slope, corr = theil_sen_slope(t, v), rank_correlation(t, v)
    half = len(t) // 2
    if slope <= 0 or corr < 0.8 or theil_sen_slope(t[half:], v[half:]) < 0.5 * slope:
        return None
    return slope, corr


def memory_rule(inp: AdvisorInput) -> list[Finding]:
    """memory_growth: host RSS or device memory that grows steadily across the analysed steps."""
    counters = inp.counters
    steps = inp.steady[~inp.steady["step"].isin(inp.buffering_steps)]    # not the profiler's own buffers
    if counters is None or not len(counters) or len(steps) < MEMORY_MIN_STEPS:
        return []
    lo = (steps["start_ms"] * 1e6).to_numpy()
    hi = ((steps["start_ms"] + steps["total_ms"]) * 1e6).to_numpy()
    t_all = counters["time_ns"].to_numpy(np.int64)
    slot = np.searchsorted(lo, t_all, side="right") - 1
    inside = (slot >= 0) & (t_all < hi[np.clip(slot, 0, None)])
    watched = counters[counters["metric"].isin(list(MEMORY_METRICS)).to_numpy() & inside]
    out = []
    for (source, device, metric), series in watched.groupby(["source", "device", "metric"], sort=True, observed=True):
        series = series.sort_values("time_ns", kind="stable")
        t, v = series["time_ns"].to_numpy(np.int64), series["value"].to_numpy(np.float64)
        trend = steady_growth(t, v)
        if trend is None:
            continue
        slope, corr = trend
        grown_mb = slope * (t[-1] - t[0]) / MB
        if grown_mb < inp.thresholds["memory_growth_mb"]:
            continue
        per_step_mb = slope * inp.mean_step_ms * 1e6 / MB
        limit = inp.memory_limits.get(f"{source}|{device}")
        remaining_s = (limit - v[-1]) / (slope * 1e9) if limit else None
        if remaining_s is not None and remaining_s > 0:
            when = f": at this rate the {_bytes(limit)} limit is reached in {_duration(remaining_s)}"
            severity = "high" if remaining_s < 3600 else "medium" if remaining_s < 86400 else "low"
        else:
            when, severity = "", "medium"
        f = inp.file("device_counters")
        finding = Finding(
            kind="memory_growth", key=f"memory_growth:{device}:{metric}", at_stake_ms=0.0, at_stake_pct=0.0,
            title=f"{MEMORY_METRICS[metric]} on {device} grows {per_step_mb:.2f} MB per step{when}",
            evidence=(f"{metric} {v[0] / MB:.0f} MB -> {v[-1] / MB:.0f} MB (+{grown_mb:.0f} MB) over "
                      f"{len(steps)} steps ({_steps_note(inp)}, steps with torch op capture left out), rising "
                      f"steadily (rank correlation {corr:.2f}, Theil-Sen slope {slope * 1e9 / MB:.2f} MB/s) "
                      f"[{f}: {metric}]"),
            threshold=(f"steady growth (rank correlation >= 0.8, still rising in the second half) of at least "
                       f"{inp.thresholds['memory_growth_mb']:g} MB (memory_growth_mb)"),
            suggestion=_suggest("memory_growth", inp), files=[f], severity=severity,
            metrics={"mb_per_step": per_step_mb, "mb_per_s": slope * 1e9 / MB, "grown_mb": grown_mb,
                     **({"seconds_to_limit": remaining_s} if remaining_s is not None and remaining_s > 0 else {})})
        out.append(finding)
    return out


def _bytes(n: float) -> str:
    return f"{n / (1 << 30):.1f} GB" if n >= 1 << 30 else f"{n / MB:.0f} MB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.0f} days"


def overhead_rule(inp: AdvisorInput) -> list[Finding]:
    """profiler_overhead: the profiler's own measured time inside the steps."""
    overhead = inp.per_step("profiler_overhead_ms")
    share = _fires(inp, overhead, "profiler_overhead_pct")
    if share is None:
        return []
    f = inp.file("step_trace")
    return [_finding(
        inp, "profiler_overhead", overhead, title=f"The profiler itself takes {_pct(share)} of each step",
        evidence=f"profiler_overhead_ms {overhead:.3f} ms per step ({_steps_note(inp)}) [{f}: profiler_overhead_ms]",
        threshold=_rule_text(inp, "profiler overhead, % of step time", "profiler_overhead_pct"),
        suggestion=_suggest("profiler_overhead", inp), files=[f], metrics={"overhead_ms": overhead})]


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0 else 0


def _loss_severity(lost: int, total: int) -> str:
    """high when a tenth or more of what was recorded is missing (the figures above it are then unsure)."""
    share = lost / total if total else 1.0
    return "high" if share >= 0.1 else "medium" if share >= 0.01 else "low"


def recording_rule(inp: AdvisorInput) -> list[Finding]:
    """dropped_events: records the memory budget (or a failed write) dropped while recording;
    damaged_raw_store: records lost with damaged raw-store chunks. Both make every figure an undercount."""
    rec = inp.recording if isinstance(inp.recording, Mapping) else {}
    kept = _count(rec.get("events"))
    f = inp.file("profiler_info", "json")
    out = []
    dropped = _count(rec.get("dropped_events"))
    if dropped:
        budget = rec.get("memory_budget_bytes")
        budget_text = (f" with a memory budget of {budget / MB:.3g} MB" if isinstance(budget, (int, float))
                       and not isinstance(budget, bool) and budget > 0 else "")
        share = 100.0 * dropped / (dropped + kept)
        out.append(Finding(
            kind="dropped_events", at_stake_ms=0.0, at_stake_pct=0.0,
            title=f"{dropped:,} recorded events ({share:.1f} %) were dropped while recording: the figures miss them",
            evidence=(f"{dropped:,} of {dropped + kept:,} events were dropped{budget_text} because the buffers were "
                      f"full between two flushes (or a write failed) [{f}: recording.dropped_events]"),
            threshold="any dropped event", suggestion=_suggest("dropped_events", inp), files=[f],
            severity=_loss_severity(dropped, dropped + kept), metrics={"dropped_events": dropped, "dropped_pct": share}))
    lost, damaged = _count(rec.get("lost_events")), _count(rec.get("torn_chunks"))
    if damaged:
        share = 100.0 * lost / (lost + kept) if lost + kept else 0.0
        out.append(Finding(
            kind="damaged_raw_store", at_stake_ms=0.0, at_stake_pct=0.0,
            title=f"{damaged} raw-store chunk(s) were damaged and skipped: {lost:,} recorded events lost with them",
            evidence=(f"{damaged} damaged chunk(s), {lost:,} events lost, {kept:,} analysed; which chunks, where: "
                      f"[{f}: recording.damaged_chunks]"),
            threshold="any damaged chunk",
            suggestion=_suggest("damaged_raw_store", inp), files=[f],
            severity=_loss_severity(lost, lost + kept) if lost else "low",
            metrics={"damaged_chunks": damaged, "lost_events": lost, "lost_pct": share}))
    return out


RULES: tuple[Callable[[AdvisorInput], list[Finding]], ...] = (
    input_rule, comm_rule, tail_rule, op_family_rule, dominant_op_rule, host_rule, outlier_rule, memory_rule,
    overhead_rule, recording_rule)


# ----------------------------------------------------------------------------- the report


def rank_findings(findings: list[Finding], thresholds: Mapping[str, float]) -> list[Finding]:
    """Give each finding its severity (unless a rule fixed it) and order them: severity, then time at stake."""
    for f in findings:
        f.severity = f.severity or severity_of(f.at_stake_pct, thresholds)
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], -f.at_stake_ms, f.kind))


#: the per-step figures report["steps"] gives (the Overview's key figures and --summary read them)
KEY_FIGURES = (*PHASE_COLUMNS, "data_wait_ms", "gap_host_ms", "all_reduce_ms", "profiler_overhead_ms")


def key_figures(inp: AdvisorInput) -> dict[str, Any]:
    """report["steps"]: what the figures rest on (analysed steps, warm-up, captured steps) and the mean
    step's split, so every page shows the advisor's own numbers."""
    total = inp.steps["total_ms"]
    wall = float(total.sum())
    present = [c for c in KEY_FIGURES if c in inp.steps]
    return {
        "analysed": int(len(inp.steps)), "warmup_skipped": int(inp.skipped_steps),
        "rule": _steps_note(inp), "mean_ms": round(float(total.mean()), 4),
        "median_ms": round(float(total.median()), 4), "wall_ms": round(wall, 4),
        "mean_phase_ms": {c: round(inp.per_step(c), 4) for c in present},
        "share_pct": {c: round(100.0 * float(inp.steps[c].sum()) / wall, 3) if wall > 0 else 0.0 for c in present},
        "op_captured_steps": int(len(inp.captured)) if "op_count" in inp.steps else None,
        "data_wait_measured": inp.data_measured,
        # only for steps that were not marked (absent: step() / annotations / the device marked them)
        **({"source": inp.step_source, "source_note": inp.step_source_note} if inp.step_source != "marked" else {}),
    }


def headline(verdict: str, findings: list[Finding], inp: AdvisorInput) -> str:
    """One sentence for the top of the report: the top problem (or none) and the mean step's split."""
    gap = inp.per_step("iteration_gap_ms")
    wait = gap - inp.per_step("gap_host_ms") if inp.data_measured else None
    gap_text = (f"iteration gap {gap:.2f} ms ({wait:.2f} ms data wait)" if wait is not None
                else f"iteration gap {gap:.2f} ms")
    split = (f"mean step {inp.mean_step_ms:.2f} ms: {gap_text}, forward + backward "
             f"{inp.per_step('fp_bp_ms'):.2f} ms, tail {inp.per_step('tail_ms'):.2f} ms")
    if verdict == BALANCED:
        return f"no high-severity bottleneck ({split})"
    return f"{findings[0].title}: fix this first ({split})"


def advise(inp: AdvisorInput) -> dict[str, Any]:
    """Run every rule and return report_{rank}.json: verdict, headline, ranked findings, thresholds."""
    if not len(inp.steps):
        return {"schema_version": REPORT_SCHEMA_VERSION, "verdict": BALANCED, "headline": "No steps to analyse.",
                "framework": inp.framework, "findings": [], "thresholds": dict(inp.thresholds),
                "steps": {"analysed": 0, "warmup_skipped": 0}}
    found = rank_findings([f for rule in RULES for f in rule(inp)], inp.thresholds)
    verdict = found[0].kind if found and found[0].severity == "high" else BALANCED
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "verdict": verdict,
        "headline": headline(verdict, found, inp),
        "framework": inp.framework,
        "steps": key_figures(inp),
        "thresholds": dict(inp.thresholds),
        "findings": [f.to_json() for f in found],
    }

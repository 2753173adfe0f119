"""Is the loop waiting for its input? The iteration gap, split by measurement.

input_bound / transmission_bound for the time the loop waited for data (the queue analysis tells a
slow pipeline from a slow host-to-device transfer), host_bound (key `host_bound:gap`) for the rest
of the gap, gap_bound when nothing measured the wait (a slow loader is then never guessed). A device timeline with
its host's launches recorded answers this from the device instead (device_data.py, device_launch.py:
what the device was idle for, not what the host waited for).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from profiler.analysis.findings.base import (
    BALANCED,
    Context,
    Finding,
    Question,
    Rule,
    StepWindow,
    Threshold,
    data_wait_measured,
    pct_text,
)
from profiler.analysis.findings.device import DeviceTimeline

THRESHOLDS = {
    "input_gap_pct": Threshold(
        10.0,
        "share of step time spent waiting for data (or, when nothing measures the wait, "
        "in the iteration gap; or in other host work between steps) that makes a finding",
    ),
}

#: How to measure the loop's data wait, per framework: the one advice for an unmeasured iteration gap (the
#: gap_bound finding's fix and the key figures' note on every page say it in these words).
MEASURE_DATA_WAIT = {
    "torch": "measure the data wait to tell a slow loader from slow host code: iterate ProfiledDataLoader(loader) "
    "instead of the DataLoader (or use profview run)",
    "mindspore": "measure the data wait to tell a slow dataset pipeline from host callbacks: check the data queue "
    "(minddata pipeline files)",
    "plain": "measure the data wait to tell a slow loader from slow host code: iterate profiler.iterate(loader) "
    "instead of the loader (or put batches through a ProfiledQueue)",
}

FIXES: dict[str, dict[str, str]] = {
    "input_bound": {
        "torch": "load batches ahead in background workers: DataLoader(..., num_workers=N (the free cores), "
        "prefetch_factor=2-4, persistent_workers=True, pin_memory=True on a GPU); move per-sample "
        "Python work into the Dataset so the workers do it",
        "mindspore": "parallelise the dataset pipeline (.map(..., num_parallel_workers=N), .batch(..., "
        "num_parallel_workers=N)), run Python transforms in processes "
        "(dataset.map(..., python_multiprocessing=True); GeneratorDataset(..., num_parallel_workers=N, "
        "python_multiprocessing=True)), and train in data sink mode (model.train(..., "
        "dataset_sink_mode=True), Ascend / GPU) so batches queue on the device ahead of each step",
        "plain": "prefetch batches on a background thread (for batch in profiler.prefetch(loader): ...) so "
        "loading overlaps the step, or make the loading itself cheaper",
    },
    "transmission_bound": {
        "torch": "batches are ready on the host but reach the device late: pin_memory=True in the DataLoader and "
        ".to(device, non_blocking=True), and copy the next batch on a side stream while this one "
        "computes",
        "mindspore": "use data sink mode with a deeper device queue (dataset_sink_mode=True, sink_size) so "
        "host-to-device transfer overlaps the previous step",
        "plain": "the data is ready but its transfer is not: make the device queue deeper or copy the next "
        "batch in the background while this one computes",
    },
    "host_gap": {
        "torch": "the gap is host work, not data: move per-step Python work (metrics, .item() / .cpu() syncs, "
        "logging) out of the loop or do it every N steps",
        "mindspore": "the gap is host work, not data: move per-step Python callbacks (metrics, logging) out of "
        "the loop, or use sink mode so the device runs several steps per host call",
        "plain": "the gap is host work between steps, not data loading: move it out of the loop or do it every N steps",
    },
    "gap_bound": {
        "torch": f"{MEASURE_DATA_WAIT['torch']}; if it is the loader, add DataLoader workers (num_workers, "
        "prefetch_factor, persistent_workers), else move per-step Python work (metrics, .item() syncs, "
        "logging) out of the loop",
        "mindspore": f"{MEASURE_DATA_WAIT['mindspore']}; train in data sink mode, and move per-step callbacks "
        "out of the loop",
        "plain": f"{MEASURE_DATA_WAIT['plain']}; if it is the loader, load ahead on background threads "
        "(for batch in profiler.prefetch(loader): ...)",
    },
}

#: queue_summary verdict kinds (analysis/queues.py) -> this question's finding kind.
QUEUE_KINDS = {"data_process": "input_bound", "data_transmission": "transmission_bound", "compute": BALANCED}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    queue_summary: Optional[Mapping[str, Any]]
    device: DeviceTimeline


def queue_verdict(summary: Optional[Mapping[str, Any]]) -> tuple[Optional[str], str]:
    """(input_bound / transmission_bound / balanced, the queue analysis's reason) from queue_summary;
    None without one."""
    verdict = summary.get("verdict") if isinstance(summary, Mapping) else None
    if not isinstance(verdict, Mapping):
        return None, ""
    return QUEUE_KINDS.get(str(verdict.get("kind"))), str(verdict.get("reason", ""))


def find(data: Needs, ctx: Context) -> list[Finding]:
    """The iteration gap, split by measurement: the data wait, the other host work, or the whole gap unmeasured."""
    if data.device.explains_idle:
        return []
    steps = data.steps
    gap = steps.per_step("iteration_gap_ms")
    if not data_wait_measured(steps):
        if ctx.reaches(steps.share(gap), "input_gap_pct") is None:
            return []
        return [_gap_finding(steps, ctx, gap)]
    host = steps.per_step("gap_host_ms")
    gap = steps.per_split_step("iteration_gap_ms")  # the gap of the steps that measured its split
    return _data_wait_finding(data, ctx, gap) + _host_gap_finding(data, ctx, gap, host)


def _gap_evidence(data: Needs, ctx: Context, gap: float, wait: float, host: float) -> tuple[str, list[str]]:
    """The measured split of the gap, and the queue analysis's reading when queues were probed."""
    steps = data.steps
    files = [ctx.file("step_trace")]
    evidence = (
        f"the loop waited {wait:.2f} ms for data per step of {steps.mean_ms:.2f} ms; iteration gap "
        f"{gap:.2f} ms, of it {host:.2f} ms other host work ({steps.note}{steps.split_note}) "
        f"[{files[0]}: iteration_gap_ms, gap_host_ms, data_wait_ms, total_ms]"
    )
    verdict, reason = queue_verdict(data.queue_summary)
    if verdict is not None:
        files.append(ctx.file("queue_summary", "json"))
        evidence += f"; queues: {reason} [{files[1]}: verdict]"
    return evidence, files


def _data_wait_finding(data: Needs, ctx: Context, gap: float) -> list[Finding]:
    """The loop's data wait per steady step, wherever it falls in the step (micro-batches are fetched
    inside forward + backward). A loader that delivers in bursts keeps its long waits: the outlier rule
    leaves the data wait out of a step's own time (`steps.outlier_steps`), and the wait of a step that is
    an outlier by its own time is counted here too (`per_analysed_step`), its excess there."""
    steps = data.steps
    wait = steps.per_analysed_step("data_wait_ms")
    share = ctx.reaches(steps.share(wait), "input_gap_pct")
    if share is None:
        return []
    evidence, files = _gap_evidence(data, ctx, gap, wait, steps.per_step("gap_host_ms"))
    kind = "transmission_bound" if queue_verdict(data.queue_summary)[0] == "transmission_bound" else "input_bound"
    title = (
        f"Input pipeline: the loop waits for data {pct_text(share)} of the time"
        if kind == "input_bound"
        else f"Data transfer: batches reach the device late ({pct_text(share)} of the step)"
    )
    return [
        steps.finding(
            kind,
            wait,
            title=title,
            evidence=evidence,
            threshold=ctx.rule_text("data wait, % of step time", "input_gap_pct"),
            suggestion=FIXES[kind][ctx.framework],
            files=files,
            metrics={"iteration_gap_ms": gap, "data_wait_ms": wait, "data_wait_share_pct": share},
        )
    ]


def _host_gap_finding(data: Needs, ctx: Context, gap: float, host: float) -> list[Finding]:
    share = ctx.reaches(data.steps.share(host), "input_gap_pct")
    if share is None:
        return []
    evidence, files = _gap_evidence(data, ctx, gap, data.steps.per_step("data_wait_ms"), host)
    return [
        data.steps.finding(
            "host_bound",
            host,
            key="host_bound:gap",
            title=f"Host work between steps takes {pct_text(share)} of the step (not data loading)",
            evidence=evidence,
            threshold=ctx.rule_text("other host work in the gap, % of step time", "input_gap_pct"),
            suggestion=FIXES["host_gap"][ctx.framework],
            files=files,
            metrics={"iteration_gap_ms": gap, "gap_host_ms": host, "gap_host_share_pct": share},
        )
    ]


def _gap_finding(steps: StepWindow, ctx: Context, gap: float) -> Finding:
    share = steps.share(gap)
    f = ctx.file("step_trace")
    return steps.finding(
        "gap_bound",
        gap,
        title=f"Iteration gap takes {pct_text(share)} of the step (data loading or host work: not measured)",
        evidence=(
            f"iteration gap {gap:.2f} ms of a mean step of {steps.mean_ms:.2f} ms ({steps.note}); no data "
            f"wait was measured, so a slow loader cannot be told from host work between steps "
            f"[{f}: iteration_gap_ms, data_wait_ms, total_ms]"
        ),
        threshold=ctx.rule_text("iteration gap share", "input_gap_pct"),
        suggestion=FIXES["gap_bound"][ctx.framework],
        files=[f],
        metrics={"iteration_gap_ms": gap, "gap_share_pct": share},
    )


QUESTION = Question(
    name="input",
    page="pipeline",
    keys=("input_bound", "transmission_bound", "gap_bound", "host_bound:gap"),
    thresholds=THRESHOLDS,
    rank=Rule(Needs, find),
)

"""Does the device wait while the host waits for data? input_bound (key `input_bound:device`): device
idle time during the loop's measured data wait (DataLoader `__next__` ranges of a torch trace,
ProfiledDataLoader / prefetch waits, probed queues) before the host launched the next work."""

from __future__ import annotations

import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule
from profiler.analysis.findings.device import DeviceNeeds, idle_evidence, idle_findings, share_title

FIX = {
    "torch": "the device runs dry while the loop waits for the next batch: load ahead in background workers "
    "(DataLoader(..., num_workers=N (the free cores), prefetch_factor=2-4, persistent_workers=True)), "
    "pin_memory=True with .to(device, non_blocking=True) so the copy overlaps compute, and move per-sample "
    "Python work into the Dataset (or decode on the GPU: DALI / torchvision.io.decode_jpeg(device='cuda'))",
    "mindspore": "parallelise the dataset pipeline (num_parallel_workers, python_multiprocessing=True) and train in "
    "data sink mode (dataset_sink_mode=True) so batches queue on the device ahead of each step",
    "plain": "prefetch batches on a background thread (for batch in profiler.prefetch(loader): ...) so loading "
    "overlaps the device's work",
}


def find(data: DeviceNeeds, ctx: Context) -> list[Finding]:
    """input_bound:device: the device idle while the loop waits for its data, per device (threshold:
    the input question's input_gap_pct, the same line for the same symptom)."""

    def build(device: str, ms: float, row: pd.Series, causes: pd.Series) -> Finding:
        share = data.steps.share(ms)
        return data.steps.finding(
            "input_bound",
            ms,
            key="input_bound:device",
            title=f"Input pipeline: {device} idle while the loop waits for data, {share_title(share)}",
            evidence=(
                f"{ms:.2f} ms per step of device idle time falls in the loop's data wait (and the host had "
                f"not launched the next work yet); "
                + idle_evidence(device, row, causes, data.steps, ctx)
                + f"; data wait per step {data.steps.per_step('data_wait_ms'):.2f} ms "
                f"[{ctx.file('step_trace')}: data_wait_ms]"
            ),
            threshold=ctx.rule_text("device idle during the data wait, % of step time", "input_gap_pct"),
            suggestion=FIX[ctx.framework],
            files=[ctx.file("report", "json"), ctx.file("step_trace")],
            metrics={"idle_data_ms": ms, "device_idle_pct": float(row["idle_pct"])},
        )

    return idle_findings(data.device, data.steps, ctx, "data", "input_gap_pct", build)


QUESTION = Question(name="device_data", page="pipeline", keys=("input_bound:device",), rank=Rule(DeviceNeeds, find))

"""The terminal summary (`profview DIR --summary`): step breakdown, top ops and the verdict as text,
in the spirit of torch.profiler's key_averages().table().
"""

from __future__ import annotations

from collections.abc import Sequence

from profiler.formats import columns
from viewer.context import Context
from viewer.device_figures import GPU_SUMMARY_LABELS, device_figures
from viewer.formatting import clean
from viewer.stats import (
    findings,
    key_figures,
    number,
    outliers,
    phase_table,
    profiler_cost_text,
    queue_verdict_text,
    step_window,
    top_ops,
)

NAME_WIDTH = 44


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[bool]) -> str:
    """A plain aligned table with a rule under the header."""
    cells = [[clean(h) for h in headers]] + [[clean(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def _steps_block(ctx: Context) -> list[str]:
    run = ctx.run
    if run.step_trace is None or not len(run.step_trace):
        return ["No step trace in this run (no step() calls recorded)."]
    window = step_window(run.step_trace, run.report, ctx.options.steps)
    if not len(window.analysed):
        return ["No steps in the selected --steps range."]
    table = phase_table(window.steady)
    rows = [
        (r.phase, f"{r.mean_ms:.3f}", f"{r.median_ms:.3f}", f"{r.p95_ms:.3f}", f"{r.max_ms:.3f}", f"{r.share_pct:.1f}")
        for r in table.itertuples()
    ]
    slow = outliers(window)
    scope = (
        f"{len(window.analysed)} selected step(s) (--steps), ms"
        if ctx.options.steps is not None
        else f"{len(run.step_trace)} recorded step(s), ms: the verdict's figures"
    )
    lines = [
        f"Step breakdown over {scope} ({window.note}):",
        text_table(["phase", "mean", "median", "p95", "max", "share %"], rows, [False] + [True] * 5),
    ]
    if len(slow):
        listed = ", ".join(f"{int(s)} ({t:.1f} ms)" for s, t in zip(slow["step"].head(5), slow["total_ms"].head(5)))
        lines.append(f"Outlier steps ({len(slow)}): {listed}{' …' if len(slow) > 5 else ''}")
    return lines


def _ops_block(ctx: Context) -> list[str]:
    detail = ctx.run.op_detail
    if detail is None or not len(detail):
        return ["No op table in this run."]
    lines = []
    top = top_ops(detail, 10)
    has_self = "self_ms" in detail.columns
    for device, ops in top.groupby("device", sort=True):
        rows = [
            (
                clean(r.name, NAME_WIDTH),
                clean(r.op_type, 24),
                int(r.count),
                f"{r.total_ms:.3f}",
                *([f"{r.self_ms:.3f}"] if has_self else []),
                f"{r.avg_ms:.3f}",
                f"{r.share_pct:.1f}",
            )
            for r in ops.itertuples()
        ]
        headers = ["name", "type", "count", "total ms", *(["self ms"] if has_self else []), "avg ms", "self share %"]
        lines += [
            "",
            f"Top ops on {clean(device)} by total time (self share: of the device's summed self time):",
            text_table(headers, rows, [False, False] + [True] * (len(headers) - 2)),
        ]
    return lines


def _key_figures_block(ctx: Context) -> list[str]:
    """The advisor's own figures (report_{rank}.json "steps"): what the verdict rests on."""
    figures = key_figures(ctx.run.report)
    if figures is None:
        return []
    median = "" if figures.median_ms is None else f"median step {figures.median_ms:.2f} ms, "
    lines = [
        "",
        f"Verdict figures ({clean(figures.rule)}):",
        f"  mean steady step {figures.mean_ms:.2f} ms, {median}wall time {figures.wall_ms / 1e3:.2f} s "
        "(outliers included); " + ", ".join(f"{label} {share:.1f} %" for label, share in figures.shares),
    ]
    if figures.note:
        lines.append(f"  {clean(figures.note)}")
    cost = profiler_cost_text(ctx.run.report)
    if cost:
        lines.append(f"  {clean(cost)}")
    return lines


def _device_block(ctx: Context) -> list[str]:
    """Per device, from report_{rank}.json's "devices": how busy it was, on what, and why it waited
    (nothing for a run without a device timeline)."""
    devices = device_figures(ctx.run.report)
    if not devices:
        return []
    rows = [
        (
            d.device,
            f"{d.window_ms:.3f}",
            f"{d.busy_pct:.1f}",
            f"{d.idle_pct:.1f}",
            f"{d.compute_pct:.1f}",
            f"{d.comm_pct:.1f}",
            f"{d.memory_pct:.1f}",
            "-" if d.overlap_pct is None else f"{d.overlap_pct:.1f}",
            d.outside_steps_text,
            d.leading_cause_text(),
        )
        for d in devices
    ]
    headers = [
        "device",
        "window ms",
        "busy %",
        "idle %",
        "compute %",
        "comm %",
        "memory %",
        "comm overlap %",
        "busy outside steps",
        "leading idle cause",
    ]
    return [
        "",
        "Device time (each device's own timeline, first to last execution; shares of that window; "
        "comm overlap: share of communication time with compute running; busy outside steps: counted here, "
        "left out by tools that keep only the steps' executions, as HTA does):",
        text_table(headers, rows, [False] + [True] * 8 + [False]),
    ]


def _gpu_summary_block(ctx: Context) -> list[str]:
    """Per device, the TensorBoard plugin's GPU summary (report_{rank}.json's devices), when a device has it."""
    devices = [d for d in device_figures(ctx.run.report) if d.has_gpu_summary]
    if not devices:
        return []
    rows = [
        (d.device, *("-" if d.gpu_summary[key] is None else f"{d.gpu_summary[key]:.2f}" for key in GPU_SUMMARY_LABELS))
        for d in devices
    ]
    headers = ["device", *(f"{label} %" for label in GPU_SUMMARY_LABELS.values())]
    return [
        "",
        "GPU summary (the TensorBoard plugin's overview figures, over its steps; docs/tensorboard.md):",
        text_table(headers, rows, [False] + [True] * len(GPU_SUMMARY_LABELS)),
    ]


def _queue_block(ctx: Context) -> list[str]:
    """The queue analysis's verdict (queue_summary_{rank}.json), when queues were probed."""
    text = queue_verdict_text(ctx.run.queue_summary)
    return ["", f"Data pipeline: {clean(text)}"] if text else []


def _verdict_block(ctx: Context) -> list[str]:
    verdict, items = findings(ctx.run.report)
    if not verdict and not items:
        return ["", "No bottleneck report (report json) in this run."]
    lines = ["", f"Verdict: {clean(verdict)}" if verdict else "Findings:"]
    for i, f in enumerate(items, start=1):
        stake = number(f["at_stake_ms"])
        at = f" — {stake:.2f} ms/step at stake" if stake else ""
        lines.append(f"  {i}. [{clean(f['severity'] or 'info')}] {clean(f['title'])}{at}")
        if f["suggestion"]:
            lines.append(f"     fix: {clean(f['suggestion'])}")
    return lines


def _straggler_phase(phase: str) -> str:
    """A straggler phase (cluster_summary.json "straggler.phase") in words."""
    base = dict(columns.PHASES).get(phase.replace("_excl_comm", ""), phase)
    return f"{base} without communication" if "_excl_comm" in phase else base


def _cluster_block(ctx: Context) -> list[str]:
    """A multi-rank directory leads with the job: the straggler (rank, phase, ms per step), the cluster
    findings and every rank's verdict (cluster_summary.json, report_{rank}.json), before one rank's detail."""
    if len(ctx.runs) < 2:
        return []
    summary = ctx.run.cluster_summary if isinstance(ctx.run.cluster_summary, dict) else None
    lines = [f"Cluster: {len(ctx.runs)} ranks ({', '.join(str(r.rank) for r in ctx.runs)})"]
    straggler = summary.get("straggler") if summary else None
    if isinstance(straggler, dict) and straggler.get("rank") is not None:
        phase = str(straggler.get("phase", ""))
        by_phase = straggler.get("phase_excess_ms") if isinstance(straggler.get("phase_excess_ms"), dict) else {}
        excess, in_phase = number(straggler.get("excess_ms")), number(by_phase.get(phase))
        wait = number(straggler.get("others_wait_ms"))
        lines.append(
            f"  straggler: rank {clean(straggler['rank'])}"
            + (f", busy {excess:.2f} ms per step longer than the others" if excess is not None else "")
            + (f"; the phase it is slowest in: {clean(_straggler_phase(phase))}" if phase else "")
            + (f" (+{in_phase:.2f} ms per step)" if in_phase is not None else "")
            + (f"; the others wait {wait:.2f} ms per step for it" if wait is not None else "")
        )
    elif summary is not None:
        lines.append("  no straggler: no rank is the slowest in most steps by the advisor's straggler_pct")
    else:
        lines.append("  no cluster analysis (cluster_summary.json) in this directory")
    _, items = findings(summary)
    lines += [f"  [{clean(f['severity'] or 'info')}] {clean(f['title'])}" for f in items]
    lines.append("Per-rank verdicts:")
    for run in ctx.runs:
        verdict, _ = findings(run.report)
        lines.append(f"  rank {run.rank}: {clean(verdict) if verdict else 'no report'}")
    return lines + ["", f"Rank {ctx.run.rank} in detail:"]


def _recording_block(ctx: Context) -> list[str]:
    """What the recording lost (profiler_info "recording"): dropped events and damaged raw-store chunks."""
    rec = ctx.run.info.get("recording") if isinstance(ctx.run.info.get("recording"), dict) else {}
    notes = []
    dropped, torn, lost = (rec.get(k) for k in ("dropped_events", "torn_chunks", "lost_events"))
    if isinstance(dropped, int) and dropped > 0:
        notes.append(
            f"{dropped:,} events were dropped while recording ({clean(rec.get('dropped_reason', ''))}): "
            "raise memory_budget_mb or flush more often."
        )
    if isinstance(torn, int) and torn > 0:
        lost_text = f", {lost:,} recorded events lost with them" if isinstance(lost, int) and lost > 0 else ""
        notes.append(
            f"{torn} raw-store chunk(s) were damaged and skipped{lost_text} (profiler_info: recording.damaged_chunks)."
        )
    return ["", "Recording: " + " ".join(notes)] if notes else []


def render(ctx: Context) -> str:
    """The whole summary as text."""
    run = ctx.run
    head = f"profview summary — {clean(run.shown_path)} (rank {run.rank}; {len(ctx.runs)} rank(s) here)"
    return (
        "\n".join(
            [
                head,
                "=" * min(len(head), 100),
                *_cluster_block(ctx),
                *_steps_block(ctx),
                *_ops_block(ctx),
                *_key_figures_block(ctx),
                *_device_block(ctx),
                *_gpu_summary_block(ctx),
                *_queue_block(ctx),
                *_recording_block(ctx),
                *_verdict_block(ctx),
            ]
        )
        + "\n"
    )

"""Compare: BASE -> NEW, where the step time moved (the `compare` command's tab and its text form).

The numbers come from `profiler.analysis.compare.compare_runs` on the two runs' loaded tables;
this module only lays them out, as an HTML tab and as the terminal text of `profview compare`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import pandas as pd
import plotly.graph_objects as go

from profiler.analysis.compare import CONFIDENCE, Comparison, RunTables, compare_runs, interval_text
from profiler.errors import InputError
from viewer.context import Context
from viewer.formatting import clean, fmt_ms, fmt_pct, fmt_seconds
from viewer.html import absent, cards, esc, plot_text, section, table
from viewer.page import Page
from viewer.rundata import RunData
from viewer.summary import text_table
from viewer.theme import styled

BASE_COLOR, NEW_COLOR = "#9AA5B1", "#3366A8"
FASTER, SLOWER = "#6BA368", "#C0392B"
TOP_OPS = 15


def tables_of(run: RunData) -> RunTables:
    """A loaded run as one side of a comparison (warm-up as its own report counted it)."""
    warmup = (run.report or {}).get("thresholds", {}).get("warmup_steps", 1)  # types checked by read_document
    if run.step_trace is None or not len(run.step_trace):
        raise InputError(f"{run.directory} has no step trace: there is no step time to compare")
    return RunTables(
        label=str(run.shown_path),
        step_trace=run.step_trace,
        op_type=run.op_type,
        op_detail=run.op_detail,
        queue_summary=run.queue_summary,
        report=run.report,
        warmup_steps=int(warmup),
    )


def pick_rank(runs: list[RunData], rank: Optional[int]) -> RunData:
    """The run of `rank` (default: the lowest rank) among one input's ranks."""
    if rank is None:
        return runs[0]
    for run in runs:
        if run.rank == rank:
            return run
    raise InputError(f"rank {rank} is not in {runs[0].directory} (ranks: {', '.join(str(r.rank) for r in runs)})")


def comparison(
    base: list[RunData], new: list[RunData], rank: Optional[int] = None, fail_if_slower_pct: Optional[float] = None
) -> Comparison:
    """BASE -> NEW for one rank of each input."""
    return compare_runs(tables_of(pick_rank(base, rank)), tables_of(pick_rank(new, rank)), fail_if_slower_pct)


def _signed_pct(value: Any) -> str:
    """A change in %, "n/a" when there is none (a BASE of zero)."""
    return fmt_pct(value, signed=True, missing="n/a")


# ----------------------------------------------------------------------------- figures


def phase_bars(c: Comparison) -> go.Figure:
    """Mean ms per phase, BASE next to NEW (the figures the verdict and the phase table use)."""
    rows = c.phases[c.phases["column"] != "total_ms"]
    fig = go.Figure()
    for side, name, color in (("base", "BASE", BASE_COLOR), ("new", "NEW", NEW_COLOR)):
        fig.add_bar(
            x=rows["phase"],
            y=rows[f"{side}_mean_ms"],
            name=name,
            marker_color=color,
            hovertemplate=f"{name} %{{x}}: %{{y:.2f}} ms (mean)<extra></extra>",
        )
    return styled(fig, barmode="group", yaxis_title="mean ms per step", xaxis=dict(type="category"))


def step_histograms(base: pd.DataFrame, new: pd.DataFrame) -> go.Figure:
    """Both runs' step-time distributions, overlaid."""
    fig = go.Figure()
    for steps, name, color in ((base, "BASE", BASE_COLOR), (new, "NEW", NEW_COLOR)):
        fig.add_histogram(
            x=steps["total_ms"],
            name=name,
            marker_color=color,
            opacity=0.65,
            bingroup="steps",
            hovertemplate=f"{name} %{{x}} ms: %{{y}} steps<extra></extra>",
        )
    return styled(fig, barmode="overlay", xaxis_title="step time (ms)", yaxis_title="steps")


def op_delta_bars(ops: pd.DataFrame, label: str) -> go.Figure:
    """The largest per-step changes, green when NEW is faster, red when slower."""
    top = ops.head(TOP_OPS).iloc[::-1]
    names = [plot_text(f"{n} ({d})") for n, d in zip(top[label], top["device"])]
    colors = [SLOWER if v > 0 else FASTER for v in top["delta_per_step_ms"]]
    fig = go.Figure(
        go.Bar(
            x=top["delta_per_step_ms"],
            y=names,
            orientation="h",
            marker_color=colors,
            hovertemplate="%{y}: %{x:+.3f} ms per step<extra></extra>",
        )
    )
    return styled(
        fig,
        height=max(260, 24 * len(top) + 80),
        xaxis_title="NEW - BASE, self ms per step",
        yaxis=dict(type="category", automargin=True),
        showlegend=False,
    )


# ----------------------------------------------------------------------------- sections


def _interval_ms(low: Any, high: Any) -> str:
    if low is None or low != low:
        return "—"
    return f"{fmt_ms(low, signed=True)} to {fmt_ms(high, signed=True)}"


def verdict_cards(c: Comparison) -> str:
    """The verdict and the figures it rests on: mean steps, the change with its interval, wall times."""
    v = c.verdict
    interval = "—" if v["ci_low_pct"] is None else f"{_signed_pct(v['ci_low_pct'])} to {_signed_pct(v['ci_high_pct'])}"
    items = [
        ("verdict", v["outcome"]),
        ("BASE mean analysed step", fmt_ms(v["base_mean_step_ms"])),
        ("NEW mean analysed step", fmt_ms(v["new_mean_step_ms"])),
        ("change", f"{fmt_ms(v['delta_ms'], signed=True)} ({_signed_pct(v['delta_pct'])})"),
        (f"{100 * (v['confidence'] or CONFIDENCE):g} % interval of the change", interval),
        (
            f"wall time, analysed steps ({_step_counts(v)})",
            f"{fmt_seconds(v['base_wall_ms'])} → {fmt_seconds(v['new_wall_ms'])}",
        ),
        ("median step (for reference)", f"{fmt_ms(v['base_median_step_ms'])} → {fmt_ms(v['new_median_step_ms'])}"),
    ]
    if v["fail_if_slower_pct"] is not None:
        items.append(("CI gate", f"{'FAIL' if v['failed'] else 'pass'} (limit +{v['fail_if_slower_pct']:g} %)"))
    gate = f'<p class="note">CI gate: {esc(v["gate"])}.</p>' if v.get("gate") else ""
    return cards(items) + f'<p class="note">Verdict: {esc(v["reason"])}.</p>' + gate


def _step_counts(v: dict[str, Any]) -> str:
    b, n = v["base_steps"], v["new_steps"]
    return f"{b} steps each" if b == n else f"{b} → {n} steps"


#: the findings both runs have, by how their severity moved (compare.finding_changes)
MOVED = (("improved", "Improved"), ("worsened", "Worsened"), ("persisting", "Persisting"))


def findings_html(c: Comparison) -> str:
    f = c.findings
    rows = (
        [("resolved", x["severity"], x["title"], fmt_ms(x["at_stake_ms"] or 0), "—") for x in f["resolved"]]
        + [("introduced", x["severity"], x["title"], "—", fmt_ms(x["at_stake_ms"] or 0)) for x in f["introduced"]]
        + [
            (
                key,
                f"{x['base_severity']} → {x['severity']}",
                x["title"],
                fmt_ms(x["base_at_stake_ms"] or 0),
                fmt_ms(x["at_stake_ms"] or 0),
            )
            for key, _ in MOVED
            for x in f[key]
        ]
    )
    verdicts = f.get("verdicts") or [None, None]
    head = f'<p class="note">Advisor verdict: {esc(verdicts[0] or "none")} → {esc(verdicts[1] or "none")}.</p>'
    if not rows:
        return head + absent(no_findings_text(c))
    return head + table(
        ["change", "severity", "finding", "BASE at stake / step", "NEW at stake / step"],
        rows,
        [False, False, False, True, True],
    )


#: a phase figure a run did not measure (the gap's split without a measured data wait: NaN)
NOT_MEASURED = "not measured"


def _measured(value: float, text: Callable[[float], str]) -> str:
    """`text(value)`, or NOT_MEASURED for NaN."""
    return NOT_MEASURED if value != value else text(value)


def phases_html(c: Comparison) -> str:
    """Mean-based changes first (the verdict's figures), medians after them for reference."""
    rows = [
        (
            r.phase,
            _measured(r.base_mean_ms, fmt_ms),
            _measured(r.new_mean_ms, fmt_ms),
            _measured(r.delta_ms, lambda v: fmt_ms(v, signed=True)),
            _signed_pct(r.delta_pct),
            _interval_ms(r.ci_low_ms, r.ci_high_ms),
            "yes" if r.significant else "no",
            _measured(r.base_median_ms, fmt_ms),
            _measured(r.new_median_ms, fmt_ms),
            _measured(r.median_delta_ms, lambda v: fmt_ms(v, signed=True)),
            _measured(r.base_share_pct, fmt_pct),
            _measured(r.new_share_pct, fmt_pct),
        )
        for r in c.phases.itertuples()
    ]
    return table(
        [
            "phase",
            "BASE mean",
            "NEW mean",
            "change",
            "change %",
            f"{CONFIDENCE * 100:g} % interval",
            "significant",
            "BASE median",
            "NEW median",
            "median change",
            "BASE share",
            "NEW share",
        ],
        rows,
        [False] + [True] * 5 + [False] + [True] * 5,
    )


#: how the distribution table names its statistics
STATISTIC_LABELS = {
    "steps": "analysed steps",
    "wall": "wall time (sum of analysed steps)",
    "span": "recorded span (first start to last end)",
}


def distribution_html(c: Comparison) -> str:
    rows = []
    for r in c.distribution.itertuples():
        fmt = (lambda x: f"{x:,.0f}") if r.statistic == "steps" else (lambda x: "—" if x != x else f"{x:,.2f}")
        delta = (
            "—"
            if r.delta_ms != r.delta_ms
            else (f"{r.delta_ms:+,.0f}" if r.statistic == "steps" else f"{r.delta_ms:+,.2f}")
        )
        rows.append((STATISTIC_LABELS.get(r.statistic, r.statistic), fmt(r.base_ms), fmt(r.new_ms), delta))
    return table(["step time (ms)", "BASE", "NEW", "change"], rows, [False, True, True, True])


def op_basis_note(c: Comparison) -> str:
    """What the op figures per step are divided by, in each run (`op_steps`)."""
    b, n = c.op_steps.get("base"), c.op_steps.get("new")
    if not b or not n:
        return "Self time per step."
    if b["basis"] == n["basis"] == "steps_with_ops":
        return (
            f"Self time per step that captured ops (op_count > 0): BASE {b['steps']} of {b['recorded_steps']} "
            f"steps, NEW {n['steps']} of {n['recorded_steps']}."
        )
    if b["note"] == n["note"]:
        return f"Self time per step; in both runs {b['note']}."
    return f"Self time per step; BASE: {b['note']}; NEW: {n['note']}."


def ops_html(ops: pd.DataFrame, label: str, limit: int) -> str:
    rows = [
        (
            r.device,
            getattr(r, label),
            r.status,
            int(r.base_count),
            int(r.new_count),
            f"{r.base_per_step_ms:.3f}",
            f"{r.new_per_step_ms:.3f}",
            f"{r.delta_per_step_ms:+.3f}",
            _signed_pct(r.delta_pct),
            f"{r.delta_total_ms:+.3f}",
        )
        for r in ops.head(limit).itertuples()
    ]
    return table(
        [
            "device",
            label.replace("_", " "),
            "status",
            "BASE calls",
            "NEW calls",
            "BASE ms/step",
            "NEW ms/step",
            "change ms/step",
            "change %",
            "change total ms",
        ],
        rows,
        [False, False, False] + [True] * 7,
    )


def queues_html(c: Comparison) -> str:
    if not len(c.queues):
        return absent("Neither run probed a data queue.")
    rows = []
    for r in c.queues.to_dict("records"):
        if r["queue"] == "(verdict)":
            rows.append(("pipeline verdict", r.get("base_verdict"), r.get("new_verdict"), "", "", "", "", "", ""))
            continue
        rows.append(
            (
                r["queue"],
                *(_ratio(r.get(f"{s}_{k}")) for k in ("empty_ratio", "full_ratio") for s in ("base", "new")),
                *(_num(r.get(f"{s}_{k}")) for k in ("mean_size", "get_wait_ms") for s in ("base", "new")),
            )
        )
    return table(
        [
            "queue",
            "BASE empty",
            "NEW empty",
            "BASE full",
            "NEW full",
            "BASE mean size",
            "NEW mean size",
            "BASE get wait ms",
            "NEW get wait ms",
        ],
        rows,
        [False] + [True] * 8,
    )


def _ratio(v: Any) -> str:
    return "—" if v is None else fmt_pct(100 * float(v))


def _num(v: Any) -> str:
    return "—" if v is None else f"{float(v):,.2f}"


def build(ctx: Context) -> str:
    """The compare tab: the shown run (BASE) against --compare's run (NEW)."""
    if not ctx.compare:
        return section("Comparison", absent("No run to compare with (profview BASE --compare NEW)."))
    c = comparison(ctx.runs, ctx.compare, ctx.options.rank, ctx.options.fail_if_slower_pct)
    base, new = tables_of(pick_rank(ctx.runs, ctx.options.rank)), tables_of(pick_rank(ctx.compare, ctx.options.rank))
    parts = [
        section(
            f"{c.base}  →  {c.new}",
            verdict_cards(c),
            f"Decided by the mean analysed step (every step but the warm-up, outliers included: the loop's wall "
            "time per step; the verdict pages' mean steady step leaves the outliers out), "
            f"with a {CONFIDENCE * 100:g} % interval; significant when the interval "
            f"excludes 0 and the change is at least {c.verdict['noise_pct']:g} %. Medians for reference. "
            f"Negative changes are faster.",
        ),
        section("Findings resolved and introduced", findings_html(c)),
        section(
            "Step phases",
            ctx.figure(phase_bars(c)) + phases_html(c),
            "Mean ms per step and its change with its interval; a phase's change is significant by the "
            "verdict's rule (against BASE's mean analysed step). Medians after them, for reference.",
        ),
        '<div class="grid2">',
        section("Step-time distribution", ctx.figure(step_histograms(base.steps(), new.steps()))),
        section(
            "Step-time statistics",
            distribution_html(c),
            "The analysed steps' mean, wall time (their sum) and quantiles; the recorded span runs from "
            "the step trace's first start to its last end, warm-up included.",
        ),
        "</div><br>",
    ]
    if len(c.op_types):
        parts += [
            section(
                "Op types: largest changes",
                ctx.figure(op_delta_bars(c.op_types, "op_type")) + ops_html(c.op_types, "op_type", 30),
                op_basis_note(c),
            ),
            section("Ops: largest changes", ops_html(c.ops, "name", 40), op_basis_note(c)),
        ]
    else:
        parts.append(section("Ops", absent("Neither run has an op table.")))
    parts.append(section("Data queues", queues_html(c)))
    return "".join(parts)


#: Shown with a run to compare with (`--compare`, `profview compare -o`); not live.
PAGE = Page("compare", "Compare", build, shown=lambda ctx: bool(ctx.compare))


# ----------------------------------------------------------------------------- text


def headline(c: Comparison) -> list[str]:
    """The verdict and the figures it rests on, as the text form's first lines."""
    v = c.verdict
    lines = [
        f"Verdict: {v['outcome']}. Mean analysed step {v['base_mean_step_ms']:.3f} ms -> "
        f"{v['new_mean_step_ms']:.3f} ms: "
        f"{v['delta_ms']:+.3f} ms ({_signed_pct(v['delta_pct'])}; {interval_text(v)})"
    ]
    b, n = v["base_steps"], v["new_steps"]
    counts = f"the {b} analysed steps" if b == n else f"the analysed steps ({b} BASE, {n} NEW)"
    wall = f"  wall time of {counts}: {fmt_seconds(v['base_wall_ms'])} -> {fmt_seconds(v['new_wall_ms'])}"
    if v.get("base_span_ms") is not None and v.get("new_span_ms") is not None:
        wall += f"; recorded span {fmt_seconds(v['base_span_ms'])} -> {fmt_seconds(v['new_span_ms'])}"
    lines.append(wall)
    median = (
        f"  median step {v['base_median_step_ms']:.3f} ms -> {v['new_median_step_ms']:.3f} ms "
        f"({_signed_pct(v['median_delta_pct'])}), for reference"
    )
    if v["significant"] and abs(v["median_delta_pct"] or 0) < v["noise_pct"]:
        median += ": the median barely moved, the slow steps did"
    lines += [median, f"  {v['reason']}"]
    return lines


def no_findings_text(c: Comparison) -> str:
    """Why there is nothing resolved or introduced: no reports, or reports without problems."""
    counts = c.findings.get("problems") or {}
    if counts.get("base") is None and counts.get("new") is None:
        return "Neither run has an advisor report (report json): no findings to compare."
    missing = [side.upper() for side in ("base", "new") if counts.get(side) is None]
    if missing:
        return (
            f"{' and '.join(missing)} has no advisor report and the other no high or medium finding: "
            "nothing to resolve or introduce; the verdict rests on the step times."
        )
    return (
        "Neither report has a high or medium finding: nothing to resolve or introduce; "
        "the verdict rests on the step times."
    )


def findings_lines(c: Comparison) -> list[str]:
    """Problems (high and medium findings) resolved, introduced, and those whose severity moved or stayed."""
    f = c.findings
    if not any(f[key] for key in ("resolved", "introduced", *(k for k, _ in MOVED))):
        return [f"Findings: {no_findings_text(c)}"]
    lines = [
        f"{label}: "
        + (
            "; ".join(f"[{x['severity']}] {clean(x['title'])} ({side} {_stake(x['at_stake_ms'])})" for x in items)
            or "none"
        )
        for label, side, items in (("Resolved", "BASE", f["resolved"]), ("Introduced", "NEW", f["introduced"]))
    ]
    lines += [
        f"{label}: "
        + "; ".join(
            f"[{x['base_severity']} -> {x['severity']}] {clean(x['title'])} "
            f"({_stake(x['base_at_stake_ms'], bare=True)} -> {_stake(x['at_stake_ms'])})"
            for x in f[key]
        )
        for key, label in MOVED
        if f[key]
    ]
    return lines


def _stake(ms: Any, bare: bool = False) -> str:
    """A finding's time at stake per step, so a finding reads against the verdict's ms."""
    if ms is None:
        return "?" if bare else "at stake: ?"
    return f"{float(ms):.1f} ms" if bare else f"{float(ms):.1f} ms a step at stake"


def render_text(c: Comparison, top: int = 8) -> str:
    """The comparison in the terminal: verdict, phases, largest op-type changes, findings, the gate."""
    v = c.verdict
    lines = [f"profview compare — BASE {clean(c.base)} -> NEW {clean(c.new)}", *headline(c), ""]
    rows = [
        (
            r.phase,
            _measured(r.base_mean_ms, "{:.3f}".format),
            _measured(r.new_mean_ms, "{:.3f}".format),
            _measured(r.delta_ms, "{:+.3f}".format),
            _signed_pct(r.delta_pct),
            "—" if r.ci_low_ms != r.ci_low_ms else f"{r.ci_low_ms:+.3f} to {r.ci_high_ms:+.3f}",
            "*" if r.significant else "",
            _measured(r.base_median_ms, "{:.3f}".format),
            _measured(r.new_median_ms, "{:.3f}".format),
        )
        for r in c.phases.itertuples()
    ]
    lines += [
        f"Step phases (mean ms per step, {CONFIDENCE * 100:g} % interval of the change, * significant; "
        "medians for reference):",
        text_table(
            ["phase", "BASE", "NEW", "change", "change %", "interval", "", "BASE median", "NEW median"],
            rows,
            [False, True, True, True, True, True, False, True, True],
        ),
    ]
    if len(c.op_types):
        rows = [
            (
                clean(r.op_type, 44),
                clean(r.device),
                r.status,
                f"{r.base_per_step_ms:.3f}",
                f"{r.new_per_step_ms:.3f}",
                f"{r.delta_per_step_ms:+.3f}",
            )
            for r in c.op_types.head(top).itertuples()
        ]
        lines += [
            "",
            "Largest op-type changes (self ms per step):",
            f"  {op_basis_note(c)}",
            text_table(
                ["op type", "device", "status", "BASE", "NEW", "change"], rows, [False, False, False, True, True, True]
            ),
        ]
    lines += ["", *findings_lines(c)]
    if v["fail_if_slower_pct"] is not None:
        lines.append(
            f"CI gate (--fail-if-slower {v['fail_if_slower_pct']:g}%): {v['gate']}"
            + (", exit 1" if v["failed"] else "")
        )
    return "\n".join(lines) + "\n"

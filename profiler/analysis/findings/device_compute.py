"""Where does the device's compute go? compute_bound (low severity: where
the time goes, not a fault): a device computing most of the step, with the kernel families that take
its compute time (GEMM, convolution, elementwise, normalisation, other) and the precision they run in."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold
from profiler.analysis.findings.device import ROWS, DeviceNeeds, in_steps_ms, share_title
from profiler.spill import chunked

THRESHOLDS = {
    "compute_bound_pct": Threshold(
        50.0,
        "share of step time a device runs compute kernels that is reported, as low "
        "severity, with the kernel families taking it (compute_bound)",
    ),
}

#: what makes each family cheaper
FIX = {
    "torch": {
        "gemm": "matrix multiplies take the compute: run them on tensor cores in a lower precision (torch.autocast "
        "with bfloat16 / float16, or TF32: torch.set_float32_matmul_precision('high')) and keep their "
        "dimensions multiples of 8",
        "convolution": "convolutions take the compute: channels_last memory format (model.to(memory_format=torch."
        "channels_last)), torch.backends.cudnn.benchmark = True and torch.autocast",
        "elementwise": "elementwise kernels take the compute (memory-bound): fuse them with torch.compile, use "
        "foreach / fused optimizers, and lower precision to move fewer bytes",
        "normalisation": "normalisation kernels take the compute: fuse them with their neighbours (torch.compile), "
        "channels_last, and mixed precision",
        "other": "the compute goes to kernels outside the common families: look at the top kernels in the timeline "
        "and make the ops that launch them cheaper (torch.compile, a better-shaped batch)",
    },
    "mindspore": dict.fromkeys(
        ("gemm", "convolution", "elementwise", "normalisation", "other"),
        "mixed precision (amp_level='O2'), graph mode with graph-kernel fusion "
        "(set_context(enable_graph_kernel=True)) and a better-shaped batch make these kernels cheaper",
    ),
    "plain": dict.fromkeys(
        ("gemm", "convolution", "elementwise", "normalisation", "other"),
        "this is where the device's compute goes: a lower precision, fused kernels or better-shaped "
        "arrays make it cheaper",
    ),
}
#: precision names as the evidence writes them
PRECISION_TEXT = {"tensor_core": "tensor cores", "fp32": "float32", "fp64": "float64", "half": "half", "": "unknown"}


def fix_for(framework: str, family: str) -> str:
    """The advice for the family taking the compute; a family without advice of its own (a compute kernel
    named like a collective in a foreign or damaged trace) gets the general one."""
    advice = FIX.get(framework, FIX["plain"])
    return advice.get(family, advice["other"])


def family_split(ex: pd.DataFrame) -> pd.DataFrame:
    """The compute kernels' time per family (ms, % of the compute kernel time) with each family's share per
    precision, most time first; their times made a chunk at a time (in a spill file), summed per family and
    precision as pandas sums a group."""
    compute = ex[_compute(ex)]  # every row (a compute-only table): the table itself
    start, end = compute["start_ns"].to_numpy(np.int64), compute["end_ns"].to_numpy(np.int64)
    dur = chunked(len(start), np.float64, lambda at: (end[at] - start[at]).astype(np.float64) * 1e-6, ROWS)
    family, precision = compute["family"].array, compute["precision"].array  # categories in sorted order
    table = pd.DataFrame({"family": family.codes, "precision": precision.codes, "ms": dur}, copy=False)
    per = table.groupby(["family", "precision"])["ms"].sum().unstack(fill_value=0.0)
    per.index = pd.Index(np.asarray(family.categories, dtype=object)[per.index.to_numpy()], name="family")
    per.columns = pd.Index(np.asarray(precision.categories, dtype=object)[per.columns.to_numpy()], name="precision")
    out = pd.DataFrame({"ms": per.sum(axis=1)})
    out["pct"] = 100.0 * out["ms"] / max(float(dur.sum()), 1e-12)
    out["precisions"] = [
        ", ".join(
            f"{PRECISION_TEXT[p]} {100.0 * v / row.sum():.0f} %"
            for p, v in row.sort_values(ascending=False).items()
            if v > 0
        )
        for _, row in per.iterrows()
    ]
    return out.sort_values(["ms"], ascending=False, kind="stable")


def _compute(ex: pd.DataFrame) -> np.ndarray:
    """The compute kernels of the executions."""
    return (ex["category"] == "compute").to_numpy()


def find(data: DeviceNeeds, ctx: Context) -> list[Finding]:
    """compute_bound (low): a device computing at least compute_bound_pct of the step, per device."""
    out = []
    timeline = data.device
    for device, code in timeline.device_codes(data.steps):
        compute = timeline.selected(code, _compute, ["category", "family", "precision", "start_ns", "end_ns"])
        ms = in_steps_ms(compute["start_ns"].to_numpy(np.int64), compute["end_ns"].to_numpy(np.int64), data.steps)
        share = data.steps.share(ms)
        if ms <= 0 or share < ctx.thresholds["compute_bound_pct"]:
            continue
        split = family_split(compute)
        listed = "; ".join(f"{family} {r.pct:.1f} % ({r.precisions})" for family, r in split.iterrows())
        top = str(split.index[0])
        finding = data.steps.finding(
            "compute_bound",
            ms,
            key="compute_bound",
            title=f"{device} computes {share_title(share)}, mostly {top} kernels",
            evidence=(
                f"compute kernels run {ms:.2f} ms per step ({data.steps.note}); their time by family over the "
                f"run: {listed} [{ctx.file('timeline', 'json')}: kernel names; {ctx.file('report', 'json')}: "
                f"devices compute_pct]"
            ),
            threshold=ctx.rule_text("compute kernel time, % of step time", "compute_bound_pct")
            + " (reported as low severity)",
            suggestion=fix_for(ctx.framework, top),
            files=[ctx.file("timeline", "json"), ctx.file("report", "json")],
            metrics={"compute_ms": ms, **{f"{family}_pct": float(r.pct) for family, r in split.iterrows()}},
        )
        finding.severity = "low"
        out.append(finding)
    return out


QUESTION = Question(
    name="device_compute",
    page="operators",
    keys=("compute_bound",),
    thresholds=THRESHOLDS,
    rank=Rule(DeviceNeeds, find),
)

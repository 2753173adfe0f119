"""Where does the op time go? op_hotspot: an avoidable op family (dtype casts, normalisation, layout
transforms) above its share of a device's op time, or, as low severity, one ordinary op type doing
most of the work (where the compute goes, not a fault). Figures are per captured step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.findings.base import (
    CAST_OP_NAME,
    Context,
    Finding,
    Question,
    Rule,
    StepWindow,
    Threshold,
    pct_text,
)
from profiler.kernels.grouping import is_in

THRESHOLDS = {
    "op_hotspot_pct": Threshold(
        20.0,
        "share of a device's op time taken by an avoidable op family (BatchNorm / normalisation, layout transforms)",
    ),
    "cast_hotspot_pct": Threshold(
        8.0, "share of a device's op time taken by dtype conversions (Cast): pure overhead, so a lower line"
    ),
    "op_dominant_pct": Threshold(50.0, "share of op time taken by one op type that is reported (as low severity)"),
}

#: Avoidable op families: name pattern, label, and the fix per framework.
OP_FAMILIES: dict[str, tuple[re.Pattern, str, dict[str, str]]] = {
    "cast": (
        CAST_OP_NAME,
        "Cast (dtype conversion)",
        {
            "torch": "keep one dtype through the model: remove .double() / .float() / .to(dtype) around layers "
            "(each one is a copy forward and again in backward); for speed use mixed precision "
            "(torch.autocast(device_type, dtype=torch.bfloat16 or float16)) rather than manual casts",
            "mindspore": "set the network's precision once (Model(net, amp_level='O2' / 'O3'), or .to_float(mstype."
            "float16)) so Cast ops disappear, and enable graph-kernel fusion "
            "(set_context(enable_graph_kernel=True)) to fuse the rest",
            "plain": "keep arrays in one dtype end to end; convert once at load time instead of in every step",
        },
    ),
    "norm": (
        re.compile(r"(?i)(?:batch_?norm|bntraining|bninfer|\bbn_(?:fw|bw)|layer_?norm|group_?norm|instance_?norm)"),
        "BatchNorm / normalisation",
        {
            "torch": "run normalisation in the model's dtype (never float64), use channels_last memory format and "
            "torch.compile to fuse BatchNorm + ReLU, or mixed precision (torch.autocast); for inference, "
            "fold BatchNorm into the preceding conv (torch.ao.quantization.fuse_modules)",
            "mindspore": "mixed precision (amp_level='O2') and graph-kernel fusion (set_context(enable_graph_kernel="
            "True)) fuse BNTrainingReduce / BNTrainingUpdate with their neighbours",
            "plain": "fuse the normalisation with its neighbouring ops, or compute it in a lower precision",
        },
    ),
    "layout": (
        re.compile(r"(?i)(?:transdata|^transpose|aten::contiguous$)"),
        "layout transforms (TransData / transpose)",
        {
            "torch": "keep one memory format end to end (model.to(memory_format=torch.channels_last) together with "
            "the inputs) so tensors are not re-laid out between ops",
            "mindspore": "TransData converts between NCHW and the device format: keep shapes / dtypes stable, use "
            "mixed precision consistently and graph mode so the compiler removes the conversions",
            "plain": "keep one memory layout end to end instead of transposing between ops",
        },
    ),
}

#: the fix for a dominant ordinary op type
DOMINANT_FIX = {
    "torch": "this is where the compute goes: to go faster make it cheaper — mixed precision (torch.autocast), "
    "channels_last, torch.compile, a better-shaped batch, or faster hardware",
    "mindspore": "this is where the compute goes: to go faster make it cheaper — mixed precision (amp_level="
    "'O2'), graph mode with graph-kernel fusion, a better-shaped batch, or faster hardware",
    "plain": "this is where the compute goes: to go faster make it cheaper — a faster library or kernel, lower "
    "precision, better-shaped arrays, or faster hardware",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    op_type: pd.DataFrame
    ops: pd.DataFrame
    float64_ops: np.ndarray  # per op row: charged to a float64 detour (the precision finding's, not ours)


def find(data: Needs, ctx: Context) -> list[Finding]:
    """Avoidable op families first, then dominant ordinary op types."""
    if data.op_type is None or not len(data.op_type):
        return []
    return _family_findings(data, ctx) + _dominant_findings(data, ctx)


def op_ms_per_step(data: Needs, device: str, op_types: set[str], unclaimed_only: bool = False) -> float:
    """Self time of these op types on `device`, per captured analysed step (ms); `unclaimed_only`: of the
    ops no other finding charges."""
    ops, steps = data.ops, data.steps.captured
    if ops is None or not len(ops) or not len(steps):
        return 0.0
    charged = False if unclaimed_only else None
    return float(_self_ns(data, device, op_types, steps["step"].to_numpy(), charged)) / 1e6 / len(steps)


def claimed_share(data: Needs, device: str, op_types: set[str], device_self_ms: float) -> float:
    """The share of `device`'s op self time (over the run, as op_type's share_pct) in ops of these types that
    another finding charges (a float64 detour's)."""
    ops = data.ops
    if ops is None or not len(ops) or device_self_ms <= 0:
        return 0.0
    return 100.0 * float(_self_ns(data, device, op_types, None, True)) / 1e6 / device_self_ms  # the charged ones


def _self_ns(data: Needs, device: str, op_types: set[str], steps: Optional[np.ndarray], charged: Optional[bool]) -> int:
    """The self time (ns; an exact integer sum) of the ops of these types on `device`, of `steps` when given, and,
    unless `charged` is None, of the ops another finding charges (True: a float64 detour's) or of the others
    (False): a chunk of rows at a time (a big trace's millions of ops took a mask and a gather of the whole table
    per question)."""
    ops = data.ops
    self_ns = ops["self_ns"].to_numpy(np.int64)
    float64 = data.float64_ops if len(data.float64_ops) == len(ops) else np.zeros(len(ops), dtype=bool)
    total = 0
    for at in spill.chunks(len(ops)):
        mask = (ops["device"].iloc[at] == device).to_numpy() & is_in(ops["op_type"].iloc[at], op_types)
        if steps is not None:
            mask &= np.isin(ops["step"].to_numpy()[at], steps)
        if charged is not None:
            mask &= float64[at] == charged
        total += int(self_ns[at][mask].sum())
    return total


def _captured_note(steps: StepWindow) -> str:
    n, total = len(steps.captured), len(steps.analysed)
    return f"per captured step ({n} of the {total} analysed steps captured ops)" if n < total else "per step"


def _family_findings(data: Needs, ctx: Context) -> list[Finding]:
    """op_hotspot: an avoidable op family (Cast, normalisation, layout) above op_hotspot_pct of a device's op time."""
    table = data.op_type
    out = []
    names = table["op_type"].astype(str)
    for family, (pattern, label, fix) in OP_FAMILIES.items():
        limit_name = "cast_hotspot_pct" if family == "cast" else "op_hotspot_pct"
        limit = ctx.thresholds[limit_name]
        member = names.str.contains(pattern)
        for device, rows in table[member].groupby("device", sort=True):
            kinds = set(rows["op_type"].astype(str))
            device_self_ms = float(table.loc[table["device"] == device, "self_ms"].sum())
            claimed = claimed_share(data, device, kinds, device_self_ms)
            share = float(rows["share_pct"].sum()) - claimed
            if share < limit:
                continue
            stake = op_ms_per_step(data, device, kinds, unclaimed_only=True)
            top = rows.sort_values("self_ms", ascending=False).head(4)
            listed = ", ".join(f"{r.op_type} {r.share_pct:.1f} %" for r in top.itertuples())
            f = ctx.file("op_type")
            out.append(
                data.steps.captured_finding(
                    "op_hotspot",
                    stake,
                    title=f"{label} ops take {pct_text(share)} of {device} op time",
                    key=f"op_hotspot:{family}:{device}",
                    evidence=(
                        f"{listed} of {device} self time over the run"
                        + (
                            f" ({claimed:.1f} % of it charged to float64 by precision_waste, left out)"
                            if claimed
                            else ""
                        )
                        + f"; {stake:.2f} ms {_captured_note(data.steps)} "
                        f"[{f}: op_type, self_ms, share_pct; {ctx.file('step_trace')}: op_count]"
                    ),
                    threshold=f"{family} family share >= {limit:g} % of op time ({limit_name})",
                    suggestion=fix[ctx.framework],
                    files=[f, ctx.file("op_detail")],
                    metrics={"share_pct": share, "self_ms_per_step": stake},
                )
            )
    return out


def _dominant_findings(data: Needs, ctx: Context) -> list[Finding]:
    """op_hotspot (low): one ordinary op type with most of a device's op time — where compute goes, not a fault.
    Collectives are not ordinary ops: their time is the communication findings' (comm_bound, straggler_rank)."""
    table = data.op_type
    limit = ctx.thresholds["op_dominant_pct"]
    names = table["op_type"].astype(str)
    avoidable = np.zeros(len(table), dtype=bool)
    if "category" in table:
        avoidable |= (table["category"].astype(str) == "comm").to_numpy()
    for pattern, _, _ in OP_FAMILIES.values():
        avoidable |= names.str.contains(pattern).to_numpy()
    big = table[(~avoidable) & (table["share_pct"] >= limit)]
    out = []
    for r in big.itertuples():
        stake = op_ms_per_step(data, str(r.device), {str(r.op_type)})
        f = ctx.file("op_type")
        finding = data.steps.captured_finding(
            "op_hotspot",
            stake,
            title=f"{r.op_type} does most of the work on {r.device} ({pct_text(r.share_pct)})",
            key=f"op_hotspot:{r.op_type}:{r.device}",
            evidence=(
                f"{r.op_type}: {r.count} calls, {r.self_ms:.2f} ms self time, {stake:.2f} ms "
                f"{_captured_note(data.steps)} [{f}: share_pct, self_ms]"
            ),
            threshold=f"one op type >= {limit:g} % of op time (op_dominant_pct; reported as low severity)",
            suggestion=DOMINANT_FIX[ctx.framework],
            files=[f],
            metrics={"share_pct": float(r.share_pct), "self_ms_per_step": stake},
        )
        finding.severity = "low"
        out.append(finding)
    return out


QUESTION = Question(
    name="operators", page="operators", keys=("op_hotspot",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

"""Does the device compute in a slow precision? device_precision: per device, the time of matrix
kernels (GEMM, convolution) in float32 on the ordinary cores (`sgemm`, `scudnn`: no tensor cores; TF32 or
torch.autocast would run them on tensor cores) and of float64 kernels of any family (`dgemm`,
`<double>` templates; GPUs run float64 at a fraction of float32's rate).

When the trace ties kernels to the ops that launched them, the float32 stake is also the TensorBoard
plugin's "tensor-core eligible" time left off the tensor cores: the matrix kernels that tensor-core
eligible ops (convolutions, matrix products, ...) launched and that run neither on tensor cores nor in
half precision, also when their names do not say float32 (a CUTLASS or cuDNN kernel named by its tile
only); the evidence names those ops."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import Context, Finding, Question, Rule, Threshold
from profiler.analysis.findings.device import ROWS, DeviceNeeds, in_steps_ms, share_title
from profiler.analysis.kernel_families import MATRIX_FAMILIES
from profiler.analysis.stakes import compute_capability, fp32_matrix_win, fp64_win
from profiler.spill import chunked

THRESHOLDS = {
    "fp32_matrix_pct": Threshold(
        10.0,
        "share of step time in float32 GEMM / convolution kernels that do not use tensor cores (device_precision:fp32)",
    ),
    "fp64_kernel_pct": Threshold(5.0, "share of step time in float64 kernels (device_precision:fp64)"),
}

#: the torch advice for float32 matrix kernels by device generation: TF32 exists from Ampere on only
FP32_TORCH_FIX = {
    "ampere": "run matrix math on tensor cores: torch.backends.cuda.matmul.allow_tf32 = True (or "
    "torch.set_float32_matmul_precision('high')) and torch.backends.cudnn.allow_tf32 = True, or mixed "
    "precision, torch.autocast(device_type='cuda', dtype=torch.bfloat16)",
    "volta": "run matrix math on tensor cores with mixed precision: torch.autocast(device_type='cuda', "
    "dtype=torch.float16) with a torch.amp.GradScaler (Volta / Turing tensor cores take float16 only; TF32 "
    "and bfloat16 need Ampere or newer)",
    "older": "this GPU has no tensor cores (before Volta): float16 autocast helps only where it has fast "
    "half precision; larger, better-shaped matrices, or a newer GPU, are what make these kernels faster",
}

FIX = {
    "fp32": {
        "torch": "run matrix math on tensor cores: torch.backends.cuda.matmul.allow_tf32 = True (or "
        "torch.set_float32_matmul_precision('high')) and torch.backends.cudnn.allow_tf32 = True on "
        "Ampere or newer; or mixed precision, torch.autocast(device_type='cuda', dtype=torch.bfloat16 / "
        "torch.float16) with a GradScaler for float16 (Volta / Turing: float16 only)",
        "mindspore": "use mixed precision (Model(net, amp_level='O2' / 'O3')) so matrix kernels run on tensor / "
        "cube units",
        "plain": "use a lower matrix precision (TF32, bfloat16, float16) so the matrix units do the work",
    },
    "fp64": {
        "torch": "keep the model and its inputs in float32 (or lower): remove .double() / dtype=torch.float64 "
        "(numpy arrays are float64 by default: torch.from_numpy(x).float()); GPUs run float64 at "
        "1/2 to 1/64 of float32's rate",
        "mindspore": "keep the network in float32 or lower (mstype.float32 / amp_level), numpy inputs included",
        "plain": "compute in float32: float64 runs at a fraction of float32's rate on accelerators",
    },
}
#: kernels listed in the evidence
TOP_KERNELS = 3


@dataclass(frozen=True)
class Needs(DeviceNeeds):
    device_properties: Mapping[str, Mapping[str, Any]]  # device name -> the trace's deviceProperties


def fix_text(kind: str, framework: str, properties: Optional[Mapping[str, Any]]) -> str:
    """The advice for the slow precision, in the device generation's terms (no TF32 before Ampere)."""
    if kind != "fp32" or framework != "torch":
        return FIX[kind][framework]
    cc = compute_capability(properties)
    if cc is None:
        return FIX["fp32"]["torch"]
    return FP32_TORCH_FIX["ampere" if cc >= (8, 0) else "volta" if cc >= (7, 0) else "older"]


def find(data: Needs, ctx: Context) -> list[Finding]:
    """device_precision: float32 matrix kernels off the tensor cores, float64 kernels; per device."""
    out = []
    for device, code in data.device.device_codes(data.steps):
        for kind, where in MASKS.items():
            out += _finding(data, ctx, device, data.device.selected(code, where, USED), kind)
    return out


def fp32_matrix(ex) -> np.ndarray:
    """Matrix kernels whose names say float32 on the ordinary cores."""
    family = ex["family"].to_numpy(dtype=object)
    return (
        (ex["precision"].to_numpy(dtype=object) == "fp32")
        & np.isin(family, MATRIX_FAMILIES)
        & ~ex["tensor_cores"].to_numpy(bool)
    )


def eligible_off_tensor_cores(ex) -> np.ndarray:
    """Matrix kernels launched by tensor-core eligible ops that did not use them, their precision unnamed
    or float32 (the time TF32 or autocast would move to the tensor cores). An eligible op's other kernels
    stay out: cuDNN's nchwToNhwc layout kernels around a tensor-core convolution are float32 and exist
    because of the tensor cores (nccl_data: 11 ms of them beside xmma convolutions)."""
    return (
        ex["launcher_eligible"].to_numpy(bool)
        & ~ex["tensor_cores"].to_numpy(bool)
        & np.isin(ex["precision"].to_numpy(dtype=object), ("fp32", ""))
        & np.isin(ex["family"].to_numpy(dtype=object), MATRIX_FAMILIES)
    )


#: the kernels each kind of finding counts, as a mask of a chunk of executions
MASKS = {
    "fp32": lambda ex: fp32_matrix(ex) | eligible_off_tensor_cores(ex),
    "fp64": lambda ex: ex["precision"].to_numpy(dtype=object) == "fp64",
}
#: the executions' columns a finding reads
USED = ["name", "family", "launcher", "launcher_eligible", "start_ns", "end_ns"]


def _finding(data: Needs, ctx: Context, device: str, chosen: pd.DataFrame, kind: str) -> list[Finding]:
    """The finding of one kind on one device, from its kernels of that kind (`chosen`, in the table's order)."""
    start, end = chosen["start_ns"].to_numpy(np.int64), chosen["end_ns"].to_numpy(np.int64)
    ms = in_steps_ms(start, end, data.steps)
    share = data.steps.share(ms)
    threshold = "fp32_matrix_pct" if kind == "fp32" else "fp64_kernel_pct"
    if ms <= 0 or share < ctx.thresholds[threshold]:
        return []
    chosen = chosen.assign(dur_ms=chunked(len(start), np.float64, lambda at: (end[at] - start[at]) * 1e-6, ROWS))
    top = chosen.groupby("name", observed=True)["dur_ms"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    listed = "; ".join(
        f"{str(name)[:80]} x{int(r['count'])} {r['sum']:.2f} ms" for name, r in top.head(TOP_KERNELS).iterrows()
    )
    families = ", ".join(sorted(str(f) for f in chosen["family"].unique()))
    what = "float32 matrix kernels without tensor cores" if kind == "fp32" else "float64 kernels"
    metrics = {f"{kind}_ms": ms, "kernels": float(len(chosen))}
    eligible = chosen["launcher_eligible"].to_numpy(bool)
    if kind == "fp32" and eligible.any():
        by_op = chosen[eligible].groupby("launcher")["dur_ms"].sum().sort_values(ascending=False)
        ops = "; ".join(f"{op} {op_ms:.2f} ms" for op, op_ms in by_op.head(TOP_KERNELS).items())
        listed += f"; launched by tensor-core eligible ops: {ops} [{ctx.file('kernels')}: op, tensor_cores]"
        metrics["tc_eligible_ms"] = in_steps_ms(start[eligible], end[eligible], data.steps)
    return [
        data.steps.finding(
            "device_precision",
            ms,
            key=f"device_precision:{kind}",
            title=f"{what[0].upper()}{what[1:]} take {share_title(share)} on {device}",
            evidence=(
                f"{ms:.2f} ms per step in {what} ({families}; {data.steps.note}); over the run: {listed} "
                f"[{ctx.file('timeline', 'json')}: kernel names]"
            ),
            threshold=ctx.rule_text(f"{what}, % of step time", threshold),
            suggestion=fix_text(kind, ctx.framework, data.device_properties.get(device)),
            files=[ctx.file("timeline", "json")],
            metrics=metrics,
            win=(fp32_matrix_win if kind == "fp32" else fp64_win)(data.device_properties.get(device)),
        )
    ]


QUESTION = Question(
    name="device_precision",
    page="operators",
    keys=("device_precision",),
    thresholds=THRESHOLDS,
    rank=Rule(Needs, find),
)

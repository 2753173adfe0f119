"""Does the host compute in float64? precision_waste: the float64 detour (the ops computing in float64
and the casts to / from float64 around them, profiler/analysis/float64.py: known from the ops' recorded
input types with torch's `record_shapes=True`, or from the spans `attach()` marks around the modules
holding float64 parameters), charged together, as one cause, with the time they take per captured step.
float64 is twice the bytes and, on most hardware, several times the time of float32, and is almost never
what a model needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler.analysis.findings.base import CAST_OP_NAME, Context, Finding, Question, Rule, StepWindow, Threshold
from profiler.analysis.stakes import precision_detour_win
from profiler.kernels.grouping import text_matches

THRESHOLDS = {
    "precision_waste_pct": Threshold(
        5.0,
        "share of the mean captured step spent in host ops on float64 inputs "
        "and the casts to / from float64 around them (a float64 detour)",
    ),
}

FIX = {
    "torch": "keep the model and its inputs in float32: remove .double() / dtype=torch.float64 (model.float(), "
    "torch.set_default_dtype(torch.float32)) and find where float64 enters — numpy arrays are float64 "
    "by default, so torch.from_numpy(array) / torch.tensor(array) give float64 tensors: convert with "
    "array.astype(np.float32) or .float() once at load time; for speed use mixed precision "
    "(torch.autocast) rather than a wider type",
    "mindspore": "keep the network and its inputs in float32 (mstype.float32; numpy arrays are float64 by "
    "default: astype(np.float32) at load time) and use mixed precision (amp_level='O2') for speed",
    "plain": "keep arrays in float32 end to end (numpy creates float64 by default: pass dtype=np.float32, or "
    "astype(np.float32) once at load time)",
}


@dataclass(frozen=True)
class Needs:
    steps: StepWindow
    ops: pd.DataFrame
    float64_ops: np.ndarray  # per op row: charged to float64 (profiler.analysis.float64)
    float64_modules: tuple[str, ...]  # the float64 modules attach() marked (their spans), if any


def find(data: Needs, ctx: Context) -> list[Finding]:
    """precision_waste: float64 ops and their casts take at least precision_waste_pct of the captured step."""
    ops, captured = data.ops, data.steps.captured
    if ops is None or not len(ops) or "dtypes" not in ops or not len(captured):
        return []
    charged = data.float64_ops & ops["step"].isin(captured["step"]).to_numpy()
    if not charged.any():
        return []
    ops, n = ops[charged], len(captured)
    self_ms = pd.Series(ops["self_ns"].to_numpy(np.float64) / 1e6 / n, index=ops["name"].astype(str).to_numpy())
    cast = self_ms.index.str.contains(CAST_OP_NAME)
    stake, cast_ms = float(self_ms.sum()), float(self_ms[cast].sum())
    top = self_ms.groupby(level=0).sum().sort_values(ascending=False).head(4)
    note = f"per captured step ({n} of {len(data.steps.analysed)})" if n < len(data.steps.analysed) else "per step"
    finding = data.steps.captured_finding(
        "precision_waste",
        stake,
        title=f"float64 on the host: {stake:.2f} ms per step in ops on float64 inputs and the casts around them",
        evidence=(
            f"{stake:.2f} ms {note} of self time in {len(ops) / n:.0f} ops per step with float64 inputs or "
            f"casting to / from float64 ({cast_ms:.2f} ms of it casts); the biggest: "
            + ", ".join(f"{name} {ms:.2f} ms" for name, ms in top.items())
            + f"; {_found_by(data)} [{ctx.file('op_detail')}: name, self_ms]"
        ),
        threshold=ctx.rule_text("float64 ops + their casts", "precision_waste_pct"),
        suggestion=FIX[ctx.framework],
        files=[ctx.file("op_detail"), ctx.file("timeline", "json")],
        metrics={"self_ms_per_step": stake, "cast_ms_per_step": cast_ms, "ops_per_step": len(ops) / n},
        win=precision_detour_win(cast_ms, stake),
    )
    return [finding] if ctx.reaches(finding.at_stake_pct, "precision_waste_pct") is not None else []


def _found_by(data: Needs) -> str:
    """How the float64 ops were known, in words."""
    by_types = "dtypes" in data.ops and text_matches(data.ops["dtypes"], lambda types: "double" in types).any()
    ways = (["the input types torch.profiler recorded (record_shapes=True)"] if by_types else []) + (
        [f"the float64 modules attach() marked: {', '.join(data.float64_modules)}"] if data.float64_modules else []
    )
    return "found from " + " and ".join(ways) if ways else "found from the recorded op names"


QUESTION = Question(
    name="precision", page="operators", keys=("precision_waste",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

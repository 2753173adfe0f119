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

from profiler import spill
from profiler.analysis.findings.base import CAST_OP_NAME, Context, Finding, Question, Rule, StepWindow, Threshold
from profiler.analysis.stakes import precision_detour_win
from profiler.kernels.grouping import codes_and_labels, text_matches
from profiler.kernels.nesting import positions_passing

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
    rows = _charged_rows(data.float64_ops, ops["step"].to_numpy(), captured["step"].to_numpy())
    if not len(rows):
        return []
    n, self_ns = len(captured), ops["self_ns"].to_numpy(np.int64)
    self_ms = spill.chunked(
        len(rows), np.float64, lambda at: self_ns[rows[at]].astype(np.float64) / 1e6 / n, along=rows
    )
    rank, names = _name_ranks(ops["name"], rows)
    is_cast = np.array([bool(CAST_OP_NAME.search(name)) for name in names], dtype=bool)
    cast = positions_passing(len(rows), lambda at: is_cast[rank[at]])
    stake, cast_ms = float(self_ms.sum()), float(spill.gathered(self_ms, cast).sum())
    by_name = pd.Series(self_ms, copy=False).groupby(rank).sum()  # each name's sum in row order, as by its text
    top = by_name.set_axis(np.asarray(names, dtype=object)[by_name.index.to_numpy()]).sort_values(ascending=False)[:4]
    note = f"per captured step ({n} of {len(data.steps.analysed)})" if n < len(data.steps.analysed) else "per step"
    finding = data.steps.captured_finding(
        "precision_waste",
        stake,
        title=f"float64 on the host: {stake:.2f} ms per step in ops on float64 inputs and the casts around them",
        evidence=(
            f"{stake:.2f} ms {note} of self time in {len(rows) / n:.0f} ops per step with float64 inputs or "
            f"casting to / from float64 ({cast_ms:.2f} ms of it casts); the biggest: "
            + ", ".join(f"{name} {ms:.2f} ms" for name, ms in top.items())
            + f"; {_found_by(data)} [{ctx.file('op_detail')}: name, self_ms]"
        ),
        threshold=ctx.rule_text("float64 ops + their casts", "precision_waste_pct"),
        suggestion=FIX[ctx.framework],
        files=[ctx.file("op_detail"), ctx.file("timeline", "json")],
        metrics={"self_ms_per_step": stake, "cast_ms_per_step": cast_ms, "ops_per_step": len(rows) / n},
        win=precision_detour_win(cast_ms, stake),
    )
    return [finding] if ctx.reaches(finding.at_stake_pct, "precision_waste_pct") is not None else []


def _charged_rows(float64: np.ndarray, step: np.ndarray, captured: np.ndarray) -> np.ndarray:
    """The rows of the ops a float64 detour charges in the captured steps: a chunk of ops at a time (spilled when
    big; a whole-table mask and the charged rows' every column were the report's biggest allocations)."""
    return positions_passing(len(step), lambda at: float64[at] & np.isin(step[at], captured))


def _name_ranks(names: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each of the ops `rows`' name (as text, a missing one "nan") as its rank among the names met in sorted
    order, and those names: coded a chunk of rows at a time (int64, spilled when big), no text per op."""
    number: dict[str, int] = {}

    def first_met(at: slice) -> np.ndarray:
        codes, labels = codes_and_labels(names.iloc[rows[at]])
        texts = [str(label) for label in labels.tolist()] + (["nan"] if (codes < 0).any() else [])  # code -1: last
        return np.array([number.setdefault(text, len(number)) for text in texts], dtype=np.int64)[codes]

    met = spill.chunked(len(rows), np.int64, first_met)
    texts = sorted(number)
    rank_of = np.empty(len(texts), dtype=np.int64)
    rank_of[[number[text] for text in texts]] = np.arange(len(texts))
    return spill.chunked(len(rows), np.int64, lambda at: rank_of[met[at]]), texts


def _found_by(data: Needs) -> str:
    """How the float64 ops were known, in words (the input types read a chunk of ops at a time, up to the first
    float64 one)."""
    dtypes = data.ops["dtypes"]  # find asks only when the ops have input types
    by_types = any(text_matches(dtypes.iloc[at], lambda t: "double" in t).any() for at in spill.chunks(len(dtypes)))
    ways = (["the input types torch.profiler recorded (record_shapes=True)"] if by_types else []) + (
        [f"the float64 modules attach() marked: {', '.join(data.float64_modules)}"] if data.float64_modules else []
    )
    return "found from " + " and ".join(ways) if ways else "found from the recorded op names"


QUESTION = Question(
    name="precision", page="operators", keys=("precision_waste",), thresholds=THRESHOLDS, rank=Rule(Needs, find)
)

"""The training-trace log: 20-byte step points, assembled into steps and all-reduce intervals.

Step assembly follows RAW_FORMATS.md section 5, vectorised: records are cut into segments at
step markers; a segment that reaches ITER_END is one step candidate whose fp / bp / reduce
points are those recorded before its first ITER_END.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.importers.ascend.hwts import MAX_SYSCNT
from profiler.importers.ascend.slices import Joined, whole_records

TRACE_RECORD_BYTES = 20
TRACE_DTYPE = np.dtype([("tag", "<u8"), ("task_id", "<u2"), ("stream_id", "<u2"), ("syscnt", "<u8")])

FP_START_TAG, BP_END_TAG = 1, 2
#: ITER_END was tag 255 until late 2020 and 65535 after; a file using 65535 marks the new form.
ITER_END_TAGS = (255, 65535)

STEP_TABLE_COLUMNS = ["step_num", "start", "end", "fp", "bp"]
REDUCE_TABLE_COLUMNS = ["step_num", "stream_id", "k", "start", "end", "start_tag", "end_tag"]


def decode_training_trace(joined: Joined) -> tuple[pd.DataFrame, list[str]]:
    """Decode training-trace records into columns (tag, task_id, stream_id, syscnt)."""
    raw = joined.data
    whole, problems = whole_records(joined, TRACE_RECORD_BYTES, "training-trace")
    records = np.frombuffer(raw, dtype=TRACE_DTYPE, count=whole)
    syscnt = records["syscnt"].astype(np.int64)
    tag = records["tag"].astype(np.int64)
    impossible = (syscnt < 0) | (syscnt >= MAX_SYSCNT) | (tag < 0)
    if impossible.any():
        first = int(np.argmax(impossible))
        problems.append(
            f"{joined.locate(first * TRACE_RECORD_BYTES)}: {int(impossible.sum())} training-trace record(s) "
            "with an impossible counter value or tag skipped (first here)"
        )
    keep = ~impossible
    frame = pd.DataFrame(
        {
            "tag": tag[keep],
            "task_id": records["task_id"][keep].astype(np.int64),
            "stream_id": records["stream_id"][keep].astype(np.int64),
            "syscnt": syscnt[keep],
        }
    )
    return frame, problems


def _last_per_segment(segment: np.ndarray, values: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """Per segment, the value of the last masked record (-1 when none)."""
    out = np.full(n, -1, dtype=np.int64)
    out[segment[mask]] = values[mask]  # later writes win, as in the sequential parser
    return out


def assemble_steps(trace: pd.DataFrame, skip_first: bool, source: str) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Steps (step_num, start, end, fp, bp) and reduce pairs (step_num, stream_id, k, start, end, tags), in ticks.

    Step start is the previous segment's ITER_END (fp for the first step); step numbers count
    every candidate, including those dropped for lacking a point. `skip_first` drops the first
    candidate without numbering it (the dataset-init step of some jobs). `source` names the
    files in messages.
    """
    if trace.empty:
        return (
            pd.DataFrame({c: np.zeros(0, np.int64) for c in STEP_TABLE_COLUMNS}),
            pd.DataFrame({c: np.zeros(0, np.int64) for c in REDUCE_TABLE_COLUMNS}),
            [],
        )
    tag = trace["tag"].to_numpy()
    syscnt = trace["syscnt"].to_numpy()
    stream = trace["stream_id"].to_numpy()
    end_tag = ITER_END_TAGS[1] if (tag == ITER_END_TAGS[1]).any() else ITER_END_TAGS[0]
    is_end = tag == end_tag
    is_marker = ((tag == 0) | (tag > 255)) & ~is_end
    segment = np.cumsum(is_marker)
    n_seg = int(segment[-1]) + 1
    index = np.arange(len(tag))

    first_end = np.full(n_seg, len(tag), dtype=np.int64)
    np.minimum.at(first_end, segment[is_end], index[is_end])
    before_end = index <= first_end[segment]
    has_end = first_end < len(tag)
    end = np.where(has_end, syscnt[np.minimum(first_end, len(tag) - 1)], -1)
    fp = _last_per_segment(segment, syscnt, before_end & (tag == FP_START_TAG), n_seg)
    bp = _last_per_segment(segment, syscnt, before_end & (tag == BP_END_TAG), n_seg)
    previous_end = np.concatenate([[-1], end[:-1]])
    start = np.where(previous_end >= 0, previous_end, fp)
    start[0] = -1  # records before the first step marker have no step start

    problems = []
    late = ~before_end & ~is_marker
    if late.any():
        problems.append(f"{source}: {int(late.sum())} training-trace record(s) after a step's ITER_END were ignored")
    unfinished = int((~has_end[1:]).sum())
    if unfinished:
        problems.append(f"{source}: {unfinished} step(s) without ITER_END (profiling stopped mid-step) were left out")
    candidates = np.flatnonzero(has_end)
    if skip_first and len(candidates):
        candidates = candidates[1:]
    step_num = np.arange(1, len(candidates) + 1)
    complete = (start[candidates] >= 0) & (fp[candidates] >= 0) & (bp[candidates] >= 0)
    if not complete.all():
        problems.append(
            f"{source}: {int((~complete).sum())} step(s) lacking a start, FP_START or BP_END point were dropped "
            f"(step numbers {step_num[~complete][:5].tolist()}{'...' if (~complete).sum() > 5 else ''})"
        )
    kept = candidates[complete]
    steps = pd.DataFrame(
        {
            "step_num": step_num[complete],
            "start": start[kept],
            "end": end[kept],
            "fp": fp[kept],
            "bp": bp[kept],
        }
    )
    reduce_mask = before_end & ~is_marker & ~is_end & (tag != FP_START_TAG) & (tag != BP_END_TAG)
    step_of_segment = np.full(n_seg, -1, dtype=np.int64)
    step_of_segment[kept] = steps["step_num"].to_numpy()
    reduces, odd = _reduce_pairs(step_of_segment[segment], stream, tag, syscnt, reduce_mask)
    if odd:
        problems.append(f"{source}: {odd} step/stream group(s) with an odd number of all-reduce points were left out")
    return steps, reduces, problems


def _reduce_pairs(
    step_num: np.ndarray, stream: np.ndarray, tag: np.ndarray, syscnt: np.ndarray, mask: np.ndarray
) -> tuple[pd.DataFrame, int]:
    """All-reduce (start, end) pairs per step and stream, streams in order of first appearance.

    Points of one stream pair up in record order (0-1, 2-3, ...); a stream with an odd number of
    points in a step is left out for that step. Returns the pairs and the number left out.
    """
    mask = mask & (step_num >= 0)
    points = pd.DataFrame(
        {"step_num": step_num[mask], "stream_id": stream[mask], "tag": tag[mask], "syscnt": syscnt[mask]}
    )
    groups = points.groupby(["step_num", "stream_id"], sort=False)
    points["group"] = groups.ngroup().to_numpy()
    points["position"] = groups.cumcount().to_numpy()
    even = groups["tag"].transform("size").to_numpy() % 2 == 0
    odd_groups = int(groups.ngroups - points.loc[even, "group"].nunique())
    points = points[even].sort_values(["group", "position"], kind="stable")
    first, second = points.iloc[0::2], points.iloc[1::2]
    pairs = pd.DataFrame(
        {
            "step_num": first["step_num"].to_numpy(),
            "stream_id": first["stream_id"].to_numpy(),
            "k": first["position"].to_numpy() // 2,
            "start": first["syscnt"].to_numpy(),
            "end": second["syscnt"].to_numpy(),
            "start_tag": first["tag"].to_numpy(),
            "end_tag": second["tag"].to_numpy(),
        }
    )
    return pairs, odd_groups


def checked_steps(
    steps: pd.DataFrame, reduces: pd.DataFrame, source: str
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The steps whose points are in order (start <= FP_START <= BP_END <= ITER_END) and that do not
    overlap an earlier step, and the all-reduce pairs of those steps that lie inside them (the
    device records a step's all-reduce points between its start and its ITER_END).

    A counter only moves forward, so any other step was assembled from damaged records; it is
    left out (its number is kept by the others) with a problem naming `source`.
    """
    problems = []
    start, fp, bp, end = (steps[c].to_numpy() for c in ("start", "fp", "bp", "end"))
    ordered = (start >= 0) & (start <= fp) & (fp <= bp) & (bp <= end)
    keep = ordered & ~_overlapping(start, end, ordered)
    if not ordered.all():
        problems.append(
            f"{source}: {int((~ordered).sum())} step(s) whose points are out of order (damaged records) "
            f"were left out (step numbers {steps['step_num'].to_numpy()[~ordered][:5].tolist()}"
            f"{'...' if (~ordered).sum() > 5 else ''})"
        )
    if (ordered & ~keep).any():
        problems.append(f"{source}: {int((ordered & ~keep).sum())} step(s) overlapping an earlier step were left out")
    steps = steps[keep].reset_index(drop=True)
    bounds = steps.set_index("step_num")
    of_kept = reduces["step_num"].isin(steps["step_num"]).to_numpy()
    step_start = reduces["step_num"].map(bounds["start"]).to_numpy(dtype=np.float64)
    step_end = reduces["step_num"].map(bounds["end"]).to_numpy(dtype=np.float64)
    inside = (
        (reduces["start"].to_numpy() >= step_start)
        & (reduces["start"].to_numpy() <= reduces["end"].to_numpy())
        & (reduces["end"].to_numpy() <= step_end)
    )
    stray = int((of_kept & ~inside).sum())
    if stray:
        problems.append(
            f"{source}: {stray} all-reduce interval(s) not inside their step (damaged records) were left out"
        )
    return steps, reduces[of_kept & inside].reset_index(drop=True), problems


def _overlapping(start, end, candidates) -> np.ndarray:
    """Per row: a candidate that starts before the end of an earlier kept candidate (rows in start order)."""
    out = np.zeros(len(start), dtype=bool)
    reach = -1
    for i in np.flatnonzero(candidates).tolist():  # steps: hundreds to thousands, one pass
        if start[i] < reach:
            out[i] = True
        else:
            reach = end[i]
    return out

"""Steps: where they come from when a run's data has none, which the statistics use, which are outliers.

A run whose data marks no step (`profiler.step()` never called, a Kineto trace without
ProfilerStep#N annotations, a graph-mode MindSpore CPU capture) gets its steps inferred from the
launch sequence: in a training loop every iteration launches the same ops (a graph's kernels, the
same phases and ops of a Python loop) in the same order, so the sequence of names on a lane (a
thread's phases, a host thread's or a device stream's ops) repeats once per iteration. Steps are
cut where that repeating unit begins; only when no lane repeats is the run one step (whole_run).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.analysis.step_trace import GAP_PHASES
from profiler.errors import ProfilerUsageWarning, ProfviewError
from profiler.importers.registry import importer_for
from profiler.kernels.intervals import assign_steps
from profiler.model import NATIVE_ORIGIN, STEP_COLUMNS, Run, RunInfo, data_origin, with_columns

#: Where a run's step boundaries come from (step_trace's step_source column).
MARKED, INFERRED, WHOLE_RUN = "marked", "inferred", "whole_run"

MIN_FULL_PERIODS = 2  # full repetitions between anchors needed to call a sequence periodic (3 anchors)
REGULAR_SHARE = 0.75  # a name is regular when it occurs the same number of times in this share of periods
MIN_REGULAR_LAUNCHES = 0.6  # share of a period's launches that must be of regular names for the period to count
MIN_REGULAR_FREQUENT = 0.6  # ... and share of its frequent names that must be regular
FREQUENT_SHARE = 0.25  # a name is frequent when it occurs in this share of the compared periods
CANDIDATE_COUNTS = 8  # occurrence counts tried as the number of iterations (the most common ones)
CANDIDATE_ANCHORS = 64  # names of one count compared for even spacing
EVALUATED_PERIODS = 200  # periods whose contents are compared (evenly spread over the run)
GAP_DOMINANCE = 2.0  # the idle gap before the boundary is at least this many times the next one ...
GAP_MIN_SHARE = 0.002  # ... and at least this share of the period's duration (and GAP_MIN_NS)
GAP_MIN_NS = 20_000
_NO_TIME = np.iinfo(np.int64).min

#: How a recording gets exact step boundaries (the end of the inference sentence); each importer
#: says it for its own captures (Importer.exact_steps).
NATIVE_EXACT_STEPS = "call profiler.step() at the end of each iteration for exact boundaries"


@dataclass(frozen=True)
class Lane:
    """One launch sequence, in start order: a host thread's phases, spans and ops (merged), a device
    stream's ops, or the ops of a host stream that is no known thread."""

    label: str  # "thread MainThread", "cuda:0 stream 7"
    kind: str  # phases (a thread with phases) | host | device | spans (a thread with spans only)
    codes: np.ndarray  # int32 name code per launch
    names: np.ndarray  # name of each code
    is_op: np.ndarray  # per code: an op name (else a phase / span name)
    is_phase: np.ndarray  # per code: a phase name
    role: np.ndarray  # per code: "" | "gap" | "forward" | "end" (names_role)
    start_ns: np.ndarray
    end_ns: np.ndarray
    tid: int = -1  # profview thread index, when the lane is a thread


@dataclass(frozen=True)
class Period:
    """A lane's repeating unit, found from a name that occurs once per repetition (the anchor)."""

    anchor: int  # code of the anchor name
    repetitions: int  # anchor occurrences
    launches: int  # median launches from one anchor to the next
    per_period: np.ndarray  # per code: occurrences per period (0: irregular)
    regular_share: float  # share of the compared periods' launches that are of regular names
    regular_frequent: float  # share of the frequent names (in FREQUENT_SHARE of the periods) that are regular

    @property
    def regular_names(self) -> int:
        return int((self.per_period > 0).sum())


@dataclass(frozen=True)
class Boundary:
    """The name that begins each iteration, and the rule that chose it."""

    code: int
    rule: str  # "after the optimizer step" | "forward" | "longest idle gap" | "sequence start"


@dataclass(frozen=True)
class StepInference:
    """Where a run's steps come from when its data marks none: report / profiler_info material."""

    source: str  # inferred | whole_run
    note: str  # one sentence for the report, the Overview and --summary
    lane: str = ""
    period: int = 0  # launches per iteration on the lane
    composition: str = ""  # what a period holds: "43 ops", "4 phases", "42 spans + 4208 ops"
    steps: int = 0
    boundary: str = ""  # the name each iteration begins with
    rule: str = ""
    partial_first: bool = False  # step 0 holds less than 90 % of a period's regular work
    partial_last: bool = False  # so does the last step
    reason: str = ""  # whole_run: why no period was found

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "note": self.note}
        if self.source == INFERRED:
            out.update(
                lane=self.lane,
                period=self.period,
                period_holds=self.composition,
                steps=self.steps,
                boundary=self.boundary,
                boundary_rule=self.rule,
                partial_first_step=self.partial_first,
                partial_last_step=self.partial_last,
            )
        else:
            out["reason"] = self.reason
        return out


# ----------------------------------------------------------------------------- the period of a sequence


def name_codes(column: pd.Series, dtype: type = np.int32) -> tuple[np.ndarray, np.ndarray]:
    """Codes (of `dtype`; a fresh array) and the names they stand for, for a (categorical or text)
    name column. int32, not int64: at 1e7 launches every full-length array is 40-80 MB of fresh
    memory, which is what this analysis spends its time on."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(dtype), column.cat.categories.to_numpy(dtype=object)
    codes, names = pd.factorize(column, sort=False)
    return codes.astype(dtype), np.asarray(names, dtype=object)


def candidate_counts(counts: np.ndarray) -> list[int]:
    """The occurrence counts most names share (ties: the larger count): a name that occurs once per
    iteration occurs once per repetition, so the commonest counts are the likely repetition counts."""
    seen = counts[counts >= MIN_FULL_PERIODS + 1]
    if not len(seen):
        return []
    values, names = np.unique(seen, return_counts=True)
    order = np.lexsort((-values, -names))
    return values[order][:CANDIDATE_COUNTS].tolist()


def evenest_anchors(codes: np.ndarray, counts: np.ndarray, tried: list[int]) -> list[tuple[int, np.ndarray]]:
    """For each count in `tried`, of the names occurring that many times (the first CANDIDATE_ANCHORS),
    the one whose occurrences are most evenly spaced in the sequence (the range of its index gaps
    over their median; the earliest first on ties), with its positions. One pass over the sequence
    finds the occurrences of every candidate name; a radix sort groups them by name."""
    names = [np.flatnonzero(counts == c)[:CANDIDATE_ANCHORS] for c in tried]
    every = np.concatenate(names)
    rank = np.full(len(counts), -1, dtype=np.int16)  # <= 8 x 64 names
    rank[every] = np.arange(len(every))
    of = rank[codes]
    at = np.flatnonzero(of >= 0)
    at = at[np.argsort(of[at], kind="stable")]  # grouped by name, positions ascending
    del of
    out, offset = [], 0
    for count, group in zip(tried, names):
        rows = at[offset : offset + len(group) * count].reshape(len(group), count)
        offset += len(group) * count
        gaps = np.diff(rows, axis=1)
        spread = (gaps.max(axis=1) - gaps.min(axis=1)) / np.maximum(np.median(gaps, axis=1), 1)
        best = int(np.lexsort((rows[:, 0], spread))[0])
        out.append((int(group[best]), rows[best]))
    return out


def sampled_periods(at: np.ndarray, limit: int = EVALUATED_PERIODS) -> tuple[np.ndarray, np.ndarray]:
    """The launches of at most `limit` full periods (from one anchor to the next), evenly spread over
    the sequence: their indices and each one's period number among the chosen (0..k-1)."""
    full = len(at) - 1
    chosen = np.unique(np.linspace(0, full - 1, max(min(full, limit), 1)).round().astype(np.int64))
    lengths = at[chosen + 1] - at[chosen]
    which = np.repeat(np.arange(len(chosen)), lengths)
    first = np.repeat(at[chosen] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(int(lengths.sum())) + first, which


def period_contents(codes: np.ndarray, n_codes: int, anchor: int, at: Optional[np.ndarray] = None) -> Optional[Period]:
    """The period the anchor's occurrences (positions `at`, found when not given) cut the sequence
    into, with the names that are regular in it (the same number of occurrences in REGULAR_SHARE of
    the full periods), or None when there are fewer than MIN_FULL_PERIODS full periods.

    At most EVALUATED_PERIODS full periods, evenly spread, are compared (a names x periods count
    table of bounded size), so the cost past finding the anchor is independent of the run's length.
    """
    at = np.flatnonzero(codes == anchor) if at is None else at
    if len(at) - 1 < MIN_FULL_PERIODS:
        return None
    limit = max(MIN_FULL_PERIODS, min(EVALUATED_PERIODS, 20_000_000 // max(n_codes, 1)))
    idx, which = sampled_periods(at, limit)
    shown = int(which[-1]) + 1
    table = np.bincount(codes[idx].astype(np.int64) * shown + which, minlength=n_codes * shown).reshape(n_codes, shown)
    typical = np.rint(np.median(table, axis=1)).astype(np.int64)
    agree = (table == typical[:, None]).sum(axis=1)
    regular = (typical >= 1) & (agree >= REGULAR_SHARE * shown)
    frequent = (table > 0).sum(axis=1) >= FREQUENT_SHARE * shown
    return Period(
        anchor=anchor,
        repetitions=len(at),
        launches=int(np.median(np.diff(at))),
        per_period=np.where(regular, typical, 0),
        regular_share=float(table[regular].sum()) / max(len(idx), 1),
        regular_frequent=float((regular & frequent).sum()) / max(int(frequent.sum()), 1),
    )


def find_period(
    codes: np.ndarray, n_codes: int, loop_names: Optional[np.ndarray] = None
) -> tuple[Optional[Period], str]:
    """The repeating unit of a name sequence, or None and why there is none.

    Each of the commonest occurrence counts proposes its most evenly spaced name as the anchor; a
    proposal is valid when at least MIN_REGULAR_LAUNCHES of its periods' launches are of regular
    names and at least MIN_REGULAR_FREQUENT of its frequent names are regular (stray launches of rare
    names between iterations are tolerated; half an iteration, with the other half's names every
    other period, is not), and at least two names are regular (one name repeating alone may run
    several times an iteration: it says nothing about iterations).

    Of the valid ones, those that make the most of the sequence's loop names regular (`loop_names`,
    per code: phases, the optimizer step, data fetches, the forward pass: `names_role`) win, then
    the shortest period: a period of several iterations (cut by a name logged every 10 steps) is
    regular too, but it is not the iteration. A period inside the iteration (identical layers) leaves
    the loop names, which run once an iteration, irregular; without loop names it cannot be told from
    an iteration with a name every few iterations, and the shortest period is taken.
    """
    counts = np.bincount(codes, minlength=n_codes)
    tried = candidate_counts(counts)
    if not tried:
        return None, f"no name occurs {MIN_FULL_PERIODS + 1} times or more"
    found = [
        p
        for p in (period_contents(codes, n_codes, anchor, at) for anchor, at in evenest_anchors(codes, counts, tried))
        if p is not None
    ]
    regular = [
        p for p in found if p.regular_share >= MIN_REGULAR_LAUNCHES and p.regular_frequent >= MIN_REGULAR_FREQUENT
    ]
    valid = [p for p in regular if p.regular_names >= 2]
    if not valid:
        if regular:
            return None, "only one name repeats regularly (it may run several times an iteration)"
        best = max(found, key=lambda p: min(p.regular_share, p.regular_frequent), default=None)
        share = min(best.regular_share, best.regular_frequent) if best is not None else 0.0
        return None, (
            f"no repeating unit: at best {100 * share:.0f} % of the launches (and of the frequent names) "
            f"are of names that occur the same number of times in each repetition"
        )
    loop = (np.zeros(n_codes, dtype=bool) if loop_names is None else np.asarray(loop_names, dtype=bool)) & (
        counts > MIN_FULL_PERIODS
    )
    return min(valid, key=lambda p: (-int((p.per_period[loop] > 0).sum()), -p.repetitions)), ""


# ----------------------------------------------------------------------------- where iterations begin


def work_reach(lane: Lane, period: Period) -> np.ndarray:
    """Per launch, the latest end of the regular work (regular names that are not gap names) launched
    up to and including it (_NO_TIME when none yet): `reach[i - 1]` is what ran before launch i."""
    work = ((period.per_period > 0) & (lane.role != "gap"))[lane.codes]
    return ends_reach(lane.end_ns, work)


def ends_reach(end_ns: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """Running maximum of the counted launches' ends (_NO_TIME before the first)."""
    ends = np.where(counted, end_ns, _NO_TIME)
    return np.maximum.accumulate(ends, out=ends)


def before(reach: np.ndarray, at: np.ndarray) -> np.ndarray:
    """reach just before each launch index in `at`."""
    return np.where(at > 0, reach[np.maximum(at - 1, 0)], _NO_TIME)


def names_role(names: np.ndarray, is_op: np.ndarray) -> np.ndarray:
    """What a phase / span name says about the loop ("" for ops and every other name):

    - "gap": waiting for data, the start of an iteration's gap (profview's `data` phase, torch's
      `enumerate(DataLoader)#...` annotation);
    - "forward": the forward pass begins (the `forward` phase, `## forward ##`,
      `DistributedDataParallel.forward`);
    - "end": the iteration's last work (the `optimizer` and `tail` phases, `## optimizer ##`,
      torch's `Optimizer.step#...` annotation): step() belongs right after it.
    """
    text = pd.Series(names, dtype=object).astype(str)
    word = text.str.strip("# ").str.lower()
    role = np.select(
        [
            word.isin(GAP_PHASES).to_numpy() | text.str.startswith("enumerate(DataLoader)#").to_numpy(),
            word.eq("forward").to_numpy() | text.eq("DistributedDataParallel.forward").to_numpy(),
            word.isin(("optimizer", "tail")).to_numpy() | text.str.startswith("Optimizer.step#").to_numpy(),
        ],
        ["gap", "forward", "end"],
        "",
    ).astype(object)
    return np.where(is_op, "", role)


def boundary_name(lane: Lane, period: Period, reach: np.ndarray) -> Boundary:
    """The name each iteration begins with, among the names that occur once per period, by the
    first rule that applies:

    1. after the iteration's last work ("end" names: the optimizer step): the first such name
       launched after it ends, so the cut falls right after the optimizer, where step() belongs;
    2. the forward pass ("forward" names): data fetches ("gap" names) before it are the new
       step's gap, since they are not counted as work;
    3. the one after the longest idle gap, when that gap stands out (GAP_DOMINANCE times the next
       longest and not negligible): an iteration begins after the data loading and host work
       between iterations (a graph's first kernel); the gap is measured from the end of the
       previous regular launch, over the periods period_contents compares;
    4. the first such name in the sequence: the repeating sequence's start.
    """
    role = lane.role
    once = period.per_period == 1
    candidates = once & ~np.isin(role, ("gap", "end"))
    candidates = candidates if candidates.any() else once & (role != "gap")
    candidates = candidates if candidates.any() else once
    is_candidate = candidates[lane.codes]
    end = (once & (role == "end"))[lane.codes]
    if end.any():
        inside = lane.start_ns < before(ends_reach(lane.end_ns, end), np.arange(len(end)))
        ok = np.flatnonzero(is_candidate & ~inside)
        following = np.searchsorted(ok, np.flatnonzero(end), side="right")
        following = ok[following[following < len(ok)]]
        if len(following):
            return Boundary(int(pd.Series(lane.codes[following]).mode().iloc[0]), "after the optimizer step")
    forward = np.flatnonzero(once & (role == "forward"))
    if len(forward):
        first = np.flatnonzero(np.isin(lane.codes, forward))[0]
        return Boundary(int(lane.codes[first]), "forward")
    anchors = np.flatnonzero(lane.codes == period.anchor)
    sample, _ = sampled_periods(anchors)
    sample = sample[is_candidate[sample]]
    previous = before(reach, sample)
    at, previous = sample[previous != _NO_TIME], previous[previous != _NO_TIME]
    idle = pd.Series(np.maximum(lane.start_ns[at] - previous, 0)).groupby(lane.codes[at]).median()
    idle = idle.sort_values(ascending=False, kind="stable")
    if len(idle):
        floor = max(GAP_MIN_NS, GAP_MIN_SHARE * float(np.median(np.diff(lane.start_ns[anchors]))))
        second = float(idle.iloc[1]) if len(idle) > 1 else 0.0
        if float(idle.iloc[0]) >= max(GAP_DOMINANCE * second, floor):
            return Boundary(int(idle.index[0]), "longest idle gap")
    first = np.flatnonzero(is_candidate)[0]
    return Boundary(int(lane.codes[first]), "sequence start")


def iteration_starts(lane: Lane, boundary: Boundary, reach: np.ndarray) -> tuple[np.ndarray, bool]:
    """Where each iteration begins (ns), and whether regular work ran before the first one (the
    capture began inside an iteration, or the boundary is not the loop body's first launch).

    An iteration begins at the end of the previous iteration's last regular launch (not at its own
    first launch), so what runs between iterations (data loading, logging) is the new step's
    iteration gap, as it is for a step() at the end of the loop body. Occurrences of the boundary
    name closer than half the usual spacing to the previous one are not iterations (a stray launch).
    """
    at = np.flatnonzero(lane.codes == boundary.code)
    spacing = np.diff(at)
    if len(spacing):
        at = at[np.concatenate([[True], spacing >= 0.5 * np.median(spacing)])]
    previous = before(reach, at)
    starts = lane.start_ns[at]
    cut = np.where(previous == _NO_TIME, starts, np.minimum(previous, starts))
    return cut, bool(previous[0] != _NO_TIME)


def partial_edges(lane: Lane, period: Period, starts: np.ndarray) -> tuple[bool, bool]:
    """Whether the first / last of the steps beginning at `starts` holds less than 90 % of the
    regular work of a period (a capture that began or ended inside an iteration)."""
    work = ((period.per_period > 0) & (lane.role != "gap"))[lane.codes]
    at = np.searchsorted(lane.start_ns[work], starts, side="left")  # the lane is in start order
    per_step = np.diff(np.append(at, int(work.sum())))
    full = float(period.per_period[lane.role != "gap"].sum())
    return bool(per_step[0] < 0.9 * full), bool(len(starts) > 1 and per_step[-1] < 0.9 * full)


def period_composition(lane: Lane, period: Period) -> str:
    """What one period holds on average, for sentences: "43 ops", "4 phases", "3 phases + 5 ops"."""
    at = np.flatnonzero(lane.codes == period.anchor)
    inside = np.bincount(lane.codes[at[0] : at[-1]], minlength=len(lane.names))
    phases, ops = int(inside[lane.is_phase].sum()), int(inside[lane.is_op].sum())
    counts = {"phases": phases, "spans": int(inside.sum()) - phases - ops, "ops": ops}
    parts = [f"{round(n / (len(at) - 1))} {what}" for what, n in counts.items() if round(n / (len(at) - 1))]
    return " + ".join(parts) or f"{period.launches} launches"


# ----------------------------------------------------------------------------- lanes of a run


def launch_lanes(run: Run) -> Iterator[Lane]:
    """The run's launch sequences, best first, built one at a time when asked for:

    1. threads with phases (the loop the user marked), with their spans and ops merged in;
    2. host threads with ops (with their spans: torch's annotations), the thread that launched
       first first (the loop's thread, not a worker that started later), then host streams that
       are no known thread;
    3. device streams, busiest first;
    4. threads with spans only.

    Per-lane figures come from the small (device, stream) codes in one pass over the ops.
    """
    spans, ops = run.spans, run.ops
    thread = _thread_names(run.threads)
    tid_of = {name: tid for tid, name in thread.items()}
    s_tid = spans["tid"].to_numpy(np.int64)
    s_start, s_dur = spans["start_ns"].to_numpy(np.int64), spans["dur_ns"].to_numpy(np.int64)
    s_codes, s_names = name_codes(spans["name"])
    s_phase = (spans["kind"] == "phase").to_numpy()
    o_start, o_dur = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    o_codes, o_names = name_codes(ops["name"])
    o_codes += len(s_names)  # one code space: span names, then op names
    device, devices = name_codes(ops["device"])
    stream, streams = name_codes(ops["stream"])
    width = max(len(streams), 1)
    o_lane = device
    o_lane *= width
    o_lane += stream  # (device, stream) of each op, in place
    del device, stream
    n_lanes = len(devices) * width
    size = np.bincount(o_lane, minlength=n_lanes)
    first_op = np.full(n_lanes, np.iinfo(np.int64).max)
    np.minimum.at(first_op, o_lane, o_start)
    present = np.flatnonzero(size)
    lane_host = np.array([str(devices[k // width]) == "cpu" for k in present], dtype=bool)
    lane_tid = np.array(
        [tid_of.get(str(streams[k % width]), -1) if h else -1 for k, h in zip(present, lane_host)], dtype=np.int64
    )
    names = np.concatenate([s_names, o_names])
    is_op = np.concatenate([np.zeros(len(s_names), dtype=bool), np.ones(len(o_names), dtype=bool)])
    is_phase = np.zeros(len(names), dtype=bool)
    is_phase[s_codes[s_phase]] = True
    role = names_role(names, is_op)

    def merged(label: str, kind: str, span_rows: np.ndarray, lanes: np.ndarray, tid: int) -> Lane:
        wanted = np.zeros(n_lanes, dtype=bool)
        wanted[lanes] = True
        if int(size[lanes].sum()) == len(o_lane):  # every op: no copy
            codes, start, dur = o_codes, o_start, o_dur
        else:
            op_rows = np.flatnonzero(wanted[o_lane])  # a lookup: np.isin would sort the column
            codes, start, dur = o_codes[op_rows], o_start[op_rows], o_dur[op_rows]
        if len(span_rows):
            codes = np.concatenate([s_codes[span_rows], codes])
            start = np.concatenate([s_start[span_rows], start])
            dur = np.concatenate([s_dur[span_rows], dur])
        if len(start) > 1 and bool((np.diff(start) < 0).any()):
            order = np.argsort(start, kind="stable")  # spans first on ties: they enclose
            codes, start, dur = codes[order], start[order], dur[order]
        return Lane(label, kind, codes, names, is_op, is_phase, role, start, start + dur, tid)

    first = pd.concat(
        [
            pd.Series(s_start).groupby(s_tid).min(),
            pd.Series(first_op[present][lane_tid >= 0], index=lane_tid[lane_tid >= 0]),
        ]
    )
    first = first.groupby(level=0).min().sort_values(kind="stable")
    with_phases = set(np.unique(s_tid[s_phase]).tolist())
    with_ops = set(lane_tid[lane_tid >= 0].tolist())
    order = [t for t in first.index if t in with_phases] + [t for t in first.index if t in with_ops - with_phases]
    for tid in order:
        yield merged(
            _thread_label(thread.get(tid, str(tid))),
            "phases" if tid in with_phases else "host",
            np.flatnonzero(s_tid == tid),
            present[lane_tid == tid],
            tid,
        )
    others = pd.DataFrame({"lane": present, "host": lane_host, "first": first_op[present], "size": size[present]})
    others = others[others["lane"].isin(present[lane_tid < 0])]
    for kind, rows in (
        ("host", others[others["host"]].sort_values("first", kind="stable")),
        ("device", others[~others["host"]].sort_values(["size", "first"], ascending=[False, True], kind="stable")),
    ):
        for key in rows["lane"].tolist():
            dev, name = devices[key // width], streams[key % width]
            label = f"{dev} thread {name}" if kind == "host" else f"{dev} stream {name}"
            yield merged(label, kind, np.empty(0, dtype=np.int64), np.array([key]), -1)
    for tid in first.index:
        if tid not in with_phases and tid not in with_ops:
            yield merged(
                _thread_label(thread.get(tid, str(tid))),
                "spans",
                np.flatnonzero(s_tid == tid),
                np.empty(0, dtype=np.int64),
                tid,
            )


def _thread_label(name: str) -> str:
    return name if name.startswith("thread") else f"thread {name}"


def _thread_names(threads: pd.DataFrame) -> dict[int, str]:
    return dict(zip(threads["tid"].astype(np.int64).tolist(), threads["name"].astype(str).tolist()))


# ----------------------------------------------------------------------------- steps of a run


def capture_extent(run: Run) -> Optional[tuple[int, int]]:
    """The first and last time of anything recorded (span / op starts and ends, instants), or None."""
    times = [
        run.spans["start_ns"],
        run.spans["start_ns"] + run.spans["dur_ns"],
        run.ops["start_ns"],
        run.ops["start_ns"] + run.ops["dur_ns"],
        run.instants["time_ns"],
    ]
    present = [np.asarray(t, dtype=np.int64) for t in times if len(t)]
    if not present:
        return None
    return int(min(t.min() for t in present)), int(max(t.max() for t in present))


def steps_from_starts(starts: np.ndarray, end_ns: int) -> pd.DataFrame:
    """Steps 0..n-1 from their start times (ascending); each ends where the next begins, the last at `end_ns`."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.append(starts[1:], end_ns)
    return pd.DataFrame(
        {
            "step": np.arange(len(starts), dtype=np.int64),
            "start_ns": starts,
            "end_ns": ends,
            "fp_start_ns": -1,
            "bp_end_ns": -1,
            "overhead_ns": 0,
        }
    )[list(STEP_COLUMNS)]


def infer_steps(run: Run, extent: tuple[int, int]) -> tuple[Optional[pd.DataFrame], StepInference, Optional[Lane]]:
    """Steps cut where the first periodic lane's iterations begin (`launch_lanes` order), or None
    and why no lane repeats.

    Steps tile the capture: step 0 begins at its start. When regular work ran before the first
    iteration began (the capture began inside an iteration), that is a step of its own (the partial
    step 0, `partial_first`); setup without regular work is step 0's iteration gap. The last step
    ends at the capture's end.
    """
    reasons = []
    for lane in launch_lanes(run):
        period, why = find_period(lane.codes, len(lane.names), lane.role != "")
        if period is None:
            reasons.append(f"{lane.label}: {why}")
            continue
        reach = work_reach(lane, period)
        boundary = boundary_name(lane, period, reach)
        cuts, work_before = iteration_starts(lane, boundary, reach)
        del reach
        cuts = cuts if work_before else cuts[1:]
        starts = np.concatenate([[extent[0]], np.unique(cuts[(cuts > extent[0]) & (cuts < extent[1])])])
        if len(starts) < 2:
            reasons.append(f"{lane.label}: its iterations do not begin inside the capture")
            continue
        first, last = partial_edges(lane, period, starts)
        inference = StepInference(
            INFERRED,
            "",
            lane=lane.label,
            period=period.launches,
            steps=len(starts),
            composition=period_composition(lane, period),
            boundary=str(lane.names[boundary.code]),
            rule=boundary.rule,
            partial_first=first,
            partial_last=last,
        )
        return steps_from_starts(starts, extent[1]), inference_with_note(inference, run.info), lane
    more = f" (and {len(reasons) - 1} other lane(s) without a period)" if len(reasons) > 1 else ""
    return None, StepInference(WHOLE_RUN, "", reason=(reasons[0] + more) if reasons else "nothing was launched"), None


def inference_with_note(inference: StepInference, info: RunInfo) -> StepInference:
    """The inference with its sentence (the report's and the viewer's)."""
    advice = exact_steps_advice(info)
    if inference.source == WHOLE_RUN:
        note = f"one step spans the whole capture ({inference.reason}); {advice}"
    else:
        what = (
            "op launch sequence"
            if inference.composition.endswith(" ops") and "+" not in inference.composition
            else "launch sequence"
        )
        edges = [e for e, on in (("first", inference.partial_first), ("last", inference.partial_last)) if on]
        partial = f", the {' and '.join(edges)} one{'s' if len(edges) > 1 else ''} partial" if edges else ""
        note = (
            f"steps inferred from the {what} ({inference.lane}): period {inference.composition}, "
            f"{inference.steps} steps{partial}; {advice}"
        )
    return StepInference(**{**inference.__dict__, "note": note})


def exact_steps_advice(info: RunInfo) -> str:
    """How the run's kind of capture gets exact step boundaries: its importer's advice, else a recording's."""
    importer = importer_for(data_origin(info))
    return importer.exact_steps if importer is not None else NATIVE_EXACT_STEPS


def step_source(info: Mapping[str, Any]) -> tuple[str, str]:
    """(step_source, sentence) of a run: `marked` and "" unless ensure_steps inferred its steps."""
    found = info.get("step_boundaries")
    if isinstance(found, Mapping) and found.get("source") in (INFERRED, WHOLE_RUN):
        return str(found["source"]), str(found.get("note", ""))
    return MARKED, ""


def ensure_steps(run: Run) -> Run:
    """A run without any step gets steps inferred from its launch sequence (`infer_steps`), or, when
    nothing repeats, one step spanning the recording; either way with a warning, and
    `info["step_boundaries"]` saying which and why."""
    if len(run.steps):
        return run
    extent = capture_extent(run)
    if extent is None:
        raise ProfviewError(
            "nothing was recorded: no step, span or op (call profiler.step() at the end of "
            "each iteration and mark phases with profiler.phase())"
        )
    origin = data_origin(run.info)
    steps, inference, lane = infer_steps(run, extent)
    if steps is None:
        inference = inference_with_note(inference, run.info)
        steps = steps_from_starts(np.array([extent[0]]), extent[1])
        if origin == NATIVE_ORIGIN:
            message = (
                f"no profiler.step() call was recorded: the whole recording is analysed as one step "
                f"(no repeating launch sequence to infer steps from: {inference.reason}; call "
                f"profiler.step() at the end of each iteration for a per-step breakdown)"
            )
        else:
            message = (
                f"the {origin} capture has no step markers: it is analysed as one step spanning the "
                f"whole capture (no repeating launch sequence to infer steps from: {inference.reason})"
            )
    else:
        lead = (
            "no profiler.step() call was recorded"
            if origin == NATIVE_ORIGIN
            else f"the {origin} capture has no step markers"
        )
        message = f"{lead}: {inference.note}"
        if origin == NATIVE_ORIGIN and lane is not None and lane.tid >= 0 and int(run.info.get("step_tid", -1)) < 0:
            run.info["step_tid"] = lane.tid  # the loop's thread, as a step() call would have named it
    warnings.warn(message, ProfilerUsageWarning, stacklevel=3)
    run.info.setdefault("warnings", []).append(message)
    run.info["step_boundaries"] = inference.to_json()
    run.steps = steps
    run.ops = with_columns(run.ops, step=assign_steps(run.ops["start_ns"].to_numpy(), run.steps))
    return run


def analysed_steps(steps: pd.DataFrame, warmup: int) -> tuple[pd.DataFrame, int]:
    """The steps the statistics use: without the first `warmup` ones when at least 3 steps remain."""
    warmup = max(int(warmup), 0)
    if len(steps) - warmup < 3:
        return steps, 0
    return steps.iloc[warmup:], warmup


def median_position(values: np.ndarray) -> int:
    """Where the median is: the position of the lower middle of `values` (earliest on ties), so the
    median step is a step that ran (the Timeline draws it) and every page shows the same median."""
    return int(np.argsort(np.asarray(values), kind="stable")[(len(values) - 1) // 2])


def median_of(values: np.ndarray) -> float:
    """The median as every page shows it: the lower middle (`median_position`)."""
    values = np.asarray(values, dtype=np.float64)
    return float(values[median_position(values)])


def outlier_steps(steps: pd.DataFrame, min_pct: float) -> pd.DataFrame:
    """Steps above both Tukey's fence (Q3 + 1.5 IQR) and the median + `min_pct` %, by the time they
    spent not waiting for data: a step that is slow because it waited (a loader delivering in bursts)
    is the input pipeline's, so it stays among the steady steps whose figures the input rule's match."""
    own = steps["total_ms"].to_numpy(dtype=np.float64)
    if "data_wait_ms" in steps:
        own = own - steps["data_wait_ms"].fillna(0.0).to_numpy(dtype=np.float64)
    q1, median, q3 = np.percentile(own, [25, 50, 75])
    fence = max(q3 + 1.5 * (q3 - q1), median * (1 + min_pct / 100.0))
    return steps[own > fence]


def outlier_rule_text(min_pct: float) -> str:
    """The outlier rule in words, for every place that shows outlier steps."""
    return f"> median + {min_pct:g} % and Q3 + 1.5 IQR, without the data wait"

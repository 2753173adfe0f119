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
from typing import Any, NamedTuple, Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.step_trace import GAP_PHASES
from profiler.errors import ProfilerUsageWarning, ProfviewError
from profiler.importers.registry import importer_for
from profiler.kernels.grouping import code_counts, codes_and_labels
from profiler.kernels.intervals import assign_steps, in_order
from profiler.kernels.nesting import counting_order, positions_passing, positions_where
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
    codes: np.ndarray  # int32 name code per launch (the three arrays per launch: spilled when big)
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


def occurrences(codes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The positions (ascending; `positions_passing`: spilled when many) of the launches whose code is `wanted`
    (a bool per code)."""
    return positions_passing(len(codes), lambda at: wanted[codes[at]])


def first_occurrence(codes: np.ndarray, wanted: np.ndarray) -> int:
    """The position of the first launch whose code is `wanted` (a bool per code); IndexError when there is none."""
    for at in spill.chunks(len(codes)):
        hits = np.flatnonzero(wanted[codes[at]])
        if len(hits):
            return at.start + int(hits[0])
    raise IndexError("no launch of the wanted names")


def code_is(n_codes: int, code: int) -> np.ndarray:
    """A bool per code, true for `code` alone."""
    return np.arange(n_codes) == code


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
    finds the occurrences of every candidate name (spilled when many); a counting sort groups them by name."""
    names = [np.flatnonzero(counts == c)[:CANDIDATE_ANCHORS] for c in tried]
    every = np.concatenate(names)
    rank = np.full(len(counts), -1, dtype=np.int16)  # <= 8 x 64 names
    rank[every] = np.arange(len(every))
    at = occurrences(codes, rank >= 0)
    order, bounds = counting_order(
        spill.chunked(len(at), np.int16, lambda c: rank[codes[at[c]]], along=at), 0, len(every)
    )

    def positions(k: int) -> np.ndarray:  # of the name ranked k
        return at[order[bounds[k] : bounds[k + 1]]].astype(np.int64)

    out, offset = [], 0
    for group in names:
        ranks = range(offset, offset + len(group))
        offset += len(group)
        spread = np.array([gaps_spread(np.diff(positions(k))) for k in ranks])
        best = int(np.lexsort((np.array([at[order[bounds[k]]] for k in ranks]), spread))[0])
        out.append((int(group[best]), positions(ranks[best])))
    return out


def gaps_spread(gaps: np.ndarray) -> float:
    """How unevenly a name's occurrences are spaced: the range of its index gaps over their median."""
    return (gaps.max() - gaps.min()) / np.maximum(np.median(gaps), 1)


def sampled_periods(at: np.ndarray, limit: int = EVALUATED_PERIODS) -> tuple[np.ndarray, np.ndarray]:
    """At most `limit` full periods (from one anchor to the next), evenly spread over the sequence: where each
    begins and ends (the next anchor's position)."""
    full = len(at) - 1
    chosen = np.unique(np.linspace(0, full - 1, max(min(full, limit), 1)).round().astype(np.int64))
    return at[chosen], at[chosen + 1]


def sampled_launches(codes: np.ndarray, periods: tuple[np.ndarray, np.ndarray], wanted: np.ndarray) -> np.ndarray:
    """The positions (ascending, int64) of the launches of `wanted` codes (a bool per code) in the sampled
    `periods` (`sampled_periods`)."""
    found = [lo + occurrences(codes[lo:hi], wanted).astype(np.int64) for lo, hi in zip(*periods)]
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def period_contents(codes: np.ndarray, n_codes: int, anchor: int, at: Optional[np.ndarray] = None) -> Optional[Period]:
    """The period the anchor's occurrences (positions `at`, found when not given) cut the sequence
    into, with the names that are regular in it (the same number of occurrences in REGULAR_SHARE of
    the full periods), or None when there are fewer than MIN_FULL_PERIODS full periods.

    At most EVALUATED_PERIODS full periods, evenly spread, are compared (a names x periods count
    table of bounded size), so the cost past finding the anchor is independent of the run's length.
    """
    at = occurrences(codes, code_is(n_codes, anchor)) if at is None else at
    if len(at) - 1 < MIN_FULL_PERIODS:
        return None
    limit = max(MIN_FULL_PERIODS, min(EVALUATED_PERIODS, 20_000_000 // max(n_codes, 1)))
    first, stop = sampled_periods(at, limit)
    table = np.empty((n_codes, len(first)), dtype=np.int64)  # names x periods
    for k, (lo, hi) in enumerate(zip(first.tolist(), stop.tolist())):
        table[:, k] = code_counts(codes[lo:hi], n_codes)[1:]
    shown = len(first)
    typical = np.rint(np.median(table, axis=1)).astype(np.int64)
    agree = (table == typical[:, None]).sum(axis=1)
    regular = (typical >= 1) & (agree >= REGULAR_SHARE * shown)
    frequent = (table > 0).sum(axis=1) >= FREQUENT_SHARE * shown
    launches = int((stop - first).sum())
    return Period(
        anchor=anchor,
        repetitions=len(at),
        launches=int(np.median(np.diff(at))),
        per_period=np.where(regular, typical, 0),
        regular_share=float(table[regular].sum()) / max(launches, 1),
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
    counts = code_counts(codes, n_codes)[1:]
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


@dataclass(frozen=True)
class Reach:
    """The latest end of the counted launches (`counted`: a bool per code) launched before each launch of a lane
    (_NO_TIME before the first), read a chunk at a time in order: the running maximum is carried from chunk to
    chunk, never kept for the whole lane."""

    codes: np.ndarray
    end_ns: np.ndarray
    counted: np.ndarray

    def chunks(self) -> Iterator[tuple[slice, np.ndarray]]:
        """Each chunk of the lane's positions, in order, with the reach just before each of its launches."""
        carry = _NO_TIME
        for at in spill.chunks(len(self.codes)):
            ends = np.concatenate([[carry], np.where(self.counted[self.codes[at]], self.end_ns[at], _NO_TIME)])
            np.maximum.accumulate(ends, out=ends)
            carry = ends[-1]
            yield at, ends[:-1]
            spill.drop_resident()

    def before(self, at: np.ndarray) -> np.ndarray:
        """The reach just before each launch position in `at` (ascending)."""
        out = np.full(len(at), _NO_TIME, dtype=np.int64)
        for rows, reach in self.chunks():
            if not len(at) or rows.start > at[-1]:
                break
            lo, hi = np.searchsorted(at, [rows.start, rows.stop])
            out[lo:hi] = reach[at[lo:hi] - rows.start]
        return out


def work_reach(lane: Lane, period: Period) -> Reach:
    """The latest end of the regular work (regular names that are not gap names) launched before each launch."""
    return Reach(lane.codes, lane.end_ns, (period.per_period > 0) & (lane.role != "gap"))


def launches_outside(lane: Lane, reach: Reach, wanted: np.ndarray) -> np.ndarray:
    """The positions of the launches of `wanted` codes (a bool per code) that start at or after the reach
    before them (not inside the counted launches before them), found a chunk at a time."""
    outside = spill.empty(len(lane.codes), bool)
    for at, before in reach.chunks():
        outside[at] = wanted[lane.codes[at]] & (lane.start_ns[at] >= before)
    return positions_where(outside)


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


def boundary_name(lane: Lane, period: Period, reach: Reach) -> Boundary:
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
    end = once & (role == "end")
    if end.any():  # a name once per period occurs in the lane
        ok = launches_outside(lane, Reach(lane.codes, lane.end_ns, end), candidates)
        following = np.searchsorted(ok, occurrences(lane.codes, end), side="right")
        following = ok[following[following < len(ok)]]
        if len(following):
            return Boundary(int(pd.Series(lane.codes[following]).mode().iloc[0]), "after the optimizer step")
    forward = once & (role == "forward")
    if forward.any():
        first = first_occurrence(lane.codes, forward)
        return Boundary(int(lane.codes[first]), "forward")
    anchors = occurrences(lane.codes, code_is(len(lane.names), period.anchor))
    sample = sampled_launches(lane.codes, sampled_periods(anchors), candidates)
    previous = reach.before(sample)
    at, previous = sample[previous != _NO_TIME], previous[previous != _NO_TIME]
    idle = pd.Series(np.maximum(lane.start_ns[at] - previous, 0)).groupby(lane.codes[at]).median()
    idle = idle.sort_values(ascending=False, kind="stable")
    if len(idle):
        floor = max(GAP_MIN_NS, GAP_MIN_SHARE * float(np.median(np.diff(lane.start_ns[anchors]))))
        second = float(idle.iloc[1]) if len(idle) > 1 else 0.0
        if float(idle.iloc[0]) >= max(GAP_DOMINANCE * second, floor):
            return Boundary(int(idle.index[0]), "longest idle gap")
    first = first_occurrence(lane.codes, candidates)
    return Boundary(int(lane.codes[first]), "sequence start")


def iteration_starts(lane: Lane, boundary: Boundary, reach: Reach) -> tuple[np.ndarray, bool]:
    """Where each iteration begins (ns), and whether regular work ran before the first one (the
    capture began inside an iteration, or the boundary is not the loop body's first launch).

    An iteration begins at the end of the previous iteration's last regular launch (not at its own
    first launch), so what runs between iterations (data loading, logging) is the new step's
    iteration gap, as it is for a step() at the end of the loop body. Occurrences of the boundary
    name closer than half the usual spacing to the previous one are not iterations (a stray launch).
    """
    at = occurrences(lane.codes, code_is(len(lane.names), boundary.code))
    spacing = np.diff(at)
    if len(spacing):
        at = at[np.concatenate([[True], spacing >= 0.5 * np.median(spacing)])]
    previous = reach.before(at)
    starts = lane.start_ns[at]
    cut = np.where(previous == _NO_TIME, starts, np.minimum(previous, starts))
    return cut, bool(previous[0] != _NO_TIME)


def partial_edges(lane: Lane, period: Period, starts: np.ndarray) -> tuple[bool, bool]:
    """Whether the first / last of the steps beginning at `starts` holds less than 90 % of the
    regular work of a period (a capture that began or ended inside an iteration)."""
    work = (period.per_period > 0) & (lane.role != "gap")
    at, total = np.zeros(len(starts), dtype=np.int64), 0
    for rows in spill.chunks(len(lane.codes)):  # the lane is in start order: so is each chunk's work
        started = lane.start_ns[rows][work[lane.codes[rows]]]
        at += np.searchsorted(started, starts, side="left")
        total += len(started)
    per_step = np.diff(np.append(at, total))
    full = float(period.per_period[lane.role != "gap"].sum())
    return bool(per_step[0] < 0.9 * full), bool(len(starts) > 1 and per_step[-1] < 0.9 * full)


def period_composition(lane: Lane, period: Period) -> str:
    """What one period holds on average, for sentences: "43 ops", "4 phases", "3 phases + 5 ops"."""
    at = occurrences(lane.codes, code_is(len(lane.names), period.anchor))
    inside = code_counts(lane.codes[int(at[0]) : int(at[-1])], len(lane.names))[1:]
    phases, ops = int(inside[lane.is_phase].sum()), int(inside[lane.is_op].sum())
    counts = {"phases": phases, "spans": int(inside.sum()) - phases - ops, "ops": ops}
    parts = [f"{round(n / (len(at) - 1))} {what}" for what, n in counts.items() if round(n / (len(at) - 1))]
    return " + ".join(parts) or f"{period.launches} launches"


# ----------------------------------------------------------------------------- lanes of a run


class Sequence(NamedTuple):
    """Launches in start order: their codes (int32), starts and ends (spilled when big)."""

    codes: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray


@dataclass(frozen=True)
class Launches:
    """A table's launches as the lanes read them: its name codes (a categorical's own: a view) shifted by `offset`
    into the lanes' code space, its starts and durations."""

    codes: np.ndarray
    offset: int
    start_ns: np.ndarray
    dur_ns: np.ndarray

    @classmethod
    def of(cls, table: pd.DataFrame, offset: int = 0) -> tuple[Launches, np.ndarray]:
        """The launches of a span or op table, and the names its codes stand for."""
        codes, names = codes_and_labels(table["name"])
        return cls(codes, offset, table["start_ns"].to_numpy(np.int64), table["dur_ns"].to_numpy(np.int64)), names

    def code(self, rows: slice | np.ndarray) -> np.ndarray:
        """The lane codes (int32) of the launches at `rows`."""
        codes = self.codes[rows].astype(np.int32)
        codes += self.offset
        return codes

    def in_start_order(self, rows: Optional[np.ndarray] = None) -> Sequence:
        """The launches at `rows` (every one when None), stably ordered by start, made a chunk at a time (spilled
        when big). Sorted whole only when they are not in start order (a Kineto op table is)."""
        start = self.start_ns if rows is None else spill.gathered(self.start_ns, rows)
        if not in_order(start):
            order = np.argsort(start, kind="stable")
            rows = order if rows is None else rows[order]
            start = spill.gathered(self.start_ns, rows)
        source = (lambda at: at) if rows is None else (lambda at: rows[at])
        codes = spill.chunked(len(start), np.int32, lambda at: self.code(source(at)), along=rows)
        end = spill.chunked(len(start), np.int64, lambda at: start[at] + self.dur_ns[source(at)], along=rows)
        return Sequence(codes, start, end)


def merged(first: Sequence, second: Sequence) -> Sequence:
    """Two start-ordered sequences as one in start order, `first`'s launches before `second`'s on equal starts
    (what a stable sort of their concatenation gives): each launch placed at its own index plus the number of the
    other sequence's launches before it, a chunk at a time into spill files when big."""
    if not len(first.start_ns) or not len(second.start_ns):
        return second if not len(first.start_ns) else first
    n = len(first.start_ns) + len(second.start_ns)
    out = Sequence(spill.empty(n, np.int32), spill.empty(n, np.int64), spill.empty(n, np.int64))
    for own, other, ties in ((first, second, "left"), (second, first, "right")):
        for at in spill.chunks(len(own.start_ns)):
            to = np.arange(at.start, at.stop) + np.searchsorted(other.start_ns, own.start_ns[at], side=ties)
            for column, values in zip(out, own):
                column[to] = values[at]
            spill.drop_resident()
    return out


@dataclass(frozen=True)
class OpLanes:
    """Each op's (device, stream) as one lane number, device code x width + stream code, read a chunk at a time."""

    device: np.ndarray  # codes (a categorical's own: a view)
    stream: np.ndarray
    devices: np.ndarray  # what the codes stand for
    streams: np.ndarray

    @classmethod
    def of(cls, ops: pd.DataFrame) -> OpLanes:
        (device, devices), (stream, streams) = codes_and_labels(ops["device"]), codes_and_labels(ops["stream"])
        return cls(device, stream, devices, streams)

    @property
    def width(self) -> int:
        return max(len(self.streams), 1)

    @property
    def count(self) -> int:
        return len(self.devices) * self.width

    def lane(self, rows: slice | np.ndarray) -> np.ndarray:
        """The lane numbers (int32) of the ops at `rows`."""
        lane = self.device[rows].astype(np.int32)
        lane *= self.width
        lane += self.stream[rows]
        return lane

    def figures(self, start_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per lane number: its ops, and the first one's start (int64 max when none), a chunk of ops at a time."""
        size, first = np.zeros(self.count, dtype=np.int64), np.full(self.count, np.iinfo(np.int64).max)
        for at in spill.chunks(len(start_ns)):
            lane = self.lane(at)
            size += np.bincount(lane, minlength=self.count)
            np.minimum.at(first, lane, start_ns[at])
        return size, first

    def rows_on(self, lanes: np.ndarray) -> np.ndarray:
        """The positions of the ops on `lanes` (lane numbers), found a chunk at a time (spilled when many)."""
        wanted = np.zeros(self.count, dtype=bool)
        wanted[lanes] = True  # a lookup: np.isin would sort the column
        return positions_passing(len(self.device), lambda at: wanted[self.lane(at)])


def launch_lanes(run: Run) -> Iterator[Lane]:
    """The run's launch sequences, best first, built one at a time when asked for:

    1. threads with phases (the loop the user marked), with their spans and ops merged in;
    2. host threads with ops (with their spans: torch's annotations), the thread that launched
       first first (the loop's thread, not a worker that started later), then host streams that
       are no known thread;
    3. device streams, busiest first;
    4. threads with spans only.

    Per-lane figures come from the small (device, stream) codes in one pass over the ops, a chunk at a time;
    a lane's arrays are made a chunk at a time into spill files (`Launches.in_start_order`, `merged`).
    """
    spans, ops = run.spans, run.ops
    thread = _thread_names(run.threads)
    tid_of = {name: tid for tid, name in thread.items()}
    s_tid = spans["tid"].to_numpy(np.int64)
    span_launches, s_names = Launches.of(spans)
    s_start = span_launches.start_ns
    s_phase = (spans["kind"] == "phase").to_numpy()
    op_launches, o_names = Launches.of(ops, len(s_names))  # one code space: span names, then op names
    op_lanes = OpLanes.of(ops)
    devices, streams, width = op_lanes.devices, op_lanes.streams, op_lanes.width
    size, first_op = op_lanes.figures(op_launches.start_ns)
    present = np.flatnonzero(size)
    lane_host = np.array([str(devices[k // width]) == "cpu" for k in present], dtype=bool)
    lane_tid = np.array(
        [tid_of.get(str(streams[k % width]), -1) if h else -1 for k, h in zip(present, lane_host)], dtype=np.int64
    )
    names = np.concatenate([s_names, o_names])
    is_op = np.concatenate([np.zeros(len(s_names), dtype=bool), np.ones(len(o_names), dtype=bool)])
    is_phase = np.zeros(len(names), dtype=bool)
    is_phase[span_launches.code(s_phase)] = True
    role = names_role(names, is_op)

    def lane(label: str, kind: str, span_rows: np.ndarray, lanes: np.ndarray, tid: int) -> Lane:
        every_op = int(size[lanes].sum()) == len(ops)  # no gathering
        launches = merged(
            span_launches.in_start_order(span_rows),  # spans first on ties: they enclose
            op_launches.in_start_order(None if every_op else op_lanes.rows_on(lanes)),
        )
        return Lane(label, kind, launches.codes, names, is_op, is_phase, role, launches.start_ns, launches.end_ns, tid)

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
        yield lane(
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
            yield lane(label, kind, np.empty(0, dtype=np.int64), np.array([key]), -1)
    for tid in first.index:
        if tid not in with_phases and tid not in with_ops:
            yield lane(
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
    extents = [
        time_extent(table["start_ns"].to_numpy(np.int64), table["dur_ns"].to_numpy(np.int64))
        for table in (run.spans, run.ops)
    ]
    present = [e for e in extents + [time_extent(run.instants["time_ns"].to_numpy(np.int64))] if e is not None]
    if not present:
        return None
    return min(e[0] for e in present), max(e[1] for e in present)


def time_extent(start_ns: np.ndarray, dur_ns: Optional[np.ndarray] = None) -> Optional[tuple[int, int]]:
    """The earliest and latest of the starts and of the ends (start + dur, when given), a chunk at a time; None when
    there is none."""
    if not len(start_ns):
        return None
    low, high = [], []
    for at in spill.chunks(len(start_ns)):
        times = [start_ns[at]] if dur_ns is None else [start_ns[at], start_ns[at] + dur_ns[at]]
        low.append(min(int(t.min()) for t in times))
        high.append(max(int(t.max()) for t in times))
    return min(low), max(high)


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

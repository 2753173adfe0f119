"""Nesting of spans on a lane, from begin / end events (the raw store) or from complete intervals
(a Kineto trace): matching, nesting level, parent and self time.

`nest_events` pairs the span events of a recording straight from its events chunks with the C
kernel (`_nesting.c`, two linear passes, no per-event array) when it is built, else with the
vectorised numpy reference below; both give identical results (tests/unit/test_core_kernels.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.kernels.intervals import place
from profiler.kernels.native import native

_kernel = native("profiler.kernels._nesting")

#: what an event code is to `nest_events` (its `code_class`): not a span event, or the begin / end
#: of an op (rows get self time), or of another span (rows get their nesting depth)
NOT_SPAN, OP_SPAN, OTHER_SPAN = 0, 1, 2


@dataclass
class Labels:
    """The labels rows of one class get (e.g. the codes of their categorical columns): one looked up
    by the row's thread index, two by its descriptor id. Each is an int8, int16 or int32 table, and
    the rows' label column has its type."""

    by_thread: np.ndarray
    by_desc: np.ndarray
    by_desc2: np.ndarray

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return tuple(
            np.ascontiguousarray(x, dtype=x.dtype if x.dtype in LABEL_TYPES else np.int32)
            for x in (self.by_thread, self.by_desc, self.by_desc2)
        )


LABEL_TYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))


@dataclass
class SpanRows:
    """Paired spans as rows, ops and other spans apart. Both have their three labels (`by_thread`,
    `by_desc`, `by_desc2`: int32), `start_ns` (begin time minus the origin) and `dur_ns`; ops also
    `self_ns` (the duration minus that of the spans directly inside), other spans `depth` (nesting
    level on their lane).

    Rows come in the order their begins are visited: by thread, then window, then recording order.
    """

    ops: dict[str, np.ndarray]
    spans: dict[str, np.ndarray]
    unmatched: int  # span events inside a window left without a partner
    outside: int  # events (of any kind) outside every recording window: not data


def nest_events(
    chunks: list[np.ndarray],
    chunk_tid: np.ndarray,
    code_class: np.ndarray,
    op_labels: Labels,
    span_labels: Labels,
    win_start: np.ndarray,
    win_stop: np.ndarray,
    origin: int,
    use_kernel: bool = True,
) -> SpanRows:
    """Pair the span events of each thread within each recording window, and time them.

    `chunks` are events chunks ((n, 2) int64: time, code), each one thread's (`chunk_tid`), in
    recording order; `code_class[code]` says what an event is (NOT_SPAN / OP_SPAN / OTHER_SPAN),
    and `op_labels` / `span_labels` what its row is labelled with; an event belongs to the latest
    window [win_start, win_stop] starting at or before it (none: not data). Within a lane (a thread
    in one window), a begin at nesting depth d is closed by the next event at depth d when that is
    an end of the same descriptor. Depth is the running count of begins minus ends; a leading end
    (its span began before the window) or a trailing begin (not ended when it closed) is unmatched.
    Self time is the duration minus that of the spans directly inside.
    """
    chunk_tid = np.asarray(chunk_tid, dtype=np.int64)
    code_class = np.ascontiguousarray(code_class, dtype=np.int8)
    win_start = np.ascontiguousarray(win_start, dtype=np.int64)
    win_stop = np.ascontiguousarray(win_stop, dtype=np.int64)
    if _kernel is None or not use_kernel:
        return _nest_events_numpy(chunks, chunk_tid, code_class, op_labels, span_labels, win_start, win_stop, origin)
    chunks = [np.ascontiguousarray(c, dtype=np.int64).reshape(-1, 2) for c in chunks]
    order = np.argsort(chunk_tid, kind="stable")  # each thread's chunks, in recording order
    lens = np.array([len(c) for c in chunks], dtype=np.int64)
    labels = (op_labels.tables(), span_labels.tables())
    got = _kernel.nest_events(
        chunks,
        order.astype(np.int64),
        np.zeros(len(order), np.int64),
        lens[order],
        chunk_tid[order],
        code_class,
        *labels,
        win_start,
        win_stop,
        int(origin),
    )
    outside = None
    if got is None:  # times go back within a thread (damaged records): visit in the exact order
        segments, outside = _exact_segments(chunks, chunk_tid, code_class, win_start, win_stop)
        got = _kernel.nest_events(chunks, *segments, code_class, *labels, win_start, win_stop, int(origin))
    ops, spans, unmatched, visited_outside = got

    def columns(names, buffers, label_tables):
        types = [x.dtype for x in label_tables] + [np.int64] * 3
        return {k: np.frombuffer(b, dtype=t) for k, b, t in zip(names, buffers, types)}

    return SpanRows(
        columns(OP_ROW_COLUMNS, ops, labels[0]),
        columns(SPAN_ROW_COLUMNS, spans, labels[1]),
        int(unmatched),
        int(visited_outside if outside is None else outside),
    )


OP_ROW_COLUMNS = ("by_thread", "by_desc", "by_desc2", "start_ns", "dur_ns", "self_ns")
SPAN_ROW_COLUMNS = ("by_thread", "by_desc", "by_desc2", "start_ns", "dur_ns", "depth")


def _event_columns(chunks, chunk_tid, code_class, win_start, win_stop):
    """Per event of the concatenated chunks: time, code, thread, window, and whether it is a span
    event inside a window (selected)."""
    ev = np.concatenate(chunks) if len(chunks) else np.empty((0, 2), np.int64)
    t, code = ev[:, 0].copy(), ev[:, 1].copy()
    tid = np.repeat(chunk_tid, [len(c) for c in chunks])
    win = place(t, win_start, win_stop, np.arange(len(win_start), dtype=np.int32), end_inclusive=True)
    in_range = (code >= 0) & (code < len(code_class))
    cls = np.zeros(len(code), np.int8)
    cls[in_range] = code_class[code[in_range]]
    return t, code, tid, win, cls, (win >= 0) & (cls != NOT_SPAN)


def _lane_order(tid, win, selected, n_windows):
    """The selected events' positions, stably sorted by lane (thread, then window), and the lanes."""
    lane = tid * (n_windows + 1) + win
    sel = np.flatnonzero(selected)
    within = stable_order(lane[sel])
    return (sel if within is None else sel[within]), lane


def _exact_segments(chunks, chunk_tid, code_class, win_start, win_stop):
    """The kernel's visiting order when a thread's times go back: the selected events in a stable
    order by lane, as segments (chunk, start, length, thread) of consecutive events; and the events
    outside every window."""
    _, _, _, win, _, selected = _event_columns(chunks, chunk_tid, code_class, win_start, win_stop)
    order, _ = _lane_order(np.repeat(chunk_tid, [len(c) for c in chunks]), win, selected, len(win_start))
    base = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)
    chunk = np.searchsorted(base, order, side="right") - 1
    first = np.flatnonzero(np.concatenate([[True], (np.diff(order) != 1) | (np.diff(chunk) != 0)]))
    seg_chunk = chunk[first].astype(np.int64)
    seg_start = (order[first] - base[seg_chunk]).astype(np.int64)
    seg_len = np.diff(np.append(first, len(order))).astype(np.int64)
    return (seg_chunk, seg_start, seg_len, chunk_tid[seg_chunk]), int(np.count_nonzero(win < 0))


def _nest_events_numpy(chunks, chunk_tid, code_class, op_labels, span_labels, win_start, win_stop, origin) -> SpanRows:
    """The numpy reference of `nest_events`: per-event columns, a stable sort by lane, `_pair`."""
    t, code, tid, win, cls, selected = _event_columns(chunks, chunk_tid, code_class, win_start, win_stop)
    outside = int(np.count_nonzero(win < 0))
    order, lane = _lane_order(tid, win, selected, len(win_start))
    if not len(order):

        def empty(columns, labels):
            types = [x.dtype for x in labels.tables()] + [np.int64] * 3
            return {k: np.empty(0, t) for k, t in zip(columns, types)}

        return SpanRows(empty(OP_ROW_COLUMNS, op_labels), empty(SPAN_ROW_COLUMNS, span_labels), 0, outside)
    begin, end, level, unmatched = _pair(lane, code, order)
    start = t[begin]
    dur = t[end] - start
    self_ns = self_time(start, dur, lane[begin], level)
    desc = code[begin] >> 1
    is_op = cls[begin] == OP_SPAN

    def rows(mask: np.ndarray, labels: Labels, last: np.ndarray) -> dict[str, np.ndarray]:
        by_thread, by_desc, by_desc2 = labels.tables()
        return {
            "by_thread": by_thread[tid[begin][mask]],
            "by_desc": by_desc[desc[mask]],
            "by_desc2": by_desc2[desc[mask]],
            "start_ns": start[mask] - origin,
            "dur_ns": dur[mask],
            "last": last[mask],
        }

    ops, spans = rows(is_op, op_labels, self_ns), rows(~is_op, span_labels, level)
    ops["self_ns"], spans["depth"] = ops.pop("last"), spans.pop("last")
    return SpanRows(ops, spans, unmatched, outside)


def _pair(group: np.ndarray, code: np.ndarray, order) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Begin / end pairs (event positions), their levels and the count of unpaired events;
    grouping events by (group, level) leaves sequences E? (B E)* B? that pair up by adjacency."""
    n = len(code) if order is None else len(order)
    sorted_key = group if order is None else group[order]
    step = (1 - 2 * (code & 1)).astype(np.int8)  # +1 begin, -1 end
    if order is not None:
        step = step[order]
    # 1. nesting level of every event, each group starting at depth 0
    firsts = np.flatnonzero(np.concatenate([[True], sorted_key[1:] != sorted_key[:-1]]))
    sizes = np.diff(np.append(firsts, n))
    depth_after = np.cumsum(step, dtype=np.int32)
    depth_after -= np.repeat(depth_after[firsts] - step[firsts], sizes)
    level = depth_after - (step > 0)  # a begin sits at its depth before, an end after
    # ends of spans begun before the window make levels negative: shift each group to start at 0
    level -= np.repeat(np.minimum.reduceat(level, firsts), sizes)
    # 2. within each (group, level), recording order alternates begin, end
    group_id = np.repeat(np.arange(len(firsts), dtype=np.int32), sizes)
    level_key = group_id.astype(np.int64) * (int(level.max()) + 1) + level
    within = stable_order(level_key)
    pos = np.arange(n)  # visiting position of each event
    if within is not None:
        pos, level_key, level, step = pos[within], level_key[within], level[within], step[within]
    ev = pos if order is None else order[pos]
    desc = (code >> 1)[ev]
    pair = (step[:-1] > 0) & (step[1:] < 0) & (level_key[1:] == level_key[:-1])
    # an end right after a begin of another descriptor means corrupt nesting: do not pair it
    pair &= desc[1:] == desc[:-1]
    by_visit = np.argsort(pos[:-1][pair], kind="stable")
    begins = ev[:-1][pair][by_visit]
    return begins, ev[1:][pair][by_visit], level[:-1][pair][by_visit].astype(np.int64), n - 2 * len(begins)


def stable_order(key: np.ndarray):
    """Stable argsort, or None when already sorted; a radix sort when the keys fit in 16 bits."""
    if len(key) < 2 or bool(np.all(key[1:] >= key[:-1])):
        return None
    if key.min() >= 0 and key.max() < 2**15:
        key = key.astype(np.int16)  # numpy sorts <= 16-bit integers with a stable radix sort
    return np.argsort(key, kind="stable")


def self_time(start: np.ndarray, dur: np.ndarray, lane: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Duration minus the time of spans nested directly inside (same lane, one level deeper).

    A span's parent is the latest span one level up on its lane that started no later and ends
    no earlier than it: found for all spans at once with an as-of merge.
    """
    n = len(start)
    if n == 0:
        return np.empty(0, np.int64)
    df = pd.DataFrame({"start": start, "lane": lane, "level": level, "i": np.arange(n)})
    parents = (
        df.rename(columns={"i": "parent"})
        .assign(level=df["level"] + 1, parent_end=start + dur)
        .sort_values("start", kind="stable")
    )
    children = df[df["level"] > 0].sort_values("start", kind="stable")
    m = pd.merge_asof(
        children, parents, on="start", by=["lane", "level"], direction="backward", allow_exact_matches=True
    )
    m = m.dropna(subset=["parent"])
    m = m[m["start"].to_numpy() + dur[m["i"].to_numpy()] <= m["parent_end"].to_numpy()]
    child_time = np.bincount(m["parent"].astype(np.int64), weights=dur[m["i"].to_numpy()], minlength=n)
    return dur - child_time.astype(np.int64)


# ---- complete intervals (a Kineto trace's host ops) -----------------------------------------
#
# Nesting of time intervals on lanes (threads, GPU streams), vectorised with numpy.
#
# A Kineto trace gives every host op as a complete interval, not as begin / end events, so the
# call tree has to be rebuilt from the intervals. A stack walk in Python would cost a few hundred
# nanoseconds per op; these functions do it on whole columns in O(n log n) instead:
#
# - `enclosing_parents`: sort by (lane, start, -end) (`nesting_order`: for intervals already in start
#   order, a counting sort by lane and a fix of the runs of equal starts). The innermost interval that contains
#   interval i is then the *last* interval j before i (same lane) with end_j >= end_i: every
#   interval between that j and i ends before i does, so it cannot contain i. Finding "the
#   previous element with a value >= mine" is done by pointer jumping: each interval starts with
#   candidate i-1 and, while its candidate ends too early, jumps to the candidate's own candidate.
#   Everything skipped by a jump ends before the candidate, hence before i, so no container is
#   ever skipped; the jumps double in length, so ~log2(n) rounds over the unresolved intervals.
# - `self_times`: duration minus the summed durations of the direct children (`children_sums`: exact int64).
# - `nesting_depths`: distance to the root by pointer jumping over the parent array
#   (Wyllie's list ranking), also ~log2(depth) rounds, a chunk of intervals at a time.
#
# Containment, not mere overlap, makes a child: an interval that starts inside another but ends
# after it is its sibling. Host ops on one thread are properly nested (RAII scopes), so there the
# self times of a thread add up to the union of its top-level ops.


def position_dtype(n: int) -> type:
    """The integer type of row positions -1..n-1 kept per row: int32 below 2**31 rows, half the memory of
    int64 on a big trace."""
    return np.int32 if n < 2**31 else np.int64


def positions_where(mask: np.ndarray) -> np.ndarray:
    """np.flatnonzero(mask) as `position_dtype` values, counted then written a chunk at a time (into a spill file
    when big): a big table's rows of some kind with no whole-length temporaries."""
    return spill.flatnonzero(len(mask), lambda at: mask[at], position_dtype(len(mask)))


def positions_passing(n: int, test: Callable[[slice], np.ndarray], rows: Optional[int] = None) -> np.ndarray:
    """The positions 0..n-1 where `test(chunk)` (a bool per position of the chunk) holds, as `positions_where`
    gives them: the mask made `rows` (default spill.CHUNK_ROWS) positions at a time into a spill file when big."""
    return positions_where(spill.chunked(n, bool, test, rows))


def ascending(values: np.ndarray, strictly: bool = False, rows: Optional[int] = None) -> bool:
    """Whether `values` never decrease (each is above the one before, when `strictly`), read `rows` (default
    spill.CHUNK_ROWS) at a time, the pages of a spilled `values` handed back after each: no whole-length temporaries,
    and a check of a big column is not a whole column's pages at once."""
    below = np.less_equal if strictly else np.less
    for at in spill.dropping(spill.chunks(len(values), rows)):
        window = values[max(at.start - 1, 0) : at.stop]  # with the value before the chunk
        if np.any(below(window[1:], window[:-1])):
            return False
    return True


def counting_order(key: np.ndarray, low: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions 0..n-1 stably sorted by `key` (integers in [low, low + size)), in `position_dtype`, and where
    each key's positions begin (`size` + 1 bounds): counted, then placed a piece at a time into a spill file when
    big. What np.argsort(key, kind="stable") gives, with temporaries of a piece (~40 bytes a position:
    `spill.pieces`) instead of int64 per position."""
    n = len(key)
    counts = np.zeros(size, dtype=np.int64)
    for at in spill.dropping(spill.pieces(n)):  # a big key's pages handed back as read: 120 MB at 30 M int32 keys
        counts += np.bincount(key[at].astype(np.int64) - low, minlength=size)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    order = spill.empty(n, position_dtype(n))
    placed = bounds[:-1].copy()  # where each key's next position goes
    for at in spill.pieces(n):
        k = key[at].astype(np.int64) - low
        by_key = np.argsort(k.astype(np.int16) if size <= 2**15 else k, kind="stable")  # 16 bits: a radix sort
        k = k[by_key]
        # ascending places, one run per key: written a stretch of `order` at a time (a piece's keys reach all of it)
        spill.scattered(order, placed[k] + np.arange(len(k)) - np.searchsorted(k, k), by_key + at.start)
        placed += np.bincount(k, minlength=size)
    return order, bounds


def bucketed_lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """np.lexsort(keys) (the last key the primary one, numbers; ties in input order), in `position_dtype` in a spill
    file when big: the positions counted into ranges of the primary key of about a piece each (`counting_order`;
    the ranges cut at quantiles of a sample of it), then each range lexsorted in memory. Temporaries of a piece (a
    range holds more only when one primary value alone does) where np.lexsort takes int64 and more per position."""
    primary, n = keys[-1], len(keys[-1])
    cuts = _range_cuts(primary, -(-n // spill.piece_rows()))
    bucket = spill.chunked(n, np.int32, lambda at: np.searchsorted(cuts, primary[at], side="right"))
    order, bounds = counting_order(bucket, 0, len(cuts) + 1)
    for lo, hi in spill.dropping(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        rows = order[lo:hi]  # a view: each range in input order, sorted in place
        rows[:] = rows[np.lexsort([key[rows] for key in keys])]
    return order


def _range_cuts(values: np.ndarray, ranges: int) -> np.ndarray:
    """Up to `ranges` - 1 distinct values cutting `values` into ranges of about equal counts: quantiles of every
    k-th value (~64 a range), sampled a stretch at a time (a sample a folio apart maps the whole column)."""
    if ranges <= 1:
        return values[:0]
    sample = np.sort(spill.sample(values, max(len(values) // (64 * ranges), 1)))
    return np.unique(sample[(np.arange(1, ranges) * len(sample)) // ranges])


#: Widest range of lane numbers `nesting_order` sorts by counting (its counts: one int64 per number).
LANE_RANGE = 1 << 15


def nesting_order(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The intervals' positions by (lane, start, -end), ties in input order: np.lexsort((-end, start, lane)), in a
    spill file when big (`nesting_sorted`)."""
    return nesting_sorted(lane, start, end)[0]


def nesting_sorted(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`nesting_order`, and `lane`, `start` and `end` in it (each in a spill file when big): the columns gathered once
    a stretch at a time (`spill.gathered`: a lane's positions ascend), so that the nesting reads contiguous slices of
    them, where gathers through pieces of the order mapped each whole column (a lane's rows are spread over the
    table). Intervals already in start order (an op table is) are counted into lane order, which keeps their start
    order, then each run of equal (lane, start) is put latest end first: chunk-sized temporaries where the lexsort
    takes three int64 per interval. Other inputs take the lexsort."""
    if (
        np.issubdtype(lane.dtype, np.integer)
        and np.issubdtype(start.dtype, np.integer)
        and len(lane)
        and ascending(start)
    ):
        edges = [(int(lane[at].min()), int(lane[at].max())) for at in spill.dropping(spill.chunks(len(lane)))]
        low = min(lo for lo, _ in edges)
        size = max(hi for _, hi in edges) - low + 1
        if size <= LANE_RANGE:
            order, _ = counting_order(lane, low, size)
            lane_s, start_s, end_s = (spill.gathered(column, order) for column in (lane, start, end))
            _latest_end_first(order, lane_s, start_s, end_s)
            return order, lane_s, start_s, end_s
    order = spill.spilled(np.lexsort((-end, start, lane)))
    return order, spill.gathered(lane, order), spill.gathered(start, order), spill.gathered(end, order)


def _latest_end_first(order: np.ndarray, lane_s: np.ndarray, start_s: np.ndarray, end_s: np.ndarray) -> None:
    """Sort, in place, each run of `order` of equal (lane, start) by end, latest first, equal ends kept in their
    order (the lexsort's last key), and `end_s` (the ends in `order`, as `lane_s` and `start_s`) with it: a chunk
    at a time, cut before the run its next position is in; contiguous slices of the sorted columns."""
    n, lo, size = len(order), 0, spill.CHUNK_ROWS
    while lo < n:
        lanes, starts = lane_s[lo : lo + size + 1], start_s[lo : lo + size + 1]  # the chunk and the position after
        tied = (lanes[1:] == lanes[:-1]) & (starts[1:] == starts[:-1])  # in the same run as the one before
        count = len(lanes)
        if lo + size < n:  # end the chunk where the last run that begins in it begins
            begins = np.flatnonzero(~tied) + 1
            if not len(begins):  # one run longer than the chunk: look further
                size *= 2
                continue
            count, tied = int(begins[-1]), tied[: begins[-1] - 1]
        if tied.any():
            in_run = np.flatnonzero(np.append(tied, False) | np.insert(tied, 0, False))
            run = np.cumsum(np.insert(~tied, 0, True))[in_run]
            rows, ends = order[lo : lo + count], end_s[lo : lo + count]  # views: sorted in place
            latest_first = np.lexsort((-ends[in_run], run))
            rows[in_run], ends[in_run] = rows[in_run][latest_first], ends[in_run][latest_first]
        lo, size = lo + count, spill.CHUNK_ROWS
        spill.drop_resident()


def enclosing_parents(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index (into the inputs) of each interval's innermost container on the same lane, or -1 (int64, in a spill
    file when big).

    `lane`, `start` and `end` are equal-length integer arrays in any order. Of two identical
    intervals the one listed first is the parent of the other.
    """
    order, lane_s, start_s, end_s = nesting_sorted(lane, start, end)  # kept while the pieces are nested
    parent = spill.empty(len(order), np.int64)  # every position written once: `order` is a permutation
    for lo, hi in _independent_pieces(lane_s, start_s, end_s):
        rows = order[lo:hi]  # slices of the sorted columns: each maps its own pages only
        above = _previous_at_least(np.array(lane_s[lo:hi]), np.array(end_s[lo:hi]))
        spill.scattered(parent, rows, np.where(above >= 0, rows[np.maximum(above, 0)], -1))  # a stretch at a time
    return parent


def enclosing_parents_of_two(lane: np.ndarray, start: np.ndarray, end: np.ndarray, split: int) -> np.ndarray:
    """`enclosing_parents` of intervals that are two start-ordered sets one after the other (before `split` and
    from it on: the ops and the allocations they hold): the same parents, found in the two sets' merged start
    order (`merged_order`), with chunk-sized temporaries where the unordered whole takes np.lexsort's three int64
    per interval in memory (150 MB more from a 2 GB to a 16 GB profile_memory trace). Other inputs: as they are."""
    if not (len(start) and ascending(start[:split]) and ascending(start[split:])):
        return enclosing_parents(lane, start, end)
    order = merged_order(start[:split], start[split:])
    parent = enclosing_parents(spill.gathered(lane, order), spill.gathered(start, order), spill.gathered(end, order))
    out = spill.empty(len(order), np.int64)
    for at in spill.chunks(len(order)):  # each interval's parent, both in the input's numbering
        above = parent[at]
        out[order[at]] = np.where(above >= 0, order[np.maximum(above, 0)], -1)
        spill.drop_resident()
    return out


def merged_order(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The positions of `first` then `second` (each ascending) in start order, ties first's before second's and
    each in its order: np.argsort of their concatenation, kind="stable", placed a chunk at a time (each value's
    place is its own position plus how many of the other set go before it) into a spill file when big."""
    n = len(first) + len(second)
    order = spill.empty(n, position_dtype(n))
    for own, other, side, offset in ((first, second, "left", 0), (second, first, "right", len(first))):
        for at in spill.chunks(len(own)):
            positions = np.arange(at.start, at.stop)
            order[positions + np.searchsorted(other, own[at], side=side)] = positions + offset
            spill.drop_resident()
    return order


#: Intervals per pass of `enclosing_parents`' pointer jumping, whose working arrays take ~40 bytes per
#: interval: a big trace's millions of ops are done a piece at a time (10 M ops: 178 MiB at the peak,
#: 558 whole; and faster).
NESTING_PIECE = 1 << 18


def _independent_pieces(lane_s: np.ndarray, start_s: np.ndarray, end_s: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) ranges of intervals sorted by (lane, start, -end) (`nesting_sorted`) of about NESTING_PIECE
    intervals, cut only where no interval before the cut can contain one after it: at a new lane, or where an
    interval starts after every earlier interval of its lane has ended (so each interval's container is in its
    own piece). Reads contiguous slices of the sorted columns."""
    n, size = len(lane_s), NESTING_PIECE
    edges = [0]
    lane_before, latest_end = None, None  # the previous interval's lane, and the latest end on it so far
    for lo in range(0, n if n > size else 0, size):  # a cut in each slice of `size`: its first free place
        rows = slice(lo, min(lo + size, n))
        lane_p, start_p, end_p = lane_s[rows], start_s[rows], end_s[rows].astype(np.int64)
        new_lane = np.empty(len(lane_p), dtype=bool)
        new_lane[0] = lo == 0 or lane_p[0] != lane_before
        new_lane[1:] = lane_p[1:] != lane_p[:-1]
        ended = np.where(new_lane, np.iinfo(np.int64).min, np.roll(end_p, 1))  # the previous interval's end
        if not new_lane[0]:
            ended[0] = latest_end
        ended = _running_max_per_run(ended, np.cumsum(new_lane))  # the latest end before each, on its lane
        free = np.flatnonzero(new_lane | (start_p > ended))
        if lo > 0 and len(free) and lo + free[0] > edges[-1]:
            edges.append(lo + int(free[0]))
        lane_before, latest_end = lane_p[-1], max(int(ended[-1]), int(end_p[-1]))
        spill.drop_resident()
    return [(a, b) for a, b in zip(edges, [*edges[1:], n]) if b > a]


def _running_max_per_run(values: np.ndarray, run_no: np.ndarray) -> np.ndarray:
    """Running maximum of `values`, restarted where `run_no` (non-decreasing) steps up: one cumulative
    maximum over the values' ranks lifted by their run number keeps the runs apart."""
    distinct, rank = np.unique(values, return_inverse=True)
    lift = run_no.astype(np.int64) * len(distinct)
    return distinct[np.maximum.accumulate(lift + rank) - lift]


def _previous_at_least(lane_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
    """For intervals sorted by (lane, start, -end): the position of the last earlier interval of the same
    lane that ends no earlier (the innermost container), or -1; by pointer jumping (see above)."""
    n = len(lane_s)
    position = position_dtype(n)
    candidate = np.arange(-1, n - 1, dtype=position)
    parent_s = np.full(n, -1, dtype=position)
    active = np.arange(1, n, dtype=position)
    while active.size:
        cand = candidate[active]
        same_lane = lane_s[cand] == lane_s[active]
        contains = same_lane & (end_s[cand] >= end_s[active])
        parent_s[active[contains]] = cand[contains]
        jumping = active[same_lane & ~contains]
        candidate[jumping] = candidate[candidate[jumping]]
        active = jumping[candidate[jumping] >= 0]
    return parent_s


def self_times(parent: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Each interval's duration minus the durations of its direct children (int64, >= 0)."""
    return np.maximum(dur - children_sums(parent, dur), 0)


def children_sums(parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per interval, the exact int64 sum of `values` over its direct children (`parent`: each one's, -1 at a root),
    added a chunk of intervals at a time, in a spill file when big."""
    out = spill.filled(len(parent), np.int64, 0)
    for at in spill.chunks(len(parent)):
        nested = parent[at] >= 0
        np.add.at(out, parent[at][nested], values[at][nested])
        spill.drop_resident()
    return out


def nesting_depths(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each interval (0 = outermost), int64, in a spill file when big. The pointer jumping
    goes a chunk of intervals at a time over spilled arrays (its temporaries a chunk's size): a jump reads an
    ancestor's depth and link together, before or after that ancestor's own jump of the round, so the depth
    stays the distance to the link either way."""
    n = len(parent)
    depth = spill.chunked(n, np.int64, lambda at: parent[at] >= 0)
    up = spill.chunked(n, position_dtype(n), lambda at: parent[at])
    jumped = True
    while jumped:
        jumped = False
        for at in spill.chunks(n):
            pending = np.flatnonzero(up[at] >= 0) + at.start
            if pending.size:
                above = up[pending]
                depth[pending] += depth[above]
                up[pending] = up[above]
                jumped = True
            spill.drop_resident()  # the chunk's pages, and the heap its jumps freed
    return depth


def by_depth(parent: np.ndarray) -> list[np.ndarray]:
    """The intervals that have a parent, by nesting depth, outermost first (parents before their children), in
    pieces of one depth each (ascending) of at most spill.CHUNK_ROWS positions within a stretch of 0..n-1
    (spill.stretches: work on a piece reads and writes its rows of whole-table columns, touching their pages across
    its stretch): views of one spilled array. Iterate with spill.dropping to hand each piece's pages back."""
    depth = nesting_depths(parent)
    deepest = max((int(depth[at].max()) for at in spill.paced(spill.chunks(len(depth)))), default=0)
    order, bounds = counting_order(depth, 0, deepest + 1)
    levels = (order[bounds[d] : bounds[d + 1]] for d in range(1, deepest + 1))
    return [level[at] for level in levels for at in spill.stretches(level)]

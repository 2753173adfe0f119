"""The C analysis kernels give exactly what their numpy references give, on clean and broken input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.export import trace_text
from profiler.kernels import columns, nesting
from profiler.kernels.intervals import place

needs_nesting_kernel = pytest.mark.skipif(nesting._kernel is None, reason="C nesting kernel not built")
needs_rows_kernel = pytest.mark.skipif(trace_text._trace_rows is None, reason="C trace-row kernel not built")


def random_events(rng: np.random.Generator, n_groups: int, n: int, broken: bool):
    """Recording-order span events of several lanes, interleaved; `broken` cuts and corrupts them."""
    group, code, t = [], [], []
    for g in range(n_groups):
        stack, now = [], int(rng.integers(0, 1000))
        for _ in range(n):
            now += int(rng.integers(1, 50))
            if stack and (rng.random() < 0.5 or len(stack) > 6):
                d = stack.pop()
                if broken and rng.random() < 0.05:
                    d = int(rng.integers(0, 5))  # an end of the wrong descriptor
                code.append(2 * d + 1)
            else:
                d = int(rng.integers(0, 5))
                stack.append(d)
                code.append(2 * d)
            group.append(g)
            t.append(now)
        for d in reversed(stack):  # close what is still open
            now += 1
            group.append(g)
            code.append(2 * d + 1)
            t.append(now)
    group, code, t = map(np.asarray, (group, code, t))
    if broken:  # lanes cut at both ends, events dropped
        keep = np.ones(len(code), bool)
        for g in range(n_groups):
            rows = np.flatnonzero(group == g)
            keep[rows[: int(rng.integers(0, 5))]] = False
            keep[rows[len(rows) - int(rng.integers(0, 5)) :]] = False
        keep &= rng.random(len(code)) > 0.02
        group, code, t = group[keep], code[keep], t[keep]
    mix = np.argsort(t, kind="stable")  # lanes interleaved by time
    return group[mix] * 7 + 3, code[mix], t[mix]


def as_chunks(rng: np.random.Generator, group: np.ndarray, code: np.ndarray, t: np.ndarray):
    """Events of several threads (group) in recording order, flushed as chunks: each chunk one
    thread's events of a stretch of the recording, chunks in order of their first event."""
    tid = (group - 3) // 7
    chunks, chunk_tid = [], []
    for piece in np.split(np.arange(len(t)), np.sort(rng.choice(len(t), 25, replace=False))):
        for thread in np.unique(tid[piece]):
            rows = piece[tid[piece] == thread]
            chunks.append(np.column_stack([t[rows], code[rows]]).astype(np.int64))
            chunk_tid.append(thread)
    return chunks, np.array(chunk_tid, np.int64)


def labels(rng: np.random.Generator, n_threads: int, n_desc: int) -> nesting.Labels:
    """Label tables of each width the kernel writes (1, 2 and 4 bytes)."""
    return nesting.Labels(
        *(
            rng.integers(-100, 100, n).astype(t)
            for n, t in ((n_threads, np.int8), (n_desc, np.int16), (n_desc, np.int32))
        )
    )


#: descriptors 0-4: ops (0, 2), other spans (1, 4), and 3 is no span event (a mark: never paired)
CODE_CLASS = np.repeat(
    np.array([nesting.OP_SPAN, nesting.OTHER_SPAN, nesting.OP_SPAN, nesting.NOT_SPAN, nesting.OTHER_SPAN], np.int8), 2
)


def assert_same_rows(c: nesting.SpanRows, ref: nesting.SpanRows) -> None:
    for part in ("ops", "spans"):
        got, want = getattr(c, part), getattr(ref, part)
        assert list(got) == list(want)
        for name in got:
            assert got[name].dtype == want[name].dtype, (part, name)
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{part}.{name}")
    assert (c.unmatched, c.outside) == (ref.unmatched, ref.outside)


@needs_nesting_kernel
@pytest.mark.parametrize("broken", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_nesting_kernel_matches_numpy(seed: int, broken: bool) -> None:
    rng = np.random.default_rng(seed)
    group, code, t = random_events(rng, n_groups=4, n=3000, broken=broken)
    chunks, chunk_tid = as_chunks(rng, group, code, t)
    # three recording windows with gaps between them (events there are not data), or one over everything
    edges = np.sort(rng.choice(np.arange(int(t.min()), int(t.max())), 6, replace=False))
    windows = (edges[0::2], edges[1::2]) if seed % 2 else (np.array([t.min()]), np.array([t.max()]))
    args = (chunks, chunk_tid, CODE_CLASS, labels(rng, 4, 5), labels(rng, 4, 5), *windows, 1000)
    c, ref = nesting.nest_events(*args), nesting.nest_events(*args, use_kernel=False)
    assert_same_rows(c, ref)
    if not broken and not seed % 2:
        n_spans = np.count_nonzero(CODE_CLASS[code] != nesting.NOT_SPAN)
        assert c.unmatched == 0 and len(c.ops["start_ns"]) + len(c.spans["start_ns"]) == n_spans // 2
    if seed % 2:
        assert c.outside == np.count_nonzero(place(t, *windows, np.arange(3), end_inclusive=True) < 0) > 0


@needs_nesting_kernel
@pytest.mark.parametrize("seed", range(3))
def test_nesting_kernel_visits_a_thread_whose_chunks_go_back_in_time_in_lane_order(seed: int) -> None:
    """A thread's chunk recorded in a later window listed before one of an earlier window (a reused
    thread ident): the kernel meets a lane again after another, and visits in the exact lane order."""
    rng = np.random.default_rng(seed)
    group, code, t = random_events(rng, n_groups=3, n=2000, broken=False)
    chunks, chunk_tid = as_chunks(rng, group, code, t)
    first, last = 0, max(i for i, tid in enumerate(chunk_tid) if tid == chunk_tid[0])
    chunks[first], chunks[last] = chunks[last], chunks[first]
    middle = int(np.median(t))
    windows = np.array([t.min(), middle + 1]), np.array([middle, t.max()])
    args = (chunks, chunk_tid, CODE_CLASS, labels(rng, 3, 5), labels(rng, 3, 5), *windows, 0)
    c, ref = nesting.nest_events(*args), nesting.nest_events(*args, use_kernel=False)
    assert_same_rows(c, ref)
    assert len(c.ops["start_ns"]) > 1000


def test_nesting_numbers_on_a_known_lane() -> None:
    """B0 B1 E1 B1 E1 E0 with times 0, 10, 30, 40, 45, 100: the outer span's self time is 100 - 25."""
    events = np.array([[0, 0], [10, 2], [30, 3], [40, 2], [45, 3], [100, 1]], np.int64)
    code_class = np.array([nesting.OP_SPAN] * 2 + [nesting.OTHER_SPAN] * 2, np.int8)  # the outer one an op
    ident = nesting.Labels(np.arange(1, dtype=np.int32), np.arange(2, dtype=np.int32), np.arange(2, dtype=np.int32))
    for use_kernel in (True, False):
        s = nesting.nest_events(
            [events[:2], events[2:]],
            np.zeros(2, np.int64),
            code_class,
            ident,
            ident,
            np.array([-10]),
            np.array([1000]),
            5,
            use_kernel=use_kernel,
        )
        assert s.ops["start_ns"].tolist() == [-5] and s.ops["dur_ns"].tolist() == [100]
        assert s.ops["self_ns"].tolist() == [75] and s.ops["by_desc"].tolist() == [0]
        assert s.spans["start_ns"].tolist() == [5, 35] and s.spans["dur_ns"].tolist() == [20, 5]
        assert s.spans["depth"].tolist() == [1, 1] and s.spans["by_desc"].tolist() == [1, 1]
        assert (s.unmatched, s.outside) == (0, 0)


def test_column_ranges_kernel_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    table = rng.integers(-(2**62), 2**62, (10_001, 4), dtype=np.int64)
    table[17] = [-(2**63), 2**63 - 1, 0, 5]
    assert columns.ranges(table) == columns.ranges(table, use_kernel=False)
    assert columns.ranges(table)[0][0] == -(2**63) and columns.ranges(table)[1][1] == 2**63 - 1
    assert columns.ranges(table[:0]) is None


def row_text(*args, use_kernel: bool, buffer=None) -> bytes:
    return b"".join(bytes(piece) for piece in trace_text.row_texts(*args, buffer=buffer, use_kernel=use_kernel))


EDGE_NS = [0, 1, -1, 124, 125, 999, 1000, -1000, 10**13, 15 * 10**12 * 1000, -(10**18), 2**63 - 1, -(2**63)]


def row_arrays(rng, n: int, with_dur: bool, scale: str):
    heads = [b'{"ph":"X","pid":0,"tid":%d,"name":"op %d","ts":' % (i, i) for i in range(7)]
    blob = b"".join(heads)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in heads])]).astype(np.int64)
    key = rng.integers(0, len(heads), n).astype(np.int64)
    if scale == "full":  # anywhere in int64: huge, negative, zero
        ts = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
        dur = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    else:
        ts = rng.integers(-(10**6), 10**13, n).astype(np.int64)
        dur = rng.integers(0, 10**9, n).astype(np.int64)
    ts[: len(EDGE_NS)] = EDGE_NS
    dur[: len(EDGE_NS)] = EDGE_NS[::-1]
    order = np.argsort(key, kind="stable").astype(np.int64)
    return (blob, offsets, key, ts, dur if with_dur else None, order)


@needs_rows_kernel
@pytest.mark.parametrize("scale", ["trace", "full"])
@pytest.mark.parametrize("with_dur", [True, False])
def test_trace_row_kernel_matches_numpy(with_dur: bool, scale: str) -> None:
    """Byte for byte, for any int64 time: huge (1.5e13 ticks and beyond), negative, zero."""
    args = row_arrays(np.random.default_rng(1), 20_000, with_dur, scale)
    small = np.empty(4096, dtype=np.uint8)  # many refills of a small buffer
    text = row_text(*args, use_kernel=True, buffer=small)
    assert text == row_text(*args, use_kernel=False)
    _, _, key, ts, dur, order = args
    events = json.loads(b"[" + text.rstrip(b",\n") + b"]")
    assert len(events) == len(ts)
    assert [e["tid"] for e in events] == key[order].tolist()
    got_ts = np.array([e["ts"] for e in events])
    # on the 1/1024 µs grid: within half a grid step of the ns value (relative for huge values)
    assert np.all(np.abs(got_ts * 1000 - ts[order]) <= np.maximum(0.49, np.abs(ts[order]) * 1e-15))
    assert np.all(got_ts * 1024 == np.round(got_ts * 1024)), "every value is k / 1024"
    if with_dur:
        got_dur = np.array([e["dur"] for e in events])
        assert np.all(got_dur * 1024 == np.round(got_dur * 1024))
        small_rows = np.abs(ts[order]) < 2**40
        end = ts[order].astype(object) + dur[order].astype(object)
        ok = small_rows & (np.abs(dur[order]) < 2**40)
        assert np.all(np.abs((got_ts + got_dur)[ok] * 1000 - end[ok].astype(float)) <= 0.49)


@pytest.mark.parametrize("use_kernel", [True, False])
def test_trace_rows_take_any_time_range(use_kernel: bool) -> None:
    """A MindInsight-era Ascend time (~1.5e13 ticks) and the int64 extremes give rows, never an exception."""
    if use_kernel and trace_text._trace_rows is None:
        pytest.skip("C trace-row kernel not built")
    ts = np.array(EDGE_NS, np.int64)
    args = (b"{", np.array([0, 1], np.int64), np.zeros(len(ts), np.int64), ts, ts[::-1].copy(), None)
    text = row_text(*args, use_kernel=use_kernel).decode()
    rows = text.splitlines()
    assert len(rows) == len(ts)
    assert rows[0] == '{0.000,"dur":-9223372036854775.8076171875},'
    assert rows[1] == '{0.0009765625,"dur":9223372036854775.806640625},'
    assert rows[9] == '{15000000000000.000,"dur":0.1240234375},'


def test_touching_spans_touch_exactly_in_float64() -> None:
    """ts + dur of a span equals the next span's ts in a reader's float64 arithmetic (speedscope
    adds them after subtracting the lane's first ts): the rounded end is shared."""
    rng = np.random.default_rng(5)
    bounds = np.cumsum(rng.integers(1, 10**9, 5000)) + 11_039_523
    start, dur = bounds[:-1], np.diff(bounds)
    args = (b"{", np.array([0, 1], np.int64), np.zeros(len(start), np.int64), start, dur, None)
    events = json.loads(b"[" + row_text(*args, use_kernel=True).replace(b"{", b'{"ts":').rstrip(b",\n") + b"]")
    ts = np.array([e["ts"] for e in events])
    d = np.array([e["dur"] for e in events])
    assert np.array_equal(ts[:-1] + d[:-1], ts[1:])
    assert np.array_equal((ts[:-1] - ts[0]) + d[:-1], ts[1:] - ts[0])


@pytest.mark.parametrize("max_dense_keys", [1 << 24, 1])  # counting pass, and the np.unique path
def test_group_rows_matches_pandas_groupby(max_dense_keys):
    """Counting-pass grouping (op tables) = pandas groupby(sort=True, observed=True): same groups in
    the same order, sizes, exact sums, min / max, first values; with categoricals whose categories
    are not sorted, unused categories, and plain object columns."""
    from profiler.kernels.grouping import group_rows

    rng = np.random.default_rng(3)
    n = 20_000
    device = pd.Categorical.from_codes(rng.integers(0, 3, n), categories=["cuda:1", "cpu", "cuda:0", "unused"])
    name = np.array([f"op{k}" for k in rng.integers(0, 40, n)], dtype=object)
    other = pd.Categorical.from_codes(rng.integers(0, 5, n), categories=list("edcba"))
    dur = rng.integers(0, 2**40, n)
    df = pd.DataFrame({"device": device, "name": name, "other": other, "dur": dur})
    g = group_rows(df["device"], df["name"], max_dense_keys=max_dense_keys)
    ref = (
        df.assign(device=df["device"].astype(str))
        .groupby(["device", "name"], sort=True, observed=True)
        .agg(n=("dur", "size"), s=("dur", "sum"), lo=("dur", "min"), hi=("dur", "max"), first=("other", "first"))
        .reset_index()
    )
    assert list(g.values(df["device"])) == list(ref["device"]) and list(g.values(df["name"])) == list(ref["name"])
    assert list(g.size) == list(ref["n"]) and list(g.sum(dur)) == list(ref["s"])
    assert list(g.min(dur)) == list(ref["lo"]) and list(g.max(dur)) == list(ref["hi"])
    assert list(g.values(df["other"])) == list(ref["first"].astype(str))


def test_text_matches_once_per_distinct_value_as_the_str_accessor_does():
    """text_matches gives what `astype(str).str.contains` gave (categoricals and object columns), False for a
    missing value, calling the predicate once per distinct value."""
    import re

    from profiler.kernels.grouping import text_matches

    names = ["aten::to", "aten::mm", "aten::_to_copy", "aten::mm", "Cast-op1", "aten::to"]
    cast = re.compile(r"(?i)(?:^cast\b|^cast-|aten::(?:to|_to_copy)$)")
    seen: list[str] = []

    def predicate(text: str) -> bool:
        seen.append(text)
        return cast.search(text) is not None

    for column in (pd.Series(names, dtype="category"), pd.Series(names, dtype=object)):
        seen.clear()
        expected = column.astype(str).str.contains(cast).to_numpy(dtype=bool)
        assert text_matches(column, predicate).tolist() == expected.tolist() == [1, 0, 1, 0, 1, 1]
        assert sorted(seen) == sorted(set(names))
    with_missing = pd.Series(pd.Categorical(["aten::to", None, "aten::mm"]))
    assert text_matches(with_missing, cast.search).tolist() == [True, False, False]


def innermost_container_by_stack(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """enclosing_parents' definition walked one interval at a time: in (lane, start, -end) order, the last
    earlier interval of the lane that ends no earlier (a stack of the ends not yet passed)."""
    parent = np.full(len(lane), -1, dtype=np.int64)
    stack: list[int] = []
    for i in np.lexsort((-end, start, lane)).tolist():
        while stack and (lane[stack[-1]] != lane[i] or end[stack[-1]] < end[i]):
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


@pytest.mark.parametrize("seed", range(8))
def test_enclosing_parents_in_pieces_equal_the_whole_walk(seed: int, monkeypatch) -> None:
    """A big trace's intervals are nested a piece at a time (cut where nothing before can contain anything
    after): the parents are those of one walk over everything, for nested, overlapping, zero-length and
    identical intervals on several lanes, whatever the piece size."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(500, 4000))
    lane = rng.integers(0, int(rng.integers(2, 6)), n)  # lanes: at least their starts are cuts
    start = rng.integers(0, int(rng.integers(50, 20_000)), n)
    end = start + rng.integers(0, int(rng.integers(2, 600)), n) * (rng.random(n) < 0.9)
    start[: n // 10], end[: n // 10] = start[n // 10 : 2 * (n // 10)], end[n // 10 : 2 * (n // 10)]  # twins
    want = innermost_container_by_stack(lane, start, end)
    for piece in (1, 7, 64, n // 3, 1 << 18):
        monkeypatch.setattr(nesting, "NESTING_PIECE", piece)
        order = np.lexsort((-end, start, lane))
        pieces = nesting._independent_pieces(lane[order], start[order], end[order])
        assert pieces[0][0] == 0 and pieces[-1][1] == n and all(b == c for (_, b), (c, _) in zip(pieces, pieces[1:]))
        if piece < n // 4:
            assert len(pieces) > 1  # the cuts were found, not one piece of everything
        np.testing.assert_array_equal(nesting.enclosing_parents(lane, start, end), want, err_msg=f"piece {piece}")


def test_enclosing_parents_pieces_restart_at_each_lane(monkeypatch) -> None:
    """The cuts are found lane by lane: a lane whose one op spans the whole capture (a thread's root range)
    does not keep the next lane, of step after step of small ops, in one piece."""
    monkeypatch.setattr(nesting, "NESTING_PIECE", 100)
    steps = np.repeat(np.arange(500) * 1000, 10)
    lane = np.concatenate([np.zeros(6, dtype=np.int64), np.ones(len(steps), dtype=np.int64)])
    start = np.concatenate([[0, 10, 20, 30, 40, 50], steps + np.tile(np.arange(10) * 50, 500)])
    end = np.concatenate([[10**9], start[1:6] + 5, start[6:] + 40])  # lane 0: a root range and 5 ops in it
    order = np.lexsort((-end, start, lane))
    pieces = nesting._independent_pieces(lane[order], start[order], end[order])
    assert max(b - a for a, b in pieces) <= 2 * 100 and len(pieces) >= len(lane) // 200
    np.testing.assert_array_equal(
        nesting.enclosing_parents(lane, start, end), innermost_container_by_stack(lane, start, end)
    )


# ---- the nesting's chunked kernels against the whole-array numpy they replace: the (lane, start, -end) order of
# intervals in start order by counting lanes, the counting sort, the row positions of a mask, the nesting depths
# jumped a chunk at a time and the intervals by depth; with chunks of a few rows, so that runs of equal starts and
# levels cross chunk edges


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 rows, stretches of 28: every kernel's chunk edges land inside its runs."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    monkeypatch.setattr(spill, "SPAN_ROWS", 28)


def start_ordered(rng: np.random.Generator, n: int, lanes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals in start order with many equal starts (on one lane and across lanes), identical intervals and
    runs of one start longer than a chunk; lanes from -1 (a missing thread's code)."""
    start = np.sort(rng.integers(0, max(n // 4, 1), n))
    start[n // 3 : n // 3 + 40] = start[n // 3]  # a run of one start over several chunks
    lane = rng.integers(-1, lanes - 1, n).astype(np.int8 if lanes < 100 else np.int32)
    lane[n // 3 : n // 3 + 40] = 0
    end = start + rng.integers(0, 6, n)  # few ends: equal ends within runs of equal starts
    twins = rng.choice(n - 1, n // 10, replace=False)
    lane[twins + 1], start[twins + 1], end[twins + 1] = lane[twins], start[twins], end[twins]
    keep = np.argsort(start, kind="stable")  # the twins may have broken the start order
    return lane[keep], start[keep], end[keep]


@pytest.mark.parametrize("seed", range(6))
def test_two_start_ordered_sets_merged_are_the_stable_argsort(seed, small_chunks) -> None:
    rng = np.random.default_rng(seed)
    first, second = (np.sort(rng.integers(0, 30, int(rng.integers(0, 60)))) for _ in range(2))  # many equal starts
    got = nesting.merged_order(first, second)
    np.testing.assert_array_equal(got, np.argsort(np.concatenate([first, second]), kind="stable"))


@pytest.mark.parametrize("seed", range(6))
def test_parents_of_two_start_ordered_sets_are_those_of_their_concatenation(seed, small_chunks) -> None:
    """The ops and the allocations they hold (`memory.allocating_ops`): each set in start order, the two not; twins
    across the sets (the first set's is the parent), zero-length intervals at an op's start and end."""
    rng = np.random.default_rng(seed)
    lane, start, end = start_ordered(rng, int(rng.integers(50, 300)), 3)
    when = np.sort(rng.choice(np.concatenate([start, end]), int(rng.integers(1, 80))))  # on the ops' edges
    held = (rng.integers(-1, 2, len(when)).astype(lane.dtype), when, when + rng.integers(0, 2, len(when)))
    twins = (lane[: len(lane) // 4], start[: len(lane) // 4], end[: len(lane) // 4])  # a second set's start too
    for second in (held, twins):
        both = [np.concatenate([ours, theirs]) for ours, theirs in zip((lane, start, end), second)]
        want = innermost_container_by_stack(*both)
        np.testing.assert_array_equal(nesting.enclosing_parents_of_two(*both, len(lane)), want)
        np.testing.assert_array_equal(nesting.enclosing_parents(*both), want)
    unordered = [np.concatenate([ours, ours[::-1]]) for ours in (lane, start, end)]  # a set out of order: as it is
    np.testing.assert_array_equal(
        nesting.enclosing_parents_of_two(*unordered, len(lane)), innermost_container_by_stack(*unordered)
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("lanes", [1, 3, 300])
def test_counted_order_of_start_ordered_intervals_is_the_lexsort(seed, lanes, small_chunks, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    lane, start, end = start_ordered(rng, int(rng.integers(50, 400)), lanes)
    counted = []
    monkeypatch.setattr(nesting, "counting_order", lambda *a: counted.append(1) or COUNTING_ORDER(*a))
    order = nesting.nesting_order(lane, start, end)
    assert counted, "start-ordered intervals took the lexsort"
    want = np.lexsort((-end, start, lane))
    np.testing.assert_array_equal(order, want)
    assert order.dtype == np.int32  # row positions, not the lexsort's int64
    np.testing.assert_array_equal(
        nesting.enclosing_parents(lane, start, end), innermost_container_by_stack(lane, start, end)
    )


COUNTING_ORDER = nesting.counting_order


def test_unordered_or_wide_lanes_take_the_lexsort(small_chunks, monkeypatch) -> None:
    """Intervals out of start order, or lanes numbered over more than LANE_RANGE values, are sorted by lexsort;
    an empty input gives an empty order."""
    rng = np.random.default_rng(7)
    lane, start, end = start_ordered(rng, 200, 4)
    monkeypatch.setattr(nesting, "counting_order", lambda *a: pytest.fail("counted"))
    shuffled = rng.permutation(len(lane))
    wide = lane.astype(np.int64) * nesting.LANE_RANGE
    for lanes, starts, ends in ((lane[shuffled], start[shuffled], end[shuffled]), (wide, start, end)):
        np.testing.assert_array_equal(nesting.nesting_order(lanes, starts, ends), np.lexsort((-ends, starts, lanes)))
        np.testing.assert_array_equal(
            nesting.enclosing_parents(lanes, starts, ends), innermost_container_by_stack(lanes, starts, ends)
        )
    assert len(nesting.nesting_order(lane[:0], start[:0], end[:0])) == 0


def test_a_spilled_order_is_the_same(tmp_path, small_chunks) -> None:
    lane, start, end = start_ordered(np.random.default_rng(3), 3000, 5)
    with spill.spilling(tmp_path, min_bytes=1):
        order = nesting.nesting_order(lane, start, end)
        assert spill.is_spilled(order)
        np.testing.assert_array_equal(order, np.lexsort((-end, start, lane)))


@pytest.mark.parametrize("seed", range(4))
def test_counting_order_is_the_stable_argsort(seed, small_chunks) -> None:
    rng = np.random.default_rng(seed)
    for low, size in ((-1, 3), (0, 40_000)):  # 16-bit keys and wider ones
        key = rng.integers(low, low + size, int(rng.integers(1, 200)))
        order, bounds = nesting.counting_order(key, low, size)
        np.testing.assert_array_equal(order, np.argsort(key, kind="stable"))
        np.testing.assert_array_equal(bounds, np.searchsorted(np.sort(key), np.arange(low, low + size + 1)))


def test_counting_order_places_a_stretch_of_the_order_between_drops(monkeypatch) -> None:
    """A piece's keys are places all over the order (a run per key): written a stretch at a time, a drop between
    two (one scatter of a piece mapped a folio per key: 457 MB of a 16 GB trace's in one call)."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 40)  # pieces of 10 keys
    monkeypatch.setattr(spill, "SPAN_ROWS", 64)
    key = np.random.default_rng(3).integers(0, 50, 2000)
    made = spill.empty

    def watched_empty(n, dtype, min_bytes=None):
        out = made(n, dtype, min_bytes).view(Watched)
        Watched.names[id(out)] = "order"
        return out

    Watched.names, Watched.log = {}, []
    monkeypatch.setattr(spill, "empty", watched_empty)
    monkeypatch.setattr(spill, "drop_resident", lambda: Watched.log.append(("drop", 0, 0)))
    order, _ = nesting.counting_order(key, 0, 50)
    Watched.names = {}
    np.testing.assert_array_equal(np.asarray(order), np.argsort(key, kind="stable"))
    low = high = None
    for name, first, last in Watched.log:
        if name == "drop":
            low = high = None
            continue
        low, high = min(first, low if low is not None else first), max(last, high if high is not None else last)
        assert low // spill.SPAN_ROWS == high // spill.SPAN_ROWS, f"order {low}..{high} written between two drops"
    assert sum(name == "order" for name, _, _ in Watched.log) > len(key) // 10  # several writes a piece


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk_rows", [7, 40, 1 << 20])
def test_bucketed_lexsort_is_the_lexsort(seed, chunk_rows, monkeypatch, tmp_path) -> None:
    """Out-of-order keys with many ties (codes from -1, a run of one primary value longer than a range, an empty
    and a one-row input), in ranges of one row, of ten and in one range; spilled."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", chunk_rows)
    rng = np.random.default_rng(seed)
    for n in (0, 1, int(rng.integers(50, 500))):
        primary = rng.integers(-(10**12), 10**12, n) // 10**10 * 10**10  # ~200 values, ties
        primary[n // 3 : n // 3 + 60] = primary[n // 3] if n else 0
        keys = [rng.integers(-1, 2, n), rng.integers(0, 3, n).astype(np.int8), primary]
        with spill.spilling(tmp_path, min_bytes=1):
            order = nesting.bucketed_lexsort(keys)
        np.testing.assert_array_equal(order, np.lexsort(keys))
        assert order.dtype == np.int32 and (n < 2 or spill.is_spilled(order))


def test_flatnonzero_hands_the_pages_back_between_chunks_of_both_passes(monkeypatch) -> None:
    """Counted, then written, a chunk at a time: a drop between chunks of each pass (the count read a whole column
    of a big table's kinds at once), not one per chunk of a few rows."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 10)
    monkeypatch.setattr(spill, "DROP_ROWS", 20)
    tested, drops = [], []
    monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(tested)))
    mask = np.arange(95) % 3 == 0

    def test(at: slice) -> np.ndarray:
        tested.append(at.start)
        return mask[at]

    got = spill.flatnonzero(len(mask), test, np.int64)
    np.testing.assert_array_equal(got, np.flatnonzero(mask))
    assert got.dtype == np.int64 and tested == list(range(0, 95, 10)) * 2
    assert drops == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]  # every 20 rows, and after the last chunk of each pass


def test_positions_where_passing_and_ascending_read_chunks(small_chunks) -> None:
    rng = np.random.default_rng(1)
    for mask in (rng.random(100) < 0.3, np.zeros(30, dtype=bool), np.ones(15, dtype=bool)):
        np.testing.assert_array_equal(nesting.positions_where(mask), np.flatnonzero(mask))
        assert nesting.positions_where(mask).dtype == nesting.position_dtype(len(mask))
        for rows in (None, 7):  # the mask's chunks at the default size and at another
            np.testing.assert_array_equal(
                nesting.positions_passing(len(mask), mask.__getitem__, rows), np.flatnonzero(mask)
            )
    values = np.sort(rng.integers(0, 50, 100))
    assert nesting.ascending(values) and nesting.ascending(values[:0])
    for at in (1, 7, 8, 99):  # a step down inside a chunk and at its edge
        down = values.copy()
        down[at] = down[at - 1] - 1
        assert not nesting.ascending(down), at
    steady = values.copy()  # equal neighbours: ascending, not strictly; at any chunk size
    steady[8] = steady[7]
    assert nesting.ascending(steady) and not nesting.ascending(steady, strictly=True)
    assert nesting.ascending(np.arange(100), strictly=True) and nesting.ascending(np.arange(100), True, rows=3)
    assert not nesting.ascending(steady, True, rows=1000)


def parents_of_a_forest(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random trees, parents listed after children as often as before (rows of an op table need not be in
    nesting order)."""
    rank = rng.permutation(n)  # a node's parent is an earlier node of this ranking
    parent = np.full(n, -1, dtype=np.int64)
    by_rank = np.argsort(rank)
    for r in range(1, n):
        if rng.random() < 0.9:
            parent[by_rank[r]] = by_rank[rng.integers(max(0, r - 5), r)]  # deep chains, not only a star
    return parent


def depths_by_walking(parent: np.ndarray) -> np.ndarray:
    depth = np.zeros(len(parent), dtype=np.int64)
    for i in range(len(parent)):
        j = parent[i]
        while j >= 0:
            depth[i] += 1
            j = parent[j]
    return depth


def test_dropping_hands_the_pages_back_after_each_piece(monkeypatch) -> None:
    done = []
    monkeypatch.setattr(spill, "drop_resident", lambda: done.append("drop"))
    for piece in spill.dropping(iter(["a", "b"])):
        done.append(piece)
    assert done == ["a", "drop", "b", "drop"]


@pytest.mark.parametrize("seed", range(4))
def test_stretches_keep_each_piece_within_a_stretch_and_every_position_in_order(seed, small_chunks) -> None:
    rng = np.random.default_rng(seed)
    stretch = spill.SPAN_ROWS
    ascending = np.sort(rng.choice(2000, size=int(rng.integers(1, 300)), replace=False))
    pieces = [ascending[at] for at in spill.stretches(ascending)]
    assert all(0 < len(p) <= spill.CHUNK_ROWS for p in pieces)
    assert all(p[0] // stretch == p[-1] // stretch for p in pieces)  # sparse rows: a piece per stretch they meet
    np.testing.assert_array_equal(np.concatenate(pieces), ascending)
    lanes = np.concatenate([ascending[::2], ascending[1::2]])  # an order by lane then time: two ascending runs
    pieces = [lanes[at] for at in spill.stretches(lanes)]
    assert all(p[0] // stretch == p[-1] // stretch and (np.diff(p) > 0).all() for p in pieces)
    np.testing.assert_array_equal(np.concatenate(pieces), lanes)
    within = rng.permutation(np.arange(stretch))  # any order within one stretch: a piece per chunk, not per run
    assert [(at.start, at.stop) for at in spill.stretches(within)] == [
        (at.start, at.stop) for at in spill.chunks(stretch)
    ]
    shuffled = rng.permutation(ascending)  # no stretch to keep, but every position once, in its order
    np.testing.assert_array_equal(np.concatenate([shuffled[at] for at in spill.stretches(shuffled)]), shuffled)
    assert list(spill.stretches(ascending[:0])) == []
    assert [(at.start, at.stop) for at in spill.stretches(within, 3)] == [  # a chunk of a caller's rows
        (at.start, at.stop) for at in spill.chunks(stretch, 3)
    ]


def test_samples_are_every_nth_position_a_stretch_at_a_time(monkeypatch) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 10)
    monkeypatch.setattr(spill, "SPAN_ROWS", 40)
    drops = []
    monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(drops)))
    slices = list(spill.sampled(1000, 7))
    np.testing.assert_array_equal(np.concatenate([np.arange(1000)[at] for at in slices]), np.arange(0, 1000, 7))
    assert all(at.stop - at.start <= spill.SPAN_ROWS for at in slices)
    assert len(drops) == len(slices) > 1


def test_small_chunks_hand_the_pages_back_once_per_drop_rows(monkeypatch) -> None:
    """A drop per DROP_ROWS rows of chunks, and after the last: a drop per chunk of a few rows cost more than the work
    (the deterministic tier spent a quarter of its time in drops)."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 10)
    monkeypatch.setattr(spill, "DROP_ROWS", 100)
    drops = []
    monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(drops)))
    got = spill.chunked(1005, np.int64, lambda at: np.arange(at.start, at.stop) * 3)
    np.testing.assert_array_equal(got, np.arange(1005) * 3)
    assert len(drops) == 11  # after 100, 200, ..., 1000 rows, and after the last 5
    drops.clear()
    monkeypatch.setattr(spill, "DROP_ROWS", 1)  # the production sizes: a chunk is always more than DROP_ROWS
    spill.chunked(1005, np.int64, lambda at: np.arange(at.start, at.stop))
    assert len(drops) == 101


def test_a_sparse_gather_hands_the_pages_back_after_each_stretch(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(spill, "SPAN_ROWS", 4000)
    stretch = spill.SPAN_ROWS
    drops = []
    with spill.spilling(tmp_path):
        values = spill.chunked(20 * stretch, np.float64, lambda at: np.arange(at.start, at.stop) * 0.5)
        rows = np.arange(0, len(values), 997)  # ~4 rows per stretch: one piece, and one drop, per stretch
        monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(drops)))
        got = spill.gathered(values, rows, np.float32)
        np.testing.assert_array_equal(got, (rows * 0.5).astype(np.float32))
        assert got.dtype == np.float32 and len(drops) == 20
        mask = np.zeros(len(values), dtype=bool)
        mask[rows] = True
        np.testing.assert_array_equal(spill.taken(values, mask), values[rows])  # a mask is a selection, not positions


@pytest.mark.parametrize("seed", range(4))
def test_depths_jumped_a_chunk_at_a_time_and_levels(seed, small_chunks) -> None:
    rng = np.random.default_rng(seed)
    parent = parents_of_a_forest(rng, int(rng.integers(1, 300)))
    depth = depths_by_walking(parent)
    got = nesting.nesting_depths(parent)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, depth)
    pieces = nesting.by_depth(parent)
    assert all(0 < len(p) <= spill.CHUNK_ROWS for p in pieces)
    span = spill.SPAN_ROWS  # a piece's pages: within one stretch of the table
    assert all(p[0] // span == p[-1] // span for p in pieces)
    assert all(depth[a[-1]] <= depth[b[0]] for a, b in zip(pieces, pieces[1:]))  # outermost first
    joined = np.concatenate([np.empty(0, dtype=np.int64), *pieces])
    want = np.concatenate([np.flatnonzero(depth == d) for d in range(1, int(depth.max()) + 1)] or [joined[:0]])
    np.testing.assert_array_equal(joined, want)


def test_a_scatter_hands_the_pages_back_after_each_stretch(monkeypatch) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 10)
    monkeypatch.setattr(spill, "SPAN_ROWS", 40)
    stretch = spill.SPAN_ROWS
    rows = np.concatenate([np.arange(0, 1000, 7), np.arange(3, 1000, 11)])  # two lanes' ascending rows
    out, drops = np.full(1000, -1), []
    monkeypatch.setattr(spill, "drop_resident", lambda: drops.append(len(drops)))
    spill.scattered(out, rows, rows * 2)
    want = np.full(1000, -1)
    want[rows] = rows * 2
    np.testing.assert_array_equal(out, want)
    assert len(drops) >= 2 * (1000 // stretch)  # a drop per stretch of each lane's rows
    monkeypatch.setattr(spill, "MAX_RUNS", 3)  # a chunk of 10 rows in random order goes back 3 times or more: sorted
    mixed = np.random.default_rng(0).permutation(np.repeat(np.arange(1000), 2))  # each row written twice
    out, want = np.full(1000, -1).view(Watched), np.full(1000, -1)
    Watched.names, Watched.log = {id(out): "out"}, []
    spill.scattered(out, mixed, np.arange(len(mixed)))
    Watched.names = {}
    want[mixed] = np.arange(len(mixed))  # the last write wins
    np.testing.assert_array_equal(np.asarray(out), want)
    writes = [(low, high) for _, low, high in Watched.log]
    assert len(writes) > len(mixed) // spill.CHUNK_ROWS  # chunks cut: sorted by row, then at the stretches
    assert all(low // stretch == high // stretch for low, high in writes)  # a write, then a drop: within a stretch


@pytest.mark.parametrize("n", [0, 1, 999, 1000])
def test_a_sample_is_every_nth_value(n, monkeypatch) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 10)
    monkeypatch.setattr(spill, "SPAN_ROWS", 40)
    values = np.arange(n) * 0.5
    got = spill.sample(values, 7)
    np.testing.assert_array_equal(got, values[::7])
    assert got.dtype == values.dtype


class Watched(np.ndarray):
    """An array whose positions read or written through an array of positions (a sparse gather or scatter, not a
    slice) are logged with the array's name, between the drops the test logs too."""

    log: list = []
    names: dict = {}

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._note(key)
        super().__setitem__(key, value)

    def _note(self, key) -> None:
        name = Watched.names.get(id(self))
        if name is not None and isinstance(key, np.ndarray) and key.dtype != bool and key.size:
            Watched.log.append((name, int(key.min()), int(key.max())))


def interleaved_lanes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nested intervals of 4 threads in one start order (a trace's op table): three busy lanes and a minor one with a
    few % of the rows, each lane's rows spread over the whole table; equal starts, twins, zero lengths."""
    lane = rng.choice(4, n, p=[0.33, 0.33, 0.31, 0.03]).astype(np.int32)
    start = np.sort(rng.integers(0, n // 2, n))
    end = start + rng.integers(0, 40, n) * (rng.random(n) < 0.9)
    twins = rng.choice(n - 1, n // 20, replace=False)
    lane[twins + 1], start[twins + 1], end[twins + 1] = lane[twins], start[twins], end[twins]
    keep = np.argsort(start, kind="stable")
    return lane[keep], start[keep], end[keep]


def test_nesting_gathers_and_scatters_a_stretch_of_each_big_column_between_drops(monkeypatch) -> None:
    """Between two drops, the sparse reads of the inputs and writes of the parents stay within one stretch of each
    (a touched page maps its whole 2 MB folio: gathers through pieces of the lane order mapped whole columns)."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 16)
    monkeypatch.setattr(spill, "SPAN_ROWS", 64)
    monkeypatch.setattr(nesting, "NESTING_PIECE", 32)
    stretch = spill.SPAN_ROWS
    lane, start, end = (x.view(Watched) for x in interleaved_lanes(np.random.default_rng(5), 3000))
    Watched.names = {id(lane): "lane", id(start): "start", id(end): "end"}
    Watched.log = []
    made = spill.empty

    def watched_empty(n, dtype):  # int64 columns: the parents, and the sorted starts and ends (only ever sliced)
        out = made(n, dtype)
        if n == len(lane) and np.dtype(dtype) == np.int64:
            out = out.view(Watched)
            Watched.names[id(out)] = "made"
        return out

    monkeypatch.setattr(spill, "empty", watched_empty)
    monkeypatch.setattr(spill, "drop_resident", lambda: Watched.log.append(("drop", 0, 0)))
    parent = nesting.enclosing_parents(lane, start, end)
    reach: dict[str, tuple[int, int]] = {}
    for name, low, high in Watched.log:
        if name == "drop":
            reach = {}
            continue
        was = reach.get(name, (low, high))
        reach[name] = min(was[0], low), max(was[1], high)
        assert reach[name][0] // stretch == reach[name][1] // stretch, f"{name}: {reach[name]} between two drops"
    assert {name for name, _, _ in Watched.log} >= {"lane", "start", "end", "made"}  # made: the parents
    Watched.names = {}
    plain = [np.asarray(x) for x in (lane, start, end)]
    np.testing.assert_array_equal(np.asarray(parent), innermost_container_by_stack(*plain))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk_rows", [5, 16, 1 << 20])
def test_parents_of_interleaved_lanes_spilled_are_the_walks(seed, chunk_rows, monkeypatch, tmp_path) -> None:
    """Many lanes in one start order, small chunks and pieces, spilled: the parents of the walk over the lexsort (and
    of the two-set merge when the table is cut in two)."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(nesting, "NESTING_PIECE", [3, 50, 1 << 18][seed % 3])
    rng = np.random.default_rng(seed)
    lane, start, end = interleaved_lanes(rng, int(rng.integers(200, 3000)))
    want = innermost_container_by_stack(lane, start, end)
    with spill.spilling(tmp_path, min_bytes=1):
        got = nesting.enclosing_parents(lane, start, end)
        assert got.dtype == np.int64 and spill.is_spilled(got)
        np.testing.assert_array_equal(got, want)
        order, lane_s, start_s, end_s = nesting.nesting_sorted(lane, start, end)
        np.testing.assert_array_equal(order, np.lexsort((-end, start, lane)))
        for column, sorted_column in ((lane, lane_s), (start, start_s), (end, end_s)):
            np.testing.assert_array_equal(sorted_column, column[order])
        split = len(lane) // 3
        second = np.argsort(start[split:][::-1], kind="stable")  # the second set in its own start order
        both = [np.concatenate([x[:split], x[split:][::-1][second]]) for x in (lane, start, end)]
        np.testing.assert_array_equal(
            nesting.enclosing_parents_of_two(*both, split), innermost_container_by_stack(*both)
        )

"""The C analysis kernels give exactly what their numpy references give, on clean and broken input."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from profiler.kernels import nesting
from profiler.export import chrome_trace

needs_nesting_kernel = pytest.mark.skipif(nesting._kernel is None, reason="C nesting kernel not built")
needs_rows_kernel = pytest.mark.skipif(chrome_trace._trace_rows is None, reason="C trace-row kernel not built")


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
                    d = int(rng.integers(0, 5))          # an end of the wrong descriptor
                code.append(2 * d + 1)
            else:
                d = int(rng.integers(0, 5))
                stack.append(d)
                code.append(2 * d)
            group.append(g)
            t.append(now)
        for d in reversed(stack):                        # close what is still open
            now += 1
            group.append(g)
            code.append(2 * d + 1)
            t.append(now)
    group, code, t = map(np.asarray, (group, code, t))
    if broken:                                           # lanes cut at both ends, events dropped
        keep = np.ones(len(code), bool)
        for g in range(n_groups):
            rows = np.flatnonzero(group == g)
            keep[rows[: int(rng.integers(0, 5))]] = False
            keep[rows[len(rows) - int(rng.integers(0, 5)):]] = False
        keep &= rng.random(len(code)) > 0.02
        group, code, t = group[keep], code[keep], t[keep]
    mix = np.argsort(t, kind="stable")                   # lanes interleaved by time
    return group[mix] * 7 + 3, code[mix], t[mix]


@needs_nesting_kernel
@pytest.mark.parametrize("broken", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_nesting_kernel_matches_numpy(seed: int, broken: bool) -> None:
    group, code, t = random_events(np.random.default_rng(seed), n_groups=4, n=3000, broken=broken)
    c = nesting.nest_spans(group, code, t)
    ref = nesting.nest_spans(group, code, t, use_kernel=False)
    for field in ("begin", "dur", "level", "self_ns"):
        np.testing.assert_array_equal(getattr(c, field), getattr(ref, field), err_msg=field)
    assert c.unmatched == ref.unmatched
    if not broken:
        assert c.unmatched == 0 and len(c.begin) == len(code) // 2


def test_nesting_numbers_on_a_known_lane() -> None:
    """B0 B1 E1 B1 E1 E0 with times 0, 10, 30, 40, 45, 100: the outer span's self time is 100 - 25."""
    code = np.array([0, 2, 3, 2, 3, 1])
    t = np.array([0, 10, 30, 40, 45, 100])
    for use_kernel in (True, False):
        s = nesting.nest_spans(np.zeros(6, np.int64), code, t, use_kernel=use_kernel)
        assert s.begin.tolist() == [0, 1, 3] and s.dur.tolist() == [100, 20, 5]
        assert s.level.tolist() == [0, 1, 1]
        assert s.self_ns.tolist() == [75, 20, 5]


def row_text(*args, use_kernel: bool, buffer=None) -> bytes:
    return b"".join(bytes(piece) for piece in chrome_trace.row_texts(*args, buffer=buffer, use_kernel=use_kernel))


@needs_rows_kernel
@pytest.mark.parametrize("with_dur", [True, False])
def test_trace_row_kernel_matches_numpy(with_dur: bool) -> None:
    rng = np.random.default_rng(1)
    heads = [b'{"ph":"X","pid":0,"tid":%d,"name":"op %d","ts":' % (i, i) for i in range(7)]
    blob = b"".join(heads)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in heads])]).astype(np.int64)
    n = 20_000
    key = rng.integers(0, len(heads), n).astype(np.int64)
    ts = rng.integers(-10**6, 10**13, n).astype(np.int64)
    ts[:5] = [0, 1, 999, 1000, -1]
    dur = rng.integers(0, 10**9, n).astype(np.int64) if with_dur else None
    order = np.argsort(key, kind="stable").astype(np.int64)
    args = (blob, offsets, key, ts, dur, order)
    small = np.empty(4096, dtype=np.uint8)               # many refills of a small buffer
    text = row_text(*args, use_kernel=True, buffer=small)
    assert text == row_text(*args, use_kernel=False)
    events = json.loads(b"[" + text.rstrip(b",\n") + b"]")
    assert len(events) == n
    assert [e["ts"] for e in events[:50]] == [round(v / 1000, 3) for v in ts[order[:50]]]
    assert [e["tid"] for e in events] == key[order].tolist()
    if with_dur:
        assert [e["dur"] for e in events[-50:]] == [round(v / 1000, 3) for v in dur[order[-50:]]]


@needs_rows_kernel
def test_every_int64_time_and_duration_fits_the_trace_row() -> None:
    """A trace longer than 2.8 h or a span longer than 100 s used to be a ValueError; every int64 fits now,
    written the same by the C kernel and the numpy reference."""
    extremes = np.array([-2**63, 2**63 - 1, 10**17, 150 * 10**9, -1, 0], np.int64)
    args = (b"{", np.array([0, 1], np.int64), np.zeros(len(extremes), np.int64), extremes, extremes[::-1].copy(), None)
    text = row_text(*args, use_kernel=False)
    if chrome_trace._trace_rows is not None:
        assert row_text(*args, use_kernel=True) == text
    assert b"-9223372036854775.808" in text and b"9223372036854775.807" in text and b"150000000.000" in text


@pytest.mark.parametrize("max_dense_keys", [1 << 24, 1])        # counting pass, and the np.unique path
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
    ref = (df.assign(device=df["device"].astype(str))
           .groupby(["device", "name"], sort=True, observed=True)
           .agg(n=("dur", "size"), s=("dur", "sum"), lo=("dur", "min"), hi=("dur", "max"), first=("other", "first"))
           .reset_index())
    assert list(g.values(df["device"])) == list(ref["device"]) and list(g.values(df["name"])) == list(ref["name"])
    assert list(g.size) == list(ref["n"]) and list(g.sum(dur)) == list(ref["s"])
    assert list(g.min(dur)) == list(ref["lo"]) and list(g.max(dur)) == list(ref["hi"])
    assert list(g.values(df["other"])) == list(ref["first"].astype(str))

"""The timeline model built a chunk of rows at a time (profiler/export/timeline_model.py: the row order, the
launch flows, the merged blocks) is the one of the whole rows, exactly, on real Kineto captures: the order
the sort of (lane, start, longest first, row) gives, the flows the join of each correlation's first host and
first device op gives (as a pandas merge made them), whatever the chunk size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.steps import ensure_steps
from profiler.export.timeline_model import (
    Lanes,
    _first_of_each_id,
    _keys,
    flow_points,
    lane_codes,
    merge_blocks,
    op_block,
    rows_lane,
    span_block,
    step_block,
    stepped,
    thread_order,
    timeline_events,
)
from profiler.importers.kineto import read_kineto_trace

CAPTURES = ["sampled_rank-0", "diff_control", "nccl_data", "alexnet"]


def _run(captures, capture: str):
    return ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_row_order_in_buckets_is_the_sort_of_lane_start_and_longest_first(captures, capture: str) -> None:
    ev = timeline_events(_run(captures, capture))
    codes, _ = lane_codes(ev.complete.specs)
    lane = codes[ev.complete.key]
    ts, dur = ev.complete.ts_ns, ev.complete.dur_ns
    expected = np.lexsort((-dur, ts, lane))
    assert np.array_equal(ev.complete_order, expected)
    for chunk_rows in (7, 64, len(ts) // 3 + 1):  # many buckets, and tied starts across their cuts
        assert np.array_equal(
            thread_order(rows_lane(codes, ev.complete.key, chunk_rows), ts, dur, chunk_rows), expected
        )
    assert len(expected) > 500 and not np.array_equal(expected, np.arange(len(ts)))  # not vacuous


def test_the_row_order_when_lane_and_start_do_not_fit_one_int64() -> None:
    rng = np.random.default_rng(7)
    n = 5000
    lane = rng.integers(0, 300, n)
    ts = rng.choice(np.array([-(2**62), -5, 0, 3, 2**62]), n) + rng.integers(0, 4, n)  # starts rounded together
    dur = rng.integers(0, 3, n)
    for chunk_rows in (13, 1000, n):
        assert np.array_equal(thread_order(lane, ts, dur, chunk_rows), np.lexsort((-dur, ts, lane)))
        assert np.array_equal(thread_order(lane, ts, None, chunk_rows), np.lexsort((ts, lane)))


def _merged_flows(run) -> pd.DataFrame:
    """The launch flows as a pandas merge of the host and device ops (the first op of each correlation)."""
    ops = run.ops.loc[(run.ops["correlation"] >= 0).to_numpy(), ["correlation", "device", "stream", "start_ns", "step"]]
    host = ops[ops["device"] == "cpu"].drop_duplicates("correlation")
    dev = ops[ops["device"] != "cpu"].drop_duplicates("correlation")
    return host.merge(dev, on="correlation", suffixes=("_h", "_d"))


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("as_text", [False, True])
def test_flows_joined_in_chunks_are_the_merge_of_host_and_device_ops(captures, capture: str, as_text: bool) -> None:
    """Whatever the chunk size, and with device and stream as text (another source's op table) too."""
    run = _run(captures, capture)
    if as_text:
        run.ops = run.ops.assign(device=run.ops["device"].astype(object), stream=run.ops["stream"].astype(object))
    m = _merged_flows(run)
    for chunk_rows in (5, 1000, len(run.ops)):
        lanes = Lanes(run)
        flows = flow_points(run, lanes, chunk_rows)
        assert np.array_equal(flows.flow_id, m["correlation"].to_numpy())
        assert np.array_equal(flows.host_ns, m["start_ns_h"].to_numpy()) and np.array_equal(
            flows.device_ns, m["start_ns_d"].to_numpy()
        )
        assert np.array_equal(flows.step, m["step_h"].to_numpy())
        table = np.array(flows.lanes).reshape(-1, 2)
        host = [lanes.lane(str(d), str(s)) for d, s in zip(m["device_h"], m["stream_h"])]
        device = [lanes.lane(str(d), str(s)) for d, s in zip(m["device_d"], m["stream_d"])]
        assert [tuple(p) for p in table[flows.host_lane].tolist()] == host
        assert [tuple(p) for p in table[flows.device_lane].tolist()] == device
        points = [pair for launch in zip(host, device) for pair in launch]
        assert list(dict.fromkeys(points)) == flows.lanes  # in the order the points meet them
    if capture != "sampled_rank-0":
        assert len(m) > 50  # not vacuous: a GPU capture's launches


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 7, 1000])
def test_the_first_row_of_each_id_is_uniques_with_or_without_a_sort(chunk_rows: int) -> None:
    """Ids ascending along the rows are taken as they are (a trace's launches, usually), others through a sort:
    both give what np.unique's first indices give."""
    rng = np.random.default_rng(chunk_rows)
    shuffled, ascending = rng.integers(-1, 40, 200), np.cumsum(rng.integers(1, 3, 200))
    for correlation, rows in (
        (shuffled, np.flatnonzero(shuffled % 3 == 0)),
        (shuffled, np.arange(200)),
        (ascending, np.arange(0, 200, 2)),  # taken as they are
        (shuffled, np.arange(0)),
    ):
        ids, first = np.unique(correlation[rows], return_index=True)
        found = _first_of_each_id(correlation, rows, chunk_rows)
        assert np.array_equal(found[0], ids) and np.array_equal(found[1], rows[first])


@pytest.mark.parametrize("capture", ["alexnet", "nccl_data"])
def test_blocks_merged_in_chunks_are_the_blocks_concatenated(captures, capture: str) -> None:
    run = _run(captures, capture)
    lanes = Lanes(run)
    blocks = [stepped(b, run) for b in (step_block(run, lanes), span_block(run, lanes), op_block(run, lanes))]
    whole = merge_blocks(blocks, with_dur=True)
    chunked = merge_blocks(blocks, with_dur=True, chunk_rows=3)
    heads = np.cumsum([0] + [len(b.specs) for b in blocks[:-1]])
    expected_key = np.concatenate([b.key + h for b, h in zip(blocks, heads)])
    for got in (whole, chunked):
        assert got.key.dtype == np.int32 and got.step.dtype == np.int32
        assert np.array_equal(got.key, expected_key)
        assert np.array_equal(got.ts_ns, np.concatenate([b.ts_ns for b in blocks]))
        assert np.array_equal(got.dur_ns, np.concatenate([b.dur_ns for b in blocks]))
        assert np.array_equal(got.step, np.concatenate([b.step for b in blocks]))
    assert len(whole.key) > 100


@pytest.mark.parametrize("capture", ["alexnet", "sampled_rank-0"])
def test_op_heads_numbered_in_chunks_are_the_factorized_combinations(captures, capture: str) -> None:
    ops = _run(captures, capture).ops
    columns = [ops[c] for c in ("device", "stream", "category", "name", "op_type")]
    combined = np.zeros(len(ops), np.int64)
    for col in columns:
        codes, uniques = pd.factorize(col)
        combined = combined * (len(uniques) + 1) + codes
    expected, firsts = pd.factorize(combined)
    first_row = [int(np.flatnonzero(combined == v)[0]) for v in firsts]
    expected_combos = [tuple(col.iloc[i] for col in columns) for i in first_row]
    for chunk_rows in (3, 100, len(ops)):
        key, combos = _keys(*columns, chunk_rows=chunk_rows)
        assert np.array_equal(key, expected) and combos == expected_combos
    assert len(expected_combos) > 20  # not vacuous: many heads, met across chunks

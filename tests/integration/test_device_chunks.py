"""The device time breakdown, its idle gaps and the GPU summary, computed a chunk of executions (kernels) at a time
with what they need carried from chunk to chunk (analysis/device_time.py, analysis/gpu_summary.py), are the
figures of the whole computation (the unions, the gaps table and the float sums as they were computed whole),
exactly, for any chunk size, on real captures: Kineto GPU traces and an Ascend job of several streams."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis import device_time
from profiler.analysis import gpu_summary as summary
from profiler.analysis.device_time import IDLE_CAUSES, device_executions
from profiler.analysis.kernels import kernel_rows
from profiler.analysis.launches import launches
from profiler.analysis.tensor_cores import tensor_core_kernels
from profiler.importers.ascend import read_ascend_job, to_run
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.intervals import covered_ns, union
from profiler.model import DEVICE_WORK_CATEGORIES

GPU_TRACES = ["sampled_rank-0", "nccl_data", "alexnet", "diff_test"]


def _kineto_ops(captures, capture: str) -> pd.DataFrame:
    return read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops


def _shuffled(ex: pd.DataFrame) -> pd.DataFrame:
    """The executions out of start order (sorted where they are read), as a table of any other source may be."""
    return ex.iloc[np.random.default_rng(0).permutation(len(ex))].reset_index(drop=True)


def _data_wait(ex: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Made-up data-wait intervals over a third of the executions' time, so that gaps have every cause."""
    start = np.sort(ex["start_ns"].to_numpy())[::3]
    return start[:-1], start[:-1] + np.diff(start) // 2


def _whole_gaps(ex: pd.DataFrame, calls: pd.DataFrame, data_wait, per_stream: bool) -> pd.DataFrame:
    """The gaps table as it was made whole: every lane's executions sorted at once, merged, the gaps between."""
    lanes = ex["device"].array.codes.astype(np.int64)
    if per_stream:
        lanes = lanes * len(ex["stream"].array.categories) + ex["stream"].array.codes
    start, end = ex["start_ns"].to_numpy(), ex["end_ns"].to_numpy()
    order = np.lexsort((start, lanes))
    s, e, k = start[order], end[order], lanes[order]
    reach = np.empty(len(e), dtype=np.int64)
    edges = [0, *(np.flatnonzero(k[1:] != k[:-1]) + 1), len(k)]
    for lo, hi in zip(edges[:-1], edges[1:]):
        np.maximum.accumulate(e[lo:hi], out=reach[lo:hi])
    new = np.ones(len(s), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > reach[:-1])
    head = np.flatnonzero(new)
    last = np.append(head[1:], len(s)) - 1
    first, m_start, m_end, m_lane = order[head], s[head], reach[last], k[head]
    same = m_lane[1:] == m_lane[:-1]
    g_start, g_end, ends = m_end[:-1][same], m_start[1:][same], first[1:][same]
    launched = device_time._launch_time(ex["correlation"].to_numpy()[ends], device_time._launch_lookup(calls))
    data, held = (
        union(*data_wait),
        union(*(np.concatenate(p) for p in zip(data_wait, device_time._sync_shadows(calls)))),
    )
    return pd.DataFrame(
        {
            "device": ex["device"].to_numpy(dtype=object)[ends],
            "stream": ex["stream"].to_numpy(dtype=object)[ends] if per_stream else np.full(len(ends), "", object),
            "start_ns": g_start,
            "end_ns": g_end,
            **device_time._causes(g_start, g_end, launched, data, held),
        }
    )


def _executions(captures, capture: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    if capture == "ascend":
        ops = to_run(read_ascend_job(captures / "ascend" / "JOB3")).ops
    else:
        ops = _kineto_ops(captures, capture)
    ex = device_executions(ops)
    return ex, device_time._runtime_calls(ops, ex)


@pytest.mark.parametrize("capture", [*GPU_TRACES, "ascend"])
def test_idle_gaps_found_a_chunk_at_a_time_are_the_whole_tables(captures, capture) -> None:
    ex, calls = _executions(captures, capture)
    for table in (ex, _shuffled(ex)):
        data_wait = _data_wait(table)
        for per_stream in (False, True):
            whole = _whole_gaps(table, calls, data_wait, per_stream)
            assert len(whole) > 20 and (whole[[f"{c}_ns" for c in IDLE_CAUSES]].sum() > 0).sum() >= 2  # not vacuous
            for rows in (5, 64, len(table) // 3 + 1, len(table)):
                gaps = device_time._gaps(table, calls, data_wait, per_stream, rows)
                pd.testing.assert_frame_equal(gaps, whole, check_exact=True)
        per_device = _whole_gaps(table, calls, data_wait, per_stream=False)
        sums = per_device.groupby("device")[[f"{c}_ns" for c in IDLE_CAUSES]].sum()  # as the breakdown summed them
        devices = table["device"].array.categories
        for rows in (3, len(table)):
            by_device = device_time._idle_by_device(table, calls, data_wait, rows)
            assert {devices[code]: ns for code, ns in by_device.items()} == {
                device: [int(v) for v in values] for device, values in sums.iterrows()
            }


@pytest.mark.parametrize("capture", [*GPU_TRACES, "ascend"])
def test_device_figures_taken_a_chunk_at_a_time_are_the_whole_unions(captures, capture) -> None:
    ex, _ = _executions(captures, capture)
    start = np.sort(ex["start_ns"].to_numpy())
    windows = union(start[::50], start[::50] + 2_000_000)  # made-up steps over part of the run
    for table in (ex, _shuffled(ex)):
        expected = {}
        for device, mine in table.groupby("device", observed=True):
            s, e, category = (mine[c].to_numpy() for c in ("start_ns", "end_ns", "category"))
            lengths = {"busy": _length(s, e)}
            for span, names in device_time._SPANS.items():
                lengths[span] = _length(s[np.isin(category, names)], e[np.isin(category, names)])
            inside = int(covered_ns(s, e, *windows).sum())
            expected[device] = (lengths, inside, int(e.max() - s.min()), len(mine), mine["stream"].nunique())
        assert all(lengths["busy"] > 0 and inside > 0 for lengths, inside, *_ in expected.values())  # not vacuous
        for rows in (5, 64, len(table) // 3 + 1, len(table)):
            figures = device_time._device_figures(table, windows, rows)
            got = {
                table["device"].array.categories[code]: (
                    {"busy": f.busy.totals()[0], **{span: u.totals()[0] for span, u in f.spans.items()}},
                    f.busy.totals()[1],
                    f.last - f.first,
                    f.executions,
                    len(f.streams),
                )
                for code, f in figures.items()
            }
            assert got == expected


def _length(start: np.ndarray, end: np.ndarray) -> int:
    s, e = union(start, end)
    return int((e - s).sum())


def _whole_summary(ops, rows, launched, window) -> dict[str, float]:
    """The GPU summary's figures of one device's kernels as they were computed whole (float sums in one pass)."""
    start = ops["start_ns"].to_numpy()[rows]
    end = start + ops["dur_ns"].to_numpy()[rows]
    dur = ops["dur_ns"].to_numpy()[rows]
    clipped = np.maximum(np.minimum(end, window[1]) - np.maximum(start, window[0]), 0).astype(np.float64)
    occupancy = ops["occupancy_pct"].to_numpy()[rows]
    known = np.isfinite(occupancy) & (occupancy >= 0) & (clipped > 0)
    tensor_cores = tensor_core_kernels(ops["name"].iloc[rows])
    launcher = launched.launcher[rows]
    by_op = launcher >= 0
    has_eligible_child = np.zeros(len(ops), dtype=bool)
    has_eligible_child[launched.parent[np.flatnonzero(launched.tc_eligible & (launched.parent >= 0))]] = True
    bottom = launched.tc_eligible & ~has_eligible_child
    blocks = ops["blocks_per_sm"].to_numpy()[rows]
    return {
        "utilization_pct": summary._pct(covered_ns(start, end, [window[0]], [window[1]])[0], window[1] - window[0]),
        "sm_efficiency_pct": summary._sm_efficiency(start, end, blocks, window),
        "achieved_occupancy_pct": float((occupancy[known] * clipped[known]).sum() / clipped[known].sum())
        if known.any()
        else float("nan"),
        "tensor_core_pct": summary._pct(clipped[tensor_cores].sum(), clipped.sum()),
        "tc_eligible_pct": summary._pct(dur[by_op][bottom[launcher[by_op]]].sum(), dur[by_op].sum()),
    }


@pytest.mark.parametrize("capture", GPU_TRACES)
def test_gpu_summary_read_a_chunk_of_kernels_at_a_time_is_the_whole_one_bit_for_bit(captures, capture, tmp_path):
    ops = _kineto_ops(captures, capture)
    launched = launches(ops)
    rows = np.flatnonzero(kernel_rows(ops))
    start = ops["start_ns"].to_numpy()[rows]
    window = (int(np.percentile(start, 10)), int(np.percentile(start, 90)))  # kernels cut by both of its edges
    expected = _whole_summary(ops, rows, launched, window)
    assert expected["achieved_occupancy_pct"] > 0 and expected["tc_eligible_pct"] >= 0  # not vacuous
    tensor_cores = tensor_core_kernels(ops["name"].iloc[rows])
    bottom = summary._innermost_eligible(launched, len(ops))
    assert bottom.any() and (bottom != launched.tc_eligible).any()  # not vacuous: eligible ops with eligible children
    for rows_at_a_time in (5, 64, len(rows) // 3 + 1, len(rows)):
        with spill.spilling(tmp_path, min_bytes=1):  # the occupancy's terms in a spill file
            got = summary._device_summary(ops, rows, tensor_cores, window, launched, bottom, rows_at_a_time)
        assert np.array(list(got.values())).tobytes() == np.array(list(expected.values())).tobytes()


@pytest.mark.parametrize("capture", GPU_TRACES)
@pytest.mark.parametrize("as_text", [False, True])
def test_the_executions_gathered_column_by_column_are_the_row_filter(
    captures, capture: str, as_text: bool, monkeypatch
) -> None:
    """device_executions (each column gathered on its own, a categorical's unused categories dropped by counting,
    the work rows found a chunk of 997 ops at a time) equals the row filter of the op table it replaced, with
    pandas' remove_unused_categories; the text columns of another source too, and a missing device."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 997)
    ops = _kineto_ops(captures, capture)
    if as_text:
        ops = ops.assign(**{c: ops[c].astype(object) for c in ("device", "stream", "category", "name")})
        ops.loc[ops.index[-1], "device"] = None  # off the host, as `!= "cpu"` says
    rows = np.flatnonzero((ops["device"] != "cpu").to_numpy() & ops["category"].isin(DEVICE_WORK_CATEGORIES).to_numpy())
    expected = ops.iloc[rows]
    found = device_executions(ops)
    assert len(found) == len(rows) > 50 and np.array_equal(found["row"], rows)
    for column in ("device", "stream", "category", "name"):
        want = (
            pd.Categorical(expected[column].astype(str))
            if as_text
            else expected[column].array.remove_unused_categories()
        )
        assert found[column].array.equals(want) and list(found[column].cat.categories) == list(want.categories)
    assert np.array_equal(found["start_ns"], expected["start_ns"])
    assert np.array_equal(found["end_ns"], expected["start_ns"] + expected["dur_ns"])
    assert np.array_equal(found["correlation"], expected["correlation"])

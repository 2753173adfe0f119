"""The analysis of a spilled run (profiler/spill.py) keeps its own per-row arrays in spill files and works through
the op table a window of rows at a time, with the figures of the whole table, exactly, on real Kineto captures."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis import float64
from profiler.analysis import launches as launches_module
from profiler.analysis import step_activity as step_activity_module
from profiler.analysis import step_trace as step_trace_module
from profiler.analysis.device_time import device_executions
from profiler.analysis.gpu_summary import sm_filled_ns
from profiler.analysis.launches import device_times, launches
from profiler.analysis.ops import op_rows, op_windows
from profiler.analysis.step_activity import comm_split, step_activity
from profiler.analysis.step_trace import inferred_boundaries, op_counts
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels import grouping, nesting
from profiler.kernels.grouping import is_in
from profiler.kernels.intervals import SettledUnion, union


def test_launches_and_device_times_of_a_spilled_run_are_kept_in_spill_files(captures, tmp_path) -> None:
    trace = captures / "kineto" / "sampled_rank-0.json.gz"
    ops = read_kineto_trace(trace).ops
    plain = launches(ops)
    assert plain is not None
    plain_times = device_times(ops, plain)
    with spill.spilling(tmp_path, min_bytes=1):
        ops = read_kineto_trace(trace).ops
        spilled = launches(ops)
        assert spilled is not None
        times = device_times(ops, spilled)
    for kept, expected in ((spilled, plain), (times, plain_times)):
        for name, values in vars(kept).items():
            assert spill.is_spilled(values), name
            assert not spill.is_spilled(getattr(expected, name))
            np.testing.assert_array_equal(values, getattr(expected, name))
    assert (spilled.launcher >= 0).sum() > 100 and (times.device_total_ns > 0).sum() > 100  # not vacuous


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data", "alexnet"])
def test_launches_made_a_chunk_at_a_time_are_those_of_the_whole_table(captures, capture, monkeypatch) -> None:
    """Launches and device times made 97 rows at a time, their host nesting ordered by counting lanes (the op table
    is in start order), equal those made in one chunk with the lexsort's order."""
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    with monkeypatch.context() as whole:
        whole.setattr(nesting, "LANE_RANGE", 0)  # no lanes counted: every nesting order is the lexsort
        whole.setattr(spill, "CHUNK_ROWS", len(ops))
        want = launches(ops)
        want_times = device_times(ops, want)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 97)
    counted = []
    monkeypatch.setattr(nesting, "counting_order", lambda *a: counted.append(1) or COUNTING_ORDER(*a))
    got = launches(ops)
    assert counted  # the counting path was taken
    for kept, expected in ((got, want), (device_times(ops, got), want_times)):
        for name, values in vars(kept).items():
            np.testing.assert_array_equal(values, getattr(expected, name), err_msg=name)
    assert (want.launcher >= 0).sum() > 50 and (want.parent >= 0).sum() > 200 and want.tc_eligible.sum() > 50


COUNTING_ORDER = nesting.counting_order


@pytest.mark.parametrize("ordered", [True, False])
def test_runtime_calls_are_found_by_correlation_id(ordered, monkeypatch) -> None:
    """The row of the runtime call with each row's correlation id, of two calls with one id the first, -1 when no
    call has it: with the calls in id order (a trace's) and out of it."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    rng = np.random.default_rng(5)
    correlation = rng.integers(-1, 40, 300)
    if ordered:
        correlation = np.sort(correlation)
    runtime = rng.random(300) < 0.4
    first: dict[int, int] = {}
    for row in np.flatnonzero(runtime).tolist():
        first.setdefault(int(correlation[row]), row)
    ids, calls = launches_module._calls_by_id(correlation, runtime)
    got = launches_module._call_with_id(correlation, ids, calls)
    assert got.tolist() == [first.get(int(c), -1) for c in correlation]
    assert len(set(correlation[runtime].tolist())) < runtime.sum()  # not vacuous: ids shared by calls


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data", "alexnet"])
def test_unions_merged_a_chunk_at_a_time_are_the_whole_ones(captures, capture) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    start = ops["start_ns"].to_numpy()
    end = start + ops["dur_ns"].to_numpy()
    device = (ops["device"] != "cpu").to_numpy()
    shuffled = np.random.default_rng(0).permutation(len(ops))  # not in start order: sorted first
    for s, e in ((start, end), (start[device], end[device]), (start[shuffled], end[shuffled])):
        whole = union(s, e, chunk=len(s))
        assert 0 < len(whole[0]) < len(s)  # not vacuous: intervals merged
        for chunk in (1, 7, len(s) // 3 + 1):
            merged = union(s, e, chunk=chunk)
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(merged, whole))


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_control", "alexnet"])
def test_sm_filled_time_swept_a_block_at_a_time_is_the_one_sweeps_bit_for_bit(captures, capture) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    kernels = ops[(ops["category"] == "compute").to_numpy() & (ops["device"] != "cpu").to_numpy()]
    start = kernels["start_ns"].to_numpy()
    end = start + kernels["dur_ns"].to_numpy()
    blocks = kernels["blocks_per_sm"].to_numpy()
    assert np.isfinite(blocks).sum() > 50  # not vacuous: kernels with the figure
    edges = np.linspace(start.min() - 10, end.max() + 10, 40).astype(np.int64)
    w_start, w_end = edges[:-1], edges[1:]
    whole = sm_filled_ns(start, end, blocks, w_start, w_end, chunk=len(start))
    assert whole.sum() > 0
    for chunk in (1, 5, len(start) // 4 + 1):
        assert sm_filled_ns(start, end, blocks, w_start, w_end, chunk=chunk).tobytes() == whole.tobytes()


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data"])
def test_rows_gathered_a_window_at_a_time_are_the_row_filters(captures, capture) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    columns = ["device", "name", "start_ns", "dur_ns", "blocks_per_sm"]
    for rows in (np.flatnonzero((ops["device"] != "cpu").to_numpy()), np.arange(len(ops)), np.arange(0)):
        whole = ops[columns].iloc[rows]
        for window_rows in (1, 13, len(ops) // 3 + 1, len(ops)):
            pd.testing.assert_frame_equal(op_rows(ops, columns, rows, window_rows), whole, check_exact=True)
    assert len(np.flatnonzero((ops["device"] != "cpu").to_numpy())) > 100  # not vacuous


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_control", "nccl_data"])
def test_the_step_trace_read_a_window_of_ops_at_a_time_is_the_whole_ones(captures, monkeypatch, capture) -> None:
    run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    steps = run.steps.sort_values("step", kind="stable").reset_index(drop=True)

    def figures() -> tuple[np.ndarray, ...]:  # the step trace's figures read from the ops
        return (*inferred_boundaries(steps, run.spans, run.ops), op_counts(run.ops, steps))

    monkeypatch.setattr(step_trace_module, "op_windows", functools.partial(op_windows, rows=len(run.ops)))
    whole = figures()
    assert (whole[0] >= 0).sum() >= 2 and (whole[1] >= 0).sum() >= 2 and whole[2].sum() > 100  # not vacuous
    for rows in (7, len(run.ops) // 3 + 1):
        monkeypatch.setattr(step_trace_module, "op_windows", functools.partial(op_windows, rows=rows))
        assert all(np.array_equal(a, b) for a, b in zip(figures(), whole))


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_control"])
def test_float64_ops_read_a_window_of_input_types_at_a_time_are_the_whole_ones(captures, monkeypatch, capture) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    monkeypatch.setattr(float64, "TYPES_WINDOW", len(ops))
    whole = float64.float64_charged(ops)
    assert whole.sum() > 100  # not vacuous: float64 ops and what they run
    for rows in (7, len(ops) // 3 + 1):
        monkeypatch.setattr(float64, "TYPES_WINDOW", rows)
        np.testing.assert_array_equal(float64.float64_charged(ops), whole)


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data"])
def test_memberships_from_the_codes_are_isin(captures, capture) -> None:
    category = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops["category"]
    for categories in (("compute", "comm"), ("host", "user", "python"), ("nothing",)):
        where = is_in(category, categories)
        np.testing.assert_array_equal(where, category.isin(categories).to_numpy())
        np.testing.assert_array_equal(is_in(category.astype(str), categories), where)  # not categorical
    assert is_in(category, ("compute",)).sum() > 50  # not vacuous


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data", "alexnet"])
def test_a_union_settled_piece_by_piece_is_the_whole_union(captures, capture) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    start = ops["start_ns"].to_numpy()
    end = start + ops["dur_ns"].to_numpy()
    whole = union(start, end)
    assert 0 < len(whole[0]) < len(ops)  # not vacuous: intervals merged
    for rows in (1, 7, len(ops) // 3 + 1):
        merged, settled = SettledUnion(), []
        for at in spill.chunks(len(ops), rows):
            later = int(start[at.stop]) if at.stop < len(ops) else None  # no later piece starts before it
            settled.append(merged.add(start[at], end[at], later))
        assert all(np.array_equal(np.concatenate(piece), part) for piece, part in zip(zip(*settled), whole))


@pytest.mark.parametrize("capture", ["sampled_rank-0", "nccl_data", "diff_test", "cpu_only"])
def test_step_activity_read_a_chunk_of_ops_at_a_time_is_the_whole_ones(captures, monkeypatch, capture) -> None:
    run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    launched = launches(run.ops)

    def activity(ops: pd.DataFrame, steps: pd.DataFrame) -> list[str]:  # step activity and comm split
        return [step_activity(ops, run.spans, steps).to_csv(), comm_split(ops, run.spans, steps).to_csv()]

    def tables() -> list[str]:  # the plugin's steps from the run's and from none (the framework ops' span), activity
        steps = step_activity_module.device_aware_steps(run.ops, run.steps, launched)
        no_steps = step_activity_module.device_aware_steps(run.ops, run.steps.iloc[:0], launched)
        return [steps.to_csv(), no_steps.to_csv(), *activity(run.ops, steps)]

    monkeypatch.setattr(step_activity_module, "CHUNK_ROWS", len(run.ops))
    whole = tables()
    steps = step_activity_module.device_aware_steps(run.ops, run.steps, launched)
    assert len(steps) >= 1 and all(len(table.splitlines()) > 1 for table in whole)  # not vacuous
    shuffled = run.ops.iloc[np.random.default_rng(0).permutation(len(run.ops))]  # out of start order: one chunk
    assert activity(shuffled, steps) == whole[2:]
    for rows in (61, len(run.ops) // 3 + 1):
        monkeypatch.setattr(step_activity_module, "CHUNK_ROWS", rows)
        assert tables() == whole


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_control"])
def test_text_matched_a_window_of_rows_at_a_time_is_the_whole_columns(captures, monkeypatch, capture) -> None:
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    columns = [ops["dtypes"], ops["shapes"], ops["name"].astype(str).to_numpy(dtype=object)]  # text, not categorical
    predicates = [lambda t: "double" in t, lambda t: t.count(",") > 1, lambda t: t.startswith("aten::")]
    monkeypatch.setattr(grouping, "TEXT_WINDOW", len(ops))
    whole = [grouping.text_matches(c, p) for c, p in zip(columns, predicates)]
    assert all(10 < w.sum() < len(ops) for w in whole)  # not vacuous: some rows match, not all
    for rows in (7, len(ops) // 3 + 1):
        monkeypatch.setattr(grouping, "TEXT_WINDOW", rows)
        for column, predicate, expected in zip(columns, predicates, whole):
            np.testing.assert_array_equal(grouping.text_matches(column, predicate), expected)


def test_the_device_executions_of_a_spilled_run_keep_their_times_in_spill_files(captures, tmp_path) -> None:
    trace = captures / "kineto" / "nccl_data.json.gz"
    plain = device_executions(read_kineto_trace(trace).ops)
    with spill.spilling(tmp_path, min_bytes=1):
        ex = device_executions(read_kineto_trace(trace).ops)
    pd.testing.assert_frame_equal(ex, plain, check_exact=True)
    assert len(ex) > 100  # not vacuous
    for column in ("start_ns", "end_ns", "correlation", "row"):
        assert spill.is_spilled(ex[column].to_numpy()) and not spill.is_spilled(plain[column].to_numpy()), column


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_test", "nccl_data"])
def test_the_device_timeline_keeps_its_text_columns_as_codes_with_the_same_values(captures, capture) -> None:
    """family, precision and launcher: categoricals in sorted order (a code per execution, grouped and sorted as
    text), with each execution's own kernel family and precision and its launching op's name ("" when none)."""
    from profiler.analysis.findings.device import DeviceTimeline
    from profiler.analysis.kernel_families import kernel_family, kernel_precision

    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    launched = launches(ops)
    ex = DeviceTimeline(ops, pd.DataFrame(), (np.zeros(0, np.int64),) * 2, launched).executions
    for column in ("family", "precision", "launcher"):
        categories = list(ex[column].cat.categories)
        assert categories == sorted(categories), column
    names, categories = ex["name"].astype(str).tolist(), ex["category"].astype(str).tolist()
    assert ex["family"].astype(str).tolist() == [kernel_family(n, c) for n, c in zip(names, categories)]
    assert ex["precision"].astype(str).tolist() == [kernel_precision(n) for n in names]
    launcher = launched.launcher[ex["row"].to_numpy()]
    op_names = ops["name"].astype(str).to_numpy()
    expected = [op_names[k] if k >= 0 else "" for k in launcher.tolist()]
    assert ex["launcher"].astype(str).tolist() == expected and 0 < sum(k >= 0 for k in launcher.tolist())
    by_op = ex.groupby("launcher")["start_ns"].count()
    assert by_op.to_dict() == pd.Series(expected).value_counts().to_dict()
    assert list(by_op.index) == sorted(set(expected))


def test_whether_a_run_has_torch_ops_is_asked_a_chunk_at_a_time(captures, monkeypatch) -> None:
    """results._has_torch_ops read 7 ops at a time answers as the whole-table isin: for a Kineto capture, for the
    same ops of another source, and where the only torch op is the last one (in the last, short chunk)."""
    from profiler.analysis import results

    run = read_kineto_trace(captures / "kineto" / "alexnet.json.gz")
    monkeypatch.setattr(spill, "CHUNK_ROWS", 7)
    assert results._has_torch_ops(run) and run.ops["source"].isin(("kineto", "torch")).any()
    source = pd.Series(["profview"] * len(run.ops), dtype="category").cat.add_categories(["torch"])
    run.ops = run.ops.assign(source=source.array)
    assert not results._has_torch_ops(run)
    source.iloc[-1] = "torch"
    run.ops = run.ops.assign(source=source.array)
    assert len(run.ops) % 7 and results._has_torch_ops(run)

"""The Kineto importer builds its op table a window of whole steps at a time (profiler/importers/kineto_ops.py,
`_op_windows`): the table is the one a single window gives, byte for byte (columns, dtypes, categories in
first-seen order), on real captures with windows of every step; and a window edge never cuts an op that
encloses others (a Python frame across a step edge keeps its children's time out of its self time); the windows'
tables wait for their join in spill files."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from profiler import spill
from profiler.importers import kineto_ops
from profiler.importers.kineto import read_kineto_trace
from profiler.importers.kineto_events import Coded

from support.kineto_builder import Trace


def _windows_built(monkeypatch) -> list[int]:
    """Records the number of ops of every window the importer builds."""
    sizes: list[int] = []
    build = kineto_ops._window_ops

    def counted(ops, *rest):
        sizes.append(len(ops.start))
        return build(ops, *rest)

    monkeypatch.setattr(kineto_ops, "_window_ops", counted)
    return sizes


def _assert_same_table(windowed: pd.DataFrame, whole: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(windowed, whole, check_exact=True)
    for column in whole.columns:
        if isinstance(whole[column].dtype, pd.CategoricalDtype):
            assert windowed[column].cat.categories.tolist() == whole[column].cat.categories.tolist(), column


@pytest.mark.parametrize("capture", ["diff_control", "diff_test", "nccl_data", "sampled_rank-0"])
def test_the_op_table_built_in_step_windows_is_the_whole_ones(captures, monkeypatch, capture: str) -> None:
    path = captures / "kineto" / f"{capture}.json.gz"
    whole = read_kineto_trace(path).ops
    steps = read_kineto_trace(path).steps
    for rows in (1, len(whole) // 2):
        monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", rows)
        sizes = _windows_built(monkeypatch)
        _assert_same_table(read_kineto_trace(path).ops, whole)
        assert 2 <= len(sizes) <= len(steps) + 1 and sum(sizes) >= len(whole)  # several windows; copies dropped after
        monkeypatch.undo()


def test_a_window_edge_never_cuts_an_operator_that_encloses_others(monkeypatch) -> None:
    trace = Trace().step(1, 0, 100).step(2, 100, 100).step(3, 200, 100)
    trace.op("aten::conv2d", 50, 100).op("aten::mm", 60, 10).op("aten::add", 120, 10).op("aten::relu", 250, 10)
    whole = trace.run().ops
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 1)
    sizes = _windows_built(monkeypatch)
    windowed = trace.run().ops
    _assert_same_table(windowed, whole)
    assert sizes == [3, 1]  # cut at step 3 only: the operator spans step 2's start
    assert windowed.set_index("name").loc["aten::conv2d", "self_ns"] == 80_000  # 100 µs less its two children


def test_a_python_frame_across_window_edges_is_built_in_each_and_kept_once(monkeypatch) -> None:
    """Python frames (here nn.Module frames, nested, the outer one across all three steps) may be cut: each is built
    in every window it overlaps, where its children find it, kept in the table of its start's, its self time its
    duration less its direct children's in all of them (a frame child counted once)."""
    trace = Trace().step(1, 0, 100).step(2, 100, 100).step(3, 200, 100)
    trace.module("Net", 10, 280).module("Block", 40, 120)  # Net over steps 1-3, Block over step 2's start
    trace.op("aten::mm", 60, 10).op("aten::add", 120, 10).op("aten::relu", 250, 10).op("aten::sum", 170, 5)
    trace.op("aten::div", 210, 20).op("aten::div", 212, 10)  # a redispatch copy under Net in step 3's window
    whole = trace.run().ops
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 1)
    sizes = _windows_built(monkeypatch)
    windowed = trace.run().ops
    _assert_same_table(windowed, whole)
    assert sizes == [3, 4, 4]  # Net, Block, mm; Net and Block visit add, sum; Net visits relu and the divs
    self_ns = windowed.groupby("name")["self_ns"].sum()
    assert self_ns["nn.Module: Block"] == 120_000 - 20_000
    assert self_ns["nn.Module: Net"] == 280_000 - 120_000 - 5_000 - 20_000 - 10_000
    assert self_ns["aten::div"] == 20_000 and (windowed["name"] == "aten::div").sum() == 1


def test_a_with_stack_trace_is_built_in_windows(captures, monkeypatch) -> None:
    """A real torch trace recorded with with_stack and with_modules (no step markers; its outermost Python frames span
    it all, so it was one window): cut inside the frames, its table is the one a single window gives."""
    path = captures / "recorded" / "views" / "torch_memory_modules" / "raw" / "r0-p12781-torch-0.json.gz"
    whole = read_kineto_trace(path).ops
    assert (whole["category"] == "python").sum() > 1000
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 500)
    sizes = _windows_built(monkeypatch)
    _assert_same_table(read_kineto_trace(path).ops, whole)
    assert len(sizes) >= 4 and max(sizes) < len(whole) / 2


@pytest.mark.parametrize("markers", [True, False])
def test_the_windows_tables_wait_for_their_join_in_spill_files(captures, tmp_path, monkeypatch, markers) -> None:
    """Every column of every window's table (text as codes) is spilled as it is made, with step markers and without
    (every op's step -1: it stayed in memory, 8 bytes an op, 272 MB at 34 M ops): in memory, the windows' tables
    grew with the trace until they were joined."""
    path = captures / "kineto" / "sampled_rank-0.json.gz" if markers else _without_step_markers(captures, tmp_path)
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 2000)
    tables: list[dict] = []
    build = kineto_ops._window_ops

    def kept(*args):
        table = build(*args)
        tables.append(dict(table[0]))  # the join takes the columns out of the table
        return table

    monkeypatch.setattr(kineto_ops, "_window_ops", kept)
    with spill.spilling(tmp_path, min_bytes=1):
        ops = read_kineto_trace(path).ops
        assert len(tables) >= 2 and set(tables[0]) == set(ops.columns)
        assert (ops["step"] >= 0).any() == markers
        for table in tables:
            for name, column in table.items():
                assert spill.is_spilled(column.codes if isinstance(column, Coded) else column), name


def _without_step_markers(captures, tmp_path):
    """sampled_rank-0 with its ProfilerStep annotations taken out (a trace file in tmp_path)."""
    trace = json.loads(gzip.decompress((captures / "kineto" / "sampled_rank-0.json.gz").read_bytes()))
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    path = tmp_path / "no_steps.json"
    path.write_text(json.dumps(trace))
    return path


def test_a_trace_without_step_markers_is_built_in_windows_too(captures, tmp_path, monkeypatch) -> None:
    """A real capture with its ProfilerStep annotations taken out: no step edges, so the windows are cut at op starts
    sampled across the trace where no op encloses them; the table is the one a single window gives."""
    path = _without_step_markers(captures, tmp_path)
    whole = read_kineto_trace(path)
    assert whole.steps.empty and len(whole.ops) > 4000
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 1000)
    sizes = _windows_built(monkeypatch)
    _assert_same_table(read_kineto_trace(path).ops, whole.ops)
    assert len(sizes) >= 3 and max(sizes) < len(whole.ops) / 2  # several windows, none near the whole trace

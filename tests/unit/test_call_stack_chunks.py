"""Call stacks as codes (profiler/analysis/call_stacks.py): on a real torch.profiler trace recorded with_stack
(tests/data/recorded/views/torch_memory_modules), made a small chunk at a time into spill files, each op's stack is
the text the definition gives (the Python frames around it on its thread, outermost first), and the op table by
stack is the one of that text per op."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.call_stacks import FRAME_SEPARATOR, call_stacks, op_stack_table
from profiler.analysis.launches import framework_ops, launches
from profiler.analysis.ops import op_launches, op_table, op_totals
from profiler.formats.columns import OP_STACK_COLUMNS
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.nesting import enclosing_parents
from profiler.kernels.paths import PathCodes

from support.recorded import RECORDED

TRACE = next((RECORDED / "views" / "torch_memory_modules" / "raw").glob("*-torch-0.json.gz"))


def stacks_as_text(ops: pd.DataFrame) -> list[str]:
    """The definition, a text per row: walk each host row's enclosing ops up to the root and join the Python
    frames' names, outermost first."""
    host = np.flatnonzero((ops["device"] == "cpu").to_numpy())
    lane = pd.factorize(ops["stream"].iloc[host])[0]
    start = ops["start_ns"].to_numpy()[host]
    parent = enclosing_parents(lane, start, start + ops["dur_ns"].to_numpy()[host])
    python = (ops["category"] == "python").to_numpy()[host]
    names = ops["name"].astype(str).to_numpy()[host]
    out = [""] * len(ops)
    for i, row in enumerate(host.tolist()):
        frames, at = [], int(parent[i])
        while at >= 0:
            if python[at]:
                frames.append(names[at])
            at = int(parent[at])
        out[row] = FRAME_SEPARATOR.join(reversed(frames))
    return out


@pytest.fixture(scope="module")
def ops() -> pd.DataFrame:
    return read_kineto_trace(TRACE).ops


def test_stacks_made_in_small_chunks_into_spill_files_are_the_definitions(ops, tmp_path, monkeypatch) -> None:
    expected = stacks_as_text(ops)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 500)  # ~40 chunks of rows, depth pieces of at most 500 rows
    with spill.spilling(tmp_path, min_bytes=0):
        stacks = call_stacks(ops)
        assert spill.is_spilled(stacks.codes)
    assert len(stacks) == len(ops) and list(stacks.astype(str)) == expected
    assert sum(text.count(FRAME_SEPARATOR) >= 3 for text in expected) > 1000  # deep stacks: the walk is exercised
    assert stacks.categories.is_unique and set(expected) <= set(stacks.categories)
    assert len(stacks.categories) < len(ops) / 5  # a code per row, a text per distinct stack (6 steps: 1,812)


def test_the_table_by_stack_is_the_table_of_the_texts(ops, tmp_path, monkeypatch) -> None:
    """Grouped by the codes, gathered and summed in windows of 300 rows: the table of grouping the framework ops
    whole by their stacks' texts (the definition)."""
    launched = launches(ops)
    rows = np.flatnonzero(framework_ops(ops))
    texts = ops.iloc[rows].assign(stack=np.array(stacks_as_text(ops), dtype=object)[rows])
    figures = op_launches(ops, launched)
    keys, labels = ["device", "name", "stack"], ["op_type", "category"]
    totals = op_totals(texts, None if figures is None else figures.take(rows), keys, labels)
    expected = op_table(totals, OP_STACK_COLUMNS, ["device", "total_ms", "name"])
    monkeypatch.setattr(spill, "CHUNK_ROWS", 500)
    with spill.spilling(tmp_path, min_bytes=0):
        table = op_stack_table(ops, launched, window_rows=300)
    pd.testing.assert_frame_equal(table, expected)
    assert len(table) > 20 and table["count"].sum() == len(rows)


def test_two_stacks_of_one_text_are_one_category() -> None:
    """A frame whose name holds the separator makes the text of a deeper stack: both are one group, as texts."""
    name = ["a > b", "x", "a", "b", "x"]
    ops = pd.DataFrame(
        {
            "device": "cpu",
            "stream": "1",
            "category": ["python", "host", "python", "python", "host"],
            "name": pd.Categorical(name),
            "start_ns": [0, 1, 10, 11, 12],
            "dur_ns": [5, 1, 5, 3, 1],
        }
    )
    stacks = call_stacks(ops)
    assert list(stacks.astype(str)) == ["", "a > b", "", "a", "a > b"]
    assert stacks.categories.is_unique and stacks.codes[1] == stacks.codes[4]


def test_path_codes_number_each_distinct_path_once() -> None:
    """Nodes under paths (`above`) with names (-1: none): one code per distinct (path, name), texts joined once."""
    paths = PathCodes(["net", "block", "conv"], "/")
    first = paths.entered(np.zeros(4, np.int32), np.array([0, 0, -1, 1]))
    assert first.tolist() == [1, 1, 0, 2] and paths.texts == ["", "net", "block"]
    second = paths.entered(first, np.array([1, 2, 2, -1]))
    assert second.tolist() == [4, 5, 3, 2] and paths.texts[3:] == ["conv", "net/block", "net/conv"]
    assert paths.entered(np.array([4, 1], np.int32), np.array([2, 1])).tolist() == [6, 4]  # net/block met again: 4
    assert paths.texts[6] == "net/block/conv" and len(paths.texts) == 7

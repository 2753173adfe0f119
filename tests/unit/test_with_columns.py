"""Columns set without copies (model.with_columns) and the inferred steps' op column made a chunk at a time: a big run's
op table keeps its spilled columns spilled when a column is set (pandas' assign and item setting copy it)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.intervals import assign_steps
from profiler.model import with_columns

from support.recorded import RECORDED

TRACE = next((RECORDED / "views" / "torch_memory_modules" / "raw").glob("*-torch-0.json.gz"))


def test_a_column_set_or_added_is_not_copied_and_the_others_are_shared() -> None:
    frame = pd.DataFrame({"a": np.arange(5), "name": pd.Categorical(list("xyzxy")), "b": np.ones(5)}, index=range(5))
    step, stack = np.arange(5) * 10, pd.Categorical.from_codes(np.array([0, 1, 1, 0, 1], dtype=np.int8), ["", "f"])
    out = with_columns(frame, a=step, stack=stack)
    assert list(out.columns) == ["a", "name", "b", "stack"] and out.index.equals(frame.index)
    assert out["a"].tolist() == [0, 10, 20, 30, 40] and out["stack"].tolist() == ["", "f", "f", "", "f"]
    assert np.shares_memory(out["a"].to_numpy(), step) and np.shares_memory(out["stack"].array.codes, stack.codes)
    assert np.shares_memory(out["b"].to_numpy(), frame["b"].to_numpy())
    assert np.shares_memory(out["name"].array.codes, frame["name"].array.codes)
    assert frame["a"].tolist() == [0, 1, 2, 3, 4]  # the frame itself is unchanged


def test_inferred_steps_op_column_is_made_in_chunks_into_a_spill_file(tmp_path, monkeypatch) -> None:
    """A torch trace without ProfilerStep annotations: its steps are inferred, and each op's step is the same
    made 1,000 ops at a time into a spill file as made whole, the other columns untouched."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = ensure_steps(read_kineto_trace(TRACE))
        run = read_kineto_trace(TRACE)
        monkeypatch.setattr(spill, "CHUNK_ROWS", 1000)
        with spill.spilling(tmp_path, min_bytes=0):
            chunked = ensure_steps(run)
            assert spill.is_spilled(chunked.ops["step"].to_numpy())
    assert len(whole.steps) > 3 and (whole.ops["step"] >= 0).sum() > len(whole.ops) / 2
    pd.testing.assert_frame_equal(chunked.ops, whole.ops)
    expected = assign_steps(whole.ops["start_ns"].to_numpy(), whole.steps)
    assert np.array_equal(chunked.ops["step"].to_numpy(), expected)

"""The analysis of a spilled run (profiler/spill.py) keeps its own per-row arrays in spill files and works through
the op table a window of rows at a time, with the figures of the whole table, exactly, on real Kineto captures."""

from __future__ import annotations

import numpy as np

from profiler import spill
from profiler.analysis.launches import launches
from profiler.importers.kineto import read_kineto_trace


def test_launches_of_a_spilled_run_are_kept_in_spill_files(captures, tmp_path) -> None:
    trace = captures / "kineto" / "sampled_rank-0.json.gz"
    plain = launches(read_kineto_trace(trace).ops)
    with spill.spilling(tmp_path, min_bytes=1):
        spilled = launches(read_kineto_trace(trace).ops)
    assert plain is not None and spilled is not None
    for name, values in vars(spilled).items():
        assert spill.is_spilled(values), name
        assert not spill.is_spilled(getattr(plain, name))
        np.testing.assert_array_equal(values, getattr(plain, name))
    assert (spilled.launcher >= 0).sum() > 100  # not vacuous: executions tied to their ops

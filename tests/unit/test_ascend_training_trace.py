"""Step assembly from training-trace points: the rules of RAW_FORMATS.md section 5 and the
documented handling of inputs the 2020 parser did not expect."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from profiler.importers.ascend.slices import join_slices
from profiler.importers.ascend.training_trace import TRACE_DTYPE, assemble_steps, decode_training_trace

MARK, FP, BP = 10010, 1, 2


def _trace(tmp_path: Path, points: list[tuple[int, int, int]]):
    """Decoded trace records from (tag, stream_id, syscnt) points, written in the 20-byte layout."""
    records = np.zeros(len(points), dtype=TRACE_DTYPE)
    records["tag"], records["stream_id"], records["syscnt"] = zip(*points)
    path = tmp_path / "training_trace.46.dev.profiler_default_tag.0.slice_0"
    records.tofile(path)
    assert path.stat().st_size == 20 * len(points)
    trace, problems = decode_training_trace(join_slices([path]))
    assert problems == []
    return trace


def test_steps_chain_on_iter_end_and_reduce_points_pair_per_stream(tmp_path: Path):
    trace = _trace(
        tmp_path,
        [
            (MARK, 1, 100),
            (FP, 1, 105),
            (3, 7, 110),
            (5, 9, 112),
            (4, 7, 120),
            (6, 9, 125),
            (3, 7, 130),
            (4, 7, 131),
            (BP, 1, 140),
            (255, 1, 150),
            (MARK, 1, 160),
            (FP, 1, 170),
            (BP, 1, 180),
            (255, 1, 200),
        ],
    )
    steps, reduces, problems = assemble_steps(trace, skip_first=False, source="t")
    assert problems == []
    assert steps.values.tolist() == [[1, 105, 150, 105, 140], [2, 150, 200, 170, 180]]
    assert reduces[["step_num", "stream_id", "k", "start", "end"]].values.tolist() == [
        [1, 7, 0, 110, 120],
        [1, 7, 1, 130, 131],
        [1, 9, 0, 112, 125],
    ]


def test_incomplete_steps_keep_their_number_and_are_reported(tmp_path: Path):
    trace = _trace(
        tmp_path,
        [
            (FP, 1, 1),
            (255, 1, 5),  # before any marker: no start
            (MARK, 1, 10),
            (FP, 1, 11),
            (BP, 1, 12),
            (255, 1, 20),  # step 2
            (MARK, 1, 30),
            (FP, 1, 31),
            (3, 7, 32),
            (255, 1, 40),  # step 3: no BP, odd reduce points
            (MARK, 1, 50),
            (FP, 1, 51),
            (BP, 1, 52),
            (255, 1, 60),
            (255, 1, 61),
            (BP, 1, 62),  # step 4, then late points
            (MARK, 1, 70),
            (FP, 1, 71),  # unfinished
        ],
    )
    steps, reduces, problems = assemble_steps(trace, skip_first=False, source="t")
    assert steps.values.tolist() == [[2, 5, 20, 11, 12], [4, 40, 60, 51, 52]]
    assert reduces.empty
    assert problems == [
        "t: 2 training-trace record(s) after a step's ITER_END were ignored",
        "t: 1 step(s) without ITER_END (profiling stopped mid-step) were left out",
        "t: 2 step(s) lacking a start, FP_START or BP_END point were dropped (step numbers [1, 3])",
    ]


def test_skip_first_drops_the_first_step_unnumbered_and_65535_ends_steps(tmp_path: Path):
    trace = _trace(
        tmp_path,
        [
            (MARK, 1, 10),
            (FP, 1, 11),
            (BP, 1, 12),
            (255, 7, 13),
            (3, 7, 14),
            (65535, 1, 20),
            (MARK, 1, 30),
            (FP, 1, 31),
            (BP, 1, 32),
            (65535, 1, 40),
        ],
    )
    steps, reduces, problems = assemble_steps(trace, skip_first=True, source="t")
    assert problems == [] and steps.values.tolist() == [[1, 20, 40, 31, 32]]
    steps, reduces, _ = assemble_steps(trace, skip_first=False, source="t")
    assert steps["step_num"].tolist() == [1, 2]
    # with 65535 as ITER_END, tag 255 is an ordinary (all-reduce range) point
    assert reduces[["step_num", "stream_id", "start", "end", "start_tag", "end_tag"]].values.tolist() == [
        [1, 7, 13, 14, 255, 3]
    ]


@pytest.mark.parametrize("points", [[], [(MARK, 1, 1), (FP, 1, 2)]])
def test_no_complete_step_gives_empty_tables(tmp_path: Path, points):
    trace = _trace(tmp_path, points) if points else decode_training_trace(join_slices([]))[0]
    steps, reduces, _ = assemble_steps(trace, skip_first=False, source="t")
    assert steps.empty and reduces.empty
    assert list(steps.columns) == ["step_num", "start", "end", "fp", "bp"]

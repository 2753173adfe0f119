"""read_csvs (profiler/formats/tables.py) parses many ranks' CSVs together: every file must come back as
read_csv reads it alone — the same values and the same column types — and a refused file must be refused
in read_csv's words, whatever the other files in its batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.errors import InputError
from profiler.export.csv_json import write_csv
from profiler.formats import tables
from profiler.formats.columns import STEP_TRACE_COLUMNS
from profiler.formats.tables import read_csv, read_csvs


def step_trace(steps: int, seed: int) -> pd.DataFrame:
    """A step trace as analyse() writes one: floats, whole-number columns, text sources, empty cells."""
    rng = np.random.default_rng(seed)
    trace = pd.DataFrame({c: np.zeros(steps) for c in STEP_TRACE_COLUMNS})
    trace["step"] = np.arange(steps)
    trace["op_count"] = rng.integers(0, 500, steps)
    for col in ("start_unix_ns", "fp_start_unix_ns", "bp_end_unix_ns", "end_unix_ns"):
        trace[col] = 10**18 + rng.integers(0, 10**9, steps)
    trace["total_ms"] = rng.random(steps) * 50
    trace["fp_start_source"] = trace["bp_end_source"] = trace["step_source"] = "marked"
    trace["gap_host_ms"] = np.where(rng.random(steps) < 0.3, np.nan, rng.random(steps))
    return trace


def same_frames(paths, kind="step_trace"):
    """read_csvs' frames against read_csv's, file by file, types included."""
    together = read_csvs(paths, kind)
    assert len(together) == len(paths)
    for path, frame in zip(paths, together):
        pd.testing.assert_frame_equal(frame, read_csv(path, kind), check_dtype=True, obj=str(path))
    return together


def test_a_batch_gives_every_file_its_own_rows_and_types(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "BATCH_BYTES", 4000)  # several batches
    paths = []
    for rank in range(12):
        trace = step_trace(10 + rank, seed=rank)
        if rank == 4:  # whole numbers in a float column: int64 read alone, float64 beside the others
            trace["total_ms"] = trace["total_ms"].round().astype(np.int64)
        if rank == 6:  # a column of empty cells only
            trace["gap_host_ms"] = np.nan
        if rank == 7:
            trace = trace.drop(columns=["device_busy_ms", "device_idle_ms"])  # another header: its own batch
        if rank == 9:
            trace["step_source"] = 'say "marked"'  # a quote: read alone
        paths.append(write_csv(trace, tmp_path / f"step_trace_{rank}.csv"))
    (tmp_path / "step_trace_12.csv").write_text(",".join(STEP_TRACE_COLUMNS) + "\n")  # a header, no rows
    paths.append(tmp_path / "step_trace_12.csv")
    frames = same_frames(paths)
    assert [len(f) for f in frames] == [10 + r for r in range(12)] + [0]
    assert frames[4]["total_ms"].dtype == np.int64 and frames[5]["total_ms"].dtype == np.float64
    assert frames[3]["op_count"].tolist() == step_trace(13, seed=3)["op_count"].tolist()


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda text: text[:-1] + ",extra\n", "is not a valid CSV file"),  # a field too many on the last row
        (lambda text: text.replace("\n1,", "\nx,", 1), "column step has a non-numeric value ('x') on line 3"),
        (lambda text: text + "\n\n", None),  # blank lines: rows no longer count lines, still read
    ],
)
def test_a_damaged_file_is_refused_in_its_own_words(tmp_path, damage, message):
    paths = [write_csv(step_trace(8, seed=r), tmp_path / f"step_trace_{r}.csv") for r in range(4)]
    paths[2].write_text(damage(paths[2].read_text()))
    if message is None:
        same_frames(paths)
        return
    with pytest.raises(InputError) as alone:
        read_csv(paths[2], "step_trace")
    with pytest.raises(InputError) as together:
        read_csvs(paths, "step_trace")
    assert str(together.value) == str(alone.value)
    assert str(paths[2]) in str(together.value) and message in str(together.value)


def test_missing_and_special_files_are_refused_as_alone(tmp_path):
    good = write_csv(step_trace(5, seed=1), tmp_path / "step_trace_0.csv")
    (tmp_path / "dir.csv").mkdir()
    for odd in (tmp_path / "absent.csv", tmp_path / "dir.csv"):
        with pytest.raises(InputError) as together:
            read_csvs([good, odd], "step_trace")
        with pytest.raises(InputError) as alone:
            read_csv(odd, "step_trace")
        assert str(together.value) == str(alone.value)

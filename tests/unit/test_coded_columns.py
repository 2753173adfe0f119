"""Coded columns made a chunk at a time (importers/kineto_events.py `Coded.chunked`): the same values and codes as
the column coded whole, and, while spilling, no chunk's codes held in memory until they are joined (a 16 GB
trace's host ops kept 240 MB of them)."""

from __future__ import annotations

import numpy as np

from profiler import spill
from profiler.importers.kineto_events import Coded

NAMES = np.array(["aten::mm", "aten::add", "aten::mm", "cudaLaunchKernel", "aten::add", "aten::relu"] * 7, object)


def test_a_column_coded_a_chunk_at_a_time_is_the_whole_one(monkeypatch) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 4)
    whole = Coded.of(NAMES)
    chunked = Coded.chunked(len(NAMES), lambda at: Coded.of(NAMES[at]))
    assert chunked.values == whole.values == ["aten::mm", "aten::add", "cudaLaunchKernel", "aten::relu"]
    np.testing.assert_array_equal(chunked.codes, whole.codes)
    assert list(chunked.decoded()) == list(NAMES)


def test_each_chunks_codes_are_spilled_before_they_are_joined(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 4)
    joined = []
    concat = Coded.concat.__func__

    def recording_concat(cls, *parts: Coded) -> Coded:
        joined.extend(parts)
        return concat(cls, *parts)

    monkeypatch.setattr(Coded, "concat", classmethod(recording_concat))
    with spill.spilling(tmp_path, min_bytes=1):
        column = Coded.chunked(len(NAMES), lambda at: Coded.of(NAMES[at]))
        assert len(joined) == 11
        assert all(spill.is_spilled(part.codes) for part in joined)
        assert spill.is_spilled(column.codes)
    assert list(column.decoded()) == list(NAMES)

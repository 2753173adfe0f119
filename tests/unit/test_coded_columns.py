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


def test_a_column_coded_along_sparse_positions_reads_a_stretch_between_drops(monkeypatch) -> None:
    """With `along` (the positions `make` reads a big column at), a piece within one stretch of the column at a time,
    a drop between two: the same column as coded whole."""
    monkeypatch.setattr(spill, "CHUNK_ROWS", 8)
    monkeypatch.setattr(spill, "SPAN_ROWS", 10)
    column = np.array([f"op{i % 9}" for i in range(60)], dtype=object)
    rows = np.concatenate([np.arange(0, 60, 3), np.arange(1, 60, 5)])  # two lanes' ascending rows
    log: list = []
    monkeypatch.setattr(spill, "drop_resident", lambda: log.append("drop"))

    def make(at: slice) -> Coded:
        log.append((int(rows[at].min()), int(rows[at].max())))
        return Coded.of(column[rows[at]])

    coded = Coded.chunked(len(rows), make, along=rows)
    assert list(coded.decoded()) == list(column[rows])
    assert coded.values == Coded.of(column[rows]).values  # first-seen order
    read = [entry for entry in log if entry != "drop"]
    assert len(read) >= 6 + 6 and all(low // 10 == high // 10 for low, high in read)  # a piece per stretch and lane
    held = None  # the stretch read since the last drop
    for entry in log:
        if entry == "drop":
            held = None
            continue
        assert held in (None, entry[0] // 10), "two stretches read between two drops"
        held = entry[0] // 10

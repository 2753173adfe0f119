"""SparseArgs keeps the args of plain numbers (a "[memory]" instant's, a "C" counter's) as int64 cells
(importers/kineto_events.py): the dicts it gives back, and each arg read from the cells, are the events' own
values and types, whole or joined from parts, and the other args stay as they were."""

from __future__ import annotations

import numpy as np
import pytest

from profiler import spill
from profiler.importers.kineto_events import SparseArgs

MEMORY = {
    "Total Reserved": 0,
    "Total Allocated": 8192,
    "Bytes": -8192,
    "Device Id": -1,
    "Device Type": 0,
    "Addr": 94038577139520,
    "finished": False,
    "Ev Idx": 1170,
}
ARGS = [
    None,
    MEMORY,
    {"name": "python3"},  # text: kept as it is
    None,
    {"Bytes": 2**63 - 1, "ratio": float("nan"), "neg": -0.0, "on": True},
    {"Addr": 2**64},  # too big for int64: kept as it is
    [1, 2],
    {},
    {"Total Allocated": 1.5, "Bytes": 3},  # another layout
    dict(MEMORY, Bytes=4096),
]


def _same(a, b) -> bool:
    """Equal values of equal types in the same key order (NaN equal to NaN)."""
    return repr(a) == repr(b) and [type(v) for v in _values(a)] == [type(v) for v in _values(b)]


def _values(args):
    return list(args.values()) if isinstance(args, dict) else []


@pytest.mark.parametrize("cut", [None, 1, 4, 9])
def test_the_args_given_back_are_the_events_own(cut) -> None:
    """Whole, or joined from two parts: take gives each event's args, arg each value."""
    args = (
        SparseArgs.of(ARGS)
        if cut is None
        else SparseArgs.concat([SparseArgs.of(ARGS[:cut]), SparseArgs.of(ARGS[cut:])])
    )
    rows = np.arange(len(ARGS))
    assert all(_same(a, b) for a, b in zip(ARGS, args.take(rows).tolist()))
    for key in ("Bytes", "Addr", "finished", "name", "ratio", "Total Allocated", "missing"):
        expected = [a.get(key, "-") if isinstance(a, dict) else "-" for a in ARGS]
        got = args.arg(key, rows, default="-")
        assert repr(got) == repr(expected) and [type(v) for v in got] == [type(v) for v in expected], key
    backwards = rows[::-1]
    assert all(_same(a, b) for a, b in zip(ARGS[::-1], args.take(backwards).tolist()))


def test_plain_numbers_are_cells_not_dicts() -> None:
    """The memory instants' args are no dicts held: 8 int64 cells each, their layout once."""
    args = SparseArgs.of([dict(MEMORY, Bytes=n) for n in range(1000)])
    assert len(args.layouts) == 1 and len(args.cells) == 8 * 1000
    assert len(args.values) == 0  # no pointer per event (an object array never spills)
    assert args.arg("Bytes", np.arange(1000)) == list(range(1000))


def test_parts_joined_while_spilling_spill_their_small_arrays(tmp_path) -> None:
    """A trace's parts' args arrays are a few hundred KB each, held by the dozen: joined, they spill whatever their
    size; only the args that are not cells stay objects; the args given back are the events' own."""
    parts = [ARGS[:3], ARGS[3:7], ARGS[7:]] * 200  # each array a page (spill.SMALL) or more
    flat = [a for part in parts for a in part]
    with spill.spilling(tmp_path):  # the default threshold (1 MB): these arrays are far below it
        args = SparseArgs.concat([SparseArgs.of(part) for part in parts])
        assert all(spill.is_spilled(a) for a in (args.rows, args.layout, args.start, args.cells))
        assert len(args.values) == 4 * 200  # {"name": ...}, {"Addr": 2**64}, [1, 2], {} per copy
        rows = np.arange(len(flat))
        assert all(_same(a, b) for a, b in zip(flat, args.take(rows).tolist()))
        assert repr(args.arg("name", rows, "-")) == repr(
            [a.get("name", "-") if isinstance(a, dict) else "-" for a in flat]
        )

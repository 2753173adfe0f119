"""Event numbers (ts, dur, pid, tid, args as integers) are converted the same whatever the values beside them: the
streaming reader converts a chunk of events whole with numpy, or a value at a time when one of them is text numpy
cannot read (a Kineto "Spans" pid), and a malformed value (true, decimal text, a list) must not turn out differently
in the two (a trace's numbers then depended on where its chunks fell)."""

from __future__ import annotations

import math

import numpy as np

from profiler.importers.kineto_events import _numbers, to_int

ODD = [7, 2.5, None, True, False, "12", " 3 ", "1e3", [1], [1, 2], {"a": 1}, 2**70, 10**400, "inf", ""]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_each_value_converts_the_same_alone_and_beside_unreadable_text() -> None:
    alone = [_numbers([value])[0] for value in ODD]
    beside_text = _numbers([*ODD, "Spans"])[:-1]  # one value numpy cannot read: converted a value at a time
    assert all(_same(a, b) for a, b in zip(alone, beside_text)), (alone, beside_text.tolist())
    readable = [7, 2.5, None, True, False, "12", " 3 ", "1e3", 2**70]  # a list numpy converts whole
    assert _numbers(readable).tolist()[:2] == [7.0, 2.5] and _numbers(readable)[3:].tolist() == [
        1.0,
        0.0,
        12.0,
        3.0,
        1000.0,
        float(2**70),
    ]
    assert [_numbers([*readable, "Spans"])[i] for i in (3, 5)] == [1.0, 12.0]  # as whole, not NaN


def test_lists_of_one_length_are_not_numbers() -> None:
    assert np.isnan(_numbers([[1], [2]])).all() and _numbers([[1], [2]]).shape == (2,)


def test_integers_are_the_same_in_any_chunk() -> None:
    values = [5, True, "9", [3], "x", None]
    whole = to_int(values, default=-1).tolist()
    assert whole == [5, 1, 9, -1, -1, -1]
    assert [to_int([v], default=-1)[0] for v in values] == whole
    assert to_int(values[:3], default=-1).tolist() == whole[:3]

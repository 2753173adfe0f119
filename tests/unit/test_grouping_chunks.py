"""`grouping.codes_and_labels` codes a column that is not categorical a window of rows at a time into a spill file,
with the codes and distinct values of pd.factorize over the whole column; a categorical's codes are its own."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.kernels import grouping
from profiler.kernels.grouping import codes_and_labels, group_rows


def _columns() -> dict[str, object]:
    """Columns whose distinct values first appear in later windows, with missing values among them."""
    rng = np.random.default_rng(3)
    texts = np.array([f"op{i}" for i in rng.integers(0, 40, 500) * np.arange(500) // 500], dtype=object)
    texts[rng.integers(0, 500, 30)] = None
    floats = rng.integers(0, 9, 500).astype(np.float64) * np.arange(500)
    floats[::17] = np.nan
    return {
        "object": pd.Series(texts),
        "str": pd.Series(texts, dtype="str"),
        "ndarray": texts,
        "int": np.repeat(np.arange(100) // 2 * 7 % 53, 5),
        "float": floats,
        "list": texts.tolist(),
    }


@pytest.mark.parametrize("name", list(_columns()))
def test_codes_made_a_window_at_a_time_are_the_whole_columns_factorize(name: str, monkeypatch) -> None:
    column = _columns()[name]
    codes, uniques = pd.factorize(np.asarray(column), sort=False)
    for window in (1, 7, 64, 499, 500, 1 << 18):
        monkeypatch.setattr(grouping, "TEXT_WINDOW", window)
        got, labels = codes_and_labels(column)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, codes)
        assert labels.dtype == object and labels.tolist() == np.asarray(uniques, dtype=object).tolist()
    late = codes[len(codes) // 2 :].max() > codes[: len(codes) // 2].max()  # values first met in later windows
    assert late and len(uniques) > 10


def test_codes_of_a_big_column_are_spilled(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(grouping, "TEXT_WINDOW", 100)
    column = pd.Series([f"k{i % 37}" for i in range(1000)], dtype=object)
    with spill.spilling(tmp_path, min_bytes=1):
        codes, labels = codes_and_labels(column)
        assert spill.is_spilled(codes)
    np.testing.assert_array_equal(codes, np.arange(1000) % 37)
    assert labels.tolist() == [f"k{i}" for i in range(37)]


def test_an_empty_column_has_no_codes() -> None:
    codes, labels = codes_and_labels(pd.Series([], dtype=object))
    assert codes.dtype == np.int64 and len(codes) == 0 and len(labels) == 0


@pytest.mark.parametrize("wrap", [pd.Series, pd.Index, lambda c: c])
def test_a_categoricals_codes_are_its_own_not_a_copy(wrap) -> None:
    column = wrap(pd.Categorical(["b", "a", None, "b"], categories=["b", "a", "c"]))
    codes, labels = codes_and_labels(column)
    own = column if isinstance(column, pd.Categorical) else column.array
    assert np.shares_memory(codes, own.codes)
    np.testing.assert_array_equal(codes, [0, 1, -1, 0])
    assert labels.dtype == object and labels.tolist() == ["b", "a", "c"]


def test_groups_of_text_coded_in_windows_are_those_of_the_whole_column(monkeypatch) -> None:
    columns = _columns()
    keys = (columns["object"].fillna(""), columns["int"])
    whole = group_rows(*keys)
    monkeypatch.setattr(grouping, "TEXT_WINDOW", 13)
    windowed = group_rows(*keys)
    for field in ("of_row", "first_row", "size"):
        np.testing.assert_array_equal(getattr(windowed, field), getattr(whole, field))

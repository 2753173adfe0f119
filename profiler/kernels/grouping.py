"""Group millions of rows by a few key columns in one counting pass (no sort, no hash table per row).

Key columns are categoricals (the run model's string columns) or anything `pd.factorize` takes.
Each column's distinct values are ranked in sorted order, so group numbers follow the sorted key
combinations, as `groupby(sort=True, observed=True)` orders them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler.spill import chunked, chunks, paced

#: Above this many key combinations the groups are found by np.unique (a sort) instead of counting.
MAX_DENSE_KEYS = 1 << 24


@dataclass
class Groups:
    """Rows grouped by key: `of_row` gives each row's group, `first_row` each group's first row."""

    of_row: np.ndarray  # int64 group number of every row
    first_row: np.ndarray  # row index of each group's first row (groups in sorted key order)
    size: np.ndarray  # rows in each group

    def __len__(self) -> int:
        return len(self.first_row)

    def values(self, column) -> np.ndarray:
        """`column`'s value in each group's first row (e.g. a key column's group labels), as objects."""
        picked = column.iloc[self.first_row] if isinstance(column, pd.Series) else np.asarray(column)[self.first_row]
        return np.asarray(picked, dtype=object)

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Exact int64 sums per group."""
        return self._reduce(np.add, values, 0)

    def min(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(np.minimum, values, np.iinfo(np.int64).max)

    def max(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(np.maximum, values, np.iinfo(np.int64).min)

    def _reduce(self, ufunc: np.ufunc, values: np.ndarray, neutral: int) -> np.ndarray:
        out = np.full(len(self), neutral, dtype=np.int64)
        ufunc.at(out, self.of_row, np.asarray(values, dtype=np.int64))
        return out


def group_rows(*columns, max_dense_keys: int = MAX_DENSE_KEYS) -> Groups:
    """The groups of the rows' key combinations, in sorted key order."""
    n = len(columns[0])
    combined = np.zeros(n, dtype=np.int64)
    span = 1
    for column in columns:
        ranks, n_values = sorted_codes(column)
        combined *= n_values
        combined += ranks
        span *= n_values
    if span <= max_dense_keys:
        size = np.bincount(combined, minlength=span)
        present = np.flatnonzero(size)
        number = np.full(span, -1, dtype=np.int64)
        number[present] = np.arange(len(present))
        of_row = number[combined]
        size = size[present]
    else:
        _, of_row, size = np.unique(combined, return_inverse=True, return_counts=True)
        of_row = of_row.astype(np.int64)
    return Groups(of_row, first_rows(of_row, len(size)), size)


#: Rows of a column that is not categorical coded at a time (`codes_and_labels`, `text_matches`): a window's hash
#: table and codes, not the column's.
TEXT_WINDOW = 1 << 18


def codes_and_labels(column) -> tuple[np.ndarray, np.ndarray]:
    """(integer code per row, -1 where missing; the distinct values): a categorical's own codes (a view: pandas 3
    copies a Series' `.cat.codes`, a big import's whole column), else numbered in first-seen order as
    pd.factorize numbers them, TEXT_WINDOW rows at a time into a spill file (`_factorized`)."""
    if isinstance(getattr(column, "dtype", None), pd.CategoricalDtype):
        categorical = column.array if isinstance(column, (pd.Series, pd.Index)) else column
        return categorical.codes, np.asarray(categorical.categories, dtype=object)
    return _factorized(column)


def _factorized(column) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize(column) (codes int64, spilled when more than a window; the distinct values as objects), a window
    of rows at a time, each window's distinct values numbered from a dict of the values met in the windows before it."""
    rows = column.iloc if isinstance(column, pd.Series) else np.asarray(column)
    code_of: dict[Any, int] = {}  # each distinct value's code, in first-seen order

    def window_codes(at: slice) -> np.ndarray:
        codes, uniques = pd.factorize(np.asarray(rows[at]), sort=False)
        number = [code_of.setdefault(value, len(code_of)) for value in uniques.tolist()]
        return np.array([*number, -1], dtype=np.int64)[codes]  # a missing value's -1 stays -1

    whole = slice(0, len(column))  # one window (a window's rows, often): its codes as they are, no spill file
    codes = (
        window_codes(whole) if len(column) <= TEXT_WINDOW else chunked(len(column), np.int64, window_codes, TEXT_WINDOW)
    )
    return codes, np.fromiter(code_of, dtype=object, count=len(code_of))


def text_matches(column, predicate: Callable[[str], Any]) -> np.ndarray:
    """Whether predicate(str(value)) holds, per row; evaluated once per distinct value (a million ops have a
    few thousand names), False where the value is missing. A column that is not categorical (input shapes and
    types: text per op) is coded TEXT_WINDOW rows at a time."""
    if isinstance(getattr(column, "dtype", None), pd.CategoricalDtype):
        return _matches(column, predicate, {})
    rows = column if isinstance(column, pd.Series) else pd.Series(np.asarray(column, dtype=object))
    out = np.empty(len(rows), dtype=bool)
    known: dict[Any, bool] = {}  # each distinct value's match, over the windows
    for lo in range(0, len(rows), TEXT_WINDOW):
        out[lo : lo + TEXT_WINDOW] = _matches(rows.iloc[lo : lo + TEXT_WINDOW], predicate, known)
    return out


def _matches(column, predicate: Callable[[str], Any], known: dict[Any, bool]) -> np.ndarray:
    codes, labels = codes_and_labels(column)
    for value in labels.tolist():
        if value not in known:
            known[value] = bool(predicate(str(value)))
    return np.array([known[value] for value in labels.tolist()] + [False], dtype=bool)[codes]


def is_in(column, values: Sequence[str]) -> np.ndarray:
    """Whether each value is one of `values` (`column.isin(values)` as an array): a categorical's codes looked up
    once per distinct value (~1 B per row where isin takes ~7: millions of ops); other columns by isin."""
    if isinstance(getattr(column, "dtype", None), pd.CategoricalDtype):
        return text_matches(column, frozenset(values).__contains__)
    return np.asarray(column.isin(values))


def code_counts(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """How many of `codes` (-1: missing, else below `n_codes`) are each code, missing first, counted a chunk at a
    time."""
    counts = np.zeros(n_codes + 1, dtype=np.int64)
    for at in chunks(len(codes)):
        counts += np.bincount(codes[at] + 1, minlength=len(counts))
    return counts


def occurring_sorted(codes: np.ndarray, values: Sequence[Any]) -> tuple[np.ndarray, list]:
    """(codes, values) of a coded column (`codes`: positions in `values`) with only the values that occur, sorted and
    each once (two positions may hold one value), the codes recoded to them in the type pandas keeps for that many
    categories, a chunk at a time into a spill file when big: a text column as a categorical whose categories are in
    sorted order (a group-by or a sort sees the text's order; the CSV writer sees only the text that is written)."""
    occurring = np.flatnonzero(code_counts(codes, len(values))[1:]).tolist()
    texts = sorted({values[code] for code in occurring})
    dtype = pd.Categorical.from_codes([], categories=texts).codes.dtype
    recode = np.full(len(values), -1, dtype=dtype)
    recode[occurring] = pd.Index(texts, dtype=object).get_indexer([values[code] for code in occurring])
    return chunked(len(codes), dtype, lambda at: recode[codes[at]]), texts


def code_sums(
    codes: np.ndarray,
    n_codes: int,
    values: Sequence[np.ndarray],
    kept: Optional[Callable[[slice], np.ndarray]] = None,
    value_rows: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per code (`codes`: below `n_codes`, one per row): its count of rows and the int64 sums of each of `values`
    over them, a chunk of rows at a time. `kept(chunk)` (a bool per row of the chunk) picks the rows counted (all by
    default); `value_rows` gives each row's position in `values` (its own by default)."""
    count, sums = np.zeros(n_codes, dtype=np.int64), [np.zeros(n_codes, dtype=np.int64) for _ in values]
    for at in paced(chunks(len(codes)), value_rows):  # the pages handed back between chunks (`op_memory`'s sums)
        code, where = codes[at], at if value_rows is None else value_rows[at]
        if kept is not None:
            rows = np.flatnonzero(kept(at))
            code, where = code[rows], at.start + rows if value_rows is None else where[rows]
        count += np.bincount(code, minlength=n_codes)
        for total, value in zip(sums, values):
            np.add.at(total, code, value[where])
    return count, sums


def sorted_codes(column) -> tuple[np.ndarray, int]:
    """Each row's rank among the column's distinct values in sorted (string) order, and their count."""
    codes, labels = codes_and_labels(column)
    if len(labels) == 0:
        return np.zeros(len(codes), dtype=np.int64), 1
    rank_of_code = np.empty(len(labels), dtype=np.int64)
    rank_of_code[np.argsort(labels.astype(str), kind="stable")] = np.arange(len(labels))
    return rank_of_code[codes], len(labels)


def first_rows(of_row: np.ndarray, n_groups: int) -> np.ndarray:
    """Index of the first row of each group (-1 for an empty group)."""
    first = np.full(n_groups, -1, dtype=np.int64)
    rows = np.arange(len(of_row) - 1, -1, -1, dtype=np.int64)
    first[of_row[::-1]] = rows  # assignments run in order: the last write, the first row, wins
    return first


def merged_groups(
    parts: Sequence[pd.DataFrame],
    keys: Sequence[str],
    sums: Sequence[str],
    mins: Sequence[str] = (),
    maxs: Sequence[str] = (),
) -> pd.DataFrame:
    """Per-group tables of consecutive windows of rows (one row per group of each window, `keys` its key
    columns), as one such table of all their rows: the groups in sorted key order, `sums` / `mins` / `maxs`
    (int64) added up / least / greatest, every other column the value of the group's first window (the
    windows in row order). Exact: int64 figures merged are the whole rows' figures, whatever the windows."""
    table = pd.concat(parts, ignore_index=True) if len(parts) != 1 else parts[0]
    g = group_rows(*(table[key] for key in keys))
    reduce = {**dict.fromkeys(sums, g.sum), **dict.fromkeys(mins, g.min), **dict.fromkeys(maxs, g.max)}
    return pd.DataFrame(
        {
            column: reduce[column](table[column].to_numpy()) if column in reduce else g.values(table[column])
            for column in table.columns
        }
    )


class RunningSums:
    """Per-group float sums of rows met a window at a time, each value added to its group's sum in row order:
    the same floats as one pass over all the rows (np.bincount adds in row order too), where adding the
    windows' own sums would round differently. Groups are numbered as first met; `of` reads them by key."""

    def __init__(self, names: Sequence[str]) -> None:
        self._number: dict[tuple, int] = {}
        self._sums = {name: np.zeros(0) for name in names}

    def add(self, keys: Sequence[Any], values: dict[str, np.ndarray]) -> None:
        """Add one window's rows: `keys` their key columns, `values` a float array per sum."""
        g = group_rows(*keys)
        labels = zip(*(g.values(key).tolist() for key in keys))
        number = np.array([self._number.setdefault(label, len(self._number)) for label in labels], dtype=np.int64)
        for name, sums in self._sums.items():
            if len(sums) < len(self._number):
                sums = self._sums[name] = np.concatenate([sums, np.zeros(len(self._number) - len(sums))])
            np.add.at(sums, number[g.of_row], np.asarray(values[name], dtype=np.float64))

    def of(self, keys: Sequence[Any]) -> dict[str, np.ndarray]:
        """Each sum of the groups whose key columns are `keys` (one row per group, every group met)."""
        number = np.array([self._number[label] for label in zip(*(list(key) for key in keys))], dtype=np.int64)
        return {name: sums[number] for name, sums in self._sums.items()}

"""The deterministic CSV writer (profiler/export/csv_json.py) formats float columns itself, a block of rows
at a time: the bytes must be what pandas' own `to_csv(float_format="%.6f")` writes, for every kind of value
and column (NaN with either missing-number text, infinities, -0.0, huge and tiny values, float32, columns
of NaN only, text that needs quoting or a carriage return, mixed and empty tables), across block bounds."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from profiler.export import csv_json
from profiler.export.csv_json import write_csv
from profiler.export.csv_rows import FLOAT_FORMAT


def pandas_bytes(df: pd.DataFrame, na_rep: str, quoting: int) -> bytes:
    return df.to_csv(
        index=False, float_format=FLOAT_FORMAT, lineterminator="\n", quoting=quoting, na_rep=na_rep
    ).encode()


def tricky_table(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1e3, rows)
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e300, -1e-300, 0.0000005, 0.0000015, 2.5e-7, 123456789.1234565]
    x[: len(specials)] = specials
    return pd.DataFrame(
        {
            "name": [f"op,{i}" if i % 7 == 0 else f'say "{i}"' if i % 11 == 0 else f"op{i}" for i in range(rows)],
            "calls": np.arange(rows, dtype=np.int64),
            "ms": x,
            "f32": rng.random(rows).astype(np.float32) * 100,
            "missing": np.full(rows, np.nan),
            "flag": np.arange(rows) % 2 == 0,
            "cat": pd.Categorical(np.where(np.arange(rows) % 3 == 0, "a", "b")),
        }
    )


@pytest.mark.parametrize("na_rep", ["", "nan"])
def test_the_bytes_are_pandas_float_format_across_row_blocks(tmp_path, monkeypatch, na_rep):
    monkeypatch.setattr(csv_json, "CSV_ROWS", 7)  # many blocks, bounds inside the special values
    df = tricky_table(100, seed=1)
    assert write_csv(df, tmp_path / "t.csv", na_rep=na_rep).read_bytes() == pandas_bytes(df, na_rep, csv.QUOTE_MINIMAL)


def test_a_carriage_return_quotes_every_field_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(csv_json, "CSV_ROWS", 5)
    df = tricky_table(20, seed=2)
    df.loc[3, "name"] = "two\rlines"
    assert write_csv(df, tmp_path / "t.csv").read_bytes() == pandas_bytes(df, "", csv.QUOTE_ALL)


@pytest.mark.parametrize("rows", [0, 1])
def test_empty_and_one_row_tables(tmp_path, rows):
    df = tricky_table(12, seed=3).iloc[:rows]
    assert write_csv(df, tmp_path / "t.csv").read_bytes() == pandas_bytes(df, "", csv.QUOTE_MINIMAL)
    lone = pd.DataFrame({"x": [np.nan] * rows})  # a row whose only field is empty
    assert write_csv(lone, tmp_path / "lone.csv").read_bytes() == pandas_bytes(lone, "", csv.QUOTE_MINIMAL)


def rounding_edges(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Floats where 6-decimal rounding is hardest: ties and near-ties at every magnitude, values near 2**53
    / 10**6 and past it, subnormals, whole numbers, and plain noise."""
    k = rng.integers(-(10**12), 10**12, rows)
    ties = (k + 0.5) / 1e6  # the nearest double to a decimal tie: either side of it
    near = ties + rng.choice([-1, 1], rows) * np.spacing(ties) * rng.integers(0, 4, rows)
    scale = 10.0 ** rng.integers(-9, 16, rows)
    noise = rng.normal(0, 1, rows) * scale
    edges = np.array([2**53 / 1e6, -(2**53) / 1e6, 2**53 / 1e6 + 1, 9.0071992547409915e9, 5e-324, -5e-324, 1e-7])
    values = np.concatenate([ties, near, noise, np.round(noise), edges])
    return rng.permutation(values)


@pytest.mark.parametrize("na_rep", ["", "nan", "n/a"])
def test_numbers_only_tables_are_pandas_bytes(tmp_path, monkeypatch, na_rep):
    """Tables of numbers only are written by csv_rows (one pass of numpy per column): the same bytes as pandas
    for rounding ties and near-ties, signs, NaN / inf, ints at the int64 bounds, unsigned, bools, float32."""
    monkeypatch.setattr(csv_json, "CSV_ROWS", 1000)
    rng = np.random.default_rng(7)
    x = rounding_edges(rng, 1500)
    rows = len(x)
    x[rng.integers(0, rows, 40)] = np.nan
    x[rng.integers(0, rows, 5)] = np.inf
    x[rng.integers(0, rows, 5)] = -np.inf
    x[rng.integers(0, rows, 5)] = -0.0
    ints = rng.integers(-(2**62), 2**62, rows) // 10 ** rng.integers(0, 19, rows)
    ints[:3] = [np.iinfo(np.int64).max, np.iinfo(np.int64).min + 1, 0]
    df = pd.DataFrame(
        {
            "step": np.arange(rows, dtype=np.int64),
            "ms": x,
            "ints": ints,
            "small": rng.integers(0, 200, rows).astype(np.uint8),
            "unsigned": rng.integers(0, 2**63, rows, dtype=np.uint64) * 2,  # beyond int64: pandas writes these
            "f32": (rng.normal(0, 1e4, rows)).astype(np.float32),
            "flag": rng.random(rows) < 0.5,
            "nan_only": np.full(rows, np.nan),
        }
    )
    expected = pandas_bytes(df, na_rep, csv.QUOTE_MINIMAL)
    assert write_csv(df, tmp_path / "t.csv", na_rep=na_rep).read_bytes() == expected
    numbers = df.drop(columns=["unsigned"])  # every block through csv_rows
    assert csv_json.numeric_rows(numbers.iloc[:1000], na_rep) is not None
    assert write_csv(numbers, tmp_path / "n.csv", na_rep=na_rep).read_bytes() == pandas_bytes(
        numbers, na_rep, csv.QUOTE_MINIMAL
    )


@pytest.mark.parametrize("dtype", [object, "str", "category"])
def test_a_carriage_return_in_a_later_block_of_any_text_column_is_found(tmp_path, monkeypatch, dtype):
    """The text is checked CSV_ROWS rows at a time (a categorical's categories): a carriage return in the last
    block of an object, str or categorical column still quotes every field."""
    monkeypatch.setattr(csv_json, "CSV_ROWS", 5)
    df = tricky_table(23, seed=4)
    df["name"] = df["name"].where(df.index != 21, "two\rlines").astype(dtype)
    assert write_csv(df, tmp_path / "t.csv").read_bytes() == pandas_bytes(df, "", csv.QUOTE_ALL)
    df["name"] = df["name"].astype(str).str.replace("\r", "\n").astype(dtype)
    assert write_csv(df, tmp_path / "u.csv").read_bytes() == pandas_bytes(df, "", csv.QUOTE_MINIMAL)


def test_the_heap_is_given_back_after_each_block(tmp_path, monkeypatch):
    """Each block's text and objects are freed before the next (spill.drop_resident, which trims the heap, after
    each): the freed heap of a big table's blocks, and of one file's before the next, no longer piles up."""
    calls = []
    monkeypatch.setattr(csv_json, "CSV_ROWS", 5)
    monkeypatch.setattr(csv_json, "drop_resident", lambda: calls.append(1))
    df = tricky_table(23, seed=4)
    assert write_csv(df, tmp_path / "t.csv").read_bytes() == pandas_bytes(df, "", csv.QUOTE_MINIMAL)
    assert len(calls) == 5
    numbers = df[["calls", "ms", "flag"]]  # rows of numbers only, with a header before the first block
    assert write_csv(numbers, tmp_path / "n.csv").read_bytes() == pandas_bytes(numbers, "", csv.QUOTE_MINIMAL)
    assert len(calls) == 10

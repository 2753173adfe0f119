"""Deterministic CSV and JSON files, written atomically: the same table or document always gives the
same bytes (docs/formats.md, "General rules")."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.export.csv_rows import float_texts, numeric_rows
from profiler.export.files import AtomicWrite, write_atomic
from profiler.spill import drop_resident

CSV_ROWS = 65_536  # rows formatted and written at a time: bounded memory for any table


def write_csv(df: pd.DataFrame, path: Path, na_rep: str = "") -> Path:
    """Deterministic CSV: header, '\\n' line ends, 6-decimal floats; written atomically (a unique
    temporary name, then renamed).

    Text is written as it is, quoted when it holds a comma, a quote or a line feed. Python's csv
    writer leaves a lone carriage return unquoted (readers then split the row there), so a file
    whose text holds one is written with every field quoted. `na_rep` is what a missing number
    is written as. The rows are written CSV_ROWS at a time, as pandas' `to_csv(float_format=csv_rows.FLOAT_FORMAT)`
    would write them (the same bytes, faster): rows of numbers only by csv_rows.numeric_rows, the others
    by pandas with their float columns formatted here (pandas checks and formats value by value).
    """
    quoting = csv.QUOTE_ALL if _holds_carriage_return(df) else csv.QUOTE_MINIMAL
    floats = [i for i, dtype in enumerate(df.dtypes) if isinstance(dtype, np.dtype) and dtype.kind == "f"]
    with AtomicWrite(path) as out, open(out.tmp, "wb") as f:
        for start in range(0, max(len(df), 1), CSV_ROWS):
            f.write(_rows_text(df.iloc[start : start + CSV_ROWS], quoting, na_rep, floats, header=start == 0))
            drop_resident()  # the heap the chunk's text freed: else it kept ~1 MB more per chunk (and per file)
    return out.path


def _rows_text(part: pd.DataFrame, quoting: int, na_rep: str, floats: list[int], header: bool) -> bytes:
    """The CSV bytes of a chunk of rows (with the header before them when `header`; `floats`: the positions of the
    float columns): numbers only by csv_rows.numeric_rows, else pandas with the floats formatted here."""
    rows = numeric_rows(part, na_rep) if quoting == csv.QUOTE_MINIMAL and len(part) else None
    if rows is not None:
        return (_csv_text(part.iloc[:0], quoting, na_rep) if header else b"") + rows
    if floats:
        part = part.copy(deep=False)
        for i in floats:
            part.isetitem(i, _fixed_decimals(part.iloc[:, i].to_numpy(), na_rep))
    return _csv_text(part, quoting, na_rep, header=header)


def _csv_text(part: pd.DataFrame, quoting: int, na_rep: str, header: bool = True) -> bytes:
    """pandas' CSV of `part` (floats already text), as the file's bytes."""
    text = part.to_csv(header=header, index=False, lineterminator="\n", quoting=quoting, na_rep=na_rep)
    return text.encode("utf-8", errors="backslashreplace")


def _fixed_decimals(values: np.ndarray, na_rep: str) -> np.ndarray:
    """Floats as FLOAT_FORMAT text (`na_rep` for NaN), as object values."""
    return np.array(float_texts(values.tolist(), na_rep), dtype=object)


def _holds_carriage_return(df: pd.DataFrame) -> bool:
    """Whether a text cell (or a column name) of `df` holds a carriage return: a categorical's categories, other
    text columns CSV_ROWS rows at a time (pd.unique's hash table is as long as what it is given)."""
    if any("\r" in str(c) for c in df.columns):
        return True
    return any(
        any(isinstance(v, str) and "\r" in v for v in pd.unique(part))
        for i in range(df.shape[1])
        for part in _text_parts(df.iloc[:, i])
    )


def _text_parts(column: pd.Series) -> Iterator[np.ndarray]:
    """A text column's values as objects, CSV_ROWS at a time (a categorical's categories); nothing for numbers."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        yield np.asarray(column.cat.categories, dtype=object)
    elif column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
        for start in range(0, len(column), CSV_ROWS):
            yield np.asarray(column.iloc[start : start + CSV_ROWS], dtype=object)


def write_json(obj: Any, path: Path) -> Path:
    """Deterministic JSON (sorted keys, indent 2, UTF-8); written atomically.

    Always RFC 8259: a number that is not finite is written as null (JSON has no NaN / Infinity),
    and a lone surrogate in text (a path from a non-UTF-8 file name) as its `\\udcXX` JSON escape,
    which reads back as the same string.
    """
    try:
        text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=_jsonable, allow_nan=False)
    except ValueError:  # a NaN / inf somewhere: null instead
        text = json.dumps(
            _finite(obj), indent=2, sort_keys=True, ensure_ascii=False, default=_jsonable, allow_nan=False
        )
    return write_atomic(path, (text + "\n").encode("utf-8", errors="backslashreplace"))


def _finite(obj: Any) -> Any:
    """`obj` with every float that is not finite replaced by None (for JSON)."""
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _finite(obj.tolist())
    return obj


def _jsonable(o: Any):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")

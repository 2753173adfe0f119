"""The text of CSV rows whose fields are all numbers, built column by column with numpy: the bytes pandas'
`to_csv(float_format="%.6f")` writes for them, several times faster (pandas formats and checks value by value).

Each column is laid out in a byte matrix (a row per table row, the number's characters, NUL where it has
none); the rows' text is the matrices side by side with commas and line feeds, its NUL bytes removed
(numbers hold none). Floats are rounded to DECIMALS decimals in integer arithmetic where that is provably
the correctly rounded value Python's `%` formatting gives; the rest (not finite, huge, or within rounding
error of a tie) are formatted by Python, so every value is written as `"%.6f" % value` would write it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

DECIMALS = 6  # a float's digits after the point
FLOAT_FORMAT = f"%.{DECIMALS}f"  # a float's text, as every CSV output writes it
_SCALE = 10**DECIMALS
_NUMBER_KINDS = "iufb"  # numpy dtype kinds written here: signed, unsigned, float, bool
_QUADS = np.array([b"%04d" % i for i in range(10_000)], dtype="S4").view(np.uint32)  # "0000" ... "9999"
_POWERS = 10 ** np.arange(19, dtype=np.int64)  # 1, 10, ..., 10**18
_BOOLS = np.array([b"False", b"True"], dtype="S5").view(np.uint8).reshape(2, 5)
_COMMA, _LINE_FEED, _POINT, _MINUS = (ord(c) for c in ",\n.-")


def numeric_rows(part: pd.DataFrame, na_rep: str) -> Optional[bytes]:
    """The CSV text (no header) of `part`'s rows, `na_rep` for a missing float; None when a column is not
    numbers (text goes through pandas) or `part` has one column (a row whose only field is empty is
    written quoted there)."""
    if part.shape[1] < 2 or not all(isinstance(t, np.dtype) and t.kind in _NUMBER_KINDS for t in part.dtypes):
        return None
    rows = len(part)
    pieces: list[np.ndarray] = []
    for i in range(part.shape[1]):
        field = _field(part.iloc[:, i].to_numpy(), na_rep)
        if field is None:
            return None
        pieces += [field, np.full((rows, 1), _COMMA, np.uint8)]
    pieces[-1] = np.full((rows, 1), _LINE_FEED, np.uint8)
    return np.concatenate(pieces, axis=1).tobytes().translate(None, b"\0")


def _field(values: np.ndarray, na_rep: str) -> Optional[np.ndarray]:
    """One column's characters, a row per value, NUL-padded (None: a value this module does not write)."""
    if values.dtype.kind == "b":
        return _BOOLS[values.astype(np.intp)]
    if values.dtype.kind == "f":
        return _float_field(values, na_rep)
    if values.dtype.kind == "u" and len(values) and values.max() > np.iinfo(np.int64).max:
        return None
    values = values.astype(np.int64, copy=False)
    if len(values) and values.min() == np.iinfo(np.int64).min:  # no magnitude in int64
        return None
    return np.concatenate([_sign(values < 0), _magnitude(np.abs(values))], axis=1)


def _float_field(values: np.ndarray, na_rep: str) -> np.ndarray:
    """Floats as `"%.6f" % value` (`na_rep` for NaN)."""
    x = values.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.abs(x) * _SCALE
        nearest = np.rint(scaled)
        # The product is within half a unit in its last place of |x| * 10**6 exactly: where it is farther
        # than that from every half-integer, its nearest integer is the exact product's, the digits '%'
        # writes. Elsewhere (and for NaN, infinities and values past 2**53) Python formats the value.
        exact = (scaled < 2.0**53) & (0.5 - np.abs(scaled - nearest) > 2 * np.spacing(scaled))
    whole = np.where(exact, nearest, 0).astype(np.int64)
    integral, fraction = np.divmod(whole, _SCALE)
    field = np.concatenate(
        [
            _sign(np.signbit(x)),
            _magnitude(integral),
            np.full((len(x), 1), _POINT, np.uint8),
            _digits(fraction, DECIMALS),
        ],
        axis=1,
    )
    others = np.flatnonzero(~exact)
    if len(others):
        text = [t.encode() for t in float_texts(x[others].tolist(), na_rep)]
        width = max(len(t) for t in text)
        if width > field.shape[1]:
            field = np.concatenate([field, np.zeros((len(x), width - field.shape[1]), np.uint8)], axis=1)
        field[others] = 0
        if width:
            field[others, :width] = np.array(text, dtype=f"S{width}").view(np.uint8).reshape(len(others), width)
    return field


def _sign(negative: np.ndarray) -> np.ndarray:
    """A column of '-' where `negative`, NUL elsewhere."""
    return (negative.astype(np.uint8) * _MINUS).reshape(-1, 1)


def _magnitude(values: np.ndarray) -> np.ndarray:
    """Non-negative int64 `values` in decimal without leading zeros (0 is "0"), NUL-padded on the left."""
    width = int(np.searchsorted(_POWERS, values.max(), side="right")) if len(values) else 1
    digits = _digits(values, max(width, 1))
    counts = np.maximum(np.searchsorted(_POWERS, values, side="right"), 1)  # each value's digits
    return digits * (np.arange(digits.shape[1], dtype=np.intp) >= (digits.shape[1] - counts)[:, None])


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative int64 `values` (< 10**width) as `width` decimal digits, zero-padded: four digits per
    table lookup, from the last."""
    groups = -(-width // 4)
    quads = np.empty((len(values), groups), np.uint32)
    rest = values
    for g in range(groups - 1, -1, -1):
        rest, quad = np.divmod(rest, 10_000)
        quads[:, g] = _QUADS[quad]
    return quads.view(np.uint8)[:, groups * 4 - width :]


def float_texts(values: list[float], na_rep: str) -> list[str]:
    """Floats as FLOAT_FORMAT text (Python's own formatting), `na_rep` for NaN."""
    return [na_rep if v != v else FLOAT_FORMAT % v for v in values]

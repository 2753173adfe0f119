"""The text of Chrome-trace rows: times in microseconds on a 1/1024 µs grid, and whole rows
(`head` + ts [+ `,"dur":` + dur] + tail) without a Python loop per event.

Rows are formatted by a C kernel (`_trace_rows.c`) when it is built, else by `format_rows_numpy`,
which lays them out as fixed-width byte matrices with integer arithmetic on numpy arrays and then
drops the padding; both give the same bytes (tests/unit/test_core_kernels.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np

from profiler.kernels.native import native

_trace_rows = native("profiler.export._trace_rows")

TS_WIDTH = 28  # the longest time: "-" + 16 integer digits + "." + 10 decimals (any int64 ns)
DUR_WIDTH = 28
INT_WIDTH = 17  # sign and integer digits
FRAC_DIGITS = 10  # k / 1024 has at most 10 decimals
MIN_DECIMALS = 3


_TRIPLETS = np.array([list(f"{i:03d}".encode()) for i in range(1000)], dtype=np.uint8)  # "000".."999"


def _floor_divmod(v: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    return np.floor_divide(v, d), np.mod(v, d)


def grid_parts(q: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, r) with ns = 125 q + r, 0 <= r < 250 -> (integer µs part, fraction in 1024ths), as the C kernel."""
    carry = r >= 125
    r = np.where(carry, r - 125, r)
    q = q + carry
    a, b = _floor_divmod(q, 8)
    f = 128 * b + (r * 128 + 62) // 125
    return a + f // 1024, f % 1024


def grid_times(ts_ns: np.ndarray, dur_ns: Optional[np.ndarray] = None):
    """The trace's times: ns rounded to the 1/1024 µs grid, as (integer part, 1024ths) of the start
    and, with durations, of the duration derived from the rounded start and the rounded end.

    Why a binary grid: every value written is then exactly a float64, and so are the sums a reader
    makes (ts + dur), so spans that touch in nanoseconds touch exactly in every viewer.
    """
    q1, r1 = _floor_divmod(np.asarray(ts_ns, dtype=np.int64), 125)
    ip, frac = grid_parts(q1, r1)
    if dur_ns is None:
        return (ip, frac), None
    q2, r2 = _floor_divmod(np.asarray(dur_ns, dtype=np.int64), 125)
    eip, efrac = grid_parts(q1 + q2, r1 + r2)
    dip, dfrac = eip - ip, efrac - frac
    borrow = dfrac < 0
    return (ip, frac), (dip - borrow, np.where(borrow, dfrac + 1024, dfrac))


def grid_decimal(ip: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """ip + frac / 1024 as fixed-width text: (n, 28) uint8, sign and integer digits right-aligned in
    17 columns, ".", 10 decimals with trailing zeros past the third blanked (the C kernel's
    grid_decimal, with the padding still in: the caller drops the spaces)."""
    ip, frac = np.asarray(ip, dtype=np.int64), np.asarray(frac, dtype=np.int64)
    n = len(ip)
    neg = ip < 0
    whole = np.where(neg, np.where(frac > 0, -(ip + 1), -ip), ip)
    part = np.where(neg & (frac > 0), 1024 - frac, frac)
    out = np.full((n, TS_WIDTH), ord(" "), dtype=np.uint8)
    # integer digits, three at a time from the least significant
    digits = np.empty((n, 18), dtype=np.uint8)
    rest = whole
    for g in range(6):
        rest, low = np.divmod(rest, 1000)
        digits[:, 18 - 3 * (g + 1) : 18 - 3 * g] = _TRIPLETS[low]
    n_digits = np.ones(n, dtype=np.int64)
    for k in range(1, 17):
        n_digits += whole >= 10**k
    cols = np.arange(INT_WIDTH)[None, :]
    first = INT_WIDTH - n_digits  # column of the first digit
    body = digits[:, 1:]  # 17 columns
    out[:, :INT_WIDTH] = np.where(cols >= first[:, None], body, ord(" "))
    if neg.any():
        rows = np.flatnonzero(neg)
        out[rows, first[rows] - 1] = ord("-")
    out[:, INT_WIDTH] = ord(".")
    f = part * 9765625  # 10 decimals of part / 1024
    fd = np.empty((n, 12), dtype=np.uint8)
    for g in range(4):
        f, low = np.divmod(f, 1000)
        fd[:, 12 - 3 * (g + 1) : 12 - 3 * g] = _TRIPLETS[low]
    frac_text = fd[:, 2:]  # 10 columns
    zeros = np.zeros(n, dtype=np.int64)  # trailing zeros that may go (at most 7)
    still = np.ones(n, dtype=bool)
    for c in range(FRAC_DIGITS - 1, MIN_DECIMALS - 1, -1):
        still &= frac_text[:, c] == ord("0")
        zeros += still
    keep_cols = np.arange(FRAC_DIGITS)[None, :] < (FRAC_DIGITS - zeros)[:, None]
    out[:, INT_WIDTH + 1 :] = np.where(keep_cols, frac_text, ord(" "))
    return out


def fixed_decimal(ns: np.ndarray, width: int = TS_WIDTH) -> np.ndarray:
    """ns times as the trace writes them, fixed-width (spaces are padding): (n, width) uint8."""
    (ip, frac), _ = grid_times(ns)
    return _widen(grid_decimal(ip, frac), width)


ROWS_PER_WRITE = 1 << 20  # numpy path: rows formatted per write, bounding the memory of a block's text
BUFFER_BYTES = 32 << 20  # C path: one reused output buffer per trace
_MID = b',"dur":'
_SPACE = ord(" ")


def new_row_buffer() -> Optional[np.ndarray]:
    """An output buffer for `row_texts` to reuse from block to block (None on the numpy path, which needs none)."""
    return np.empty(BUFFER_BYTES, dtype=np.uint8) if _trace_rows is not None else None


def row_texts(
    heads: bytes,
    offsets: np.ndarray,
    key: np.ndarray,
    ts: np.ndarray,
    dur: Optional[np.ndarray],
    order: Optional[np.ndarray],
    buffer: Optional[np.ndarray] = None,
    tail: bytes = b"},\n",
    use_kernel: bool = True,
) -> Iterator[bytes | memoryview]:
    """The text of rows order[0:n] (or 0:n), piece by piece: head[key] + ts [+ ,"dur": + dur] + tail.

    With the C kernel the pieces are views of `buffer`, valid until the next piece is asked for.
    """
    n = len(key) if order is None else len(order)
    if _trace_rows is None or not use_kernel:
        for start in range(0, n, ROWS_PER_WRITE):
            yield format_rows_numpy(
                heads,
                offsets,
                key,
                ts,
                dur,
                order,
                start,
                min(n, start + ROWS_PER_WRITE),
                TS_WIDTH,
                DUR_WIDTH,
                _MID,
                tail,
            )
        return
    longest = int(np.diff(offsets).max(initial=0)) + TS_WIDTH + len(_MID) + DUR_WIDTH + len(tail)
    if buffer is None or len(buffer) < longest:
        buffer = np.empty(max(BUFFER_BYTES, longest), dtype=np.uint8)
    start = 0
    while start < n:
        start, size = _trace_rows.format_rows(
            buffer, heads, offsets, key, ts, dur, order, start, n, TS_WIDTH, DUR_WIDTH, _MID, tail
        )
        yield memoryview(buffer)[:size]


def format_rows_numpy(
    heads: bytes,
    offsets: np.ndarray,
    key: np.ndarray,
    ts: np.ndarray,
    dur: Optional[np.ndarray],
    order: Optional[np.ndarray],
    start: int,
    stop: int,
    ts_width: int,
    dur_width: int,
    mid: bytes,
    tail: bytes,
) -> bytes:
    """The rows order[start:stop] as text (the C kernel's reference and fallback).

    Rows must come grouped by key; each run of one key is laid out as a (rows, columns) byte matrix
    with right-aligned numbers, whose padding is then left out.
    """
    rows = np.arange(start, stop) if order is None else order[start:stop]
    keys = key[rows]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    starts, stops = np.concatenate([[0], bounds]), np.concatenate([bounds, [len(rows)]])
    start_parts, dur_parts = grid_times(ts[rows], None if dur is None else dur[rows])
    ts_text = _widen(grid_decimal(*start_parts), ts_width)
    dur_text = _widen(grid_decimal(*dur_parts), dur_width) if dur is not None else None
    tail_bytes, mid_bytes = np.frombuffer(tail, dtype=np.uint8), np.frombuffer(mid, dtype=np.uint8)
    out = []
    for a, b in zip(starts, stops):
        k = int(keys[a])
        head = np.frombuffer(heads[offsets[k] : offsets[k + 1]], dtype=np.uint8)
        m = b - a
        parts = [np.broadcast_to(head, (m, len(head))), ts_text[a:b]]
        if dur_text is not None:
            parts += [np.broadcast_to(mid_bytes, (m, len(mid_bytes))), dur_text[a:b]]
        parts.append(np.broadcast_to(tail_bytes, (m, len(tail_bytes))))
        matrix = np.hstack(parts)
        keep = np.ones(matrix.shape, dtype=bool)
        keep[:, len(head) : len(head) + ts_width] = ts_text[a:b] != _SPACE
        if dur_text is not None:
            at = len(head) + ts_width + len(mid)
            keep[:, at : at + dur_width] = dur_text[a:b] != _SPACE
        out.append(matrix[keep].tobytes())
    return b"".join(out)


def _widen(text: np.ndarray, width: int) -> np.ndarray:
    if width < TS_WIDTH:
        raise ValueError(f"the field width must be at least {TS_WIDTH}")
    return text if width == TS_WIDTH else np.hstack([np.full((len(text), width - TS_WIDTH), _SPACE, np.uint8), text])

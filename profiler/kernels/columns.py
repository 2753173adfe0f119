"""The range of every column of an int64 table: what the raw store's reader checks records with.

`ranges` runs the C kernel (`_columns.c`, one pass over the rows) when it is built, else numpy
(a pass per column and bound); both give the same numbers (tests/unit/test_core_kernels.py).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from profiler.kernels.native import native

_kernel = native("profiler.kernels._columns")


def ranges(table: np.ndarray, use_kernel: bool = True) -> Optional[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(smallest, largest) value of each column of an (n, k) int64 table, None when it has no rows."""
    if not len(table):
        return None
    if _kernel is not None and use_kernel and table.flags.c_contiguous:
        return _kernel.ranges(table, table.shape[1])
    columns = range(table.shape[1])
    return tuple(int(table[:, k].min()) for k in columns), tuple(int(table[:, k].max()) for k in columns)

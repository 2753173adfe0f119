"""Ops by call stack (the TensorBoard plugin's "View CallStack" of its operator view, docs/tensorboard.md):
for traces recorded with `with_stack=True`, each framework op's call stack is the chain of Python frames
around it on its thread (`train.py(42): step`, `nn.Module: Linear_0`, ...), and the op table is grouped
by op name and that stack. Pure: the ops table and its launches in, a table out.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.launches import DeviceTimes, Launches, framework_ops
from profiler.analysis.ops import OP_WINDOW_ROWS, gathered_column, op_launches, op_rows, op_table, summed_totals
from profiler.formats.columns import OP_STACK_COLUMNS
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.nesting import by_depth, enclosing_parents, positions_passing, positions_where
from profiler.kernels.paths import PathCodes
from profiler.model import with_columns

#: How the frames of a stack are joined in the `stack` column, outermost first.
FRAME_SEPARATOR = " > "


def call_stacks(ops: pd.DataFrame) -> pd.Categorical:
    """Per row: the Python frames enclosing it on its thread, outermost first, joined by FRAME_SEPARATOR
    ("" for rows outside every frame, and for rows that are not on the host), as a categorical.

    A trace recorded with_stack holds a frame event for every Python call, millions in a big one, but few distinct
    stacks (its code paths): each row keeps a code of its stack (`_Stacks`), made a chunk of rows at a time into
    spill files when big, and each distinct stack is joined into text once. A text per row (a stack's every frame
    name again, per row) took ~6 GB for a 0.5 GB trace."""
    n = len(ops)
    stacks = _Stacks(ops["name"])
    codes = spill.filled(n, np.int32, 0)
    device, category = ops["device"], ops["category"]
    host = positions_passing(n, lambda at: (device.iloc[at] == "cpu").to_numpy())
    python = spill.chunked(len(host), bool, lambda at: (category.iloc[host[at]] == "python").to_numpy(), along=host)
    if len(host) and any(python[at].any() for at in spill.chunks(len(host))):
        own = _own_stacks(ops, host, python, stacks)
        for at in spill.chunks(len(host)):
            codes[host[at]] = own[at]
    return stacks.categorical(codes)


def _own_stacks(ops: pd.DataFrame, host: np.ndarray, python: np.ndarray, stacks: _Stacks) -> np.ndarray:
    """Per host row (`host`: their rows in `ops`; `python`: whether each is a frame), the code of the stack of frames
    around it: its parent's stack, and a frame's children's stack that one with the frame added. Parents before
    children (`by_depth`), a chunk of rows of one depth at a time."""
    lane, _ = codes_and_labels(gathered_column(ops["stream"], host))
    start_ns, dur_ns = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    start = spill.gathered(start_ns, host)
    end = spill.chunked(len(host), np.int64, lambda at: start[at] + dur_ns[host[at]], along=host)
    parent = enclosing_parents(lane, start, end)
    del lane
    own = spill.filled(len(host), np.int32, 0)
    inside = spill.empty(len(host), np.int32)  # the stack a row's children are in
    for at in spill.chunks(len(host)):  # the roots: under no frame (the others are done below, by depth)
        inside[at] = stacks.entered(own[at], host[at], python[at] & (parent[at] < 0))
    for rows in spill.dropping(by_depth(parent)):
        above = inside[parent[rows]]
        own[rows] = above
        inside[rows] = stacks.entered(above, host[rows], python[rows])
    return own


class _Stacks:
    """The distinct call stacks met (`PathCodes`): code 0 is no frame (""), each other a stack with a frame's name
    added, joined by FRAME_SEPARATOR."""

    def __init__(self, names: pd.Series) -> None:
        self._name_codes, labels = codes_and_labels(names)
        texts = [*labels.astype(str).tolist(), "nan"]  # a missing name (code -1) reads "nan", as astype(str) has it
        self._missing = len(texts) - 1
        self._paths = PathCodes(texts, FRAME_SEPARATOR)

    @property
    def texts(self) -> list[str]:
        return self._paths.texts

    def entered(self, above: np.ndarray, rows: np.ndarray, frame: np.ndarray) -> np.ndarray:
        """The stacks the children of `rows` of the ops table are in: `above` (the rows' own stack codes), with the
        row's name added where the row is a frame (`frame`)."""
        codes = self._name_codes[rows]
        return self._paths.entered(above, np.where(frame, np.where(codes >= 0, codes, self._missing), -1))

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """The rows' stacks (`codes`) as a categorical of their texts (two stacks of one text, possible when a frame
        name holds the separator, are one category), its codes in pandas' own type for that many categories (which
        it would copy them into) recoded a chunk at a time (spill.chunked)."""
        recode, texts = pd.factorize(np.array(self.texts, dtype=object))
        categories = pd.Index(texts, dtype=object)
        dtype = pd.Categorical.from_codes([], categories=categories).codes.dtype
        if len(texts) < len(self.texts) or codes.dtype != dtype:
            recode = recode.astype(dtype)
            codes = spill.chunked(len(codes), dtype, lambda at: recode[codes[at]])
        return pd.Categorical.from_codes(codes, categories=categories)


def has_python_frames(ops: pd.DataFrame) -> bool:
    """Whether any op is a Python frame (a trace recorded with_stack=True): asked of a categorical's categories
    first, so a big trace without frames is answered without an array per op."""
    category = ops["category"]
    if isinstance(category.dtype, pd.CategoricalDtype) and "python" not in category.cat.categories:
        return False
    return bool((category == "python").any())


def op_stack_table(
    ops: pd.DataFrame,
    launched: Optional[Launches] = None,
    times: Optional[DeviceTimes] = None,
    window_rows: int = OP_WINDOW_ROWS,
) -> pd.DataFrame:
    """Per device, framework op name and call stack (OP_STACK_COLUMNS): count, host and device times.
    Empty when the trace recorded no Python frames. The framework ops' columns are gathered a chunk at a time
    (`op_rows`) and summed `window_rows` rows at a time (`summed_totals`)."""
    if not has_python_frames(ops):
        return pd.DataFrame(columns=OP_STACK_COLUMNS)
    stacks = call_stacks(ops)
    rows = positions_where(framework_ops(ops))
    empty = stacks.categories.get_loc("")  # rows outside every frame
    if not any((stacks.codes[rows[at]] != empty).any() for at in spill.chunks(len(rows))):
        return pd.DataFrame(columns=OP_STACK_COLUMNS)
    keys, labels = ["device", "name", "stack"], ["op_type", "category"]
    chosen = with_columns(
        op_rows(ops, ["device", "name", "op_type", "category", "dur_ns", "self_ns"], rows),
        stack=pd.Categorical.from_codes(spill.gathered(stacks.codes, rows), dtype=stacks.dtype),
    )
    figures = op_launches(ops, launched, times)
    totals = summed_totals(chosen, None if figures is None else figures.take(rows), window_rows, keys, labels)
    return op_table(totals, OP_STACK_COLUMNS, ["device", "total_ms", "name"])

"""Which ops compute in float64: the ops a float64 detour charges (findings/precision.py states the
cause; findings/operators.py leaves these ops out of its Cast and normalisation hotspots, so one cause
is charged once). Two ways to know, either is enough: the ops' recorded input types (torch's
`record_shapes=True`: `float64_charged`), or the spans `attach()` marks around the modules that hold
float64 parameters (`float64_module_charged`). Pure: tables in, a mask over the op rows out."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from profiler import spill
from profiler.kernels.grouping import codes_and_labels, text_matches
from profiler.kernels.nesting import by_depth, enclosing_parents, positions_passing
from profiler.model import FLOAT64_MODULE_SPAN, op_times

#: Names of dtype conversion ops, in every framework (the Cast op family of findings/operators.py;
#: float64_charged charges those around float64 ops): MindSpore / Ascend Cast, torch's aten::to / _to_copy / copy_ and
#: their backward, CUDA copy kernels.
CAST_OP_NAME = re.compile(
    r"(?i)(?:^cast\b|^cast-|/cast|aten::(?:to|_to_copy|copy_|type_as)$|tocopybackward|copy_kernel)"
)
#: How the recorded input types name float64 (torch: "double", "c10::complex<double>").
FLOAT64_TYPE = "double"
#: Input types that are floating point (torch: float, double, c10::Half, c10::BFloat16, c10::Float8_*,
#: complex); the others (Scalar, long int, bool, lists) say nothing about precision.
FLOATING_TYPE = re.compile(r"(?i)float|double|half|bfloat16|complex")


def float64_charged(ops: pd.DataFrame) -> np.ndarray:
    """Per op, whether its self time is float64's: an op whose floating-point inputs are all float64
    (aten::native_group_norm(double, double, double); not aten::mul(float, double), a float32 op
    scaled by a float64 number), a cast (`CAST_OP_NAME`) between float64 and another type or with
    one inside it (aten::to -> _to_copy -> copy_(double, float)), and what those ops run inside
    them (their allocations, launches).

    Its per-op arrays are made a chunk of ops at a time into spill files when the run is spilled (spill.chunked):
    nothing of the whole table's size is the process's own memory but the mask returned."""
    n = len(ops)
    float64, converts = _by_input_types(ops["dtypes"])
    cast = _casts(ops)
    own = spill.chunked(n, bool, lambda at: float64[at] | (cast[at] & converts[at]))
    if not own.any():
        return _nothing_charged(n)
    lane = _lanes(ops)
    # charges pass along the nesting, which stays on a lane: only the lanes holding a float64 op are nested
    holding = np.zeros(max(int(lane[at].max()) for at in spill.chunks(n)) + 1, dtype=bool)
    for at in spill.chunks(n):
        holding[lane[at][own[at]]] = True
    on = positions_passing(n, lambda at: holding[lane[at]])
    own, cast = spill.gathered(own, on), spill.gathered(cast, on)
    parent = _lane_nesting(ops, lane, on)
    levels = by_depth(parent)
    holds = spill.chunked(len(on), bool, lambda at: own[at])  # a charged op at or below it: innermost level first
    for rows in spill.dropping(reversed(levels)):
        holds[parent[rows[holds[rows]]]] = True
    charged = spill.chunked(len(on), bool, lambda at: own[at] | (holds[at] & cast[at]))
    for rows in spill.dropping(levels):  # what a charged op runs inside it: outermost first
        charged[rows] |= charged[parent[rows]]
    out = _nothing_charged(n)
    for at in spill.chunks(len(on)):
        out[on[at]] = charged[at]
    return out


def _nothing_charged(n: int) -> np.ndarray:
    """A mask of `n` ops none of which is charged, zeroed a chunk at a time into a spill file when big (it is kept
    while the report is made: the whole table's size, not the process's own memory)."""
    return spill.filled(n, bool, False)


def _casts(ops: pd.DataFrame) -> np.ndarray:
    """Whether each op is a dtype conversion (`CAST_OP_NAME`), made a chunk of ops at a time (spilled when big)."""
    names = ops["name"]
    return spill.chunked(len(ops), bool, lambda at: text_matches(names.iloc[at], CAST_OP_NAME.search))


#: Ops whose input types are coded at a time (`_by_input_types`: a window's codes, not the column's).
TYPES_WINDOW = 1 << 18


def _lanes(ops: pd.DataFrame) -> np.ndarray:
    """One number per op's lane (device and stream), from 0 (codes -1, missing, count as a value): int32, made a
    chunk of ops at a time, spilled (kept while the charges are found)."""
    device, devices = codes_and_labels(ops["device"])
    stream, streams = codes_and_labels(ops["stream"])
    dtype = np.int32 if (len(devices) + 1) * (len(streams) + 1) < 2**31 else np.int64
    width = len(streams) + 1
    return spill.chunked(len(ops), dtype, lambda at: (device[at].astype(dtype) + 1) * width + stream[at] + 1)


def _lane_nesting(ops: pd.DataFrame, lane: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each of the ops `rows`' innermost enclosing op on its lane among them (a position in `rows`, int64 in a
    spill file when big), -1 at a root; its inputs dropped on return (a big trace's ops are millions)."""
    return enclosing_parents(spill.gathered(lane, rows), *op_times(ops, rows))


def _by_input_types(dtypes: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per op: all its floating-point inputs are float64; its inputs mix float64 with another
    floating-point type. Read once per distinct input type list, a window of ops at a time."""
    only, mixed = spill.empty(len(dtypes), bool), spill.empty(len(dtypes), bool)  # every window writes its part
    kinds_of: dict[str, tuple[bool, bool]] = {}
    for lo in range(0, len(dtypes), TYPES_WINDOW):
        codes, texts = codes_and_labels(dtypes.iloc[lo : lo + TYPES_WINDOW])  # no text per op
        for text in map(str, texts):
            if text not in kinds_of:
                kinds_of[text] = _floating_kinds(text)
        kinds = np.array([kinds_of[str(t)] for t in texts] + [(False, False)], dtype=bool)  # code -1: neither
        only[lo : lo + TYPES_WINDOW], mixed[lo : lo + TYPES_WINDOW] = kinds[codes, 0], kinds[codes, 1]
    return only, mixed


def _floating_kinds(text: str) -> tuple[bool, bool]:
    """(only float64, float64 and another floating type) of one input type list (JSON text)."""
    try:
        types = json.loads(text) if text else []
    except ValueError:
        return False, False
    floating = [t for t in types if isinstance(t, str) and FLOATING_TYPE.search(t)]
    wide = [FLOAT64_TYPE in t for t in floating]
    return bool(wide) and all(wide), any(wide) and not all(wide)


def float64_module_charged(ops: pd.DataFrame, spans: pd.DataFrame, threads: pd.DataFrame) -> np.ndarray:
    """Per op, whether it is part of a float64 module's detour recorded without input types: inside a
    float64 module's forward or backward span (`FLOAT64_MODULE_SPAN`, profiler/capture/torch_dtypes.py) on
    the span's thread, or a cast (`CAST_OP_NAME`, with what runs inside it) right before or right after
    such a span there: the conversion into float64 and back out of it (forward: aten::to; backward:
    ToCopyBackward0)."""
    charged = _nothing_charged(len(ops))
    if not len(ops) or spans is None or not len(spans):
        return charged
    mine = spans[spans["name"].astype(str).str.startswith(FLOAT64_MODULE_SPAN).to_numpy()]
    if not len(mine):
        return charged
    thread_name = dict(zip(threads["tid"].tolist(), threads["name"].astype(str).tolist()))
    cast = _casts(ops)
    lanes = {name: _lane_ops(ops, name) for name in {thread_name.get(t, "") for t in mine["tid"]}}
    for tid, s, d in zip(mine["tid"].tolist(), mine["start_ns"].tolist(), mine["dur_ns"].tolist()):
        rows, rs, re_ = lanes[thread_name.get(tid, "")]
        if not len(rows):
            continue
        lo, hi = int(s), int(s) + int(d)
        charged[rows[(rs >= lo) & (re_ <= hi)]] = True
        before = np.flatnonzero(re_ <= lo)  # the op that ended last before the span: a cast is the conversion in
        if len(before):
            last = before[np.argmax(re_[before])]
            if cast[rows[last]]:
                charged[rows[(rs >= rs[last]) & (re_ <= re_[last])]] = True
        after = np.flatnonzero(rs >= hi)  # the op that began first after the span: a cast is the conversion out
        if len(after):
            first = after[np.argmin(rs[after])]
            if cast[rows[first]]:
                charged[rows[(rs >= rs[first]) & (re_ <= re_[first])]] = True
    return charged


def _lane_ops(ops: pd.DataFrame, stream: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the ops whose stream reads `stream` (a missing one reads "nan", as in `astype(str)`), with their
    start and end: found from the column's codes a chunk of ops at a time, spilled when big."""
    codes, labels = codes_and_labels(ops["stream"])
    named = np.array([str(label) == stream for label in labels.tolist()] + [stream == "nan"], dtype=bool)
    rows = positions_passing(len(ops), lambda at: named[codes[at]])
    return (rows, *op_times(ops, rows))

"""The communication operations of a rank (the TensorBoard plugin's distributed view, docs/tensorboard.md):
per collective (`nccl:all_reduce`, `gloo:broadcast`, ...), its calls, message size and latency.

A call is one collective range on the host (the importer makes them `comm` ops, with the shapes and
types of the message). Its latency covers the range and the device executions launched inside it
(an NCCL kernel runs on after the host range returns); a collective's total latency is the union of
its calls' (overlapping calls counted once). The message size is the product of each input's
dimensions times its element's size, summed over the inputs (an element type the table does not know
counts 0, as in the plugin). Pure: the ops table and its launches in, a table out.

Data transfer time (the plugin's, across ranks): each call's pieces are the device executions it
launched, in start order (its host range when it launched none: gloo). The k-th call of a collective
on every rank is one collective; its j-th piece takes, on every rank, as long as the shortest rank's:
the rest of a longer piece is waiting for the slowest peer to arrive. A rank's transfer time of a
collective is the union of [end - shortest, end) over its pieces. Ranks that disagree on a collective's
calls or pieces (a cut trace, a rank that skipped a call) have no transfer time for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.launches import Launches
from profiler.formats.columns import COMM_OP_COLUMNS, COMM_PIECE_COLUMNS
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.intervals import union
from profiler.model import COLLECTIVE_PREFIXES

#: Op rows read at a time for the executions the collectives launched (~60 B of temporaries per row of a chunk).
EXECUTION_ROWS = 1 << 16
#: Bytes per element of the element types torch writes in "Input type".
ELEMENT_BYTES = {
    "double": 8,
    "long int": 8,
    "long": 8,
    "c10::complex<float>": 8,
    "float": 4,
    "int": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "short int": 2,
    "short": 2,
    "unsigned char": 1,
    "signed char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}


def collective_rows(ops: pd.DataFrame) -> np.ndarray:
    """Whether each row is a collective's host range (names read only for the host's comm rows), the host's comm
    rows found a chunk of rows at a time (spill.chunked: no whole-table temporaries)."""
    device, category = ops["device"], ops["category"]
    out = spill.chunked(
        len(ops), bool, lambda at: (device.iloc[at] == "cpu").to_numpy() & (category.iloc[at] == "comm").to_numpy()
    )
    rows = np.flatnonzero(out)
    out[rows] = ops["name"].iloc[rows].astype(str).str.startswith(COLLECTIVE_PREFIXES).to_numpy()
    return out


def message_bytes(shapes: str, dtypes: str) -> int:
    """The size of a collective's message from its shapes ("[[1024, 3]]") and types ('["float"]')."""
    try:
        dims, types = json.loads(shapes or "[]"), json.loads(dtypes or "[]")
    except ValueError:
        return 0
    if not isinstance(dims, list) or not isinstance(types, list):
        return 0
    total = 0
    for shape, kind in zip(dims, types):
        if isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
            total += int(np.prod(shape, dtype=np.int64)) * ELEMENT_BYTES.get(str(kind), 0)
    return total


def comm_op_table(ops: pd.DataFrame, launched: Optional[Launches]) -> pd.DataFrame:
    """One row per collective (COMM_OP_COLUMNS), by total latency, longest first."""
    calls = _collective_calls(ops, launched)
    if calls is None:
        return pd.DataFrame(columns=COMM_OP_COLUMNS)
    rows = calls.rows
    start, dur = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    # a call's latency covers its host range and the device executions it launched
    covered = np.concatenate([rows, calls.executions])
    all_start = start[covered]
    all_end = all_start + dur[covered]
    all_name = calls.names[np.concatenate([np.arange(len(rows)), calls.owner])]
    size = np.array(
        [
            message_bytes(s, d)
            for s, d in zip(ops["shapes"].iloc[rows].astype(str), ops["dtypes"].iloc[rows].astype(str))
        ],
        dtype=np.int64,
    )
    out = []
    for name in sorted(set(calls.names)):
        mine = calls.names == name
        merged_start, merged_end = union(all_start[all_name == name], all_end[all_name == name])
        latency = int((merged_end - merged_start).sum())
        out.append((name, int(mine.sum()), int(size[mine].sum()), latency / 1e6))
    table = pd.DataFrame(out, columns=["name", "calls", "total_bytes", "total_ms"])
    table["mean_bytes"] = table["total_bytes"] / table["calls"]
    table["mean_ms"] = table["total_ms"] / table["calls"]
    return table.sort_values(["total_ms", "name"], ascending=[False, True], ignore_index=True)[COMM_OP_COLUMNS]


def comm_pieces(ops: pd.DataFrame, launched: Optional[Launches]) -> pd.DataFrame:
    """Every collective call's pieces (COMM_PIECE_COLUMNS): `call` counts the collective's calls on this
    rank in start order, `piece` the device executions the call launched in start order (its host range,
    piece 0, when it launched none)."""
    calls = _collective_calls(ops, launched)
    if calls is None:
        return pd.DataFrame(columns=COMM_PIECE_COLUMNS)
    rows = calls.rows
    start = ops["start_ns"].to_numpy(np.int64)
    dur = ops["dur_ns"].to_numpy(np.int64)
    bare = np.setdiff1d(np.arange(len(rows)), calls.owner)  # calls that launched nothing: their own range
    piece_rows, piece_owner = np.concatenate([calls.executions, rows[bare]]), np.concatenate([calls.owner, bare])
    order = np.lexsort((start[piece_rows], start[rows][piece_owner]))
    piece_rows, piece_owner = piece_rows[order], piece_owner[order]
    table = pd.DataFrame(
        {
            "name": calls.names[piece_owner],
            "owner": piece_owner,
            "start_ms": start[piece_rows] / 1e6,
            "dur_ms": dur[piece_rows] / 1e6,
        }
    )
    first = ~table["owner"].duplicated().to_numpy()
    table["call"] = pd.Series(first.astype(np.int64)).groupby(table["name"].to_numpy()).cumsum().to_numpy() - 1
    table["piece"] = table.groupby("owner").cumcount().to_numpy()
    return table[COMM_PIECE_COLUMNS]


@dataclass(frozen=True)
class _Calls:
    """A rank's collective calls: their host ranges (`rows` of the ops table) and names, and the device
    executions they launched, each with the position in `rows` of its call (`owner`)."""

    rows: np.ndarray
    names: np.ndarray
    executions: np.ndarray
    owner: np.ndarray


def _collective_calls(ops: pd.DataFrame, launched: Optional[Launches]) -> Optional[_Calls]:
    """The rank's collective calls, or None when it made none."""
    rows = np.flatnonzero(collective_rows(ops))
    if not len(rows):
        return None
    executions, owner = _executions_inside(ops, launched, rows) if launched is not None else (rows[:0], rows[:0])
    return _Calls(rows, ops["name"].iloc[rows].astype(str).to_numpy(dtype=object), executions, owner)


def transfer_times(pieces: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """Each rank's data transfer time per collective (rank, name, transfer_ms) from every rank's
    comm_pieces: NaN for a collective whose calls or pieces differ between the ranks."""
    out = []
    names = sorted({n for table in pieces.values() for n in table["name"].astype(str)})
    for name in names:
        mine = {rank: t[t["name"].astype(str) == name].sort_values(["call", "piece"]) for rank, t in pieces.items()}
        keys = {rank: list(zip(t["call"], t["piece"])) for rank, t in mine.items()}
        agree = len({tuple(k) for k in keys.values()}) == 1 and all(len(t) for t in mine.values())
        shortest = np.min([t["dur_ms"].to_numpy(np.float64) for t in mine.values()], axis=0) if agree else None
        for rank, t in mine.items():
            if not len(t):
                continue
            if shortest is None:
                out.append((rank, name, float("nan")))
                continue
            end = np.round((t["start_ms"].to_numpy(np.float64) + t["dur_ms"].to_numpy(np.float64)) * 1e6)
            merged_start, merged_end = union((end - np.round(shortest * 1e6)).astype(np.int64), end.astype(np.int64))
            out.append((rank, name, float((merged_end - merged_start).sum()) / 1e6))
    return pd.DataFrame(out, columns=["rank", "name", "transfer_ms"])


def _executions_inside(ops: pd.DataFrame, launched: Launches, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The device executions launched by runtime calls inside the collective ranges `rows` (on their
    thread), and for each the position in `rows` of its range: the op table read EXECUTION_ROWS rows at a time,
    so what is gathered per execution stays a chunk's worth."""
    stream, _ = codes_and_labels(ops["stream"])  # codes: no text per op
    start, dur = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    order = np.argsort(start[rows], kind="stable")
    sorted_rows = rows[order]
    range_start, range_end = start[sorted_rows], start[sorted_rows] + dur[sorted_rows]
    range_stream = stream[sorted_rows]
    executions, owner = [], []
    for at in spill.chunks(len(ops), EXECUTION_ROWS):
        mine = np.flatnonzero(launched.call[at] >= 0) + at.start
        call = launched.call[mine]
        call_start = start[call]
        k = np.searchsorted(range_start, call_start, side="right") - 1
        holder = np.maximum(k, 0)
        inside = (k >= 0) & (call_start + dur[call] <= range_end[holder]) & (stream[call] == range_stream[holder])
        executions.append(mine[inside])
        owner.append(order[k[inside]])
        spill.drop_resident()  # the chunk's pages of the spilled op columns and launches
    return np.concatenate(executions), np.concatenate(owner)

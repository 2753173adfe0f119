"""The HWTS task log: 64-byte device records, decoded and paired into op executions.

Decoding is one `np.frombuffer` over the joined slices with a structured dtype; filtering, key
building and Start/End pairing are array operations (RAW_FORMATS.md, sections 1 and 6).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.importers.ascend.slices import Joined, whole_records

HWTS_RECORD_BYTES = 64

#: The fields of a record this package uses, at their byte offsets. The syscnt of type 0-3
#: records is the u64 at 8, that of a PMU record (type 4) the u64 at 24; stream id is always at 16.
HWTS_DTYPE = np.dtype(
    {
        "names": ["head", "core_id", "block_id", "task_id", "syscnt", "stream_id", "pmu_syscnt"],
        "formats": ["u1", "u1", "<u2", "<u2", "<u8", "<u4", "<u8"],
        "offsets": [0, 1, 4, 6, 8, 16, 24],
        "itemsize": HWTS_RECORD_BYTES,
    }
)

HWTS_COLUMNS = ["log_type", "cnt", "flag", "core_id", "block_id", "task_id", "stream_id", "syscnt"]

TASK_START, TASK_END, BLOCK_PMU = 0, 1, 4

#: Counter values at or above this (2**59 ticks, 182 years at 100 MHz) are damage, not time; below
#: it, ticks x 10 ns stay far inside int64.
MAX_SYSCNT = 2**59

#: When more than this share of the Start / End pairs end before they start, the log's record
#: order is damaged and no pair can be trusted.
DAMAGED_ORDER_SHARE = 0.1

#: Task ids at or above this are unique on their own; below it they are unique per stream.
GLOBAL_TASK_ID_MIN = 25000

_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True


def _blank_rows(head: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Mask of records made only of ASCII whitespace (padding the writer skipped).

    Records whose head byte is whitespace are candidates; a few more bytes reject most of them
    cheaply before the whole 64 bytes of the rest are checked.
    """
    candidates = np.flatnonzero(_WHITESPACE[head])
    for byte in (1, 8, HWTS_RECORD_BYTES - 1):
        candidates = candidates[_WHITESPACE[raw[candidates * HWTS_RECORD_BYTES + byte]]]
    blank = np.zeros(len(head), dtype=bool)
    rows = raw[: len(head) * HWTS_RECORD_BYTES].reshape(-1, HWTS_RECORD_BYTES)[candidates]
    blank[candidates] = _WHITESPACE[rows].all(axis=1)
    return blank


def decode_hwts(joined: Joined) -> tuple[pd.DataFrame, list[str]]:
    """Decode HWTS records into columns (log_type, cnt, flag, core_id, block_id, task_id, stream_id, syscnt).

    Whitespace-only records are skipped; records of invalid type (5-7) and a trailing partial
    record are skipped with a warning. syscnt is -1 for PMU records whose flag says it is absent.
    """
    raw = joined.data
    whole, problems = whole_records(joined, HWTS_RECORD_BYTES, "HWTS")
    records = np.frombuffer(raw, dtype=HWTS_DTYPE, count=whole)
    head = records["head"]
    log_type = head & 7
    keep = ~_blank_rows(head, raw)

    def skip(bad: np.ndarray, what: str) -> None:
        """Leave the `bad` records out, with one problem naming the first of them."""
        if bad.any():
            first = int(np.argmax(bad))
            problems.append(f"{joined.locate(first * HWTS_RECORD_BYTES)}: {int(bad.sum())} {what} skipped (first here)")
            keep[bad] = False

    invalid = keep & (log_type > BLOCK_PMU)
    skip(invalid, f"HWTS record(s) of invalid type {sorted(set(log_type[invalid].tolist()))}")
    flag = (head >> 3) & 1
    syscnt = records["syscnt"].astype(np.int64)
    skip(
        keep & (log_type <= TASK_END) & ((syscnt < 0) | (syscnt >= MAX_SYSCNT)),
        "HWTS task record(s) with an impossible counter value (2**59 ticks or more: over 180 years at 100 MHz)",
    )
    pmu = log_type == BLOCK_PMU
    if pmu.any():
        syscnt = np.where(pmu, np.where(flag == 0, records["pmu_syscnt"].astype(np.int64), -1), syscnt)
    columns = {
        "log_type": log_type,
        "cnt": head >> 4,
        "flag": flag,
        "core_id": records["core_id"],
        "block_id": records["block_id"],
        "task_id": records["task_id"],
        "stream_id": records["stream_id"],
        "syscnt": syscnt,
    }
    if not keep.all():
        columns = {name: values[keep] for name, values in columns.items()}
    else:
        columns = {name: np.ascontiguousarray(values) for name, values in columns.items()}
    return pd.DataFrame(columns, copy=False), problems


def task_keys(task_id: np.ndarray, stream_id: np.ndarray) -> np.ndarray:
    """The task key as one int64: the task id when >= 25000, else (stream id, task id) packed.

    Packed keys are >= 2**16 so they never collide with a bare task id.
    """
    task = task_id.astype(np.int64)
    return np.where(task >= GLOBAL_TASK_ID_MIN, task, ((stream_id.astype(np.int64) + 1) << 16) | task)


def pair_executions(log_type: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Indices of the Start records that open an execution, given the mapped records in file order.

    A Start followed immediately by an End of the same op is one execution. Two candidates
    never overlap (the second record of a pair is an End), so the sequential walk of the 2020
    parser is exactly this mask.
    """
    if len(log_type) < 2:
        return np.zeros(0, dtype=np.int64)
    opens = (log_type[:-1] == TASK_START) & (log_type[1:] == TASK_END) & (op[:-1] == op[1:])
    return np.flatnonzero(opens)


def op_of_keys(keys: np.ndarray, desc_keys: np.ndarray, desc_ops: np.ndarray) -> np.ndarray:
    """The op index of each task key given the sorted described keys, -1 where not described."""
    if len(desc_keys) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(desc_keys, keys), len(desc_keys) - 1)
    return np.where(desc_keys[pos] == keys, desc_ops[pos], -1)


def op_of_records(
    task_id: np.ndarray, stream_id: np.ndarray, desc_keys: np.ndarray, desc_ops: np.ndarray
) -> np.ndarray:
    """The op index of each record's task, -1 where not described.

    Bare task-id keys (>= 25000) are looked up in a dense 16-bit table; only records with a
    smaller task id need their packed (stream, task) key built and searched.
    """
    bare = desc_keys < 1 << 16
    op_of_task_id = np.full(1 << 16, -1, dtype=np.int64)
    op_of_task_id[desc_keys[bare]] = desc_ops[bare]
    op = op_of_task_id[task_id]
    per_stream = np.flatnonzero(task_id < GLOBAL_TASK_ID_MIN) if not bare.all() else np.zeros(0, dtype=np.int64)
    if len(per_stream):
        keys = task_keys(task_id[per_stream], stream_id[per_stream])
        op[per_stream] = op_of_keys(keys, desc_keys[~bare], desc_ops[~bare])
    return op


def executions(records: pd.DataFrame, desc_keys: np.ndarray, desc_ops: np.ndarray) -> pd.DataFrame:
    """Op executions (op, key, stream_id, start, dur in ticks) from decoded records, in file order.

    `desc_keys` (sorted, unique) and `desc_ops` map task keys to op indices; records whose key
    is not described belong to device tasks without a framework op and are left out.
    """
    log_type = records["log_type"].to_numpy()
    task_id = records["task_id"].to_numpy()
    stream_id = records["stream_id"].to_numpy()
    op = op_of_records(task_id, stream_id, desc_keys, desc_ops)
    rows = np.flatnonzero((op >= 0) & (log_type <= TASK_END))
    opens = pair_executions(log_type[rows], op[rows])
    start_rows, end_rows = rows[opens], rows[opens + 1]
    start = records["syscnt"].to_numpy()[start_rows]
    return pd.DataFrame(
        {
            "op": op[start_rows],
            "key": task_keys(task_id[start_rows], stream_id[start_rows]),
            "stream_id": stream_id[start_rows].astype(np.int64),
            "start": start,
            "dur": records["syscnt"].to_numpy()[end_rows] - start,
        }
    )


def checked_executions(ex: pd.DataFrame, source: str) -> tuple[pd.DataFrame, list[str]]:
    """The executions without those that end before they start, and a problem naming `source`.

    The counter only moves forward, so an End record with a lower syscnt than its Start means a
    damaged record; many of them mean the records are out of order (shuffled, or slices joined in
    the wrong order), and then every pairing is suspect: all executions are left out.
    """
    backwards = ex["dur"].to_numpy() < 0
    bad = int(backwards.sum())
    if not bad:
        return ex, []
    if bad > DAMAGED_ORDER_SHARE * len(ex):
        return ex.iloc[:0], [
            f"{source}: {bad} of {len(ex)} Start/End pairs end before they start: the records are "
            "out of order or damaged, so no op timing is given"
        ]
    return ex[~backwards].reset_index(drop=True), [
        f"{source}: {bad} of {len(ex)} Start/End pairs end before they start (damaged counter values) and were left out"
    ]

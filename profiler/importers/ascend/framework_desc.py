"""The Framework description files: task_desc (task -> op), graph_desc (op -> type, tensors), point.

These are small text files written by the framework on the host (RAW_FORMATS.md sections 2-4).
Malformed lines are skipped with a message naming the file and byte offset.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.importers.ascend.hwts import task_keys
from profiler.importers.ascend.slices import Joined, text_lines

#: vm-backend tensor data types (enum values 26..42).
VM_DATA_TYPES = {
    26 + i: f"NUMBER_TYPE_{name}"
    for i, name in enumerate(
        "BEGIN BOOL INT INT8 INT16 INT32 INT64 UINT UINT8 UINT16 UINT32 UINT64 FLOAT FLOAT16 FLOAT32 "
        "FLOAT64 END".split()
    )
}

#: ge-backend (GraphEngine) tensor data types.
GE_DATA_TYPES = {
    0: "DT_FLOAT",
    1: "DT_FLOAT16",
    2: "DT_INT8",
    3: "DT_INT32",
    4: "DT_UINT8",
    6: "DT_INT16",
    7: "DT_UINT16",
    8: "DT_UINT32",
    9: "DT_INT64",
    10: "DT_UINT64",
    11: "DT_DOUBLE",
    12: "DT_BOOL",
    13: "DT_STRING",
    14: "DT_DUAL_SUB_INT8",
    15: "DT_DUAL_SUB_UINT8",
    16: "DT_COMPLEX64",
    17: "DT_COMPLEX128",
    18: "DT_QINT8",
    19: "DT_QINT16",
    20: "DT_QINT32",
    21: "DT_QUINT8",
    22: "DT_QUINT16",
    23: "DT_RESOURCE",
    24: "DT_STRING_REF",
    25: "DT_DUAL",
    26: "DT_UNDEFINED",
}

#: ge-backend tensor formats, by enum value.
GE_FORMATS = {
    i: f"FORMAT_{name}"
    for i, name in enumerate(
        "NCHW NHWC ND NC1HWC0 FRACTAL_Z NC1C0HWPAD NHWC1C0 FSR_NCHW FRACTAL_DECONV C1HWNC0 "
        "FRACTAL_DECONV_TRANSPOSE FRACTAL_DECONV_SP_STRIDE_TRANS NC1HWC0_C04 FRACTAL_Z_C04 CHWN "
        "FRACTAL_DECONV_SP_STRIDE8_TRANS HWCN NC1KHKWHWC0 BN_WEIGHT FILTER_HWCK HASHTABLE_LOOKUP_LOOKUPS "
        "HASHTABLE_LOOKUP_KEYS HASHTABLE_LOOKUP_VALUE HASHTABLE_LOOKUP_OUTPUT HASHTABLE_LOOKUP_HITS "
        "C1HWNCOC0 MD NDHWC FRACTAL_ZZ FRACTAL_NZ NCDHW DHWCN NDC1HWC0 FRACTAL_Z_3D CN NC DHWNC "
        "FRACTAL_Z_3D_TRANSPOSE RESERVED ALL".split()
    )
}

TASK_DESC_COLUMNS = ["full_name", "block_dim", "task_id", "stream_id"]
#: The largest block_dim, task_id and stream_id a device can have: the HWTS record holds a task id in
#: 16 bits and a stream id in 32 (RAW_FORMATS.md); a line beyond them cannot match any record.
TASK_DESC_LIMITS = (2**31 - 1, 2**16 - 1, 2**32 - 1)
GRAPH_DESC_COLUMNS = ["full_name", "op_type", "op_info"]


def parse_task_desc(joined: Joined) -> tuple[pd.DataFrame, list[str]]:
    """task_desc lines `full_op_name block_dim task_id stream_id` as a table, in file order."""
    rows, problems = [], []
    for offset, line in text_lines(joined):
        fields = line.strip().split(" ")
        try:
            row = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
        except (IndexError, ValueError):
            problems.append(f"{joined.locate(offset)}: malformed task_desc line skipped: {line[:80]!r}")
            continue
        wrong = next(
            (
                (name, limit)
                for name, value, limit in zip(TASK_DESC_COLUMNS[1:], row[1:], TASK_DESC_LIMITS)
                if not 0 <= value <= limit
            ),
            None,
        )
        if wrong:
            problems.append(
                f"{joined.locate(offset)}: task_desc line skipped, its {wrong[0]} is out of range "
                f"(0 to {wrong[1]}): {line[:80]!r}"
            )
        else:
            rows.append(row)
    return pd.DataFrame(rows, columns=TASK_DESC_COLUMNS).astype({"full_name": object}), problems


def _tensor_attribute(name: str, value: str, backend: str) -> str:
    """A tensor attribute's display value: shapes unquoted, enums named for the backend."""
    if name == "shape":
        return value.strip('"')
    if name == "data_type":
        table = VM_DATA_TYPES if backend == "vm" else GE_DATA_TYPES
        return table.get(int(value), "UNKNOWN")
    if name == "format" and backend != "vm":
        return GE_FORMATS.get(int(value), "UNKNOWN")
    return value


def parse_graph_line(line: str, backend: str) -> tuple[str, str, dict[str, dict[str, str]]]:
    """One graph_desc line as (full op name, op type, {input_<k>/output_<k>: {format, data_type, shape}})."""
    full_name, op_type, op_info, current = "", "", {}, None
    for token in line.strip().split(" "):
        key, value = token.split(":", 1)
        if key == "op_name":
            full_name = value
        elif key == "op_type":
            op_type = value
        elif key in ("input_id", "output_id"):
            current = f"{key.split('_')[0]}_{value}"
            op_info[current] = {}
        elif key.startswith(("input_", "output_")):
            attribute = key.split("_", 1)[1]
            op_info[current][attribute] = _tensor_attribute(attribute, value, backend)
    if not full_name:
        raise ValueError("no op_name")
    return full_name, op_type, op_info


def parse_graph_desc(joined: Joined, backend: str) -> tuple[pd.DataFrame, list[str]]:
    """graph_desc lines as a table (full_name, op_type, op_info dict), in file order."""
    rows, problems = [], []
    for offset, line in text_lines(joined):
        try:
            rows.append(parse_graph_line(line, backend))
        except (KeyError, ValueError):
            problems.append(f"{joined.locate(offset)}: malformed graph_desc line skipped: {line[:80]!r}")
    return pd.DataFrame(rows, columns=GRAPH_DESC_COLUMNS).astype({"full_name": object, "op_type": object}), problems


def parse_points(joined: Joined) -> tuple[dict[int, str], list[str]]:
    """point lines `tag full_op_name` as {tag: name} (1 = FP start op, 2 = BP end op, 3.. = reduce ops)."""
    points, problems = {}, []
    for offset, line in text_lines(joined):
        tag, _, name = line.strip().partition(" ")
        if tag.isdecimal() and tag.isascii() and name and int(tag) < 2**64:  # a training-trace tag is a u64
            points[int(tag)] = name
        else:
            problems.append(f"{joined.locate(offset)}: malformed point line skipped: {line[:80]!r}")
    return points, problems


def op_names(tasks: pd.DataFrame) -> list[str]:
    """The distinct op names of task_desc, in order of first appearance (op index = position)."""
    return list(dict.fromkeys(tasks["full_name"].tolist()))


def task_key_map(tasks: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique task keys and the op index each maps to (a later line for a key wins)."""
    index = {name: i for i, name in enumerate(names)}
    keys = task_keys(tasks["task_id"].to_numpy(), tasks["stream_id"].to_numpy())
    ops = np.array([index[n] for n in tasks["full_name"].tolist()], dtype=np.int64)
    last = pd.Series(ops).groupby(keys).last()
    return last.index.to_numpy(dtype=np.int64), last.to_numpy(dtype=np.int64)

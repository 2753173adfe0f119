"""Writing an Ascend JOB directory: the HWTS task log, the training trace and the Framework files.

This is the writing side of RAW_FORMATS.md, used by the reference device (`device.py`) and by
the parse benchmark. The encoders are pure, vectorised functions (numpy arrays in, bytes out);
`JobWriter` appends their output to slice files named exactly like a real JOB directory's, so
the directory is read back by `read_ascend_job` like any capture. Slices are cut at whole
records, and a new slice is started once the current one reaches `slice_bytes`.

The one file a real JOB directory does not have is the clock-sync file (`CLOCK_SYNC_NAME`),
JSON lines that tie the device counter to the host clock (docs/ascend.md, "Reference device").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from profiler.importers.ascend.device_run import SYSCNT_TICK_NS
from profiler.importers.ascend.framework_desc import VM_DATA_TYPES
from profiler.importers.ascend.hwts import HWTS_RECORD_BYTES, TASK_END, TASK_START
from profiler.importers.ascend.slices import SLICE_NAMES
from profiler.importers.ascend.training_trace import TRACE_DTYPE

#: The whole 64-byte HWTS record of a task Start / End (RAW_FORMATS.md section 1); bytes 20-63 stay 0.
HWTS_WRITE_DTYPE = np.dtype(
    {
        "names": ["head", "core_id", "reserved", "block_id", "task_id", "syscnt", "stream_id"],
        "formats": ["u1", "u1", "<u2", "<u2", "<u2", "<u8", "<u4"],
        "offsets": [0, 1, 2, 4, 6, 8, 16],
        "itemsize": HWTS_RECORD_BYTES,
    }
)

#: Slice size at which the writer starts the next slice (real jobs cut theirs at a few MB).
SLICE_BYTES = 8 << 20

#: The host<->device clock-sync file of the reference device (JSON lines; not part of real jobs).
CLOCK_SYNC_NAME = "profview_clock_sync.{dev}.jsonl"
CLOCK_SYNC_FORMAT = "profview-ascend-clock-sync"

#: The device counter's frequency (1 tick = SYSCNT_TICK_NS = 10 ns).
SYSCNT_HZ = 1_000_000_000 // SYSCNT_TICK_NS

#: The reference device's JOB directory inside a profview raw store (`raw/<this>/`).
DEVICE_DIR_PATTERN = re.compile(r"^r(?P<rank>\d+)-p(?P<pid>\d+)-ascend_dev(?P<dev>\d+)$")

#: The tensor format written for every tensor (the vm backend writes formats as text).
DEFAULT_FORMAT = "DefaultFormat"

_VM_CODE = {name.removeprefix("NUMBER_TYPE_"): code for code, name in VM_DATA_TYPES.items()}


def hwts_bytes(
    log_type: np.ndarray, task_id: np.ndarray, stream_id: np.ndarray, syscnt: np.ndarray, first_cnt: int = 0
) -> np.ndarray:
    """HWTS records (uint8, 64 bytes each) for the given columns.

    `cnt`, the 4-bit rolling counter in the high bits of byte 0, counts records from `first_cnt`;
    core id, flag and block id are 0.
    """
    n = len(log_type)
    records = np.zeros(n, dtype=HWTS_WRITE_DTYPE)
    cnt = (np.arange(first_cnt, first_cnt + n, dtype=np.int64) & 15) << 4
    records["head"] = (np.asarray(log_type, dtype=np.int64) & 7) | cnt
    records["task_id"] = task_id
    records["stream_id"] = stream_id
    records["syscnt"] = syscnt
    return records.view(np.uint8)


def task_pair_bytes(
    task_id: np.ndarray, stream_id: np.ndarray, start: np.ndarray, end: np.ndarray, first_cnt: int = 0
) -> np.ndarray:
    """HWTS records of task executions, each as a Start record immediately followed by its End."""
    n = len(task_id)
    return hwts_bytes(
        np.tile(np.array([TASK_START, TASK_END]), n),
        np.repeat(task_id, 2),
        np.repeat(stream_id, 2),
        np.column_stack([start, end]).ravel(),
        first_cnt,
    )


def training_trace_bytes(tag: np.ndarray, task_id: np.ndarray, stream_id: np.ndarray, syscnt: np.ndarray) -> np.ndarray:
    """Training-trace records (uint8, 20 bytes each: u64 tag, u16 task id, u16 stream id, u64 syscnt)."""
    records = np.zeros(len(tag), dtype=TRACE_DTYPE)
    records["tag"], records["task_id"], records["stream_id"], records["syscnt"] = tag, task_id, stream_id, syscnt
    return records.view(np.uint8)


def vm_data_type(dtype: np.dtype) -> int:
    """The vm-backend data-type enum of a numpy dtype (`float32` -> 40); unknown types -> 42 (END)."""
    return _VM_CODE.get(np.dtype(dtype).name.upper(), _VM_CODE["END"])


def tensor_description(value: Any) -> tuple[int, str] | None:
    """(vm data type, shape text) of an array or numeric scalar, None for anything else."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = value
    elif isinstance(value, (bool, int, float)):
        array = np.asarray(value)
    else:
        return None
    return vm_data_type(array.dtype), ",".join(str(d) for d in np.shape(array))


def task_desc_line(full_name: str, block_dim: int, task_id: int, stream_id: int) -> str:
    """One task_desc line: `full_op_name block_dim task_id stream_id`."""
    return f"{full_name} {block_dim} {task_id} {stream_id}\n"


def graph_desc_line(
    full_name: str, op_type: str, inputs: Sequence[tuple[int, str]], outputs: Sequence[tuple[int, str]]
) -> str:
    """One graph_desc line: op name, type and per tensor its id, format, data type and quoted shape."""
    tokens = [f"op_name:{full_name}", f"op_type:{op_type}"]
    for side, tensors in (("input", inputs), ("output", outputs)):
        for k, (data_type, shape) in enumerate(tensors):
            tokens += [
                f"{side}_id:{k}",
                f"{side}_format:{DEFAULT_FORMAT}",
                f"{side}_data_type:{data_type}",
                f'{side}_shape:"{shape}"',
            ]
    return " ".join(tokens) + "\n"


def point_line(tag: int, full_name: str) -> str:
    """One point line: `tag full_op_name` (1 FP-start op, 2 BP-end op, 3.. all-reduce ops)."""
    return f"{tag} {full_name}\n"


def device_dir_name(rank: int, pid: int, device_id: int) -> str:
    """The name of a reference device's JOB directory in the raw store (matches DEVICE_DIR_PATTERN)."""
    return f"r{rank}-p{pid}-ascend_dev{device_id}"


def slice_name(kind: str, device_id: int, number: int) -> str:
    """The file name of slice `number` of a kind (`hwts.log.data.45.dev.profiler_default_tag.0.slice_0`)."""
    return SLICE_NAMES[kind].replace("<dev>", str(device_id)).replace("<n>", str(number))


class SliceFile:
    """Appends whole records to the slices of one kind, starting a new slice at `slice_bytes`."""

    def __init__(self, directory: Path, kind: str, device_id: int, slice_bytes: int = SLICE_BYTES) -> None:
        self.directory = directory
        self.kind = kind
        self.device_id = device_id
        self.slice_bytes = slice_bytes
        self.number = 0
        self.size = 0
        self.paths: list[Path] = []

    def append(self, data: bytes | np.ndarray) -> None:
        """Append `data` (whole records or lines) to the current slice."""
        if not len(data):
            return
        if self.size >= self.slice_bytes:
            self.number, self.size = self.number + 1, 0
        path = self.directory / slice_name(self.kind, self.device_id, self.number)
        if not self.paths or self.paths[-1] != path:
            self.paths.append(path)
        with open(path, "ab") as f:
            f.write(data if isinstance(data, bytes) else data.tobytes())
        self.size += len(data)


class JobWriter:
    """The files of one device of a JOB directory, appended to as the device produces them."""

    def __init__(self, job_dir: Path, device_id: int, slice_bytes: int = SLICE_BYTES) -> None:
        job_dir.mkdir(parents=True, exist_ok=True)
        self.job_dir = job_dir
        self.device_id = device_id
        self.files = {kind: SliceFile(job_dir, kind, device_id, slice_bytes) for kind in SLICE_NAMES}
        self.clock_sync_path = job_dir / CLOCK_SYNC_NAME.format(dev=device_id)
        self.records = {"hwts": 0, "training_trace": 0}

    def task_pairs(self, task_id: np.ndarray, stream_id: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Append task executions to the HWTS log (a Start and its End record each)."""
        self.files["hwts"].append(task_pair_bytes(task_id, stream_id, start, end, self.records["hwts"]))
        self.records["hwts"] += 2 * len(task_id)

    def trace_points(self, tag: np.ndarray, task_id: np.ndarray, stream_id: np.ndarray, syscnt: np.ndarray) -> None:
        """Append points to the training trace."""
        self.files["training_trace"].append(training_trace_bytes(tag, task_id, stream_id, syscnt))
        self.records["training_trace"] += len(tag)

    def lines(self, kind: str, lines: Iterable[str]) -> None:
        """Append text lines to a Framework file (`task_desc`, `graph_desc` or `point`)."""
        self.files[kind].append("".join(lines).encode("utf-8"))

    def clock_sync(self, **fields: Any) -> None:
        """Append one JSON object to the clock-sync file."""
        with open(self.clock_sync_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(fields, sort_keys=True) + "\n")

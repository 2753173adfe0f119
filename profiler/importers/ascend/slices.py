"""Finding and joining the profiling slices of an Ascend JOB directory.

A JOB directory holds one file per (kind, device, slice). Files are looked up in the job
directory first and, for a kind with no file there, in `<job>/data/`; `.done` marker files are
ignored and slices are ordered by the integer after the last `_` (RAW_FORMATS.md, section 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_DEVICE_SLICE = r"\.(?P<dev>\d+)(?:\.[A-Za-z0-9]+)?\.slice_(?P<n>\d+)$"

#: File-name patterns of the slice kinds this package reads.
SLICE_PATTERNS: dict[str, re.Pattern[str]] = {
    "hwts": re.compile(r"^hwts\.log\.data\.45\.dev\.profiler_default_tag" + _DEVICE_SLICE),
    "training_trace": re.compile(r"^training_trace\.46\.dev\.profiler_default_tag" + _DEVICE_SLICE),
    "task_desc": re.compile(r"^Framework\.host\.(?P<backend>vm\.)?task_desc_info" + _DEVICE_SLICE),
    "graph_desc": re.compile(r"^Framework\.host\.(?P<backend>vm\.)?graph_desc_info" + _DEVICE_SLICE),
    "point": re.compile(r"^Framework\.host\.(?P<backend>vm\.)?point" + _DEVICE_SLICE),
}

#: How each kind's files are named, for messages.
SLICE_NAMES: dict[str, str] = {
    "hwts": "hwts.log.data.45.dev.profiler_default_tag.<dev>.slice_<n>",
    "training_trace": "training_trace.46.dev.profiler_default_tag.<dev>.slice_<n>",
    "task_desc": "Framework.host.vm.task_desc_info.<dev>.slice_<n>",
    "graph_desc": "Framework.host.vm.graph_desc_info.<dev>.slice_<n>",
    "point": "Framework.host.vm.point.<dev>.slice_<n>",
}

_HOST_START = re.compile(r"^host_start\.log\.(?P<dev>\d+)$")


@dataclass(frozen=True)
class Slice:
    """One slice file of one kind for one device."""

    path: Path
    kind: str
    device: int
    number: int
    backend: str  # "vm" or "ge" for Framework files, "" otherwise


def _classify(path: Path) -> Slice | None:
    """The slice a file name describes, or None for other files (and `.done` markers)."""
    if path.name.endswith(".done") or not path.is_file():
        return None
    for kind, pattern in SLICE_PATTERNS.items():
        match = pattern.match(path.name)
        if match:
            groups = match.groupdict()
            backend = "" if "backend" not in groups else ("vm" if groups["backend"] else "ge")
            return Slice(path, kind, int(groups["dev"]), int(path.name.rsplit("_", 1)[1]), backend)
    return None


def _slices_in(directory: Path) -> list[Slice]:
    if not directory.is_dir():
        return []
    return [s for s in (_classify(p) for p in sorted(directory.iterdir())) if s is not None]


def find_slices(job_dir: Path) -> list[Slice]:
    """Every slice of the job: per kind from the job directory, else from `<job>/data/`, in slice order."""
    top, data = _slices_in(job_dir), _slices_in(job_dir / "data")
    found = []
    for kind in SLICE_PATTERNS:
        of_kind = [s for s in top if s.kind == kind] or [s for s in data if s.kind == kind]
        found.extend(sorted(of_kind, key=lambda s: (s.device, s.number)))
    return found


def find_host_start(job_dir: Path, device: int) -> Path | None:
    """The job's `host_start.log.<dev>` file, if any (job directory first, then data/)."""
    for directory in (job_dir, job_dir / "data"):
        for path in sorted(directory.glob("host_start.log.*")) if directory.is_dir() else []:
            match = _HOST_START.match(path.name)
            if match and int(match["dev"]) == device:
                return path
    return None


@dataclass(frozen=True)
class Joined:
    """The bytes of a kind's slices joined in order, and where each slice starts in them.

    Slices are cut at arbitrary byte positions, so a record may straddle two slices: binary
    kinds are decoded from the joined bytes, and byte offsets are mapped back to a slice for
    messages.
    """

    data: np.ndarray  # uint8
    paths: tuple[Path, ...]
    starts: np.ndarray  # int64 offset of each slice in `data`

    def locate(self, offset: int) -> str:
        """`<file name> at byte <offset in that file>` for an offset into the joined bytes."""
        i = max(int(np.searchsorted(self.starts, offset, side="right")) - 1, 0)
        return f"{self.paths[i].name} at byte {offset - int(self.starts[i])}"

    @property
    def names(self) -> str:
        return ", ".join(p.name for p in self.paths)


def whole_records(joined: Joined, record_bytes: int, what: str) -> tuple[int, list[str]]:
    """How many whole records the joined bytes hold, and a problem naming the trailing partial record, if any."""
    whole, rest = divmod(len(joined.data), record_bytes)
    if not rest:
        return whole, []
    return whole, [
        f"{joined.locate(whole * record_bytes)}: {rest} trailing bytes do not form a whole "
        f"{record_bytes}-byte {what} record and were ignored"
    ]


def join_slices(paths: list[Path]) -> Joined:
    """Read the slice files (in the given order) into one byte array."""
    parts = [np.fromfile(p, dtype=np.uint8) for p in paths]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    data = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return Joined(data, tuple(paths), starts)


def text_lines(joined: Joined) -> list[tuple[int, str]]:
    """The non-blank lines of joined text slices as (byte offset, text without line end)."""
    raw = joined.data.tobytes()
    lines, offset = [], 0
    for chunk in raw.split(b"\n"):
        text = chunk.decode("utf-8", errors="replace").rstrip("\r")
        if text.strip():
            lines.append((offset, text))
        offset += len(chunk) + 1
    return lines

"""The timeline's events, from the columnar event file (events_{rank}.arrow, docs/formats.md).

The viewer never parses the Chrome trace: analyse() and the importers write every event of it a
second time as columns (Apache Arrow IPC), which this module opens without reading it. Rows are
fetched per lane and time range (window queries) or streamed in chunks (the whole-run level of
detail), so a file of 1e8 events is read in bounded memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.export.event_file import EventFile, read_event_file
from profiler.formats.columns import NOT_OP_EVENT_KINDS


@dataclass
class Timeline:
    """A run's events: the file, its lanes (with labels and kinds) and counts by event kind."""

    file: EventFile
    lanes: pd.DataFrame  # lane index -> pid, tid, process, thread, kind, label
    phase_counts: dict[str, int]  # rows by Chrome-trace phase letter (X, i, C, s, f)

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def events(self) -> int:
        return self.file.rows

    @property
    def complete(self) -> int:
        return self.file.complete_rows

    def names(self, codes: np.ndarray) -> list[str]:
        table = self.file.names
        return [table[int(c)] for c in codes]

    def categories(self, codes: np.ndarray) -> list[str]:
        table = self.file.categories
        return [table[int(c)] for c in codes]

    def args(self, codes: np.ndarray) -> list[Optional[dict[str, Any]]]:
        table = self.file.args
        return [json.loads(table[int(c)]) if c >= 0 else None for c in codes]

    def _rows(self, a: int, b: int):
        """(start, dur) of rows [a, b), a few million at a time."""
        return _chunked(self.file, a, b)

    def op_category_codes(self) -> np.ndarray:
        """Codes of the categories that are ops."""
        return np.array([i for i, c in enumerate(self.file.categories) if c not in NOT_OP_EVENT_KINDS], dtype=np.int64)

    def time_range_ns(self) -> tuple[int, int]:
        """First start and last end of the complete events (0, 0 when there are none)."""
        lo, hi = None, None
        for lane in range(len(self.lanes)):
            first, count, longest = self.file.lane_rows(lane)
            if not count:
                continue
            s0 = int(self.file.column("start_ns", first, first + 1)[0])
            last = int(self.file.column("start_ns", first + count - 1, first + count)[0])
            # the last end lies among the events starting within `longest` of the last start
            tail = self.file.lane_search(lane, last - longest, "left")
            e1 = int(max((start + dur).max() for start, dur in self._rows(tail, first + count)))
            lo = s0 if lo is None else min(lo, s0)
            hi = e1 if hi is None else max(hi, e1)
        return (lo or 0, hi or 0)


def _chunked(file: EventFile, a: int, b: int, rows: int = 1 << 21):
    for c in range(a, b, rows):
        d = min(b, c + rows)
        yield file.column("start_ns", c, d), file.column("dur_ns", c, d)


def load_timeline(path: Path) -> Timeline:
    """Open an events_{rank}.arrow."""
    file = read_event_file(path)
    lanes = pd.DataFrame(file.lanes, columns=["pid", "tid", "process", "thread", "kind", "process_sort"])
    lanes["label"] = [
        f"{t}" if k == "steps" else f"{p} / {t}" for p, t, k in zip(lanes["process"], lanes["thread"], lanes["kind"])
    ]
    counts = {str(k): int(v) for k, v in file.meta.get("phase_rows", {}).items()}
    return Timeline(file=file, lanes=lanes, phase_counts=counts)

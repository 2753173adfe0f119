"""Chrome Trace Event Format files (Perfetto, chrome://tracing, speedscope): the pieces of the file and
what a trace holds (`TracePlan`). `chrome_from_events.py` renders a rank's trace from its event file
with these, `cluster.py` the merged cluster trace; row text comes from `trace_text.py`.

A trace is `{"traceEvents":[` + rows + flow and metadata events + `],"displayTimeUnit":"ms",
"otherData":{...}}`. Rows are written from an `EventBlock` in any order of any of its rows, so a
trace of some rows (a step range) is written the same way as the whole.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional

import numpy as np

from profiler.export.direct_file import DirectFile
from profiler.export.files import AtomicWrite
from profiler.export.key_steps import KeySteps
from profiler.export.timeline_model import EventBlock, Head
from profiler.export.trace_text import row_texts
from profiler.formats.columns import TIMELINE_FULL, TIMELINE_KEY_STEPS, TIMELINE_MAX_EVENTS
from profiler.model import Run

TRACE_START = b'{"traceEvents":[\n'
INSTANT_SCOPE = ',"s":"t"'  # instants are thread-scoped


def head_text(h: Head) -> bytes:
    """A row's JSON up to its time: `{"ph":..,"pid":..,"tid":..,"cat":..,"name":..[,"args":..],"ts":`."""
    body = {"ph": h.ph, "pid": h.pid, "tid": h.tid, "cat": h.cat, "name": h.name}
    if h.args:
        body["args"] = h.args
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return (text[:-1] + (INSTANT_SCOPE if h.ph == "i" else "") + ',"ts":').encode()


def write_rows(f: BinaryIO, b: EventBlock, order: np.ndarray, buffer: Optional[np.ndarray] = None) -> int:
    """Write the rows `order` of a block (each followed by `,\\n`); returns how many."""
    n = len(order)
    if n == 0:
        return 0
    heads = [head_text(h) for h in b.specs]
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in heads])]).astype(np.int64)
    key = np.ascontiguousarray(b.key, dtype=np.int64)
    ts = np.ascontiguousarray(b.ts_ns, dtype=np.int64)
    dur = None if b.dur_ns is None else np.ascontiguousarray(b.dur_ns, dtype=np.int64)
    for text in row_texts(b"".join(heads), offsets, key, ts, dur, np.ascontiguousarray(order, dtype=np.int64), buffer):
        f.write(text)
    return n


def event_text(event: dict) -> str:
    """A flow or metadata event as the trace writes it."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def write_trace_end(f: BinaryIO, texts: Iterable[str], other: dict) -> None:
    """The events after the rows (flows, metadata: their `event_text`s), a few thousand at a time, then the
    end of the trace with its `otherData`."""
    separator = ""
    while chunk := list(itertools.islice(texts, 8192)):
        f.write((separator + ",\n".join(chunk)).encode())
        separator = ",\n"
    f.write(b'\n],"displayTimeUnit":"ms","otherData":' + json.dumps(other).encode() + b"}\n")


@contextlib.contextmanager
def trace_file(path: Path, gzip_output: bool = False) -> Iterator[tuple[BinaryIO, Path]]:
    """A Chrome trace file being written (atomically: renamed into place when the block ends
    normally), with the path it gets (with .gz when compressed)."""
    path = Path(path)
    if gzip_output and path.suffix != ".gz":
        path = path.with_name(path.name + ".gz")
    opener = (lambda p: gzip.open(p, "wb", compresslevel=3)) if gzip_output else DirectFile
    with AtomicWrite(path) as out, opener(out.tmp) as f:
        yield f, path


@dataclass(frozen=True)
class TracePlan:
    """What timeline_{rank}.json holds: every event, or (past `max_events`) the key steps' events.

    The median and slowest steps are always in a key-steps trace; outlier steps are added slowest
    first while the trace stays within `max_events` (those that do not fit are `left_out`).
    """

    events: int  # events (rows and flow points) of the whole trace
    max_events: int
    steps: Optional[tuple[int, ...]] = None  # None: the whole trace; else the steps written, ascending
    written: int = 0  # events written
    left_out: tuple[int, ...] = ()  # outlier steps left out to stay within max_events

    @property
    def content(self) -> str:
        return TIMELINE_FULL if self.steps is None else TIMELINE_KEY_STEPS


def timeline_max_events(run: Run) -> int:
    """The Chrome trace's event limit the run was recorded with (`Settings.timeline_max_events`)."""
    config = run.info.get("config") if isinstance(run.info.get("config"), dict) else {}
    limit = config.get("timeline_max_events")
    return int(limit) if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else TIMELINE_MAX_EVENTS


def plan_steps(total: int, key: KeySteps, step_counts: Callable[[list[int]], list[int]], max_events: int) -> TracePlan:
    """Every event while `total` is at most `max_events` (or there are no key steps), else the median
    and slowest steps and then the outlier steps, slowest first, that fit; `step_counts` counts the
    events of steps."""
    priority = key.in_priority()
    if total <= max_events or not priority:
        return TracePlan(total, max_events, None, total)
    chosen, left_out, written = [], [], 0
    for step, n in zip(priority, step_counts(priority)):
        is_outlier_only = step not in (key.median, key.slowest)
        if is_outlier_only and written + n > max_events:
            left_out.append(step)
            continue
        chosen.append(step)
        written += n
    return TracePlan(total, max_events, tuple(sorted(chosen)), written, tuple(left_out))


def describe_plan(plan: TracePlan, key: KeySteps, file: str, rest: str) -> dict[str, Any]:
    """What a Chrome trace holds, for profiler_info's and cluster_summary's `timeline` (docs/formats.md):
    its file, content and event counts and, for a key-steps trace, the steps and where the rest is."""
    info: dict[str, Any] = {
        "file": file,
        "content": plan.content,
        "events": plan.events,
        "events_written": plan.written,
        "max_events": plan.max_events,
    }
    if plan.steps is not None:
        info.update(
            {
                "steps": list(plan.steps),
                "median_step": key.median,
                "slowest_step": key.slowest,
                "outlier_steps": list(key.outliers),
                "outlier_steps_left_out": list(plan.left_out),
                "rest": rest,
            }
        )
    return info

"""The Chrome trace rendered from an event file (events_{rank}.arrow), the timeline's one saved form:
by `analyse()` (timeline_{rank}.json: every event, or the key steps past the run's event limit) and,
on demand, by `profview export --chrome` (the whole run or some of its steps).

The event file's rows come in the trace's order, and its metadata keeps what the rows do not: the
trace's metadata (M) events and otherData (`chrome`), the flows' steps in their `step` column. The
rows are streamed in chunks, each turned into an `EventBlock` whose heads are rebuilt from the
string tables, and written by the Chrome writer's own functions.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Callable, Optional

import numpy as np
import pandas as pd

from profiler.errors import InputError
from profiler.export.chrome_trace import (
    TRACE_START,
    TracePlan,
    event_text,
    plan_steps,
    trace_file,
    write_rows,
    write_trace_end,
)
from profiler.export.event_file import EventFile, read_event_file
from profiler.export.key_steps import KeySteps
from profiler.export.timeline_model import EventBlock, Head
from profiler.export.trace_text import new_row_buffer
from profiler.formats.names import info_files, rank_file
from profiler.kernels.grouping import first_rows

#: Which events a trace holds: a mask of the events' steps (a flow's: its launching op's), or None for all.
StepFilter = Optional[Callable[[np.ndarray], np.ndarray]]
CHUNK_ROWS = 1 << 22


def step_range(first: Optional[int], last: Optional[int]) -> StepFilter:
    """The events of steps `first`..`last` (inclusive; None: unbounded)."""
    low = np.iinfo(np.int64).min if first is None else first
    high = np.iinfo(np.int64).max if last is None else last
    return lambda step: (step >= low) & (step <= high)


def step_counts(ef: EventFile, steps: list[int]) -> list[int]:
    """How many events (rows and flow points) each of `steps` has, in one pass over the step column."""
    wanted = np.asarray(steps, dtype=np.int64)
    if len(wanted) == 0:
        return []
    low, high = int(wanted.min()), int(wanted.max())
    counts = np.zeros(high - low + 1, dtype=np.int64)
    for lo, hi in ef.chunks(rows=CHUNK_ROWS):
        step = ef.column("step", lo, hi)
        inside = step[(step >= low) & (step <= high)]
        counts += np.bincount(inside - low, minlength=len(counts))
    return counts[wanted - low].tolist()


def trace_plan(ef: EventFile, key: KeySteps, max_events: int) -> TracePlan:
    """What the analysed trace holds: every event while they are at most `max_events` (or the run has no
    steps to choose from), else its key steps (chrome_trace.plan_steps)."""
    return plan_steps(ef.rows, key, lambda steps: step_counts(ef, steps), max_events)


def plan_filter(plan: TracePlan) -> StepFilter:
    """The events the plan's trace holds: all, or those of its steps."""
    if plan.steps is None:
        return None
    wanted = np.asarray(plan.steps, dtype=np.int64)
    return lambda step: np.isin(step, wanted)


def write_trace_from_events(ef: EventFile, f: BinaryIO, keep: StepFilter = None) -> int:
    """Write the Chrome trace of the event file's events (those `keep` selects) to `f`; returns how
    many events (rows and flow points) it holds."""
    chrome = ef.meta.get("chrome")
    if not isinstance(chrome, dict) or not isinstance(chrome.get("meta"), list):
        raise InputError(
            f"{ef.path} was written by an earlier profview, without what the Chrome trace needs; "
            "`profview analyse DIR` (from the raw store) writes it again"
        )
    flows = int(ef.meta.get("phase_rows", {}).get("s", 0)) + int(ef.meta.get("phase_rows", {}).get("f", 0))
    heads = _Heads(ef)
    buffer = new_row_buffer()
    f.write(TRACE_START)
    count = 0
    for start, stop, with_dur in ((0, ef.complete_rows, True), (ef.complete_rows, ef.rows - flows, False)):
        for lo, hi, rows in _kept(ef, range(start, stop), keep):
            if len(rows):
                block = heads.block(lo, hi, with_dur, None if keep is None else rows)
                count += write_rows(f, block, np.arange(len(block.key)), buffer)

    def flow_texts() -> Iterator[str]:
        nonlocal count
        for lo, hi, rows in _kept(ef, range(ef.rows - flows, ef.rows), keep):
            count += len(rows)
            yield from heads.flow_texts(lo, hi, rows)

    write_trace_end(f, itertools.chain(flow_texts(), map(event_text, chrome["meta"])), chrome.get("other", {}))
    return count


def _kept(ef: EventFile, rows: range, keep: StepFilter) -> Iterator[tuple[int, int, np.ndarray]]:
    """`rows` a chunk at a time: (lo, hi, the chunk's rows `keep` selects, counted from lo)."""
    for lo in range(rows.start, rows.stop, CHUNK_ROWS):
        hi = min(rows.stop, lo + CHUNK_ROWS)
        yield lo, hi, np.arange(hi - lo) if keep is None else np.flatnonzero(keep(ef.column("step", lo, hi)))


def export_chrome_trace(ef: EventFile, path: Path, keep: StepFilter = None, gzip_output: bool = False) -> Path:
    """Write the Chrome trace of the event file's events (atomically) at `path`; returns the path."""
    with trace_file(path, gzip_output) as (f, written):
        write_trace_from_events(ef, f, keep)
    return written


class _Heads:
    """The event file's row heads (phase, lane, category, name, args) as the trace's `Head`s."""

    def __init__(self, ef: EventFile) -> None:
        self.ef = ef
        self._cache: dict[tuple[int, ...], Head] = {}

    def head(self, ph: int, lane: int, name: int, category: int, args: int) -> Head:
        key = (ph, lane, name, category, args)
        head = self._cache.get(key)
        if head is None:
            info = self.ef.lanes[lane]
            head = self._cache[key] = Head(
                chr(ph),
                int(info["pid"]),
                int(info["tid"]),
                self.ef.categories[category],
                self.ef.names[name],
                None if args < 0 else json.loads(self.ef.args[args]),  # parsed per head: a trace has ~1M
                # distinct args, its flows' ids, parsed a chunk at a time (`flow_texts`)
            )
        return head

    def block(self, lo: int, hi: int, with_dur: bool, rows: Optional[np.ndarray] = None) -> EventBlock:
        """Rows [lo, hi) (those of `rows` among them, when given) as an EventBlock, with a Head per
        distinct head of those rows."""

        def col(name: str) -> np.ndarray:
            values = self.ef.column(name, lo, hi)
            return values if rows is None else values[rows]

        key, specs = self._grouped(col)
        return EventBlock(
            specs, key, col("start_ns"), col("dur_ns") if with_dur else None, col("step").astype(np.int64)
        )

    def _grouped(self, col: Callable[[str], np.ndarray]) -> tuple[np.ndarray, list[Head]]:
        """Each row's index among the distinct heads of the rows `col` gives (first-seen order), and those heads."""
        table = self.ef.head_table
        if table:  # version 2: the rows' codes into the file's table of heads
            key, codes = pd.factorize(col("head"))
            fields = {name: values[codes] for name, values in table.items()}
        else:  # version 1: every row holds its head's fields
            c = {name: col(name) for name in ("ph", "lane", "name", "category", "args")}
            names = max(len(self.ef.names), 1)
            lane_name = c["lane"].astype(np.int64) * names + c["name"]
            rest = (c["category"].astype(np.int64) * 256 + c["ph"]) * (len(self.ef.args) + 1) + (
                c["args"].astype(np.int64) + 1
            )
            a, a_n = pd.factorize(lane_name)
            b, b_n = pd.factorize(rest)
            key, uniques = pd.factorize(a.astype(np.int64) * max(len(b_n), 1) + b)
            first = first_rows(key.astype(np.int64), len(uniques))
            fields = {name: values[first] for name, values in c.items()}
        specs = [
            self.head(*head)
            for head in zip(*(fields[name].tolist() for name in ("ph", "lane", "name", "category", "args")))
        ]
        return key.astype(np.int64), specs

    def flow_texts(self, lo: int, hi: int, rows: np.ndarray) -> list[str]:
        """The flow points `rows` (counted from `lo`) of rows [lo, hi), as the trace writes them: an `s` at
        the launch, an `f` bound to the enclosing slice at the device op."""
        c = {k: self.ef.column(k, lo, hi)[rows] for k in ("ph", "lane", "name", "category", "start_ns")}
        c["id"] = self.ef.flow_ids(lo, hi)[rows]
        texts = []
        for ph, lane, name, cat, ns, flow_id in zip(*(c[k].tolist() for k in c)):
            info = self.ef.lanes[lane]
            event = {
                "ph": chr(ph),
                "id": flow_id,
                "pid": int(info["pid"]),
                "tid": int(info["tid"]),
                "ts": ns / 1000,
                "cat": self.ef.categories[cat],
                "name": self.ef.names[name],
            }
            if event["ph"] == "f":
                event["bp"] = "e"
            texts.append(event_text(event))
        return texts


def export_directory_traces(
    directory: Path, ranks: Optional[list[int]], first: Optional[int], last: Optional[int], output: Optional[Path]
) -> list[Path]:
    """`profview export --chrome`: the Chrome trace of steps `first`..`last` (None: every event) of
    each rank's event file in `directory` (`ranks`, default all), at `output` (one rank; `-`:
    stdout; a name ending in .gz: compressed) or beside it as timeline_{rank}_full.json /
    timeline_{rank}_steps_A-B.json. Returns the paths written."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory} does not exist or is not a directory")
    found = {
        rank: directory / rank_file("events", rank)
        for rank in info_files(directory)
        if (directory / rank_file("events", rank)).is_file()
    }
    if not found:
        raise InputError(
            f"{directory} has no event file (events_{{rank}}.arrow): analyse the run first "
            f"(`profview analyse {directory}`), or import the capture (`profview import`)"
        )
    ranks = sorted(found) if not ranks else list(dict.fromkeys(ranks))
    missing = [r for r in ranks if r not in found]
    if missing:
        raise InputError(f"{directory} has no event file for rank {missing[0]} (ranks: {', '.join(map(str, found))})")
    if output is not None and len(ranks) > 1:
        raise InputError(f"-o names one file but {directory} has {len(ranks)} ranks: pick one with --rank")
    keep = None if first is None and last is None else step_range(first, last)
    written = []
    for rank in ranks:
        ef = read_event_file(found[rank])
        if output is not None and str(output) == "-":
            write_trace_from_events(ef, sys.stdout.buffer, keep)
            sys.stdout.buffer.flush()
            continue
        what = "full" if keep is None else f"steps_{'' if first is None else first}-{'' if last is None else last}"
        path = Path(output) if output is not None else directory / f"timeline_{rank}_{what}.json"
        gz = path.suffix == ".gz"
        written.append(export_chrome_trace(ef, path.with_suffix("") if gz else path, keep, gzip_output=gz))
    return written

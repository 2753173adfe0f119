"""Import of PyTorch profiler (Kineto) Chrome traces into a profview `Run`.

`read_kineto_trace(path)` reads a trace saved by `torch.profiler` (`.json` or `.json.gz`), be it
a user's file or one exported by profview's own torch capture (torch_capture merges its ops);
`run_from_kineto_trace(trace)` is the same conversion on an already parsed trace object.
See docs/kineto.md for what becomes what, the clock rule and the known limits.

Everything is columnar: the events are read into numpy columns once (kineto_events), classified
per distinct (phase, category) pair, and every table is built with array operations; nesting
and self time come from kernels/nesting.py (complete intervals).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Optional, Union
from warnings import warn

import numpy as np
import pandas as pd

from profiler import spill
from profiler.errors import IncompleteInputWarning, ProfviewError
from profiler.importers import kineto_memory
from profiler.importers.base import NAMED, NOT_IT, Importer
from profiler.importers.kineto_events import (
    SOURCE,
    Clock,
    Cut,
    EventColumns,
    check_trace_file,
    combine,
    event_columns,
    gc_paused,
    load_trace,
    looks_like_kineto,
    rows_where,
    trace_confidence,
)
from profiler.importers.kineto_ops import DEVICE_OP_CATEGORIES, HOST_OP_CATEGORIES, is_collective_name, op_table
from profiler.importers.kineto_stream import DEFAULT_CHUNK_BYTES, NotStreamable, stream_trace
from profiler.kernels.intervals import place
from profiler.kernels.nesting import enclosing_parents, nesting_depths
from profiler.memory import give_back_freed_memory
from profiler.model import (
    INSTANT_COLUMNS,
    SPAN_COLUMNS,
    STEP_COLUMNS,
    THREAD_COLUMNS,
    Run,
    RunInfo,
)

#: Names of record_function annotations torch writes, recognised in any category: torch 1.8 wrote
#: them as `Operator` (cpu_op) events, later torch as `user_annotation`. They are spans (steps for
#: ProfilerStep#N), never host ops: the profiler step, phase annotations (`## forward ##`), the
#: data loader's fetch, the optimizer's and DDP's own ranges, and the bare `forward` / `backward`
#: scopes (a scripted module's method call, which TorchScript records as a cpu_op around the ops
#: it runs; torch 1.8's record_function("forward")).
_ANNOTATION_NAME = re.compile(
    r"##.*##|ProfilerStep#\d+|enumerate\(DataLoader\)#.*|Optimizer\.(?:step|zero_grad)#.*"
    r"|DistributedDataParallel\.forward|forward|backward"
)

# Event kinds.
HOST_OP, DEVICE_OP, SPAN, STEP, OVERHEAD, INSTANT, MEMORY, COUNTER = range(8)
METADATA, FLOW, PROFILER, UNKNOWN, MALFORMED, OUTSIDE = range(8, 14)
#: Times at or beyond this (us) cannot be converted to int64 ns from any origin >= 0.
_MAX_TIME_US = float(2**53)
#: The least slack around Kineto's profiling window within which events are believed.
_WINDOW_SLACK_US = 1e6
_TIMED_KINDS = (HOST_OP, DEVICE_OP, SPAN, STEP, OVERHEAD, INSTANT, MEMORY, COUNTER, PROFILER)
_LANE_KINDS = (HOST_OP, DEVICE_OP, SPAN, STEP, INSTANT)
_THREAD_KINDS = (HOST_OP, SPAN, STEP, INSTANT, MEMORY)
#: Kinds that are not imported, by the name info["kineto"]["not_imported"] counts them under.
_NOT_IMPORTED = {METADATA: "metadata", FLOW: "flow", PROFILER: "profiler"}

_STEP_NAME = re.compile(r"ProfilerStep#(\d{1,18})$")
#: A ProfilerStep annotation whose number does not fit an int64 step: damaged, not a step.
_BAD_STEP_NAME = re.compile(r"ProfilerStep#\d{19,}$")


# ----------------------------------------------------------------------------- public API


def read_kineto_trace(path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Run:
    """Import one saved PyTorch profiler trace (.json or .json.gz) as a `Run`.

    The file is read `chunk_bytes` of JSON text at a time (kineto_stream): the parsed events of one
    chunk, about 5-8x its size, are all of the JSON held at once; the run's columns grow with the events.

    Raises ProfviewError with one sentence naming the file when it is missing, unreadable,
    not (gzip) JSON, not a trace, or has no usable event. Malformed single events are skipped
    and counted in info["warnings"]. A trace cut short (a job killed while it was written) is read up
    to the cut: its complete events, with the steps the cut may have ended early left out, and a
    warning saying so (`cut_steps`).
    """
    check_trace_file(Path(path))
    with gc_paused():
        try:
            streamed = stream_trace(path, chunk_bytes)
            trace, cut = streamed.header, streamed.cut
            run = _run_from_columns(trace, streamed.columns, streamed.items, streamed.not_objects, str(path), cut)
            del streamed  # the event columns, ~110 B per event
            give_back_freed_memory()
        except NotStreamable:  # damage, or a layout the chunked reader does not follow: read it whole
            trace, cut = load_trace(path)
            run = run_from_kineto_trace(trace, label=str(path), cut=cut)
    run.info["source_path"] = str(path)
    if cut is not None:  # said now (profview import prints it) and kept in info["warnings"] (the report shows it)
        said = next(w for w in run.info["warnings"] if w.startswith(CUT_SHORT))
        warn(f"{path}: {said}", IncompleteInputWarning, stacklevel=2)
    return run


def read_kineto_traces(paths: Iterable[str | os.PathLike[str]]) -> list[Run]:
    """Import the traces of several ranks, one `Run` per file in the given order.

    The rank of each comes from its distributedInfo; ranks claimed by two files are reported
    in both runs' warnings.
    """
    runs = [read_kineto_trace(p) for p in paths]
    by_rank = Counter(run.rank for run in runs)
    for run in runs:
        if by_rank[run.rank] > 1:
            run.info["warnings"].append(f"rank {run.rank} is claimed by {by_rank[run.rank]} of the imported traces")
    return runs


def is_kineto_trace(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a file that looks like a Kineto trace (reads at most its first MiB)."""
    return os.path.isfile(path) and looks_like_kineto(path)


#: The names torch.profiler and its users give trace files: a hint when the content is unreadable.
_TRACE_NAME = re.compile(r"\.json(?:\.gz)?$|\.pt\.trace\.")


def kineto_confidence(path: Path) -> float:
    """How surely `path` is a Kineto trace: from its content (`trace_confidence`), else NAMED when
    only its name is a trace's (a truncated .json.gz is then read, and refused in one sentence)."""
    if not os.path.isfile(path):
        return NOT_IT
    return max(trace_confidence(path), NAMED if _TRACE_NAME.search(Path(path).name.lower()) else NOT_IT)


#: The format, for profiler.importers.registry.
IMPORTER = Importer(
    data_origin=SOURCE,
    title="PyTorch profiler (Kineto) trace",
    detect=kineto_confidence,
    read=lambda path: [read_kineto_trace(path)],
    framework="torch",
    exact_steps="record with a torch.profiler schedule and prof.step() once per iteration for exact boundaries",
)


def run_from_kineto_trace(trace: Mapping[str, Any], label: str = "trace", cut: Optional[Cut] = None) -> Run:
    """Convert a parsed Kineto trace object ({"traceEvents": [...], ...}) into a `Run`.

    `label` names the trace in error messages; `cut` says where its file was cut short (load_trace).
    Pure: reads `trace`, changes nothing.
    """
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise ProfviewError(f"{label} is not a Kineto trace: it has no traceEvents list.")
    with gc_paused():
        cols, not_objects = event_columns(events)
        return _run_from_columns(trace, cols, len(events), not_objects, label, cut)


def _run_from_columns(
    trace: Mapping[str, Any], cols: EventColumns, items: int, not_objects: int, label: str, cut: Optional[Cut]
) -> Run:
    """The run of a trace's event columns (`items` events in its list, `not_objects` of them skipped)."""
    kind = _classify(cols)
    if not any(np.isin(kind[at], _TIMED_KINDS).any() for at in spill.chunks(len(kind))):
        raise ProfviewError(
            f"Kineto trace {label} has no usable events: none of its {items} events "
            "has a name, a numeric ts and (for complete events) a numeric dur."
        )
    return _build_run(trace, cols, kind, not_objects, cut)


# ----------------------------------------------------------------------------- classification


def _kind_of(ph: Any, cat: Any) -> int:
    """The event kind of a (phase, category) pair."""
    if ph == "X":
        if cat in HOST_OP_CATEGORIES:
            return HOST_OP
        if cat in DEVICE_OP_CATEGORIES:
            return DEVICE_OP
        if cat == "user_annotation":
            return SPAN
        if cat == "overhead":
            return OVERHEAD
        if cat == "Trace":
            return PROFILER
        return UNKNOWN
    if ph in ("i", "I"):
        return INSTANT
    if ph == "C":
        return COUNTER
    if ph == "M":
        return METADATA
    if ph in ("s", "t", "f"):
        return FLOW
    return UNKNOWN


def _classify(cols: EventColumns) -> np.ndarray:
    """Event kind per row (a byte per event): by (ph, cat), then refined by name and validated (`_kinds`), then
    events at implausible times OUTSIDE (`_plausible_times`). Made a chunk of rows at a time (spill.chunked):
    a big trace's per-event temporaries stay a chunk's size."""
    kind = spill.chunked(len(cols), np.int8, lambda rows: _kinds(cols, rows))
    window = _trace_window(cols, kind)
    for rows in spill.chunks(len(cols)):
        part = kind[rows]  # a view: set in place
        part[np.isin(part, _TIMED_KINDS) & ~_plausible_times(cols, rows, window)] = OUTSIDE
        spill.drop_resident()
    return kind


def _kinds(cols: EventColumns, rows: slice) -> np.ndarray:
    """The kind of some rows, before their times are checked.

    ProfilerStep#N annotations become STEP, "[memory]" instants MEMORY, instants on Kineto's
    own text lanes ("Traces") PROFILER. Events that lack what their kind needs are MALFORMED.
    """
    ph, cat, name, pid = cols.ph[rows], cols.cat[rows], cols.name[rows], cols.pid[rows]
    kind = combine(ph, cat).map(lambda pair: _kind_of(*pair), dtype=np.int8)
    is_str = name.map(lambda v: isinstance(v, str), dtype=bool)
    is_step = name.map(lambda v: isinstance(v, str) and _STEP_NAME.match(v) is not None, dtype=bool)
    kind[np.isin(kind, (HOST_OP, SPAN)) & is_step] = STEP
    framework_op = (kind == HOST_OP) & cat.map(lambda c: HOST_OP_CATEGORIES.get(c) == "host", dtype=bool)
    kind[framework_op & name.map(_is_annotation_name, dtype=bool)] = SPAN
    kind[np.isin(kind, (HOST_OP, SPAN)) & name.map(is_collective_name, dtype=bool)] = HOST_OP
    instant = kind == INSTANT
    kind[instant & name.map(lambda v: v == "[memory]", dtype=bool)] = MEMORY
    kind[instant & np.isnan(pid)] = PROFILER

    kind[
        np.isin(kind, (HOST_OP, SPAN))
        & name.map(lambda v: isinstance(v, str) and _BAD_STEP_NAME.match(v) is not None, dtype=bool)
    ] = MALFORMED

    ts, dur = cols.ts_us[rows], cols.dur_us[rows]
    has_time = np.isfinite(ts)
    has_dur = np.isfinite(dur) & (dur >= 0)
    has_lane = np.isfinite(pid) & np.isfinite(cols.tid[rows])
    timed = np.isin(kind, _TIMED_KINDS)
    complete = ph.map(lambda v: v == "X", dtype=bool)
    valid = (~timed | (has_time & is_str)) & (~(timed & complete) | has_dur) & (~np.isin(kind, _LANE_KINDS) | has_lane)
    kind[~valid] = MALFORMED
    return kind


def _is_annotation_name(name: Any) -> bool:
    return isinstance(name, str) and _ANNOTATION_NAME.fullmatch(name) is not None


def _ends(cols: EventColumns, rows: Union[slice, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, complete) of some rows: an event that is not complete ends where it starts."""
    ts = spill.taken(cols.ts_us, rows)
    complete = cols.ph[rows].map(lambda v: v == "X", dtype=bool)
    return ts, ts + np.where(complete, np.nan_to_num(spill.taken(cols.dur_us, rows)), 0.0), complete


def _trace_window(cols: EventColumns, kind: np.ndarray) -> Optional[tuple[float, float]]:
    """The times an event may have when the trace has Kineto's own window (the `Trace` event "PyTorch Profiler
    (0)"): within it give or take its length (at least 1 s); None without one."""
    rows = rows_where(kind, PROFILER)
    ts, end, complete = _ends(cols, rows)
    dur = spill.taken(cols.dur_us, rows)
    window = (
        complete
        & cols.cat[rows].map(lambda v: v == "Trace", dtype=bool)
        & (ts >= 0)
        & (end < _MAX_TIME_US)
        & np.isfinite(dur)
        & (dur >= 0)
    )
    if not window.any():
        return None
    first, last = float(np.min(ts[window])), float(np.max((ts + dur)[window]))
    slack = max(last - first, _WINDOW_SLACK_US)
    return first - slack, last + slack


def _plausible_times(cols: EventColumns, rows: slice, window: Optional[tuple[float, float]]) -> np.ndarray:
    """Whether each event's time can be real: at or after 0, ending before 2**53 us (so that ns
    from the origin fit an int64) and within the trace's window (`_trace_window`) when it has one: events end
    up to tens of ms after it in real traces; a `ts` of -1, 1e300 or a year away is damage."""
    ts, end, _ = _ends(cols, rows)
    ok = (ts >= 0) & (end < _MAX_TIME_US)
    if window is not None:
        ok &= (ts >= window[0]) & (end <= window[1])
    return ok


def _kind_counts(kind: np.ndarray) -> Counter:
    """How many events are of each kind, counted a chunk at a time."""
    counts: Counter = Counter()
    for at in spill.chunks(len(kind)):
        counts.update(dict(zip(*(v.tolist() for v in np.unique(kind[at], return_counts=True)))))
    return counts


def _first_time_us(cols: EventColumns, kind: np.ndarray) -> float:
    """The earliest start of the timed events (the clock's origin before flooring), a chunk at a time."""
    timed = ((at, np.isin(kind[at], _TIMED_KINDS)) for at in spill.chunks(len(kind)))
    return min(float(np.min(cols.ts_us[at][mask])) for at, mask in timed if mask.any())


def _host_pid(cols: EventColumns, kind: np.ndarray) -> int:
    """The pid most host ops have (the smallest of equals, as pd.Series.mode gives it), -1 without host ops: the
    ops' pids counted a chunk at a time."""
    counts: Counter = Counter()
    for at in spill.chunks(len(kind)):
        counts.update(pd.Series(cols.pid[at][kind[at] == HOST_OP]).value_counts().to_dict())
    if not counts:
        return -1
    most = max(counts.values())
    return int(min(pid for pid, n in counts.items() if n == most))


# ----------------------------------------------------------------------------- the run


def _build_run(
    trace: Mapping[str, Any], cols: EventColumns, kind: np.ndarray, not_objects: int, cut: Optional[Cut] = None
) -> Run:
    """Assemble every table of the run from the classified columns."""
    warnings: list[str] = _event_warnings(cols, kind, not_objects)
    clock = Clock.of(trace, math.floor(_first_time_us(cols, kind)))
    if clock.rule == "unknown":
        base = trace.get("baseTimeNanoseconds")
        why = (
            "its baseTimeNanoseconds is not a usable Unix time"
            if base is not None
            else "no baseTimeNanoseconds and ts is not Unix time"
        )
        warnings.append(f"the trace gives no absolute time ({why}): origin_unix_ns is 0")

    thread_of, threads = _threads(cols, kind)
    steps, step_warnings = _steps(cols, rows_where(kind, STEP), clock)
    warnings += step_warnings
    if cut is not None:
        steps, cut_text = cut_steps(steps, cols, kind, clock, cut)
        warnings.append(cut_text)
    if steps.empty:
        warnings.append(
            "no ProfilerStep#N annotations (the trace was not recorded with a "
            "torch.profiler schedule and prof.step()): every op has step -1"
        )
    spans = _spans(cols, rows_where(kind, SPAN), thread_of, clock)
    steps = _with_phase_bounds(steps, spans)
    steps = _with_overhead(steps, cols, rows_where(kind, OVERHEAD), clock)
    info = _info(trace, cols, kind, clock, warnings)
    instants = _instants(cols, rows_where(kind, INSTANT), thread_of, clock)
    allocations = kineto_memory.allocations(cols, rows_where(kind, MEMORY), thread_of, clock)
    counters = kineto_memory.counters(cols, rows_where(kind, COUNTER), allocations, clock)
    give_back_freed_memory()  # the pages the tables above read of the spilled event columns
    return Run(
        info=info,
        ops=op_table(  # last: it spends the event columns
            cols, rows_where(kind, HOST_OP), rows_where(kind, DEVICE_OP), thread_of, threads, steps, clock
        ),
        spans=spans.drop(columns=["end_ns", "phase"]),
        instants=instants,
        steps=steps,
        counters=counters,
        threads=threads,
        allocations=allocations,
    )


def _event_warnings(cols: EventColumns, kind: np.ndarray, not_objects: int) -> list[str]:
    """Warnings for the events that are skipped: malformed ones and unknown categories."""
    warnings = []
    counts = _kind_counts(kind)
    malformed = counts[MALFORMED] + not_objects
    if malformed:
        warnings.append(
            f"skipped {malformed} malformed events (not an object, or missing a name, a numeric "
            "ts / dur, or a numeric pid / tid)"
        )
    outside = counts[OUTSIDE]
    if outside:
        warnings.append(
            f"skipped {outside} events whose times cannot be real (negative, beyond 2**53 us, or far outside "
            "the profiler's own window): the trace's times are damaged there"
        )
    rows = rows_where(kind, UNKNOWN)
    unknown = Counter(f"{ph}/{cat}" for ph, cat in zip(cols.ph[rows].decoded(), cols.cat[rows].decoded()))
    if unknown:
        listed = ", ".join(f"{key} ({n})" for key, n in sorted(unknown.items()))
        warnings.append(f"skipped {sum(unknown.values())} events of unknown phase/category: {listed}")
    return warnings


# ----------------------------------------------------------------------------- threads


def _threads(cols: EventColumns, kind: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    """Thread index of every host-side row (-1 elsewhere) and the threads table.

    Threads are the distinct (pid, tid) pairs, numbered in (pid, tid) order; the name is the
    last `thread_name` metadata Kineto wrote for the pair ("thread 4037 (python3.8)"), else
    "thread <tid>".
    """
    pairs = sorted({pair for chunk in _thread_rows(kind) for pair in map(tuple, _lane_pairs(cols, chunk)[0].tolist())})
    number = {pair: i for i, pair in enumerate(pairs)}  # threads numbered in (pid, tid) order
    thread_of = spill.filled(len(cols), np.int64, -1)
    for chunk in _thread_rows(kind):  # a chunk of rows at a time: its distinct pairs' numbers, spread back
        distinct, of_row = _lane_pairs(cols, chunk)
        thread_of[chunk] = np.array([number[pair] for pair in map(tuple, distinct.tolist())], dtype=np.int64)[of_row]
        spill.drop_resident()
    names = _thread_names(cols, rows_where(kind, METADATA))
    threads = pd.DataFrame(
        {
            "tid": np.arange(len(pairs), dtype=np.int64),
            "os_tid": np.array([tid for _, tid in pairs], dtype=np.int64),
            "name": [names.get(pair, f"thread {pair[1]}") for pair in pairs],
        },
        columns=list(THREAD_COLUMNS),
    )
    return thread_of, threads


def _thread_rows(kind: np.ndarray) -> Iterator[np.ndarray]:
    """The rows of host-side events (_THREAD_KINDS), a chunk of events at a time."""
    for at in spill.chunks(len(kind)):
        yield at.start + np.flatnonzero(np.isin(kind[at], _THREAD_KINDS))


def _lane_pairs(cols: EventColumns, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (pid, tid) integer pairs of some rows (one per line) and each row's index among them."""
    pid_code, pids = pd.factorize(cols.pid[rows].astype(np.int64))
    tid_code, tids = pd.factorize(cols.tid[rows].astype(np.int64))
    width = max(len(tids), 1)
    of_row, pairs = pd.factorize(pid_code.astype(np.int64) * width + tid_code)
    return np.column_stack([pids[pairs // width], tids[pairs % width]]), of_row


def _thread_names(cols: EventColumns, rows: np.ndarray) -> dict[tuple[int, int], str]:
    """{(pid, tid): name} from the `thread_name` metadata events (a few dozen per trace)."""
    names = {}
    events = zip(
        cols.name[rows].decoded(), cols.arg("name", rows), spill.taken(cols.pid, rows), spill.taken(cols.tid, rows)
    )
    for event, label, pid, tid in events:
        if event == "thread_name" and isinstance(label, str) and np.isfinite(pid) and np.isfinite(tid):
            names[(int(pid), int(tid))] = label
    return names


# ----------------------------------------------------------------------------- steps


def _steps(cols: EventColumns, rows: np.ndarray, clock: Clock) -> tuple[pd.DataFrame, list[str]]:
    """One row per ProfilerStep#N annotation (step = N), in time order.

    fp_start_ns / bp_end_ns are filled later from phase annotations; overhead_ns from
    Kineto's own overhead events.
    """
    start = clock.ns(spill.taken(cols.ts_us, rows))
    frame = pd.DataFrame(
        {
            "step": cols.name[rows].map(_step_number, dtype=np.int64),
            "start_ns": start,
            "end_ns": start + clock.dur_ns(spill.taken(cols.dur_us, rows)),
        }
    ).sort_values(["start_ns", "step"], kind="stable")
    duplicated = frame["step"].duplicated()
    warnings = []
    if duplicated.any():
        warnings.append(
            f"ignored {int(duplicated.sum())} repeated ProfilerStep annotations (the first of each step number is kept)"
        )
    frame = frame[~duplicated]
    steps = pd.DataFrame(
        {
            "step": frame["step"].to_numpy(),
            "start_ns": frame["start_ns"].to_numpy(),
            "end_ns": frame["end_ns"].to_numpy(),
            "fp_start_ns": np.full(len(frame), -1, dtype=np.int64),
            "bp_end_ns": np.full(len(frame), -1, dtype=np.int64),
            "overhead_ns": np.zeros(len(frame), dtype=np.int64),
        },
        columns=list(STEP_COLUMNS),
    )
    return steps, warnings


#: How the warning about a trace file cut short starts.
CUT_SHORT = "the trace file is cut short"


def cut_steps(
    steps: pd.DataFrame, cols: EventColumns, kind: np.ndarray, clock: Clock, cut: Cut
) -> tuple[pd.DataFrame, str]:
    """The steps of a trace cut short that its events cover, and the warning saying where it ends.

    Kineto writes the host's ops, then the devices' work with their launches, then metadata: a cut
    before any device event leaves the host's ops up to the latest one read and no device work; a cut
    among the device events leaves the device's work up to about the latest one read; a cut after them
    loses metadata only. A step ending after that time is left out: its ops or kernels may be missing.
    """
    where = (
        f"its events are complete ({cut.events:,}), only what follows them is lost"
        if cut.events_complete
        else f"{cut.events:,} complete events were read before the cut, the rest is lost"
    )
    ends = "its gzip stream ends" if cut.gzip_ended else "it ends"
    text = f"{CUT_SHORT} ({ends} {cut.text_bytes:,} bytes into its JSON): {where}"
    lanes = np.flatnonzero(np.isin(kind, (HOST_OP, DEVICE_OP, SPAN, STEP)) & np.isfinite(cols.ts_us))
    tail = np.flatnonzero(np.isin(kind, (METADATA, PROFILER)))
    if cut.events_complete or not len(lanes) or (len(tail) and lanes[-1] < tail[-1]):
        return steps, text  # nothing lost, or only the metadata that follows the ops and kernels
    device = kind == DEVICE_OP
    section = device if device.any() else np.isin(kind, (HOST_OP, SPAN, STEP))
    if not device.any():
        text += "; no device event comes before the cut (the steps show the host's side alone)"
    end_us = cols.ts_us[section] + np.nan_to_num(cols.dur_us[section])
    horizon_ns = int(clock.ns(np.array([np.nanmax(end_us)]))[0])
    kept = steps[steps["end_ns"].to_numpy() <= horizon_ns]
    left_out = len(steps) - len(kept)
    if left_out:
        text += f"; {left_out} step(s) ending after {horizon_ns / 1e6:.3f} ms, where its events stop, left out"
    return kept.reset_index(drop=True), text


def _step_number(name: Any) -> int:
    """N of "ProfilerStep#N" (-1 for other names)."""
    match = _STEP_NAME.match(name) if isinstance(name, str) else None
    return int(match.group(1)) if match else -1


def _step_rows(times_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Index (row of `steps`, which is in time order) of the step whose window [start_ns, end_ns) holds each time,
    -1 when none does (`intervals.place` with the rows as labels)."""
    starts, ends = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    return place(times_ns, starts, ends, np.arange(len(steps), dtype=np.int64))


def _phase_of(name: Any, user_range: bool) -> str:
    """ "forward" / "backward" for the phase annotations that mark a training step's compute:
    record_function("## forward ##") style names (torchrec and many training loops),
    DistributedDataParallel.forward (torch's own) and, in a `user_annotation` range (`user_range`),
    a bare record_function("forward"); "" for every other annotation (a bare `forward` cpu_op is a
    scripted module's method, any module's, not the step's forward)."""
    if not isinstance(name, str):
        return ""
    if name == "DistributedDataParallel.forward":
        return "forward"
    word = name.strip("# ").lower()
    return word if word in ("forward", "backward") and (user_range or word != name) else ""


def _with_phase_bounds(steps: pd.DataFrame, spans: pd.DataFrame) -> pd.DataFrame:
    """fp_start_ns = start of the first forward annotation that starts in the step,
    bp_end_ns = end of the last backward annotation that starts in it (-1 without one)."""
    if steps.empty or spans.empty:
        return steps
    frame = pd.DataFrame(
        {
            "row": _step_rows(spans["start_ns"].to_numpy(), steps),
            "phase": spans["phase"].to_numpy(),
            "start_ns": spans["start_ns"].to_numpy(),
            "end_ns": spans["end_ns"].to_numpy(),
        }
    )
    frame = frame[(frame["row"] >= 0) & (frame["phase"] != "")]
    fp = frame[frame["phase"] == "forward"].groupby("row")["start_ns"].min()
    bp = frame[frame["phase"] == "backward"].groupby("row")["end_ns"].max()
    steps = steps.copy()
    steps.loc[fp.index, "fp_start_ns"] = fp.to_numpy()
    steps.loc[bp.index, "bp_end_ns"] = bp.to_numpy()
    return steps


def _with_overhead(steps: pd.DataFrame, cols: EventColumns, rows: np.ndarray, clock: Clock) -> pd.DataFrame:
    """overhead_ns = summed duration of Kineto's own overhead events starting in the step."""
    if steps.empty or rows.size == 0:
        return steps
    row = _step_rows(clock.ns(spill.taken(cols.ts_us, rows)), steps)
    inside = row >= 0
    steps = steps.copy()
    steps["overhead_ns"] = np.bincount(
        row[inside], weights=clock.dur_ns(spill.taken(cols.dur_us, rows))[inside], minlength=len(steps)
    ).astype(np.int64)
    return steps


# ----------------------------------------------------------------------------- spans, instants


def _spans(cols: EventColumns, rows: np.ndarray, thread_of: np.ndarray, clock: Clock) -> pd.DataFrame:
    """User annotations (record_function ranges) other than ProfilerStep, in start order (kind: `_span_kind`), with
    their nesting depth among the annotations of their thread. Keeps end_ns and the phase they
    mark (`_phase_of`) for the step phase bounds.

    A trace holds annotations in proportion to its ops, and the run keeps them to the end of the analysis: their
    numbers are made and put in start order a chunk at a time into spilled arrays (spill.chunked), not held in
    memory. Only the start order itself (an int64 per annotation) is made whole."""
    n = len(rows)
    tid = spill.gathered(thread_of, rows)
    start = spill.chunked(n, np.int64, lambda at: clock.ns(cols.ts_us[rows[at]]), along=rows)
    end = spill.chunked(n, np.int64, lambda at: start[at] + clock.dur_ns(cols.dur_us[rows[at]]), along=rows)
    depth = nesting_depths(enclosing_parents(tid, start, end))
    order = spill.spilled(np.argsort(start, kind="stable"))
    texts = {
        "kind": cols.cat[rows].mapped(_span_kind),
        "name": cols.name[rows],
        "phase": combine(cols.name[rows], cols.cat[rows]).mapped(
            lambda pair: _phase_of(pair[0], pair[1] == "user_annotation")
        ),
    }
    dur = spill.chunked(n, np.int64, lambda at: end[at] - start[at])
    numbers = {"tid": tid, "start_ns": start, "dur_ns": dur, "depth": depth, "end_ns": end}
    columns = {
        column: spill.gathered(numbers[column], order) if column in numbers else texts[column][order].decoded()
        for column in [*SPAN_COLUMNS, "end_ns", "phase"]
    }
    return pd.DataFrame(columns, copy=False)


def _span_kind(cat: Any) -> str:
    """ "span" for a user annotation range, "scope" for an annotation the trace recorded as a framework
    op (torch 1.8's record_function ranges, a TorchScript method's `forward`): the TensorBoard plugin
    counted the latter's time as CPU execution (analysis/step_activity.py)."""
    return "scope" if HOST_OP_CATEGORIES.get(cat) in ("host", "python") else "span"


def _instants(cols: EventColumns, rows: np.ndarray, thread_of: np.ndarray, clock: Clock) -> pd.DataFrame:
    """Instant events of the program's threads (Kineto's own markers are not imported)."""
    return pd.DataFrame(
        {
            "tid": spill.taken(thread_of, rows),
            "kind": np.full(len(rows), "instant", dtype=object),
            "name": cols.name[rows].decoded(),
            "time_ns": clock.ns(spill.taken(cols.ts_us, rows)),
        },
        columns=list(INSTANT_COLUMNS),
    )


# ----------------------------------------------------------------------------- info


def _info(trace: Mapping[str, Any], cols: EventColumns, kind: np.ndarray, clock: Clock, warnings: list[str]) -> RunInfo:
    """Run metadata: rank / world size, clock origin, devices, versions, import counts."""
    dist = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    versions = {}
    if _text(dist.get("nccl_version")) not in ("", "unknown"):
        versions["nccl"] = _text(dist["nccl_version"])
    by_kind = _kind_counts(kind)
    return {
        "data_origin": SOURCE,
        "rank": _int_or(dist.get("rank"), 0, 0, _MAX_RANK),
        "world_size": _int_or(dist.get("world_size"), 1, 1, _MAX_RANK + 1),
        "distributed_backend": _text(dist.get("backend", "")),
        "host": _text(trace.get("host_name", "")),
        "pid": _host_pid(cols, kind),
        "framework_versions": versions,
        "origin_unix_ns": clock.origin_unix_ns,
        "clock": {
            "origin_unix_ns": clock.origin_unix_ns,
            "clock": f"kineto: {clock.rule}",
            "origin_ts_us": clock.origin_us,
        },
        "devices": _devices(trace.get("deviceProperties", trace.get("computeProperties"))),
        "kineto": {
            "schema_version": _scalar(trace.get("schemaVersion")),
            "trace_name": _text(trace.get("traceName", "")),
            "events": int(len(cols)),
            "not_imported": {label: by_kind.get(k, 0) for k, label in _NOT_IMPORTED.items()},
        },
        "warnings": warnings,
    }


def _text(value: Any) -> str:
    """A header field as text: text as it is, a number as its digits, anything else (a list, an
    object: a damaged header) as ""."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value) if math.isfinite(value) else ""
    return ""


def _scalar(value: Any) -> Any:
    """A header value kept in info as it is when it is a number or text, else None."""
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def _devices(properties: Any) -> list[dict[str, Any]]:
    """deviceProperties (torch 1.8: computeProperties) as written: the objects of its list that JSON
    can write back (a damaged, deeply nested one is left out)."""
    devices = []
    for device in properties if isinstance(properties, list) else []:
        if isinstance(device, dict):
            try:
                json.dumps(device, allow_nan=False)
            except (ValueError, TypeError, RecursionError):
                continue
            devices.append(dict(device))
    return devices


#: The largest rank believed (a rank names files: profiler_info_<rank>.json).
_MAX_RANK = 2**31 - 1


def _int_or(value: Any, default: int, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    """`value` as an int in [low, high] (distributedInfo numbers may be written as text), else `default`."""
    try:
        number = int(value) if not isinstance(value, bool) else default
    except (TypeError, ValueError, OverflowError):
        return default
    return number if low <= number <= high else default

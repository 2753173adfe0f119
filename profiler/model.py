"""The in-memory run model: the tables every source produces and every analysis consumes.

A `Run` is what the raw store, the Kineto importer, the Ascend device-log parser and the
MindSpore importer all turn into. Analysis functions take its DataFrames and return DataFrames;
the exporters write the profview output directory from it.

Time: every `*_ns` column is int64 nanoseconds on the run's own clock, counted from the run's
origin (`info["clock"]["origin_unix_ns"]` is the Unix time of that origin, so absolute time =
origin_unix_ns + t). Columns keep a fixed order and dtype so that output files are
deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict

import numpy as np
import pandas as pd

from profiler import spill
from profiler.formats.text import valid_text, valid_texts

#: One op schema (every source): host ops, user ops, device kernels, memcpy, collectives.
OP_COLUMNS: dict[str, str] = {
    # String columns are "object" or pandas categoricals (sources with many rows use categoricals).
    "device": "object",  # "cpu", "cuda:0", "npu:1", ...
    "stream": "object",  # host thread name, or device stream id as text ("7")
    "name": "object",  # op name as the source reports it (kernel name, aten::conv2d, full op name)
    "op_type": "object",  # op type (Conv2D, aten::conv2d, MatMul, nccl:all_reduce, Memcpy HtoD ...)
    "category": "object",  # compute | comm | memcpy | memset | host | user | python | runtime | sync | annotation
    "start_ns": "int64",
    "dur_ns": "int64",
    "self_ns": "int64",  # dur_ns minus time of ops nested inside it on the same lane (== dur_ns for leaves)
    "step": "int64",  # step the op started in, -1 when outside every step
    "shapes": "object",  # input shapes as text when recorded, else ""
    "dtypes": "object",  # input types as text when recorded (torch: ["double","float",...]), else ""
    "correlation": "int64",  # host-launch <-> device-kernel correlation id, -1 when none
    "source": "object",  # marker | torch | kineto | ascend | mindspore
    # Kernels' launch figures as the device's tracer estimated them (Kineto's "blocks per SM" and
    # "est. achieved occupancy %"), NaN when the source gives none: the kernel view's and the GPU
    # summary's SM efficiency and occupancy (analysis/kernels.py, analysis/gpu_summary.py).
    "blocks_per_sm": "float32",
    "occupancy_pct": "float32",
}

#: Op categories of a device's work: what busy time, the device breakdown and device op tables count.
DEVICE_WORK_CATEGORIES = ("compute", "comm", "memcpy", "memset")
#: Op categories that are never the work, though they are on the timeline: device API calls on the
#: host (`runtime`: launches, syncs, allocations), device-side waits (`sync`: a stream waiting on an
#: event), device-side annotation ranges (`annotation`: a record_function range on a stream) and Python
#: frames (`python`: Kineto's with_stack / with_modules events, the callers of the ops that do the work).
NOT_WORK_CATEGORIES = ("runtime", "sync", "annotation", "python")

#: Name prefixes of the collective ranges torch's process-group backends write (`nccl:all_reduce`,
#: `gloo:broadcast`, ...) as user annotations (torch 1.8: as ops): imported as host ops of category
#: `comm` with their message's shapes and types (the TensorBoard plugin's communication ops).
COLLECTIVE_PREFIXES = ("nccl:", "gloo:", "mpi:", "ucc:", "xccl:")

#: The user spans a float64 module's forward and backward are recorded as (profiler/capture/torch_dtypes.py):
#: this prefix, the module's path and type, and " backward" for its backward.
FLOAT64_MODULE_SPAN = "float64 module: "

#: Named host spans that are not ops: phases (forward, backward, tail, all_reduce, ...) and user spans.
SPAN_COLUMNS: dict[str, str] = {
    "tid": "int64",  # profview thread index (see threads table)
    "kind": "object",  # phase | span | scope (a framework op that is an annotation: Kineto cpu_op ranges) | overhead
    "name": "object",
    "start_ns": "int64",
    "dur_ns": "int64",
    "depth": "int64",  # nesting depth on its thread, 0 = outermost
}

#: Point events: marks (fp_start, bp_end, ...) and user instants.
INSTANT_COLUMNS: dict[str, str] = {
    "tid": "int64",
    "kind": "object",  # mark | instant
    "name": "object",
    "time_ns": "int64",
}

#: Step boundaries as recorded or imported. fp/bp columns are -1 when the source has none;
#: their *_source is then recomputed by analysis (inferred / missing).
STEP_COLUMNS: dict[str, str] = {
    "step": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "fp_start_ns": "int64",
    "bp_end_ns": "int64",
    "overhead_ns": "int64",  # profiler's own time spent inside this step (calls + flushes)
}

#: Sampled counters: host (psutil), GPU (NVML), user counters (profiler.counter).
COUNTER_COLUMNS: dict[str, str] = {
    # String columns are "object" or pandas categoricals (the Kineto importer's: millions of memory samples).
    "source": "object",  # host | nvml | user | queue
    "device": "object",  # "host", "cuda:0", ...
    "metric": "object",  # cpu_percent, rss_bytes, gpu_util_percent, ...
    "time_ns": "int64",
    "value": "float64",
}

#: Data-queue probe events: one row per put / get.
QUEUE_COLUMNS: dict[str, str] = {
    "queue": "object",
    "time_ns": "int64",
    "event": "object",  # put | get
    "size": "int64",  # queue size right after the event
    "capacity": "int64",  # 0 = unbounded
    "wait_ns": "int64",  # how long the put / get blocked
    "tid": "int64",  # thread that did the put / get (-1 when unknown)
}

#: The framework allocator's allocations and frees (Kineto's "[memory]" events, profile_memory=True).
ALLOCATION_COLUMNS: dict[str, str] = {
    # "device" is "object" or a pandas categorical (the Kineto importer's).
    "device": "object",  # the memory's device: "host" (CPU memory), "cuda:0", ...
    "tid": "int64",  # thread that allocated / freed (threads table)
    "time_ns": "int64",
    "bytes": "int64",  # > 0 an allocation, < 0 a free
    "addr": "int64",  # the block's address (pairs an allocation with its free), -1 when not recorded
    "allocated_bytes": "float64",  # the device's allocated memory right after (NaN when not recorded)
    "reserved_bytes": "float64",  # the device's memory reserved by the allocator right after
}

#: Threads / lanes of the host side.
THREAD_COLUMNS: dict[str, str] = {
    "tid": "int64",  # profview thread index, stable within a run
    "os_tid": "int64",  # the OS / Python thread identifier
    "name": "object",
}


def op_times(ops: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) of the ops at `rows`, int64, gathered a chunk of rows at a time (spill.gathered): in
    spill files when the run is spilled, with no whole-column temporaries."""
    start, dur = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    return spill.gathered(start, rows), spill.chunked(
        len(rows), np.int64, lambda at: start[rows[at]] + dur[rows[at]], along=rows
    )


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty DataFrame with the given schema."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def conform(df: pd.DataFrame | Mapping[str, Any], columns: dict[str, str]) -> pd.DataFrame:
    """Return `df` (a DataFrame or a dict of columns) with exactly the schema's columns, in order
    and with the schema's dtypes, copying no column that already has its dtype.

    Missing columns are filled with the type's neutral value ("" / -1 / NaN: not known).
    """
    out = {}
    n = len(df) if isinstance(df, pd.DataFrame) else len(next(iter(df.values()), ()))
    for col, dtype in columns.items():
        if col in df:
            s = df[col]
            if dtype == "object":
                # categoricals stay categorical: millions of rows share a few hundred names
                if not isinstance(getattr(s, "dtype", None), pd.CategoricalDtype):
                    s = pd.Series(s).fillna("").astype(str).astype(object)
                out[col] = s.array if isinstance(s, pd.Series) else s
            else:
                out[col] = np.asarray(s, dtype=dtype)
        elif dtype == "object":
            out[col] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[""])
        elif dtype.startswith("float"):
            out[col] = np.full(n, np.nan, dtype=dtype)
        else:
            out[col] = np.full(n, -1, dtype=np.int64)
    return pd.DataFrame(out, columns=list(columns), copy=False)


def with_columns(frame: pd.DataFrame, **columns: Any) -> pd.DataFrame:
    """`frame` with `columns` set (replaced in place, or added last), no column copied: pandas' assign and item
    setting copy the new array, a whole column of a big run each (of a spilled one, into memory)."""
    arrays = {name: frame[name].array for name in frame.columns}
    return pd.DataFrame({**arrays, **columns}, index=frame.index, copy=False)


def with_valid_text(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every text value valid Unicode (formats.text.valid_text: lone surrogates escaped).

    Names come from user code (`profiler.op(os.fsdecode(b"\\xff"))`) and foreign files, and a
    string no UTF-8 file can hold would fail every writer at the end of an analysis. Text columns
    are checked by their distinct values (categories), so this costs little; `frame` is returned
    unchanged (not copied) when nothing needed escaping.
    """
    if not isinstance(frame, pd.DataFrame):
        return frame
    fixed = {}
    for col in frame.columns:
        column = frame[col]
        if isinstance(column.dtype, pd.CategoricalDtype):
            categories = valid_texts(column.cat.categories)
            if categories is not None:
                fixed[col] = pd.Categorical(np.asarray(column.astype(object).map(_valid_one), dtype=object))
        elif column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            if valid_texts(pd.unique(column.to_numpy(dtype=object))) is not None:
                fixed[col] = column.map(_valid_one).astype(column.dtype if column.dtype != object else object)
    return frame.assign(**fixed) if fixed else frame


def _valid_one(value: Any) -> Any:
    return valid_text(value) if isinstance(value, str) else value


#: The data_origin of runs profview recorded itself (importers name theirs: profiler.importers.registry).
NATIVE_ORIGIN = "profview"


class ClockInfo(TypedDict, total=False):
    """`RunInfo.clock`: where the run's time 0 is."""

    clock: str  # which clock the times are on: perf_counter_ns, "kineto: <rule>", ascend_syscnt, ...
    origin_unix_ns: int  # Unix time of the run's time 0 (0: unknown)
    origin_monotonic_ns: int  # recordings: the perf_counter_ns reading of time 0
    origin_device_ns: int  # imported device logs: the device clock's reading of time 0
    origin_ts_us: float  # Kineto: the trace's ts of time 0
    tick_ns: int  # device counters: ns per tick
    note: str  # why the origin is what it is
    host_start: dict[str, int]  # Ascend: host_start.log's clock readings
    offset_method: str  # recordings: how the offset to rank 0 was found (capture/distributed.py)
    offset_to_rank0_ns: Optional[int]
    offset_uncertainty_ns: Optional[int]
    offset_rounds: int


class RecordingInfo(TypedDict, total=False):
    """`RunInfo.recording`: what the raw store held and what was lost on the way (docs/formats.md)."""

    events: int
    dropped_events: int
    dropped_reason: str
    events_outside_windows: int
    unmatched_span_events: int
    torn_chunks: int
    damaged_chunks: list[dict[str, Any]]
    lost_events: int
    duplicate_chunks: int
    stopped_cleanly: bool
    memory_budget_bytes: Optional[int]
    raw_files: list[str]


class RunInfo(TypedDict, total=False):
    """Everything known about a run besides its tables: the one definition of its fields.

    It is written as profiler_info_{rank}.json (docs/formats.md): every field any source fills is
    declared here, and a reader reads only these fields. A field a source does not know is absent.
    """

    schema_version: int
    tool: str
    tool_version: str
    recorded_with: Optional[str]  # the profview version that recorded the raw store
    data_origin: str  # NATIVE_ORIGIN, or the importer that read the capture
    source_path: str  # imports: the capture that was read
    rank: int
    world_size: int
    distributed_backend: str  # Kineto: distributedInfo.backend
    host: str
    pid: int
    device_id: int  # imported device captures: the device the run is
    framework_versions: dict[str, str]
    devices: list[dict[str, Any]]  # Kineto: deviceProperties
    origin_unix_ns: int  # Kineto: the same as clock.origin_unix_ns
    clock: ClockInfo
    sources: dict[str, dict[str, Any]]  # per source (or per imported file kind): status, files, ...
    config: dict[str, Any]  # the Profiler's options
    recording: RecordingInfo
    overhead: dict[str, Any]  # per_event_ns, flush_ms; total_ms once analysed
    profiler_memory: dict[str, Any]  # per source, what the profiler itself held: recorder buffers, torch's events
    step_tid: int  # the thread whose step() calls cut the steps (-1: none)
    steps: dict[str, Any]  # count (first, last once analysed)
    step_boundaries: dict[str, Any]  # set when steps were inferred: analysis.steps.StepInference
    steps_from: str  # with reference devices: "npu:<id>" or "host"
    ascend_devices: list[dict[str, Any]]  # with reference devices: one entry per device merged
    kineto: dict[str, Any]  # Kineto: schema_version, trace_name, events, not_imported
    ascend: dict[str, Any]  # Ascend JOB: job_dir, backend, record counts, fp / bp ops
    mindspore: dict[str, Any]  # MindSpore: layout, device
    warnings: list[str]
    outputs: list[str]  # written last by the writer: every file of the rank
    timeline: dict[str, Any]  # what timeline_{rank}.json holds (export/writers/timeline.py)


def data_origin(info: RunInfo) -> str:
    """Who measured the run: NATIVE_ORIGIN unless an importer read it."""
    return str(info.get("data_origin", NATIVE_ORIGIN))


@dataclass
class Run:
    """Everything known about one rank of one profiled run, as tables."""

    info: RunInfo = field(default_factory=RunInfo)
    ops: pd.DataFrame = field(default_factory=lambda: empty_frame(OP_COLUMNS))
    spans: pd.DataFrame = field(default_factory=lambda: empty_frame(SPAN_COLUMNS))
    instants: pd.DataFrame = field(default_factory=lambda: empty_frame(INSTANT_COLUMNS))
    steps: pd.DataFrame = field(default_factory=lambda: empty_frame(STEP_COLUMNS))
    counters: pd.DataFrame = field(default_factory=lambda: empty_frame(COUNTER_COLUMNS))
    queues: pd.DataFrame = field(default_factory=lambda: empty_frame(QUEUE_COLUMNS))
    threads: pd.DataFrame = field(default_factory=lambda: empty_frame(THREAD_COLUMNS))
    allocations: pd.DataFrame = field(default_factory=lambda: empty_frame(ALLOCATION_COLUMNS))

    def __post_init__(self) -> None:
        for name in ("ops", "spans", "instants", "counters", "queues", "threads", "allocations"):
            setattr(self, name, with_valid_text(getattr(self, name)))

    @property
    def rank(self) -> int:
        return int(self.info.get("rank", 0))

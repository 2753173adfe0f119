"""The columns and names of the output contract (docs/formats.md): the step phases and figures,
the columns of every CSV and of the report's devices, the Chrome trace's limits, the columns and
version of the event file, the queue names, and the bound on the numbers of an output file."""

from __future__ import annotations

# ---- columns ------------------------------------------------------------------------------

#: The step phases, in order. They tile a step: iteration_gap_ms + fp_bp_ms + tail_ms == total_ms.
PHASES: tuple[tuple[str, str], ...] = (
    ("iteration_gap_ms", "iteration gap"),
    ("fp_bp_ms", "forward + backward"),
    ("tail_ms", "tail"),
)
PHASE_COLUMNS = tuple(column for column, _ in PHASES)
#: Other per-step figures (column, label); all-reduce and data wait overlap the phases.
ALL_REDUCE = ("all_reduce_ms", "all-reduce")
DATA_WAIT = ("data_wait_ms", "data wait")
GAP_HOST = ("gap_host_ms", "other host work in the gap")
PROFILER_OVERHEAD = ("profiler_overhead_ms", "profiler overhead")
#: Per step, how long the device executed something / did not (empty for steps without device data).
DEVICE_BUSY = ("device_busy_ms", "device busy")
DEVICE_IDLE = ("device_idle_ms", "device idle")
STEP_TOTAL = ("total_ms", "step")
#: a step's start (ms from the origin), and how many ops started in it (0 where op capture skipped it)
STEP_START = "start_ms"
OP_COUNT = "op_count"

STEP_TRACE_COLUMNS = [
    "step",
    "start_ms",
    "iteration_gap_ms",
    "fp_bp_ms",
    "tail_ms",
    "total_ms",
    "all_reduce_ms",
    "all_reduce_overlap_ms",
    "data_wait_ms",
    "gap_host_ms",
    "op_count",
    "profiler_overhead_ms",
    "start_unix_ns",
    "fp_start_unix_ns",
    "bp_end_unix_ns",
    "end_unix_ns",
    "fp_start_source",
    "bp_end_source",
    "step_source",
    DEVICE_BUSY[0],
    DEVICE_IDLE[0],
]
#: Framework ops' device time (the TensorBoard plugin's operator view, docs/tensorboard.md): the kernels
#: each op launched itself / with its children, its tensor-core eligibility ("true" / "false") and the
#: tensor-core share of those times; empty for other ops and for runs whose kernels carry no launch.
OP_DEVICE_COLUMNS = ["device_self_ms", "device_total_ms", "tc_eligible", "tc_self_pct", "tc_total_pct"]
OP_TYPE_COLUMNS = [
    "device",
    "op_type",
    "category",
    "count",
    "total_ms",
    "self_ms",
    "avg_ms",
    "share_pct",
    *OP_DEVICE_COLUMNS,
]
OP_DETAIL_COLUMNS = [
    "device",
    "name",
    "op_type",
    "category",
    "count",
    "total_ms",
    "self_ms",
    "avg_ms",
    "min_ms",
    "max_ms",
    "share_pct",
    "shapes",
    "scope",
    *OP_DEVICE_COLUMNS,
]
#: op_shapes_{rank}.csv: per device, op name and input shapes (the TensorBoard plugin's "Operator + Input Shape").
OP_SHAPE_COLUMNS = [
    "device",
    "name",
    "shapes",
    "op_type",
    "category",
    "count",
    "total_ms",
    "self_ms",
    "avg_ms",
    "share_pct",
    *OP_DEVICE_COLUMNS,
]
#: op_stacks_{rank}.csv: per device, framework op name and call stack (the Python frames around it, outermost
#: first, " > "-joined; the TensorBoard plugin's "View CallStack").
OP_STACK_COLUMNS = ["stack" if column == "shapes" else column for column in OP_SHAPE_COLUMNS]
#: step_activity_{rank}.csv: per step as the TensorBoard plugin delimits them, the ms each activity had
#: (every instant to the first activity running then, in this order; other: none), and the step.
STEP_ACTIVITY_COLUMNS = [
    "step",
    "kernel_ms",
    "memcpy_ms",
    "memset_ms",
    "communication_ms",
    "runtime_ms",
    "dataloader_ms",
    "cpu_exec_ms",
    "other_ms",
    "total_ms",
]
#: kernels_{rank}.csv: per device, kernel and launching op (the TensorBoard plugin's kernel view).
KERNEL_COLUMNS = [
    "device",
    "name",
    "op",
    "calls",
    "total_ms",
    "mean_ms",
    "max_ms",
    "min_ms",
    "blocks_per_sm",
    "achieved_occupancy_pct",
    "tensor_cores",
]
#: modules_{rank}.csv: per nn.Module call path ("Sequential_0/Linear_1"), the TensorBoard plugin's module view:
#: name without "nn.Module: ", the enclosing module's path ("" at a root), calls, host and device times.
MODULE_COLUMNS = [
    "path",
    "name",
    "parent",
    "occurrences",
    "host_total_ms",
    "host_self_ms",
    "device_total_ms",
    "device_self_ms",
]
#: comm_split_{rank}.csv: per step as the TensorBoard plugin delimits them, its computation / communication
#: overview: computation and communication each without their overlap, the overlap, the rest, the step.
COMM_SPLIT_COLUMNS = ["step", "computation_ms", "overlap_ms", "communication_ms", "other_ms", "total_ms"]
#: cluster_comm_split.csv: every rank's comm_split rows (the plugin's per-worker distributed view).
CLUSTER_COMM_SPLIT_COLUMNS = ["rank", *COMM_SPLIT_COLUMNS]
#: comm_ops_{rank}.csv: per collective, its calls, message size and latency (the plugin's communication ops).
COMM_OP_COLUMNS = ["name", "calls", "total_bytes", "mean_bytes", "total_ms", "mean_ms"]
#: comm_pieces_{rank}.csv: every collective call's pieces (the executions it launched), for the data transfer time.
COMM_PIECE_COLUMNS = ["name", "call", "piece", "start_ms", "dur_ms"]
#: cluster_comm_ops.csv: every rank's comm_ops with its data transfer time (the plugin's distributed view).
CLUSTER_COMM_OP_COLUMNS = ["rank", *COMM_OP_COLUMNS, "transfer_ms", "mean_transfer_ms"]
#: memory_{rank}.csv: each device's allocated and reserved memory after each allocation or free (the
#: TensorBoard plugin's memory curve; device "host" is CPU memory).
MEMORY_COLUMNS = ["device", "time_ms", "allocated_bytes", "reserved_bytes"]
#: memory_events_{rank}.csv: each block's life, the op that allocated it (the plugin's memory events).
MEMORY_EVENT_COLUMNS = ["device", "op", "bytes", "alloc_ms", "free_ms", "lifetime_ms"]
#: op_memory_{rank}.csv: per device and op, its allocations (the plugin's memory statistics): self = made by
#: the op itself, the others with its children; increase = allocated minus freed.
OP_MEMORY_COLUMNS = [
    "device",
    "op",
    "calls",
    "self_increase_bytes",
    "self_alloc_bytes",
    "self_alloc_count",
    "increase_bytes",
    "alloc_bytes",
    "alloc_count",
]
DATA_QUEUE_COLUMNS = ["queue", "time_ms", "event", "size", "capacity", "wait_ms", "step"]
DEVICE_COUNTER_COLUMNS = ["source", "device", "metric", "time_ms", "value"]
#: The keys of each entry of report_{rank}.json's "devices" list, one per device (analysis/device_time.py):
#: the device's time breakdown over its window (HTA's definitions) and its idle time split by cause.
DEVICE_TIME_COLUMNS = [
    "device",
    "window_ms",
    "busy_ms",
    "idle_ms",
    "busy_pct",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "comm_pct",
    "memory_pct",
    "comm_compute_overlap_pct",
    "executions",
    "streams",
    "idle_sync_ms",
    "idle_data_ms",
    "idle_host_ms",
    "idle_launch_ms",
    "idle_other_ms",
    "outside_steps_ms",
]
#: The GPU summary each device of report_{rank}.json adds (analysis/gpu_summary.py, the TensorBoard plugin's
#: overview; NaN / null where the device's kernels do not carry the figure).
GPU_SUMMARY_COLUMNS = [
    "utilization_pct",
    "sm_efficiency_pct",
    "achieved_occupancy_pct",
    "tensor_core_pct",
    "tc_eligible_pct",
]
#: The keys of each entry of report_{rank}.json's "devices" list.
REPORT_DEVICE_COLUMNS = [*DEVICE_TIME_COLUMNS, *GPU_SUMMARY_COLUMNS]
CLUSTER_STEP_COLUMNS = [
    "rank",
    "step",
    "start_ms",
    "iteration_gap_ms",
    "fp_bp_ms",
    "tail_ms",
    "total_ms",
    "comm_ms",
    "comm_overlap_ms",
    "exposed_comm_ms",
    "wait_ms",
    "busy_ms",
    "fp_bp_excl_comm_ms",
    "tail_excl_comm_ms",
    "slowest_rank",
    "behind_slowest_ms",
]

# ---- the Chrome trace (timeline_{rank}.json) -------------------------------------------------

#: The most events (rows and flow points) timeline_{rank}.json holds by default: a run with more
#: gets the trace of its key steps (median, slowest, outliers) and `profview export --chrome` writes
#: the rest from the event file. 1e6 events are 70-200 MB of JSON, which chrome://tracing (a hard
#: limit near 256 MB) and Perfetto's in-browser importer (~2 GB of memory) open in seconds
#: (docs/formats.md, "timeline_{rank}.json"). `Settings(timeline_max_events=)` changes it.
TIMELINE_MAX_EVENTS = 1_000_000
#: What profiler_info's `timeline.content` says the trace holds.
TIMELINE_FULL, TIMELINE_KEY_STEPS = "full", "key steps"

# ---- the columnar event file (events_{rank}.arrow) ------------------------------------------

#: What the event file's metadata calls itself, and its version (readers refuse a newer one).
EVENT_FILE_FORMAT = "profview-events"
EVENT_FILE_VERSION = 3
#: The schema metadata key holding the file's tables (names, categories, args, lanes, heads) as JSON.
EVENT_FILE_META_KEY = "profview"
#: Event categories that are not ops (every other category is an op's: compute, host, comm, user, ...):
#: steps, phases, user spans, framework scopes (kineto annotations recorded as ops), the profiler's own
#: overhead, marks, instants, counters and launch arrows.
NOT_OP_EVENT_KINDS = ("step", "phase", "span", "scope", "overhead", "mark", "instant", "counter", "launch")
#: The metadata's lane index holds every this-many-th start of a lane's complete rows.
EVENT_INDEX_STEP = 1 << 16
#: The fields of a row's head, with their numpy dtypes: what many rows share, so the file stores each
#: distinct head once (the metadata's `heads` table, one array per field) and a row its head's index.
EVENT_HEAD_FIELDS: tuple[tuple[str, str], ...] = (
    ("ph", "uint8"),  # the Chrome trace phase letter as a byte: X complete, i instant, C counter, s / f flow
    ("lane", "uint16"),  # index into the lanes table (pid, tid, process and thread names, kind)
    ("name", "int32"),  # index into the names table
    ("category", "uint16"),  # index into the categories table (step, phase, span, compute, host, counter, ...)
    ("args", "int32"),  # index into the args table (JSON text), -1 for none
)
#: The event file's columns, in order, with their numpy dtypes.
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("start_ns", "int64"),  # start (time of an instant / counter value), ns from the run's origin
    ("dur_ns", "int64"),  # duration, 0 for instants and counter values; a flow point's (s / f) id (version 3)
    ("step", "int32"),  # the step the event started in, -1 outside every step
    ("head", "int32"),  # index into the heads table
)
#: The columns of each version's files, in order: version 1 stored the head fields in every row; version 3 stores
#: a flow point's id as its dur_ns (version 2: in its args, a head per point).
EVENT_FILE_COLUMNS: dict[int, tuple[str, ...]] = {
    1: ("ph", "lane", "start_ns", "dur_ns", "name", "category", "step", "args"),
    2: tuple(name for name, _ in EVENT_COLUMNS),
    3: tuple(name for name, _ in EVENT_COLUMNS),
}
#: The numpy dtype of every field a reader gets (`EventFile.column`): the head fields and the columns.
EVENT_FIELD_DTYPES: dict[str, str] = dict(EVENT_HEAD_FIELDS + EVENT_COLUMNS)

# ---- queue names --------------------------------------------------------------------------

ARROW = "->"  # a connector queue between two pipeline stages: "producer->consumer"
HOST_QUEUE = "host_queue"  # the host pipeline's output: batches ready on the host
DEVICE_QUEUE = "device_queue"  # batches already staged on the device, waiting for compute

# ---- numbers ------------------------------------------------------------------------------

#: The bound (exclusive) on the magnitude of a number of an output file: whole numbers (counts,
#: sizes, steps, ns) are int64s, and times in ms come from the run's int64 ns clock. A value at or
#: beyond it (1e308 ms, a capacity of 2**64) is damage, refused by the readers with the file, column and line; only a
#: user's counter value (device_counters.value) may be any float.
MAX_WHOLE = 2.0**63
MAX_MS = MAX_WHOLE / 1e6

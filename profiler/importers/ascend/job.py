"""Reading an Ascend JOB directory into an `AscendJob`: the parsed tables of one device.

All file access happens here; the decoders and assemblers it calls are pure functions.
Problems with the data become warnings (kept in `AscendJob.warnings` and emitted with
`warnings.warn`); only a job that yields neither op timings nor steps raises `ProfviewError`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError
from profiler.importers.ascend import framework_desc, hwts, training_trace
from profiler.importers.ascend.device_run import (
    SYSCNT_TICK_NS,
    device_run,
    input_shapes,
    lookup,
    op_type_from_name,
    reduce_spans,
)
from profiler.importers.ascend.slices import SLICE_NAMES, Slice, find_host_start, find_slices, join_slices
from profiler.importers.base import CERTAIN, NOT_IT, SHAPED, Importer
from profiler.model import Run, RunInfo

#: The data_origin of the runs read from a JOB directory.
DATA_ORIGIN = "ascend"
#: Ops whose presence marks a first step that only initialises the dataset queue (dropped).
DATASET_INIT_PREFIX = "Default/InitDataSetQueue"


@dataclass
class AscendJob:
    """The parsed tables of one device of an Ascend profiling job. Times are syscnt ticks (10 ns)."""

    job_dir: Path
    device_id: int
    backend: str  # "vm" (MindSpore VM) or "ge" (GraphEngine): how graph_desc is decoded
    hwts: pd.DataFrame  # decoded HWTS records: log_type, cnt, flag, core_id, block_id, task_id, stream_id, syscnt
    tasks: pd.DataFrame  # task_desc: full_name, block_dim, task_id, stream_id (file order)
    graph: pd.DataFrame  # graph_desc: full_name, op_type, op_info (file order)
    points: dict[int, str]  # point file: tag -> op name
    trace: pd.DataFrame  # training-trace records: tag, task_id, stream_id, syscnt
    op_names: list[str]  # op index -> full op name (task_desc order of first appearance)
    executions: pd.DataFrame  # op, key, stream_id, start, dur (file order)
    steps: pd.DataFrame  # step_num, start, end, fp, bp
    reduces: pd.DataFrame  # step_num, stream_id, k, start, end, start_tag, end_tag
    host_clock: dict[str, int] = field(default_factory=dict)  # host_start.log values (ns)
    sources: dict[str, dict] = field(default_factory=dict)  # per kind: status, files, records
    warnings: list[str] = field(default_factory=list)


def is_ascend_job_dir(path: str | Path) -> bool:
    """Whether `path` is a directory holding Ascend profiling slices (itself or in data/)."""
    path = Path(path)
    return path.is_dir() and any(s.kind in ("hwts", "training_trace") for s in find_slices(path))


def ascend_job_devices(path: str | Path) -> list[int]:
    """The device ids that have slices in an Ascend JOB directory."""
    return sorted({s.device for s in find_slices(Path(path))})


def ascend_job_dirs(path: str | Path) -> list[Path]:
    """`path` when it is an Ascend JOB directory, else its JOB* subdirectories that are."""
    path = Path(path)
    if is_ascend_job_dir(path):
        return [path]
    return [p for p in sorted(path.glob("JOB*")) if is_ascend_job_dir(p)] if path.is_dir() else []


def ascend_confidence(path: Path) -> float:
    """CERTAIN for a JOB directory (or a directory of them); SHAPED for a directory with Ascend slices
    of which none is an HWTS log or a training trace (reading it says why it yields nothing)."""
    if ascend_job_dirs(path):
        return CERTAIN
    return SHAPED if path.is_dir() and find_slices(path) else NOT_IT


def read_ascend_jobs(path: str | Path) -> list[AscendJob]:
    """Every device of an Ascend JOB directory, or of its JOB* subdirectories (one AscendJob each).

    Raises ProfviewError when there is no JOB directory (the parser's sentence: missing, no slices,
    ...) or when two JOB directories hold the same device.
    """
    path = Path(path)
    dirs = ascend_job_dirs(path)
    if not dirs:
        read_ascend_job(path)  # raises the parser's sentence (missing, no slices, ...)
    jobs = [read_ascend_job(d, device) for d in dirs for device in ascend_job_devices(d)]
    devices = [job.device_id for job in jobs]
    if len(set(devices)) != len(devices):
        raise ProfviewError(
            f"{path} holds the same device more than once across its JOB directories "
            f"(devices {devices}); import one JOB directory at a time"
        )
    return jobs


def _choose_device(job_dir: Path, slices: list[Slice], device_id: int | None) -> int:
    devices = sorted({s.device for s in slices})
    if device_id is None and len(devices) > 1:
        raise ProfviewError(f"Ascend job {job_dir} holds slices of devices {devices}; choose one with device_id.")
    chosen = devices[0] if device_id is None else int(device_id)
    if chosen not in devices:
        raise ProfviewError(f"Ascend job {job_dir} has no slices for device {chosen} (found devices {devices}).")
    return chosen


def _read_host_clock(path: Path | None) -> dict[str, int]:
    """`host_start.log` key: value lines with integer values (clock_realtime, clock_monotonic_raw)."""
    if path is None:
        return {}
    values = {}
    for line in path.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdecimal() and int(value) < 2**63:  # an int64 clock
            values[key.strip()] = int(value)
    return values


class _Reader:
    """Per-kind slice reading with uniform bookkeeping of sources and problems."""

    def __init__(self, slices: list[Slice], device: int):
        self.device = device
        self.slices = [s for s in slices if s.device == device]
        self.sources: dict[str, dict] = {}
        self.problems: list[str] = []

    def joined(self, kind: str, missing_effect: str):
        """The joined slices of `kind`, or None (with a problem noted) when there are none or all are empty."""
        paths = [s.path for s in self.slices if s.kind == kind]
        for path in paths:
            if path.stat().st_size == 0:
                self.problems.append(f"{path.name}: slice is empty")
        if not paths:
            self.sources[kind] = {"status": f"absent: no {kind} slice"}
            if missing_effect:
                self.problems.append(f"no {SLICE_NAMES[kind]} file for device {self.device}: {missing_effect}")
            return None
        self.sources[kind] = {"status": "ok", "files": [str(p) for p in paths]}
        return join_slices(paths)

    def parsed(self, kind: str, missing_effect: str, parse, empty):
        """Parse a kind's joined slices with `parse` (returning (value, problems)), or `empty` when absent."""
        joined = self.joined(kind, missing_effect)
        if joined is None:
            return empty
        value, problems = parse(joined)
        self.problems.extend(problems)
        self.sources[kind]["records"] = len(value)
        return value

    def backend(self) -> str:
        return next((s.backend for s in self.slices if s.backend), "vm")


def read_ascend_job(job_dir: str | Path, device_id: int | None = None) -> AscendJob:
    """Parse the slices of one device of an Ascend JOB directory.

    `device_id` may be omitted when the job holds a single device. Raises ProfviewError when the
    directory is missing or nothing usable remains; every other problem is a warning.
    """
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        raise ProfviewError(f"Ascend job directory {job_dir} does not exist or is not a directory.")
    slices = find_slices(job_dir)
    if not slices:
        raise ProfviewError(
            f"No Ascend profiling slices (hwts.log.data.45.dev..., training_trace.46.dev..., "
            f"Framework.host...) were found in {job_dir} or {job_dir / 'data'}."
        )
    device = _choose_device(job_dir, slices, device_id)
    reader = _Reader(slices, device)
    backend = reader.backend()
    no_ops = "device tasks cannot be mapped to ops, so there are no op timings"
    records = reader.parsed("hwts", "there are no op timings", hwts.decode_hwts, _empty(hwts.HWTS_COLUMNS))
    tasks = reader.parsed("task_desc", no_ops, framework_desc.parse_task_desc, _empty(framework_desc.TASK_DESC_COLUMNS))
    graph = reader.parsed(
        "graph_desc",
        "op types and tensor shapes are unknown",
        lambda j: framework_desc.parse_graph_desc(j, backend),
        _empty(framework_desc.GRAPH_DESC_COLUMNS),
    )
    points = reader.parsed("point", "", framework_desc.parse_points, {})
    trace = reader.parsed(
        "training_trace",
        "there are no steps",
        training_trace.decode_training_trace,
        _empty(training_trace.TRACE_DTYPE.names),
    )

    names = framework_desc.op_names(tasks)
    executions = hwts.executions(records, *framework_desc.task_key_map(tasks, names))
    hwts_files = ", ".join(Path(p).name for p in reader.sources["hwts"].get("files", []))
    executions, pair_problems = hwts.checked_executions(executions, hwts_files)
    reader.problems.extend(pair_problems)
    skip_first = any(n.startswith(DATASET_INIT_PREFIX) for n in names)
    trace_files = ", ".join(Path(p).name for p in reader.sources["training_trace"].get("files", []))
    steps, reduces, step_problems = training_trace.assemble_steps(trace, skip_first, trace_files)
    steps, reduces, order_problems = training_trace.checked_steps(steps, reduces, trace_files)
    reader.problems.extend(step_problems + order_problems)
    if executions.empty and steps.empty:
        reasons = "; ".join(reader.problems[-3:]) or "no task of the HWTS log matches task_desc"
        raise ProfviewError(f"Ascend job {job_dir} (device {device}) yields neither op timings nor steps: {reasons}.")
    for problem in reader.problems:
        warnings.warn(problem, UserWarning, stacklevel=2)
    return AscendJob(
        job_dir=job_dir,
        device_id=device,
        backend=backend,
        hwts=records,
        tasks=tasks,
        graph=graph,
        points=points,
        trace=trace,
        op_names=names,
        executions=executions,
        steps=steps,
        reduces=reduces,
        host_clock=_read_host_clock(find_host_start(job_dir, device)),
        sources=reader.sources,
        warnings=reader.problems,
    )


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})


CLOCK_NOTE = (
    "Times come from the device's 100 MHz syscnt counter. host_start.log gives the host's "
    "realtime/monotonic clocks at start-up but no device counter reading, so device times cannot "
    "be placed on the Unix clock: origin_unix_ns is 0."
)


def _job_ops(job: AscendJob, device: str) -> pd.DataFrame:
    """The job's op executions in our op columns, on the absolute device clock (ns)."""
    described = job.graph.drop_duplicates("full_name", keep="last").set_index("full_name")
    names = pd.Series(job.op_names, dtype=object).iloc[job.executions["op"].to_numpy()].reset_index(drop=True)
    op_type = lookup(names, described["op_type"], op_type_from_name)
    shapes = lookup(names, described["op_info"].map(input_shapes), "")
    return pd.DataFrame(
        {
            "device": device,
            "stream": job.executions["stream_id"].astype(str).to_numpy(dtype=object),
            "name": names.to_numpy(dtype=object),
            "op_type": op_type.to_numpy(dtype=object),
            "start_ns": job.executions["start"].to_numpy() * SYSCNT_TICK_NS,
            "dur_ns": job.executions["dur"].to_numpy() * SYSCNT_TICK_NS,
            "shapes": shapes.to_numpy(dtype=object),
            "source": "ascend",
        }
    )


def ticks_to_ns(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Tick columns renamed and converted to ns (`columns` maps tick name -> ns name); -1 stays -1."""
    return pd.DataFrame(
        {
            new: np.where(frame[old].to_numpy() >= 0, frame[old].to_numpy() * SYSCNT_TICK_NS, -1)
            for old, new in columns.items()
        }
    )


def to_run(job: AscendJob) -> Run:
    """The job as a profview Run (ops on `npu:<dev>`, 0-based steps, all-reduce phase spans).

    The origin is the job's earliest device timestamp; step k of the run is the device's step
    k + 1; each all-reduce stream gets its own span lane (see docs/ascend.md).
    """
    device = f"npu:{job.device_id}"
    steps = ticks_to_ns(job.steps, {"start": "start_ns", "end": "end_ns", "fp": "fp_start_ns", "bp": "bp_end_ns"})
    steps.insert(0, "step", job.steps["step_num"].to_numpy() - 1)
    reduces = ticks_to_ns(job.reduces, {"stream_id": "stream_id", "start": "start_ns", "end": "end_ns"})
    reduces["stream_id"] = job.reduces["stream_id"].to_numpy()
    info: RunInfo = {
        "data_origin": DATA_ORIGIN,
        "rank": job.device_id,
        "device_id": job.device_id,
        "clock": {
            "clock": "ascend_syscnt",
            "tick_ns": SYSCNT_TICK_NS,
            "note": CLOCK_NOTE,
            "host_start": dict(job.host_clock),
        },
        "sources": job.sources,
        "ascend": {
            "job_dir": str(job.job_dir),
            "backend": job.backend,
            "hwts_records": len(job.hwts),
            "op_executions": len(job.executions),
            "task_records": int((job.hwts["log_type"] <= hwts.TASK_END).sum()),
            "fp_start_op": job.points.get(1, ""),
            "bp_end_op": job.points.get(2, ""),
        },
        "warnings": list(job.warnings),
    }
    return device_run(info, _job_ops(job, device), steps, reduce_spans(device, reduces), clock_unix_ns=None)


#: The format, for profiler.importers.registry: every device of the job, one rank each (rank = device id).
IMPORTER = Importer(
    data_origin=DATA_ORIGIN,
    title="Ascend profiling JOB directory",
    detect=ascend_confidence,
    read=lambda path: [to_run(job) for job in read_ascend_jobs(path)],
    framework="mindspore",
    exact_steps="a capture with a training trace (the device's iteration ends) gives exact boundaries",
)

"""Run every analysis on a Run: the tables the exporters write and the viewer shows."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

import numpy as np
import pandas as pd

from profiler import spill
from profiler.analysis.advisor import advise, framework_of, resolve_thresholds
from profiler.analysis.call_stacks import op_stack_table
from profiler.analysis.comm_ops import comm_op_table, comm_pieces
from profiler.analysis.device_time import device_time
from profiler.analysis.findings.base import Context, StepWindow
from profiler.analysis.findings.device import DeviceTimeline
from profiler.analysis.float64 import float64_charged, float64_module_charged
from profiler.analysis.gpu_summary import gpu_summary
from profiler.analysis.kernels import kernel_table
from profiler.analysis.launches import Launches, device_times, launches
from profiler.analysis.memory import allocating_ops, memory_curve, memory_events, op_memory, peak_memory
from profiler.analysis.modules import module_table
from profiler.analysis.ops import op_detail_table, op_shape_table, op_type_table
from profiler.analysis.queues import queue_summary
from profiler.analysis.step_activity import comm_split, device_aware_steps, step_activity
from profiler.analysis.step_trace import data_wait_intervals, step_trace
from profiler.analysis.steps import MARKED, analysed_steps, step_source
from profiler.kernels.grouping import is_in
from profiler.memory import give_back_freed_memory
from profiler.model import FLOAT64_MODULE_SPAN, Run


@dataclass
class Analysis:
    """The analysed tables of one rank."""

    run: Run
    step_trace: pd.DataFrame
    op_type: pd.DataFrame
    op_detail: pd.DataFrame
    extra_json: dict[str, Any] = field(default_factory=dict)  # file stem -> JSON document (queue summary, report)
    devices: pd.DataFrame = field(default_factory=pd.DataFrame)  # device_time() and gpu_summary(): one row per device
    op_shapes: pd.DataFrame = field(default_factory=pd.DataFrame)  # op_shape_table(): per op and input shapes
    op_stacks: pd.DataFrame = field(default_factory=pd.DataFrame)  # op_stack_table(): per op and call stack
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)  # kernel_table(): per device, kernel and launching op
    step_activity: pd.DataFrame = field(default_factory=pd.DataFrame)  # step_activity(): the plugin's step breakdown
    modules: pd.DataFrame = field(default_factory=pd.DataFrame)  # module_table(): per nn.Module call path
    memory_events: pd.DataFrame = field(default_factory=pd.DataFrame)  # memory_events(): each block's life
    op_memory: pd.DataFrame = field(default_factory=pd.DataFrame)  # op_memory(): per device and op, its allocations
    comm_split: pd.DataFrame = field(default_factory=pd.DataFrame)  # comm_split(): the plugin's distributed overview
    comm_ops: pd.DataFrame = field(default_factory=pd.DataFrame)  # comm_op_table(): per collective
    comm_pieces: pd.DataFrame = field(default_factory=pd.DataFrame)  # comm_pieces(): every call's executions
    launched: Optional[Launches] = None  # launches(): which op launched each device execution


def step_windows_ns(trace: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Every step of a step trace as [start, end) in ns on the ops' clock."""
    start = np.round(trace["start_ms"].to_numpy(float) * 1e6).astype(np.int64)
    return start, start + np.round(trace["total_ms"].to_numpy(float) * 1e6).astype(np.int64)


def step_lane(run: Run) -> str:
    """Name of the thread that called step(), which the ops table uses as its stream."""
    tid = int(run.info.get("step_tid", -1))
    names = run.threads.loc[run.threads["tid"] == tid, "name"]
    return str(names.iloc[0]) if len(names) else ""


def analyse_run(run: Run, thresholds: Optional[Mapping[str, Any]] = None) -> Analysis:
    """The step trace, op tables, queue summary and advisor report of a run (pure: the run in, tables out).

    `thresholds` override the advisor's, on top of the run's own (config.advisor_thresholds).
    """
    step_tid = int(run.info.get("step_tid", -1))
    origin_unix_ns = int(run.info.get("clock", {}).get("origin_unix_ns", 0))
    trace = _released(
        step_trace(
            run.steps,
            run.spans,
            run.instants,
            run.ops,
            run.queues,
            step_tid=step_tid,
            step_lane=step_lane(run),
            origin_unix_ns=origin_unix_ns,
            step_source=step_source(run.info)[0],
        )
    )
    launched = _released(launches(run.ops))
    marked = run.steps if step_source(run.info)[0] == MARKED else run.steps.iloc[:0]
    plugin_steps = _released(device_aware_steps(run.ops, marked, launched))  # the plugin's steps: annotated ones only
    devices = _released(
        device_time(run.ops, data_wait_intervals(run.spans, run.queues, step_tid), step_windows_ns(trace))
    )
    analysis = Analysis(
        run=run,
        step_trace=trace,
        **_released(op_tables(run.ops, launched)),
        devices=devices.merge(_released(gpu_summary(run.ops, launched, plugin_steps)), on="device", how="left")
        if len(devices)
        else devices,
        kernels=_released(kernel_table(run.ops, launched)),
        step_activity=_released(step_activity(run.ops, run.spans, plugin_steps))
        if _has_torch_ops(run)
        else pd.DataFrame(),
        modules=_released(module_table(run.ops, launched)),
        comm_split=_released(comm_split(run.ops, run.spans, plugin_steps)) if _has_torch_ops(run) else pd.DataFrame(),
        comm_ops=_released(comm_op_table(run.ops, launched)),
        comm_pieces=_released(comm_pieces(run.ops, launched)),
        launched=launched,
    )
    if len(run.allocations):
        analysis.memory_events, analysis.op_memory = _memory_tables(run)
    if len(run.queues):
        analysis.extra_json["queue_summary"] = queue_summary(
            run.queues, trace, step_tid=step_tid, origin_unix_ns=origin_unix_ns
        )
    analysis.extra_json["report"] = report(analysis, thresholds)
    return analysis


def _memory_tables(run: Run) -> tuple[pd.DataFrame, pd.DataFrame]:
    """memory_events and op_memory, on the allocations' owners and the ops' parents made once for both and dropped
    with them (an int64 per allocation and per op), not held through the report."""
    owner, parent = allocating_ops(run.ops, run.allocations, run.threads)
    events = _released(memory_events(run.ops, run.allocations, owner))
    return events, _released(op_memory(run.ops, run.allocations, owner, parent))


T = TypeVar("T")


def _released(result: T) -> T:
    """An analysis' `result`, once the pages of the spilled arrays it read and the heap it freed are handed back
    (memory.give_back_freed_memory): each analysis then starts from the run's floor, not on top of every op
    column the ones before it touched and the heap their temporaries left."""
    give_back_freed_memory()
    return result


def op_tables(ops: pd.DataFrame, launched: Optional[Launches]) -> dict[str, pd.DataFrame]:
    """The op tables (Analysis' op_type, op_detail, op_shapes, op_stacks), on device times made once for
    them and dropped after them (launches.DeviceTimes: 32 B per op)."""
    times = device_times(ops, launched) if launched is not None else None
    return {
        "op_type": op_type_table(ops, launched, times=times),
        "op_detail": op_detail_table(ops, launched, times=times),
        "op_shapes": op_shape_table(ops, launched, times=times),
        "op_stacks": op_stack_table(ops, launched, times=times),
    }


def _has_torch_ops(run: Run) -> bool:
    """Whether the run holds ops of a PyTorch profiler trace (imported or captured): the runs the
    TensorBoard plugin's views are for. Asked a chunk of ops at a time (a whole-table isin was the biggest
    allocation of a 15 GB trace's import)."""
    source = run.ops["source"]
    return any(bool(is_in(source.iloc[at], ("kineto", "torch")).any()) for at in spill.chunks(len(source)))


def report(a: Analysis, thresholds: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The advisor's report_{rank}.json (after every other extra_json document: it reads the queue summary)."""
    config = a.run.info.get("config") if isinstance(a.run.info.get("config"), dict) else {}
    th = resolve_thresholds(config.get("advisor_thresholds"), thresholds)
    data = RankData(a, th)
    return {
        "devices": device_records(a.devices),
        **advise(data, Context(rank=a.run.rank, framework=framework_of(a.run.info), thresholds=th)),
        "profiler_cost": profiler_cost(a.run.info, data.steps),
    }


MB = float(1 << 20)


def profiler_cost(info: Mapping[str, Any], steps: StepWindow) -> dict[str, Any]:
    """report["profiler_cost"]: what the profiler itself cost, in time (its own time inside the steady
    steps) and in memory per source (profview's recording buffers at their fullest; torch.profiler's
    events held until each window's export, per captured step and at most), MB."""
    memory = info.get("profiler_memory") if isinstance(info.get("profiler_memory"), Mapping) else {}
    recorder = memory.get("recorder") if isinstance(memory.get("recorder"), Mapping) else {}
    torch = memory.get("torch") if isinstance(memory.get("torch"), Mapping) else {}
    mb = {}
    if _count(recorder.get("buffer_peak_bytes")) is not None:
        mb["recorder_buffers_peak"] = round(recorder["buffer_peak_bytes"] / MB, 3)
    per_step = torch.get("held_bytes_per_captured_step")
    if _count(torch.get("held_bytes_max")) is not None and isinstance(per_step, (int, float)):
        mb["torch_per_captured_step"] = round(float(per_step) / MB, 3)
        mb["torch_held_max"] = round(torch["held_bytes_max"] / MB, 3)
    overhead = steps.per_step("profiler_overhead_ms") if len(steps.analysed) else 0.0
    return {
        "overhead_ms_per_step": round(overhead, 6),
        "overhead_pct": round(steps.share(overhead), 4),
        "memory_mb": mb,
    }


def _count(value: Any) -> Optional[int]:
    """A non-negative whole number, else None (a damaged profiler_info)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class RankData:
    """What one rank offers the findings, by name (a finding module's `Needs` fields name what it reads):
    each datum is computed when a question first asks for it, once."""

    def __init__(self, analysis: Analysis, thresholds: Mapping[str, float]):
        self._analysis, self._thresholds = analysis, thresholds

    @functools.cached_property
    def steps(self) -> StepWindow:
        """The analysed steps (warm-up left out) and their steady / captured views."""
        steps, skipped = analysed_steps(self._analysis.step_trace, int(self._thresholds["warmup_steps"]))
        return StepWindow(steps, skipped, self._thresholds["outlier_min_pct"])

    @property
    def op_type(self) -> pd.DataFrame:
        """The op-type table (op_type_{rank}.csv)."""
        return self._analysis.op_type

    @property
    def ops(self) -> pd.DataFrame:
        """The run's op executions (the device timeline when there is a device)."""
        return self._analysis.run.ops

    @functools.cached_property
    def device(self) -> DeviceTimeline:
        """The device timeline: executions, idle gaps by cause, sync calls, the breakdown (report "devices")."""
        run = self._analysis.run
        data_wait = data_wait_intervals(run.spans, run.queues, int(run.info.get("step_tid", -1)))
        return DeviceTimeline(run.ops, self._analysis.devices, data_wait, self._analysis.launched)

    @property
    def queue_summary(self) -> Optional[Mapping[str, Any]]:
        """queue_summary_{rank}.json, None when no queue was probed."""
        return self._analysis.extra_json.get("queue_summary")

    @property
    def counters(self) -> pd.DataFrame:
        """The run's counters (host and device memory, ...)."""
        return self._analysis.run.counters

    @functools.cached_property
    def memory_limits(self) -> dict[str, float]:
        """The memory each counter can grow into ("source|device" -> bytes)."""
        return memory_limits(self._analysis.run.info)

    @functools.cached_property
    def buffering_steps(self) -> frozenset:
        """The steps in which torch.profiler held its events in memory (memory trends leave them out). Found a
        chunk of ops at a time: the torch ops' steps, copied whole, were ~8 B per op of a big trace."""
        ops = self._analysis.run.ops
        source, step = ops["source"], ops["step"]
        per_chunk = [step.iloc[at][(source.iloc[at] == "torch").to_numpy()].unique() for at in spill.chunks(len(ops))]
        return frozenset(pd.unique(np.concatenate(per_chunk)).tolist() if per_chunk else ())

    @functools.cached_property
    def float64_ops(self) -> np.ndarray:
        """Per op of `ops`, whether a float64 detour charges it (one mask for every rule that needs it:
        the precision finding states the cause, the op hotspots leave these ops to it)."""
        run = self._analysis.run
        ops = run.ops
        if ops is None or not len(ops):
            return np.zeros(0 if ops is None else len(ops), dtype=bool)
        by_types = float64_charged(ops) if "dtypes" in ops else np.zeros(len(ops), dtype=bool)
        by_modules = float64_module_charged(ops, run.spans, run.threads)
        return spill.chunked(len(ops), bool, lambda at: by_types[at] | by_modules[at])  # a spill file when big

    @functools.cached_property
    def device_properties(self) -> dict[str, dict[str, Any]]:
        """Each device's properties as the trace gave them (Kineto's deviceProperties, by `cuda:<id>`)."""
        devices = self._analysis.run.info.get("devices")
        out = {}
        for props in devices if isinstance(devices, list) else []:
            if isinstance(props, dict) and isinstance(props.get("id"), int) and not isinstance(props["id"], bool):
                out[f"cuda:{props['id']}"] = props
        return out

    @functools.cached_property
    def device_memory(self) -> pd.DataFrame:
        """Per device whose allocations were recorded (profile_memory=True): its peak allocated and reserved
        memory in the analysed steps (memory.peak_memory) and `total_bytes`, the device's memory as the
        trace's deviceProperties give it (NaN when they do not)."""
        run, steps = self._analysis.run, self.steps.analysed
        if not len(run.allocations) or not len(steps):
            return pd.DataFrame(columns=["device", "peak_allocated_bytes", "peak_reserved_bytes", "total_bytes"])
        start = steps["start_ms"].to_numpy(float)
        peaks = peak_memory(memory_curve(run.allocations), start, start + steps["total_ms"].to_numpy(float))
        totals = {device: props.get("totalGlobalMem") for device, props in self.device_properties.items()}
        peaks["total_bytes"] = [
            float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 else float("nan")
            for t in (totals.get(device) for device in peaks["device"])
        ]
        return peaks

    @functools.cached_property
    def float64_modules(self) -> tuple[str, ...]:
        """The modules attach() found holding float64 parameters (their forward spans' names, shortened)."""
        spans = self._analysis.run.spans
        if spans is None or not len(spans):
            return ()
        names = spans["name"].astype(str)
        mine = names[names.str.startswith(FLOAT64_MODULE_SPAN) & ~names.str.endswith(" backward")]
        return tuple(sorted({n[len(FLOAT64_MODULE_SPAN) :] for n in mine}))

    @functools.cached_property
    def recording(self) -> dict[str, Any]:
        """profiler_info's "recording" section: what was dropped or lost."""
        return recording_losses(self._analysis.run.info)

    @functools.cached_property
    def step_lane(self) -> str:
        """The thread that called step(), as the ops table names it."""
        return step_lane(self._analysis.run)

    @property
    def step_source(self) -> str:
        """How the steps were found: marked | inferred | whole_run."""
        return step_source(self._analysis.run.info)[0]

    @property
    def step_source_note(self) -> str:
        """The sentence saying how the steps were found, when they were not marked."""
        return step_source(self._analysis.run.info)[1]


def device_records(devices: pd.DataFrame) -> list[dict[str, Any]]:
    """report_{rank}.json's "devices": one object per device (formats.columns.DEVICE_TIME_COLUMNS), times to
    the ns (6 decimals of ms, as the CSVs) and shares to 0.0001 point, null where a value does not apply."""
    digits = {c: 6 if c.endswith("_ms") else 4 for c in devices.columns if c.endswith(("_ms", "_pct"))}
    return [
        {
            key: (
                None
                if value is None or (isinstance(value, float) and math.isnan(value))
                else round(float(value), digits[key])
                if key in digits
                else value
            )
            for key, value in row.items()
        }
        for row in devices.to_dict("records")
    ]


def recording_losses(info: Mapping[str, Any]) -> dict[str, Any]:
    """profiler_info's "recording" section (what was dropped or lost), {} when absent or malformed."""
    rec = info.get("recording")
    return dict(rec) if isinstance(rec, Mapping) else {}


def memory_limits(info: Mapping[str, Any]) -> dict[str, float]:
    """The memory each counter can grow into ("source|device" -> bytes), as the samplers reported it."""
    sources = info.get("sources") if isinstance(info.get("sources"), Mapping) else {}
    out = {}
    host = sources.get("host_counters") if isinstance(sources.get("host_counters"), Mapping) else {}
    if isinstance(host.get("memory_limit_bytes"), (int, float)):
        out["host|host"] = float(host["memory_limit_bytes"])
    nvml = sources.get("nvml") if isinstance(sources.get("nvml"), Mapping) else {}
    for device, total in (
        (nvml.get("memory_total_bytes") or {}).items() if isinstance(nvml.get("memory_total_bytes"), Mapping) else ()
    ):
        if isinstance(total, (int, float)):
            out[f"nvml|{device}"] = float(total)
    return out

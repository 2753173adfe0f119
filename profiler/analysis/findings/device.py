"""What the device findings share: a rank's device timeline (`DeviceTimeline`, offered by
`results.RankData.device`) and its figures per steady step, so device findings rank against the
host ones on the same scale (ms per mean steady step, % of it).

The device's idle time is split by cause in `analysis/device_time.py` (sync, data, host, launch,
other); each cause is one question's (device_sync, device_launch, device_data, device_dependency).
A device idle most of its window is never `balanced`: the largest cause of its idle time is
reported as high severity whatever its share of the step (`device_idle_pct`, a verdict threshold).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.device_time import IDLE_CAUSES, device_executions, idle_gaps, sync_calls
from profiler.analysis.findings.base import Context, Finding, StepWindow, pct_text
from profiler.analysis.kernel_families import classify
from profiler.analysis.launches import KERNEL_CATEGORIES, Launches
from profiler.analysis.tensor_cores import tensor_core_kernels
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.intervals import covered_ns
from profiler.spill import spilled

MS = 1e-6
#: bytes in a GB, as the device memory figures are written
GB = float(1 << 30)
#: The idle causes each device question answers for (device_time.IDLE_CAUSES grouped): the host
#: launching too late is one question whether its gaps are short (launch) or long (host).
CAUSE_GROUPS = {"sync": ("sync",), "data": ("data",), "launch": ("host", "launch"), "other": ("other",)}


class DeviceTimeline:
    """One rank's device timeline: executions (with kernel family and precision, and the op that launched
    each when `launched` knows it), idle gaps split by cause (data wait from `data_wait`), the
    synchronising calls, and the breakdown (`devices`)."""

    def __init__(
        self,
        ops: pd.DataFrame,
        devices: pd.DataFrame,
        data_wait: tuple[np.ndarray, np.ndarray],
        launched: Optional[Launches] = None,
    ):
        self._ops, self.devices, self._data_wait, self.launched = ops, devices, data_wait, launched

    @functools.cached_property
    def executions(self) -> pd.DataFrame:
        """Every device execution with its `family` and `precision` (analysis/kernel_families.py), the
        kernel's `blocks_per_sm` and `occupancy_pct` (NaN when the trace does not say), `tensor_cores`
        (a tensor-core kernel, analysis/tensor_cores.py), and its launching op: `launcher` (its name, ""
        when unknown) and `launcher_eligible` (a tensor-core eligible op, analysis/launches.py)."""
        ex = classify(device_executions(self._ops))
        rows = ex["row"].to_numpy()
        # gathered in the column's own type, then widened (the same values): no float64 copy of every op's
        figures = {
            c: spilled(self._ops[c].to_numpy()[rows].astype(np.float64)) for c in ("blocks_per_sm", "occupancy_pct")
        }
        if self.launched is None:
            tensor_cores = tensor_core_kernels(ex["name"]) & ex["category"].isin(KERNEL_CATEGORIES).to_numpy()
            launcher, eligible = np.full(len(ex), -1, dtype=np.int64), np.zeros(len(ex), dtype=bool)
        else:
            tensor_cores, launcher = self.launched.tensor_cores[rows], self.launched.launcher[rows]
            eligible = (launcher >= 0) & self.launched.tc_eligible[np.maximum(launcher, 0)]
        names = launcher_names(self._ops["name"], launcher)
        return ex.assign(**figures, tensor_cores=tensor_cores, launcher=names, launcher_eligible=eligible)

    @functools.cached_property
    def gaps(self) -> pd.DataFrame:
        """Every idle gap of every device (all streams merged), split by cause."""
        return idle_gaps(self._ops, self._data_wait)

    @functools.cached_property
    def sync(self) -> pd.DataFrame:
        """The synchronising calls, their call sites and shadows (device_time.sync_calls)."""
        return sync_calls(self._ops)

    @property
    def explains_idle(self) -> bool:
        """Whether the host's launches were recorded, so idle time has host-side causes (a Kineto
        trace, a live CUDA capture); a device log alone (Ascend) has executions only."""
        return bool(len(self.devices)) and bool((self.gaps["next_launch_ns"] >= 0).any())

    def per_device(self, steps: StepWindow) -> Iterator[tuple[str, pd.DataFrame]]:
        """Each device (by name) with its executions; nothing when no steady step is left to measure in."""
        ex = self.executions
        if not len(steps.steady):
            return
        for device in sorted(ex["device"].astype(str).unique()):
            mine = (ex["device"] == device).to_numpy()
            yield device, ex if mine.all() else ex[mine]  # one device: the table itself (read, never changed)

    def row(self, device: str) -> pd.Series:
        """The device's breakdown (formats.columns.DEVICE_TIME_COLUMNS)."""
        return self.devices.set_index("device").loc[device]


def launcher_names(names: pd.Series, launcher: np.ndarray) -> pd.Categorical:
    """The op name (`names`: the op table's column) of each execution's launching op (`launcher`: its row, -1
    when unknown: ""), as a categorical in sorted order (groups and sorts as the text would), made from the
    distinct names: no text per op."""
    codes, labels = codes_and_labels(names)
    known = launcher >= 0
    picked = np.full(len(launcher), len(labels), dtype=np.int64)  # len(labels): no launcher
    picked[known] = codes[launcher[known]]
    picked[picked < 0] = len(labels) + 1  # an op without a name
    text = np.append(np.asarray(labels, dtype=object), ["", None])
    return pd.Categorical(text[picked]) if len(picked) else pd.Categorical([], categories=[""])


@dataclass(frozen=True)
class DeviceNeeds:
    """What most device questions read: the steps and the device timeline."""

    steps: StepWindow
    device: DeviceTimeline


def steady_windows(steps: StepWindow) -> tuple[np.ndarray, np.ndarray]:
    """The steady steps as [start, end) in ns on the ops' clock."""
    st = steps.steady
    start = np.round(st["start_ms"].to_numpy(float) * 1e6).astype(np.int64)
    return start, start + np.round(st["total_ms"].to_numpy(float) * 1e6).astype(np.int64)


def in_steps_ms(start: np.ndarray, end: np.ndarray, steps: StepWindow) -> float:
    """The union of the intervals [start, end) inside the steady steps, per steady step (ms)."""
    w_start, w_end = steady_windows(steps)
    if not len(w_start):
        return 0.0
    return float(covered_ns(start, end, w_start, w_end).sum()) * MS / len(w_start)


def exposed_ms(ex: pd.DataFrame, part: np.ndarray, cover: np.ndarray, steps: StepWindow) -> float:
    """Per steady step, the time the executions `part` (a mask of `ex`) run while none of `cover` does:
    |U(part) u U(cover)| - |U(cover)| inside the steps (ms)."""
    start, end = ex["start_ns"].to_numpy(np.int64), ex["end_ns"].to_numpy(np.int64)
    either = part | cover
    return max(in_steps_ms(start[either], end[either], steps) - in_steps_ms(start[cover], end[cover], steps), 0.0)


def causes_per_step(timeline: DeviceTimeline, steps: StepWindow) -> pd.DataFrame:
    """Per device, each idle cause's time inside the steady steps per steady step (ms): index device,
    one column per IDLE_CAUSES. A gap partly inside the steps counts its causes pro rata."""
    gaps = timeline.gaps
    w_start, w_end = steady_windows(steps)
    if not len(gaps) or not len(w_start):
        return pd.DataFrame(columns=list(IDLE_CAUSES), dtype=float)
    start, end = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    inside = covered_ns(w_start, w_end, start, end) / np.maximum(end - start, 1)
    per = pd.DataFrame({c: gaps[f"{c}_ns"].to_numpy(float) * inside * MS / len(w_start) for c in IDLE_CAUSES})
    return per.groupby(gaps["device"].to_numpy()).sum()


def idle_findings(
    timeline: DeviceTimeline, steps: StepWindow, ctx: Context, group: str, threshold: str, build
) -> list[Finding]:
    """The findings of one group of idle causes (CAUSE_GROUPS), one per device where it reaches
    `threshold` (% of the mean steady step) or where it is the largest cause of a device idle at
    least `device_idle_pct` of its window (then high severity: a mostly idle device is never
    balanced). `build(device, ms_per_step, row, causes)` makes the finding (`row`: the device's
    breakdown, `causes`: its causes per step)."""
    if not timeline.explains_idle or not len(steps.steady):
        return []
    out = []
    for device, causes in causes_per_step(timeline, steps).iterrows():
        row = timeline.row(device)
        grouped = {name: float(causes[list(members)].sum()) for name, members in CAUSE_GROUPS.items()}
        ms = grouped[group]
        mostly_idle = float(row["idle_pct"]) >= ctx.thresholds["device_idle_pct"]
        largest = ms > 0 and ms >= max(grouped.values())
        if ms <= 0 or (steps.share(ms) < ctx.thresholds[threshold] and not (mostly_idle and largest)):
            continue
        finding = build(str(device), ms, row, causes)
        if mostly_idle and largest:
            finding.severity = "high"
        out.append(finding)
    return out


def idle_evidence(device: str, row: pd.Series, causes: Optional[pd.Series], steps: StepWindow, ctx: Context) -> str:
    """The device's figures every idle finding starts its evidence with."""
    text = (
        f"{device} idle {row['idle_pct']:.1f} % of its {row['window_ms']:.1f} ms window "
        f"(busy {row['busy_pct']:.1f} %: compute {row['compute_pct']:.1f} %, communication "
        f"{row['comm_pct']:.1f} %, memory {row['memory_pct']:.1f} %)"
    )
    if causes is not None:
        split = ", ".join(f"{c} {float(causes[c]):.2f} ms" for c in IDLE_CAUSES)
        text += f"; idle per step by cause: {split} ({steps.note})"
    return text + f" [{ctx.file('report', 'json')}: devices]"


def share_title(share: float) -> str:
    """ "12.3 % of the step", as device finding titles write it."""
    return f"{pct_text(share)} of the step"


def memory_room(device_memory: pd.DataFrame, device: str) -> str:
    """ " (the largest step allocates 3.1 of the device's 16.0 GB)": the room a larger batch has, as advice
    says it; "" when the device's allocations were not recorded."""
    mine = device_memory[device_memory["device"] == device] if len(device_memory) else device_memory
    if not len(mine):
        return ""
    row = mine.iloc[0]
    peak, total = float(row["peak_allocated_bytes"]), float(row["total_bytes"])
    if math.isnan(total):
        return f" (the largest step allocates {peak / GB:.1f} GB of device memory)"
    return f" (the largest step allocates {peak / GB:.1f} of the device's {total / GB:.1f} GB)"

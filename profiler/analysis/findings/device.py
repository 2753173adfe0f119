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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from profiler.analysis.device_time import IDLE_CAUSES, device_executions, gathered_column, idle_gap_pieces, sync_calls
from profiler.analysis.findings.base import Context, Finding, StepWindow, pct_text
from profiler.analysis.kernel_families import classify
from profiler.analysis.launches import KERNEL_CATEGORIES, Launches
from profiler.analysis.tensor_cores import tensor_core_kernels
from profiler.kernels import selection
from profiler.kernels.grouping import codes_and_labels
from profiler.kernels.intervals import SettledUnion, covered_ns, start_ordered
from profiler.spill import chunked, chunks, concatenated, gathered

MS = 1e-6
#: bytes in a GB, as the device memory figures are written
GB = float(1 << 30)
#: The idle causes each device question answers for (device_time.IDLE_CAUSES grouped): the host
#: launching too late is one question whether its gaps are short (launch) or long (host).
CAUSE_GROUPS = {"sync": ("sync",), "data": ("data",), "launch": ("host", "launch"), "other": ("other",)}


#: Executions and idle gaps read at a time by the device findings' passes (their temporaries: a few arrays of a
#: chunk's size, not of the run).
ROWS = 1 << 16


class DeviceTimeline:
    """One rank's device timeline: executions (with kernel family and precision, and the op that launched
    each when `launched` knows it), idle gaps split by cause (data wait from `data_wait`), the
    synchronising calls, and the breakdown (`devices`). Its tables hold codes and numbers only, in spill files
    when spilling, and the findings read them a device and a chunk of rows at a time (`positions`)."""

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
        when unknown) and `launcher_eligible` (a tensor-core eligible op, analysis/launches.py); each gathered
        a chunk of executions at a time."""
        ex = classify(device_executions(self._ops))
        rows = ex["row"].to_numpy()
        # gathered in the column's own type, widened as they are written (the same values)
        figures = {c: gathered(self._ops[c].to_numpy(), rows, np.float64) for c in ("blocks_per_sm", "occupancy_pct")}
        if self.launched is None:
            tensor_cores = tensor_core_kernels(ex["name"]) & ex["category"].isin(KERNEL_CATEGORIES).to_numpy()
            launcher, eligible = np.full(len(ex), -1, dtype=np.int64), np.zeros(len(ex), dtype=bool)
        else:
            launched = self.launched
            tensor_cores, launcher = gathered(launched.tensor_cores, rows), gathered(launched.launcher, rows)
            eligible = chunked(len(ex), bool, lambda at: _eligible(launcher[at], launched.tc_eligible))
        names = launcher_names(self._ops["name"], launcher)
        added = {**figures, "tensor_cores": tensor_cores, "launcher": names, "launcher_eligible": eligible}
        return pd.DataFrame({**{c: ex[c] for c in ex.columns}, **added}, copy=False)  # assign copies each array

    @functools.cached_property
    def gaps(self) -> dict[str, pd.DataFrame]:
        """Each device's idle gaps (all streams merged) split by cause: device_time.idle_gaps' columns but device
        and stream, in its order, gathered a piece at a time into spill files (a big run has millions)."""
        spools: dict[str, dict[str, Spool]] = {}
        for device, piece in idle_gap_pieces(self._ops, self._data_wait):
            mine = spools.setdefault(device, {c: Spool() for c in piece})
            for column, values in piece.items():
                mine[column].add(values)
        return {
            device: pd.DataFrame({c: spool.array() for c, spool in mine.items()}, copy=False)
            for device, mine in sorted(spools.items())
        }

    @functools.cached_property
    def sync(self) -> pd.DataFrame:
        """The synchronising calls, their call sites and shadows (device_time.sync_calls)."""
        return sync_calls(self._ops)

    @functools.cached_property
    def explains_idle(self) -> bool:
        """Whether the host's launches were recorded, so idle time has host-side causes (a Kineto
        trace, a live CUDA capture); a device log alone (Ascend) has executions only."""
        return bool(len(self.devices)) and any(
            bool((launch[at] >= 0).any())
            for launch in (g["next_launch_ns"].to_numpy() for g in self.gaps.values())
            for at in chunks(len(launch), ROWS)
        )

    def device_codes(self, steps: StepWindow) -> list[tuple[str, int]]:
        """Each device (name, its code in the executions), by name; none when no steady step is left to measure in."""
        ex = self.executions
        if not len(steps.steady) or not len(ex):
            return []
        device = ex["device"].array
        present = np.zeros(len(device.categories), dtype=bool)
        for at in chunks(len(ex), ROWS):
            codes = device.codes[at]
            present[codes[codes >= 0]] = True
        return sorted((str(device.categories[code]), int(code)) for code in np.flatnonzero(present))

    def per_device(self, steps: StepWindow) -> Iterator[tuple[str, pd.DataFrame]]:
        """Each device (by name) with its executions; nothing when no steady step is left to measure in."""
        ex = self.executions
        for device, code in self.device_codes(steps):
            mine = ex["device"].array.codes == code
            yield device, ex if mine.all() else ex[mine]  # one device: the table itself (read, never changed)

    def positions(self, code: int, start_order: bool) -> Iterator[tuple[np.ndarray, int]]:
        """The positions of one device's executions (`code`: device_codes'), ROWS executions of the table at a
        time: in start order (for unions), else in the table's order (for figures summed in that order); with
        each, the last start of its chunk, before which no later chunk's execution starts in start order."""
        ex = self.executions
        start, device = ex["start_ns"].to_numpy(), ex["device"].array.codes
        chunked_rows = (
            start_ordered(start, ROWS)
            if start_order
            else (np.arange(at.start, at.stop) for at in chunks(len(ex), ROWS))
        )
        for at in chunked_rows:
            mine = at[device[at] == code]
            if len(mine):
                yield mine, int(start[at[-1]])

    def selected(self, code: int, where: Callable[[pd.DataFrame], np.ndarray], columns: list[str]) -> pd.DataFrame:
        """The executions of one device (`code`: device_codes') for which `where` (a mask of a chunk of the table)
        holds, in the table's order, with `columns`: gathered a chunk at a time into spill files."""
        ex, rows = self.executions, Spool()
        for at, _ in self.positions(code, start_order=False):
            rows.add(at[where(ex.take(at))])
        at = rows.array()
        return pd.DataFrame({c: gathered_column(ex[c], at) for c in columns}, copy=False)

    def row(self, device: str) -> pd.Series:
        """The device's breakdown (formats.columns.DEVICE_TIME_COLUMNS)."""
        return self.devices.set_index("device").loc[device]


def _eligible(launcher: np.ndarray, tc_eligible: np.ndarray) -> np.ndarray:
    """Whether each execution's launching op (its row, -1 when unknown) is tensor-core eligible."""
    return (launcher >= 0) & tc_eligible[np.maximum(launcher, 0)]


def launcher_names(names: pd.Series, launcher: np.ndarray) -> pd.Categorical:
    """The op name (`names`: the op table's column) of each execution's launching op (`launcher`: its row, -1
    when unknown: ""), as a categorical in sorted order (groups and sorts as the text would), made from the
    distinct names a chunk of executions at a time: no text per execution."""
    codes, labels = codes_and_labels(names)
    text = np.append(np.asarray(labels, dtype=object), ["", None])

    def picked(at: slice) -> np.ndarray:
        """Each execution's entry of `text`: its launcher's name, "" without a launcher, None for an op without one."""
        rows = launcher[at]
        out = np.full(len(rows), len(labels), dtype=np.int64)  # len(labels): no launcher
        known = rows >= 0
        out[known] = codes[rows[known]]
        out[out < 0] = len(labels) + 1  # an op without a name
        return out

    if not len(launcher):
        return pd.Categorical([], categories=[""])
    present = np.zeros(len(text), dtype=bool)
    for at in chunks(len(launcher), ROWS):
        present[picked(at)] = True
    categories = sorted({text[k] for k in np.flatnonzero(present) if text[k] is not None})
    position = {name: i for i, name in enumerate(categories)}
    lookup = np.array([-1 if t is None else position.get(t, -1) for t in text], dtype=np.int64)
    dtype = next(t for t in (np.int8, np.int16, np.int32, np.int64) if len(categories) < np.iinfo(t).max)
    return pd.Categorical.from_codes(
        chunked(len(launcher), dtype, lambda at: lookup[picked(at)], ROWS),
        categories=pd.Index(categories, dtype=object),
    )


def text_codes(column: pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """(the column's distinct texts in sorted order, each row's position among them): a key that groups and sorts
    as the column's text would (`astype(str)`: a missing value is "nan"), made a chunk of rows at a time."""
    texts = np.append(np.asarray(column.categories.astype(str), dtype=object), "nan")  # -1 (missing): the last
    names, rank = np.unique(texts.astype(str), return_inverse=True)
    return names.astype(object), chunked(len(column), np.int64, lambda at: rank[column.codes[at]], ROWS)


class Spool:
    """A column given a piece at a time, kept in spill files a batch of pieces at a time: no list of the whole
    run's pieces in memory."""

    #: rows of pieces joined into one spilled batch
    BATCH = 1 << 18

    def __init__(self) -> None:
        self._batches: list[np.ndarray] = []
        self._pieces: list[np.ndarray] = []
        self._rows = 0

    def add(self, piece: np.ndarray) -> None:
        self._pieces.append(piece)
        self._rows += len(piece)
        if self._rows >= self.BATCH:
            self._flush()

    def array(self, dtype=np.int64) -> np.ndarray:
        """Every value added, in order (`dtype` when none was)."""
        self._flush()
        if len(self._batches) == 1:
            return self._batches[0]
        return concatenated(self._batches) if self._batches else np.empty(0, dtype=dtype)

    def _flush(self) -> None:
        if self._pieces:
            self._batches.append(concatenated(self._pieces))
            self._pieces, self._rows = [], 0


def median(values: np.ndarray) -> Optional[float]:
    """np.median of integer `values` (None when empty), counted a chunk at a time (kernels/selection.py): no copy in
    memory, and a spilled array's pages handed back as they are read."""
    return selection.median(values) if len(values) else None


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


class InSteps:
    """The union of intervals given a piece at a time in start order, its time inside each steady step summed over
    them (as covered_ns per step), counted a settled piece of the union at a time (intervals.SettledUnion):
    integer sums, so the whole union's figure."""

    def __init__(self, steps: StepWindow) -> None:
        self.windows, self.steps = steady_windows(steps), len(steps.steady)
        self._union, self._ns = SettledUnion(), 0

    def add(self, start: np.ndarray, end: np.ndarray, later: Optional[int]) -> None:
        """The next intervals; `later`: no interval added after them starts before it (None: no more)."""
        if self.steps:
            self._ns += int(covered_ns(*self._union.add(start, end, later), *self.windows).sum())

    def ms(self) -> float:
        """The union's time inside the steps per steady step (ms), once every interval is added."""
        if not self.steps:
            return 0.0
        self.add(_NONE, _NONE, None)
        return float(self._ns) * MS / self.steps


_NONE = np.empty(0, dtype=np.int64)


def in_steps_ms(start: np.ndarray, end: np.ndarray, steps: StepWindow) -> float:
    """The union of the intervals [start, end) inside the steady steps, per steady step (ms)."""
    inside = InSteps(steps)
    for at in start_ordered(start, ROWS) if inside.steps else ():
        inside.add(start[at], end[at], int(start[at[-1]]))
    return inside.ms()


def exposed_ms(ex: pd.DataFrame, part: np.ndarray, cover: np.ndarray, steps: StepWindow) -> float:
    """Per steady step, the time the executions `part` (a mask of `ex`) run while none of `cover` does:
    |U(part) u U(cover)| - |U(cover)| inside the steps (ms), the unions taken a chunk of executions at a time."""
    start, end = ex["start_ns"].to_numpy(np.int64), ex["end_ns"].to_numpy(np.int64)
    either, covered = InSteps(steps), InSteps(steps)
    for at in start_ordered(start, ROWS) if either.steps else ():
        s, e, later = start[at], end[at], int(start[at[-1]])
        mine, other = part[at] | cover[at], cover[at]
        either.add(s[mine], e[mine], later)
        covered.add(s[other], e[other], later)
    return max(either.ms() - covered.ms(), 0.0)


def causes_per_step(timeline: DeviceTimeline, steps: StepWindow) -> pd.DataFrame:
    """Per device, each idle cause's time inside the steady steps per steady step (ms): index device,
    one column per IDLE_CAUSES. A gap partly inside the steps counts its causes pro rata."""
    windows = steady_windows(steps)
    per = {device: _causes(gaps, windows) for device, gaps in timeline.gaps.items() if len(gaps) and len(windows[0])}
    if not per:
        return pd.DataFrame(columns=list(IDLE_CAUSES), dtype=float)
    return pd.DataFrame.from_dict(per, orient="index", columns=list(IDLE_CAUSES))


def _causes(gaps: pd.DataFrame, windows: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """One device's causes_per_step: each gap's figure made a chunk of gaps at a time into a spill file, summed
    as pandas sums a group (one group: its gaps in order)."""
    start, end = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    steps = len(windows[0])

    def inside(at: slice) -> np.ndarray:
        return covered_ns(*windows, start[at], end[at]) / np.maximum(end[at] - start[at], 1)

    share = chunked(len(gaps), np.float64, inside, ROWS)
    group = np.zeros(len(gaps), dtype=np.int8)
    out = {}
    for cause in IDLE_CAUSES:
        ns = gaps[f"{cause}_ns"].to_numpy()
        per_gap = chunked(len(gaps), np.float64, lambda at: ns[at].astype(np.float64) * share[at] * MS / steps, ROWS)  # noqa: B023 (used at once)
        out[cause] = float(pd.Series(per_gap, copy=False).groupby(group).sum().iloc[0])
    return out


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

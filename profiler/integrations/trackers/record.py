"""What profview logs into an experiment tracker, and where it comes from.

A `TrackerRecord` holds, for one rank: the per-step phases (the step trace's columns, plus the
device busy time when the run has device ops), the verdict and headline of the report, its top
findings, and a few run-level figures. `read_record(directory, rank)` reads it from the output
files (step_trace_{rank}.csv, report_{rank}.json, events_{rank}.arrow); `step_rows` makes the
per-step part from any step trace (the live option passes a window's).
Every tracker key is `PREFIX` + a name defined here, so the sinks and the docs agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.errors import InputError
from profiler.export.event_file import read_event_file
from profiler.formats.columns import NOT_OP_EVENT_KINDS, STEP_START, STEP_TOTAL
from profiler.formats.documents import read_document
from profiler.formats.names import rank_file
from profiler.formats.tables import read_csv
from profiler.kernels.intervals import covered_ns

#: Every key profview logs starts with this (TensorBoard tags, MLflow metric and tag keys).
PREFIX = "profview/"
#: Per-step scalars: step-trace columns, in the order they are logged.
STEP_METRICS = ("iteration_gap_ms", "data_wait_ms", "fp_bp_ms", "tail_ms", STEP_TOTAL[0])
#: Per-step union of device op time (ops on a device other than the host CPU), when the run has any.
DEVICE_BUSY = "device_busy_ms"
#: How many of the report's findings are logged.
TOP_FINDINGS = 3
#: Event-file categories that are not ops (the rest, on device lanes, is device work).


@dataclass
class TrackerRecord:
    """One rank's step breakdown, verdict and top findings, as trackers receive them."""

    rank: int
    steps: pd.DataFrame  # "step" + STEP_METRICS (+ DEVICE_BUSY) columns, in ms
    verdict: str = ""
    headline: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list)  # report_{rank}.json entries, best first
    summary: dict[str, float] = field(default_factory=dict)  # run-level figures (name -> value)

    @property
    def metrics(self) -> list[str]:
        """The per-step metric names this record has (STEP_METRICS, then DEVICE_BUSY when present)."""
        return [c for c in self.steps.columns if c != "step"]


def step_rows(step_trace: pd.DataFrame, device_busy: Optional[np.ndarray] = None) -> pd.DataFrame:
    """The per-step scalars of a step trace (and the device busy ms per step, when given)."""
    rows = pd.DataFrame({"step": step_trace["step"].to_numpy(dtype=np.int64)})
    for column in STEP_METRICS:
        rows[column] = step_trace[column].to_numpy(dtype=np.float64)
    if device_busy is not None:
        rows[DEVICE_BUSY] = np.asarray(device_busy, dtype=np.float64)
    return rows


def device_busy_ms(starts_ns: np.ndarray, ends_ns: np.ndarray, step_trace: pd.DataFrame) -> np.ndarray:
    """Per step of `step_trace`, the ms covered by at least one of the device intervals."""
    start = np.rint(step_trace[STEP_START].to_numpy(dtype=np.float64) * 1e6).astype(np.int64)
    end = start + np.rint(step_trace[STEP_TOTAL[0]].to_numpy(dtype=np.float64) * 1e6).astype(np.int64)
    return covered_ns(starts_ns, ends_ns, start, end) / 1e6


def summary_of(report: dict[str, Any], findings: list[dict[str, Any]]) -> dict[str, float]:
    """Run-level figures: mean and median step, analysed steps, and each top finding's share at stake."""
    steps = report.get("steps") if isinstance(report.get("steps"), dict) else {}
    out = {
        name: float(steps[key])
        for name, key in (
            ("mean_steady_step_ms", "mean_ms"),
            ("median_step_ms", "median_ms"),
            ("analysed_steps", "analysed"),
        )
        if isinstance(steps.get(key), (int, float))
    }
    for i, finding in enumerate(findings, start=1):
        if isinstance(finding.get("at_stake_pct"), (int, float)):
            out[f"finding_{i}_at_stake_pct"] = float(finding["at_stake_pct"])
    return out


def finding_text(finding: dict[str, Any]) -> str:
    """One finding in one line: `kind: title (x % of the step at stake). suggestion`."""
    stake = finding.get("at_stake_pct")
    share = f" ({stake:g} % of the step at stake)" if isinstance(stake, (int, float)) else ""
    suggestion = f". {finding['suggestion']}" if finding.get("suggestion") else ""
    return f"{finding.get('kind', '?')}: {finding.get('title', '')}{share}{suggestion}"


def record_of(rank: int, steps: pd.DataFrame, report: dict[str, Any], top: int = TOP_FINDINGS) -> TrackerRecord:
    """A record from per-step rows and a report document."""
    findings = (
        [f for f in report.get("findings", []) if isinstance(f, dict)][:top]
        if isinstance(report.get("findings"), list)
        else []
    )
    return TrackerRecord(
        rank=rank,
        steps=steps,
        verdict=str(report.get("verdict", "")),
        headline=str(report.get("headline", "")),
        findings=findings,
        summary=summary_of(report, findings),
    )


def read_record(directory: Path, rank: int, top: int = TOP_FINDINGS) -> TrackerRecord:
    """The record of `rank` from an analysed output directory (InputError when it is not one)."""
    directory = Path(directory)
    trace_path = directory / rank_file("step_trace", rank)
    if not trace_path.is_file():
        raise InputError(f"{directory} has no {trace_path.name}: analyse the run first (profview analyse {directory})")
    trace = read_csv(trace_path, "step_trace")
    report = read_document(directory / rank_file("report", rank), "report")
    events = directory / rank_file("events", rank)
    busy = _event_file_device_busy(events, trace) if events.is_file() else None
    return record_of(rank, step_rows(trace, busy), report, top)


def _event_file_device_busy(path: Path, step_trace: pd.DataFrame) -> Optional[np.ndarray]:
    """device_busy_ms from the ops on the device lanes of an events_{rank}.arrow; None without any."""
    events = read_event_file(path)
    not_ops = [i for i, name in enumerate(events.categories) if name in NOT_OP_EVENT_KINDS]
    starts, ends = [], []
    for lane, info in enumerate(events.lanes):
        if info.get("kind") != "device":
            continue
        first, count, _ = events.lane_rows(lane)
        start = events.column("start_ns", first, first + count)
        keep = ~np.isin(events.column("category", first, first + count), not_ops)
        starts.append(start[keep])
        ends.append(start[keep] + events.column("dur_ns", first, first + count)[keep])
    if not starts or not sum(len(s) for s in starts):
        return None
    return device_busy_ms(np.concatenate(starts), np.concatenate(ends), step_trace)

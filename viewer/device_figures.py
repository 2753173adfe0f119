"""Device time as the viewer shows it (`--summary`, Overview, Cluster): report_{rank}.json's
"devices" records read as they are (profiler/analysis/device_time.py computed them; nothing here
recomputes a figure), with the idle cause that took the most time named in words."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import plotly.graph_objects as go

from viewer.formatting import fmt_ms, fmt_pct
from viewer.html import table
from viewer.stats import number
from viewer.theme import styled

#: The GPU summary of a device record (analysis/gpu_summary.py), by the TensorBoard plugin's names.
GPU_SUMMARY_LABELS = {
    "utilization_pct": "GPU utilization",
    "sm_efficiency_pct": "est. SM efficiency",
    "achieved_occupancy_pct": "est. achieved occupancy",
    "tensor_core_pct": "kernel time using tensor cores",
    "tc_eligible_pct": "kernel time of tensor-core eligible ops",
}
#: The idle causes of a device record (`idle_<cause>_ms`) in words, in the record's order.
IDLE_CAUSE_LABELS = {
    "sync": "host synchronising (sync calls, .item(), pageable copies)",
    "data": "waiting for data",
    "host": "host work (launching too slowly)",
    "launch": "launch latency between short kernels",
    "other": "dependencies (other streams, peers)",
}


@dataclass(frozen=True)
class DeviceFigures:
    """One device's time breakdown over its window (shares in % of the window)."""

    device: str
    window_ms: float
    busy_pct: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    comm_pct: float
    memory_pct: float
    overlap_pct: Optional[float]  # comm / compute overlap, in % of communication time; None without comm
    idle_ms: dict[str, float]  # idle time per cause (IDLE_CAUSE_LABELS' keys)
    busy_ms: float = 0.0
    outside_steps_ms: Optional[float] = None  # busy time outside every step; None in an older report
    # the TensorBoard plugin's GPU summary (GPU_SUMMARY_LABELS' keys), None where the report has no figure
    gpu_summary: dict[str, Optional[float]] = field(default_factory=dict)

    @property
    def has_gpu_summary(self) -> bool:
        return any(value is not None for value in self.gpu_summary.values())

    @property
    def outside_steps_text(self) -> str:
        """ "3.2 ms (1.1 % of busy)", "-" when the report does not say."""
        if self.outside_steps_ms is None:
            return "-"
        share = 100.0 * self.outside_steps_ms / self.busy_ms if self.busy_ms > 0 else 0.0
        return f"{self.outside_steps_ms:.1f} ms ({share:.1f} % of busy)"

    def idle_share_pct(self, cause: str) -> float:
        """The idle time of one cause, in % of the window."""
        return 100.0 * self.idle_ms[cause] / self.window_ms if self.window_ms > 0 else 0.0

    @property
    def leading_cause(self) -> Optional[tuple[str, float, float]]:
        """The idle cause with the most time: (cause, ms, % of the idle time); None when never idle."""
        total = sum(self.idle_ms.values())
        if total <= 0:
            return None
        cause = max(self.idle_ms, key=lambda c: self.idle_ms[c])
        return cause, self.idle_ms[cause], 100.0 * self.idle_ms[cause] / total

    def leading_cause_text(self) -> str:
        """ "waiting for data: 12.3 ms (80.1 % of idle)", or "-" when the device was never idle."""
        lead = self.leading_cause
        if lead is None:
            return "-"
        cause, ms, share = lead
        return f"{IDLE_CAUSE_LABELS[cause]}: {ms:.1f} ms ({share:.1f} % of idle)"


def device_figures(report: Optional[dict[str, Any]]) -> list[DeviceFigures]:
    """The devices of a report, in its order; [] for a CPU-only run, an older report or a malformed one."""
    records = report.get("devices") if isinstance(report, dict) else None
    if not isinstance(records, list):
        return []
    out = []
    for r in records:
        if not isinstance(r, dict) or number(r.get("window_ms")) is None:
            continue
        shares = {
            k: number(r.get(k)) or 0.0
            for k in ("busy_pct", "idle_pct", "compute_pct", "non_compute_pct", "comm_pct", "memory_pct")
        }
        out.append(
            DeviceFigures(
                device=str(r.get("device", "")),
                window_ms=float(r["window_ms"]),
                **shares,
                overlap_pct=number(r.get("comm_compute_overlap_pct")),
                idle_ms={c: number(r.get(f"idle_{c}_ms")) or 0.0 for c in IDLE_CAUSE_LABELS},
                busy_ms=number(r.get("busy_ms")) or 0.0,
                outside_steps_ms=number(r.get("outside_steps_ms")),
                gpu_summary={key: number(r.get(key)) for key in GPU_SUMMARY_LABELS},
            )
        )
    return out


def device_table(devices: list[DeviceFigures], ranks: Optional[list[int]] = None) -> str:
    """The devices' figures as an HTML table (`ranks`: each device's rank, as a first column)."""
    rows = [
        [
            d.device,
            fmt_ms(d.window_ms),
            fmt_pct(d.busy_pct),
            fmt_pct(d.idle_pct),
            fmt_pct(d.compute_pct),
            fmt_pct(d.comm_pct),
            fmt_pct(d.memory_pct),
            fmt_pct(d.overlap_pct, missing="-"),
            d.leading_cause_text(),
        ]
        for d in devices
    ]
    headers = [
        "device",
        "window",
        "busy",
        "idle",
        "compute",
        "communication",
        "memory",
        "comm overlap",
        "leading idle cause",
    ]
    numeric = [False] + [True] * 7 + [False]
    if ranks is not None:
        rows = [[rank] + row for rank, row in zip(ranks, rows)]
        headers, numeric = ["rank"] + headers, [True] + numeric
    return table(headers, rows, numeric)


def gpu_summary_table(devices: list[DeviceFigures]) -> str:
    """The devices' GPU summary (the TensorBoard plugin's overview figures) as an HTML table, "" when no
    device has one."""
    shown = [d for d in devices if d.has_gpu_summary]
    if not shown:
        return ""
    rows = [[d.device, *(fmt_pct(d.gpu_summary[key], missing="-") for key in GPU_SUMMARY_LABELS)] for d in shown]
    return table(["device", *GPU_SUMMARY_LABELS.values()], rows, [False] + [True] * len(GPU_SUMMARY_LABELS))


#: The colours of a device's idle causes in the Overview's bar (IDLE_CAUSE_LABELS' order).
IDLE_COLORS = ("#C0392B", "#E39B3B", "#8E6CB8", "#B5651D", "#C9CED4")


def device_bars(devices: list[DeviceFigures], labels: Optional[list[str]] = None) -> go.Figure:
    """One horizontal bar per device (`labels`: its name on the axis, the device's by default): its
    window split into compute, non-compute and idle by cause (100 %)."""
    parts = [
        ("compute", "#3366A8", [d.compute_pct for d in devices]),
        ("non-compute (comm, memory)", "#6BA368", [d.non_compute_pct for d in devices]),
    ]
    parts += [
        (f"idle: {label}", color, [d.idle_share_pct(cause) for d in devices])
        for (cause, label), color in zip(IDLE_CAUSE_LABELS.items(), IDLE_COLORS)
    ]
    fig = go.Figure()
    for label, color, values in parts:
        fig.add_bar(
            y=labels or [d.device for d in devices],
            x=values,
            name=label,
            orientation="h",
            marker_color=color,
            hovertemplate=f"%{{y}}<br>{label}: %{{x:.1f}} % of the window<extra></extra>",
        )
    return styled(
        fig,
        barmode="stack",
        height=max(200, 120 + 40 * len(devices)),
        xaxis_title="% of the device's window",
        xaxis=dict(range=[0, 100]),
        yaxis=dict(type="category", autorange="reversed"),
    )

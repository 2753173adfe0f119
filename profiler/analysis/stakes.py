"""What a fix can win: the model that turns a cause's time into a finding's stake (docs/formats.md, "What a
fix can win").

A rule measures its cause (the data wait, the float32 matrix kernels, the tail, ...); the finding's stake
is the part of that time the fix it suggests can plausibly win, from what the trace says: a wait hidden
behind compute is won whole, a kernel moved to tensor cores is not (its time shrinks, it does not vanish),
and tensor cores exist only from Volta on. Ranking and severity use the stake, so "37 % of the step in
float32 kernels" on a V100 ranks below "33 % waiting for data". Every finding says its assumption.

`win_for(key)` is the table by finding key; the rules whose win depends on their data (the device
generation, the backward's length, the casts inside a float64 detour) build theirs with the helpers below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Win:
    """The share of a cause's time a fix can win, and why (the finding's evidence says it)."""

    share: float
    why: str


#: By finding key (the longest matching prefix wins): what the suggested fix removes of the cause.
WINS: dict[str, Win] = {
    "input_bound": Win(1.0, "prefetching and more loader workers hide a wait the loader can keep up with"),
    "transmission_bound": Win(1.0, "pinned memory and copies ahead of use hide the transfer"),
    "gap_bound": Win(1.0, "a loader to prefetch or host work to move out of the step: either leaves the gap"),
    "host_bound:gap": Win(1.0, "host work between steps can run asynchronously or less often"),
    "host_bound:launch": Win(0.7, "fusion (torch.compile) or CUDA graphs remove most of the launch overhead"),
    "host_bound:device": Win(0.5, "moving host work off the launch path (or async) gives the device about half of it"),
    "step_outliers": Win(1.0, "periodic work done asynchronously or less often leaves the steps"),
    "tail_bound": Win(0.8, "a fused / foreach optimizer and host work moved out of the step remove most of it"),
    "op_hotspot:cast": Win(1.0, "casts are pure overhead: one dtype end to end removes them"),
    "op_hotspot:norm": Win(0.5, "fusion, channels_last or a lower precision make these ops about twice as fast"),
    "op_hotspot:layout": Win(1.0, "one memory format end to end removes the re-layouts"),
    "op_hotspot": Win(0.0, "where the compute goes, not a fault: no fix is implied"),
    "device_sync": Win(1.0, "without the synchronisation the device no longer waits for the host"),
    "device_idle:dependency": Win(
        0.5, "overlapping the dependency (another stream, an event, a peer) hides part of it"
    ),
    "input_bound:device": Win(1.0, "prefetching and more loader workers hide a wait the loader can keep up with"),
    "memcpy_bound": Win(1.0, "pinned memory and non_blocking copies overlap the copies with compute"),
    "low_occupancy": Win(0.5, "a larger batch or fused kernels fill about half of the idle SM time (assumed)"),
    "compute_bound": Win(0.0, "where the device's compute goes, not a fault: no fix is implied"),
    "profiler_overhead": Win(1.0, "recording less removes the profiler's own time"),
    "straggler_rank": Win(1.0, "the other ranks stop waiting once the straggler is as fast as they are"),
}
#: a key the table does not name keeps its whole time (a plug-in's finding, a cost with no time)
WHOLE = Win(1.0, "the whole time of the cause")

#: float32 -> lower-precision matrix speed-up assumed when moving GEMMs / convolutions to tensor cores:
#: peak rates are 8x or more, measured whole-kernel gains on real models about 2x
TENSOR_CORE_SPEEDUP = 2.0
#: float64 runs at 1/2 of float32's rate on these compute capabilities (GP100, GV100, GA100, GH100), at
#: 1/32 or less on the others
FULL_FP64 = {(6, 0), (7, 0), (8, 0), (9, 0)}
#: float32 on a CPU is about twice float64's rate (twice the SIMD lanes, half the bytes)
CPU_FLOAT32_SPEEDUP = 2.0


#: device idle waiting for launches in short gaps (launch-bound): what CUDA graphs / torch.compile remove
LAUNCH_GAPS = Win(0.8, "CUDA graphs or torch.compile remove most launch gaps")


def win_for(key: str) -> Win:
    """The win of a finding key: the table's entry for its longest matching prefix."""
    parts = key.split(":")
    for n in range(len(parts), 0, -1):
        win = WINS.get(":".join(parts[:n]))
        if win is not None:
            return win
    return WHOLE


def compute_capability(properties: Optional[Mapping[str, Any]]) -> Optional[tuple[int, int]]:
    """(major, minor) of a device's deviceProperties (Kineto), None when the trace does not say."""
    if not isinstance(properties, Mapping):
        return None
    major, minor = properties.get("computeMajor"), properties.get("computeMinor", 0)
    if isinstance(major, bool) or not isinstance(major, int) or major <= 0:
        return None
    return major, minor if isinstance(minor, int) and not isinstance(minor, bool) else 0


def device_label(properties: Optional[Mapping[str, Any]], cc: Optional[tuple[int, int]]) -> str:
    """ "Tesla V100-SXM2-16GB, compute capability 7.0", or "a GPU of unknown generation"."""
    if cc is None:
        return "a device of unknown generation (the trace has no deviceProperties)"
    name = str(properties.get("name", "")) if isinstance(properties, Mapping) else ""
    return f"{name + ', ' if name else ''}compute capability {cc[0]}.{cc[1]}"


def fp32_matrix_win(properties: Optional[Mapping[str, Any]]) -> Win:
    """Moving float32 GEMMs / convolutions to the tensor cores: TF32 or autocast from Ampere on, float16
    autocast on Volta / Turing (no TF32 there), and no tensor cores at all before Volta."""
    cc = compute_capability(properties)
    label = device_label(properties, cc)
    gain = 1.0 - 1.0 / TENSOR_CORE_SPEEDUP
    if cc is None:
        return Win(gain, f"{label}: tensor cores assumed (Volta or newer), about {TENSOR_CORE_SPEEDUP:g}x faster")
    if cc >= (8, 0):
        return Win(gain, f"{label}: TF32 or bfloat16 on its tensor cores, about {TENSOR_CORE_SPEEDUP:g}x faster")
    if cc >= (7, 0):
        return Win(
            gain,
            f"{label}: float16 autocast on its tensor cores (no TF32 before Ampere), about "
            f"{TENSOR_CORE_SPEEDUP:g}x faster",
        )
    return Win(0.25, f"{label}: no tensor cores before Volta; half precision at most doubles some kernels")


def fp64_win(properties: Optional[Mapping[str, Any]]) -> Win:
    """float64 kernels moved to float32: half their time on the GPUs with full-rate float64, nearly all of it
    on the others."""
    cc = compute_capability(properties)
    label = device_label(properties, cc)
    if cc is None or cc in FULL_FP64:
        return Win(0.5, f"{label}: float64 at half of float32's rate (assumed when unknown)")
    return Win(0.9, f"{label}: float64 at 1/32 of float32's rate or less")


def precision_detour_win(cast_ms: float, total_ms: float) -> Win:
    """A host float64 detour: its casts go away, its float64 work runs about twice as fast in float32."""
    if total_ms <= 0:
        return WHOLE
    share = (cast_ms + (total_ms - cast_ms) * (1.0 - 1.0 / CPU_FLOAT32_SPEEDUP)) / total_ms
    return Win(
        share,
        f"the casts ({cast_ms:.2f} ms) go away and the float64 work runs about {CPU_FLOAT32_SPEEDUP:g}x "
        "faster in float32",
    )


def overlap_win(exposed_ms: float, backward_ms: float) -> Win:
    """Exposed communication: overlapping it with the backward pass hides it up to the backward's length."""
    if exposed_ms <= 0:
        return WHOLE
    share = min(1.0, max(backward_ms, 0.0) / exposed_ms)
    return Win(
        share,
        "overlap with the backward pass (DDP buckets, all-reduce fusion) hides it up to forward + backward's "
        f"{backward_ms:.2f} ms",
    )

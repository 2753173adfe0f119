"""profview's device time breakdown against HolisticTraceAnalysis on every GPU trace in tests/data/kineto.

For each trace: HTA 0.5's `get_temporal_breakdown` and `get_comm_comp_overlap` (TraceAnalysis with
include_last_profiler_step=True, ns rounding off), and profview's `device_time` on the whole trace
(what `profview import-kineto` writes into report_{rank}.json) and on the executions HTA keeps
(HTA drops kernels it cannot tie to a traced iteration). Prints a Markdown table (docs/pytorch.md,
"GPU time") and profview's idle time by cause.

    .venv/bin/python benchmarks/device_time_vs_hta.py
"""

from __future__ import annotations

import logging
import math
import os
import sys
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiler.analysis.device_time import IDLE_CAUSES, device_time  # noqa: E402
from profiler.analysis.step_trace import data_wait_intervals  # noqa: E402
from profiler.importers.kineto import read_kineto_trace  # noqa: E402

TRACES = ["alexnet", "diff_control", "diff_test", "nccl_data", "sampled_rank-0", "sampled_rank-1"]


def hta_figures(path: Path, work: Path) -> tuple[dict, set]:
    """HTA's temporal breakdown and overlap of one trace, and the correlation ids of the device
    events it kept."""
    from hta.trace_analysis import TraceAnalysis

    trace_dir = work / path.name.split(".")[0]
    trace_dir.mkdir()
    (trace_dir / path.name).symlink_to(path)
    analysis = TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=True)
    temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    overlap = analysis.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]
    frame = analysis.t.get_trace(analysis.t.get_ranks()[0])
    kept = set(frame.loc[frame["stream"].ne(-1), "correlation"].astype(int))
    return {
        "idle": temporal["idle_time_pctg"],
        "compute": temporal["compute_time_pctg"],
        "non_compute": temporal["non_compute_time_pctg"],
        "overlap": overlap,
        "window_ms": temporal["kernel_time(us)"] / 1000,
    }, kept


def _pct(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def main() -> None:
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    rows, causes = [], []
    with tempfile.TemporaryDirectory(prefix="device_time_hta_") as tmp:
        for name in TRACES:
            path = REPO / "tests" / "data" / "kineto" / f"{name}.json.gz"
            hta, kept = hta_figures(path, Path(tmp))
            run = read_kineto_trace(path)
            device = (run.ops["device"] != "cpu").to_numpy()
            whole = device_time(run.ops, data_wait_intervals(run.spans, run.queues, -1)).iloc[0]
            on_kept = device_time(run.ops[~device | run.ops["correlation"].isin(kept).to_numpy()]).iloc[0]
            rows.append((name, whole["device"], hta, whole, on_kept))
            causes.append((name, whole))
    print(
        "| trace | device | HTA idle / compute / non-compute % | profview, HTA's kernels | profview, whole trace "
        "| HTA overlap % | profview overlap % (HTA's kernels / whole) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, device, hta, whole, kept in rows:
        trio = lambda r: f"{_pct(r['idle_pct'])} / {_pct(r['compute_pct'])} / {_pct(r['non_compute_pct'])}"
        print(
            f"| {name} | {device} | {_pct(hta['idle'])} / {_pct(hta['compute'])} / {_pct(hta['non_compute'])} "
            f"| {trio(kept)} | {trio(whole)} | {_pct(hta['overlap'])} "
            f"| {_pct(kept['comm_compute_overlap_pct'])} / {_pct(whole['comm_compute_overlap_pct'])} |"
        )
    print()
    print("| trace | window ms | idle ms | " + " | ".join(f"{c} ms" for c in IDLE_CAUSES) + " |")
    print("|---|---|---|" + "---|" * len(IDLE_CAUSES))
    for name, row in causes:
        print(
            f"| {name} | {row['window_ms']:.1f} | {row['idle_ms']:.1f} | "
            + " | ".join(f"{row[f'idle_{c}_ms']:.1f}" for c in IDLE_CAUSES)
            + " |"
        )


if __name__ == "__main__":
    main()

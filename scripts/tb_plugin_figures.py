"""Write what the PyTorch profiler's TensorBoard plugin (torch-tb-profiler) shows for Kineto traces, as JSON.

The peer figures tests/test_tensorboard_views.py compares profview's against (docs/tensorboard.md). The
plugin is deprecated and wants an older stack, so it runs in its own environment; this script imports
nothing of profview's:

    python3 -m venv /tmp/tbp && /tmp/tbp/bin/pip install torch-tb-profiler==0.4.3
    /tmp/tbp/bin/python scripts/tb_plugin_figures.py tests/data/kineto/*.json.gz --out tests/data/recorded/tb_plugin

Times are the plugin's (µs, as the trace writes them).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

#: Runtime categories of torch >= 1.9 traces, which the plugin's last release (0.4.3) does not know (its
#: sources gained them later, never released): it reads them under torch 1.8's name, `Runtime`.
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "hip_runtime", "xpu_runtime", "privateuse1_runtime")


def with_runtime_category(trace: dict) -> dict:
    """The trace with its runtime calls under torch 1.8's category, so that the plugin ties kernels to ops."""
    for event in trace["traceEvents"]:
        if isinstance(event, dict) and event.get("cat") in RUNTIME_CATEGORIES:
            event["cat"] = "Runtime"
    return trace


def figures(path: Path) -> dict:
    """The plugin's overview (steps and their breakdown), GPU summary and kernel table (by kernel name)
    for one trace. Its operator view is left out: on traces of torch >= 1.9 the plugin's release ties
    runtime calls to ops by "External id"s these traces no longer pair (docs/tensorboard.md)."""
    import torch_tb_profiler
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import ProfileRole
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    _, trace = RunProfileData._preprocess_file(str(path), "/tmp")
    data = RunProfileData.from_json("worker", "span", with_runtime_category(trace))
    profile = RunGenerator("worker", "span", data).generate_run_profile()
    roles = [role.name for role in ProfileRole]
    parser = data.gpu_metrics_parser
    gpus = {
        str(gpu): {
            "utilization": parser.gpu_utilization[gpu],
            "sm_efficiency": parser.avg_approximated_sm_efficiency_per_device[gpu],
            "achieved_occupancy": parser.avg_occupancy_per_device[gpu],
            "tensor_core_ratio": data.tc_ratio[gpu],
        }
        for gpu in sorted(parser.gpu_ids)
    }
    stat = getattr(data, "kernel_stat", None)
    kernels = [
        {
            "name": name,
            "calls": int(row["count"]),
            "total_us": float(row["sum"]),
            "mean_us": float(row["mean"]),
            "max_us": float(row["max"]),
            "min_us": float(row["min"]),
            "blocks_per_sm": float(row["blocks_per_sm"]),
            "achieved_occupancy": float(row["occupancy"]),
            "tensor_cores": bool(row["tc_used"]),
        }
        for name, row in (stat.iterrows() if stat is not None else ())
    ]
    return {
        "tool": f"torch-tb-profiler {getattr(torch_tb_profiler, '__version__', '')}".strip(),
        "trace": path.name,
        "steps": [
            {"name": name, "costs_us": dict(zip(roles, costs.costs))}
            for name, costs in zip(data.steps_names, data.steps_costs)
        ],
        "gpus": gpus,
        "tc_used_ratio": getattr(data, "tc_used_ratio", None),
        "tc_eligible_ops_kernel_ratio": data.tc_eligible_ops_kernel_ratio,
        "kernels": kernels,
        "gpu_summary": profile.gpu_summary,
        "modules": _modules(profile.module_stats or []),
        "comm_split": [
            {
                "computation_us": c.computation,
                "overlap_us": c.overlap,
                "communication_us": c.communication,
                "other_us": c.other,
            }
            for c in data.comm_overlap_costs
        ],
        "comm_ops": _comm_ops(data),
        **(_memory(profile) if profile.memory_snapshot is not None else {}),
    }


def _comm_ops(data) -> dict:
    """The distributed view's communication ops of this worker: calls, total size, total latency."""
    from torch_tb_profiler.profiler.communication import analyze_communication_nodes

    if not data.comm_node_list:
        return {}
    _, total = analyze_communication_nodes(data.comm_node_list)
    return {name: {"calls": s[0], "bytes": s[1], "latency_us": s[2]} for name, s in total.items()}


def _modules(stats: list, parent: str = "") -> list[dict]:
    """The module view's tree, flattened: one entry per module under each parent (the plugin's statistics
    are per module, so a module shows the same figures wherever it is called)."""
    out = []
    for name, _, calls, _, host, self_host, device, self_device, _, children in stats:
        path = f"{parent}/{name}" if parent else name
        out.append(
            {
                "path": path,
                "occurrences": calls,
                "host_total_us": host,
                "host_self_us": self_host,
                "device_total_us": device,
                "device_self_us": self_device,
            }
        )
        out += _modules(children, path)
    return out


def _memory(profile) -> dict:
    """The memory view: per device, the memory statistics of every op, the curve's peak and the events."""
    stats = profile.get_memory_stats(None, None)
    curve = profile.get_memory_curve(time_metric="us", memory_metric="B", patch_for_step_plot=False)
    events = profile.get_memory_events(None, None, time_metric="us", memory_metric="B")
    keys = ["calls", "increase_kb", "self_increase_kb", "alloc_count", "self_alloc_count", "alloc_kb", "self_alloc_kb"]
    return {
        "memory_stats": {
            device: [{"op": row[0], **dict(zip(keys, row[1:]))} for row in rows]
            for device, rows in stats["rows"].items()
        },
        "memory_peaks": curve["metadata"]["peaks"],
        "memory_first_ts_us": curve["metadata"]["first_ts"],
        "memory_events": {
            device: [dict(zip(["op", "bytes", "alloc_us", "free_us", "lifetime_us"], row)) for row in rows]
            for device, rows in events["rows"].items()
        },
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    for trace in args.traces:
        name = trace.name.removesuffix(".gz").removesuffix(".json")
        target = args.out / f"{name}.json"
        target.write_text(json.dumps(figures(trace), indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
        print(f"{trace} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

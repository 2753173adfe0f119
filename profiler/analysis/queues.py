"""Data-queue analysis: per-queue occupancy, get-wait per step, the pipeline's bottleneck stage, the verdict.

Pure functions: the run's queue events (model.QUEUE_COLUMNS) and the step trace in, tables and
the `queue_summary` document (docs/formats.md) out.

Each queue's size is a step function: every put / get records the size right after it, so the
size at any time is the size after the last event before it. From it:

- empty_ratio: share of gets that found the queue empty when they were called (the consumer had to
  wait for a producer); full_ratio: share of gets that found it at capacity (the producer is
  ahead). Both are seen from the consumer, as MindInsight samples its queues at each batch fetch.
- time_empty_ratio / time_full_ratio / mean_size: time-weighted over the queue's active span
  (its first to its last event).

The verdict (docs/data-pipeline.md explains the thresholds):
- compute: the consumer found its feed queue empty at fewer than EMPTY_RATIO_WARNING of its gets;
- data_transmission: the device queue is starved while the host queue is not (host data is ready,
  the host->device stage cannot keep up);
- data_process: the feed queue is starved and so is the host queue (or none is probed); the
  pipeline's bottleneck stage is named when the queues carry stage names ("a->b").
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.formats.columns import ARROW, DEVICE_QUEUE, HOST_QUEUE
from profiler.kernels.intervals import assign_steps, covered_ns

#: a queue is starved when at least this share of its gets found it empty (MindInsight's warning line)
EMPTY_RATIO_WARNING = 0.30
#: a queue is mostly full when at least this share of its gets found it at capacity
FULL_RATIO_LINE = 0.50
DATA_PROCESS, DATA_TRANSMISSION, COMPUTE, UNKNOWN = "data_process", "data_transmission", "compute", "unknown"

QUEUE_STATS_COLUMNS = [
    "queue",
    "role",
    "producer",
    "consumer",
    "capacity",
    "samples",
    "puts",
    "gets",
    "empty_ratio",
    "full_ratio",
    "put_full_ratio",
    "time_empty_ratio",
    "time_full_ratio",
    "mean_size",
    "max_size",
    "span_ms",
    "get_wait_ms",
    "get_wait_mean_ms",
    "get_wait_per_step_ms",
    "put_wait_ms",
]
STAGE_COLUMNS = ["stage", "depth", "input_queue", "output_queue", "input_full_ratio", "output_empty_ratio", "slow"]
STEP_WAIT_COLUMNS = ["step", "iteration_gap_ms", "data_wait_ms", "gap_wait_ms", "gap_wait_pct"]


# ---- names ------------------------------------------------------------------------------------


def endpoints(name: str) -> tuple[str, str]:
    """(producer stage, consumer) of a queue name: "a->b" -> ("a", "b"); "host_queue" -> ("", "host_queue")."""
    producer, _, consumer = name.rpartition(ARROW)
    return producer, consumer


def role(name: str) -> str:
    """`device_queue`, `host_queue` (by the consumer end of the name), `connector` ("a->b") or `queue`."""
    producer, consumer = endpoints(name)
    if consumer in (DEVICE_QUEUE, HOST_QUEUE):
        return consumer
    return "connector" if producer else "queue"


# ---- per queue --------------------------------------------------------------------------------


def size_at_call(t: np.ndarray, size: np.ndarray, is_put: np.ndarray, wait: np.ndarray) -> np.ndarray:
    """Per event (sorted by time), the queue's size when the put / get was called (t - wait).

    The size at a time is the size after the last event strictly before it; before the first
    event it is the first event's size undone (minus one for a put, plus one for a get).
    """
    initial = size[0] - (1 if is_put[0] else -1)
    i = np.searchsorted(t, t - wait, side="left") - 1
    return np.where(i >= 0, size[np.maximum(i, 0)], initial)


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if len(mask) else float("nan")


def _time_share(dt: np.ndarray, mask: np.ndarray, span: int) -> float:
    return float(dt[mask].sum() / span) if span > 0 else float("nan")


def _one_queue(ev: pd.DataFrame, n_steps: int) -> dict[str, Any]:
    """The statistics of one queue's events (any order)."""
    ev = ev.sort_values("time_ns", kind="stable")
    t = ev["time_ns"].to_numpy()
    size = ev["size"].to_numpy()
    wait = ev["wait_ns"].to_numpy()
    is_put = (ev["event"] == "put").to_numpy()
    cap = int(ev["capacity"].max())
    at_call = size_at_call(t, size, is_put, wait)
    dt = np.diff(t, append=t[-1])
    span = int(t[-1] - t[0])
    gets, puts = ~is_put, is_put
    nan = float("nan")
    get_wait_ms = float(wait[gets].sum()) / 1e6
    return {
        "capacity": cap,
        "samples": len(t),
        "puts": int(puts.sum()),
        "gets": int(gets.sum()),
        "empty_ratio": _share(at_call[gets] <= 0),
        "full_ratio": _share(at_call[gets] >= cap) if cap > 0 else nan,
        "put_full_ratio": _share(at_call[puts] >= cap) if cap > 0 else nan,
        "time_empty_ratio": _time_share(dt, size <= 0, span),
        "time_full_ratio": _time_share(dt, size >= cap, span) if cap > 0 else nan,
        "mean_size": float((size * dt).sum() / span) if span > 0 else float(size.mean()),
        "max_size": int(size.max()),
        "span_ms": span / 1e6,
        "get_wait_ms": get_wait_ms,
        "get_wait_mean_ms": get_wait_ms / gets.sum() if gets.any() else nan,
        "get_wait_per_step_ms": get_wait_ms / n_steps if n_steps else nan,
        "put_wait_ms": float(wait[puts].sum()) / 1e6,
    }


def queue_stats(queues: pd.DataFrame, n_steps: int = 0) -> pd.DataFrame:
    """One row per queue (sorted by name): occupancy ratios, mean size and waits (QUEUE_STATS_COLUMNS)."""
    rows = []
    for name, ev in queues.groupby("queue", sort=True):
        producer, consumer = endpoints(str(name))
        rows.append(
            {
                "queue": str(name),
                "role": role(str(name)),
                "producer": producer,
                "consumer": consumer,
                **_one_queue(ev, n_steps),
            }
        )
    return pd.DataFrame(rows, columns=QUEUE_STATS_COLUMNS)


# ---- per step ---------------------------------------------------------------------------------


def _trace_steps(trace: pd.DataFrame, origin_unix_ns: int) -> pd.DataFrame:
    """The step trace's boundaries back on the run clock (ns from the origin)."""
    return pd.DataFrame(
        {
            "step": trace["step"].to_numpy(),
            "start_ns": trace["start_unix_ns"].to_numpy() - origin_unix_ns,
            "fp_ns": trace["fp_start_unix_ns"].to_numpy() - origin_unix_ns,
            "end_ns": trace["end_unix_ns"].to_numpy() - origin_unix_ns,
        }
    )


def get_wait_per_step(queues: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per (step, queue): gets and total get-wait (ms), for gets that completed inside the step."""
    gets = queues[queues["event"] == "get"]
    step = assign_steps(gets["time_ns"].to_numpy(), steps)
    df = pd.DataFrame({"step": step, "queue": gets["queue"].to_numpy(), "wait_ms": gets["wait_ns"].to_numpy() / 1e6})
    df = df[df["step"] >= 0]
    out = df.groupby(["step", "queue"], sort=True).agg(gets=("wait_ms", "size"), get_wait_ms=("wait_ms", "sum"))
    return out.reset_index()


def gap_waits(queues: pd.DataFrame, trace: pd.DataFrame, origin_unix_ns: int, consumer_gets: pd.Series) -> pd.DataFrame:
    """Per step: how much of the iteration gap the consumer spent blocked in queue gets.

    `consumer_gets` selects the gets that are the consumer's (the stepping thread's); their
    blocked intervals [t - wait, t] are intersected with the step's gap [start, fp start].
    """
    steps = _trace_steps(trace, origin_unix_ns)
    g = queues[consumer_gets & (queues["event"] == "get")]
    end = g["time_ns"].to_numpy()
    gap_wait = covered_ns(end - g["wait_ns"].to_numpy(), end, steps["start_ns"].to_numpy(), steps["fp_ns"].to_numpy())
    gap = trace["iteration_gap_ms"].to_numpy()
    gap_wait_ms = gap_wait / 1e6
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(gap > 0, 100.0 * gap_wait_ms / gap, np.nan)
    return pd.DataFrame(
        {
            "step": steps["step"],
            "iteration_gap_ms": gap,
            "data_wait_ms": trace["data_wait_ms"].to_numpy(),
            "gap_wait_ms": gap_wait_ms,
            "gap_wait_pct": pct,
        },
        columns=STEP_WAIT_COLUMNS,
    )


# ---- pipeline -----------------------------------------------------------------------------------


def _depths(inputs: dict[str, str], producer_of: dict[str, str]) -> dict[str, int]:
    """Distance of each stage from a source stage (a stage without input queue), following input queues."""
    depth: dict[str, int] = {}

    def walk(stage: str, seen: frozenset) -> int:
        if stage not in depth:
            upstream = producer_of.get(inputs.get(stage, ""), "")
            depth[stage] = 0 if not upstream or upstream in seen else walk(upstream, seen | {stage}) + 1
        return depth[stage]

    for stage in inputs:
        walk(stage, frozenset())
    return depth


def pipeline_stages(stats: pd.DataFrame) -> pd.DataFrame:
    """The stages named by connector queues ("a->b"), upstream first, with the slow ones flagged.

    A stage is slow when its input queue is mostly full (>= FULL_RATIO_LINE of the gets found
    it at capacity) while its output queue is starved (>= EMPTY_RATIO_WARNING of the gets found
    it empty); a source stage (no input queue) when its output is starved. A slow stage is the
    pipeline's bottleneck only when the pipeline limits the loop (verdict data_process): in a
    compute-bound loop the slowest stage is still fast enough.
    """
    named = stats[stats["producer"] != ""]
    if len(named) == 0:
        return pd.DataFrame(columns=STAGE_COLUMNS)
    by_name = stats.set_index("queue")
    producer_of = dict(zip(named["queue"], named["producer"]))
    inputs = dict.fromkeys(named["producer"], "")
    for q in named.sort_values("full_ratio", ascending=False, kind="stable").itertuples():
        if q.consumer in inputs and not inputs[q.consumer]:
            inputs[q.consumer] = q.queue  # the fullest input when a stage has several
    depth = _depths(inputs, producer_of)
    rows = []
    for q in named.itertuples():
        inp = inputs[q.producer]
        in_full = float(by_name.at[inp, "full_ratio"]) if inp else float("nan")
        starved = q.empty_ratio >= EMPTY_RATIO_WARNING
        rows.append(
            {
                "stage": q.producer,
                "depth": depth[q.producer],
                "input_queue": inp,
                "output_queue": q.queue,
                "input_full_ratio": in_full,
                "output_empty_ratio": q.empty_ratio,
                "slow": bool(starved and (not inp or in_full >= FULL_RATIO_LINE)),
            }
        )
    return pd.DataFrame(rows, columns=STAGE_COLUMNS).sort_values(
        ["depth", "stage", "output_queue"], kind="stable", ignore_index=True
    )


def slowest_stage(stages: pd.DataFrame) -> Optional[str]:
    """The slow stage whose output is starved most often (the most upstream one on a tie)."""
    flagged = stages[stages["slow"]]
    if len(flagged) == 0:
        return None
    best = flagged.sort_values(["output_empty_ratio", "depth"], ascending=[False, True], kind="stable")
    return str(best["stage"].iloc[0])


# ---- verdict ------------------------------------------------------------------------------------


def _busiest(stats: pd.DataFrame, mask: pd.Series) -> Optional[str]:
    """Among the queues selected by `mask`, the one with the most gets."""
    s = stats[mask]
    return (
        str(s.sort_values(["gets", "queue"], ascending=[False, True], kind="stable")["queue"].iloc[0])
        if len(s)
        else None
    )


def feed_queues(stats: pd.DataFrame, queues: pd.DataFrame, step_tid: int) -> dict[str, Optional[str]]:
    """The device queue, the host queue, and the feed queue: what the consumer reads.

    The feed is the device queue if one is probed, else the host queue, else the queue the
    stepping thread got from most, else the most downstream connector.
    """
    device = _busiest(stats, stats["role"] == DEVICE_QUEUE)
    host = _busiest(stats, stats["role"] == HOST_QUEUE)
    feed = device or host
    if feed is None and step_tid >= 0:
        mine = queues[(queues["tid"] == step_tid) & (queues["event"] == "get")]["queue"].unique()
        feed = _busiest(stats, stats["queue"].isin(mine))
    feed = feed or pipeline_output(stats)
    return {"device_queue": device, "host_queue": host, "feed_queue": feed}


def pipeline_output(stats: pd.DataFrame) -> Optional[str]:
    """The connector no stage reads from (the pipeline's output), if there is exactly one."""
    named = stats[stats["producer"] != ""]
    last = named[~named["consumer"].isin(set(named["producer"]))]
    return str(last["queue"].iloc[0]) if len(last) == 1 else None


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.0f} %"


def verdict(stats: pd.DataFrame, roles: dict[str, Optional[str]], stage: Optional[str]) -> dict[str, Any]:
    """compute / data_transmission / data_process (or unknown), with the reason in one sentence."""
    by_name = stats.set_index("queue")
    feed, host, device = roles["feed_queue"], roles["host_queue"], roles["device_queue"]
    out = {**roles, "bottleneck_stage": None}
    if feed is None or by_name.at[feed, "gets"] == 0:
        return {**out, "kind": UNKNOWN, "reason": "no probed queue is read by the consumer"}
    feed_empty = float(by_name.at[feed, "empty_ratio"])
    if feed_empty < EMPTY_RATIO_WARNING:
        return {
            **out,
            "kind": COMPUTE,
            "reason": (
                f"the consumer found {feed} empty at {_pct(feed_empty)} of its gets (below the "
                f"{_pct(EMPTY_RATIO_WARNING)} line): data arrives in time, so look at the ops"
            ),
        }
    host_empty = float(by_name.at[host, "empty_ratio"]) if host else float("nan")
    if device and host and host != device and host_empty < EMPTY_RATIO_WARNING:
        return {
            **out,
            "kind": DATA_TRANSMISSION,
            "reason": (
                f"{device} was empty at {_pct(feed_empty)} of the consumer's gets while {host} had data at "
                f"{_pct(1 - host_empty)} of the transfer's gets "
                f"(full at {_pct(float(by_name.at[host, 'full_ratio']))}): "
                "the host->device stage cannot keep up"
            ),
        }
    where = f"; the slowest stage is {stage}" if stage else ""
    upstream = f" and {host} at {_pct(host_empty)}" if host and host != feed else ""
    return {
        **out,
        "kind": DATA_PROCESS,
        "bottleneck_stage": stage,
        "reason": (
            f"the consumer found {feed} empty at {_pct(feed_empty)} of its gets{upstream}: the host input "
            f"pipeline is too slow{where}"
        ),
    }


# ---- the document -------------------------------------------------------------------------------


def _clean(v: Any) -> Any:
    """JSON-safe, deterministic values: NaN -> None, floats rounded to 6 decimals, numpy -> Python."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if v != v else round(float(v), 6)
    return v


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict("records")]


def _step_rows(waits: pd.DataFrame, per_queue: pd.DataFrame) -> list[dict[str, Any]]:
    """Per step: the gap join plus every queue's get-wait in the step."""
    by_step = {int(s): dict(zip(g["queue"], g["get_wait_ms"].map(_clean))) for s, g in per_queue.groupby("step")}
    return [{**row, "get_wait_ms": by_step.get(int(row["step"]), {})} for row in _records(waits)]


def _totals(waits: pd.DataFrame) -> dict[str, Any]:
    gap = float(waits["iteration_gap_ms"].sum())
    gap_wait = float(waits["gap_wait_ms"].sum())
    return {
        k: _clean(v)
        for k, v in {
            "steps": len(waits),
            "iteration_gap_ms": gap,
            "gap_wait_ms": gap_wait,
            "data_wait_ms": float(waits["data_wait_ms"].sum()),
            "gap_wait_pct": 100.0 * gap_wait / gap if gap > 0 else float("nan"),
        }.items()
    }


THRESHOLDS = {
    "empty_ratio_warning": EMPTY_RATIO_WARNING,
    "full_ratio_line": FULL_RATIO_LINE,
    "meaning": (
        "a queue is starved when >= empty_ratio_warning of its gets found it empty, and mostly full when "
        ">= full_ratio_line of its gets found it at capacity (docs/data-pipeline.md)"
    ),
}


def queue_summary(
    queues: pd.DataFrame, trace: pd.DataFrame, step_tid: int = -1, origin_unix_ns: int = 0
) -> dict[str, Any]:
    """The queue_summary document (docs/formats.md): per-queue stats, per-step waits, stages, verdict."""
    stats = queue_stats(queues, n_steps=len(trace))
    steps = _trace_steps(trace, origin_unix_ns)
    roles = feed_queues(stats, queues, step_tid)
    consumer = queues["tid"] == step_tid if step_tid >= 0 else queues["queue"] == roles["feed_queue"]
    waits = gap_waits(queues, trace, origin_unix_ns, consumer)
    stages = pipeline_stages(stats)
    decision = verdict(stats, roles, slowest_stage(stages))
    return {
        "schema_version": 1,
        "thresholds": THRESHOLDS,
        "verdict": decision,
        "queues": _records(stats),
        "pipeline": {"stages": _records(stages), "bottleneck_stage": decision["bottleneck_stage"]},
        "totals": _totals(waits),
        "steps": _step_rows(waits, get_wait_per_step(queues, steps)),
    }

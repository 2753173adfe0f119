"""Cluster analysis: the ranks of one job side by side (pure: DataFrames and dicts in, out).

In synchronous data-parallel training every rank's step lasts as long as the slowest rank's:
the others wait inside the collective that ends the step. So a straggler does not show as a
longer step but as *less waiting*. Per step this module measures each rank's wait at the
collectives as its communication time in excess of the rank that communicated least (the last to
arrive waits least, its communication is the transfer itself), its busy time (step minus wait),
and the slowest rank (the busiest). Whether one rank is a straggler, and the cluster's findings,
are the finding modules' (`findings/straggler.py`, `findings/communication.py`): this module
measures, gives them `ClusterData`, and assembles cluster_summary.json.

Inputs are each rank's step trace (step_trace_{rank}.csv's columns) and profiler_info; the
clock shifts put all ranks on one time axis: the reference (lowest present) rank's origin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from profiler.analysis.advisor import cluster_findings, framework_of, resolve_thresholds
from profiler.analysis.findings.base import Context
from profiler.analysis.findings.straggler import Straggler, find_straggler
from profiler.formats.columns import CLUSTER_STEP_COLUMNS
from profiler.formats.text import plain_value

CLUSTER_SCHEMA_VERSION = 1


# ---- ranks and clocks ---------------------------------------------------------------------


def rank_coverage(infos: Mapping[int, Mapping[str, Any]], traces: Mapping[int, pd.DataFrame]) -> dict[str, Any]:
    """Which ranks the job had, which were profiled, which wrote data, and which stopped early.

    world size: the largest any rank reports. `missing`: ranks expected to record (all, or the
    Profiler's `ranks=`) with no step trace. `stopped_early`: ranks whose last step comes before
    the cluster's last step, or whose recording did not stop cleanly (killed).
    """
    world = max([int(i.get("world_size", 1) or 1) for i in infos.values()] + [len(infos), 1])
    requested = _requested_ranks(infos, world)
    present = sorted(r for r, t in traces.items() if len(t))
    last = {r: int(traces[r]["step"].max()) for r in present}
    cluster_last = max(last.values()) if last else -1
    early = {}
    for r in present:
        clean = bool(infos.get(r, {}).get("recording", {}).get("stopped_cleanly", True))
        if last[r] < cluster_last or not clean:
            early[str(r)] = {"last_step": last[r], "stopped_cleanly": clean}
    return {
        "world_size": world,
        "profiled": requested,
        "present": present,
        "missing": [r for r in requested if r not in present],
        "not_profiled": [r for r in range(world) if r not in requested],
        "stopped_early": early,
        "last_step": cluster_last,
    }


def _requested_ranks(infos: Mapping[int, Mapping[str, Any]], world: int) -> list[int]:
    """The ranks asked to record: the union of the Profilers' `ranks=` options, else every rank."""
    asked = [i.get("config", {}).get("ranks") for i in infos.values()]
    if not asked or any(a is None for a in asked):
        return list(range(world))
    return sorted({int(r) for a in asked for r in a} | set(infos))


def clock_shifts(infos: Mapping[int, Mapping[str, Any]]) -> tuple[dict[int, int], dict[str, Any]]:
    """Per rank, ns to add to its origin-relative times to put them on the reference rank's axis.

    With measured offsets (every rank has `clock.offset_to_rank0_ns`), rank i's origin on rank 0's
    clock is origin_monotonic_i - offset_i, and the shift is that minus the reference's; otherwise
    the ranks' Unix origins are trusted (NTP-synchronised hosts). Returns the shifts and a
    description (method, reference rank, its Unix origin, the worst uncertainty).
    """
    ranks = sorted(infos)
    if not ranks:
        return {}, {"method": "none"}
    ref = ranks[0]
    clocks = {r: infos[r].get("clock", {}) for r in ranks}
    measured = all(c.get("offset_to_rank0_ns") is not None for c in clocks.values())
    if measured:
        base = {r: int(c["origin_monotonic_ns"]) - int(c["offset_to_rank0_ns"]) for r, c in clocks.items()}
        uncertainty = max(int(c.get("offset_uncertainty_ns") or 0) for c in clocks.values())
        method = "offset_to_rank0"
    else:
        base = {r: int(c.get("origin_unix_ns", 0)) for r, c in clocks.items()}
        uncertainty = None
        method = "unix_clock"
    shifts = {r: base[r] - base[ref] for r in ranks}
    return shifts, {
        "method": method,
        "reference_rank": ref,
        "origin_unix_ns": int(clocks[ref].get("origin_unix_ns", 0)),
        "max_uncertainty_ns": uncertainty,
        "per_rank": {
            str(r): {
                "shift_ns": shifts[r],
                "offset_to_rank0_ns": clocks[r].get("offset_to_rank0_ns"),
                "offset_method": clocks[r].get("offset_method"),
                "offset_uncertainty_ns": clocks[r].get("offset_uncertainty_ns"),
            }
            for r in ranks
        },
    }


# ---- the per rank, per step table ---------------------------------------------------------


def cluster_step_table(traces: Mapping[int, pd.DataFrame], shifts_ns: Mapping[int, int]) -> pd.DataFrame:
    """One row per (rank, step): phases, communication, wait, busy time and the step's slowest rank."""
    rows = _rank_rows({rank: t for rank, t in sorted(traces.items()) if len(t)}, shifts_ns)
    if not len(rows):
        return pd.DataFrame(columns=CLUSTER_STEP_COLUMNS)
    rows = rows.sort_values(["step", "rank"], kind="stable", ignore_index=True)
    by_step = rows.groupby("step", sort=False)
    rows["wait_ms"] = rows["comm_ms"] - by_step["comm_ms"].transform("min")
    rows["busy_ms"] = rows["total_ms"] - rows["wait_ms"]
    slowest = rows.loc[by_step["busy_ms"].idxmax().to_numpy(), ["step", "rank", "busy_ms"]]
    lookup = slowest.set_index("step")
    rows["slowest_rank"] = lookup["rank"].reindex(rows["step"]).to_numpy()
    rows["behind_slowest_ms"] = lookup["busy_ms"].reindex(rows["step"]).to_numpy() - rows["busy_ms"]
    return rows[CLUSTER_STEP_COLUMNS]


def _rank_rows(traces: Mapping[int, pd.DataFrame], shifts_ns: Mapping[int, int]) -> pd.DataFrame:
    """The ranks' step traces, one after the other, in the cluster table's columns (before the cross-rank
    columns); built column by column (thousands of ranks)."""
    ranks = list(traces)
    lengths = [len(traces[r]) for r in ranks]

    def column(name: str, dtype: type = np.float64) -> np.ndarray:
        return np.concatenate([traces[r][name].to_numpy(dtype) for r in ranks]) if ranks else np.empty(0, dtype)

    comm, overlap = column("all_reduce_ms"), column("all_reduce_overlap_ms")
    exposed = np.clip(comm - overlap, 0, None)
    fp_bp, tail = column("fp_bp_ms"), column("tail_ms")
    shifts_ms = np.repeat(np.array([shifts_ns.get(r, 0) / 1e6 for r in ranks], np.float64), lengths)
    return pd.DataFrame(
        {
            "rank": np.repeat(np.array(ranks, np.int64), lengths),
            "step": column("step", np.int64),
            "start_ms": column("start_ms") + shifts_ms,
            "iteration_gap_ms": column("iteration_gap_ms"),
            "fp_bp_ms": fp_bp,
            "tail_ms": tail,
            "total_ms": column("total_ms"),
            "comm_ms": comm,
            "comm_overlap_ms": overlap,
            "exposed_comm_ms": exposed,
            "fp_bp_excl_comm_ms": np.clip(fp_bp - overlap, 0, None),
            "tail_excl_comm_ms": np.clip(tail - exposed, 0, None),
        }
    )


def rank_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per rank: steps, mean phase / communication / wait / busy times, shares, and how often it was slowest."""
    if not len(table):
        return pd.DataFrame()
    means = table.groupby("rank", sort=True).agg(
        steps=("step", "size"),
        first_step=("step", "min"),
        last_step=("step", "max"),
        **{c: (c, "mean") for c in CLUSTER_STEP_COLUMNS[3:14]},
    )
    contested = table[table.groupby("step")["rank"].transform("size") > 1]
    slowest = contested.loc[contested["rank"] == contested["slowest_rank"], "rank"].value_counts()
    means["slowest_steps"] = slowest.reindex(means.index, fill_value=0).astype(np.int64)
    total = means["total_ms"].where(means["total_ms"] > 0)
    means["comm_share_pct"] = (100.0 * means["comm_ms"] / total).fillna(0.0)
    means["exposed_comm_share_pct"] = (100.0 * means["exposed_comm_ms"] / total).fillna(0.0)
    means["wait_share_pct"] = (100.0 * means["wait_ms"] / total).fillna(0.0)
    return means.reset_index()


# ---- communication, and what the findings read ---------------------------------------------


def communication(ranks: pd.DataFrame) -> dict[str, float]:
    """Cluster means per step: communication, its overlap, exposed part, wait, and their shares of the step."""
    step = float(ranks["total_ms"].mean()) or 1.0
    comm, exposed, wait = (float(ranks[c].mean()) for c in ("comm_ms", "exposed_comm_ms", "wait_ms"))
    transfer = max(exposed - wait, 0.0)
    return {
        "step_ms": step,
        "comm_ms": comm,
        "comm_overlap_ms": float(ranks["comm_overlap_ms"].mean()),
        "exposed_comm_ms": exposed,
        "wait_ms": wait,
        "exposed_transfer_ms": transfer,
        "comm_share_pct": 100.0 * comm / step,
        "exposed_comm_share_pct": 100.0 * exposed / step,
        "wait_share_pct": 100.0 * wait / step,
        "exposed_transfer_share_pct": 100.0 * transfer / step,
    }


@dataclass(frozen=True)
class ClusterData:
    """What the job offers the findings' cluster rules, by name (a finding module's `ClusterNeeds` fields)."""

    straggler: Optional[Straggler]  # the straggler find_straggler found, if any
    communication: Mapping[str, float]  # communication(): the cluster's mean communication figures
    mean_step_ms: float  # the ranks' mean step (1.0 when it is 0)


# ---- the summary --------------------------------------------------------------------------


def cluster_summary(
    infos: Mapping[int, Mapping[str, Any]],
    traces: Mapping[int, pd.DataFrame],
    thresholds: Optional[Mapping[str, float]] = None,
    ops_by_rank: Optional[Mapping[int, pd.DataFrame]] = None,
    devices_by_rank: Optional[Mapping[int, Sequence[Mapping[str, Any]]]] = None,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """cluster_summary.json's document and cluster_step_trace.csv's table from every rank's step trace and info.

    `devices_by_rank`: each rank's report "devices" records (its device time breakdown), listed per
    rank as `device_time`. With `ops_by_rank` (imported device traces, where each rank's ops are at
    hand) the summary also has `devices`: per rank and device, kernel time by category and
    communication overlap.
    """
    th = resolve_thresholds(thresholds)
    shifts, clock = clock_shifts(infos)
    table = cluster_step_table(traces, shifts)
    ranks = rank_table(table)
    coverage = rank_coverage(infos, traces)
    doc: dict[str, Any] = {
        "schema_version": CLUSTER_SCHEMA_VERSION,
        "ranks": coverage,
        "clock": clock,
        "steps": _step_span(table),
        "per_rank": [],
        "straggler": None,
        "communication": None,
        "findings": [],
        "warnings": coverage_warnings(coverage),
        "device_time": rank_device_time(devices_by_rank or {}),
    }
    if ops_by_rank is not None:
        doc["devices"] = _records(device_breakdown(ops_by_rank))
    if not len(ranks):
        return doc, table
    straggler = find_straggler(table, ranks, th["straggler_pct"])
    comm = communication(ranks)
    ctx = Context(rank=None, framework=framework_of(next(iter(infos.values()), {})), thresholds=th)
    doc.update(
        per_rank=_records(ranks),
        straggler=straggler.to_json() if straggler else None,
        communication={k: round(v, 4) for k, v in comm.items()},
        findings=cluster_findings(ClusterData(straggler, comm, comm["step_ms"]), ctx),
    )
    return doc, table


def timeline_ranks(doc: Mapping[str, Any], limit: int) -> list[int]:
    """The ranks drawn in the merged timeline: all when at most `limit`, else a sample of `limit` that
    always holds the reference rank, the straggler, the busiest and least busy ranks, the rest evenly spaced."""
    present = list(doc["ranks"]["present"])
    if len(present) <= limit:
        return present
    chosen = {present[0]}
    if doc.get("straggler"):
        chosen.add(int(doc["straggler"]["rank"]))
    per_rank = sorted(doc.get("per_rank", []), key=lambda r: r["busy_ms"])
    if per_rank:
        chosen |= {int(per_rank[0]["rank"]), int(per_rank[-1]["rank"])}
    spaced = [present[int(i)] for i in np.linspace(0, len(present) - 1, limit)]
    for rank in spaced:
        if len(chosen) >= limit:
            break
        chosen.add(rank)
    return sorted(chosen)


def _step_span(table: pd.DataFrame) -> dict[str, Any]:
    if not len(table):
        return {"count": 0, "first": None, "last": None, "all_ranks": 0}
    per_step = table.groupby("step")["rank"].size()
    return {
        "count": int(len(per_step)),
        "first": int(per_step.index.min()),
        "last": int(per_step.index.max()),
        "all_ranks": int((per_step == per_step.max()).sum()),
    }


def coverage_warnings(coverage: Mapping[str, Any]) -> list[str]:
    """Sentences about ranks that are missing or stopped early."""
    out = []
    if coverage["missing"]:
        out.append(
            f"{len(coverage['missing'])} of {coverage['world_size']} ranks wrote no data: "
            f"{compact_ranks(coverage['missing'])}; the others are analysed"
        )
    for rank, s in coverage["stopped_early"].items():
        where = (
            f"its data ends at step {s['last_step']}"
            if s["last_step"] == coverage["last_step"]
            else f"its data ends at step {s['last_step']}, the cluster's at step {coverage['last_step']}"
        )
        how = "did not stop cleanly (killed?)" if not s["stopped_cleanly"] else "stopped early"
        out.append(f"rank {rank} {how}: {where}")
    return out


def compact_ranks(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(out)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a table as JSON records, numbers rounded to 4 decimals."""
    return [{k: plain_value(v, digits=4) for k, v in row.items()} for row in frame.to_dict("records")]


def rank_device_time(devices_by_rank: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Every rank's device time records (report_{rank}.json's "devices", as they are), each with its
    rank, in rank order: one definition of busy / idle, the device_time module's."""
    return [
        {"rank": int(rank), **record}
        for rank, records in sorted(devices_by_rank.items())
        for record in records
        if isinstance(record, Mapping)
    ]


# ---- imported multi-rank traces: device time per rank -------------------------------------


def device_breakdown(ops_by_rank: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """Per rank and device (device ops only): ms per category (compute / comm / memcpy / memset), kernel
    counts, and how much of the communication time overlapped compute kernels on the same device."""
    from profiler.kernels.intervals import covered_ns

    rows = []
    for rank, ops in sorted(ops_by_rank.items()):
        dev = ops[ops["device"] != "cpu"]
        for device, d in dev.groupby(dev["device"].astype(str), sort=True):
            cat = d["category"].astype(str)
            row = {"rank": rank, "device": device}
            for c in ("compute", "comm", "memcpy", "memset"):
                row[f"{c}_ms"] = float(d.loc[cat == c, "dur_ns"].sum()) / 1e6
                row[f"{c}_count"] = int((cat == c).sum())
            comp, comm = d[cat == "compute"], d[cat == "comm"]
            covered = covered_ns(
                comp["start_ns"].to_numpy(np.int64),
                (comp["start_ns"] + comp["dur_ns"]).to_numpy(np.int64),
                comm["start_ns"].to_numpy(np.int64),
                (comm["start_ns"] + comm["dur_ns"]).to_numpy(np.int64),
            )
            row["comm_overlap_compute_ms"] = float(covered.sum()) / 1e6
            rows.append(row)
    return pd.DataFrame(rows)

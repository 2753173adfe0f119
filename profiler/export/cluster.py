"""Write the cluster files of a multi-rank directory (docs/formats.md, "Cluster files").

    cluster_summary.json      ranks present / missing / stopped early, clock alignment, per-rank
                              means, the straggler, communication shares, findings
    cluster_step_trace.csv    one row per (rank, step), on one time axis
    cluster_timeline.json     Chrome trace: one process per rank (steps, phases, spans, collectives),
                              shifted by the measured clock offsets so the ranks line up

The summary and the step table come from the per-rank outputs (step_trace_{rank}.csv,
profiler_info_{rank}.json: small files, read for every rank); the timeline needs each rank's
events and reads the raw store of at most TIMELINE_RANKS ranks (docs/architecture.md, "Scale").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from profiler.analysis.cluster import cluster_summary, timeline_ranks
from profiler.analysis.comm_ops import transfer_times
from profiler.export.chrome_trace import (
    TRACE_START,
    describe_plan,
    event_text,
    plan_steps,
    timeline_max_events,
    write_rows,
    write_trace_end,
)
from profiler.export.csv_json import write_csv, write_json
from profiler.export.files import AtomicWrite
from profiler.export.key_steps import KeySteps, key_steps_of, run_thresholds
from profiler.export.timeline_model import (
    EventBlock,
    Lanes,
    lane_codes,
    merge_blocks,
    op_block,
    span_block,
    step_block,
    stepped,
    thread_order,
)
from profiler.formats.columns import CLUSTER_COMM_OP_COLUMNS, CLUSTER_COMM_SPLIT_COLUMNS
from profiler.formats.documents import read_json_object
from profiler.formats.names import (
    CLUSTER_COMM_OPS,
    CLUSTER_COMM_SPLIT,
    CLUSTER_STEP_TRACE,
    CLUSTER_SUMMARY,
    CLUSTER_TIMELINE,
    info_files,
    rank_file,
)
from profiler.formats.tables import read_csvs
from profiler.model import Run

TIMELINE_RANKS = 16  # ranks drawn in the merged timeline (all of them up to this many)


def read_rank_outputs(directory: Path) -> tuple[dict[int, dict], dict[int, pd.DataFrame]]:
    """profiler_info and step trace of every analysed rank in `directory` (a rank without a step trace
    gets an empty one)."""
    infos = {rank: read_json_object(path) for rank, path in info_files(directory).items()}
    traces = dict.fromkeys(infos, pd.DataFrame())
    written = [r for r in infos if (directory / rank_file("step_trace", r)).is_file()]
    traces.update(zip(written, read_csvs([directory / rank_file("step_trace", r) for r in written], "step_trace")))
    return infos, traces


def read_rank_devices(directory: Path, ranks: Sequence[int]) -> dict[int, list]:
    """report_{rank}.json's "devices" records of each rank (none for a rank without a report)."""
    out: dict[int, list] = {}
    for rank in ranks:
        path = directory / rank_file("report", rank)
        devices = read_json_object(path).get("devices") if path.is_file() else None
        out[rank] = devices if isinstance(devices, list) else []
    return out


def read_rank_tables(directory: Path, ranks: Sequence[int], kind: str) -> dict[int, pd.DataFrame]:
    """The ranks' `kind` CSV (a RANK_FILES kind), by rank, for the ranks that wrote one."""
    paths = {rank: directory / rank_file(kind, rank) for rank in ranks}
    written = [rank for rank, path in paths.items() if path.is_file()]
    return dict(zip(written, read_csvs([paths[rank] for rank in written], kind)))


def read_comm_split(directory: Path, ranks: Sequence[int]) -> pd.DataFrame:
    """Every rank's comm_split_{rank}.csv rows with the rank in front (empty when no rank wrote one)."""
    frames = [t.assign(rank=rank) for rank, t in read_rank_tables(directory, ranks, "comm_split").items()]
    if not frames:
        return pd.DataFrame(columns=CLUSTER_COMM_SPLIT_COLUMNS)
    return pd.concat(frames, ignore_index=True)[CLUSTER_COMM_SPLIT_COLUMNS]


def read_comm_ops(directory: Path, ranks: Sequence[int]) -> pd.DataFrame:
    """Every rank's comm_ops_{rank}.csv with the rank in front and each collective's data transfer time
    (analysis.comm_ops.transfer_times, from the ranks' comm_pieces_{rank}.csv): CLUSTER_COMM_OP_COLUMNS,
    empty when no rank wrote one."""
    ops = read_rank_tables(directory, ranks, "comm_ops")
    pieces = read_rank_tables(directory, list(ops), "comm_pieces")
    if not ops:
        return pd.DataFrame(columns=CLUSTER_COMM_OP_COLUMNS)
    table = pd.concat([t.assign(rank=rank) for rank, t in ops.items()], ignore_index=True)
    if len(pieces) == len(ops):  # a rank without its pieces: no transfer time for anyone
        table = table.merge(transfer_times(pieces), on=["rank", "name"], how="left")
    else:
        table["transfer_ms"] = float("nan")
    table["mean_transfer_ms"] = table["transfer_ms"] / table["calls"]
    return table.sort_values(["rank", "total_ms", "name"], ascending=[True, False, True], ignore_index=True)[
        CLUSTER_COMM_OP_COLUMNS
    ]


def is_cluster(infos: Mapping[int, dict]) -> bool:
    """More than one rank wrote here, or the one that did belongs to a larger job."""
    return len(infos) > 1 or any(int(i.get("world_size", 1) or 1) > 1 for i in infos.values())


def write_cluster_outputs(
    directory: Path, load_run: Callable[[Path, int], Run], max_events: Optional[int] = None
) -> list[Path]:
    """Analyse the ranks' outputs in `directory` together and write the cluster files (the merged
    timeline within `max_events`, by default the recorded limit); [] for a single-rank run."""
    directory = Path(directory)
    infos, traces = read_rank_outputs(directory)
    if not is_cluster(infos):
        return []
    doc, table = cluster_summary(infos, traces, devices_by_rank=read_rank_devices(directory, sorted(infos)))
    runs = [load_run(directory, r) for r in timeline_ranks(doc, TIMELINE_RANKS)]
    ranks = sorted(infos)
    comm = (read_comm_split(directory, ranks), read_comm_ops(directory, ranks))
    return write_cluster_files(directory, doc, table, runs, max_events, comm)


def write_cluster_files(
    directory: Path,
    doc: dict,
    table: pd.DataFrame,
    runs: Sequence[Run],
    max_events: Optional[int] = None,
    comm: tuple[Optional[pd.DataFrame], Optional[pd.DataFrame]] = (None, None),
) -> list[Path]:
    """Write the step table, every rank's computation / communication split and collectives (`comm`:
    cluster_comm_split and cluster_comm_ops tables, when a rank has them), the merged timeline of `runs`
    (at most `max_events` events: by default the limit the first run was recorded with) and the summary
    (listing the outputs)."""
    shifts = {int(r): int(c["shift_ns"]) for r, c in doc["clock"].get("per_rank", {}).items()}
    written = [write_csv(table, directory / CLUSTER_STEP_TRACE)]
    for path, comm_table in zip((CLUSTER_COMM_SPLIT, CLUSTER_COMM_OPS), comm):
        if comm_table is not None and len(comm_table):
            written.append(write_csv(comm_table, directory / path))
    doc = {**doc, "timeline_ranks": [r.rank for r in runs]}
    if runs:
        limit = timeline_max_events(runs[0]) if max_events is None else max_events
        views = [RankView.of(run) for run in runs]
        key = cluster_key_steps(table, runs[0])
        plan = plan_steps(
            sum(v.count for v in views),
            key,
            lambda steps: list(np.sum([v.step_counts(steps) for v in views], axis=0)),
            limit,
        )
        written.append(write_cluster_timeline(views, shifts, directory / CLUSTER_TIMELINE, doc["clock"], plan.steps))
        doc["timeline"] = describe_plan(
            plan, key, CLUSTER_TIMELINE, "every event of a rank: profview export --chrome DIR -r R [--steps A:B]"
        )
    doc["outputs"] = [p.name for p in written] + [CLUSTER_SUMMARY]
    written.append(write_json(doc, directory / CLUSTER_SUMMARY))
    return written


def cluster_view(run: Run) -> Run:
    """What the merged timeline shows of a rank: steps, phases and spans, marks, and its collectives."""
    comm = run.ops[run.ops["category"].astype(str) == "comm"]
    return Run(
        info=run.info,
        ops=comm.reset_index(drop=True),
        spans=run.spans,
        instants=run.instants,
        steps=run.steps,
        threads=run.threads,
    )


def cluster_key_steps(table: pd.DataFrame, run: Run) -> KeySteps:
    """The cluster's median, slowest and outlier steps, by each step's time on its slowest rank (the
    pace of a synchronous job), with the thresholds `run` was recorded with."""
    if not len(table):
        return KeySteps()
    totals = table.groupby("step", sort=True)["total_ms"].max().reset_index()
    return key_steps_of(totals, run_thresholds(run))


@dataclass
class RankView:
    """A rank's rows in the merged timeline (its `cluster_view`): the complete rows in thread order,
    each with its step (a span's: the step its start falls in)."""

    run: Run
    lanes: Lanes
    complete: EventBlock
    order: np.ndarray

    @classmethod
    def of(cls, run: Run) -> RankView:
        view = cluster_view(run)
        lanes = Lanes(view)
        complete = merge_blocks(
            [stepped(b, view) for b in (step_block(view, lanes), span_block(view, lanes), op_block(view, lanes))],
            with_dur=True,
        )
        codes, _ = lane_codes(complete.specs)
        return cls(run, lanes, complete, thread_order(codes[complete.key], complete.ts_ns, complete.dur_ns))

    @property
    def count(self) -> int:
        return len(self.order)

    def step_counts(self, steps: list[int]) -> list[int]:
        """How many rows each of `steps` has."""
        counts = pd.Series(np.asarray(self.complete.step)).value_counts()
        return [int(counts.get(s, 0)) for s in steps]

    def rows(self, steps: Optional[tuple[int, ...]]) -> np.ndarray:
        """The rows written: all of them, or those of `steps`, in thread order."""
        if steps is None:
            return self.order
        return self.order[np.isin(np.asarray(self.complete.step)[self.order], np.asarray(steps, dtype=np.int64))]


def write_cluster_timeline(
    views: Sequence[RankView],
    shifts_ns: Mapping[int, int],
    path: Path,
    clock: Optional[dict] = None,
    steps: Optional[tuple[int, ...]] = None,
) -> Path:
    """One Chrome trace with a process per rank (pid = rank), each rank's times shifted onto the common
    axis; only the events of `steps` when given."""
    meta: list[dict] = []
    with AtomicWrite(path) as out, open(out.tmp, "wb") as f:
        f.write(TRACE_START)
        for v in views:
            shift = np.int64(shifts_ns.get(v.run.rank, 0))
            shifted = replace(v.complete, ts_ns=np.asarray(v.complete.ts_ns, dtype=np.int64) + shift)
            write_rows(f, shifted, v.rows(steps))
            meta += v.lanes.meta
            meta.append(
                {
                    "ph": "M",
                    "pid": v.lanes.host_pid,
                    "tid": 0,
                    "name": "process_labels",
                    "args": {"labels": str(v.run.info.get("host", ""))},
                }
            )
        other = {"tool": "profview", "kind": "cluster", "ranks": [v.run.rank for v in views], "clock": clock or {}}
        write_trace_end(f, map(event_text, meta), other)
    return Path(path)

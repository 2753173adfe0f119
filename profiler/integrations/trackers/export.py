"""`profview export DIR --to tensorboard|mlflow`: every analysed rank of DIR into a tracker.

TRACKERS is the one place a tracker is registered: its name (the `--to` value) and how to make
the sink of one rank for a `Destination`. Each rank becomes its own run: TensorBoard
`LOGDIR/rank<r>` (default LOGDIR: DIR/tensorboard), MLflow a run named `<DIR name> rank <r>` in
the experiment (default store: $MLFLOW_TRACKING_URI, else a SQLite database DIR/mlflow.db, as MLflow's own default).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from profiler.errors import InputError
from profiler.formats.names import info_files
from profiler.integrations.trackers.record import read_record
from profiler.integrations.trackers.sink import TrackerSink, write_record


@dataclass(frozen=True)
class Destination:
    """Where an export goes; the options a tracker does not use are ignored."""

    directory: Path  # the profview output directory being exported
    logdir: Optional[Path] = None  # TensorBoard
    tracking_uri: Optional[str] = None  # MLflow
    experiment: str = "profview"  # MLflow
    run_name: Optional[str] = None  # MLflow: the run's name (" rank <r>" is appended)


def default_tracking_uri(directory: Path) -> str:
    """$MLFLOW_TRACKING_URI when set (MLflow's own convention), else what MLflow itself defaults to since
    3.7: a SQLite database, here DIR/mlflow.db."""
    from profiler.integrations.trackers.mlflow import sqlite_uri

    return os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(Path(directory) / "mlflow.db")


def _tensorboard(dest: Destination, rank: int) -> TrackerSink:
    from profiler.integrations.trackers.tensorboard import TensorBoardSink

    return TensorBoardSink(Path(dest.logdir or dest.directory / "tensorboard") / f"rank{rank}")


def _mlflow(dest: Destination, rank: int) -> TrackerSink:
    from profiler.integrations.trackers.mlflow import MlflowSink

    name = dest.run_name or Path(dest.directory).resolve().name
    return MlflowSink(
        dest.tracking_uri or default_tracking_uri(dest.directory),
        experiment=dest.experiment,
        run_name=f"{name} rank {rank}",
        tags={"profview/directory": str(Path(dest.directory).resolve())},
    )


#: Every tracker `profview export --to` knows: name -> the sink of one rank.
TRACKERS: dict[str, Callable[[Destination, int], TrackerSink]] = {"tensorboard": _tensorboard, "mlflow": _mlflow}


def export_directory(tracker: str, destination: Destination, ranks: Optional[Iterable[int]] = None) -> list[str]:
    """Write the analysed ranks of `destination.directory` (all, or `ranks`) into `tracker`; where each went.

    Raises InputError (one sentence) for an unknown tracker, a directory without analysed ranks, a
    rank it does not hold, or a tracker library that is not installed.
    """
    if tracker not in TRACKERS:
        raise InputError(f"unknown tracker {tracker!r}: profview exports to {', '.join(sorted(TRACKERS))}")
    directory = Path(destination.directory)
    if not directory.is_dir():
        raise InputError(f"{directory} does not exist or is not a directory")
    found = sorted(info_files(directory))
    if not found:
        raise InputError(
            f"{directory} holds no analysed run (no profiler_info_*.json): run profview analyse {directory}"
        )
    wanted = found if ranks is None else sorted(set(ranks))
    missing = [r for r in wanted if r not in found]
    if missing:
        raise InputError(f"{directory} has no rank {missing[0]} (its ranks: {', '.join(map(str, found))})")
    records = [read_record(directory, rank) for rank in wanted]  # every input read before anything is written
    written = []
    for record in records:
        try:
            sink = TRACKERS[tracker](destination, record.rank)
        except ImportError as exc:
            raise InputError(str(exc)) from None
        write_record(sink, record)
        written.append(
            f"rank {record.rank}: {len(record.steps)} steps, verdict {record.verdict or '?'} -> {sink.where}"
        )
    return written

"""MLflow: profview's record as metrics and tags of a run, through `mlflow`'s own client.

Per-step metrics are `profview/<column>` with step = the profiler step; the run-level figures are
metrics too (`profview/mean_steady_step_ms`, ...); the verdict, headline and top findings are tags
(`profview/verdict`, `profview/headline`, `profview/finding_1` ...). A sink writes into an
existing run (`run_id`: the live option's, the trainer's run) or creates one in `experiment`.

The default store is what MLflow itself defaults to since 3.7: a SQLite database (`sqlite:///DIR/mlflow.db`,
through SQLAlchemy, which `profview[mlflow]` installs). A local file store (a directory, `file:` URI) still
works when asked for: MLflow 3.x keeps it in maintenance mode and refuses it unless
MLFLOW_ALLOW_FILE_STORE=true, which profview sets for its own client calls on a file store only (reading
it back needs the same: docs/integrations.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pandas as pd

try:
    from mlflow.entities import Metric, RunTag
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
except ImportError as exc:  # pragma: no cover - exercised only without mlflow
    from profiler.integrations._common import missing_framework

    raise missing_framework("profiler.integrations.trackers.mlflow", "mlflow", "mlflow") from exc

from profiler.errors import ProfviewError
from profiler.integrations.trackers.record import PREFIX, TrackerRecord, finding_text

__all__ = ["MlflowSink", "file_store_uri", "sqlite_uri"]

#: log_batch takes at most this many metrics per call (MLflow's limit)
_BATCH = 1000
_ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


def file_store_uri(path: str | Path) -> str:
    """The tracking URI of a local file store in directory `path`."""
    return Path(path).resolve().as_uri()


def sqlite_uri(path: str | Path) -> str:
    """The tracking URI of a SQLite database file `path` (MLflow's default store since 3.7)."""
    return f"sqlite:///{Path(path).resolve()}"


def is_file_store(uri: str) -> bool:
    """Whether a tracking URI names a local file store (a plain path or a file: URI)."""
    return "://" not in uri or uri.startswith("file:")


@contextlib.contextmanager
def _calls(uri: str) -> Iterator[None]:
    """Client calls on store `uri`: MLflow 3.x may open a file store for them (the variable is put back
    afterwards), and an MLflow error becomes one ProfviewError sentence."""
    allow = is_file_store(uri) and not os.environ.get(_ALLOW_FILE_STORE)
    if allow:
        os.environ[_ALLOW_FILE_STORE] = "true"
    # a new SQL store logs its table creation (MLflow's and Alembic's INFO lines): not profview's output
    quiet = {name: logging.getLogger(name) for name in ("mlflow", "alembic")}
    levels = {name: log.level for name, log in quiet.items()}
    for log in quiet.values():
        log.setLevel(max(log.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    except MlflowException as exc:
        first = (str(exc.message).strip().splitlines() or [type(exc).__name__])[0]
        raise ProfviewError(f"MLflow at {uri} refused the write: {first[:300]}") from None
    except ImportError as exc:  # a SQL store without SQLAlchemy (mlflow-skinny alone)
        raise ProfviewError(
            f"MLflow at {uri} needs {exc.name or 'a database driver'}: pip install 'profview[mlflow]' "
            "(or --tracking-uri file:DIR for a file store)"
        ) from None
    finally:
        if allow:
            os.environ.pop(_ALLOW_FILE_STORE, None)
        for name, log in quiet.items():
            log.setLevel(levels[name])


class MlflowSink:
    """Writes into MLflow run `run_id`, or into a new run `run_name` of `experiment`."""

    def __init__(
        self,
        tracking_uri: str,
        *,
        run_id: Optional[str] = None,
        experiment: str = "profview",
        run_name: Optional[str] = None,
        tags: Optional[dict[str, str]] = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self._own_run = run_id is None
        with _calls(tracking_uri):
            self.client = MlflowClient(tracking_uri=tracking_uri)
            if run_id is None:
                found = self.client.get_experiment_by_name(experiment)
                experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
                run_id = self.client.create_run(experiment_id, run_name=run_name, tags=tags or {}).info.run_id
            elif tags:
                self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.run_id = run_id
        self.where = f"MLflow run {run_id} at {tracking_uri}"

    def log_steps(self, steps: pd.DataFrame) -> None:
        now = int(time.time() * 1000)
        names = [c for c in steps.columns if c != "step"]
        metrics = [
            Metric(PREFIX + name, float(value), now, int(step))
            for name in names
            for step, value in zip(steps["step"].to_numpy(), steps[name].to_numpy())
            if value == value  # NaN: not measured in the step (a data wait op capture did not see), not logged
        ]
        self._log(metrics)

    def log_summary(self, record: TrackerRecord) -> None:
        now, last = int(time.time() * 1000), int(record.steps["step"].max()) if len(record.steps) else 0
        tags = {"verdict": record.verdict, "headline": record.headline, "rank": str(record.rank)}
        tags.update({f"finding_{i}": finding_text(f) for i, f in enumerate(record.findings, start=1)})
        metrics = [Metric(PREFIX + name, value, now, last) for name, value in record.summary.items()]
        self._log(metrics, [RunTag(PREFIX + k, v) for k, v in tags.items() if v])

    def close(self) -> None:
        if self._own_run:
            with _calls(self.tracking_uri):
                self.client.set_terminated(self.run_id)

    def _log(self, metrics: list, tags: Optional[list] = None) -> None:
        with _calls(self.tracking_uri):
            for i in range(0, max(len(metrics), 1), _BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH], tags=(tags or []) if i == 0 else [])

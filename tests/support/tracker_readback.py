"""Reading back what profview wrote into TensorBoard and MLflow, with the libraries' own readers
(TensorBoard's EventAccumulator, MLflow's MlflowClient), and checking it against the output files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

STEP_COLUMNS = ("iteration_gap_ms", "data_wait_ms", "fp_bp_ms", "tail_ms", "total_ms")


def tensorboard_run(logdir: Path) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """(scalars: tag -> {step: value}, texts: tag -> text) of the event files in `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags["scalars"]}
    texts = {t: acc.Tensors(t)[-1].tensor_proto.string_val[0].decode() for t in tags["tensors"]}
    return scalars, texts


def mlflow_run(tracking_uri: str, run_id: str):
    """(client, run) of an MLflow run (a file store needs MLFLOW_ALLOW_FILE_STORE=true: the caller sets it)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    return client, client.get_run(run_id)


def mlflow_metric(client, run_id: str, key: str) -> dict[int, tuple[float, int]]:
    """step -> (value, timestamp ms) of a metric's history (every value logged for a step must be one)."""
    history = client.get_metric_history(run_id, key)
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)), f"{key}: a step was logged twice: {sorted(steps)}"
    return {m.step: (m.value, m.timestamp) for m in history}


def expected(out: Path, rank: int = 0) -> tuple[pd.DataFrame, dict]:
    """(step_trace CSV, report JSON) of an analysed directory."""
    return pd.read_csv(out / f"step_trace_{rank}.csv"), json.loads((out / f"report_{rank}.json").read_text())


def assert_steps_match(values: dict[str, dict[int, float]], trace: pd.DataFrame, rel: float = 1e-6) -> None:
    """Every step of `trace` was logged under profview/<column> with the CSV's value (TensorBoard keeps float32)."""
    for column in STEP_COLUMNS:
        logged = values[f"profview/{column}"]
        assert sorted(logged) == trace["step"].tolist(), column
        got = np.array([logged[s] for s in trace["step"]])
        np.testing.assert_allclose(got, trace[column].to_numpy(), rtol=rel, atol=1e-3, err_msg=column)


def assert_lightning_loggers_hold_the_run(tb_log_dir: str, store: str, run_id: str, out: Path, steps: int) -> None:
    """A Lightning fit with `log_to_trackers=True` and a TensorBoardLogger + MLFlowLogger: the `steps`
    steps of step_trace_0.csv in both runs, the verdict of report_0.json, and step 0 logged live (its
    MLflow timestamp before the end-of-fit summary's)."""
    trace, report = expected(out)
    assert trace["step"].tolist() == list(range(steps))
    scalars, texts = tensorboard_run(tb_log_dir)
    assert_steps_match(scalars, trace)
    assert texts["profview/verdict"] == report["verdict"]
    client, run = mlflow_run(store, run_id)
    values = {f"profview/{c}": mlflow_metric(client, run_id, f"profview/{c}") for c in STEP_COLUMNS}
    assert_steps_match({k: {s: v for s, (v, _) in h.items()} for k, h in values.items()}, trace, rel=1e-9)
    assert run.data.tags["profview/verdict"] == report["verdict"]
    summary_ms = max(t for _, t in mlflow_metric(client, run_id, "profview/mean_steady_step_ms").values())
    assert values["profview/total_ms"][0][1] < summary_ms  # step 0 was logged live, during the fit

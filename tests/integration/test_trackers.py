"""`profview export DIR --to tensorboard|mlflow` (profiler.integrations.trackers), read back with each
library's own reader: the per-step phases equal step_trace_{rank}.csv, the verdict equals report_{rank}.json's."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from viewer.cli import main

from support.tracker_readback import assert_steps_match, expected, mlflow_metric, mlflow_run, tensorboard_run

DATA_S, COMPUTE_S, TAIL_S = 0.03, 0.01, 0.003  # per step: the data wait dominates (input_bound)
STEPS = 8


@pytest.fixture(scope="module")
def input_bound_run(tmp_path_factory) -> Path:
    """A plain loop whose data phase takes 3x its compute: verdict input_bound."""
    from profiler import Profiler

    out = tmp_path_factory.mktemp("trackers") / "prof"
    profiler = Profiler(out, host_counters=False)
    for _ in range(STEPS):
        with profiler.phase("data"):
            time.sleep(DATA_S)
        profiler.mark("fp_start")
        time.sleep(COMPUTE_S)
        profiler.mark("bp_end")
        time.sleep(TAIL_S)
        profiler.step()
    profiler.analyse(quiet=True)
    return out


def test_tensorboard_export_reads_back_as_the_step_trace(input_bound_run, tmp_path, capsys):
    assert main(["export", str(input_bound_run), "--to", "tensorboard", "--logdir", str(tmp_path / "tb")]) == 0
    assert "rank 0: 8 steps, verdict input_bound -> TensorBoard run" in capsys.readouterr().err
    trace, report = expected(input_bound_run)
    scalars, texts = tensorboard_run(tmp_path / "tb" / "rank0")
    assert_steps_match(scalars, trace)
    assert report["verdict"] == "input_bound"
    assert texts["profview/verdict"] == report["verdict"]
    assert texts["profview/headline"] == report["headline"]
    top = report["findings"][0]
    assert texts["profview/findings"].startswith(f"1. input_bound: {top['title']} ({top['at_stake_pct']:g} %")
    assert scalars["profview/mean_steady_step_ms"][STEPS - 1] == pytest.approx(report["steps"]["mean_ms"], rel=1e-6)
    assert "profview/device_busy_ms" not in scalars  # no device ops in a host loop


def test_mlflow_export_reads_back_as_the_step_trace(input_bound_run, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    store = (tmp_path / "mlruns").as_uri()
    assert (
        main(
            [
                "export",
                str(input_bound_run),
                "--to",
                "mlflow",
                "--tracking-uri",
                store,
                "--experiment",
                "tests",
                "--run-name",
                "loop",
            ]
        )
        == 0
    )
    line = capsys.readouterr().err
    run_id = line.split("MLflow run ")[1].split()[0]
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # profview put the variable back
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 opens a file store only with it
    client, run = mlflow_run(store, run_id)
    assert run.info.run_name == "loop rank 0" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "tests"
    trace, report = expected(input_bound_run)
    values = {
        f"profview/{c}": {s: v for s, (v, _) in mlflow_metric(client, run_id, f"profview/{c}").items()}
        for c in ("iteration_gap_ms", "data_wait_ms", "fp_bp_ms", "tail_ms", "total_ms")
    }
    assert_steps_match(values, trace, rel=1e-9)
    tags = run.data.tags
    assert tags["profview/verdict"] == report["verdict"] == "input_bound"
    assert tags["profview/finding_1"].startswith(f"input_bound: {report['findings'][0]['title']}")
    assert run.data.metrics["profview/mean_steady_step_ms"] == pytest.approx(report["steps"]["mean_ms"], rel=1e-9)
    assert run.data.metrics["profview/finding_1_at_stake_pct"] == report["findings"][0]["at_stake_pct"]


def test_mlflow_default_store_is_mlflows_own_default_a_sqlite_database(input_bound_run, tmp_path, monkeypatch, capfd):
    """No --tracking-uri, no $MLFLOW_TRACKING_URI: DIR/mlflow.db, which MLflow 3 opens without any
    variable (its own default since 3.7), read back with MlflowClient; no file store is made."""
    import shutil

    from mlflow.tracking import MlflowClient

    out = tmp_path / "copy"
    shutil.copytree(input_bound_run, out)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    capfd.readouterr()
    assert main(["export", str(out), "--to", "mlflow"]) == 0
    assert "Creating initial MLflow database tables" not in capfd.readouterr().err  # MLflow's set-up logs stay quiet
    assert (out / "mlflow.db").is_file() and not (out / "mlruns").exists()
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("profview").experiment_id])
    history = client.get_metric_history(run.info.run_id, "profview/total_ms")
    trace = pd.read_csv(out / "step_trace_0.csv")
    steps, values = zip(*sorted((m.step, m.value) for m in history))
    assert list(steps) == trace["step"].tolist() and values == pytest.approx(trace["total_ms"].tolist())
    assert run.data.tags["profview/verdict"] == json.loads((out / "report_0.json").read_text())["verdict"]


def test_device_busy_is_the_union_of_device_ops_per_step(tmp_path):
    """A run with device ops (the reference Ascend device): device_busy_ms per step equals the union of
    the npu ops of timeline_0.json inside each step."""
    from profiler import Profiler
    from profview_reference_device.device import AscendReferenceDevice

    out = tmp_path / "dev"
    profiler = Profiler(out, host_counters=False)
    dev = AscendReferenceDevice(profiler, device_id=0)
    a = np.ones((256, 256), dtype=np.float32)
    for _ in range(5):
        tasks = [dev.launch(f"Default/MatMul-op{k}", "MatMul", np.matmul, a, a) for k in range(3)]
        time.sleep(0.01)  # host work between launches: the device idles part of the step
        tasks[-1].result()
        profiler.step()
    profiler.analyse(quiet=True)
    assert main(["export", str(out), "--to", "tensorboard", "--logdir", str(tmp_path / "tb")]) == 0
    scalars, _ = tensorboard_run(tmp_path / "tb" / "rank0")
    busy = scalars["profview/device_busy_ms"]
    trace = pd.read_csv(out / "step_trace_0.csv")
    events = json.loads((out / "timeline_0.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    ops = [
        (e["ts"] * 1e3, (e["ts"] + e["dur"]) * 1e3)
        for e in events
        if e.get("ph") == "X" and "npu" in str(names.get(e["pid"], "")) and e.get("cat") not in ("phase", "span")
    ]
    assert ops
    for row in trace.itertuples():
        lo, hi = row.start_ms * 1e6, (row.start_ms + row.total_ms) * 1e6
        inside = sorted((max(s, lo), min(e, hi)) for s, e in ops if e > lo and s < hi)
        union, reach = 0.0, lo
        for s, e in inside:
            union += max(0.0, e - max(s, reach))
            reach = max(reach, e)
        assert busy[row.step] == pytest.approx(union / 1e6, rel=1e-4, abs=2e-3), row.step
    assert sum(busy.values()) > 0


def test_export_refuses_what_it_cannot_export(tmp_path, input_bound_run, capsys):
    assert main(["export", str(tmp_path), "--to", "tensorboard"]) == 1
    assert "holds no analysed run" in capsys.readouterr().err
    assert (
        main(["export", str(input_bound_run), "--to", "tensorboard", "--logdir", str(tmp_path / "x"), "-r", "3"]) == 1
    )
    assert "has no rank 3 (its ranks: 0)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing written before the check
    with pytest.raises(SystemExit):
        main(["export", str(input_bound_run), "--to", "wandb"])


def test_a_tracker_that_refuses_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path, monkeypatch):
    """log_to_trackers' LiveTrackers on a real recording, into an MLflow run deleted under it: the write is
    refused, one warning says profview stops logging there, and recording and analysis go on."""
    from mlflow.tracking import MlflowClient

    from profiler import Profiler, ProfilerUsageWarning
    from profiler.integrations.trackers.mlflow import MlflowSink
    from profiler.integrations.trackers.streaming import LiveTrackers

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=store)
    run_id = client.create_run(client.create_experiment("gone")).info.run_id
    live = LiveTrackers([MlflowSink(store, run_id=run_id)])
    profiler = Profiler(tmp_path / "prof", host_counters=False)
    for _ in range(3):
        profiler.step()
    client.delete_run(run_id)
    with pytest.warns(ProfilerUsageWarning, match=f"profview stops logging to MLflow run {run_id}.*refused"):
        live.update(profiler)
    assert live.sinks == []
    for _ in range(3):
        profiler.step()
    outputs = profiler.analyse(quiet=True)
    live.finish(profiler, bool(outputs))
    assert pd.read_csv(tmp_path / "prof" / "step_trace_0.csv")["step"].tolist() == list(range(6))


def test_a_data_wait_measured_in_some_steps_is_logged_in_those(tmp_path, capsys, monkeypatch):
    """A step whose data wait nothing measured (NaN: outside op capture) has no data-wait scalar in TensorBoard or
    MLflow (not a NaN point), the other metrics every step."""
    from support.recorded import analysed_copy

    out = analysed_copy("scenarios", "data_sleep_w2_ops_8_of_30", tmp_path / "run")
    trace, _ = expected(out)
    measured = trace["step"][trace["data_wait_ms"].notna()].tolist()
    assert 0 < len(measured) < len(trace)
    assert main(["export", str(out), "--to", "tensorboard", "--logdir", str(tmp_path / "tb")]) == 0
    scalars, _ = tensorboard_run(tmp_path / "tb" / "rank0")
    assert sorted(scalars["profview/data_wait_ms"]) == measured
    assert sorted(scalars["profview/iteration_gap_ms"]) == trace["step"].tolist()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = (tmp_path / "mlruns").as_uri()
    assert main(["export", str(out), "--to", "mlflow", "--tracking-uri", store]) == 0
    run_id = capsys.readouterr().err.split("MLflow run ")[1].split()[0]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client, _ = mlflow_run(store, run_id)
    assert sorted(mlflow_metric(client, run_id, "profview/data_wait_ms")) == measured
    assert sorted(mlflow_metric(client, run_id, "profview/total_ms")) == trace["step"].tolist()

"""`ProfviewProfiler(log_to_trackers=True)` (Lightning's profiler slot) logs into the Trainer's
TensorBoard and MLflow loggers as `ProfviewCallback(log_to_trackers=True)` does
(tests/e2e/test_integration_lightning.py): read back with TensorBoard's EventAccumulator and MlflowClient."""

from __future__ import annotations

import pytest

from support.lightning_loops import lightning_mlp, random_loader
from support.tracker_readback import assert_lightning_loggers_hold_the_run, expected, tensorboard_run

pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def L():
    pytest.importorskip("torch")
    return pytest.importorskip("lightning")


def test_the_profiler_entry_logs_the_steps_live_into_the_trainers_loggers(L, torch_one_thread, tmp_path, monkeypatch):
    from profiler.integrations.lightning import ProfviewProfiler

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store without it
    store = (tmp_path / "mlruns").as_uri()
    tb = L.pytorch.loggers.TensorBoardLogger(str(tmp_path / "tb"), name="pl")
    ml = L.pytorch.loggers.MLFlowLogger(experiment_name="pl", tracking_uri=store)
    profiler = ProfviewProfiler(tmp_path / "prof", host_counters=False, log_to_trackers=True)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        max_steps=6,
        log_every_n_steps=2,
        logger=[tb, ml],
        profiler=profiler,
        enable_checkpointing=False,
        limit_val_batches=0,
    )
    trainer.fit(lightning_mlp(L, torch_one_thread), random_loader(torch_one_thread, 64))
    assert profiler.lines and "analysed into" in profiler.lines[0]
    assert_lightning_loggers_hold_the_run(tb.log_dir, store, ml.run_id, tmp_path / "prof", 6)


def test_without_the_option_nothing_is_logged(L, torch_one_thread, tmp_path):
    from profiler.integrations.lightning import ProfviewProfiler

    tb = L.pytorch.loggers.TensorBoardLogger(str(tmp_path / "tb"), name="pl")
    profiler = ProfviewProfiler(tmp_path / "prof", host_counters=False)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        max_steps=4,
        log_every_n_steps=2,
        logger=[tb],
        profiler=profiler,
        enable_checkpointing=False,
        limit_val_batches=0,
    )
    trainer.fit(lightning_mlp(L, torch_one_thread), random_loader(torch_one_thread, 64))
    assert expected(tmp_path / "prof")[0]["step"].tolist() == list(range(4))
    scalars, texts = tensorboard_run(tb.log_dir)
    assert not [t for t in [*scalars, *texts] if t.startswith("profview/")]

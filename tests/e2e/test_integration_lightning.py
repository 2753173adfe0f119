"""profiler.integrations.lightning (ProfviewProfiler and ProfviewCallback) on a real lightning.Trainer.

A small MLP trains on random tensors on the CPU. Known sleeps are injected where Lightning
fetches data, validates and saves checkpoints, and the analysed outputs must show them where
they belong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from support.cli import REPO
from support.lightning_loops import BATCH, lightning_mlp, random_loader

pytestmark = pytest.mark.timing

N_STEPS = 6  # optimizer steps of the accumulation run
ACCUMULATION = 2
EVERY = 3  # validation and checkpoint every 3 optimizer steps (6 batches): after steps 3 and 6
SLEEP_S = 0.4  # injected into each validation (on_validation_epoch_end) and save (on_save_checkpoint)
MARGIN_S = 4.0  # generous: the machine may be busy
ITEM_SLEEP_S = 0.025  # per sample in the data-bound run: 4 samples x 2 micro-batches = 200 ms a step


def test_missing_lightning_is_one_clear_sentence():
    code = (
        "import sys; sys.modules['lightning'] = None; sys.modules['pytorch_lightning'] = None\n"
        "try:\n    import profiler.integrations.lightning\n"
        "except ImportError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "profiler.integrations.lightning needs lightning" in r.stdout
    assert "pip install 'profview[lightning]'" in r.stdout


@pytest.fixture(scope="module")
def L():
    pytest.importorskip("torch")
    return pytest.importorskip("lightning")


def _trainer(L, tmp: Path, **kw):
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp),
        accumulate_grad_batches=ACCUMULATION,
        **kw,
    )


def _spans(out: Path) -> pd.DataFrame:
    """Phases and spans of the timeline, in ms from the recording's origin."""
    events = json.loads((out / "timeline_0.json").read_text())["traceEvents"]
    rows = [
        (e["cat"], e["name"], e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("phase", "span")
    ]
    return pd.DataFrame(rows, columns=["cat", "name", "start_ms", "end_ms"]).assign(
        dur_ms=lambda d: d.end_ms - d.start_ms
    )


def _steps(out: Path) -> pd.DataFrame:
    st = pd.read_csv(out / "step_trace_0.csv")
    st["end_ms"] = st["start_ms"] + st["total_ms"]
    st["bp_end_ms"] = st["start_ms"] + (st["bp_end_unix_ns"] - st["start_unix_ns"]) / 1e6
    return st


@pytest.fixture(scope="module")
def accumulation_run(L, torch_one_thread, tmp_path_factory):
    """ProfviewProfiler: 6 optimizer steps of 2 micro-batches; validation and a checkpoint after steps 3 and 6."""
    from profiler.integrations.lightning import ProfviewProfiler

    torch = torch_one_thread
    tmp = tmp_path_factory.mktemp("pl_accumulation")
    profiler = ProfviewProfiler(tmp / "prof", host_counters=False)
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp / "ckpt", every_n_train_steps=EVERY, save_top_k=-1)
    trainer = _trainer(
        L, tmp, max_steps=N_STEPS, val_check_interval=EVERY * ACCUMULATION, profiler=profiler, callbacks=[checkpoint]
    )  # the sanity check validates too: not recorded
    model = lightning_mlp(L, torch, SLEEP_S)
    trainer.fit(model, random_loader(torch, 64), random_loader(torch, 8))
    return trainer, profiler, model, tmp / "prof"


@pytest.fixture(scope="module")
def data_bound_run(L, torch_one_thread, tmp_path_factory):
    """ProfviewCallback next to Lightning's SimpleProfiler, with a slow dataset."""
    from profiler.integrations.lightning import ProfviewCallback

    torch = torch_one_thread
    tmp = tmp_path_factory.mktemp("pl_data_bound")
    callback = ProfviewCallback(tmp / "prof", host_counters=False)
    trainer = _trainer(
        L, tmp, max_steps=8, profiler="simple", callbacks=[callback], enable_checkpointing=False, limit_val_batches=0
    )
    simple = trainer.profiler
    trainer.fit(lightning_mlp(L, torch), random_loader(torch, 400, ITEM_SLEEP_S))
    return trainer, callback, simple, tmp / "prof"


def test_one_profiler_step_per_optimizer_step(accumulation_run):
    trainer, profiler, model, out = accumulation_run
    assert trainer.global_step == N_STEPS
    st = _steps(out)
    assert list(st["step"]) == list(range(N_STEPS))  # 12 micro-batches, 6 steps
    assert set(st["fp_start_source"]) == {"marked"} and set(st["bp_end_source"]) == {"marked"}
    spans = _spans(out)
    for phase in ("forward", "backward"):
        assert (spans["name"] == phase).sum() == N_STEPS * ACCUMULATION
    assert (spans["name"] == "optimizer").sum() == N_STEPS


def test_summary_says_where_the_outputs_are(accumulation_run):
    _, profiler, _, out = accumulation_run
    assert len(profiler.lines) == 1 and str(out) in profiler.lines[0]  # the analysis's one line
    assert "verdict:" in profiler.lines[0] and f"Next: profview {out}" in profiler.lines[0]
    assert (out / "report_0.json").is_file()


@pytest.mark.parametrize("name", ["evaluate", "save_checkpoint"])
def test_validation_and_saving_are_spans_in_the_tail_of_their_step(accumulation_run, name):
    _, _, model, out = accumulation_run
    assert model.validations == 3  # the sanity check and two during training
    spans = _spans(out).query(f"cat == 'span' and name == '{name}'").sort_values("start_ms")
    st = _steps(out)
    assert len(spans) == N_STEPS // EVERY  # the sanity check's validation is not recorded
    for span, step in zip(spans.itertuples(), (EVERY - 1, 2 * EVERY - 1)):
        assert SLEEP_S * 1e3 <= span.dur_ms <= (SLEEP_S + MARGIN_S) * 1e3
        row = st.loc[st["step"] == step].iloc[0]
        assert row.bp_end_ms <= span.start_ms and span.end_ms <= row.end_ms + 0.5
        assert row.tail_ms >= span.dur_ms


def test_data_bound_run_is_input_bound(data_bound_run):
    _, callback, _, out = data_bound_run
    report = json.loads((out / "report_0.json").read_text())
    assert report["verdict"] == "input_bound", report["headline"]
    st = _steps(out).iloc[1:]  # step 0 also starts the loader
    data = _spans(out).query("name == 'data'")
    data = data.assign(
        step=pd.cut(data["start_ms"], [*st["start_ms"], st["end_ms"].iloc[-1]], labels=st["step"], right=False)
    ).dropna()
    per_step = data.groupby("step", observed=True)["dur_ms"].sum()
    expected_ms = ACCUMULATION * BATCH * ITEM_SLEEP_S * 1e3  # 200 ms: at least half of every step
    assert len(per_step) == len(st)
    assert (per_step.to_numpy() >= 0.8 * expected_ms).all()
    assert (per_step.to_numpy() >= 0.5 * st["total_ms"].to_numpy()).all()
    assert callback.lines and "verdict: input_bound" in callback.lines[0]


def test_callback_keeps_the_users_profiler(data_bound_run, L):
    trainer, _, simple, _ = data_bound_run
    assert trainer.profiler is simple  # put back after the fit
    assert isinstance(simple, L.pytorch.profilers.SimpleProfiler)
    assert len(simple.recorded_durations["run_training_batch"]) == 8 * ACCUMULATION


def test_log_to_trackers_writes_the_steps_live_into_the_trainers_loggers(L, torch_one_thread, tmp_path, monkeypatch):
    """A TensorBoardLogger and an MLFlowLogger: every step's phases land in both runs, equal to
    step_trace_0.csv; steps are logged every log_every_n_steps (before fit ends), the verdict at the end."""
    from profiler.integrations.lightning import ProfviewCallback

    from support.tracker_readback import assert_lightning_loggers_hold_the_run

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store without it
    store = (tmp_path / "mlruns").as_uri()
    tb = L.pytorch.loggers.TensorBoardLogger(str(tmp_path / "tb"), name="pl")
    ml = L.pytorch.loggers.MLFlowLogger(experiment_name="pl", tracking_uri=store)
    callback = ProfviewCallback(tmp_path / "prof", host_counters=False, log_to_trackers=True, verbose=False)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        max_steps=6,
        log_every_n_steps=2,
        logger=[tb, ml],
        callbacks=[callback],
        enable_checkpointing=False,
        limit_val_batches=0,
    )
    trainer.fit(lightning_mlp(L, torch_one_thread), random_loader(torch_one_thread, 64))
    assert_lightning_loggers_hold_the_run(tb.log_dir, store, ml.run_id, tmp_path / "prof", 6)

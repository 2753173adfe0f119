"""profiler.integrations.transformers.ProfviewCallback on a real transformers.Trainer.

A tiny randomly initialised BERT (built from a config: nothing is downloaded) trains on random
token ids on the CPU. Known sleeps are injected where the Trainer fetches data, evaluates and
saves, and the analysed outputs must show them where they belong.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.timing

REPO = Path(__file__).resolve().parents[2]

N_STEPS = 6  # optimizer steps of the accumulation run
ACCUMULATION = 2
BATCH = 2
EVAL_EVERY = 3  # evaluation and checkpoint every 3 optimizer steps: after steps 3 and 6
SLEEP_S = 0.4  # injected into each evaluation (compute_metrics) and each save (save_model)
MARGIN_S = 4.0  # generous: the machine may be busy
ITEM_SLEEP_S = 0.05  # per sample in the data-bound run: 4 samples = 200 ms of data a step


# ---- without transformers: optional, with a clear message ----------------------------------------


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_import_profiler_imports_no_framework():
    r = _python(
        "import sys, profiler, profiler.integrations; "
        "print(sorted(m for m in ('transformers', 'lightning', 'pytorch_lightning') if m in sys.modules))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_missing_transformers_is_one_clear_sentence():
    r = _python(
        "import sys; sys.modules['transformers'] = None\n"
        "try:\n    import profiler.integrations.transformers\n"
        "except ImportError as e:\n    print(e)\n"
    )
    assert r.returncode == 0, r.stderr
    assert "profiler.integrations.transformers needs transformers" in r.stdout
    assert "pip install 'profview[transformers]'" in r.stdout


# ---- a real Trainer ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("torch")
    return pytest.importorskip("transformers")


def _dataset(torch, n: int, item_sleep_s: float = 0.0):
    class RandomTokens(torch.utils.data.Dataset):
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 100, (n, 8), generator=g)
            self.labels = torch.randint(0, 2, (n,), generator=g)

        def __len__(self) -> int:
            return n

        def __getitem__(self, i):
            if item_sleep_s:
                time.sleep(item_sleep_s)  # a slow input pipeline
            return {
                "input_ids": self.ids[i],
                "attention_mask": torch.ones(8, dtype=torch.long),
                "labels": self.labels[i],
            }

    return RandomTokens()


def _model(hf, torch):
    torch.manual_seed(0)
    config = hf.BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    return hf.BertForSequenceClassification(config)


def _train(hf, torch, tmp: Path, *, max_steps: int, item_sleep_s: float = 0.0, evaluate: bool = False, **cb_kwargs):
    from profiler.integrations.transformers import ProfviewCallback

    class SlowSaveTrainer(hf.Trainer):
        """A real Trainer whose checkpoints take a known extra time to write."""

        def save_model(self, output_dir=None, _internal_call=False):
            time.sleep(SLEEP_S)
            return super().save_model(output_dir, _internal_call)

    def slow_metrics(prediction):
        time.sleep(SLEEP_S)  # runs inside Trainer.evaluate()
        return {"answer": 42.0}

    every = dict(eval_strategy="steps", eval_steps=EVAL_EVERY, save_strategy="steps", save_steps=EVAL_EVERY)
    args = hf.TrainingArguments(
        output_dir=str(tmp / "trainer"),
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=ACCUMULATION,
        max_steps=max_steps,
        logging_steps=2,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **(every if evaluate else dict(eval_strategy="no", save_strategy="no")),
    )
    callback = ProfviewCallback(tmp / "prof", host_counters=False, **cb_kwargs)
    trainer = SlowSaveTrainer(
        model=_model(hf, torch),
        args=args,
        train_dataset=_dataset(torch, 400, item_sleep_s),
        eval_dataset=_dataset(torch, 8),
        compute_metrics=slow_metrics if evaluate else None,
        callbacks=[callback],
    )
    trainer.train()
    return trainer, callback


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
def accumulation_run(hf, torch_one_thread, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf_accumulation")
    trainer, callback = _train(hf, torch_one_thread, tmp, max_steps=N_STEPS, evaluate=True)
    return trainer, callback, tmp / "prof"


@pytest.fixture(scope="module")
def data_bound_run(hf, torch_one_thread, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf_data_bound")
    trainer, callback = _train(hf, torch_one_thread, tmp, max_steps=8, item_sleep_s=ITEM_SLEEP_S)
    return trainer, callback, tmp / "prof"


def test_one_profiler_step_per_optimizer_step(accumulation_run):
    trainer, callback, out = accumulation_run
    assert trainer.state.global_step == N_STEPS
    st = _steps(out)
    assert list(st["step"]) == list(range(N_STEPS))  # 12 micro-batches, 6 steps
    assert set(st["fp_start_source"]) == {"marked"} and set(st["bp_end_source"]) == {"marked"}
    # every step fetched its two micro-batches inside one data phase, before its first forward
    data = _spans(out).query("name == 'data'")
    assert len(data) == N_STEPS
    for row, (_, d) in zip(st.itertuples(), data.sort_values("start_ms").iterrows()):
        assert row.start_ms - 0.5 <= d.start_ms and d.end_ms <= row.start_ms + row.iteration_gap_ms + 0.5


def test_outputs_are_reported(accumulation_run):
    _, callback, out = accumulation_run
    names = {Path(p).name for p in callback.outputs}
    assert {"step_trace_0.csv", "report_0.json", "timeline_0.json"} <= names
    assert len(callback.summary) == 1 and str(out) in callback.summary[0]  # the analysis's one line
    assert "verdict:" in callback.summary[0] and f"Next: profview {out}" in callback.summary[0]


@pytest.mark.parametrize("name", ["evaluate", "save_checkpoint"])
def test_evaluation_and_saving_are_spans_in_the_tail_of_their_step(accumulation_run, name):
    _, _, out = accumulation_run
    spans = _spans(out).query(f"cat == 'span' and name == '{name}'").sort_values("start_ms")
    st = _steps(out)
    # after optimizer steps 3 and 6, i.e. in profiler steps 2 and 5, after their backward pass
    assert len(spans) == N_STEPS // EVAL_EVERY
    for span, step in zip(spans.itertuples(), (EVAL_EVERY - 1, 2 * EVAL_EVERY - 1)):
        assert SLEEP_S * 1e3 <= span.dur_ms <= (SLEEP_S + MARGIN_S) * 1e3
        row = st.loc[st["step"] == step].iloc[0]
        assert row.bp_end_ms <= span.start_ms and span.end_ms <= row.end_ms + 0.5
        assert row.tail_ms >= span.dur_ms


def test_data_bound_run_is_input_bound(data_bound_run):
    _, callback, out = data_bound_run
    report = json.loads((out / "report_0.json").read_text())
    assert report["verdict"] == "input_bound", report["headline"]
    st = _steps(out).iloc[1:]  # step 0 also starts the loader
    data = _spans(out).query("name == 'data'").sort_values("start_ms").iloc[1:]
    # 2 micro-batches x 2 samples x 50 ms = 200 ms of data a step: at least half of every step
    expected_ms = ACCUMULATION * BATCH * ITEM_SLEEP_S * 1e3
    assert (data["dur_ms"].to_numpy() >= 0.8 * expected_ms).all()
    assert (data["dur_ms"].to_numpy() >= 0.5 * st["total_ms"].to_numpy()).all()
    assert (st["iteration_gap_ms"] >= data["dur_ms"].to_numpy() - 0.5).all()


def test_attach_false_marks_steps_from_callbacks(hf, torch_one_thread, tmp_path):
    _, callback = _train(hf, torch_one_thread, tmp_path, max_steps=3, attach=False)
    st = _steps(tmp_path / "prof")
    assert list(st["step"]) == [0, 1, 2]
    assert set(st["fp_start_source"]) == {"marked"} and set(st["bp_end_source"]) == {"marked"}
    assert (_spans(tmp_path / "prof").query("name == 'optimizer'")["dur_ms"] > 0).sum() == 3


def test_log_to_trackers_writes_the_steps_live_into_the_trainers_tensorboard_and_mlflow(
    hf, torch_one_thread, tmp_path, monkeypatch
):
    """report_to=["tensorboard", "mlflow"]: every step's phases land in the Trainer's TensorBoard run and MLflow
    run, equal to step_trace_0.csv; steps are logged at the Trainer's logging steps (before training ends),
    the verdict at the end."""
    from mlflow.tracking import MlflowClient

    from profiler.integrations.transformers import ProfviewCallback

    from support.tracker_readback import assert_steps_match, expected, mlflow_metric, tensorboard_run

    store = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store without it
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "hf")
    # a fresh process: an earlier test's MLflowLogger (Lightning) may have set mlflow's process-wide URI,
    # which outranks the environment variable the Trainer's MLflowCallback relies on
    from mlflow.tracking._tracking_service import utils as mlflow_tracking

    monkeypatch.setattr(mlflow_tracking, "_tracking_uri", None)
    args = hf.TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        per_device_train_batch_size=BATCH,
        max_steps=6,
        logging_steps=2,
        report_to=["tensorboard", "mlflow"],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        eval_strategy="no",
        save_strategy="no",
    )
    callback = ProfviewCallback(tmp_path / "prof", host_counters=False, log_to_trackers=True, verbose=False)
    trainer = hf.Trainer(
        model=_model(hf, torch_one_thread),
        args=args,
        train_dataset=_dataset(torch_one_thread, 64),
        callbacks=[callback],
    )
    trainer.train()
    trace, report = expected(tmp_path / "prof")
    assert trace["step"].tolist() == list(range(6))
    # TensorBoard: profview's event file sits in the Trainer's run directory, beside its own
    (run_dir,) = (tmp_path / "trainer" / "runs").iterdir()
    scalars, texts = tensorboard_run(run_dir)
    assert "train/loss" in scalars  # the Trainer's own scalars, same run
    assert_steps_match(scalars, trace)
    assert texts["profview/verdict"] == report["verdict"]
    # MLflow: the run the Trainer's MLflowCallback started
    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("hf").experiment_id])
    assert "loss" in run.data.metrics  # the Trainer's own metrics, same run
    values = {
        f"profview/{c}": mlflow_metric(client, run.info.run_id, f"profview/{c}")
        for c in ("iteration_gap_ms", "data_wait_ms", "fp_bp_ms", "tail_ms", "total_ms")
    }
    assert_steps_match({k: {s: v for s, (v, _) in h.items()} for k, h in values.items()}, trace, rel=1e-9)
    assert run.data.tags["profview/verdict"] == report["verdict"]
    # live: the first steps were logged at the Trainer's logging steps, before the end-of-training summary
    end = mlflow_metric(client, run.info.run_id, "profview/mean_steady_step_ms")
    summary_ms = max(t for _, t in end.values())
    assert values["profview/total_ms"][0][1] < summary_ms

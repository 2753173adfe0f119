"""MindSpore training runs for tests/e2e/test_integration_mindspore.py, in their own process.

    python tests/support/mindspore_worker.py OUT_DIR

A small CNN (Conv2d + BatchNorm + ReLU, Dense head) on 16x16x3 batches of 16 trains on the CPU
with `Model.train(..., callbacks=[ProfviewCallback(...)])`. Scenarios, each into OUT_DIR/<name>:

- fast: a GeneratorDataset over arrays in memory, 2 epochs of 6 steps, graph mode, MindSpore's own
  profiler beside profview (`mindspore_profiler=True`), a LossMonitor after the callback;
- slow: the same dataset sleeping SLOW_SAMPLE_S per sample (a batch waits 16 x that, about ten times
  a step's compute), 1 epoch of SLOW_STEPS steps, `dataset_sink_mode=True` (the CPU backend trains
  without sink), with the pipeline's buffer queues at 1 batch: with MindSpore's default (16) the
  seconds step 0 spends compiling the graph let the pipeline bank a whole short epoch ahead;
- own_profiler: the user runs MindSpore's profiler into OUT_DIR/own_profiler/ms and gives its
  directory (`mindspore_profiler=DIR`); it is stopped after Model.train, so profview's analysis at
  the end of training cannot merge it yet (`profview analyse` later does);
- fit: `Model.fit` with a validation dataset evaluated after each of 2 epochs of 3 steps (MindSpore
  enters and leaves the callbacks' context for each evaluation);
- crash: a callback after profview's raises in the 3rd step's end; the worker catches the exception
  (the raw store must be complete: `profview analyse` analyses it);
- pynative: a PyNative custom loop with plain Profiler.step(), profiler.iterate() over the dataset
  and a MindSporeCapture source.

Writes OUT_DIR/facts.json: steps trained per scenario, MindSpore's version, the callbacks' summaries.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.dataset import GeneratorDataset
from mindspore.train import Callback, LossMonitor, Model

from profiler import Profiler
from profiler.capture.mindspore import MindSporeCapture
from profiler.integrations.mindspore import ProfviewCallback

BATCH = 16
SLOW_SAMPLE_S = 0.025  # 16 samples a batch: 400 ms of data a step, ~10x a step's compute (~40 ms;
SLOW_STEPS = 10  # ~240 ms measured with the 2 cores shared by a dozen jobs: still input-bound)


class Samples:
    """Random-access samples held in memory; `sleep_s` per sample makes a slow input pipeline."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        self.y = (np.arange(n) % 10).astype(np.int32)
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        # numpy arrays, not numpy scalars: MindSpore 2.10 converts rows with np.array(x, copy=False), which
        # numpy 2 refuses for a scalar (it needs a copy)
        return self.x[i], self.y[i : i + 1].reshape(())


class CNN(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.SequentialCell(
            [nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU(), nn.Flatten()]
        )
        self.head = nn.Dense(16 * 16 * 16, 10)

    def construct(self, x):
        return self.head(self.body(x))


def dataset(steps: int, sleep_s: float = 0.0):
    return GeneratorDataset(Samples(steps * BATCH, sleep_s), ["x", "y"], shuffle=False).batch(BATCH)


def model() -> Model:
    net = CNN()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return Model(net, loss, nn.Momentum(net.trainable_params(), 0.01, 0.9), metrics={"loss": nn.Loss()})


class Crash(Callback):
    """Raises at the end of step `at` (1-based, as MindSpore counts)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_train_step_end(self, run_context) -> None:
        if run_context.original_args().cur_step_num == self.at:
            raise RuntimeError("crash injected by the test")


def train(out: Path, epochs: int, steps: int, *, sleep_s: float = 0.0, sink: bool = False, **callback_kwargs) -> dict:
    callback = ProfviewCallback(out, host_counters=False, verbose=False, **callback_kwargs)
    model().train(epochs, dataset(steps, sleep_s), callbacks=[callback, LossMonitor(1000)], dataset_sink_mode=sink)
    return {"steps_trained": epochs * steps, "summary": callback.summary, "outputs": len(callback.outputs)}


def pynative_loop(out: Path, steps: int) -> dict:
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = CNN()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    profiler = Profiler(out, host_counters=False, sources=[MindSporeCapture()])
    for x, y in profiler.iterate(dataset(steps, SLOW_SAMPLE_S).create_tuple_iterator()):
        profiler.mark("fp_start")
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        loss.asnumpy()  # wait for the step (PyNative runs asynchronously)
        profiler.mark("bp_end")
        profiler.step()
    profiler.analyse(quiet=True)
    ms.set_context(mode=ms.GRAPH_MODE)
    return {"steps_trained": steps}


def main(out: Path) -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    facts = {"mindspore": ms.__version__}
    facts["fast"] = train(out / "fast", 2, 6, mindspore_profiler=True)
    prefetch = ms.dataset.config.get_prefetch_size()
    ms.dataset.config.set_prefetch_size(1)
    facts["slow"] = train(out / "slow", 1, SLOW_STEPS, sleep_s=SLOW_SAMPLE_S, sink=True)
    ms.dataset.config.set_prefetch_size(prefetch)
    from mindspore.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    own = profile(
        activities=[ProfilerActivity.CPU], on_trace_ready=tensorboard_trace_handler(str(out / "own_profiler" / "ms"))
    )
    own.start()
    facts["own_profiler"] = train(out / "own_profiler" / "prof", 1, 4, mindspore_profiler=out / "own_profiler" / "ms")
    own.stop()
    fit = ProfviewCallback(out / "fit", host_counters=False, verbose=False)
    model().fit(2, dataset(3), dataset(2), callbacks=[fit])
    facts["fit"] = {"steps_trained": 6, "summary": fit.summary}
    try:
        model().train(1, dataset(6), callbacks=[ProfviewCallback(out / "crash", host_counters=False), Crash(3)])
    except RuntimeError as exc:
        facts["crash"] = {"steps_ended": 3, "error": str(exc)[:200]}
    facts["pynative"] = pynative_loop(out / "pynative", 6)
    (out / "facts.json").write_text(json.dumps(facts, indent=1, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

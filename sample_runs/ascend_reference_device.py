"""A numpy MLP trained on the reference Ascend-style device, fed per step and then in sink mode.

    python sample_runs/ascend_reference_device.py [--out profiler_data/ascend_ref] [--steps 30] \
[--loader-ms 15] [--decode 0]
    profview profiler_data/ascend_ref/feed      (and .../sink)

No NPU needed: `AscendReferenceDevice` runs every op (numpy kernels) on its own stream threads,
asynchronously to this loop, and writes an Ascend HWTS task log and training trace that
`analyse()` parses like a real device's. Forward and backward run on stream 0, the gradient
all-reduce on stream 1; the loader sleeps `--loader-ms` per batch (a slow input pipeline) and can
also decode each batch with `--decode N` passes of CPU work (a quarter of a step's compute each: a
loader whose cost grows with a busy machine as the step's does).

* feed: each batch is loaded and copied to the device inside the step, so the device idles for
  the loader's time between iterations (the iteration gap).
* sink: `dev.data_queue(loader, depth=4)` stages batches on the device ahead of compute, so
  loading overlaps the previous iterations and the gap collapses.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# Run as a script: one BLAS thread per device stream (the streams are the device's parallelism; a
# multi-threaded BLAS inside each stream oversubscribes the cores and its spinning threads stall
# each other's kernels). Must happen before numpy is imported; importing this module changes nothing.
if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from profiler import Profiler
from viewer.inputs import load_input
from viewer.stats import verdict_phases

try:
    from profview_reference_device.device import AscendReferenceDevice, Task
except ImportError:  # its own distribution, installed as a profview.sources plug-in
    sys.exit(
        "ascend_reference_device.py needs the reference device installed: "
        "pip install --no-deps -e sample_runs/reference_device (scripts/setup_env.sh does)."
    )

BATCH, FEATURES, HIDDEN, CLASSES = 256, 1024, 2048, 10
REPLICAS = 4  # the all-reduce averages this many (simulated) replicas' gradients
LR = 0.05
NET, GRAD = "Default/network", "Gradients/Default/network"


def relu(h: np.ndarray) -> np.ndarray:
    return np.maximum(h, 0)


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def cross_entropy(prob: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(-np.log(prob[np.arange(len(y)), y] + 1e-9).mean(), dtype=np.float32)


def cross_entropy_grad(prob: np.ndarray, y: np.ndarray) -> np.ndarray:
    g = prob.copy()
    g[np.arange(len(y)), y] -= 1
    return g / len(y)


def relu_grad(grad: np.ndarray, h: np.ndarray) -> np.ndarray:
    return grad * (h > 0)


def all_reduce_mean(grad: np.ndarray) -> np.ndarray:
    """The mean of REPLICAS replicas' gradients (here all equal): the arithmetic of a ring all-reduce."""
    return np.stack([grad] * REPLICAS).mean(axis=0)


def sgd(weight: np.ndarray, grad: np.ndarray) -> np.ndarray:
    weight -= LR * grad
    return weight


class NumpyMLP:
    """A two-layer MLP whose every op is launched on a reference device (names in MindSpore style)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.w1 = (rng.standard_normal((FEATURES, HIDDEN)) * 0.03).astype(np.float32)
        self.w2 = (rng.standard_normal((HIDDEN, CLASSES)) * 0.03).astype(np.float32)

    def step(self, dev: AscendReferenceDevice, x: np.ndarray | Task, y: np.ndarray | Task) -> Task:
        """Queue one training iteration (forward, backward, all-reduce on stream 1, update); returns the loss."""
        launch = dev.launch
        dev.fp_start()
        h = launch(f"{NET}/fc1/MatMul-op1", "MatMul", np.matmul, x, self.w1)
        a = launch(f"{NET}/ReLU-op2", "ReLU", relu, h)
        logits = launch(f"{NET}/fc2/MatMul-op3", "MatMul", np.matmul, a, self.w2)
        prob = launch(f"{NET}/Softmax-op4", "Softmax", softmax, logits)
        loss = launch(
            f"{NET}/SoftmaxCrossEntropyWithLogits-op5", "SoftmaxCrossEntropyWithLogits", cross_entropy, prob, y
        )
        g = launch(
            f"{GRAD}/SoftmaxCrossEntropyWithLogitsGrad-op6",
            "SoftmaxCrossEntropyWithLogitsGrad",
            cross_entropy_grad,
            prob,
            y,
        )
        gw2 = launch(f"{GRAD}/fc2/MatMul-op7", "MatMul", lambda a_, g_: a_.T @ g_, a, g)
        ga = launch(f"{GRAD}/fc2/MatMul-op8", "MatMul", lambda g_, w: g_ @ w.T, g, self.w2)
        gh = launch(f"{GRAD}/ReluGrad-op9", "ReluGrad", relu_grad, ga, h)
        gw1 = launch(f"{GRAD}/fc1/MatMul-op10", "MatMul", lambda x_, g_: x_.T @ g_, x, gh)
        dev.bp_end()
        r1 = dev.all_reduce("Default/AllReduce-op11", all_reduce_mean, gw1, stream=1)
        r2 = dev.all_reduce("Default/AllReduce-op12", all_reduce_mean, gw2, stream=1)
        launch("Default/optimizer/ApplyMomentum-op13", "ApplyMomentum", sgd, self.w1, r1)
        launch("Default/optimizer/ApplyMomentum-op14", "ApplyMomentum", sgd, self.w2, r2)
        return loss


def batches(
    steps: int, loader_ms: float, seed: int = 1, pool: int = 8, decode: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A slow input pipeline: each batch takes `loader_ms` (a sleep standing in for reading, which uses
    no CPU: the batches cycle through a pool made up front) plus `decode` passes of CPU work (one
    BATCH x FEATURES x FEATURES matmul each, about a quarter of a step's compute; the batch is unchanged)."""
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    xs = [rng.standard_normal((BATCH, FEATURES)).astype(np.float32) for _ in range(pool)]
    data = [(x, np.argmax(x @ w_true, axis=1)) for x in xs]
    mix = np.eye(FEATURES, dtype=np.float32)
    for i in range(steps):
        time.sleep(loader_ms / 1e3)
        x, y = data[i % pool]
        for _ in range(decode):
            x = x @ mix  # the identity: the work of a decode, the same batch out
        yield x, y


def train(out: Path, steps: int, sink: bool, loader_ms: float, depth: int = 4, decode: int = 0) -> list[float]:
    """Train for `steps` iterations, profiled into `out`; the host reads the loss after every iteration."""
    profiler = Profiler(out, host_counters=False, gpu_counters=False)
    dev = AscendReferenceDevice(profiler, device_id=0, streams=2)
    model = NumpyMLP(np.random.default_rng(0))
    source = batches(steps, loader_ms, decode=decode)
    feed = (
        dev.data_queue(source, depth=depth)
        if sink
        # sink: staged ahead on a probed queue
        else profiler.iterate((dev.to_device(x), dev.to_device(y)) for x, y in source)
    )  # feed: each fetch timed
    losses = []
    for x, y in feed:
        loss = model.step(dev, x, y)
        dev.iter_end().result()  # graph-mode style: the host waits for the whole iteration
        losses.append(float(loss.result()))
        profiler.step()
    profiler.analyse(progress=False)
    return losses


def device_phases(out: Path) -> pd.DataFrame:
    """The device step trace's phases as `profview --summary` shows them (the verdict's steady steps)."""
    run = load_input(out)[0]
    return verdict_phases(run.step_trace, run.report)


def summary(phases: pd.DataFrame) -> str:
    """Median phases of the device step trace."""
    m = phases["median_ms"]
    return (
        f"median step {m['step']:.1f} ms: iteration gap {m['iteration gap']:.1f} ms, "
        f"forward+backward {m['forward + backward']:.1f} ms, tail {m['tail']:.1f} ms "
        f"(all-reduce {m['all-reduce']:.1f} ms)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("profiler_data/ascend_ref"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--loader-ms", type=float, default=15.0)
    ap.add_argument("--decode", type=int, default=0, help="CPU decode passes per batch (a quarter step each)")
    args = ap.parse_args()
    gaps = {}
    for mode in ("feed", "sink"):
        losses = train(args.out / mode, args.steps, mode == "sink", args.loader_ms, decode=args.decode)
        phases = device_phases(args.out / mode)
        gaps[mode] = phases.at["iteration gap", "median_ms"]
        print(f"[{mode}] loss {losses[0]:.3f} -> {losses[-1]:.3f}; {summary(phases)}")
    loader = f"{args.loader_ms:g} ms" + (f" + {args.decode} decode pass(es)" if args.decode else "")
    print(
        f"sink mode hides the {loader} loader: iteration gap {gaps['feed']:.1f} -> {gaps['sink']:.1f} ms. "
        f"See: profview {args.out / 'feed'} --compare {args.out / 'sink'}"
    )


if __name__ == "__main__":
    main()

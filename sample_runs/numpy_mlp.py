"""A framework-free training loop profiled with phase() / op() markers only.

    python sample_runs/numpy_mlp.py [--out profiler_data/numpy_mlp] [--steps 60]
    profview profiler_data/numpy_mlp

A two-layer MLP learns a synthetic 10-class problem with plain numpy. Each batch is "decoded"
on the host (a deliberately slow input step), then forward, backward and the SGD update run as
marked phases, with every matrix op timed as an op. The printed conclusion is read from the
files analyse() writes, the step figures as `profview --summary` shows them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from profiler import Profiler
from viewer.inputs import load_input
from viewer.stats import verdict_phases

BATCH, FEATURES, HIDDEN, CLASSES = 256, 512, 1024, 10


def make_batch(rng: np.random.Generator, w_true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic batch; the extra normalisation passes stand in for image decoding."""
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    for _ in range(6):  # the slow part of the input pipeline
        x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)
    y = np.argmax(x @ w_true, axis=1)
    return x, y


def train(out: Path, steps: int) -> Path:
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) * 0.03).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, CLASSES)) * 0.03).astype(np.float32)
    lr = 0.05
    p = Profiler(output_path=out)
    matmul = p.op("MatMul", op_type="MatMul")
    relu = p.op("ReLU", op_type="ReLU")
    softmax = p.op("Softmax", op_type="Softmax")
    matmul_grad = p.op("MatMulGrad", op_type="MatMul")
    relu_grad = p.op("ReLUGrad", op_type="ReLU")
    update = p.op("ApplySGD", op_type="ApplySGD")
    for _ in range(steps):
        with p.phase("data"):
            x, y = make_batch(rng, w_true)
        with p.phase("forward"):
            with matmul:
                h = x @ w1
            with relu:
                a = np.maximum(h, 0)
            with matmul:
                logits = a @ w2
            with softmax:
                e = np.exp(logits - logits.max(axis=1, keepdims=True))
                prob = e / e.sum(axis=1, keepdims=True)
        loss = float(-np.log(prob[np.arange(BATCH), y] + 1e-9).mean())
        with p.phase("backward"):
            g = prob.copy()
            g[np.arange(BATCH), y] -= 1
            g /= BATCH
            with matmul_grad:
                gw2 = a.T @ g
                ga = g @ w2.T
            with relu_grad:
                gh = ga * (h > 0)
            with matmul_grad:
                gw1 = x.T @ gh
        with p.phase("optimizer"):
            with update:
                w1 -= lr * gw1
                w2 -= lr * gw2
        p.counter("loss", loss)
        p.step()
    p.analyse()
    return out


def conclusion(out: Path) -> str:
    """The run's figures as `profview --summary` shows them (the verdict's steady steps), and its top op type."""
    run = load_input(out)[0]
    phases = verdict_phases(run.step_trace, run.report)
    m, share = phases["median_ms"], phases["share_pct"]
    top = run.op_type.iloc[0]
    return (
        f"median step {m['step']:.1f} ms: iteration gap {m['iteration gap']:.1f} ms "
        f"({share['iteration gap']:.0f} % of step time, the host 'decode'), forward+backward "
        f"{m['forward + backward']:.1f} ms, tail {m['tail']:.1f} ms; top op type {top['op_type']} "
        f"({top['share_pct']:.0f} % of op time). See: profview {out}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("profiler_data/numpy_mlp"))
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    train(args.out, args.steps)
    print(conclusion(args.out))


if __name__ == "__main__":
    main()

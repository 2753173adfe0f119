"""The kernel classifier's families and the compute finding's split and advice by family."""

from __future__ import annotations

import pandas as pd

from profiler.analysis.findings.device_compute import FIX, family_split, fix_for
from profiler.analysis.kernel_families import classify


def executions(*rows: tuple[str, str, int]) -> pd.DataFrame:
    """Executions (name, category, duration ns) back to back on one device."""
    start = 0
    out = []
    for name, category, dur in rows:
        out.append({"name": name, "category": category, "start_ns": start, "end_ns": start + dur})
        start += dur
    return classify(pd.DataFrame(out))


def test_a_compute_kernel_named_like_a_collective_is_split_and_advised():
    """A foreign or damaged trace can label a collective `kernel` with a compute category: its family is
    comm, which has no advice of its own; the split lists it and the advice is the general one (the
    KeyError 'comm' import-kineto, compare and --summary once raised)."""
    ex = executions(("c10d::allreduce_", "compute", 3_000_000), ("volta_sgemm_128x64_nn", "compute", 1_000_000))
    split = family_split(ex)
    assert list(split.index) == ["comm", "gemm"]
    assert split.loc["comm", "ms"] == 3.0 and split.loc["comm", "pct"] == 75.0
    for framework in ("torch", "mindspore", "plain", "jax"):
        assert fix_for(framework, "comm") == FIX.get(framework, FIX["plain"])["other"]
    assert fix_for("torch", "gemm") == FIX["torch"]["gemm"]


def test_the_split_gives_each_family_its_precisions():
    ex = executions(
        ("volta_sgemm_128x64_nn", "compute", 3_000_000),
        ("volta_h884gemm_64x64_ldg8_nn", "compute", 1_000_000),
        ("vectorized_elementwise_kernel<float>", "compute", 1_000_000),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", 5_000_000),
    )
    split = family_split(ex)
    assert split.loc["gemm", "ms"] == 4.0 and split.loc["gemm", "precisions"] == "float32 75 %, tensor cores 25 %"
    assert split.loc["elementwise", "pct"] == 20.0 and "memory" not in split.index  # copies are not compute

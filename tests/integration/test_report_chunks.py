"""The advisor's precision rule reads the op table a chunk of ops at a time (findings/precision.py: the charged rows,
their names coded, the input types read up to the first float64 one) and the float64 masks are spill files
(analysis/float64.py): the finding is the whole table's, bit for bit, for any chunk size, on real captures."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.advisor import resolve_thresholds
from profiler.analysis.findings import precision
from profiler.analysis.findings.base import CAST_OP_NAME, Context
from profiler.analysis.float64 import float64_charged, float64_module_charged
from profiler.analysis.results import RankData, analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.importers.kineto import read_kineto_trace
from profiler.postprocess.recording import load_rank

from support.recorded import RECORDED

#: the captures whose ops have float64 inputs (torch's record_shapes=True)
FLOAT64_TRACES = ["sampled_rank-0", "diff_test", "diff_control"]


def _data(captures, capture: str) -> RankData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = analyse_run(ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz")))
    return RankData(analysis, resolve_thresholds({"precision_waste_pct": 0}))


def _found(data: RankData) -> list[tuple[str, str, dict[str, float]]]:
    """The precision rule's findings on `data` (every threshold at 0): title, evidence and exact metrics."""
    needs = precision.Needs(data.steps, data.ops, data.float64_ops, data.float64_modules)
    ctx = Context(rank=0, framework="torch", thresholds=resolve_thresholds({"precision_waste_pct": 0}))
    return [(f.title, f.evidence, f.metrics) for f in precision.find(needs, ctx)]


@pytest.mark.parametrize("capture", FLOAT64_TRACES)
def test_precision_waste_found_a_chunk_at_a_time_is_the_whole_tables(captures, capture, monkeypatch, tmp_path):
    data = _data(captures, capture)
    ops, captured = data.ops, data.steps.captured
    charged = data.float64_ops & ops["step"].isin(captured["step"]).to_numpy()  # the whole table, as pandas has it
    n = len(captured)
    self_ms = pd.Series(ops["self_ns"].to_numpy(np.float64)[charged] / 1e6 / n, index=ops["name"].astype(str)[charged])
    top = self_ms.groupby(level=0).sum().sort_values(ascending=False).head(4)
    [(title, evidence, metrics)] = whole = _found(data)
    assert charged.sum() > 10 and len(top) >= 2, capture  # not vacuous
    assert metrics["self_ms_per_step"] == float(self_ms.sum())
    assert metrics["cast_ms_per_step"] == float(self_ms[self_ms.index.str.contains(CAST_OP_NAME)].sum())
    assert metrics["ops_per_step"] == charged.sum() / n
    assert ", ".join(f"{name} {ms:.2f} ms" for name, ms in top.items()) in evidence
    assert "found from the input types" in evidence
    for rows in (3, 64):
        monkeypatch.setattr(spill, "CHUNK_ROWS", rows)
        with spill.spilling(tmp_path, min_bytes=1):  # the charged rows, their names' ranks and times spilled
            assert _found(data) == whole, rows


@pytest.mark.parametrize("capture", FLOAT64_TRACES)
def test_the_float64_masks_of_a_spilled_run_are_spill_files(captures, capture, tmp_path):
    ops = read_kineto_trace(captures / "kineto" / f"{capture}.json.gz").ops
    plain = float64_charged(ops)
    no_types = ops.assign(dtypes="")  # nothing charged: the mask of no op
    with spill.spilling(tmp_path, min_bytes=1):
        spilled, none = float64_charged(ops), float64_charged(no_types)
    assert plain.sum() > 10 and spill.is_spilled(spilled) and spill.is_spilled(none)
    np.testing.assert_array_equal(spilled, plain)
    assert len(none) == len(ops) and not none.any()


def test_the_torch_buffering_steps_and_the_float64_mask_made_a_chunk_at_a_time_are_the_whole_ones(
    monkeypatch, tmp_path
) -> None:
    """RankData's torch buffering steps and float64 mask (results.py), a chunk of 1000 ops at a time, the mask in a
    spill file: those of the whole table, on a recorded loop whose torch ops run in every step."""
    run = load_rank(RECORDED / "scenarios" / "float64_ops_every_step", 0)
    ops = run.ops
    whole_steps = frozenset(ops.loc[ops["source"] == "torch", "step"].unique().tolist())
    whole_mask = float64_charged(ops) | float64_module_charged(ops, run.spans, run.threads)
    assert len(whole_steps) >= 8 and 0 < whole_mask.sum() < len(ops)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 1)
    with spill.spilling(tmp_path):
        data = RankData(analyse_run(run), resolve_thresholds({}))
        assert data.buffering_steps == whole_steps
        assert spill.is_spilled(data.float64_ops)
        np.testing.assert_array_equal(data.float64_ops, whole_mask)

"""Precision waste on the host (findings/precision.py), and annotations that are never ops.

The float64 charging rule is tested on hand-built op tables and on a real GPU capture (diff_test); the
annotation rule on every real Kineto capture in tests/data/kineto and on a live torch capture with
record_function ranges. The finding on real torch training loops is tests/e2e/test_precision_loops.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from profiler import Profiler  # noqa: E402
from profiler.analysis.float64 import float64_charged  # noqa: E402
from profiler.formats.tables import read_csv  # noqa: E402
from profiler.importers.kineto import _ANNOTATION_NAME, read_kineto_trace  # noqa: E402
from profiler.model import (  # noqa: E402
    COLLECTIVE_PREFIXES,
    OP_COLUMNS,
    conform,
)
from profiler.postprocess.imported import import_capture  # noqa: E402

TRACES = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "data" / "kineto").glob("*.json.gz"))


# --------------------------------------------------------------------------- the charging rule


def _ops(rows: list[tuple]) -> pd.DataFrame:
    """Host ops on one thread from (name, start, dur, self, dtypes) rows, all in step 0."""
    frame = pd.DataFrame(rows, columns=["name", "start_ns", "dur_ns", "self_ns", "dtypes"])
    return conform(
        frame.assign(device="cpu", stream="main", op_type=frame["name"], category="host", step=0), OP_COLUMNS
    )


def test_float64_ops_their_casts_and_what_runs_inside_them_are_charged() -> None:
    """A cast into float64 has float32 inputs itself: it is charged for the float64 copy_ inside it,
    and so is its allocation; a cast between other types, float32 ops, a float32 op scaled by a
    float64 number and a scope around float64 ops (forward) are not."""
    ops = _ops(
        [
            ("forward", 0, 1000, 100, ""),  # 0 scope: not charged
            ("aten::to", 10, 200, 5, '["float","Scalar"]'),  # 1 cast float -> double
            ("aten::_to_copy", 12, 190, 10, '["float","Scalar"]'),  # 2
            ("aten::empty_strided", 13, 20, 20, '["ScalarList"]'),  # 3 its allocation
            ("aten::copy_", 40, 150, 150, '["double","float","Scalar"]'),  # 4 the float64 copy
            ("aten::group_norm", 300, 300, 20, '["double","Scalar","double"]'),  # 5 a float64 op
            ("aten::native_group_norm", 305, 280, 260, '["double","double"]'),  # 6
            ("aten::empty", 310, 20, 20, '["ScalarList"]'),  # 7 inside a float64 op
            ("aten::to", 700, 50, 10, '["float","Scalar"]'),  # 8 cast float -> half
            ("aten::copy_", 705, 40, 40, '["c10::Half","float"]'),  # 9
            ("aten::mm", 800, 100, 100, '["float","float"]'),  # 10 float32 work
            ("aten::mul", 900, 30, 30, '["float","double","float"]'),  # 11 float32 op, float64 number
            ("aten::copy_", 940, 30, 30, '["double","double","Scalar"]'),  # 12 float64 data moved
        ]
    )
    charged = float64_charged(ops)
    assert np.flatnonzero(charged).tolist() == [1, 2, 3, 4, 5, 6, 7, 12]
    assert int(ops["self_ns"][charged].sum()) == 5 + 10 + 20 + 150 + 20 + 260 + 20 + 30


def test_no_input_types_no_charge() -> None:
    """Without record_shapes no op has input types: nothing is charged (no guess from names)."""
    ops = _ops([("aten::to", 0, 100, 100, ""), ("aten::native_group_norm", 200, 100, 100, "")])
    assert not float64_charged(ops).any()


# --------------------------------------------------------------------------- annotations are never ops


def _annotation_names(path: Path) -> set[str]:
    """What the trace itself says are annotations (record_function ranges, host and device side), read
    with the standard library, and torch's own range names written as cpu_op (`_ANNOTATION_NAME`:
    ProfilerStep#N, `## forward ##`, Optimizer.step#..., TorchScript's `forward`)."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return {e["name"] for e in events if e.get("cat") in ("user_annotation", "gpu_user_annotation")} | {
        e["name"] for e in events if e.get("cat") == "cpu_op" and _ANNOTATION_NAME.fullmatch(e["name"])
    }


def test_real_gpu_trace_with_a_little_float64_has_no_finding(captures: Path, tmp_path: Path) -> None:
    """diff_test (recorded with record_shapes) computes its loss in float64 (aten::log / sub / sum on
    double) and scales float32 tensors by float64 numbers: the former is charged (a few ms over the
    run, under the line), the latter not (else torch.compile's graph, one float64 input among
    hundreds, would be charged whole)."""
    path = captures / "kineto" / "diff_test.json.gz"
    ops = read_kineto_trace(path).ops
    charged = ops[float64_charged(ops)]
    names = set(charged["name"].astype(str))
    assert {"aten::log", "aten::sub"} <= names and "CompiledFunction" not in names
    muls = charged.loc[charged["name"] == "aten::mul", "dtypes"].astype(str)
    assert len(muls) and not muls.str.contains('"float"').any()  # mul(double, double) only
    assert 0 < charged["self_ns"].sum() / 1e6 < 10
    import_capture(path, tmp_path)
    report = json.loads(next(tmp_path.glob("report_*.json")).read_text())
    assert not [f for f in report["findings"] if f["kind"] == "precision_waste"]


@pytest.mark.parametrize("trace", TRACES)
def test_no_annotation_is_an_op_of_an_imported_trace(captures: Path, trace: str, tmp_path: Path) -> None:
    """In every op table written for a real capture, no op is an annotation: op names never, op types
    only as a collective's kernel family (ncclKernel_AllReduce_* -> nccl:all_reduce, named like torch's
    own range); the annotations are on the timeline as spans. Collective ranges (nccl:all_reduce,
    gloo:all_reduce) are no annotations but communication: `comm` ops on the host."""
    path = captures / "kineto" / trace
    annotations = {name for name in _annotation_names(path) if not name.startswith(COLLECTIVE_PREFIXES)}
    import_capture(path, tmp_path)
    tables = sorted(tmp_path.glob("op_detail_*.csv"))
    assert tables
    for detail in tables:
        table = read_csv(detail, "op_detail")
        names = set(table["name"].astype(str))
        assert not names & annotations, sorted(names & annotations)
        collectives = table["name"].astype(str).str.startswith(COLLECTIVE_PREFIXES)
        assert (table.loc[collectives, "category"] == "comm").all()
        types = read_csv(detail.with_name(detail.name.replace("op_detail", "op_type")), "op_type")
        assert not set(types.loc[types["category"] != "comm", "op_type"].astype(str)) & annotations
    timeline = json.loads(next(tmp_path.glob("timeline_*.json")).read_text())
    spans = {
        e["name"]
        for e in (timeline["traceEvents"] if isinstance(timeline, dict) else timeline)
        if e.get("ph") == "X" and e.get("cat") in ("span", "scope", "step")
    }
    host = {n for n in annotations if not n.startswith("ProfilerStep#")}
    assert host or trace == "cpu_only.json.gz"  # its only annotations are its steps and collectives
    assert host <= spans, sorted(host - spans)[:5]
    if trace.startswith("sampled_rank"):
        events = timeline["traceEvents"] if isinstance(timeline, dict) else timeline
        scopes = {e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "scope"}
        assert "forward" in scopes  # TorchScript's method scope, a cpu_op in the file: a scope span, not an op


def test_record_function_ranges_of_a_live_capture_are_spans(tmp_path: Path, torch_one_thread) -> None:
    """A live torch capture: the user's record_function ranges and torch's own (Optimizer.step#...)
    are spans on the loop's thread, never in the op tables; the ops inside them still are ops."""
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    profiler = Profiler(tmp_path, framework="torch", host_counters=False, gpu_counters=False)
    profiler.attach(model, optimizer)
    for _ in range(6):
        with torch.profiler.record_function("## my forward ##"):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    profiler.analyse(progress=False)
    detail = read_csv(tmp_path / "op_detail_0.csv", "op_detail")
    names = set(detail["name"].astype(str))
    assert {"aten::addmm", "aten::relu"} <= names
    assert not {n for n in names if n.startswith(("## ", "Optimizer."))}
    timeline = json.loads((tmp_path / "timeline_0.json").read_text())
    events = timeline["traceEvents"] if isinstance(timeline, dict) else timeline
    spans = [e for e in events if e.get("ph") == "X" and e["name"] in ("## my forward ##", "Optimizer.step#SGD.step")]
    assert sorted({e["name"] for e in spans}) == ["## my forward ##", "Optimizer.step#SGD.step"]
    assert len([e for e in spans if e["name"] == "## my forward ##"]) == 6
    loop_lane = {e["tid"] for e in events if e.get("ph") == "X" and e["name"] == "aten::addmm"}
    assert {e["tid"] for e in spans} <= loop_lane

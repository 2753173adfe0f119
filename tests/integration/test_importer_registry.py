"""The importer registry: a format registered from outside profview (tests/support/toy_format.py) is read by
`profview import`, `profview PATH` and the viewer with no other edit; formats are recognised from
their content, the most confident one reading an input; installed plug-ins come in through the
`profview.importers` entry-point group."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis.advisor import framework_of
from profiler.analysis.steps import exact_steps_advice
from profiler.errors import InputError
from profiler.importers import ascend, kineto, mindspore, registry
from profiler.importers.base import CERTAIN, NAMED, NOT_IT, SHAPED, Importer
from profiler.importers.kineto import read_kineto_trace
from viewer.cli import main
from viewer.inputs import load_input

from support import toy_format

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy():
    """The toy format, registered for one test."""
    registry.register(toy_format.IMPORTER)
    yield toy_format.IMPORTER
    registry.unregister(toy_format.IMPORTER.data_origin)


def assert_toy_outputs(out: Path, steps: int = 3) -> None:
    """The profview outputs of a toy capture of `steps` marked 1 ms steps (rank 2): matmul 300 µs
    and relu 100 µs per step."""
    step_trace = pd.read_csv(out / "step_trace_2.csv")
    assert step_trace["step"].tolist() == list(range(steps)) and set(step_trace["step_source"]) == {"marked"}
    assert step_trace["total_ms"].tolist() == [1.0] * steps and step_trace["op_count"].tolist() == [2] * steps
    assert_toy_ops(out, steps)


def assert_toy_ops(out: Path, steps: int) -> None:
    op_type = pd.read_csv(out / "op_type_2.csv").set_index("op_type")
    assert op_type.loc["matmul", ["count", "total_ms"]].tolist() == [steps, pytest.approx(0.3 * steps)]
    assert op_type.loc["relu", ["count", "total_ms"]].tolist() == [steps, pytest.approx(0.1 * steps)]
    assert set(op_type["device"]) == {"toy:0"}


def test_profview_import_reads_a_registered_format(toy, tmp_path, capsys):
    capture = toy_format.toy_capture(tmp_path / "run.toy")
    assert main(["import", str(capture), "-o", str(tmp_path / "out")]) == 0
    assert_toy_outputs(tmp_path / "out")
    info = json.loads((tmp_path / "out" / "profiler_info_2.json").read_text())
    assert info["data_origin"] == "toy" and info["source_path"] == str(capture)
    listed = capsys.readouterr().out.split()
    assert {Path(p).name for p in listed} >= {"step_trace_2.csv", "op_type_2.csv", "profiler_info_2.json"}


def test_profview_path_summarises_a_registered_format(toy, tmp_path, capsys):
    capture = toy_format.toy_capture(tmp_path / "run.toy", steps=4)
    assert main([str(capture), "--summary"]) == 0
    text = capsys.readouterr().out
    assert "Step breakdown over 4 recorded step(s)" in text
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.startswith(("matmul ", "relu "))}
    assert rows == {
        "matmul": ["matmul", "4", "1.200", "1.200", "0.300", "75.0"],
        "relu": ["relu", "4", "0.400", "0.400", "0.100", "25.0"],
    }


def test_the_viewer_loads_a_registered_format(toy, tmp_path):
    runs = load_input(toy_format.toy_capture(tmp_path / "run.toy"))
    assert [run.rank for run in runs] == [2]
    assert runs[0].step_trace["total_ms"].tolist() == [1.0, 1.0, 1.0]
    assert runs[0].op_type.set_index("op_type")["count"].to_dict() == {"matmul": 3, "relu": 3}
    assert runs[0].info["data_origin"] == "toy"


def test_the_analysis_speaks_of_a_registered_format_in_its_own_words(toy, tmp_path, capsys):
    capture = toy_format.toy_capture(tmp_path / "unmarked.toy", steps=6, with_steps=False)
    assert main(["import", str(capture), "-o", str(tmp_path / "out")]) == 0
    warning = capsys.readouterr().err
    assert "the toy capture has no step markers: steps inferred from the op launch sequence" in warning
    assert "period 2 ops, 6 steps; write step lines into the toy capture for exact boundaries" in warning
    step_trace = pd.read_csv(tmp_path / "out" / "step_trace_2.csv")
    assert step_trace["op_count"].tolist() == [2] * 6 and set(step_trace["step_source"]) == {"inferred"}
    assert step_trace["total_ms"].sum() == pytest.approx(5.4)  # the capture: 5 ms + the last 400 µs
    assert_toy_ops(tmp_path / "out", steps=6)
    assert exact_steps_advice({"data_origin": "toy"}) == toy.exact_steps
    assert framework_of({"data_origin": "toy"}) == "torch"  # the toy declares torch's vocabulary


def test_an_unregistered_format_is_not_recognised(tmp_path):
    capture = toy_format.toy_capture(tmp_path / "run.toy")
    assert registry.detect(capture) is None
    with pytest.raises(InputError, match="not a profview output directory"):
        load_input(capture)


def test_the_most_confident_format_reads_an_input(toy, tmp_path):
    named_like_a_trace = toy_format.toy_capture(tmp_path / "run.json")
    assert kineto.IMPORTER.detect(named_like_a_trace) == NAMED and toy.detect(named_like_a_trace) == CERTAIN
    assert registry.detect(named_like_a_trace) is toy
    registry.unregister(toy.data_origin)
    assert registry.detect(named_like_a_trace) is kineto.IMPORTER  # only the name is a trace's: kineto


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d, c: c / "kineto" / "alexnet.json.gz", (kineto.IMPORTER, CERTAIN)),
        (lambda d, c: _copy(c / "kineto" / "cpu_only.json.gz", d / "capture.bin"), (kineto.IMPORTER, CERTAIN)),
        (
            lambda d, c: _write(d / "unzipped.txt", gzip.decompress((c / "kineto" / "cpu_only.json.gz").read_bytes())),
            (kineto.IMPORTER, CERTAIN),
        ),
        (
            lambda d, c: _write(
                d / "events",
                json.dumps([{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}]).encode(),
            ),
            (kineto.IMPORTER, CERTAIN),
        ),
        (lambda d, c: _write(d / "chrome", b'{"traceEvents": []}'), (kineto.IMPORTER, SHAPED)),
        (
            lambda d, c: _write(d / "cut.json.gz", (c / "kineto" / "cpu_only.json.gz").read_bytes()[:100]),
            (kineto.IMPORTER, NAMED),
        ),
        (lambda d, c: c / "ascend" / "JOB3", (ascend.IMPORTER, CERTAIN)),
        (lambda d, c: c / "ascend", (ascend.IMPORTER, CERTAIN)),  # a directory of JOB* directories
        (lambda d, c: c / "ascend" / "run_1_gold", (mindspore.IMPORTER, CERTAIN)),
        (lambda d, c: c / "mindspore_cpu", (mindspore.IMPORTER, CERTAIN)),
        (lambda d, c: _mkdir(d / "ms" / "ASCEND_PROFILER_OUTPUT").parent, (mindspore.IMPORTER, SHAPED)),
        (lambda d, c: _write(d / "notes.json.txt", b"hello"), (None, NOT_IT)),
        (lambda d, c: _mkdir(d / "empty"), (None, NOT_IT)),
    ],
    ids=[
        "kineto",
        "kineto-any-name",
        "kineto-unzipped",
        "bare-event-array",
        "chrome-json",
        "cut-gzip",
        "ascend-job",
        "ascend-jobs",
        "mindspore-2020",
        "mindspore-cpu",
        "mindspore-layout",
        "text",
        "empty-dir",
    ],
)
def test_formats_are_recognised_from_their_content(make, expected, tmp_path, captures):
    path = make(tmp_path, captures)
    importer, confidence = expected
    assert registry.detect(path) is importer
    assert max(i.detect(path) for i in registry.importers()) == confidence


def test_a_kineto_trace_is_opened_whatever_its_name(tmp_path, captures):
    trace = captures / "kineto" / "sampled_rank-1.json.gz"
    renamed = load_input(_copy(trace, tmp_path / "capture.bin"))
    named = load_input(trace)
    assert len(renamed) == len(named) == 1
    pd.testing.assert_frame_equal(renamed[0].step_trace, named[0].step_trace)
    pd.testing.assert_frame_equal(renamed[0].op_type, named[0].op_type)
    assert len(named[0].op_type) > 5


def test_a_bare_event_array_reads_as_its_trace(tmp_path, captures):
    trace = json.loads(gzip.decompress((captures / "kineto" / "sampled_rank-1.json.gz").read_bytes()))
    bare = _write(tmp_path / "bare.json", json.dumps(trace["traceEvents"]).encode())
    whole, alone = read_kineto_trace(captures / "kineto" / "sampled_rank-1.json.gz"), read_kineto_trace(bare)
    # 4610 events of op categories, less the 6 TorchScript "forward" scopes (3 a step), which are spans,
    # plus the 10 collective annotations (nccl:all_reduce, ...: comm ops), less 33 redispatch copies
    assert len(alone.ops) == len(whole.ops) == 4581 and len(alone.steps) == 2
    pd.testing.assert_frame_equal(alone.ops, whole.ops)
    pd.testing.assert_frame_equal(alone.steps, whole.steps)


def test_a_failing_detector_does_not_hide_the_other_formats(tmp_path, captures):
    def broken(path: Path) -> float:
        raise KeyError("oops")

    registry.register(Importer("broken", "broken capture", broken, toy_format.read_toy, "plain", "n/a"))
    try:
        with pytest.warns(UserWarning, match=r"the broken importer failed to look at .*KeyError"):
            assert registry.detect(captures / "kineto" / "alexnet.json.gz") is kineto.IMPORTER
    finally:
        registry.unregister("broken")


def test_register_refuses_a_taken_or_malformed_format():
    for origin in ("kineto", "profview"):
        with pytest.raises(ValueError, match="is taken"):
            registry.register(Importer(origin, "x", toy_format.toy_confidence, toy_format.read_toy, "plain", "n/a"))
    with pytest.raises(ValueError, match="lower-case identifier"):
        Importer("../toy", "x", toy_format.toy_confidence, toy_format.read_toy, "plain", "n/a")
    with pytest.raises(ValueError, match="framework must be one of"):
        Importer("toy2", "x", toy_format.toy_confidence, toy_format.read_toy, "jax", "n/a")
    with pytest.raises(ValueError, match="not a profiler.importers.base.Importer"):
        registry.register("toy")  # type: ignore[arg-type]
    assert [i.data_origin for i in registry.importers()] == ["ascend", "mindspore", "kineto"]


def test_an_installed_plugin_is_found_through_its_entry_point(tmp_path):
    """A package that declares a `profview.importers` entry point adds its format to the real CLI
    (a subprocess); a plug-in that cannot be loaded is left out with one warning line."""
    site = tmp_path / "site"
    dist = site / "profview_toy-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: profview-toy\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[profview.importers]\ntoy = support.toy_format:IMPORTER\nmissing = no_such_module_here:IMPORTER\n"
    )
    capture = toy_format.toy_capture(tmp_path / "run.toy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO / "tests"), str(REPO)]))

    def profview(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "viewer.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,
        )

    imported = profview("import", str(capture), "-o", str(tmp_path / "out"))
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr.splitlines() == [
        "profview: warning: the importer plug-in missing (no_such_module_here:IMPORTER) cannot be loaded "
        "(ModuleNotFoundError: No module named 'no_such_module_here'); it is left out"
    ]
    assert_toy_outputs(tmp_path / "out")
    summary = profview(str(capture), "--summary")
    assert summary.returncode == 0, summary.stderr
    assert "Step breakdown over 3 recorded step(s)" in summary.stdout and "matmul  matmul      3" in summary.stdout


def _copy(source: Path, target: Path) -> Path:
    target.write_bytes(source.read_bytes())
    return target


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path

"""The profview command on bad input: one clear sentence on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import assert_one_sentence, run_profview
from support.viewer_fixtures import Spec, write_run


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("good") / "run", Spec(steps=12, ops_per_step=5))


def copy_run(good: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in good.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def test_missing_directory(tmp_path):
    assert_one_sentence(run_profview(tmp_path / "nope"), "does not exist")


def test_empty_directory(tmp_path):
    assert_one_sentence(run_profview(tmp_path), "is empty")


def test_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert_one_sentence(run_profview(tmp_path), "not a profview output directory")


def test_raw_store_without_outputs(tmp_path):
    (tmp_path / "raw").mkdir()
    assert_one_sentence(run_profview(tmp_path), "raw store", "profview analyse")


def test_partially_written_directory(good, tmp_path):
    run = copy_run(good, tmp_path / "run")
    (run / "op_detail_0.csv").unlink()
    assert_one_sentence(run_profview(run, "-o", tmp_path / "r.html"), "incomplete", "op_detail_0.csv")


def test_truncated_info_json(good, tmp_path):
    run = copy_run(good, tmp_path / "run")
    info = run / "profiler_info_0.json"
    info.write_text(info.read_text()[:50])
    assert_one_sentence(run_profview(run, "-o", tmp_path / "r.html"), "profiler_info_0.json", "not valid JSON")


def test_newer_schema(good, tmp_path):
    run = copy_run(good, tmp_path / "run")
    info = run / "profiler_info_0.json"
    info.write_text(json.dumps(dict(json.loads(info.read_text()), schema_version=2)))
    assert_one_sentence(run_profview(run, "--summary"), "schema version 2", "upgrade")


@pytest.mark.parametrize(
    "content, message",
    [
        ("step,start_ms\n0,1\n", "missing column(s)"),
        ("", "is empty"),
        ("step,start_ms,iteration_gap_ms,fp_bp_ms,tail_ms,total_ms,all_reduce_ms\n0,1,2,3,4,abc,0\n", "non-numeric"),
        ('step,start_ms,iteration_gap_ms,fp_bp_ms,tail_ms,total_ms,all_reduce_ms\n0,1,2,"3\n', "not a valid CSV"),
    ],
)
def test_malformed_csv(good, tmp_path, content, message):
    run = copy_run(good, tmp_path / "run")
    (run / "step_trace_0.csv").write_text(content)
    assert_one_sentence(run_profview(run, "-o", tmp_path / "r.html"), "step_trace_0.csv", message)


def test_malformed_summary_json(good, tmp_path):
    run = copy_run(good, tmp_path / "run")
    (run / "queue_summary_0.json").write_text('{"queues": [')
    assert_one_sentence(run_profview(run, "--summary"), "queue_summary_0.json", "not valid JSON")


def test_truncated_event_file(good, tmp_path):
    """A cut event file: the report is still built, and the timeline page says what is wrong in one sentence."""
    run = copy_run(good, tmp_path / "run")
    events = run / "events_0.arrow"
    data = events.read_bytes()
    events.write_bytes(data[: len(data) // 2])
    result = run_profview(run, "-o", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "r.html").read_text()
    assert "events_0.arrow is not a profview event file (Arrow IPC): it may be truncated" in html


def test_unknown_rank(good):
    assert_one_sentence(run_profview(good, "--rank", "5", "--summary"), "rank 5 is not in")


def test_bad_steps_is_a_usage_error(good):
    result = run_profview(good, "--steps", "x:y")
    assert result.returncode == 2 and "--steps wants A:B" in result.stderr and "Traceback" not in result.stderr


def test_unwritable_output(good, tmp_path):
    assert_one_sentence(run_profview(good, "-o", tmp_path / "missing" / "r.html"), "cannot write")


def test_empty_trace_file_is_recognised(tmp_path):
    trace = tmp_path / "run.pt.trace.json"
    trace.write_text('{"traceEvents": []}')
    assert_one_sentence(run_profview(trace, "--summary"), "Kineto trace")


def test_empty_mindspore_directory_is_recognised(tmp_path):
    (tmp_path / "ASCEND_PROFILER_OUTPUT").mkdir()
    assert_one_sentence(run_profview(tmp_path, "--summary"), "MindSpore")


def test_analyse_missing_directory(tmp_path):
    result = run_profview("analyse", tmp_path / "nope")
    assert_one_sentence(result, "does not exist")


def test_no_arguments_prints_help():
    result = run_profview()
    assert result.returncode == 2 and "usage: profview" in result.stderr


def test_help_is_complete():
    top = run_profview("--help")
    assert top.returncode == 0
    for word in ("view", "analyse", "examples:", "--summary", "profview DIR"):
        assert word in top.stdout
    view = run_profview("view", "--help")
    for option in ("--output", "--summary", "--rank", "--steps", "--host", "--port", "--no-browser"):
        assert option in view.stdout

"""Broken copies of JOB3: every problem is a warning naming the file (and offset), the rest still parses;
a job with nothing usable is one ProfviewError sentence."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from profiler.errors import ProfviewError
from profiler.export.mindspore import write_mindspore_outputs
from profiler.importers.ascend import read_ascend_job, to_run

HWTS = "hwts.log.data.45.dev.profiler_default_tag.1.slice_0"
TASK_DESC = "Framework.host.vm.task_desc_info.1.slice_0"
TRACE = "data/training_trace.46.dev.profiler_default_tag.1.slice_0"
NEEDED = [HWTS, TASK_DESC, "Framework.host.vm.graph_desc_info.1.slice_0", "Framework.host.vm.point.1.slice_0", TRACE]


@pytest.fixture
def job_copy(captures: Path, tmp_path: Path) -> Path:
    """A writable copy of the JOB3 files the parser needs."""
    job = tmp_path / "JOB3"
    (job / "data").mkdir(parents=True)
    for name in NEEDED:
        shutil.copyfile(captures / "ascend" / "JOB3" / name, job / name)
    return job


def _read_with_warnings(job: Path):
    with pytest.warns(UserWarning) as caught:
        parsed = read_ascend_job(job)
    assert [str(w.message) for w in caught] == parsed.warnings
    return parsed


def test_truncated_hwts_record_is_reported_with_file_and_offset(job_copy: Path):
    path = job_copy / HWTS
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30])  # the last 64-byte record loses 30 bytes
    job = _read_with_warnings(job_copy)
    assert job.warnings == [
        f"{HWTS} at byte {len(data) - 64}: 34 trailing bytes do not form a whole 64-byte HWTS record and were ignored"
    ]
    assert len(job.hwts) == 62846
    assert len(job.executions) == 2817 and len(job.steps) == 322  # the lost record is an unmapped device task


def test_invalid_record_type_is_skipped_and_outputs_stay_identical(job_copy: Path, captures: Path, tmp_path: Path):
    path = job_copy / HWTS
    data = path.read_bytes()
    bogus = bytes([0x06]) + data[101 * 64 + 1 : 102 * 64]  # record 101 with its type set to 6
    path.write_bytes(data[: 101 * 64] + bogus + data[101 * 64 :])
    job = _read_with_warnings(job_copy)
    assert job.warnings == [f"{HWTS} at byte {101 * 64}: 1 HWTS record(s) of invalid type [6] skipped (first here)"]
    assert len(job.hwts) == 62847
    out = tmp_path / "out"
    gold = captures / "ascend" / "run_1_gold"
    for written in write_mindspore_outputs(job, out):
        assert written.read_bytes() == (gold / written.name).read_bytes(), written.name


def test_missing_task_desc_keeps_steps_and_drops_ops(job_copy: Path):
    (job_copy / TASK_DESC).unlink()
    job = _read_with_warnings(job_copy)
    assert job.warnings == [
        "no Framework.host.vm.task_desc_info.<dev>.slice_<n> file for device 1: device tasks "
        "cannot be mapped to ops, so there are no op timings"
    ]
    run = to_run(job)
    assert run.ops.empty and len(run.steps) == 322 and len(run.spans) == 3542
    assert run.info["sources"]["task_desc"]["status"].startswith("absent")
    assert run.info["warnings"] == job.warnings


def test_empty_slice_is_reported_and_the_others_are_read(job_copy: Path):
    (job_copy / HWTS.replace("slice_0", "slice_1")).write_bytes(b"")
    (job_copy / (HWTS + ".done")).write_bytes(b"")  # marker files are ignored
    job = _read_with_warnings(job_copy)
    assert job.warnings == [f"{HWTS.replace('slice_0', 'slice_1')}: slice is empty"]
    assert len(job.hwts) == 62847 and len(job.executions) == 2817


def test_records_straddling_two_slices_are_joined(job_copy: Path):
    path = job_copy / HWTS
    data = path.read_bytes()
    cut = 1000 * 64 + 17
    path.write_bytes(data[:cut])
    (job_copy / HWTS.replace("slice_0", "slice_10")).write_bytes(data[cut + 5000 :])  # slice 10 sorts after 2
    (job_copy / HWTS.replace("slice_0", "slice_2")).write_bytes(data[cut : cut + 5000])
    job = read_ascend_job(job_copy)
    assert job.warnings == [] and len(job.hwts) == 62847 and len(job.executions) == 2817


def test_empty_training_trace_keeps_ops(job_copy: Path):
    (job_copy / TRACE).write_bytes(b"")
    job = _read_with_warnings(job_copy)
    assert job.warnings == ["training_trace.46.dev.profiler_default_tag.1.slice_0: slice is empty"]
    run = to_run(job)
    assert len(run.ops) == 2817 and run.steps.empty and (run.ops["step"] == -1).all()


def test_truncated_training_trace_drops_the_incomplete_last_step(job_copy: Path):
    path = job_copy / TRACE
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last ITER_END record is cut
    job = _read_with_warnings(job_copy)
    name = Path(TRACE).name
    assert job.warnings == [
        f"{name} at byte {len(data) - 20}: 13 trailing bytes do not form a whole "
        "20-byte training-trace record and were ignored",
        f"{name}: 1 step(s) without ITER_END (profiling stopped mid-step) were left out",
    ]
    assert len(job.steps) == 321 and job.steps["step_num"].max() == 321


def test_malformed_task_desc_line_is_skipped(job_copy: Path, captures: Path):
    path = job_copy / TASK_DESC
    lines = path.read_text().splitlines(keepends=True)
    broken_op = lines[5].split(" ")[0]
    lines[5] = broken_op + " one 30097\n"
    path.write_text("".join(lines))
    job = _read_with_warnings(job_copy)
    offset = sum(len(line) for line in lines[:5])
    assert job.warnings == [
        f"{TASK_DESC} at byte {offset}: malformed task_desc line skipped: {lines[5].rstrip()[:80]!r}"
    ]
    assert broken_op not in job.op_names
    timeline = (captures / "ascend" / "run_1_gold" / "output_timeline_data_1.txt").read_text().splitlines()
    runs_of_broken_op = sum(line.startswith(broken_op + ",") for line in timeline)
    assert runs_of_broken_op == 15 and len(job.executions) == 2817 - runs_of_broken_op


def test_missing_directory_is_one_sentence(tmp_path: Path):
    with pytest.raises(ProfviewError) as error:
        read_ascend_job(tmp_path / "nope")
    assert str(error.value) == f"Ascend job directory {tmp_path / 'nope'} does not exist or is not a directory."


def test_directory_without_slices_is_an_error(tmp_path: Path):
    with pytest.raises(ProfviewError, match="No Ascend profiling slices"):
        read_ascend_job(tmp_path)


def test_nothing_usable_is_an_error_naming_the_files(job_copy: Path):
    (job_copy / TASK_DESC).unlink()
    (job_copy / TRACE).unlink()
    with pytest.raises(ProfviewError) as error:
        read_ascend_job(job_copy)
    message = str(error.value)
    assert "\n" not in message and message.endswith(".")
    assert message.startswith(f"Ascend job {job_copy} (device 1) yields neither op timings nor steps:")
    assert "task_desc_info" in message and "training_trace" in message


def test_other_device_is_rejected(job_copy: Path):
    with pytest.raises(ProfviewError, match=r"has no slices for device 0 \(found devices \[1\]\)"):
        read_ascend_job(job_copy, device_id=0)

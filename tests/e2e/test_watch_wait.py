"""`profview watch` before the job starts (a directory that does not exist yet, --timeout) and its
memory trend (none before there are samples enough for one). Real recording processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from rich.console import Console

from profiler.postprocess.live import LiveRecording
from viewer.watch import parse_plain_line, plain_fields, plain_line, render

from support.cli import REPO, profview_command, python_env
from support.live_helpers import record, start_recorder, wait_for

pytestmark = pytest.mark.timing

MB = float(1 << 20)


def run_watch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        profview_command("watch", *args), cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=timeout
    )


def test_watch_waits_for_a_directory_the_job_creates_later(tmp_path):
    out = tmp_path / "later" / "run"
    err_path = tmp_path / "watch.err"
    with err_path.open("w") as err:
        watch = subprocess.Popen(
            profview_command("watch", str(out), "--interval", "0.3", "--plain"),
            cwd=REPO,
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert wait_for(lambda: "waiting for" in err_path.read_text(), 60)
        time.sleep(1.0)
        assert watch.poll() is None and not out.exists()  # still waiting, for as long as it takes
        recorder = start_recorder(out, steps=150)  # the job starts and makes the directory
        stdout, _ = watch.communicate(timeout=300)
        assert recorder.wait(timeout=300) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err_path.read_text()
    assert err_path.read_text().splitlines() == [f"profview watch: waiting for {out} (it does not exist yet)"]
    last = parse_plain_line([line for line in stdout.splitlines() if line.startswith("profview-watch")][-1])
    assert last["status"] == "ended" and last["steps"] == "150"
    assert stdout.splitlines()[-1].startswith("profview watch: the recording ended: 150 steps of rank 0")


def test_timeout_on_a_directory_that_never_appears_is_one_sentence(tmp_path):
    missing = tmp_path / "never"
    started = time.monotonic()
    result = run_watch(str(missing), "--timeout", "1.5", "--interval", "0.2")
    assert time.monotonic() - started >= 1.5
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"profview watch: waiting for {missing} (it does not exist yet)",
        f"profview: error: {missing} did not appear within --timeout 1.5 s (start the training with its "
        f"output directory there, or watch another directory)",
    ]
    assert result.stdout == "" and not missing.exists()


def test_timeout_on_a_directory_without_a_recording_is_one_sentence(tmp_path):
    result = run_watch(str(tmp_path), "--timeout", "1", "--interval", "0.2", "--plain")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"profview: error: no recording appeared in {tmp_path} within --timeout 1 s (no raw store written there yet)"
    ]


def test_a_directory_under_a_file_is_refused_at_once(tmp_path):
    (tmp_path / "file").write_text("x")
    result = run_watch(str(tmp_path / "file" / "run"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"profview: error: {tmp_path / 'file' / 'run'} cannot appear: {tmp_path / 'file'} is not a directory"
    ]


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(tmp_path, value):
    result = run_watch(str(tmp_path), f"--timeout={value}")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "profview: error: --window wants a positive number of steps, --interval "
        "and --timeout a positive number of seconds"
    ]


def test_no_memory_trend_before_there_are_samples_for_one(tmp_path):
    out = tmp_path / "short"
    record(out, 3)  # a few steps: a few counter samples
    live = LiveRecording(out)
    snap = live.update()
    live.close()
    rss = [m for m in snap.memory if m.label == "host RSS"]
    assert len(rss) == 1 and rss[0].last_bytes > 10 * MB and rss[0].bytes_per_s is None
    fields = plain_fields(snap)
    assert float(fields["rss_mb"]) == pytest.approx(rss[0].last_bytes / MB, abs=0.1)
    assert "rss_mb_per_min" not in fields and "rss_mb_per_min" not in plain_line(snap)
    console = Console(record=True, width=160, force_terminal=True)
    console.print(render(snap, out))
    assert "trend n/a yet" in console.export_text()


def test_the_memory_trend_of_a_long_enough_run_is_the_advisors_slope(tmp_path):
    """A real 2 MB-a-step leak over ~8 s: watch's MB/min is the slope the memory_growth finding reports."""
    out = tmp_path / "leak"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "support" / "memory_loops.py"), str(out), "leak", "80", "0.1"],
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report_0.json").read_text())
    finding = [f for f in report["findings"] if f["kind"] == "memory_growth"][0]
    live = LiveRecording(out)
    snap = live.update()
    live.close()
    rss = [m for m in snap.memory if m.label == "host RSS"][0]
    assert rss.bytes_per_s is not None
    assert rss.bytes_per_s / MB == pytest.approx(finding["metrics"]["mb_per_s"], rel=0.1)
    assert float(plain_fields(snap)["rss_mb_per_min"]) == pytest.approx(60 * rss.bytes_per_s / MB, abs=0.01)

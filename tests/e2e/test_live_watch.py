"""`profview watch DIR`: a real watcher process following a real recording process."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from profiler.postprocess.live import LiveRecording
from viewer.watch import parse_plain_line, plain_line, render, sparkline

from support.cli import REPO, profview_command, python_env
from support.live_helpers import record, start_recorder, steps_in, wait_for

pytestmark = pytest.mark.timing


def watcher(directory: Path, *extra: str) -> subprocess.Popen:
    """`profview watch DIR` with stdout a pipe (not a terminal: plain lines)."""
    return subprocess.Popen(
        profview_command("watch", str(directory), "--interval", "0.3", *extra),
        cwd=REPO,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_watch_follows_a_growing_recording_to_its_end(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    watch = watcher(out)  # started before anything is recorded
    try:
        assert watch.stdout.readline().startswith("profview-watch status=waiting")
        rec = start_recorder(out, steps=500, data_s=0.006)
        _, err = rec.communicate(timeout=300)
        assert rec.returncode == 0, err
        stdout, stderr = watch.communicate(timeout=120)
    finally:
        for p in (watch,):
            if p.poll() is None:
                p.kill()
    assert watch.returncode == 0, stderr
    assert "Traceback" not in stderr
    lines = stdout.splitlines()
    plain = [parse_plain_line(line) for line in lines if line.startswith("profview-watch ")]
    steps = [int(f["steps"]) for f in plain if "steps" in f]
    assert steps == sorted(steps)
    # at least two lines while the steps came in (a line may also show all 500 steps still recording:
    # the flusher wrote the last ones before the end-of-recording chunk came)
    growing = {int(f["steps"]) for f in plain if f["status"] == "recording"} - {0, 500}
    assert len(growing) >= 2, "lines while the recording grew"
    last = plain[-1]
    assert last["status"] == "ended" and int(last["steps"]) == steps_in(out) == 500
    assert last["verdict"] == "input_bound" and "waits for data" in last["top"]
    assert last["queue.host_queue"].endswith("/4")
    window = [int(x) for x in last["window"].split("-")]
    assert window == [400, 499]  # the advisor read the last 100 steps
    assert float(last["data_wait_ms"]) >= 0.5 * float(last["iteration_gap_ms"]) > 0
    assert lines[-1].startswith("profview watch: the recording ended: 500 steps of rank 0")


def test_watch_shows_every_rank_and_the_slowest(tmp_path):
    out = tmp_path / "run"
    # rank 1 waits 30 x rank 0's data time: on a loaded machine every sleep also wakes up late (up to ~45 ms
    # at load 17), which a 3 ms vs 12 ms pair did not survive
    recorders = [
        start_recorder(out, steps=60, data_s=0.005 if rank == 0 else 0.150, rank=rank, world_size=2, analyse=False)
        for rank in (0, 1)
    ]
    try:
        # start watching once the recorders made the directory (a missing one is waited for: test_watch_wait.py)
        assert wait_for(out.is_dir, 120)
        result = subprocess.run(
            profview_command("watch", str(out), "--interval", "0.3"),
            cwd=REPO,
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for rec in recorders:
            rec.wait(timeout=300)
    assert result.returncode == 0, result.stderr
    last = parse_plain_line([line for line in result.stdout.splitlines() if line.startswith("profview-watch")][-1])
    assert last["status"] == "ended" and last["ranks"] == "2"
    assert last["slowest_rank"] == "1" and last["rank"] == "1"  # the advisor reads the slowest rank
    assert float(last["rank1_step_ms"]) > 2 * float(last["rank0_step_ms"])  # 30 x the data wait
    assert result.stdout.splitlines()[-1].endswith("slowest rank 1")


def test_watching_never_writes_into_the_directory(tmp_path):
    out = tmp_path / "run"
    record(out, 60)

    def listing():
        return sorted((str(p.relative_to(out)), p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*"))

    before = listing()
    result = subprocess.run(
        profview_command("watch", str(out)), cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert listing() == before
    assert result.stdout.splitlines()[-1].startswith("profview watch: the recording ended: 60 steps")


def test_ctrl_c_stops_watching_with_a_summary(tmp_path):
    out = tmp_path / "run"
    rec = start_recorder(out, steps=100_000, data_s=0.002, analyse=False)
    assert wait_for(out.is_dir, 120)  # the recorder made it (on a busy machine it starts late)
    watch = watcher(out)
    try:
        assert wait_for(lambda: steps_in_log(watch) > 0, 60)
        watch.send_signal(signal.SIGINT)
        stdout, stderr = watch.communicate(timeout=30)
    finally:
        rec.kill()
        rec.wait()
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0 and "Traceback" not in stderr
    assert stdout.splitlines()[-1].startswith("profview watch: stopped watching: ")


def steps_in_log(proc: subprocess.Popen) -> int:
    line = proc.stdout.readline()
    return int(parse_plain_line(line).get("steps", 0)) if line.startswith("profview-watch") else 0


@pytest.mark.parametrize("case", ["file", "not_raw", "bad_window"])  # missing: test_watch_wait.py
def test_bad_input_is_one_sentence(tmp_path, case):
    target = tmp_path / "x"
    args = []
    if case == "file":
        target.write_text("hello")
    elif case == "not_raw":
        (target / "raw").mkdir(parents=True)
        (target / "raw" / "r0-p1.pvraw").write_bytes(b"garbage, not chunks")
    elif case == "bad_window":
        target.mkdir()
        args = ["--window", "0"]
    result = subprocess.run(
        profview_command("watch", str(target), *args),
        cwd=REPO,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profview: error: ") and "Traceback" not in result.stderr


def test_the_terminal_view_shows_the_figures_and_names_as_text(tmp_path):
    from rich.console import Console

    out = tmp_path / "run"
    record(out, 80, op_type="[bold red]x[/] <b>")
    live = LiveRecording(out)
    snap = live.update()
    console = Console(record=True, width=120, force_terminal=True)
    console.print(render(snap, out))
    text = console.export_text()
    live.close()
    assert "ended · rank 0 · 80 steps" in text
    assert "input_bound" in text and "waits for data" in text
    assert "host_queue" in text and "split" in text and "data wait" in text
    line = parse_plain_line(plain_line(snap))
    assert line["status"] == "ended" and int(line["steps"]) == 80


def test_sparkline():
    assert sparkline(np.array([1.0, 2.0, 3.0])) == "▁▅█"
    assert sparkline(np.array([5.0, 5.0])) == "▅▅"
    assert len(sparkline(np.arange(100.0), width=30)) == 30

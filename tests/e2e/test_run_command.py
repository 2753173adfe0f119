"""`profview run`: real PyTorch scripts with no profview code in them, run with profiling on."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")

from profiler.store.follow import Follower

from support.cli import profview_command, python_env
from support.live_helpers import steps_in, wait_for

pytestmark = pytest.mark.timing

#: A training loop with a DataLoader whose dataset sleeps (the injected input bottleneck) and an
#: optimizer; no profview code. argv: steps, seconds per sample, fail at step (-1: never),
#: loader workers, exit code. It prints how many optimizer steps it made, however it ends.
TRAIN = """
import sys, time
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
steps, delay, fail_at, workers, code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), \
int(sys.argv[4]), int(sys.argv[5])


class SlowSamples(Dataset):
    def __len__(self):
        return steps * 4

    def __getitem__(self, i):
        time.sleep(delay)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), int(i % 4)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowSamples(), batch_size=4, num_workers=workers)
    done = 0
    try:
        for i, (x, y) in enumerate(loader):
            if i == fail_at:
                raise RuntimeError(f"boom at step {i}")
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            done += 1
    finally:
        print(f"OPTIMIZER_STEPS {done} len={len(loader)}", flush=True)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
"""

#: A script that profiles itself: `profview run` must leave it alone.
OWN = r"""
import sys, time
from profiler import Profiler
p = Profiler(sys.argv[1], host_counters=False, gpu_counters=False)
for i in range(25):
    with p.phase("forward"):
        time.sleep(0.002)
    p.step()
p.analyse()
"""


def script(tmp_path: Path, text: str = TRAIN, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run(tmp_path: Path, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        profview_command("run", *args),
        cwd=tmp_path,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def optimizer_steps(stdout: str) -> int:
    return int(re.search(r"OPTIMIZER_STEPS (\d+)", stdout).group(1))


def report(out: Path) -> dict:
    return json.loads((out / "report_0.json").read_text())


def test_run_profiles_an_unchanged_script_input_bound(tmp_path):
    path = script(tmp_path)
    out = tmp_path / "prof"
    result = run(tmp_path, "--no-live", "-o", str(out), str(path), "30", "0.008", "-1", "0", "0")
    assert result.returncode == 0, result.stderr
    assert optimizer_steps(result.stdout) == 30
    assert steps_in(out) == 30  # a profiler step per optimizer step
    for name in ("profiler_info_0.json", "report_0.json", "step_trace_0.csv", "timeline_0.json"):
        assert (out / name).is_file(), name
    assert report(out)["verdict"] == "input_bound"
    trace = pd.read_csv(out / "step_trace_0.csv")
    steady = trace.iloc[1:]
    assert (steady["data_wait_ms"] > 20).all()  # 4 samples x 8 ms a fetch, timed as data wait
    assert (steady["fp_start_source"] == "marked").all() and (steady["bp_end_source"] == "marked").all()
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["sources"]["torch_hooks"]["model"] == "Sequential"
    assert info["sources"]["torch_hooks"]["optimizer"] == "SGD"
    assert f"29 steps of rank 0 analysed into {out}" in result.stderr  # the warm-up step left out


def test_a_script_that_raises_is_analysed_and_keeps_its_exit_status(tmp_path):
    path = script(tmp_path)
    out = tmp_path / "prof"
    result = run(tmp_path, "--no-live", "-o", str(out), str(path), "40", "0.004", "12", "0", "0")
    assert result.returncode == 1
    assert optimizer_steps(result.stdout) == 12 == steps_in(out)
    assert "RuntimeError: boom at step 12" in result.stderr
    assert f'File "{path}"' in result.stderr and "profiler/auto.py" not in result.stderr  # the script's frames only
    assert report(out)["verdict"] == "input_bound"
    exited = run(tmp_path, "--no-live", "-o", str(tmp_path / "prof3"), str(path), "5", "0.001", "-1", "0", "3")
    assert exited.returncode == 3 and steps_in(tmp_path / "prof3") == 5


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_script_and_its_recording_is_analysed(tmp_path, sig):
    path = script(tmp_path)
    out = tmp_path / "prof"
    # SIGINT ignored at the start, as in a shell script's background job: `profview run` still passes
    # the signal on, and the script (started with SIGINT at its default) stops
    ignore_sigint = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sig == signal.SIGINT else None
    proc = subprocess.Popen(
        profview_command("run", "-o", str(out), str(path), "100000", "0.002", "-1", "0", "0"),
        cwd=tmp_path,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint,
    )
    follower = Follower(out)
    try:

        def recording() -> bool:
            follower.poll()
            return bool(follower.ranks) and follower.ranks[0].step_count >= 10

        assert wait_for(recording, 120, every=0.2)
        proc.send_signal(sig)  # to `profview run`: passed on to the script
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        follower.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr  # died by the signal, as the script would have
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in stderr
    info = json.loads((out / "profiler_info_0.json").read_text())
    assert info["recording"]["stopped_cleanly"]
    assert abs(steps_in(out) - optimizer_steps(stdout)) <= 1 and steps_in(out) >= 10
    assert report(out)["verdict"] == "input_bound"
    assert "analysed into" in stderr


def test_a_script_with_its_own_profiler_is_left_alone(tmp_path):
    path = script(tmp_path, OWN, "own.py")
    auto_out, own_out = tmp_path / "auto", tmp_path / "own"
    result = run(tmp_path, "--no-live", "-o", str(auto_out), str(path), str(own_out))
    assert result.returncode == 0, result.stderr
    assert not auto_out.exists()  # the automatic profiler left nothing behind
    assert len(list((own_out / "raw").glob("*.pvraw"))) == 1 and not (own_out / "raw" / "previous").exists()
    assert steps_in(own_out) == 25
    assert "stepped aside" in result.stderr


def test_a_module_with_loader_workers_has_its_worker_queue_probed(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    script(package, TRAIN, "trainmod.py")
    out = tmp_path / "prof"
    result = run(tmp_path, "--no-live", "-o", str(out), "-m", "pkg.trainmod", "24", "0.006", "-1", "2", "0")
    assert result.returncode == 0, result.stderr
    assert optimizer_steps(result.stdout) == 24 == steps_in(out)
    summary = json.loads((out / "queue_summary_0.json").read_text())
    (queue,) = summary["queues"]
    assert queue["queue"] == "host_queue" and queue["capacity"] == 4  # 2 workers x prefetch 2
    assert report(out)["verdict"] == "input_bound"


def test_on_a_terminal_the_live_view_shows_with_the_script_output_above_it(tmp_path):
    path = script(tmp_path)
    out = tmp_path / "prof"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        profview_command("run", "-o", str(out), str(path), "40", "0.004", "-1", "0", "0"),
        cwd=tmp_path,
        env=dict(python_env(), COLUMNS="120", LINES="40"),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    chunks = []

    def read():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
        os.close(master)
    screen = b"".join(chunks).decode("utf-8", errors="replace")
    assert "OPTIMIZER_STEPS 40" in screen  # the script's own output, passed through
    assert "profview watch" in screen and "verdict" in screen and "input_bound" in screen
    assert "analysed into" in screen
    assert steps_in(out) == 40


def test_bad_command_lines_are_one_sentence(tmp_path):
    for args in ([], ["missing.py"], ["-m"], [str(tmp_path)]):
        result = run(tmp_path, *args, timeout=60)
        assert result.returncode == 1, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("profview: error: "), (args, result.stderr)


#: A DDP job (gloo, CPU) whose rank 1 is slower; it destroys its process group before it exits.
DDP = r"""
import time
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(20 * 8, 32), torch.randint(0, 4, (20 * 8,)))
done = 0
for x, y in DataLoader(data, batch_size=8):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    done += 1
    if rank == 1:
        time.sleep(0.02)
print(f"rank {rank} OPTIMIZER_STEPS {done}", flush=True)
dist.destroy_process_group()
"""


def test_under_torchrun_every_rank_records_into_one_directory(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    entry = Path(sys.executable).with_name("profview")
    if not torchrun.exists() or not entry.exists():
        pytest.skip("torchrun / the profview entry point are not installed in this environment")
    path = script(tmp_path, DDP, "ddp.py")
    out = tmp_path / "prof"
    proc = subprocess.Popen(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node",
            "2",
            "--no-python",
            str(entry),
            "run",
            "--no-live",
            "-o",
            str(out),
            str(path),
        ],
        cwd=tmp_path,
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:  # torchrun and its `profview run` workers; their scripts follow them
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert result.returncode == 0, "\n".join(
        line for line in result.stderr.splitlines() if "rank1" in line or "Error" in line
    )[-6000:]
    assert "rank 0 OPTIMIZER_STEPS 20" in result.stdout and "rank 1 OPTIMIZER_STEPS 20" in result.stdout
    for rank in (0, 1):
        assert steps_in(out, rank) == 20
        info = json.loads((out / f"profiler_info_{rank}.json").read_text())
        assert info["rank"] == rank and info["world_size"] == 2
        assert info["sources"]["collectives"]["status"] == "ok"  # the DDP buckets are timed
    summary = json.loads((out / "cluster_summary.json").read_text())  # rank 0 merged both ranks
    assert any(f["kind"] == "straggler_rank" and f["rank"] == 1 for f in summary["findings"])

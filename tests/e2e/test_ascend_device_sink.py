"""Sink mode on the reference device: the sample MLP with a 15 ms loader, fed per step and then through
the device data queue (run as a user runs it, in a subprocess: one BLAS thread per stream)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from viewer.cli import main

pytestmark = pytest.mark.timing

REPO = Path(__file__).resolve().parents[2]
LOADER_MS = 15.0
WARMUP = 2  # steps left out of the medians (the sink's queue fills during them)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ascend_ref")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "sample_runs" / "ascend_reference_device.py"),
            "--out",
            str(out),
            "--steps",
            "16",
            "--loader-ms",
            str(LOADER_MS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout


def medians(out: Path) -> pd.Series:
    return pd.read_csv(out / "step_trace_0.csv").iloc[WARMUP:].median(numeric_only=True)


def test_without_sink_the_device_waits_for_the_loader(sample):
    out, _ = sample
    feed, sink = medians(out / "feed"), medians(out / "sink")
    # the host loads the next batch only after it saw ITER_END: the device idles for the whole loader time,
    # plus the host's turnaround (a fraction of a ms on an idle machine, 15-20 ms at load 8), which the
    # sink's gap is made of: the feed's gap beyond it is the loader's time
    assert feed["iteration_gap_ms"] >= LOADER_MS, feed
    assert feed["iteration_gap_ms"] - sink["iteration_gap_ms"] < 2 * LOADER_MS, (feed, sink)


def test_sink_mode_collapses_the_iteration_gap(sample):
    out, _ = sample
    feed, sink = medians(out / "feed"), medians(out / "sink")
    # staged batches wait on the device: the gap loses the loader time that an iteration's compute hides
    # (all of it here), keeping the host's turnaround, which both modes share (a fraction of a ms on an
    # idle machine, 15-20 ms at load 8, when it outweighs the 15 ms loader): at least half of the hidden
    # time must leave the gap
    hidden = min(LOADER_MS, sink["fp_bp_ms"] + sink["tail_ms"])
    assert feed["iteration_gap_ms"] - sink["iteration_gap_ms"] >= hidden / 2, (feed, sink)
    # (The whole step is not compared here: its 15 ms gain drowns in the all-reduce tail's swings on a
    # loaded machine — median step 159 ms in sink, 152 ms fed, at load 3.5; test_sample_runs' feed-vs-sink
    # compare judges the step with its interval.)
    summary = json.loads((out / "sink" / "queue_summary_0.json").read_text())
    assert summary["verdict"]["device_queue"] == "device_queue" and summary["verdict"]["kind"] == "compute"


def test_the_sample_prints_what_the_summary_shows(sample, capsys):
    out, stdout = sample
    printed = re.search(r"iteration gap ([\d.]+) -> ([\d.]+) ms", stdout)
    assert printed, stdout
    for mode, value in (("feed", printed[1]), ("sink", printed[2])):
        assert main([str(out / mode), "--summary"]) == 0
        table = capsys.readouterr().out  # "iteration gap   mean  median  p95  max  share %"
        median = float(re.search(r"^iteration gap\s+[\d.]+\s+([\d.]+)", table, re.M)[1])
        assert float(value) == pytest.approx(median, abs=0.051), (mode, table)


def test_both_modes_train_the_same_model(sample):
    _, stdout = sample
    losses = re.findall(r"^\[(feed|sink)\] loss ([\d.]+) -> ([\d.]+);", stdout, re.M)
    assert [m for m, *_ in losses] == ["feed", "sink"]
    assert losses[0][1:] == losses[1][1:] and float(losses[0][2]) < float(losses[0][1])


def test_every_step_sums(sample):
    out, _ = sample
    for mode in ("feed", "sink"):
        st = pd.read_csv(out / mode / "step_trace_0.csv")
        assert len(st) == 16
        assert ((st["iteration_gap_ms"] + st["fp_bp_ms"] + st["tail_ms"] - st["total_ms"]).abs() < 3e-6).all()
        assert (st[["iteration_gap_ms", "fp_bp_ms", "tail_ms"]] >= 0).all().all()
        # device steps tile: each starts at the previous ITER_END
        assert np.allclose(st["start_ms"].iloc[1:], (st["start_ms"] + st["total_ms"]).iloc[:-1], atol=1e-5)

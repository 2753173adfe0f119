"""profiler.integrations.mindspore.ProfviewCallback on a real MindSpore Model.train (CPU backend).

tests/support/mindspore_worker.py trains a small CNN in its own process (MindSpore and its threads stay out
of the test process), once per scenario, and the analysed outputs are checked here: the steps
trained, the data wait, the verdict in MindSpore's terms, MindSpore's own profiler merged.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.timing

REPO = Path(__file__).resolve().parents[2]


def test_missing_mindspore_is_one_clear_sentence():
    code = (
        "import sys; sys.modules['mindspore'] = None\n"
        "try:\n    import profiler.integrations.mindspore\n"
        "except ImportError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "profiler.integrations.mindspore needs mindspore" in r.stdout
    assert "pip install 'profview[mindspore]'" in r.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict]:
    """Every scenario of the worker, trained once: (their directory, the worker's facts)."""
    if importlib.util.find_spec("mindspore") is None:
        pytest.fail(
            "mindspore is a test dependency (scripts/setup_env.sh installs it: pip install 'profview[mindspore]')"
        )
    out = tmp_path_factory.mktemp("mindspore")
    r = subprocess.run(
        [sys.executable, str(REPO / "tests" / "support" / "mindspore_worker.py"), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return out, json.loads((out / "facts.json").read_text())


def _outputs(out: Path) -> tuple[pd.DataFrame, dict, dict]:
    return (
        pd.read_csv(out / "step_trace_0.csv"),
        json.loads((out / "report_0.json").read_text()),
        json.loads((out / "profiler_info_0.json").read_text()),
    )


def _timeline(out: Path) -> list[dict]:
    return json.loads((out / "timeline_0.json").read_text())["traceEvents"]


def _mindspore_launches(directory: Path) -> int:
    """Launches in MindSpore's own cpu_op_execute_timestamp file (`name;kind;start,dur,tid start,dur,tid ...`)."""
    (path,) = directory.glob("*_ascend_ms/FRAMEWORK/cpu_op_execute_timestamp_0.txt")
    return sum(len(line.split(";")[2].split()) for line in path.read_text().splitlines() if line.strip())


def test_one_profiler_step_per_step_trained(runs):
    out, facts = runs
    for name in ("fast", "slow"):
        trace, _, _ = _outputs(out / name)
        assert trace["step"].tolist() == list(range(facts[name]["steps_trained"])), name
        assert set(trace["fp_start_source"]) == {"marked"} and set(trace["bp_end_source"]) == {"marked"}
        assert facts[name]["summary"] and f"analysed into {out / name}" in facts[name]["summary"][0]


def test_data_wait_is_the_fetch_of_each_batch_and_epochs_are_marked(runs):
    out, _ = runs
    trace, _, info = _outputs(out / "fast")
    assert info["sources"]["mindspore"]["data_wait"] == "dataset iterator"
    events = _timeline(out / "fast")
    data = sorted(
        (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3) for e in events if e.get("ph") == "X" and e["name"] == "data"
    )
    # one fetch per step, at the start of its step; the fetch that finds an epoch exhausted is not a data wait
    assert len(data) == len(trace) == 12
    for (start, end), row in zip(data, trace.itertuples()):
        assert row.start_ms - 0.01 <= start and end <= row.start_ms + row.iteration_gap_ms + 0.01
    instants = [e["name"] for e in events if e.get("ph") == "i"]
    assert instants.count("epoch_begin") == 2 and instants.count("epoch_end") == 2


def test_fast_dataset_is_not_input_bound(runs):
    out, _ = runs
    _, report, _ = _outputs(out / "fast")
    assert report["framework"] == "mindspore"
    assert report["verdict"] != "input_bound", report["headline"]
    assert "input_bound" not in {f["kind"] for f in report["findings"]}


def test_slow_generator_dataset_is_input_bound_in_mindspore_terms(runs):
    out, _ = runs
    trace, report, info = _outputs(out / "slow")
    assert info["sources"]["mindspore"]["dataset_sink_mode"] is False  # asked for, but the CPU trains without
    assert report["verdict"] == "input_bound", report["headline"]
    top = report["findings"][0]
    assert top["kind"] == "input_bound"
    for term in ("num_parallel_workers", "python_multiprocessing=True", "dataset_sink_mode=True"):
        assert term in top["suggestion"]
    steps = trace.iloc[1:]  # step 0 compiles the graph
    assert steps["data_wait_ms"].sum() >= 0.9 * steps["iteration_gap_ms"].sum()  # the gap is the measured fetch


def test_mindspore_profiler_ops_are_merged_inside_the_network_calls(runs):
    out, _ = runs
    trace, _, info = _outputs(out / "fast")
    merged = info["sources"]["mindspore"]["merged"]
    ms_dir = Path(info["sources"]["mindspore"]["profiler_dir"])
    assert ms_dir.parent == out / "fast" / "raw"  # beside the raw store
    assert len(merged) == 1 and merged[0]["ops"] == _mindspore_launches(ms_dir) > 0
    op_types = pd.read_csv(out / "fast" / "op_type_0.csv")
    assert op_types["count"].sum() == merged[0]["ops"] and "Conv2D" in set(op_types["op_type"])
    # every launch lies inside a step's network call (fp start .. bp end): MindSpore's Unix clock on the run's
    ops = [e for e in _timeline(out / "fast") if e.get("ph") == "X" and e.get("cat") == "compute"]
    assert len(ops) == merged[0]["ops"]
    fp = (trace["fp_start_unix_ns"] - trace["start_unix_ns"]) / 1e6 + trace["start_ms"]
    bp = (trace["bp_end_unix_ns"] - trace["start_unix_ns"]) / 1e6 + trace["start_ms"]
    for e in ops:
        start, end = e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3
        assert ((fp - 1.0 <= start) & (end <= bp + 1.0)).any(), (e["name"], start)


def test_own_mindspore_profiler_is_merged_once_it_has_written(runs):
    """The user's own MindSpore profiler stops after Model.train: the analysis at the end of training says it
    is not merged yet; `profview analyse` afterwards merges it."""
    from viewer.cli import main

    out, _ = runs
    prof = out / "own_profiler" / "prof"
    _, _, info = _outputs(prof)
    assert info["sources"]["mindspore"]["merged"] == []
    assert any("was not merged" in w and "profview analyse" in w for w in info["warnings"])
    assert main(["analyse", str(prof)]) == 0
    _, _, info = _outputs(prof)
    merged = info["sources"]["mindspore"]["merged"]
    assert len(merged) == 1 and merged[0]["ops"] == _mindspore_launches(out / "own_profiler" / "ms") > 0


def test_evaluation_during_fit_does_not_end_the_recording(runs):
    out, facts = runs
    trace, _, _ = _outputs(out / "fit")
    assert trace["step"].tolist() == list(range(facts["fit"]["steps_trained"]))
    assert facts["fit"]["summary"]


def test_a_crashed_training_leaves_a_complete_raw_store(runs):
    """A callback raises at the end of the 3rd step: the exception leaves Model.train, the recording is stopped
    cleanly (profview's __exit__: the 3rd step's network call ended, so it is a step), and `profview analyse`
    analyses the 3 steps."""
    from viewer.cli import main

    out, facts = runs
    assert "crash injected" in facts["crash"]["error"]
    assert not (out / "crash" / "step_trace_0.csv").exists()  # no analysis at on_train_end
    assert main(["analyse", str(out / "crash")]) == 0
    trace, _, info = _outputs(out / "crash")
    assert info["recording"]["stopped_cleanly"] is True
    assert trace["step"].tolist() == list(range(facts["crash"]["steps_ended"]))


def test_pynative_custom_loop_with_profiler_step(runs):
    out, facts = runs
    trace, report, _ = _outputs(out / "pynative")
    assert trace["step"].tolist() == list(range(facts["pynative"]["steps_trained"]))
    assert (trace["data_wait_ms"] > 0).all()  # profiler.iterate() timed every fetch
    assert report["framework"] == "mindspore"  # MindSporeCapture names the run

"""The Chrome trace rendered from the event file: `profview export --chrome` gives, byte for byte, what
analyse() wrote into timeline_{rank}.json when it holds every event (within `timeline_max_events`), and
of a step range exactly the whole trace's rows of those steps: on a torch training loop, a multi-thread
recording with a queue, and a real Kineto GPU capture (device lanes, flows). Past the limit the trace
holds the key steps' rows (median, slowest, outliers): here on a recorded run, and in
tests/e2e/test_chrome_key_steps.py where the steps' real durations decide them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from profiler.export.event_file import read_event_file
from profiler.export.key_steps import key_steps
from profiler.export.outputs import write_timeline
from profiler.formats.columns import TIMELINE_KEY_STEPS, TIMELINE_MAX_EVENTS
from profiler.formats.documents import read_profiler_info
from profiler.postprocess.imported import import_capture
from profiler.postprocess.recording import load_rank
from viewer.cli import main

from support.chrome_trace import record_threads, rows_in_steps, trace_rows, trace_steps
from support.recorded import analysed_copy


def assert_export_matches(out: Path, tmp: Path, first: int, last: int) -> None:
    """`profview export --chrome` of the whole run is timeline_0.json, byte for byte; of steps
    first..last, the whole trace's rows of those steps."""
    info = read_profiler_info(out / "profiler_info_0.json")
    assert info["timeline"]["content"] == "full" and info["timeline"]["max_events"] == TIMELINE_MAX_EVENTS
    assert main(["export", str(out), "--chrome", "-o", str(tmp / "whole.json")]) == 0
    assert (tmp / "whole.json").read_bytes() == (out / "timeline_0.json").read_bytes()
    assert main(["export", str(out), "--chrome", "--steps", f"{first}:{last}"]) == 0
    ranged = out / f"timeline_0_steps_{first}-{last}.json"
    ef = read_event_file(out / "events_0.arrow")
    assert trace_rows(ranged)[0] == rows_in_steps(tmp / "whole.json", ef, lambda s: (s >= first) & (s <= last))
    assert trace_steps(ranged) == list(range(first, last + 1))
    assert 0 < len(ranged.read_bytes()) < len((out / "timeline_0.json").read_bytes())


def test_export_chrome_is_the_analysed_trace_of_a_torch_loop(tmp_path, torch_one_thread):
    from profiler import schedule

    from support.torch_loops import profiled_cnn_run

    out = tmp_path / "torch"
    profiled_cnn_run(out, steps=8, framework="torch", ops_schedule=schedule(wait=2, warmup=1, active=3))
    assert read_profiler_info(out / "profiler_info_0.json")["timeline"]["events"] > 500  # torch ops in it
    assert_export_matches(out, tmp_path, 3, 5)


def test_export_chrome_is_the_analysed_trace_of_a_multi_thread_recording(tmp_path):
    out = tmp_path / "threads"
    record_threads(out, 10, {}, timeline_max_events=TIMELINE_MAX_EVENTS)
    lanes = read_event_file(out / "events_0.arrow").lanes
    assert {"loader", "steps"} <= {lane["thread"] for lane in lanes}
    assert_export_matches(out, tmp_path, 2, 6)


def test_export_chrome_is_the_imported_trace_of_a_kineto_gpu_capture(tmp_path, captures):
    """Device lanes and launch flows: the flows of a step range are those its launches started."""
    out = tmp_path / "kineto"
    import_capture(captures / "kineto" / "sampled_rank-0.json.gz", out)
    whole = json.loads((out / "timeline_0.json").read_text())["traceEvents"]
    assert sum(e["ph"] == "s" for e in whole) > 100 and len({e["pid"] for e in whole}) >= 2
    assert main(["export", str(out), "--chrome", "-o", str(tmp_path / "whole.json.gz")]) == 0
    import gzip

    assert gzip.decompress((tmp_path / "whole.json.gz").read_bytes()) == (out / "timeline_0.json").read_bytes()
    assert main(["export", str(out), "--chrome", "--steps", "552:552", "-o", str(tmp_path / "one.json")]) == 0
    ef = read_event_file(out / "events_0.arrow")
    assert trace_rows(tmp_path / "one.json")[0] == rows_in_steps(out / "timeline_0.json", ef, lambda s: s == 552)
    flows = [e for e in json.loads((tmp_path / "one.json").read_text())["traceEvents"] if e["ph"] in "sf"]
    assert 0 < len(flows) < sum(e["ph"] in "sf" for e in whole)


def test_past_the_limit_the_analysed_trace_is_the_key_steps_rows_of_the_whole(tmp_path):
    """A recorded run's timeline written with an event limit of a quarter of its events holds the rows of
    its key steps (median, slowest, then outliers that fit), as the whole trace has them; profiler_info
    says which steps and how many events."""
    out = analysed_copy("scenarios", "compute_bound", tmp_path / "run")
    run = load_rank(out, 0)
    ef = read_event_file(out / "events_0.arrow")
    limit = ef.rows // 4
    run.info.setdefault("config", {})["timeline_max_events"] = limit
    tl = write_timeline(run, out).info["timeline"]
    key = key_steps(run)
    assert tl["content"] == TIMELINE_KEY_STEPS and tl["events"] == ef.rows and tl["max_events"] == limit
    assert {key.median, key.slowest} <= set(tl["steps"]) and tl["steps"] == sorted(tl["steps"])
    assert (tl["median_step"], tl["slowest_step"]) == (key.median, key.slowest)
    assert set(tl["steps"]) | set(tl["outlier_steps_left_out"]) == {key.median, key.slowest, *key.outliers}
    assert main(["export", str(out), "--chrome", "-o", str(tmp_path / "whole.json")]) == 0
    wanted = np.array(tl["steps"])
    rows = rows_in_steps(tmp_path / "whole.json", ef, lambda s: np.isin(s, wanted))
    assert trace_rows(out / "timeline_0.json")[0] == rows
    flows = [e for e in json.loads((out / "timeline_0.json").read_text())["traceEvents"] if e["ph"] in "sf"]
    assert tl["events_written"] == len(rows) + len(flows) < ef.rows
    assert trace_steps(out / "timeline_0.json") == tl["steps"]


def test_export_chrome_of_a_directory_without_event_file(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--chrome"]) != 0
    err = capsys.readouterr().err
    assert "has no event file" in err and "Traceback" not in err


def test_the_timeline_note_points_at_export_when_the_trace_holds_key_steps_only():
    """A window drawing only its longest events says where every event is: the Chrome trace when it holds
    them all, else `profview export --chrome` (profiler_info `timeline`)."""
    from types import SimpleNamespace

    from profiler.formats.columns import TIMELINE_FULL, TIMELINE_KEY_STEPS
    from viewer.pages.timeline import _window_note

    tl = SimpleNamespace(path=Path("events_0.arrow"))
    window = SimpleNamespace(total=10, events=[1, 2, 3], hidden_max_ms=0.002, hidden_ms=0.01)
    assert _window_note(tl, window, {"content": TIMELINE_FULL}).endswith(
        "Open timeline_0.json in Perfetto for every event."
    )
    key_steps = _window_note(tl, window, {"content": TIMELINE_KEY_STEPS, "file": "timeline_0.json.gz", "steps": [3, 7]})
    assert "timeline_0.json.gz holds the key steps only ([3, 7])" in key_steps
    assert "profview export --chrome DIR --steps A:B" in key_steps and "Perfetto" not in key_steps
    assert (
        _window_note(tl, SimpleNamespace(total=3, events=[1, 2, 3]), {})
        == "All 3 events overlapping this window are drawn."
    )

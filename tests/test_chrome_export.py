"""What timeline_{rank}.json holds (every event within `timeline_max_events`, else the key steps:
median, slowest, outliers) and `profview export --chrome`, which writes the Chrome trace again from
the event file, byte for byte what analyse() writes for the same events: on a torch training loop,
a multi-thread recording with a queue, and a real Kineto GPU capture (device lanes, flows)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import ProfiledQueue, Profiler
from profiler.export.chrome_from_events import export_chrome_trace
from profiler.export.chrome_trace import write_chrome_trace
from profiler.export.timeline_model import timeline_events
from profiler.formats import TIMELINE_MAX_EVENTS, read_event_file, read_profiler_info
from profiler.postprocess.imported import import_capture
from profiler.postprocess.recording import load_rank
from viewer.cli import main

ORDINARY_S, OUTLIER_S, SLOWEST_S = 0.03, 0.3, 0.6  # a step's sleep: outliers 10x, the slowest 20x the others
OUTLIERS, SLOWEST = (12, 20), 7


def record_threads(out: Path, steps: int, slow: dict[int, float], **settings) -> None:
    """A loop fed by a loader thread through a probed queue, with phases, ops, marks and counters;
    step s sleeps `slow.get(s, ORDINARY_S)` in its forward phase."""
    p = Profiler(out, host_counters=False, gpu_counters=False, **settings)
    q = ProfiledQueue(maxsize=2, name="host_queue")

    def loader() -> None:
        for i in range(steps):
            with p.op("Decode", op_type="IO"):
                pass
            q.put(i)

    t = threading.Thread(target=loader, name="loader")
    t.start()
    for s in range(steps):
        q.get()
        with p.phase("forward"):
            with p.op("MatMul", op_type="MatMul"):
                time.sleep(slow.get(s, ORDINARY_S))
        with p.phase("backward"):
            with p.op("MatMulGrad", op_type="MatMul"):
                pass
        p.mark("bp_end")
        p.counter("loss", 1.0 / (s + 1))
        p.instant("tick")
        p.step()
    t.join()
    p.analyse(progress=False, quiet=True)


def expected_key_steps(out: Path) -> tuple[int, int, set[int]]:
    """Median, slowest and outlier steps by the report's rule, from step_trace_0.csv (warm-up step 0 left out)."""
    trace = pd.read_csv(out / "step_trace_0.csv")
    steps = trace[trace["step"] > trace["step"].min()]
    total = steps["total_ms"].to_numpy()
    by_time = steps.sort_values(["total_ms", "step"])
    median = int(by_time["step"].iloc[(len(steps) - 1) // 2])
    q1, mid, q3 = np.percentile(total, [25, 50, 75])
    fence = max(q3 + 1.5 * (q3 - q1), mid * 1.2)
    return median, int(steps.loc[steps["total_ms"].idxmax(), "step"]), set(steps.loc[total > fence, "step"].tolist())


def trace_steps(path: Path) -> list[int]:
    """The steps whose step event (the steps lane) a trace holds."""
    events = json.loads(path.read_text())["traceEvents"]
    return sorted(e["args"]["step"] for e in events if e["ph"] == "X" and e.get("cat") == "step")


@pytest.fixture(scope="module")
def over_limit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("over") / "profiler_data"
    slow = {SLOWEST: SLOWEST_S, **dict.fromkeys(OUTLIERS, OUTLIER_S)}
    record_threads(out, 24, slow, timeline_max_events=100)  # ~12 events a step: ~290 in all
    return out


def test_past_the_limit_the_trace_holds_exactly_the_median_slowest_and_outlier_steps(over_limit):
    out = over_limit
    info = read_profiler_info(out / "profiler_info_0.json")
    tl = info["timeline"]
    median, slowest, outliers = expected_key_steps(out)
    assert slowest == SLOWEST and set(OUTLIERS) | {SLOWEST} <= outliers  # the injected ones, 10-20x the others
    assert tl["content"] == "key steps" and tl["max_events"] == 100 and tl["events"] > 250
    assert (tl["median_step"], tl["slowest_step"], set(tl["outlier_steps"])) == (median, slowest, outliers)
    assert tl["outlier_steps_left_out"] == [] and tl["steps"] == sorted({median, slowest} | outliers)
    assert trace_steps(out / "timeline_0.json") == tl["steps"]
    rows = [
        line
        for line in (out / "timeline_0.json").read_text().splitlines()
        if line.startswith('{"ph":"') and '"ph":"M"' not in line
    ]
    assert len(rows) == tl["events_written"] <= 100
    assert {"timeline_0.json", "events_0.arrow"} <= set(info["outputs"])
    assert "profview export --chrome" in tl["rest"]
    # the trace of those steps, as the writer makes it from the run and as the event file gives it again
    ev = timeline_events(load_rank(out, 0))
    again = write_chrome_trace(ev.of_steps(tl["steps"]), out.parent / "of_steps.json")
    assert again.read_bytes() == (out / "timeline_0.json").read_bytes()
    wanted = np.array(tl["steps"])
    streamed = export_chrome_trace(
        read_event_file(out / "events_0.arrow"), out.parent / "streamed.json", keep=lambda step: np.isin(step, wanted)
    )
    assert streamed.read_bytes() == again.read_bytes()
    # and the whole run is there on demand
    assert main(["export", str(out), "--chrome", "-o", str(out.parent / "whole.json")]) == 0
    assert trace_steps(out.parent / "whole.json") == list(range(24))


def test_outliers_that_do_not_fit_are_left_out_slowest_kept(over_limit, tmp_path):
    """With room for about two steps the median and the slowest stay; the outliers are said left out."""
    from profiler.export.chrome_trace import trace_plan

    ev = timeline_events(load_rank(over_limit, 0))
    per_step = ev.step_counts([SLOWEST])[0]
    plan = trace_plan(ev, 2 * per_step + 1)
    assert plan.steps == tuple(sorted({ev.key_steps.median, SLOWEST}))
    assert set(plan.left_out) == set(ev.key_steps.outliers) - {SLOWEST}
    assert trace_plan(ev, ev.count).steps is None


def assert_export_matches(out: Path, tmp: Path, first: int, last: int) -> None:
    """`profview export --chrome` of the whole run is timeline_0.json, byte for byte; of steps
    first..last, the writer's trace of those steps."""
    info = read_profiler_info(out / "profiler_info_0.json")
    assert info["timeline"]["content"] == "full" and info["timeline"]["max_events"] == TIMELINE_MAX_EVENTS
    assert main(["export", str(out), "--chrome", "-o", str(tmp / "whole.json")]) == 0
    assert (tmp / "whole.json").read_bytes() == (out / "timeline_0.json").read_bytes()
    ev = timeline_events(load_rank(out, 0)) if (out / "raw").is_dir() else None
    assert main(["export", str(out), "--chrome", "--steps", f"{first}:{last}"]) == 0
    ranged = out / f"timeline_0_steps_{first}-{last}.json"
    if ev is not None:
        assert ranged.read_bytes() == write_chrome_trace(ev.in_steps(first, last), tmp / "range.json").read_bytes()
    assert trace_steps(ranged) == list(range(first, last + 1))
    assert 0 < len(ranged.read_bytes()) < len((out / "timeline_0.json").read_bytes())


def test_export_chrome_is_the_analysed_trace_of_a_torch_loop(tmp_path, torch_one_thread):
    from support.torch_loops import profiled_cnn_run

    from profiler import schedule

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
    from profiler.analysis.steps import ensure_steps
    from profiler.importers.kineto import read_kineto_trace

    ev = timeline_events(ensure_steps(read_kineto_trace(captures / "kineto" / "sampled_rank-0.json.gz")))
    assert main(["export", str(out), "--chrome", "--steps", "552:552", "-o", str(tmp_path / "one.json")]) == 0
    one = (tmp_path / "one.json").read_bytes()
    assert one == write_chrome_trace(ev.in_steps(552, 552), tmp_path / "w.json").read_bytes()
    flows = [e for e in json.loads(one)["traceEvents"] if e["ph"] in "sf"]
    assert 0 < len(flows) < sum(e["ph"] in "sf" for e in whole)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--chrome", "--to", "mlflow"], "wants one target"),
        ([], "wants one target"),
        (["--to", "mlflow", "--steps", "1:2"], "go with --chrome"),
    ],
)
def test_export_wants_exactly_one_target(over_limit, capsys, argv, says):
    assert main(["export", str(over_limit), *argv]) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_export_chrome_of_a_directory_without_event_file(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--chrome"]) != 0
    err = capsys.readouterr().err
    assert "has no event file" in err and "Traceback" not in err


def test_the_timeline_note_points_at_export_when_the_trace_holds_key_steps_only():
    """A window drawing only its longest events says where every event is: the Chrome trace when it holds
    them all, else `profview export --chrome` (profiler_info `timeline`)."""
    from types import SimpleNamespace

    from profiler.formats import TIMELINE_FULL, TIMELINE_KEY_STEPS
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

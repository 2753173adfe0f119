"""Small pieces of the viewer: escaping, option parsing, the event file and its level of detail, thinning."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from viewer.cli import parse_steps
from viewer.formatting import clean
from viewer.html import plot_text, script_json
from viewer.lod import busy_levels, captured_runs, depths, self_times, step_windows, window_events
from viewer.series import thin
from viewer.server import is_loopback
from viewer.trace import load_timeline

from support.viewer_fixtures import XSS, Spec, write_run


def test_script_json_cannot_close_the_script():
    text = script_json({"name": "</script><!--" + XSS, "u": "\u2028&"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": "</script><!--" + XSS, "u": "\u2028&"}


def test_plot_text_escapes_tags():
    assert plot_text(XSS) == "&lt;img src=x onerror=alert(1)&gt;"


def test_terminal_summary_drops_control_characters():
    assert clean("a\x1b[31mred\x07", 0) == "a?[31mred?"
    assert clean("x" * 50, 10) == "x" * 9 + "…"


@pytest.mark.parametrize("text, expected", [("3:7", (3, 7)), ("3:", (3, None)), (":7", (None, 7)), ("5", (5, 5))])
def test_parse_steps(text, expected):
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text", ["a:b", "7:3"])
def test_parse_steps_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_steps(text)


def test_loopback_detection():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")


def small_run(tmp_path, steps=8, ops=6):
    run = write_run(tmp_path / "run", Spec(steps=steps, ops_per_step=ops, queues=False, counters=False))
    return run, load_timeline(run / "events_0.arrow")


def test_event_file_lanes_and_rows(tmp_path):
    run, tl = small_run(tmp_path)
    assert tl.lanes["kind"].tolist() == ["host", "host", "steps", "device"]
    assert tl.phase_counts == {"X": 8 * 6 * 2 + 8 * 3, "i": 1}
    for lane in range(4):  # every lane's rows sorted by start
        first, count, longest = tl.file.lane_rows(lane)
        start = tl.file.column("start_ns", first, first + count)
        assert count and np.all(np.diff(start) >= 0)
        assert longest == tl.file.column("dur_ns", first, first + count).max()
        for t in (int(start[0]) - 1, int(start[count // 2]), int(start[-1]) + 1):
            assert tl.file.lane_search(lane, t) == first + np.searchsorted(start, t)


def test_busy_counts_nested_events_once(tmp_path):
    """Busy time is the union of a lane's events: the forward phase holds the launches, so
    MainThread's busy time is forward + the launch before it; every event is counted at every level."""
    run, tl = small_run(tmp_path)
    t0, t1 = tl.time_range_ns()
    levels = busy_levels(tl, [0, 1, 3], t0, t1, levels=3)
    first, count, _ = tl.file.lane_rows(0)
    start = tl.file.column("start_ns", first, first + count)
    end = start + tl.file.column("dur_ns", first, first + count)
    union, reach = 0, None
    for s, e in sorted(zip(start.tolist(), end.tolist())):
        if reach is None or s >= reach:
            union += e - s
            reach = e
        elif e > reach:
            union += e - reach
            reach = e
    assert abs(levels.covered_ns[0].sum() - union) < 1e-3 * union
    for level in range(3):
        busy, started = levels.level(level)
        assert started.sum() == count + 8 + 8 * 6 and busy.max() <= 1.0
        assert started.shape[1] == 1200 << level


def test_window_events_and_self_time(tmp_path):
    run, tl = small_run(tmp_path)
    steps = __import__("pandas").read_csv(run / "step_trace_0.csv")
    t0, t1 = float(steps["start_ms"][3]), float(steps["start_ms"][3] + steps["total_ms"][3])
    w = window_events(tl, "step 3", t0, t1, budget=10_000)
    ev = w.events
    assert w.total == len(ev) and set(ev["step"]) >= {3}
    assert (ev["start_ns"] < t1 * 1e6).all() and ((ev["start_ns"] + ev["dur_ns"]) > t0 * 1e6).all()
    names = tl.names(ev["name"].to_numpy())
    forward = names.index("forward")
    inside = (
        (ev["lane"] == ev["lane"][forward])
        & (ev["start_ns"] >= ev["start_ns"][forward])
        & (ev["start_ns"] + ev["dur_ns"] <= ev["start_ns"][forward] + ev["dur_ns"][forward])
    )
    inside[forward] = False
    assert ev["self_ns"][forward] == ev["dur_ns"][forward] - ev["dur_ns"][inside].sum()
    few = window_events(tl, "step 3", t0, t1, budget=5)
    assert len(few.events) == 5 and few.total == w.total and few.hidden_ms > 0


def test_default_window_is_the_median_captured_step():
    import pandas as pd

    steps = pd.DataFrame({"step": range(10), "start_ms": np.arange(10) * 10.0, "total_ms": [10.0] * 9 + [30.0]})
    windows = step_windows(steps, None, {6: 50, 7: 40, 8: 60})
    assert windows[0][0].startswith("median captured step: step 7")
    assert windows[1][0].startswith("captured window: steps 6–8")
    assert captured_runs([8, 6, 7, 2]) == [(2, 2), (6, 8)]
    assert step_windows(steps, None, dict.fromkeys(range(10), 5))[0][0].startswith("median step")


def test_self_times_subtract_direct_children_only():
    lane = np.zeros(4, np.int64)
    start, end = np.array([0, 10, 12, 50]), np.array([100, 40, 20, 60])
    assert self_times(lane, start, end).tolist() == [100 - 30 - 10, 30 - 8, 8, 10]


def test_depths_stack_nested_events():
    assert depths(np.array([0, 0, 0]), np.array([0, 1, 5]), np.array([4, 2, 6])).tolist() == [0, 1, 0]
    # touching spans (steps) stay on one row
    assert depths(np.zeros(3, np.int64), np.array([0, 10, 20]), np.array([10, 20, 30])).tolist() == [0, 0, 0]


def test_thin_keeps_extremes():
    x = np.arange(10_000.0)
    y = np.zeros_like(x)
    y[1234] = 99.0
    s = thin(x, y, max_points=100)
    assert len(s.x) == 100 and s.high.max() == 99.0 and s.binned_from == 10_000


def test_a_run_with_steps_only_has_a_timeline(tmp_path):
    """No span, no op: the page draws the phase row and says there is no busy-ness (no traceback)."""
    import time

    from profiler import Profiler
    from viewer.context import Context
    from viewer.inputs import load_input
    from viewer.report import build_report

    p = Profiler(output_path=tmp_path, host_counters=False, gpu_counters=False)
    for _ in range(4):
        time.sleep(0.001)
        p.step()
    p.analyse(progress=False)
    html = build_report(Context(load_input(tmp_path)))
    assert "no host thread or device stream recorded a span or an op" in html


def test_a_directory_without_event_file_says_so(tmp_path):
    """An output directory analysed before the event file existed: the timeline page says how to get it."""
    from viewer.context import Context
    from viewer.inputs import load_input
    from viewer.report import build_report

    run = write_run(tmp_path / "old", Spec(steps=6, ops_per_step=4, timeline=False))
    (run / "timeline_0.json").write_text('{"traceEvents":[]}')
    html = build_report(Context(load_input(run)))
    assert "No event file (events_0.arrow) in this run." in html
    assert "the viewer reads only the event file: re-run" in html


@pytest.mark.parametrize(
    "ms, report, terminal",
    [
        (1234.5, "1,234 ms", "1.23 s"),
        (150.0, "150 ms", "150.0 ms"),
        (12.345, "12.35 ms", "12.3 ms"),
        (2.5, "2.50 ms", "2.50 ms"),
        (0.25, "250.0 µs", "0.25 ms"),
        (0.0, "0.0 µs", "0.00 ms"),
        (-0.5, "-500.0 µs", "-0.50 ms"),
        (float("nan"), "nan µs", "—"),
        (float("inf"), "inf ms", "—"),
    ],
)
def test_durations_in_the_report_and_the_terminal(ms, report, terminal):
    from viewer.formatting import REPORT, TERMINAL, fmt_ms

    assert fmt_ms(ms) == fmt_ms(ms, REPORT) == report
    assert fmt_ms(ms, TERMINAL) == terminal


def test_signed_changes_and_missing_values():
    from viewer.formatting import fmt_bytes, fmt_duration, fmt_ms, fmt_pct, fmt_seconds

    assert [fmt_ms(v, signed=True) for v in (2.5, -2.5, 0.0)] == ["+2.50 ms", "-2.50 ms", "0.0 µs"]
    assert [fmt_pct(v) for v in (12.345, -3.0)] == ["12.3 %", "-3.0 %"]
    assert [fmt_pct(v, signed=True, missing="n/a") for v in (4.0, -4.0, None, float("nan"))] == [
        "+4.0 %",
        "-4.0 %",
        "n/a",
        "n/a",
    ]
    assert (fmt_seconds(1_234_567.0), fmt_seconds(None)) == ("1,234.57 s", "—")
    assert [fmt_duration(s) for s in (12.34, 245, 7625)] == ["12.3 s", "4m05s", "2h07m"]
    assert [fmt_bytes(n) for n in (3 * 2**30, 5 * 2**20, float("nan"))] == ["3.00 GB", "5.0 MB", "—"]


def test_plain_json_values_as_a_file_holds_them():
    from profiler.formats.text import plain_document, plain_value

    doc = {
        "n": np.int64(3),
        "x": np.float32(0.5),
        "bad": float("nan"),
        "arr": np.array([1, 2]),
        "t": (1, "a"),
        7: True,
        "nested": [{"inf": np.float64("inf")}],
        "path": Path("/tmp/x"),
    }
    got = plain_document(doc)
    assert (
        got
        == json.loads(json.dumps(got))
        == {
            "n": 3,
            "x": 0.5,
            "bad": None,
            "arr": [1, 2],
            "t": [1, "a"],
            "7": True,
            "nested": [{"inf": None}],
            "path": "/tmp/x",
        }
    )
    assert type(got["n"]) is int and type(got["x"]) is float
    assert [plain_value(v, digits=4) for v in (np.float64(1.234567), 2, "gpu:0")] == [1.2346, 2, "gpu:0"]
    assert script_json({"a": np.arange(3), "b": np.int32(5)}) == '{"a":[0,1,2],"b":5}'


def test_every_page_module_is_a_tab_of_the_report():
    """Adding a page is a module in viewer/pages/ with its PAGE, and its line in report.PAGES."""
    import importlib
    import pkgutil

    import viewer.pages
    from viewer.page import Page
    from viewer.report import PAGES

    modules = [importlib.import_module(f"viewer.pages.{m.name}") for m in pkgutil.iter_modules(viewer.pages.__path__)]
    assert modules and all(isinstance(m.PAGE, Page) for m in modules)
    assert sorted(m.PAGE.key for m in modules) == sorted(p.key for p in PAGES) and len(set(PAGES)) == len(PAGES)


def test_the_live_report_shows_the_pages_that_declare_a_live_mode(tmp_path):
    from viewer.context import Context
    from viewer.page import Live
    from viewer.report import PAGES, pages
    from viewer.rundata import load_profview_dir

    runs = load_profview_dir(write_run(tmp_path / "run", Spec(steps=6, ops_per_step=4)))
    assert [p.key for p in pages(Context(runs))] == [
        "overview",
        "operators",
        "pipeline",
        "timeline",
        "counters",
        "cluster",
    ]
    assert [p.key for p in pages(Context(runs, compare=runs))][:2] == ["overview", "compare"]
    live = [p.key for p in pages(Context(runs, live=True))]
    assert (
        live == [p.key for p in PAGES if p.live is not Live.HIDDEN] == ["overview", "operators", "pipeline", "counters"]
    )


@pytest.mark.parametrize(
    "name, short",
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            "at::native::vectorized_elementwise_kernel",
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>("
            "cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1::Params)",
            "cutlass::Kernel",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>(float*, int)",
            "(anonymous namespace)::softmax_warp_forward",
        ),
        (
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int>(cublasGemvParamsEx<int>)",
            "internal::gemvx::kernel",
        ),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "ncclKernel_AllReduce_RING_LL_Sum_float"),
        (  # a mangled name, as nccl_data's cuDNN CUTLASS kernels are written
            "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22Implicit",
            "cutlass_cudnn_train::Kernel",
        ),
        ("_Zfoo", "_Zfoo"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),  # not a signature
        ("aten::conv2d", "aten::conv2d"),
        ("volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"),
        ("other (12 types)", "other (12 types)"),
    ],
)
def test_a_kernel_signature_is_labelled_by_its_function(name, short):
    from viewer.formatting import short_name

    assert short_name(name) == short


def test_colliding_short_names_are_numbered_and_the_chart_hovers_the_full_name(captures):
    """Two cutlass kernels share the short name cutlass::Kernel: the axis numbers them, the hover holds each
    full signature; on a real trace every label of the device chart is unique and none is a signature's tail."""
    from viewer.formatting import short_labels
    from viewer.inputs import load_input
    from viewer.pages.operators import type_shares

    a, b = "void cutlass::Kernel<A>(A::Params)", "void cutlass::Kernel<B>(B::Params)"
    assert short_labels([a, b, "aten::mm", a]) == [
        "cutlass::Kernel (1)",
        "cutlass::Kernel (2)",
        "aten::mm",
        "cutlass::Kernel (1)",
    ]
    run = load_input(captures / "kineto" / "diff_test.json.gz")[0]
    device = next(d for d in run.op_type["device"].unique() if d != "cpu")
    fig = type_shares(run.op_type, device, 15)
    labels, full = list(fig.data[0].y), [c[2] for c in fig.data[0].customdata]
    assert len(set(labels)) == len(labels)
    for label in labels:  # no template arguments, no parameter list: the function's name
        assert "<" not in label and not label.endswith(")") or label.startswith(("Memcpy", "Memset", "other ("))
    assert any(len(f) > 80 for f in full)  # the signatures stay whole in the hover


def test_the_step_bars_stack_the_activities_in_the_order_an_instant_is_given_to_them():
    from profiler.formats.columns import COMM_SPLIT_COLUMNS, STEP_ACTIVITY_COLUMNS
    from viewer.pages.kernels import ACTIVITY_STYLE
    from viewer.theme import COMM_SPLIT_STYLE

    assert list(ACTIVITY_STYLE) == STEP_ACTIVITY_COLUMNS[1:-1]
    assert list(COMM_SPLIT_STYLE) == COMM_SPLIT_COLUMNS[1:-1]

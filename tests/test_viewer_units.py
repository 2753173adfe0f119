"""Small pieces of the viewer: escaping, option parsing, the timeline reader's two paths, thinning."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from viewer.cli import parse_steps
from viewer.html import plot_text, script_json
from viewer.lod import busy_bins, depths
from viewer.series import thin
from viewer.server import is_loopback
from viewer.summary import clean
from viewer.trace import _assemble, _open_buffer, _read_json, parse_numbers, read_trace
from viewer_fixtures import XSS, Spec, write_run


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


def test_parse_numbers_formats():
    data = b'x 12.5, -3,   0.001} 7e3, 123456789012.125,1.,  -0.5}'
    values = parse_numbers(np.frombuffer(data, np.uint8), np.array([1, 7, 11, 21, 26, 43, 46]))
    assert values.tolist() == [12.5, -3.0, 0.001, 7000.0, 123456789012.125, 1.0, -0.5]


def test_fast_reader_matches_json(tmp_path):
    run = write_run(tmp_path / "run", Spec(steps=8, ops_per_step=6))
    path = run / "timeline_0.json"
    fast = read_trace(path)
    slow = _assemble(path, *_read_json(_open_buffer(path), path))
    assert np.array_equal(fast.lane, slow.lane)
    assert np.array_equal(fast.ts_us, slow.ts_us) and np.array_equal(fast.dur_us, slow.dur_us)
    assert fast.phase_counts == slow.phase_counts
    assert fast.lanes["label"].tolist() == slow.lanes["label"].tolist()
    assert fast.details(np.arange(5)) == slow.details(np.arange(5))


def test_pretty_printed_trace_falls_back_to_json(tmp_path):
    path = tmp_path / "t.json"
    events = [{"ph": "X", "name": "a", "pid": "p", "tid": "main", "ts": 1, "dur": 2},
              {"ph": "M", "name": "thread_name", "pid": "p", "tid": "main", "args": {"name": "Main"}}]
    path.write_text(json.dumps({"traceEvents": events}, indent=2))
    trace = read_trace(path)
    assert trace.ts_us.tolist() == [1.0] and trace.lanes["thread"].tolist() == ["Main"]


def test_busy_counts_nested_events_once():
    class T:  # the few Trace fields busy_bins reads
        lanes = [0]
        lane = np.array([0, 0])
        ts_us = np.array([0.0, 1000.0])
        dur_us = np.array([4000.0, 1000.0])   # an event nested inside another
    busy = busy_bins(T, 0.0, 8.0, bins=2)
    assert busy.busy[0].tolist() == [1.0, 0.0] and busy.started[0].tolist() == [2, 0]


def test_depths_stack_nested_events():
    assert depths(np.array([0, 0, 0]), np.array([0.0, 1.0, 5.0]), np.array([4.0, 2.0, 6.0])).tolist() == [0, 1, 0]


def test_thin_keeps_extremes():
    x = np.arange(10_000.0)
    y = np.zeros_like(x)
    y[1234] = 99.0
    s = thin(x, y, max_points=100)
    assert len(s.x) == 100 and s.high.max() == 99.0 and s.binned_from == 10_000

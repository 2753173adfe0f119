"""Any op / span / counter name and any counter value survives a real recording, `analyse()`, every
output file and the viewer (docs/formats.md, "Text and names").

A real Profiler records ops, spans and counters named with what breaks naive CSV / JSON / HTML
writers (empty, control characters, commas, quotes, unicode, lone surrogates, a 1 MB name) and
counter values NaN / inf / -inf; `profview DIR -o r.html` and `profview DIR --summary` then run as
the user runs them. Names must come back equal in op_detail_{rank}.csv, device_counters_{rank}.csv
and the report's op table, except lone surrogates, which no UTF-8 file can hold: they come back
escaped as docs/formats.md says (`profiler.formats.valid_text`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler import Profiler
from profiler.formats import read_csv, valid_text

REPO = Path(__file__).resolve().parents[1]

#: The names the brief lists, and a few more that defeat CSV readers (NA / nan / null are text).
ODD_NAMES = [
    "",
    "\x00",
    "\r",
    "\n",
    "\r\n",
    "a,b",
    'q"uote',
    '"',
    "ünï€😀",
    os.fsdecode(b"\xff"),
    "x\ud800y",
    "c\x00d",
    " lead",
    "trail ",
    "=1+2",
    "1",
    "nan",
    "NA",
    "null",
    "#c",
    "<script>alert(1)</script>",
    "\u2028",
    "N" * (1 << 20),
]
ODD_VALUES = [float("nan"), float("inf"), float("-inf"), 1.5]


def _record(out: Path, names: list[str], values: list[float]) -> None:
    """A real recording: each name as an op (with itself as op type), a span and a counter."""
    profiler = Profiler(str(out), host_counters=False, gpu_counters=False, flush_interval_s=0.05)
    for step in range(max(3, len(values))):
        for name in names:
            with profiler.op(name, op_type=name):
                pass
            with profiler.span(name):
                pass
            profiler.counter(name, values[step % len(values)])
        profiler.step()
    profiler.analyse(progress=False, quiet=True)


def _profview(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DISPLAY", None)
    return subprocess.run(
        [sys.executable, "-m", "viewer.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        errors="replace",
    )


def _csv_rows(path: Path) -> list[dict[str, str]]:
    csv.field_size_limit(1 << 30)
    with open(path, newline="", encoding="utf-8") as f:  # strict UTF-8: a lone surrogate cannot be there
        return list(csv.DictReader(f))


def _report_tables(html: str) -> list:
    """Every JSON data block of the report (the op table's rows among them), parsed."""
    blocks = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html, flags=re.S)
    return [json.loads(b) for b in blocks]


def _check_round_trip(out: Path, names: list[str], values: list[float], tmp: Path) -> None:
    expected = {valid_text(n) for n in names}
    # op_detail with the csv module (what a user's script does) and with profview's own reader
    detail = _csv_rows(out / "op_detail_0.csv")
    assert {r["name"] for r in detail} == expected
    assert {r["op_type"] for r in detail} == expected
    assert set(read_csv(out / "op_detail_0.csv", "op_detail")["name"]) == expected
    assert set(read_csv(out / "op_type_0.csv", "op_type")["op_type"]) == expected
    counters = read_csv(out / "device_counters_0.csv", "device_counters")
    assert set(counters["metric"]) == expected
    written = {(r["metric"], r["value"]) for r in _csv_rows(out / "device_counters_0.csv")}
    for value in values:
        spelled = (
            "nan"
            if math.isnan(value)
            else "inf"
            if value == math.inf
            else "-inf"
            if value == -math.inf
            else f"{value:.6f}"
        )
        assert any(v == spelled for _, v in written), (spelled, sorted({v for _, v in written}))
    # every JSON output is strict RFC 8259 (no NaN / Infinity literals) and UTF-8
    for name in ("profiler_info_0.json", "report_0.json"):
        json.loads(
            (out / name).read_bytes().decode("utf-8"), parse_constant=lambda c, name=name: pytest.fail(f"{name}: {c}")
        )
    # the viewer reads the run's own files: HTML report and summary
    report = tmp / "r.html"
    result = _profview(out, "-o", report)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    html = report.read_bytes().decode("utf-8")
    assert "alert(1)</script>" not in html  # escaped wherever a name is shown
    rows = [
        row for block in _report_tables(html) if isinstance(block, dict) and "rows" in block for row in block["rows"]
    ]
    assert {row[1] for row in rows} == expected  # the op table's name column
    result = _profview(out, "--summary")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "\r" not in result.stdout.replace("\r\n", "\n") and "\x00" not in result.stdout


def test_odd_names_and_non_finite_counters_round_trip(tmp_path: Path):
    """The brief's list through a real recording, analyse(), `profview -o` and `--summary`."""
    names = list(ODD_NAMES)
    _record(tmp_path / "run", names, ODD_VALUES)
    _check_round_trip(tmp_path / "run", names, ODD_VALUES, tmp_path)
    # the escape is documented: an undecodable byte as \xNN, any other lone surrogate as \uXXXX
    detail = {r["name"] for r in _csv_rows(tmp_path / "run" / "op_detail_0.csv")}
    assert "\\xff" in detail and "x\\ud800y" in detail
    # CR is quoted: the file still has one row per op for a reader that splits rows at a bare CR
    raw = (tmp_path / "run" / "op_detail_0.csv").read_bytes()
    assert b'"\r"' in raw and b'"\r\n"' in raw


def test_a_name_ending_in_nul_keeps_it(tmp_path: Path):
    _record(tmp_path / "run", ["", "\x00"], [1.0])
    assert {r["name"] for r in _csv_rows(tmp_path / "run" / "op_detail_0.csv")} == {"", "\x00"}


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: Any code point, surrogates and control characters included (hypothesis leaves Cs out by default).
_ANY_CHAR = st.characters(codec=None, categories=None)


@settings(max_examples=6, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    names=st.lists(st.text(_ANY_CHAR, max_size=12), min_size=1, max_size=6, unique_by=valid_text),
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=3),
)
def test_any_names_round_trip(tmp_path_factory, names, values):
    tmp = tmp_path_factory.mktemp("names")
    _record(tmp / "run", names, values)
    _check_round_trip(tmp / "run", names, values, tmp)

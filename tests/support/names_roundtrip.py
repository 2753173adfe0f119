"""A real recording of ops, spans and counters with given names and counter values, and the check that
they come back from every output file and the viewer (docs/formats.md, "Text and names"); used by
tests/integration/test_names_roundtrip.py (the odd names) and tests/e2e/test_names_search.py (any names)."""

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
from profiler.formats.tables import read_csv
from profiler.formats.text import valid_text

REPO = Path(__file__).resolve().parents[2]


def record(out: Path, names: list[str], values: list[float]) -> None:
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


def profview(*args) -> subprocess.CompletedProcess:
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


def csv_rows(path: Path) -> list[dict[str, str]]:
    csv.field_size_limit(1 << 30)
    with open(path, newline="", encoding="utf-8") as f:  # strict UTF-8: a lone surrogate cannot be there
        return list(csv.DictReader(f))


def report_tables(html: str) -> list:
    """Every JSON data block of the report (the op table's rows among them), parsed."""
    blocks = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html, flags=re.S)
    return [json.loads(b) for b in blocks]


def check_round_trip(out: Path, names: list[str], values: list[float], tmp: Path) -> None:
    expected = {valid_text(n) for n in names}
    # op_detail with the csv module (what a user's script does) and with profview's own reader
    detail = csv_rows(out / "op_detail_0.csv")
    assert {r["name"] for r in detail} == expected
    assert {r["op_type"] for r in detail} == expected
    assert set(read_csv(out / "op_detail_0.csv", "op_detail")["name"]) == expected
    assert set(read_csv(out / "op_type_0.csv", "op_type")["op_type"]) == expected
    counters = read_csv(out / "device_counters_0.csv", "device_counters")
    assert set(counters["metric"]) == expected
    written = {(r["metric"], r["value"]) for r in csv_rows(out / "device_counters_0.csv")}
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
    result = profview(out, "-o", report)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    html = report.read_bytes().decode("utf-8")
    assert "alert(1)</script>" not in html  # escaped wherever a name is shown
    rows = [
        row for block in report_tables(html) if isinstance(block, dict) and "rows" in block for row in block["rows"]
    ]
    assert {row[1] for row in rows} == expected  # the op table's name column
    result = profview(out, "--summary")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "\r" not in result.stdout.replace("\r\n", "\n") and "\x00" not in result.stdout

"""Any op / span / counter name and any counter value survives a real recording, `analyse()`, every
output file and the viewer (docs/formats.md, "Text and names").

A real Profiler records ops, spans and counters named with what breaks naive CSV / JSON / HTML
writers (empty, control characters, commas, quotes, unicode, lone surrogates, a 1 MB name) and
counter values NaN / inf / -inf; `profview DIR -o r.html` and `profview DIR --summary` then run as
the user runs them. Names must come back equal in op_detail_{rank}.csv, device_counters_{rank}.csv
and the report's op table, except lone surrogates, which no UTF-8 file can hold: they come back
escaped as docs/formats.md says (`profiler.formats.valid_text`). The search over any names (hypothesis)
is tests/e2e/test_names_search.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.names_roundtrip import check_round_trip, csv_rows, record

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


def test_odd_names_and_non_finite_counters_round_trip(tmp_path: Path):
    """The brief's list through a real recording, analyse(), `profview -o` and `--summary`."""
    names = list(ODD_NAMES)
    record(tmp_path / "run", names, ODD_VALUES)
    check_round_trip(tmp_path / "run", names, ODD_VALUES, tmp_path)
    # the escape is documented: an undecodable byte as \xNN, any other lone surrogate as \uXXXX
    detail = {r["name"] for r in csv_rows(tmp_path / "run" / "op_detail_0.csv")}
    assert "\\xff" in detail and "x\\ud800y" in detail
    # CR is quoted: the file still has one row per op for a reader that splits rows at a bare CR
    raw = (tmp_path / "run" / "op_detail_0.csv").read_bytes()
    assert b'"\r"' in raw and b'"\r\n"' in raw


def test_a_name_ending_in_nul_keeps_it(tmp_path: Path):
    record(tmp_path / "run", ["", "\x00"], [1.0])
    assert {r["name"] for r in csv_rows(tmp_path / "run" / "op_detail_0.csv")} == {"", "\x00"}

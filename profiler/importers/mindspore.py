"""Importing MindSpore / MindInsight profiler output directories as profview Runs.

Two layouts are read (see docs/ascend.md):

* Ascend device outputs (MindInsight 2020 and MindSpore 1.x): `step_trace_raw_<dev>_detail_time.csv`
  (all-reduce columns named `stream_<sid>_parallel_<k>_*` in 2020, `stream_<sid>_<k>_<OpType>*`
  later), `output_timeline_data_<dev>.txt` (one line per op execution), `framework_raw_<dev>.csv`
  (op types, tensor shapes), `min_cycle_counter_<dev>.txt`, `aicore_intermediate_<dev>_*.csv`.
* MindSpore 2.x CPU outputs: `FRAMEWORK/cpu_op_execute_timestamp_<rank>.txt` (every launch),
  `cpu_op_detail_info_<rank>.csv` (op types), `cpu_framework_<rank>.txt` (shapes per launch) and
  `ASCEND_PROFILER_OUTPUT/trace_view.json` (scope spans; launches when the timestamp file is absent).

Unreadable files become warnings; a directory with nothing usable raises ProfviewError.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError
from profiler.importers.ascend.device_run import (
    SYSCNT_TICK_NS,
    device_run,
    dims,
    input_shapes,
    lookup,
    op_type_from_name,
    reduce_spans,
    shapes_text,
)
from profiler.importers.ascend.hwts import MAX_SYSCNT
from profiler.importers.base import CERTAIN, NOT_IT, SHAPED, Importer
from profiler.model import Run, RunInfo

#: The data_origin of the runs read from a MindSpore / MindInsight output directory.
DATA_ORIGIN = "mindspore"

_ASCEND_FILES = {
    "step_trace": re.compile(r"^step_trace_raw_(\d+)_detail_time\.csv$"),
    "timeline": re.compile(r"^output_timeline_data_(\d+)\.txt$"),
    "framework": re.compile(r"^framework_raw_(\d+)\.csv$"),
    "aicore_detail": re.compile(r"^aicore_intermediate_(\d+)_detail\.csv$"),
    "min_cycle_counter": re.compile(r"^min_cycle_counter_(\d+)\.txt$"),
}
_CPU_FILES = {
    "timestamps": re.compile(r"^cpu_op_execute_timestamp_(\d+)\.txt$"),
    "op_detail": re.compile(r"^cpu_op_detail_info_(\d+)\.csv$"),
    "framework": re.compile(r"^cpu_framework_(\d+)\.txt$"),
}
#: MindSpore 2.x's output directories (Ascend outputs, framework files): they name MindSpore even when empty.
_OUTPUT_DIR, _FRAMEWORK_DIR = "ASCEND_PROFILER_OUTPUT", "FRAMEWORK"
_TRACE_VIEW = (f"{_OUTPUT_DIR}/trace_view.json", "trace_view.json")
#: Files of MindSpore 2.x's Ascend device output (not read: named when nothing else is usable).
_ASCEND_2X_FILES = ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv")

#: 2020 reduce columns: stream_<sid>_parallel_<k>; later: stream_<sid>_<k>_<OpType> (or _parallel).
_REDUCE_COLUMN = re.compile(r"^stream_(?P<sid>\d+)_(?:parallel_(?P<k_old>\d+)|(?P<k>\d+)_(?P<type>[A-Za-z]\w*))$")

#: Times in ms at or beyond this (2**62 ns) cannot be held as int64 ns with room for arithmetic.
_MAX_MS = 2**62 / 1e6

#: Unix ns of 2001-09-09: smaller host timestamps are not on the Unix clock.
_UNIX_NS_FLOOR = 10**18


class _Problems(list):
    """Messages about unusable input, in order."""

    def unreadable(self, path: Path, error: Exception) -> None:
        self.append(
            f"{path.name}: unreadable "
            f"({type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}); skipped"
        )


def _files_by_id(directory: Path, patterns: dict[str, re.Pattern[str]]) -> dict[int, dict[str, Path]]:
    """{id: {kind: path}} for the files of `directory` matching the kind patterns."""
    found: dict[int, dict[str, Path]] = {}
    for path in sorted(directory.iterdir()) if directory.is_dir() else []:
        for kind, pattern in patterns.items():
            match = pattern.match(path.name)
            if match and len(match[1]) <= 9 and path.is_file():  # a device / rank id names output files
                found.setdefault(int(match[1]), {})[kind] = path
    return found


def _cpu_dir(directory: Path) -> Path:
    """Where the CPU op files are: FRAMEWORK/ in MindSpore 2.x, the directory itself before."""
    return directory / _FRAMEWORK_DIR if (directory / _FRAMEWORK_DIR).is_dir() else directory


def _trace_view(directory: Path) -> Path | None:
    return next((directory / p for p in _TRACE_VIEW if (directory / p).is_file()), None)


def _layouts(directory: Path) -> list[tuple[str, int, dict[str, Path]]]:
    """(layout, device/rank id, files) for every device or rank with outputs in `directory`."""
    found = [("ascend", dev, files) for dev, files in _files_by_id(directory, _ASCEND_FILES).items()]
    cpu = _files_by_id(_cpu_dir(directory), _CPU_FILES)
    trace_view = _trace_view(directory)
    if trace_view is not None and not cpu:
        cpu = {0: {}}
    found += [
        ("cpu", rank, {**files, **({"trace_view": trace_view} if trace_view else {})}) for rank, files in cpu.items()
    ]
    return found


def _profiler_dirs(path: Path) -> list[Path]:
    """`path` when it holds profiler outputs, else its immediate subdirectories that do."""
    if _layouts(path):
        return [path]
    return [p for p in sorted(path.iterdir()) if p.is_dir() and _layouts(p)] if path.is_dir() else []


def is_mindspore_dir(path: str | Path) -> bool:
    """Whether `path` (or a direct subdirectory) holds MindSpore / MindInsight profiler outputs."""
    return bool(_profiler_dirs(Path(path)))


def mindspore_confidence(path: Path) -> float:
    """CERTAIN when `path` (or a direct subdirectory) holds MindSpore / MindInsight profiler outputs;
    SHAPED when it has only MindSpore 2.x's directories (reading it then says that nothing is usable)."""
    if not path.is_dir():
        return NOT_IT
    if is_mindspore_dir(path):
        return CERTAIN
    layout = (path / _OUTPUT_DIR).is_dir() or (path / _FRAMEWORK_DIR).is_dir() or any(path.glob(f"*/{_OUTPUT_DIR}"))
    return SHAPED if layout else NOT_IT


def read_mindspore_dir(path: str | Path) -> list[Run]:
    """One Run per device / rank found in a MindSpore / MindInsight profiler output directory."""
    path = Path(path)
    if not path.is_dir():
        raise ProfviewError(f"MindSpore profiler directory {path} does not exist or is not a directory.")
    runs, skipped = [], _Problems()
    for directory in _profiler_dirs(path):
        for layout, ident, files in _layouts(directory):
            problems = _Problems()
            reader = _read_ascend_outputs if layout == "ascend" else _read_cpu_outputs
            run = reader(ident, files, problems)
            for problem in problems:
                warnings.warn(problem, UserWarning, stacklevel=2)
            if run.ops.empty and run.steps.empty:
                skipped.append(f"{directory.name} {layout} {ident}: {'; '.join(problems) or 'no op timings or steps'}")
            else:
                runs.append(run)
    if not runs:
        reason = "; ".join(skipped) if skipped else "no MindSpore profiler output files were found"
        raise ProfviewError(f"MindSpore profiler directory {path} yields no usable run ({reason}).")
    for unusable in skipped:
        warnings.warn(f"skipped {unusable}", UserWarning, stacklevel=2)
    return runs


#: The format, for profiler.importers.registry: one rank per device (Ascend outputs) or rank (CPU outputs).
IMPORTER = Importer(
    data_origin=DATA_ORIGIN,
    title="MindSpore profiler output directory",
    detect=mindspore_confidence,
    read=read_mindspore_dir,
    framework="mindspore",
    exact_steps="a capture with a step trace (the device's iteration ends) gives exact boundaries",
)


# --- shared parsing helpers --------------------------------------------------------------------


def scaled_decimal_text(text: pd.Series, digits: int) -> np.ndarray:
    """Decimal strings times 10**digits as exact int64 ("1795245674352900.963", 3 -> 1795245674352900963).

    Exact where a float would not be (Unix µs need 19 significant digits); exponent forms fall
    back to float rounding. Raises ValueError naming the first value that is not a finite number
    in range (`scaled_decimals` gives a mask instead).
    """
    values, ok = scaled_decimals(text, digits)
    if not ok.all():
        bad = text.astype(str).to_numpy()[~ok][0]
        raise ValueError(f"{bad[:40]!r} is not a number in range")
    return values


#: Plain decimals: what MindSpore writes ("-0" included); anything else goes through float().
_PLAIN_DECIMAL = r"^-?\d{1,19}(?:\.\d*)?$"
#: |value| x 10**digits must stay below this (int64 with room for origin arithmetic).
_SCALED_LIMIT = 2**62


def scaled_decimals(text: pd.Series, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """Decimal strings times 10**digits as exact int64, and a mask of the values that were finite
    numbers in range (the others are 0): "nan", "inf", "", "1e400", "abc" and 19+ digit values are not."""
    text = text.astype(str).str.strip()
    if not len(text):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    plain = text.str.match(_PLAIN_DECIMAL).to_numpy(dtype=bool)
    values = np.zeros(len(text), dtype=np.int64)
    ok = plain.copy()
    if plain.any():
        t = text[plain]
        negative = t.str.startswith("-").to_numpy()
        parts = t.str.lstrip("-").str.partition(".")
        # 19 digits may exceed int64: compare as text (equal lengths) before converting
        in_int64 = (parts[0].str.len() < 19) | (parts[0] <= str(_SCALED_LIMIT - 1))
        whole = parts[0].where(in_int64, "0").astype(np.int64).to_numpy()
        fraction = parts[2].str.ljust(digits, "0").str[:digits].replace("", "0").astype(np.int64).to_numpy()
        fits = in_int64.to_numpy() & (whole < _SCALED_LIMIT // 10**digits)
        value = np.where(fits, whole, 0) * 10**digits + fraction
        values[plain] = np.where(negative, -value, value)
        ok[np.flatnonzero(plain)[~fits]] = False
    for i in np.flatnonzero(~plain):  # exponent forms and junk: rare, one by one
        try:
            number = float(text.iloc[i]) * 10**digits
        except ValueError:
            continue
        if np.isfinite(number) and abs(number) < _SCALED_LIMIT:
            values[i], ok[i] = int(round(number)), True
    return values, ok


def _read_csv(path: Path, problems: _Problems, required: list[str]) -> pd.DataFrame | None:
    """A CSV as text columns, or None (with a problem noted) when unreadable or lacking a column."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        problems.unreadable(path, error)
        return None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        problems.append(f"{path.name}: missing column(s) {missing}; skipped")
        return None
    return frame


def _tick_column(column: pd.Series, empty_is_zero: bool) -> tuple[np.ndarray, np.ndarray]:
    """A step-trace column of counter ticks as int64, and a mask of the cells that are whole numbers
    in [0, 2**59) ("" counts as 0 where `empty_is_zero`; "-0" is 0)."""
    text = column.astype(str).str.strip()
    if empty_is_zero:
        text = text.replace("", "0")
    whole = text.str.match(r"^-?\d{1,18}$").to_numpy(dtype=bool)
    values = np.zeros(len(text), dtype=np.int64)
    if whole.any():
        values[whole] = text[whole].astype(np.int64).to_numpy()
    ok = whole & (values >= 0) & (values < MAX_SYSCNT)
    return np.where(ok, values, 0), ok


def _run_info(layout: str, ident: int, device: str, files: dict[str, Path], problems: _Problems) -> RunInfo:
    return {
        "data_origin": DATA_ORIGIN,
        "rank": ident,
        "device_id": ident,
        "mindspore": {"layout": layout, "device": device},
        "sources": {kind: {"status": "ok", "files": [str(p)]} for kind, p in files.items()},
        "warnings": list(problems),
    }


def _no_steps() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype="int64") for c in ("step", "start_ns", "end_ns", "fp_start_ns", "bp_end_ns")}
    )


def _no_spans() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "lane": pd.Series(dtype=object),
            "lane_id": pd.Series(dtype="int64"),
            "kind": pd.Series(dtype=object),
            "name": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype="int64"),
            "dur_ns": pd.Series(dtype="int64"),
            "depth": pd.Series(dtype="int64"),
        }
    )


# --- Ascend device outputs -----------------------------------------------------------------------

#: Step-trace columns that repeat a difference of two points: (column, later point, earlier point).
_STEP_DIFFERENCES = (
    ("total", "end_point", "start_point"),
    ("iteration_interval", "fp_point", "start_point"),
    ("fp_and_bp", "bp_point", "fp_point"),
    ("tail", "end_point", "bp_point"),
)


def step_trace_tables(frame: pd.DataFrame, path: Path, problems: _Problems) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Steps (ns) and all-reduce intervals (stream_id, start_ns, end_ns) from a step-trace CSV's text columns.

    Summary rows are not steps: the average row (step_num `-`, MindInsight 2020) and the row MindSpore
    1.x writes after the steps with every point 0 (`0,0,0,0,0,0,1243211,0,0`: its averages of the
    intervals). A step row must hold whole tick counts in order (start <= fp <= bp <= end) that
    agree with its own `total`, `iteration_interval`, `fp_and_bp` and `tail` columns: a row that does
    not was damaged and is left out with a problem naming the file and line. An empty reduce
    cell (0) means the step had no such pair; a pair whose duration column disagrees with its
    points is left out. Without a bp_point column (inference runs) bp_end_ns is -1.
    """
    empty_steps = _no_steps(), pd.DataFrame({"stream_id": [], "start_ns": [], "end_ns": []})
    step_text = frame["step_num"].astype(str).str.strip()
    base = ["start_point", "end_point", "fp_point"] + (["bp_point"] if "bp_point" in frame else [])
    points = {c: _tick_column(frame[c], empty_is_zero=False) for c in base}
    zero_points = np.logical_and.reduce([points[c][1] & (points[c][0] == 0) for c in base])
    summary = step_text.isin(["-", "0"]).to_numpy() | zero_points  # MindSpore's steps count from 1
    step_ok = step_text.str.match(r"^\d{1,9}$").to_numpy(dtype=bool)
    step_num = np.where(step_ok, pd.to_numeric(step_text.where(step_ok, "0")).to_numpy(dtype=np.int64), 0)
    good = ~summary & step_ok & (step_num >= 1) & np.logical_and.reduce([points[c][1] for c in base])
    v = {c: points[c][0] for c in base}
    bp = v.get("bp_point", v["fp_point"])
    good &= (v["start_point"] <= v["fp_point"]) & (v["fp_point"] <= bp) & (bp <= v["end_point"])
    for column, later, earlier in _STEP_DIFFERENCES:
        if column in frame.columns and later in v and earlier in v:
            stated, stated_ok = _tick_column(frame[column], empty_is_zero=False)
            good &= stated_ok & (stated == v[later] - v[earlier])
    damaged = ~summary & ~good
    if damaged.any():
        lines = (np.flatnonzero(damaged) + 2).tolist()
        problems.append(
            f"{path.name}: {len(lines)} step row(s) whose points are not whole tick counts in order, or "
            f"disagree with the row's own total / interval columns, were left out (line "
            f"{', '.join(map(str, lines[:5]))}{'...' if len(lines) > 5 else ''})"
        )
    if not good.any():
        return empty_steps
    rows = np.flatnonzero(good)
    ns = lambda column: v[column][rows] * SYSCNT_TICK_NS
    steps = pd.DataFrame(
        {
            "step": step_num[rows] - 1,
            "start_ns": ns("start_point"),
            "end_ns": ns("end_point"),
            "fp_start_ns": ns("fp_point"),
            "bp_end_ns": ns("bp_point") if "bp_point" in v else -1,
        }
    )
    blocks = [
        (c, m)
        for c in frame.columns
        if (m := _REDUCE_COLUMN.match(c)) and f"{c}_start_point" in frame.columns and f"{c}_end_point" in frame.columns
    ]
    reduces, odd = [], 0
    for b, (c, m) in enumerate(blocks):
        (start, start_ok), (end, end_ok), (dur, dur_ok) = (
            _tick_column(frame[name].iloc[rows], empty_is_zero=True)
            for name in (f"{c}_start_point", f"{c}_end_point", c)
        )
        present = (start != 0) & (dur != 0)
        valid = start_ok & end_ok & dur_ok & (end >= start) & (dur == end - start)
        odd += int((present & ~valid).sum())
        keep = present & valid
        reduces.append(
            pd.DataFrame(
                {
                    "row": np.arange(len(rows))[keep],
                    "block": b,
                    "stream_id": int(m["sid"]),
                    "start_ns": start[keep] * SYSCNT_TICK_NS,
                    "end_ns": end[keep] * SYSCNT_TICK_NS,
                }
            )
        )
    if odd:
        problems.append(
            f"{path.name}: {odd} all-reduce interval(s) whose points disagree with their duration column were left out"
        )
    reduces = (
        pd.concat(reduces) if reduces else pd.DataFrame(columns=["row", "block", "stream_id", "start_ns", "end_ns"])
    )
    reduces = reduces.sort_values(["row", "block"], kind="stable")
    return steps, reduces[["stream_id", "start_ns", "end_ns"]].astype(np.int64).reset_index(drop=True)


def _op_descriptions(path: Path | None, problems: _Problems) -> pd.DataFrame:
    """framework_raw rows indexed by full_op_name: op_type and shapes text."""
    frame = _read_csv(path, problems, ["full_op_name", "op_type", "op_info"]) if path else None
    if frame is None:
        return pd.DataFrame({"op_type": pd.Series(dtype=object), "shapes": pd.Series(dtype=object)})
    shapes = []
    for text in frame["op_info"].tolist():
        try:
            shapes.append(input_shapes(json.loads(text)) if text else "")
        except (ValueError, AttributeError, TypeError, RecursionError):
            shapes.append("")
    return (
        pd.DataFrame({"op_type": frame["op_type"].to_numpy(), "shapes": shapes}, index=frame["full_op_name"].to_numpy())
        .groupby(level=0)
        .last()
    )


def _min_cycle_counter(path: Path | None, problems: _Problems) -> float | None:
    if path is None:
        return None
    try:
        value = float(path.read_text().strip())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        problems.unreadable(path, error)
        return None
    if not 0 <= value < MAX_SYSCNT:
        problems.append(f"{path.name}: {value!r} is not a counter value (ticks from 0 to 2**59); not used")
        return None
    return value


def _timeline_ops(files: dict[str, Path], device: str, problems: _Problems) -> pd.DataFrame:
    """Op executions from output_timeline_data, with types and shapes from framework_raw (absolute ns).

    Later MindSpore versions write start times relative to min_cycle_counter; those are moved
    back onto the syscnt clock so they line up with the step trace.
    """
    path = files.get("timeline")
    frame = _read_csv(path, problems, []) if path else None
    if frame is None or frame.shape[1] < 4:
        if path is not None and frame is not None:
            problems.append(
                f"{path.name}: expected 4 columns (op_name, stream_id, start_time(ms), duration(ms)); skipped"
            )
        elif path is None:
            problems.append(f"no output_timeline_data file for device {device}: there are no per-launch op timings")
        return pd.DataFrame(columns=["device", "stream", "name", "op_type", "start_ns", "dur_ns", "shapes", "source"])
    frame.columns = ["name", "stream", "start_ms", "dur_ms"] + list(frame.columns[4:])
    start_ms = pd.to_numeric(frame["start_ms"].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    dur_ms = pd.to_numeric(frame["dur_ms"].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (start_ms >= 0) & (start_ms < _MAX_MS) & (dur_ms >= 0) & (dur_ms < _MAX_MS)  # NaN fails every test
    if not ok.all():
        problems.append(
            f"{path.name}: {int((~ok).sum())} line(s) whose start_time or duration is not a finite, "
            f"non-negative number of ms were left out (line {_lines(np.flatnonzero(~ok) + 2)})"
        )
        frame, start_ms, dur_ms = frame[ok], start_ms[ok], dur_ms[ok]
    counter = _min_cycle_counter(files.get("min_cycle_counter"), problems)
    if counter is not None and len(start_ms) and start_ms.min() * 2 < counter / 1e5:
        start_ms = start_ms + counter / 1e5
    described = _op_descriptions(files.get("framework"), problems)
    names = frame["name"].astype(object)
    return pd.DataFrame(
        {
            "device": device,
            "stream": frame["stream"].str.strip().to_numpy(dtype=object),
            "name": names.to_numpy(),
            "op_type": lookup(names, described["op_type"], op_type_from_name).to_numpy(dtype=object),
            "start_ns": np.rint(start_ms * 1e6).astype(np.int64),
            "dur_ns": np.rint(dur_ms * 1e6).astype(np.int64),
            "shapes": lookup(names, described["shapes"], "").to_numpy(dtype=object),
            "source": "mindspore",
        }
    )


def _read_ascend_outputs(dev: int, files: dict[str, Path], problems: _Problems) -> Run:
    """A Run from the Ascend device outputs of one device (times on the device syscnt clock)."""
    device = f"npu:{dev}"
    ops = _timeline_ops(files, device, problems)
    if ops.empty and "aicore_detail" in files:
        problems.append(f"{files['aicore_detail'].name}: only per-op averages, no per-launch timings, were found")
    steps, reduces = _no_steps(), pd.DataFrame({"stream_id": [], "start_ns": [], "end_ns": []})
    path = files.get("step_trace")
    frame = _read_csv(path, problems, ["step_num", "start_point", "end_point", "fp_point"]) if path else None
    if frame is not None:
        steps, reduces = step_trace_tables(frame, path, problems)
    info = _run_info("ascend", dev, device, files, problems)
    info["clock"] = {
        "clock": "ascend_syscnt",
        "tick_ns": SYSCNT_TICK_NS,
        "note": "Device syscnt times: the outputs carry no Unix anchor, origin_unix_ns is 0.",
    }
    return device_run(info, ops, steps, reduce_spans(device, reduces), clock_unix_ns=None)


# --- MindSpore 2.x CPU outputs --------------------------------------------------------------------


def parse_cpu_timestamps(text: str) -> tuple[pd.DataFrame, list[int]]:
    """cpu_op_execute_timestamp lines `full_name;kind;start_ns,dur_ms,tid start_ns,dur_ms,tid ...`
    as one row a launch (name, start_ns text, dur_ms text, tid, line), and the numbers of the
    lines that hold no launches or launch fields not in threes (skipped)."""
    names, triplets, line_of, bad = [], [], [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.strip().split(";")
        launches = fields[2].replace(" ", ",").split(",") if len(fields) >= 3 else []
        if not launches or len(launches) % 3:
            bad.append(number)
            continue
        triplets.extend(launches)
        names.extend([fields[0]] * (len(launches) // 3))
        line_of.extend([number] * (len(launches) // 3))
    cells = np.array(triplets, dtype=object).reshape(-1, 3)
    return pd.DataFrame(
        {
            "name": pd.Series(names, dtype=object),
            "start_ns": pd.Series(cells[:, 0], dtype=object),
            "dur_ms": pd.Series(cells[:, 1], dtype=object),
            "tid": pd.Series(cells[:, 2], dtype=object),
            "line": np.array(line_of, dtype=np.int64),
        }
    ), bad


def _lines(numbers: list[int] | np.ndarray) -> str:
    numbers = list(numbers)
    return ", ".join(map(str, numbers[:5])) + ("..." if len(numbers) > 5 else "")


def _trace_view_events(path: Path | None, problems: _Problems) -> pd.DataFrame:
    """trace_view.json `X` events (process name, tid, name, start_ns, dur_ns); µs strings read exactly."""
    columns = ["process", "tid", "name", "start_ns", "dur_ns"]
    if path is None:
        return pd.DataFrame(columns=columns)
    try:
        events = json.loads(path.read_bytes())
        if isinstance(events, dict):
            events = events.get("traceEvents", [])
        processes = {
            e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
        }
        spans = [e for e in events if e.get("ph") == "X"]
        start, start_ok = scaled_decimals(pd.Series([str(e["ts"]) for e in spans], dtype=object), 3)
        dur, dur_ok = scaled_decimals(pd.Series([str(e["dur"]) for e in spans], dtype=object), 3)
        frame = pd.DataFrame(
            {
                "process": [str(processes.get(e.get("pid"), e.get("pid"))) for e in spans],
                "tid": [int(e.get("tid", 0)) for e in spans],
                "name": pd.Series([str(e["name"]) for e in spans], dtype=object),
                "start_ns": start,
                "dur_ns": dur,
            }
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as error:
        problems.unreadable(path, error)
        return pd.DataFrame(columns=columns)
    ok = start_ok & dur_ok & (start >= 0) & (dur >= 0)
    if not ok.all():
        problems.append(
            f"{path.name}: {int((~ok).sum())} event(s) whose ts / dur is not a finite, non-negative "
            "number were left out"
        )
    return frame[ok].reset_index(drop=True)


def _cpu_launches(files: dict[str, Path], events: pd.DataFrame, problems: _Problems) -> pd.DataFrame:
    """Every CPU op launch (name, start_ns, dur_ns, tid), from the timestamp file or else trace_view."""
    path = files.get("timestamps")
    if path is not None:
        try:
            launches, bad_lines = parse_cpu_timestamps(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError) as error:
            problems.unreadable(path, error)
        else:
            if bad_lines:
                problems.append(
                    f"{path.name}: {len(bad_lines)} line(s) without launches in threes "
                    f"(start_ns,dur_ms,tid) skipped (line {_lines(bad_lines)})"
                )
            start, start_ok = scaled_decimals(launches["start_ns"], 0)
            dur, dur_ok = scaled_decimals(launches["dur_ms"], 6)
            ok = start_ok & dur_ok & (start >= 0) & (dur >= 0)
            if not ok.all():
                problems.append(
                    f"{path.name}: {int((~ok).sum())} launch(es) whose start or duration is not a finite, "
                    f"non-negative number were left out (line {_lines(np.unique(launches['line'][~ok]))})"
                )
            if ok.any() or events[events["process"] == "CPU OP"].empty:
                return pd.DataFrame(
                    {
                        "name": launches["name"][ok].to_numpy(dtype=object),
                        "start_ns": start[ok],
                        "dur_ns": dur[ok],
                        "tid": launches["tid"][ok].astype(str).to_numpy(dtype=object),
                    }
                )
    cpu = events[events["process"] == "CPU OP"]
    if cpu.empty:
        view = files.get("trace_view")
        ascend = [n for n in _ASCEND_2X_FILES if view is not None and (view.parent / n).is_file()]
        if ascend:
            problems.append(
                f"this is a MindSpore 2.x Ascend output ({', '.join(ascend)} in {view.parent.name}), "
                "whose device files profview does not read yet; only its CPU op files would be"
            )
        else:
            problems.append(
                "no cpu_op_execute_timestamp file and no CPU OP events in trace_view.json: "
                "there are no per-launch op timings"
            )
    return pd.DataFrame(
        {
            "name": cpu["name"].to_numpy(dtype=object),
            "start_ns": cpu["start_ns"].to_numpy(np.int64),
            "dur_ns": cpu["dur_ns"].to_numpy(np.int64),
            "tid": cpu["tid"].astype(str).to_numpy(),
        }
    )


def _launch_shapes(path: Path | None, short_names: np.ndarray, problems: _Problems) -> np.ndarray:
    """Per launch (in start order) the shapes text from cpu_framework, whose lines follow launch order."""
    empty = np.full(len(short_names), "", dtype=object)
    if path is None:
        return empty
    lines = [line.rstrip(";").split(";") for line in path.read_text(errors="replace").splitlines() if line.strip()]
    if [f[1] if len(f) > 1 else "" for f in lines] != short_names.tolist():
        problems.append(f"{path.name}: its op sequence does not follow the launches; shapes were not attached")
        return empty
    shapes = [shapes_text([dims(t.split(":", 1)[1]) if ":" in t else [] for t in f[3:]]) for f in lines]
    return np.array(shapes, dtype=object)


def _trace_view_shift(events: pd.DataFrame, launches: pd.DataFrame) -> int:
    """How far trace_view.json times sit after the launch times (MindSpore shifts them by a few
    tens of ns): the median gap between its CPU OP events and the launches, 0 when they differ in number."""
    cpu = np.sort(events.loc[events["process"] == "CPU OP", "start_ns"].to_numpy(np.int64))
    starts = np.sort(launches["start_ns"].to_numpy(np.int64))
    return int(np.median(cpu - starts)) if len(cpu) == len(starts) and len(cpu) else 0


def _read_cpu_outputs(rank: int, files: dict[str, Path], problems: _Problems) -> Run:
    """A Run from the MindSpore 2.x CPU outputs of one rank (host clock, Unix ns)."""
    events = _trace_view_events(files.get("trace_view"), problems)
    launches = _cpu_launches(files, events, problems).sort_values("start_ns", kind="stable")
    detail = _read_csv(files["op_detail"], problems, ["full_op_name", "op_type"]) if "op_detail" in files else None
    types = (
        pd.Series(detail["op_type"].to_numpy(), index=detail["full_op_name"].to_numpy()).groupby(level=0).last()
        if detail is not None
        else pd.Series(dtype=object)
    )
    names = launches["name"].astype(object).reset_index(drop=True)
    ops = pd.DataFrame(
        {
            "device": "cpu",
            "stream": launches["tid"].astype(str).to_numpy(dtype=object),
            "name": names.to_numpy(),
            "op_type": lookup(names, types, op_type_from_name).to_numpy(dtype=object),
            "start_ns": launches["start_ns"].to_numpy(np.int64),
            "dur_ns": launches["dur_ns"].to_numpy(np.int64),
            "shapes": _launch_shapes(
                files.get("framework"), names.map(lambda n: n.rsplit("/", 1)[-1]).to_numpy(), problems
            ),
            "source": "mindspore",
        }
    )
    scopes = events[events["process"] == "Scope Layer"]
    scopes = scopes.assign(start_ns=scopes["start_ns"] - _trace_view_shift(events, launches))
    spans = (
        pd.DataFrame(
            {
                "lane": "scope",
                "lane_id": 0,
                "kind": "span",
                "name": scopes["name"].to_numpy(dtype=object),
                "start_ns": scopes["start_ns"].to_numpy(np.int64),
                "dur_ns": scopes["dur_ns"].to_numpy(np.int64),
                "depth": scopes["tid"].to_numpy(np.int64),
            }
        )
        if len(scopes)
        else _no_spans()
    )
    info = _run_info("cpu", rank, "cpu", files, problems)
    on_unix = len(ops) and ops["start_ns"].min() > _UNIX_NS_FLOOR
    info["clock"] = {
        "clock": "host_realtime" if on_unix else "host_unknown",
        "note": "CPU op timestamps are Unix ns."
        if on_unix
        else "CPU op timestamps are not on the Unix clock: origin_unix_ns is 0.",
    }
    return device_run(info, ops, _no_steps(), spans, clock_unix_ns=0 if on_unix else None)

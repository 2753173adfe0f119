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
from profiler.model import Run
from profiler.importers.ascend.device_run import (SYSCNT_TICK_NS, device_run, dims, input_shapes, lookup,
                                                op_type_from_name, reduce_spans, shapes_text)

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
_TRACE_VIEW = ("ASCEND_PROFILER_OUTPUT/trace_view.json", "trace_view.json")

#: 2020 reduce columns: stream_<sid>_parallel_<k>; later: stream_<sid>_<k>_<OpType> (or _parallel).
_REDUCE_COLUMN = re.compile(r"^stream_(?P<sid>\d+)_(?:parallel_(?P<k_old>\d+)|(?P<k>\d+)_(?P<type>[A-Za-z]\w*))$")

#: Unix ns of 2001-09-09: smaller host timestamps are not on the Unix clock.
_UNIX_NS_FLOOR = 10**18


class _Problems(list):
    """Messages about unusable input, in order."""

    def unreadable(self, path: Path, error: Exception) -> None:
        self.append(f"{path.name}: unreadable ({type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}); skipped")


def _files_by_id(directory: Path, patterns: dict[str, re.Pattern[str]]) -> dict[int, dict[str, Path]]:
    """{id: {kind: path}} for the files of `directory` matching the kind patterns."""
    found: dict[int, dict[str, Path]] = {}
    for path in sorted(directory.iterdir()) if directory.is_dir() else []:
        for kind, pattern in patterns.items():
            match = pattern.match(path.name)
            if match and path.is_file():
                found.setdefault(int(match[1]), {})[kind] = path
    return found


def _cpu_dir(directory: Path) -> Path:
    """Where the CPU op files are: FRAMEWORK/ in MindSpore 2.x, the directory itself before."""
    return directory / "FRAMEWORK" if (directory / "FRAMEWORK").is_dir() else directory


def _trace_view(directory: Path) -> Path | None:
    return next((directory / p for p in _TRACE_VIEW if (directory / p).is_file()), None)


def _layouts(directory: Path) -> list[tuple[str, int, dict[str, Path]]]:
    """(layout, device/rank id, files) for every device or rank with outputs in `directory`."""
    found = [("ascend", dev, files) for dev, files in _files_by_id(directory, _ASCEND_FILES).items()]
    cpu = _files_by_id(_cpu_dir(directory), _CPU_FILES)
    trace_view = _trace_view(directory)
    if trace_view is not None and not cpu:
        cpu = {0: {}}
    found += [("cpu", rank, {**files, **({"trace_view": trace_view} if trace_view else {})})
              for rank, files in cpu.items()]
    return found


def _profiler_dirs(path: Path) -> list[Path]:
    """`path` when it holds profiler outputs, else its immediate subdirectories that do."""
    if _layouts(path):
        return [path]
    return [p for p in sorted(path.iterdir()) if p.is_dir() and _layouts(p)] if path.is_dir() else []


def is_mindspore_dir(path: str | Path) -> bool:
    """Whether `path` (or a direct subdirectory) holds MindSpore / MindInsight profiler outputs."""
    return bool(_profiler_dirs(Path(path)))


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


# --- shared parsing helpers --------------------------------------------------------------------

def scaled_decimal_text(text: pd.Series, digits: int) -> np.ndarray:
    """Decimal strings times 10**digits as exact int64 ("1795245674352900.963", 3 -> 1795245674352900963).

    Exact where a float would not be (Unix µs need 19 significant digits); exponent forms fall
    back to float rounding.
    """
    text = text.astype(str).str.strip()
    try:
        negative = text.str.startswith("-").to_numpy()
        parts = text.str.lstrip("-").str.partition(".")
        whole = parts[0].replace("", "0").astype(np.int64).to_numpy()
        fraction = parts[2].str.ljust(digits, "0").str[:digits].replace("", "0").astype(np.int64).to_numpy()
        value = whole * 10**digits + fraction
        return np.where(negative, -value, value)
    except ValueError:
        return np.rint(text.astype(np.float64).to_numpy() * 10**digits).astype(np.int64)


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


def _ints(frame: pd.DataFrame, columns: list[str], path: Path, problems: _Problems) -> pd.DataFrame | None:
    """The columns as int64, or None (with a problem noted) when a cell is not an integer."""
    try:
        return frame[columns].apply(lambda c: c.replace("", "0").astype(np.int64))
    except ValueError as error:
        problems.unreadable(path, error)
        return None


def _run_info(layout: str, ident: int, device: str, files: dict[str, Path], problems: _Problems) -> dict:
    return {
        "data_origin": "mindspore",
        "rank": ident,
        "device_id": ident,
        "mindspore": {"layout": layout, "device": device},
        "sources": {kind: {"status": "ok", "files": [str(p)]} for kind, p in files.items()},
        "warnings": list(problems),
    }


def _no_steps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("step", "start_ns", "end_ns", "fp_start_ns", "bp_end_ns")})


def _no_spans() -> pd.DataFrame:
    return pd.DataFrame({"lane": pd.Series(dtype=object), "lane_id": pd.Series(dtype="int64"),
                         "kind": pd.Series(dtype=object), "name": pd.Series(dtype=object),
                         "start_ns": pd.Series(dtype="int64"), "dur_ns": pd.Series(dtype="int64"),
                         "depth": pd.Series(dtype="int64")})


# --- Ascend device outputs -----------------------------------------------------------------------

def step_trace_tables(frame: pd.DataFrame, path: Path, problems: _Problems) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Steps (ns) and all-reduce intervals (stream_id, start_ns, end_ns) from a step-trace CSV's text columns.

    The average row (`-`) is dropped; an empty reduce cell (0) means the step had no such pair.
    Without a bp_point column (inference runs) bp_end_ns is -1.
    """
    frame = frame[frame["step_num"].str.strip() != "-"]
    blocks = [(c, m) for c in frame.columns if (m := _REDUCE_COLUMN.match(c))
              and f"{c}_start_point" in frame.columns and f"{c}_end_point" in frame.columns]
    base = ["step_num", "start_point", "end_point", "fp_point"] + (["bp_point"] if "bp_point" in frame else [])
    values = _ints(frame, base + [f"{c}_{p}" for c, _ in blocks for p in ("start_point", "end_point")] +
                   [c for c, _ in blocks], path, problems)
    if values is None:
        return _no_steps(), pd.DataFrame({"stream_id": [], "start_ns": [], "end_ns": []})
    ns = lambda column: values[column].to_numpy() * SYSCNT_TICK_NS
    steps = pd.DataFrame({
        "step": values["step_num"].to_numpy() - 1,
        "start_ns": ns("start_point"), "end_ns": ns("end_point"), "fp_start_ns": ns("fp_point"),
        "bp_end_ns": ns("bp_point") if "bp_point" in values else -1,
    })
    reduces = [pd.DataFrame({"row": np.arange(len(values)), "block": b, "stream_id": int(m["sid"]),
                             "start_ns": ns(f"{c}_start_point"), "end_ns": ns(f"{c}_end_point"),
                             "present": (values[f"{c}_start_point"].to_numpy() != 0) & (values[c].to_numpy() != 0)})
               for b, (c, m) in enumerate(blocks)]
    reduces = pd.concat(reduces) if reduces else pd.DataFrame(columns=["row", "block", "stream_id", "start_ns",
                                                                        "end_ns", "present"])
    reduces = reduces[reduces["present"].astype(bool)].sort_values(["row", "block"], kind="stable")
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
        except (ValueError, AttributeError):
            shapes.append("")
    return pd.DataFrame({"op_type": frame["op_type"].to_numpy(), "shapes": shapes},
                        index=frame["full_op_name"].to_numpy()).groupby(level=0).last()


def _min_cycle_counter(path: Path | None, problems: _Problems) -> float | None:
    if path is None:
        return None
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError) as error:
        problems.unreadable(path, error)
        return None


def _timeline_ops(files: dict[str, Path], device: str, problems: _Problems) -> pd.DataFrame:
    """Op executions from output_timeline_data, with types and shapes from framework_raw (absolute ns).

    Later MindSpore versions write start times relative to min_cycle_counter; those are moved
    back onto the syscnt clock so they line up with the step trace.
    """
    path = files.get("timeline")
    frame = _read_csv(path, problems, []) if path else None
    if frame is None or frame.shape[1] < 4:
        if path is not None and frame is not None:
            problems.append(f"{path.name}: expected 4 columns (op_name, stream_id, start_time(ms), duration(ms)); skipped")
        elif path is None:
            problems.append(f"no output_timeline_data file for device {device}: there are no per-launch op timings")
        return pd.DataFrame(columns=["device", "stream", "name", "op_type", "start_ns", "dur_ns", "shapes", "source"])
    frame.columns = ["name", "stream", "start_ms", "dur_ms"] + list(frame.columns[4:])
    try:
        start_ms = frame["start_ms"].astype(np.float64).to_numpy()
        dur_ms = frame["dur_ms"].astype(np.float64).to_numpy()
    except ValueError as error:
        problems.unreadable(path, error)
        start_ms = dur_ms = np.zeros(0)
        frame = frame.iloc[:0]
    counter = _min_cycle_counter(files.get("min_cycle_counter"), problems)
    if counter is not None and len(start_ms) and start_ms.min() * 2 < counter / 1e5:
        start_ms = start_ms + counter / 1e5
    described = _op_descriptions(files.get("framework"), problems)
    names = frame["name"].astype(object)
    return pd.DataFrame({
        "device": device,
        "stream": frame["stream"].str.strip().to_numpy(dtype=object),
        "name": names.to_numpy(),
        "op_type": lookup(names, described["op_type"], op_type_from_name).to_numpy(dtype=object),
        "start_ns": np.rint(start_ms * 1e6).astype(np.int64),
        "dur_ns": np.rint(dur_ms * 1e6).astype(np.int64),
        "shapes": lookup(names, described["shapes"], "").to_numpy(dtype=object),
        "source": "mindspore",
    })


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
    info["clock"] = {"clock": "ascend_syscnt", "tick_ns": SYSCNT_TICK_NS,
                     "note": "Device syscnt times: the outputs carry no Unix anchor, origin_unix_ns is 0."}
    return device_run(info, ops, steps, reduce_spans(device, reduces), clock_unix_ns=None)


# --- MindSpore 2.x CPU outputs --------------------------------------------------------------------

def parse_cpu_timestamps(text: str) -> pd.DataFrame:
    """cpu_op_execute_timestamp lines `full_name;kind;start_ns,dur_ms,tid start_ns,dur_ms,tid ...`
    as one row a launch (name, start_ns, dur_ms text, tid)."""
    names, triplets = [], []
    for line in text.splitlines():
        fields = line.strip().split(";")
        if len(fields) < 3:
            raise ValueError(f"line without launches: {line[:60]!r}")
        launches = fields[2].replace(" ", ",").split(",")
        if len(launches) % 3:
            raise ValueError(f"launch fields not in threes: {line[:60]!r}")
        triplets.extend(launches)
        names.extend([fields[0]] * (len(launches) // 3))
    cells = np.array(triplets, dtype=object).reshape(-1, 3)
    return pd.DataFrame({"name": pd.Series(names, dtype=object), "start_ns": cells[:, 0].astype(np.int64),
                         "dur_ms": pd.Series(cells[:, 1], dtype=object), "tid": cells[:, 2]})


def _trace_view_events(path: Path | None, problems: _Problems) -> pd.DataFrame:
    """trace_view.json `X` events (process name, tid, name, start_ns, dur_ns); µs strings read exactly."""
    columns = ["process", "tid", "name", "start_ns", "dur_ns"]
    if path is None:
        return pd.DataFrame(columns=columns)
    try:
        events = json.loads(path.read_text())
        if isinstance(events, dict):
            events = events.get("traceEvents", [])
        processes = {e["pid"]: e["args"]["name"] for e in events
                     if e.get("ph") == "M" and e.get("name") == "process_name"}
        spans = [e for e in events if e.get("ph") == "X"]
        frame = pd.DataFrame({
            "process": [processes.get(e.get("pid"), str(e.get("pid"))) for e in spans],
            "tid": [int(e.get("tid", 0)) for e in spans],
            "name": pd.Series([e["name"] for e in spans], dtype=object),
            "start_ns": scaled_decimal_text(pd.Series([str(e["ts"]) for e in spans], dtype=object), 3),
            "dur_ns": scaled_decimal_text(pd.Series([str(e["dur"]) for e in spans], dtype=object), 3),
        })
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        problems.unreadable(path, error)
        return pd.DataFrame(columns=columns)
    return frame


def _cpu_launches(files: dict[str, Path], events: pd.DataFrame, problems: _Problems) -> pd.DataFrame:
    """Every CPU op launch (name, start_ns, dur_ns, tid), from the timestamp file or else trace_view."""
    path = files.get("timestamps")
    if path is not None:
        try:
            launches = parse_cpu_timestamps(path.read_text())
            return launches.assign(dur_ns=scaled_decimal_text(launches["dur_ms"], 6)).drop(columns="dur_ms")
        except (OSError, ValueError, UnicodeDecodeError) as error:
            problems.unreadable(path, error)
    cpu = events[events["process"] == "CPU OP"]
    if cpu.empty:
        problems.append("no cpu_op_execute_timestamp file and no CPU OP events in trace_view.json: "
                        "there are no per-launch op timings")
    return pd.DataFrame({"name": cpu["name"].to_numpy(dtype=object), "start_ns": cpu["start_ns"].to_numpy(np.int64),
                         "dur_ns": cpu["dur_ns"].to_numpy(np.int64), "tid": cpu["tid"].astype(str).to_numpy()})


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
    types = (pd.Series(detail["op_type"].to_numpy(), index=detail["full_op_name"].to_numpy()).groupby(level=0).last()
             if detail is not None else pd.Series(dtype=object))
    names = launches["name"].astype(object).reset_index(drop=True)
    ops = pd.DataFrame({
        "device": "cpu",
        "stream": launches["tid"].astype(str).to_numpy(dtype=object),
        "name": names.to_numpy(),
        "op_type": lookup(names, types, op_type_from_name).to_numpy(dtype=object),
        "start_ns": launches["start_ns"].to_numpy(np.int64),
        "dur_ns": launches["dur_ns"].to_numpy(np.int64),
        "shapes": _launch_shapes(files.get("framework"), names.map(lambda n: n.rsplit("/", 1)[-1]).to_numpy(),
                                 problems),
        "source": "mindspore",
    })
    scopes = events[events["process"] == "Scope Layer"]
    scopes = scopes.assign(start_ns=scopes["start_ns"] - _trace_view_shift(events, launches))
    spans = pd.DataFrame({"lane": "scope", "lane_id": 0, "kind": "span", "name": scopes["name"].to_numpy(dtype=object),
                          "start_ns": scopes["start_ns"].to_numpy(np.int64), "dur_ns": scopes["dur_ns"].to_numpy(np.int64),
                          "depth": scopes["tid"].to_numpy(np.int64)}) if len(scopes) else _no_spans()
    info = _run_info("cpu", rank, "cpu", files, problems)
    on_unix = len(ops) and ops["start_ns"].min() > _UNIX_NS_FLOOR
    info["clock"] = {"clock": "host_realtime" if on_unix else "host_unknown",
                     "note": "CPU op timestamps are Unix ns." if on_unix else
                     "CPU op timestamps are not on the Unix clock: origin_unix_ns is 0."}
    return device_run(info, ops, _no_steps(), spans, clock_unix_ns=0 if on_unix else None)

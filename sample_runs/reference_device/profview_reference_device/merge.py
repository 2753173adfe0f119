"""Analysis side of the reference device: its JOB log parsed like a real one and merged into the host run.

`merge_ascend_devices(run, directory, rank)` finds the reference devices' JOB directories in the
raw store (`raw/r<rank>-p<pid>-ascend_dev<id>/`), reads each with `read_ascend_job` + `to_run`
(the parser of real device logs), moves the device tables onto the host run's clock with the
clock-sync pair, and merges them:

* device ops (`npu:<id>`, one stream each) join the op table; all-reduce intervals join the
  spans on their own `npu:<id> stream <s> all_reduce` lanes;
* when a device recorded iterations (fp_start / iter_end), **its steps become the run's steps**,
  as in MindSpore's step trace: start = the previous ITER_END (the first: the host step's start),
  fp / bp = FP_START / BP_END, end = ITER_END, numbered by the host step that began each
  iteration. The host's own step boundaries are kept as `host_step` spans on a `host steps` lane.
  Without device iterations the host's steps stay, and device ops are only assigned to them.

Clock (docs/ascend.md, "Reference device"): a pair (host perf_counter_ns h, syscnt s) says the
counter took value s at host time h, so device tick c is at host time h + 10 (c - s); the run's
times are then counted from the recording's `origin_monotonic_ns`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError
from profiler.importers.ascend.device_run import SYSCNT_TICK_NS
from profiler.importers.ascend.job import read_ascend_job, to_run
from profiler.kernels.intervals import assign_steps
from profiler.model import OP_COLUMNS, SPAN_COLUMNS, STEP_COLUMNS, THREAD_COLUMNS, Run, conform
from profview_reference_device.log_writer import CLOCK_SYNC_NAME, DEVICE_DIR_PATTERN, SYSCNT_HZ

#: Name and lane of the host's step boundaries once the device's steps replace them.
HOST_STEP_SPAN = "host_step"
HOST_STEP_LANE = "host steps"

_STEP_TIMES = ("start_ns", "end_ns", "fp_start_ns", "bp_end_ns")
#: How far (ns) the clock pair may move the device's times: beyond a year, the pair is damaged (and
#: the moved times would leave int64).
MAX_SHIFT_NS = 365 * 86400 * 10**9


@dataclass
class ClockSync:
    """The content of a reference device's clock-sync file."""

    syscnt_hz: int
    pairs: np.ndarray  # (n, 2) int64: host perf_counter_ns, syscnt
    host_steps: dict[int, int] = field(default_factory=dict)  # device iteration -> host step

    def host_ns(self, device_ns: np.ndarray | int) -> np.ndarray | int:
        """Host perf_counter_ns of device-clock ns (syscnt x 10), by the first pair."""
        host, syscnt = (int(v) for v in self.pairs[0])
        return device_ns + (host - syscnt * SYSCNT_TICK_NS)

    def residual_ns(self) -> int:
        """How far the later pairs are from the first pair's line (0 for a counter without drift)."""
        exact = self.pairs.astype(object)  # Python ints: a damaged pair cannot wrap around int64
        predicted = self.host_ns(exact[:, 1] * SYSCNT_TICK_NS)
        return int(np.abs(exact[:, 0] - predicted).max())


def read_clock_sync(path: Path) -> ClockSync:
    """Parse a clock-sync file (JSON lines: a header, pairs, iteration -> host step lines).

    A line that is not JSON (a torn last line: the process was killed while appending) is skipped.
    Raises ProfviewError, naming the file and the line, when the file is not UTF-8 text, a value is
    not a whole number a 64-bit clock can hold, no pair is present or the counter frequency is not
    the 100 MHz the parser assumes (the caller leaves the device out with a warning).
    """
    if not path.is_file():
        raise ProfviewError(f"{path.name} is missing, so device time cannot be placed on the host clock")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfviewError(f"{path.name} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ProfviewError(f"cannot read {path.name}: {exc.strerror or exc}") from None
    header: dict[str, Any] = {}
    pairs, host_steps = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(obj, dict):
            raise ProfviewError(f"{path.name} line {number} is not a JSON object")
        where = f"{path.name} line {number}"
        if "host_monotonic_ns" in obj:
            pairs.append(
                (
                    _clock_value(obj["host_monotonic_ns"], where, "host_monotonic_ns"),
                    _clock_value(obj.get("syscnt"), where, "syscnt", MAX_SYSCNT),
                )
            )
        elif "iteration" in obj:
            host_steps[_clock_value(obj["iteration"], where, "iteration")] = _clock_value(
                obj.get("host_step"), where, "host_step"
            )
        else:
            header.update(obj)
    hz = header.get("syscnt_hz", 0)
    if hz != SYSCNT_HZ or isinstance(hz, bool):
        raise ProfviewError(
            f"{path.name} gives a {_shown_value(hz)} Hz device counter; the log parser reads 100 MHz ticks"
        )
    if not pairs:
        raise ProfviewError(f"{path.name} holds no host/device clock pair")
    return ClockSync(SYSCNT_HZ, np.array(pairs, dtype=np.int64), host_steps)


#: The largest counter value whose time in ns (x SYSCNT_TICK_NS) an int64 holds.
MAX_SYSCNT = np.iinfo(np.int64).max // SYSCNT_TICK_NS


def _clock_value(value: Any, where: str, key: str, limit: int = np.iinfo(np.int64).max) -> int:
    """A clock-sync value as an int: a whole JSON number in [0, limit], else ProfviewError naming it."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit:
        return value
    raise ProfviewError(f"{where}: {key} is {_shown_value(value)}, not a whole number from 0 to {limit}")


def _shown_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def device_job_dirs(directory: Path, rank: int) -> list[tuple[Path, int]]:
    """(JOB directory, device id) of every reference device that recorded for `rank`, in a stable order."""
    raw = Path(directory) / "raw"
    found = []
    for path in sorted(raw.iterdir()) if raw.is_dir() else []:
        match = DEVICE_DIR_PATTERN.match(path.name)
        if match and path.is_dir() and int(match["rank"]) == rank:
            found.append((path, int(match["dev"])))
    return found


@dataclass
class _Device:
    """One device's tables and how to move them onto the host run's clock."""

    job_dir: Path
    device_id: int
    run: Run
    sync: ClockSync
    shift_ns: int


def _load_device(job_dir: Path, device_id: int, origin_monotonic_ns: int) -> _Device:
    with warnings.catch_warnings():  # the problems are kept in the run's warnings instead
        warnings.simplefilter("ignore")
        job = read_ascend_job(job_dir, device_id)
    device = to_run(job)
    sync = read_clock_sync(job_dir / CLOCK_SYNC_NAME.format(dev=device_id))
    origin_device_ns = int(device.info["clock"]["origin_device_ns"])
    shift = int(sync.host_ns(origin_device_ns)) - origin_monotonic_ns
    if abs(shift) > MAX_SHIFT_NS:
        raise ProfviewError(
            f"{CLOCK_SYNC_NAME.format(dev=device_id)} puts the device {shift / 1e9:.3g} s away "
            "from the host's recording, which no clock pair of a real run does"
        )
    return _Device(job_dir, device_id, device, sync, shift)


def _shifted(frame: pd.DataFrame, columns: tuple[str, ...], shift: int) -> pd.DataFrame:
    """`frame` with its time columns moved by `shift` (-1, "absent", stays -1)."""
    return frame.assign(**{c: np.where(frame[c].to_numpy() >= 0, frame[c].to_numpy() + shift, -1) for c in columns})


def device_steps(device: _Device, host_steps: pd.DataFrame) -> pd.DataFrame:
    """The device's steps on the host clock, numbered by the host step that began each iteration.

    The parser starts the first iteration at its FP point (no previous ITER_END); here it starts
    at its host step's start when that is earlier. A step's profiler overhead is its host step's.
    """
    steps = _shifted(device.run.steps, _STEP_TIMES, device.shift_ns)
    numbers = np.array([device.sync.host_steps.get(int(i), int(i)) for i in steps["step"]], dtype=np.int64)
    if (np.diff(numbers) > 0).all():  # else fp_start() was not called once per host step: keep iterations
        steps["step"] = numbers
    host = host_steps.set_index("step")
    steps["overhead_ns"] = steps["step"].map(host["overhead_ns"]).fillna(0).to_numpy(dtype=np.int64)
    if len(steps):
        first = int(np.argmin(steps["start_ns"].to_numpy()))
        host_start = host["start_ns"].get(int(steps["step"].iat[first]), -1)
        if 0 <= host_start < steps["start_ns"].iat[first]:
            steps.loc[steps.index[first], "start_ns"] = host_start
    return conform(steps, STEP_COLUMNS)


def _host_step_spans(steps: pd.DataFrame, tid: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "tid": tid,
            "kind": "span",
            "name": HOST_STEP_SPAN,
            "start_ns": steps["start_ns"],
            "dur_ns": steps["end_ns"] - steps["start_ns"],
            "depth": 0,
        }
    )


def merge_ascend_devices(run: Run, directory: Path, rank: int) -> Run:
    """`run` with the ops, all-reduce spans and (if any) steps of the reference devices of `rank`.

    A device whose log cannot be read is left out with a warning in `run.info`; the steps come
    from the lowest device id that recorded iterations.
    """
    dirs = device_job_dirs(directory, rank)
    if not dirs:
        return run
    origin = int(run.info["clock"]["origin_monotonic_ns"])
    warns = run.info.setdefault("warnings", [])
    devices: list[_Device] = []
    for job_dir, device_id in dirs:
        try:
            devices.append(_load_device(job_dir, device_id, origin))
        except ProfviewError as exc:
            warns.append(f"reference device npu:{device_id} ({job_dir.name}) was not merged: {exc}")
    if not devices:
        return run
    ops, spans, threads = [run.ops], [run.spans], [run.threads]
    next_tid = int(run.threads["tid"].max()) + 1 if len(run.threads) else 0
    for device in devices:
        d = device.run
        ops.append(conform(_shifted(d.ops, ("start_ns",), device.shift_ns), OP_COLUMNS))
        spans.append(
            conform(
                _shifted(d.spans, ("start_ns",), device.shift_ns).assign(tid=d.spans["tid"] + next_tid), SPAN_COLUMNS
            )
        )
        threads.append(conform(d.threads.assign(tid=d.threads["tid"] + next_tid), THREAD_COLUMNS))
        next_tid += len(d.threads)
        warns.extend(f"npu:{device.device_id}: {w}" for w in d.info.get("warnings", []))
    stepping = next((d for d in devices if len(d.run.steps)), None)
    if stepping is not None:
        spans.append(conform(_host_step_spans(run.steps, next_tid), SPAN_COLUMNS))
        threads.append(
            conform(pd.DataFrame({"tid": [next_tid], "os_tid": [-1], "name": [HOST_STEP_LANE]}), THREAD_COLUMNS)
        )
        run.steps = device_steps(stepping, run.steps)
    merged = conform(pd.concat(ops, ignore_index=True), OP_COLUMNS)
    merged["step"] = assign_steps(merged["start_ns"].to_numpy(), run.steps)
    run.ops = merged.sort_values("start_ns", kind="stable", ignore_index=True)
    run.spans = conform(pd.concat(spans, ignore_index=True), SPAN_COLUMNS)
    run.threads = conform(pd.concat(threads, ignore_index=True), THREAD_COLUMNS)
    run.info["ascend_devices"] = [_device_info(d) for d in devices]
    run.info["steps_from"] = f"npu:{stepping.device_id}" if stepping is not None else "host"
    return run


def _device_info(device: _Device) -> dict[str, Any]:
    a = device.run.info["ascend"]
    return {
        "device": f"npu:{device.device_id}",
        "job_dir": str(device.job_dir),
        "op_executions": a["op_executions"],
        "steps": int(len(device.run.steps)),
        "all_reduce_intervals": int(len(device.run.spans)),
        "fp_start_op": a["fp_start_op"],
        "bp_end_op": a["bp_end_op"],
        "clock": {
            "shift_ns": device.shift_ns,
            "origin_device_ns": int(device.run.info["clock"]["origin_device_ns"]),
            "sync_pairs": int(len(device.sync.pairs)),
            "sync_residual_ns": device.sync.residual_ns(),
        },
    }

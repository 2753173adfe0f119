"""Per-operator capture through torch.profiler (Kineto), driven by the Profiler's schedule.

Recording side (`TorchOps`, a Source). torch's own profiler does the capture — host ops on
the CPU and, on a CUDA machine, kernels, memcpy / memset and launch correlations through CUPTI —
and its own schedule machinery is driven from `Profiler.step()`: the op schedule (`ops_schedule=`,
else the Profiler's schedule) is handed to `torch.profiler.profile(schedule=...)`, so WARMUP steps
warm Kineto up and RECORD steps record. Each completed capture window is exported by torch (its C++
writer) as a sidecar of the raw store, `raw/r{rank}-p{pid}-torch-{window}.json`, which a background
thread then compresses to `.json.gz` (off the training thread: compression is most of an export's
cost); one line describing the window is appended to `raw/r{rank}-p{pid}-torch.jsonl` (file,
steps, a fresh clock anchor, the thread names), so a crashed run keeps every exported window.

Analysis side (`merge_torch_traces`, pure apart from reading the sidecars). Each trace is
converted by the Kineto importer (`sources.kineto`) and its ops join the run's op table on the
run's clock. Clock rule (torch >= 2.4, verified in tests/integration/test_torch_capture.py):
Kineto writes `ts` in microseconds relative to the trace's `baseTimeNanoseconds`, and
`ts * 1000 + baseTimeNanoseconds` is Unix time (CLOCK_REALTIME) in ns. The recorder runs on
`perf_counter_ns` (CLOCK_MONOTONIC), so each window stores a (perf_counter_ns, time_ns) pair
read back to back at export; an op's run time is `unix - anchor_unix + anchor_mono - origin_mono`.
A per-window anchor keeps NTP slewing between the two clocks out of long runs.

torch is imported only when a capture starts; `import profiler` never imports it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler.capture.base import Host, Source
from profiler.errors import ProfviewError
from profiler.importers.kineto import read_kineto_trace
from profiler.kernels.intervals import assign_steps
from profiler.kernels.nesting import enclosing_parents, nesting_depths
from profiler.model import ALLOCATION_COLUMNS, OP_COLUMNS, SPAN_COLUMNS, THREAD_COLUMNS, Run, conform
from profiler.record.recorder import clock_anchor, hot
from profiler.schedule import NEVER, ProfilerAction, Schedule, always_record, as_action, next_change
from profiler.store.kinds import FLUSH
from profiler.store.load import Recording

if TYPE_CHECKING:
    from profiler.record.recorder import Recorder

TRACE_SUFFIX = ".json"
INDEX_SUFFIX = "-torch.jsonl"
#: torch's message when a new capture cycle starts; expected here, every window is exported.
_CYCLE_WARNING = "Warning: Profiler clears events at the end of each cycle"


def op_schedule(schedule: Schedule) -> Schedule:
    """The op-capture schedule: `schedule`'s actions, except that the last RECORD step before a
    non-recording step becomes RECORD_AND_SAVE, so that every window ends the way torch expects
    (no "incorrect schedule" warning) and is exported at its end. `always_record`, which never
    ends a window, is returned as it is (so next_change knows at once that it never changes)."""
    if schedule is always_record:
        return schedule

    def action(step: int) -> ProfilerAction:
        current = as_action(schedule(step))
        if current == ProfilerAction.RECORD and not as_action(schedule(step + 1)).records:
            return ProfilerAction.RECORD_AND_SAVE
        return current

    return action


class TorchOps(Source):
    """torch.profiler capture following a profview schedule; one trace sidecar per window.

    Args:
        schedule: which steps capture ops (NONE / WARMUP / RECORD / RECORD_AND_SAVE per step);
            default: the Profiler's schedule.
        record_shapes, profile_memory, with_stack, with_modules: passed to torch.profiler (all cost
            memory and time; off by default). The module view (modules_{rank}.csv) needs with_stack:
            torch 2.13 records `nn.Module` frames only with its Python tracer.
    """

    name = "torch"

    @classmethod
    def merge(cls, run: Run, recording: Recording) -> Run:
        """The ops of every exported window join the run's (merge_torch_traces)."""
        return merge_torch_traces(run, recording.directory, recording.rank)

    def __init__(
        self,
        schedule: Optional[Schedule] = None,
        *,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_modules: bool = False,
    ) -> None:
        super().__init__()
        self.schedule = schedule  # as given: None follows the Profiler's schedule (bind)
        self._actions = op_schedule(schedule or always_record)  # what each step does to torch.profiler
        #: the step now running; on_step is not called on quiet steps, so the profiler's count (bind)
        self._current_step: Callable[[], int] = lambda: self._step
        self.options = {
            "record_shapes": record_shapes,
            "profile_memory": profile_memory,
            "with_stack": with_stack,
            "with_modules": with_modules,
        }
        self.torch_profiler: Any = None  # the torch.profiler.profile doing the capture (key_averages())
        self.windows_saved = 0
        self._stem: Optional[Path] = None  # raw/r{rank}-p{pid}
        self._step = 0
        self._window_first: Optional[int] = None
        self._window_rss = 0  # host RSS when the window began to record
        self._action = ProfilerAction.NONE  # op action of the step now running
        self._stopped = False
        self._compressors: list[threading.Thread] = []
        self.details.update(self.options)

    def bind(self, profiler: Host) -> None:
        """Follow the Profiler's schedule (when none was given) and its step count."""
        self._actions = op_schedule(self.schedule or profiler.schedule)
        self._current_step = lambda: profiler.step_num

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, recorder: Recorder) -> None:
        try:
            import torch
            import torch.profiler as tprof
        except ImportError as exc:
            self.status = f"absent: torch is not importable ({exc})"
            return
        self._tprof = tprof
        self._flush_code = recorder.point_code(FLUSH, "flush")  # the profiler's own background work
        path = Path(recorder.writer.path)
        self._stem = path.with_name(path.name[: -len(path.suffix)] if path.suffix else path.name)
        activities = [tprof.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(tprof.ProfilerActivity.CUDA)
        self._activities = activities
        self.details.update(
            {
                "torch": torch.__version__,
                "activities": [a.name for a in activities],
                "traces": f"{self._stem.name}-torch-*{TRACE_SUFFIX}.gz",
            }
        )

    def on_step(self, step: int, action: ProfilerAction) -> None:
        """Drive torch.profiler into `step`'s op action.

        torch's schedule is given our action of the step now beginning (torch's own step count is
        not used), and prof.step() is called only where that action changes or a window is saved:
        torch's ProfilerStep#N annotations are switched off (`record_steps`; profview has its own
        steps), so a step inside a window needs nothing from torch. This runs only at those steps
        (quiet_until): elsewhere the C stepper ends steps with no Python frame of ours, and op
        capture costs torch's recording alone.
        """
        if self.status != "ok" or self._stopped:
            return
        previous, self._step = self._action, step
        self._action = self._actions(step)
        if self.torch_profiler is None:
            self.torch_profiler = self._tprof.profile(
                activities=self._activities,
                on_trace_ready=self._save_window,
                schedule=lambda _k: self._tprof.ProfilerAction[self._action.name],
                **self.options,
            )
            self.torch_profiler.record_steps = False  # no ProfilerStep#N ranges (see above)
            _quietly(self.torch_profiler.start)
        elif self._action != previous or previous is ProfilerAction.RECORD_AND_SAVE:
            _quietly(self.torch_profiler.step)
        if self._window_first is None and self._action.records:
            self._window_first = step
            self._window_rss = _rss()  # torch.profiler starts holding this window's events from here

    def quiet_until(self, step: int) -> int:
        """on_step is needed only where the op action changes or a window is saved."""
        if self.status != "ok" or self._stopped or self.torch_profiler is None:
            return NEVER
        return next_change(self._actions, step)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.torch_profiler is not None:
            self.torch_profiler.stop()  # a window still open is exported now
        for thread in self._compressors:
            thread.join()
        self.details["windows"] = self.windows_saved

    # ---- export ----------------------------------------------------------------------------

    def _save_window(self, prof: Any) -> None:
        """torch's on_trace_ready: export the window's trace and index it with a clock anchor."""
        step = self._current_step()
        first = self._window_first if self._window_first is not None else step
        last = step - 1 if not self._stopped else step
        self._window_first = None
        name = f"{self._stem.name}-torch-{self.windows_saved}{TRACE_SUFFIX}"
        path = self._stem.with_name(name)
        rss_end = _rss()  # the window's events, held until the export
        t0 = time.perf_counter_ns()
        try:
            prof.export_chrome_trace(str(path))
        except (OSError, RuntimeError) as exc:  # a full disk must not stop the training loop
            self.details.setdefault("errors", []).append(f"window {self.windows_saved}: {exc}")
            return
        mono, unix = clock_anchor()
        entry = {
            "file": name,
            "window": self.windows_saved,
            "first_step": first,
            "last_step": max(first, last),
            "anchor": {"monotonic_ns": mono, "unix_ns": unix},
            "threads": {str(t.native_id): t.name for t in threading.enumerate() if t.native_id},
            "export_ms": (time.perf_counter_ns() - t0) / 1e6,
            "memory": {"rss_start_bytes": self._window_rss, "rss_end_bytes": rss_end},
        }
        with open(f"{self._stem}{INDEX_SUFFIX}", "a", encoding="utf-8") as index:
            index.write(json.dumps(entry, sort_keys=True) + "\n")
        self.windows_saved += 1
        thread = threading.Thread(
            target=_compress, args=(path, self._flush_code), name="profview-torch-gzip", daemon=True
        )
        thread.start()
        self._compressors = [t for t in self._compressors if t.is_alive()] + [thread]


def _rss() -> int:
    """The process's resident memory now (bytes; 0 where psutil cannot read it). Read at window edges only."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return 0


def held_memory(entries: list[dict]) -> dict:
    """What torch.profiler held in host memory while it recorded, from the windows' RSS at their start and
    just before their export (the events it keeps until then): the most one window held, and per captured
    step (the windows' growth over their steps). {} when no window says."""
    held, steps = [], []
    for entry in entries:
        memory = entry.get("memory") if isinstance(entry.get("memory"), dict) else {}
        start, end = memory.get("rss_start_bytes"), memory.get("rss_end_bytes")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (start, end)):
            continue
        first, last = entry.get("first_step"), entry.get("last_step")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (first, last)):
            continue
        held.append(max(end - start, 0))
        steps.append(max(last - first + 1, 1))
    if not held:
        return {}
    return {
        "held_bytes_max": max(held),
        "held_bytes_per_captured_step": sum(held) / sum(steps),
        "windows": len(held),
        "captured_steps": sum(steps),
    }


def _quietly(transition: Callable[[], None]) -> None:
    """Run a torch.profiler transition without torch's warning that a new cycle drops the last one's
    events (expected here: every window is exported before the next begins)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CYCLE_WARNING)
        transition()


def _compress(path: Path, flush_code: int) -> None:
    """path -> path.gz (fast level), then remove path; the reader accepts either. Its time is recorded
    like the flusher's (profiler work that competes with the loop: the steps it overlaps are charged)."""
    partial = path.with_name(path.name + ".gz.part")
    t0 = time.perf_counter_ns()
    try:
        with open(path, "rb") as src, gzip.open(partial, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(partial, path.with_name(path.name + ".gz"))
        os.remove(path)
    except OSError:
        pass  # the plain .json stays, and is read as it is
    hot.sample(t0, flush_code, time.perf_counter_ns() - t0, 0)


def trace_file(path: Path) -> Path:
    """The exported trace on disk: compressed when compression finished, else the plain JSON."""
    gz = path.with_name(path.name + ".gz")
    return gz if gz.exists() else path


# ---- analysis side ----------------------------------------------------------------------------


def torch_index_entries(directory: Path, rank: int) -> list[tuple[Path, dict]]:
    """(trace path, index entry) of every exported window of `rank`, in a stable order.

    A torn last line (a crash while appending) is skipped.
    """
    out = []
    for index in sorted((Path(directory) / "raw").glob(f"r{rank}-p*{INDEX_SUFFIX}")):
        for line in index.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            out.append((trace_file(index.with_name(entry["file"])), entry))
    return out


def merge_torch_traces(run: Run, directory: Path, rank: int) -> Run:
    """`run` with the ops (and memory counters) of every torch trace captured for `rank`.

    Ops are moved onto the run's clock (see the module docstring), their host threads renamed to
    the run's thread names, their steps re-assigned from the run's own steps (torch's
    ProfilerStep annotations are not used); the importer made the collective annotations
    (`gloo:all_reduce`, ...) `comm` ops, which the step trace counts as all-reduce. The other annotations
    (record_function ranges: `## forward ##`, `Optimizer.step#SGD.step`, the DataLoader's fetch)
    join the run's spans on their thread (`_annotation_spans`): on the timeline, never ops.
    """
    entries = torch_index_entries(directory, rank)
    if not entries:
        return run
    origin_mono = int(run.info["clock"]["origin_monotonic_ns"])
    ops, counters, spans, allocations = [run.ops], [run.counters], [], []
    warns = run.info.setdefault("warnings", [])
    for path, entry in entries:
        try:
            trace = read_kineto_trace(path)
        except ProfviewError as exc:
            warns.append(f"torch capture window {entry.get('window')} was not merged: {exc}")
            continue
        anchor = entry["anchor"]
        shift = (
            int(trace.info["clock"]["origin_unix_ns"])
            - int(anchor["unix_ns"])
            + int(anchor["monotonic_ns"])
            - origin_mono
        )
        names = _thread_names(trace, entry.get("threads", {}), set(run.threads["name"].astype(str)))
        window_ops = conform(trace.ops, OP_COLUMNS)  # redispatch copies collapsed, collectives comm ops
        window_ops["start_ns"] += shift
        window_ops["stream"] = window_ops["stream"].astype(object).map(lambda s, names=names: names.get(s, s))
        window_ops["source"] = "torch"
        ops.append(window_ops)
        spans.append(_annotation_spans(trace, names, shift))
        allocations.append(_allocations(trace, names, shift))
        memory = trace.counters.copy()
        memory["time_ns"] += shift
        memory["source"] = "torch"
        counters.append(memory)
    merged = conform(pd.concat(ops, ignore_index=True), OP_COLUMNS)
    merged["step"] = assign_steps(merged["start_ns"].to_numpy(), run.steps)
    run.ops = merged.sort_values("start_ns", kind="stable", ignore_index=True)
    run.counters = pd.concat(counters, ignore_index=True)
    run.spans, run.threads = _with_spans(run, pd.concat(spans, ignore_index=True))
    if allocations and any(len(a) for a in allocations):
        held = pd.concat(allocations, ignore_index=True)
        run.threads, tid_of = _with_threads(run.threads, held["thread"])
        held["tid"] = held["thread"].map(tid_of).astype(np.int64)
        run.allocations = conform(held, ALLOCATION_COLUMNS).sort_values("time_ns", kind="stable", ignore_index=True)
    run.info.setdefault("sources", {}).setdefault("torch", {})["windows_merged"] = len(ops) - 1
    memory = held_memory([entry for _, entry in entries])
    if memory:
        run.info.setdefault("profiler_memory", {})["torch"] = memory
    return run


def _thread_names(trace: Run, native: dict, known: set) -> dict:
    """Kineto host-thread name -> the run's name of the same OS thread (when it recorded too)."""
    out = {}
    for os_tid, name in zip(trace.threads["os_tid"], trace.threads["name"]):
        ours = native.get(str(int(os_tid)))
        if ours in known:
            out[name] = ours
    return out


def _annotation_spans(trace: Run, names: dict, shift: int) -> pd.DataFrame:
    """The trace's annotations on the run's clock, with their thread's name in the run (`names`) in
    place of the trace's thread id."""
    spans = trace.spans
    lane = dict(zip(trace.threads["tid"], trace.threads["name"]))
    return pd.DataFrame(
        {
            "thread": [names.get(lane[t], lane[t]) for t in spans["tid"]],
            "kind": spans["kind"].to_numpy(dtype=object),
            "name": spans["name"].to_numpy(dtype=object),
            "start_ns": spans["start_ns"].to_numpy(np.int64) + shift,
            "dur_ns": spans["dur_ns"].to_numpy(np.int64),
        }
    )


def _with_spans(run: Run, added: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's spans and threads with the `added` spans (`_annotation_spans`): on the run's thread
    of their name, or on a new thread of that name; nesting depths recomputed over all the spans."""
    if not len(added):
        return run.spans, run.threads
    threads, tid_of = _with_threads(run.threads, added["thread"])
    added = added.assign(tid=added["thread"].map(tid_of).astype(np.int64), depth=0)
    spans = pd.concat([conform(run.spans, SPAN_COLUMNS), conform(added, SPAN_COLUMNS)], ignore_index=True)
    spans = spans.sort_values("start_ns", kind="stable", ignore_index=True)
    tid, start = spans["tid"].to_numpy(np.int64), spans["start_ns"].to_numpy(np.int64)
    spans["depth"] = nesting_depths(enclosing_parents(tid, start, start + spans["dur_ns"].to_numpy(np.int64)))
    return spans, threads


def _with_threads(threads: pd.DataFrame, names: pd.Series) -> tuple[pd.DataFrame, dict]:
    """`threads` with a new thread for each of `names` it does not have, and every name's tid."""
    tid_of = dict(zip(threads["name"].astype(str), threads["tid"]))
    new = [name for name in dict.fromkeys(names) if name not in tid_of]
    if new:
        first = int(threads["tid"].max()) + 1 if len(threads) else 0
        tid_of.update({name: first + i for i, name in enumerate(new)})
        threads = conform(
            pd.concat(
                [threads, pd.DataFrame({"tid": [tid_of[n] for n in new], "os_tid": -1, "name": new})], ignore_index=True
            ),
            THREAD_COLUMNS,
        )
    return threads, tid_of


def _allocations(trace: Run, names: dict, shift: int) -> pd.DataFrame:
    """The trace's allocations on the run's clock, with their thread's name in the run (`names`) in a
    "thread" column in place of the trace's thread id."""
    lane = dict(zip(trace.threads["tid"], trace.threads["name"]))
    out = trace.allocations.assign(thread=[names.get(lane.get(t), lane.get(t, "")) for t in trace.allocations["tid"]])
    out["time_ns"] += shift
    return out

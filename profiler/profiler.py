"""`Profiler`: the public recording API.

    profiler = Profiler()                 # starts recording into ./profiler_data
    for batch in loader:
        with profiler.phase("forward"): ...
        with profiler.phase("backward"): ...
        profiler.step()                   # end of the iteration
    profiler.analyse()                    # stops, analyses, writes CSV / JSON / Chrome trace

Recording is cheap: a span is two (time, code) records written by the hot path
(profiler/record); everything else happens in `analyse()`.
"""

from __future__ import annotations

import atexit
import difflib
import os
import platform
import socket
import sys
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable, Optional, Unpack

from profiler._version import __version__
from profiler.capture import Source, TorchHooks, TorchOps
from profiler.capture.base import MARKERS
from profiler.capture.distributed import detect_rank, exchange_clock_offsets, initialised_dist, wait_for_ranks
from profiler.config import Settings, Shortcuts, configure
from profiler.errors import ProfilerUsageWarning, ProfviewError
from profiler.record.recorder import HOT_PATH_IMPL, Recorder, Span, active_recorder, clock_anchor, hot, now_ns
from profiler.schedule import (
    CLOSE,
    OPEN,
    SAVE,
    WINDOW_TRANSITIONS,
    ProfilerAction,
    Schedule,
    always_record,
    as_action,
    next_change,
)
from profiler.store.kinds import COUNTER, INSTANT, MARK, OP, PHASE, SPAN, STEP, WINDOW_START, WINDOW_STOP
from profiler.store.raw import RawWriter, archive_previous_recording, raw_file_name

#: phase names the step trace understands; anything else is a free-form span (profiler.span)
KNOWN_PHASES = ("forward", "backward", "tail", "all_reduce", "optimizer", "data")
#: marks the step trace understands; anything else is an instant (profiler.instant)
KNOWN_MARKS = ("fp_start", "bp_end")


class _SpanCache(dict):
    """name -> reusable span; misses create (and validate) the span once."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, name: str):
        span = self[name] = self._make(name)
        return span


class Profiler:
    """Records a step trace, user phases / ops / counters and the sources of one process.

    Args:
        output_path: directory for the raw store and the analysed outputs.
        start_profile: start recording now (else call `start()`).
        schedule: which steps to record, e.g. `profiler.schedule(wait=1, warmup=1, active=3)`;
            default: every step.
        on_trace_ready: called with this profiler each time an active window of the schedule
            completes (its data is flushed to the raw store by then).
        sources: `Source` objects to start and stop with the recording, e.g.
            `[HostCounters(interval_s=0.5), TorchOps(schedule(wait=95, warmup=2, active=3))]`. The
            defaults (host counters, GPU counters, collectives when torch.distributed is
            initialised) are added, except those of a kind given here (profiler/config.py).
        rank, world_size: this process's rank; default: detected from torch.distributed or the
            RANK / WORLD_SIZE / LOCAL_RANK environment, else 0 / 1 (docs/distributed.md).
        ranks: profile only these ranks; on the others the Profiler records nothing (a cheap
            no-op) but still takes part in the collective calls of start() and analyse().
        settings: how to record and analyse (`Settings`: memory budget, flush interval, clock
            sync, gzip timeline, advisor thresholds).
        **shortcuts: keywords that configure the default sources and the settings (`Shortcuts`):
            `host_counters`, `gpu_counters`, `counter_interval_s`, `collectives`,
            `framework="torch"` (op capture through torch.profiler, docs/pytorch.md),
            `ops_schedule`, `record_shapes`, `profile_memory`, `with_stack`, `with_modules`, and every field of
            `Settings` by its name (`memory_budget_mb=128`, ...).
    """

    def __init__(
        self,
        output_path: str | os.PathLike = "./profiler_data",
        start_profile: bool = True,
        schedule: Optional[Schedule] = None,
        on_trace_ready: Optional[Callable[[Profiler], Any]] = None,
        *,
        sources: Iterable[Source] = (),
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        ranks: Optional[Iterable[int]] = None,
        settings: Optional[Settings] = None,
        **shortcuts: Unpack[Shortcuts],
    ) -> None:
        config = configure(sources, settings, shortcuts)
        self.output_path = Path(output_path)
        self.settings = config.settings
        self.schedule = schedule or always_record
        self.on_trace_ready = on_trace_ready
        self.rank, self.world_size = detect_rank(rank, world_size)
        self.ranks = sorted(int(r) for r in ranks) if ranks is not None else None
        self.active = self.ranks is None or self.rank in self.ranks  # False: records nothing
        self.memory_budget_bytes = int(self.settings.memory_budget_mb * (1 << 20))
        self.flush_interval_s = self.settings.flush_interval_s
        self._clock_offset: dict = {}
        self._framework = config.framework
        self._op_capture = config.op_capture  # what attach(ops=True) adds, when no TorchOps is here
        self._steps_from_hooks = False  # a source (TorchHooks on an optimizer) ends the steps
        self._stepper = hot.Stepper(0, self._end_step_slow)  # holds the step counter; ends steps
        self.last_window: Optional[tuple[int, int]] = None  # (first, last) step of the last completed window
        self._action = ProfilerAction.NONE
        self._window_first = 0
        self._recorder: Optional[Recorder] = None
        self._writer: Optional[RawWriter] = None
        self._step_thread: Optional[int] = None
        self._warned: set[str] = set()
        self._stopped = False
        self.sources: list[Source] = config.sources
        if self.active:
            for source in self.sources:  # once all are known: a source may look at the others
                source.bind(self)
        # Fast paths: `profiler.phase(name)` / `profiler.span(name)` are a dict lookup that
        # returns a cached C span (see the methods of the same name for the documentation).
        self._phases = _SpanCache(self._make_phase)
        self._spans = _SpanCache(lambda name: self._new_span(SPAN, name))
        self._ops: dict[tuple[str, Optional[str]], Any] = {}
        self.phase = self._phases.__getitem__
        self.span = self._spans.__getitem__
        if start_profile:
            self.start()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> Profiler:
        """Start recording (no-op when already recording)."""
        if self._recorder is not None:
            return self
        if self._stopped:
            raise ProfviewError("this Profiler was stopped; create a new Profiler to record again")
        if not self._clock_offset:  # a collective call: every rank, recording or not
            self._clock_offset = exchange_clock_offsets() if self.settings.clock_sync else {"offset_method": "off"}
        if not self.active:
            return self
        if active_recorder() is not None:  # the hot path is process-wide: one recording at a time
            raise ProfviewError(
                "another Profiler is already recording in this process; stop it before starting a new one"
            )
        archived = archive_previous_recording(self.output_path, self.rank)
        if archived is not None:
            warnings.warn(
                f"{self.output_path} already held a recording of rank {self.rank}; it was moved to "
                f"{archived} (use a fresh output_path to keep runs apart)",
                ProfilerUsageWarning,
                stacklevel=2,
            )
        self._writer = RawWriter(self.output_path / "raw" / raw_file_name(self.rank, os.getpid()))
        self._recorder = Recorder(self._writer, self.memory_budget_bytes, self.flush_interval_s)
        self._stepper.code = self._recorder.point_code(STEP, "step")
        self._start_code = self._recorder.point_code(WINDOW_START, "window")
        self._stop_code = self._recorder.point_code(WINDOW_STOP, "window")
        per_event_ns = _calibrate_event_cost(self._recorder)
        origin_mono, origin_unix = clock_anchor()
        self._writer.append_json("meta", self._meta(origin_mono, origin_unix, per_event_ns))
        for source in self.sources:
            source.start(self._recorder)
        self._write_source_status()
        self._recorder.start()
        atexit.register(self._atexit)
        self._enter_step(self.step_num, now_ns())
        self._update_fast_step()
        return self

    def stop(self) -> None:
        """Stop recording and close the raw store (idempotent). Data recorded so far is kept."""
        if self._recorder is None:
            return
        for source in self.sources:
            source.finish()
        t = now_ns()
        if self._action.records:
            hot.sample(t, self._stop_code, self.step_num, 0)
        hot.set_enabled(False)
        for source in self.sources:
            source.stop()
        self._write_source_status()
        self._recorder.close({"stopped_cleanly": True, "steps": self.step_num, "stop_ns": t})
        self._recorder = None
        self._update_fast_step()
        self._stopped = True
        atexit.unregister(self._atexit)

    def _atexit(self) -> None:
        """At interpreter exit, close the raw store so `profview analyse` finds a complete recording."""
        try:
            self.stop()
        except Exception:
            pass

    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    @property
    def step_num(self) -> int:
        """The step now running (0-based, counts every step())."""
        return self._stepper.step

    @step_num.setter
    def step_num(self, value: int) -> None:
        self._stepper.step = value

    @property
    def recording(self) -> bool:
        """Whether records are being taken right now (started, and the schedule says record)."""
        return self._recorder is not None and self._action.records

    # ---- steps -----------------------------------------------------------------------------

    def step(self) -> None:
        """End the current iteration: step k runs from the previous step() (or the start) to this call."""
        if not self.active:
            self.step_num += 1
            return
        if self._steps_from_hooks:
            self._warn_once(
                "step-attached",
                "profiler.step() ignored: the optimizer hook installed by "
                "attach() ends each step (pass step_on_optimizer=False to attach() to call step() yourself)",
            )
            return
        self._stepper()  # its fast path (see _update_fast_step), else _end_step_slow

    def _end_step_slow(self, t0: int) -> None:
        if self._recorder is None:
            self._warn_once("step-stopped", "profiler.step() called while the profiler is not running; ignored")
            return
        ident = threading.get_ident()
        if self._step_thread is None:
            self._step_thread = ident
        elif ident != self._step_thread:
            self._warn_once(
                "step-thread",
                "profiler.step() called from a second thread; steps must be driven by one thread "
                f"(the first caller, {_thread_name(self._step_thread)}); this call was ignored",
            )
            return
        stepper = self._stepper
        hot.sample(t0, stepper.code, stepper.step, stepper.overhead)
        ended = stepper.step
        stepper.step += 1
        self._enter_step(stepper.step, t0, ended_action=self._action, ended=ended)
        self._update_fast_step()
        stepper.overhead = now_ns() - t0  # step()'s own cost belongs to the step it begins

    def _update_fast_step(self) -> None:
        """Let the C stepper enter the coming steps on its own while nothing changes: the
        schedule's action stays the same (next_change) and no source needs its on_step
        (Source.quiet_until). Then `profiler.step` is the stepper itself: no Python frame per
        step (a cold frame in a training loop costs microseconds; benchmarks/bench_step_overhead.py).
        The first step() of a run always takes the slow path: it fixes the stepping thread."""
        stepper = self._stepper
        on = self._recorder is not None and self.active and self._step_thread is not None
        stepper.owner = self._step_thread if on else 0
        stepper.fast_until = (
            min([next_change(self.schedule, stepper.step)] + [s.quiet_until(stepper.step) for s in self.sources])
            if on
            else 0
        )
        if on and not self._steps_from_hooks:
            self.step = stepper
        else:
            self.__dict__.pop("step", None)

    def _enter_step(
        self, step: int, t: int, ended_action: ProfilerAction = ProfilerAction.NONE, ended: int = -1
    ) -> None:
        """Apply the schedule's action for `step`: open / close recording windows, notify sources.

        Runs once per step on the training thread, so it avoids Enum properties and no-op calls.
        """
        action = self.schedule(step)
        if type(action) is not ProfilerAction:
            action = as_action(action)
        change = WINDOW_TRANSITIONS[ended_action, action]
        if CLOSE in change:
            hot.sample(t, self._stop_code, step, 0)
            hot.set_enabled(False)
            self.last_window = (self._window_first, ended)
        self._action = action
        for source in self.sources:
            if type(source).on_step is not Source.on_step:
                source.on_step(step, action)
        if SAVE in change and self.on_trace_ready is not None:
            self._recorder.flush()
            self.on_trace_ready(self)
        if OPEN in change:
            self._window_first = step
            hot.set_enabled(True)
            hot.sample(now_ns(), self._start_code, step, 0)

    # ---- sources ---------------------------------------------------------------------------

    def add_source(self, source: Source) -> None:
        """Add a source; when recording already, it starts now and joins at the current step.
        A Profiler that records nothing (`ranks=` leaves this rank out) keeps it unbound and unstarted."""
        if self.active:
            source.bind(self)
        self.sources.append(source)
        if self._recorder is not None:
            source.start(self._recorder)
            source.on_step(self.step_num, self._action)
            self._write_source_status()
        self._update_fast_step()

    def take_over_steps(self, source: Source) -> Callable[[], None]:
        """For a source that ends the steps itself (`TorchHooks` on an optimizer, from its `bind`): the
        function that ends a step. From now on `step()` is ignored; one source at a time."""
        if self._steps_from_hooks:
            raise ProfviewError(
                "an optimizer attached earlier already ends the steps; attach this one with step_on_optimizer=False"
            )
        self._steps_from_hooks = True
        return self._stepper

    def attach(
        self, model: Any, optimizer: Any = None, *, ops: bool = True, step_on_optimizer: bool = True
    ) -> Profiler:
        """PyTorch: fp start / bp end / step end from hooks on `model` and `optimizer` (docs/pytorch.md).

        A shortcut for `add_source(TorchHooks(model, optimizer, step_on_optimizer=...))`: the root
        module's forward marks fp start, the end of its backward pass marks bp end,
        `optimizer.step()` is the `optimizer` tail phase and, with `step_on_optimizer`, ends the
        profiler step (do not call profiler.step() then). `ops` also captures per-operator
        timings through torch.profiler (a `TorchOps` source, on `ops_schedule`, else the schedule),
        unless the Profiler has one already.
        """
        if not self.active:
            return self
        self.add_source(TorchHooks(model, optimizer, step_on_optimizer=step_on_optimizer))
        if ops and not any(isinstance(s, TorchOps) for s in self.sources):
            self.add_source(self._op_capture)
        return self

    # ---- markers ---------------------------------------------------------------------------

    def phase(self, name: str):  # replaced per instance by a cached lookup (see __init__)
        """A step phase as a context manager: "forward", "backward", "tail", "all_reduce", "optimizer", "data"."""
        return self._phases[name]

    def span(self, name: str):  # replaced per instance by a cached lookup (see __init__)
        """A free-form named span (context manager or decorator); not part of the step trace."""
        return self._spans[name]

    def op(self, name: Any, op_type: Optional[str] = None):
        """A user op timed like a device op (op tables, timeline): `with profiler.op("MatMul"):` or
        `@profiler.op("MatMul")`.

        `op_type` groups ops in op_type_{rank}.csv; it defaults to the name. Used bare as a decorator
        (`@profiler.op`), the op is named after the function.
        """
        if callable(name):
            fn = name
            return self.op(fn.__qualname__)(fn)
        key = (name, op_type)
        span = self._ops.get(key)
        if span is None:
            span = self._ops[key] = self._new_span(OP, str(name), str(op_type or name))
        return span

    def mark(self, name: str) -> None:
        """A step boundary where a `with` block does not fit: mark("fp_start"), mark("bp_end")."""
        if name not in KNOWN_MARKS:
            self._warn_unknown("mark", name, KNOWN_MARKS, "profiler.instant(name)")
        hot.emit(self._point(MARK, name))

    def instant(self, name: str) -> None:
        """A named point in time on the calling thread (shown in the timeline)."""
        hot.emit(self._point(INSTANT, name))

    def counter(self, name: str, value: float) -> None:
        """Record a counter value (loss, learning rate, queue depth, ...) at the current time."""
        hot.sample(now_ns(), self._point(COUNTER, name, "user|host"), 0, float(value))

    def prefetch(self, iterable: Iterable, depth: int = 2, name: str = "host_queue", workers: int = 1) -> Iterable:
        """Read `iterable` ahead of the loop in background threads, through a probed queue `name`.

        It both measures the loop's data wait and fixes a data-bound loop (docs/data-pipeline.md):
        `for batch in profiler.prefetch(loader, depth=4, workers=4): ...`. workers > 1 needs a
        map-style source (len() and [i]) and keeps its order. See `profiler.data.pipeline.prefetch`.
        """
        from profiler.data.pipeline import prefetch

        return prefetch(iterable, depth=depth, name=name, workers=workers)

    def iterate(self, iterable: Iterable) -> Iterable:
        """Iterate `iterable` as the loop does, timing each fetch as data wait (a `data` phase):
        `for batch in profiler.iterate(loader): ...`. The step trace then splits the iteration gap
        into data wait and other host work. Use ProfiledDataLoader for a torch DataLoader (it also
        probes the workers' queue) and prefetch() to load ahead (docs/data-pipeline.md)."""
        from profiler.data.fetch import TimedFetches

        return TimedFetches(iterable)

    def _point(self, kind: str, name: str, extra: str = "") -> int:
        rec = self._recorder
        if rec is None:
            return 0  # not started: hot.emit / hot.sample are disabled, the code is unused
        return rec.point_code(kind, name, extra)

    def _new_span(self, kind: str, name: str, extra: str = ""):
        if not self.active:
            return Span(0, 1)  # never recorded: this rank's hot path stays disabled
        if self._recorder is None:
            raise ProfviewError("the Profiler is not started; call profiler.start() before recording spans")
        return self._recorder.span(kind, name, extra)

    def _make_phase(self, name: str):
        if name not in KNOWN_PHASES:
            self._warn_unknown("phase", name, KNOWN_PHASES, "profiler.span(name)")
        return self._new_span(PHASE, name)

    # ---- flushing and analysis -------------------------------------------------------------

    def flush(self) -> None:
        """Move everything recorded so far to the raw store now."""
        if self._recorder is not None:
            self._recorder.flush()

    def analyse(
        self, stop: bool = True, progress: bool = True, cluster_timeout_s: float = 120.0, quiet: bool = False
    ) -> list[Path]:
        """Stop recording (unless stop=False), analyse the raw store and write the outputs. Returns their paths.

        Prints one line (on stderr): where the outputs are, the verdict, and the command that shows
        the report; `quiet=True` prints nothing. In a torch.distributed job every rank calls it:
        each analyses its own data, then rank 0 waits (at most `cluster_timeout_s`) for the others
        and writes the cluster files (docs/distributed.md); only rank 0 prints.
        """
        from profiler.postprocess.recording import analyse_cluster, verdict_line

        if not stop:
            if self._recorder is None:
                written = self._analyse_own(progress)
            else:
                self._recorder.flush()
                with self._recorder.paused():  # no flush may append while the store is read
                    written = self._analyse_own(progress)
        else:
            self.stop()
            written = self._analyse_own(progress) if self.active else []
            if initialised_dist() is not None:
                wait_for_ranks(cluster_timeout_s)
                if self.rank == 0:
                    written += analyse_cluster(self.output_path)
        if not quiet and self.active and (self.rank == 0 or self.world_size == 1) and written:
            print(verdict_line(self.output_path, self.rank), file=sys.stderr)
        return written

    def _analyse_own(self, progress: bool) -> list[Path]:
        """Analyse this rank's raw store into its output files."""
        from profiler.postprocess.recording import analyse_directory

        return analyse_directory(
            self.output_path, ranks=[self.rank], progress=progress, gzip_timeline=self.settings.gzip_timeline
        )

    # ---- helpers ---------------------------------------------------------------------------

    def _write_source_status(self) -> None:
        status = {MARKERS: {"status": "ok", "hot_path": HOT_PATH_IMPL}}
        status.update({s.name: s.info() for s in self.sources})
        self._writer.append_json("sources", status)

    def _meta(self, origin_mono: int, origin_unix: int, per_event_ns: float) -> dict:
        ops = next((s for s in self.sources if isinstance(s, TorchOps)), self._op_capture)
        return {
            "tool": "profview",
            "tool_version": __version__,
            "rank": self.rank,
            "world_size": self.world_size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "framework_versions": _framework_versions(),
            "clock": {
                "origin_monotonic_ns": origin_mono,
                "origin_unix_ns": origin_unix,
                "clock": "perf_counter_ns",
                **self._clock_offset,
            },
            "per_event_cost_ns": per_event_ns,
            "config": {
                "output_path": str(self.output_path),
                "ranks": self.ranks,
                "schedule": _name_of(self.schedule),
                "memory_budget_bytes": self.memory_budget_bytes,
                "flush_interval_s": self.flush_interval_s,
                "sources": [s.name for s in self.sources],
                "gzip_timeline": self.settings.gzip_timeline,
                "timeline_max_events": self.settings.timeline_max_events,
                "framework": self._framework,
                "ops_schedule": _name_of(ops.schedule),
                **ops.options,
                "advisor_thresholds": dict(self.settings.advisor_thresholds),
            },
        }

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, ProfilerUsageWarning, stacklevel=3)

    def _warn_unknown(self, what: str, name: str, known: tuple[str, ...], alternative: str) -> None:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        self._warn_once(
            f"{what}:{name}",
            f"unknown {what} {name!r}: {hint}the step trace knows {', '.join(known)}; "
            f"it is recorded but does not move step boundaries (use {alternative} for free-form names)",
        )


def _name_of(schedule: Optional[Schedule]) -> str:
    """A schedule as the config records it: its function's name, else its repr."""
    return getattr(schedule, "__qualname__", repr(schedule))


def _calibrate_event_cost(recorder: Recorder, spans: int = 2000) -> float:
    """Measured cost of one recorded event (half a span) on this machine, in ns.

    Used to estimate the profiler's own time per step (events in the step x this cost); the
    calibration records into a throw-away descriptor and discards what it recorded.
    """
    span = recorder.span("calibration", "calibration")
    was = hot.is_enabled()
    hot.drain()
    hot.set_enabled(True)
    best_spans = best_bare = float("inf")
    for _ in range(3):  # the fastest of each loop: a preempted bare loop must not cancel the spans' cost
        t0 = now_ns()
        for _ in range(spans):
            with span:
                pass
        t1 = now_ns()
        for _ in range(spans):  # the bare loop, subtracted
            pass
        t2 = now_ns()
        best_spans, best_bare = min(best_spans, t1 - t0), min(best_bare, t2 - t1)
    hot.set_enabled(was)
    hot.drain()
    return max((best_spans - best_bare) / (2 * spans), 0.0)


def _framework_versions() -> dict:
    import numpy

    versions = {"python": platform.python_version(), "numpy": numpy.__version__}
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["torch"] = torch.__version__
    return versions


def _thread_name(ident: int) -> str:
    for t in threading.enumerate():
        if t.ident == ident:
            return t.name
    return f"thread {ident}"

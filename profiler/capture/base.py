"""What a source of events is: something the Profiler starts, steps and stops, and whose data
the analysis merges into the run.

Sources record through the same hot path as the markers (so their data lands in the raw store
with everything else) and report their status for `profiler_info` (`ok`, `off`, `absent: why`).
A source that needs the Profiler it records with (its schedule, step count, output directory)
takes it in `bind`. A source that leaves data beside the raw store (torch's trace files, a
device's log) or records samples of its own kind (collectives) turns them into the run's tables
in its `merge`, which the analysis calls for every source the recording names: the names resolve
to classes through `capture/registry.py`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from profiler.record.recorder import hot, now_ns
from profiler.schedule import NEVER, Schedule
from profiler.store.kinds import COUNTER

if TYPE_CHECKING:
    from profiler.model import Run
    from profiler.record.recorder import Recorder
    from profiler.schedule import ProfilerAction
    from profiler.store.load import Recording

#: `Source.merge_stage`: sources whose data defines the steps (a device's iterations) merge before
#: a run without steps gets inferred ones (analysis/steps.ensure_steps); the others merge after, onto
#: the final steps.
STEPS, EVENTS = 0, 1
#: The sources table's line for the Profiler's own markers (the hot path): not a Source.
MARKERS = "markers"


class Host(Protocol):
    """What a source may use of the Profiler it records with (`Source.bind`); `profiler.Profiler` is one."""

    output_path: Path
    rank: int
    active: bool  # False on a rank the Profiler leaves out (`ranks=`): nothing records
    schedule: Schedule
    flush_interval_s: float
    sources: list[Source]

    @property
    def step_num(self) -> int: ...

    def add_source(self, source: Source) -> None: ...

    def take_over_steps(self, source: Source) -> Callable[[], None]: ...


class Source:
    """Base class: override what you need. `status` is reported in profiler_info."""

    name = "source"
    merge_stage = EVENTS

    def __init__(self) -> None:
        self.status = "ok"
        self.details: dict = {}

    def bind(self, profiler: Host) -> None:
        """Called once when the source joins a Profiler (its sources are all known by then), before
        start(). Raise to refuse the Profiler (the source is then not added)."""

    def start(self, recorder: Recorder) -> None:
        """Called when recording starts."""

    def on_step(self, step: int, action: ProfilerAction) -> None:
        """Called by Profiler.step() with the number and action of the step that begins."""

    def quiet_until(self, step: int) -> int:
        """The first step after `step` (which just began) whose start needs on_step. The steps
        before it begin without any call into the source (profiler.step()'s C fast path), while
        the profiler's own schedule does not change either. Default: every step if on_step is
        overridden, else never."""
        return NEVER if type(self).on_step is Source.on_step else step + 1

    def finish(self) -> None:
        """Called while recording is still on, just before it stops (e.g. a last counter reading)."""

    def stop(self) -> None:
        """Called when recording stops; must be idempotent."""

    def info(self) -> dict:
        return {"status": self.status, **self.details}

    # ---- after recording (analysis) --------------------------------------------------------

    @classmethod
    def recorded_as(cls, name: str) -> bool:
        """Whether a source that the raw store lists under `name` is one of this class."""
        return name == cls.name

    @classmethod
    def merge(cls, run: Run, recording: Recording) -> Run:
        """`run` with what this source recorded outside the event stream merged in. Default: nothing."""
        return run


class Sampler(Source):
    """A background thread that reads counters every `interval_s` and records them as samples."""

    source = "sampler"

    def __init__(self, interval_s: float = 0.1) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.details["interval_s"] = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._codes: dict[tuple[str, str], int] = {}
        self._recorder: Recorder | None = None

    def open(self) -> list[tuple[str, str]]:
        """Prepare reading; return the (device, metric) pairs this sampler produces. Raise to mark it absent."""
        raise NotImplementedError

    def read(self) -> list[tuple[str, str, float]]:
        """One reading: [(device, metric, value), ...]."""
        raise NotImplementedError

    def start(self, recorder: Recorder) -> None:
        self._recorder = recorder
        try:
            pairs = self.open()
        except Exception as exc:  # a missing driver or library is an expected state, not an error
            self.status = f"absent: {exc}".strip()
            return
        for device, metric in pairs:
            self._code(device, metric)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"profview-{self.name}", daemon=True)
        self._thread.start()

    def _code(self, device: str, metric: str) -> int:
        code = self._codes.get((device, metric))
        if code is None:
            code = self._recorder.point_code(COUNTER, metric, f"{self.source}|{device}")
            self._codes[(device, metric)] = code
        return code

    def _record_reading(self) -> None:
        t = now_ns()
        for device, metric, value in self.read():
            hot.sample(t, self._code(device, metric), 0, float(value))

    def finish(self) -> None:
        """Stop sampling and take a last reading while recording is on, so even a run shorter than
        the interval has one (the sampling thread is stopped first: readers need not be thread-safe)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            self._record_reading()
        except Exception:
            pass

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._record_reading()
                failures = 0
            except Exception as exc:  # one failed reading is skipped; persistent failure stops the sampler
                failures += 1
                if failures >= 10:
                    self.status = f"absent: stopped after repeated read failures ({exc})"
                    return
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.close()

    def close(self) -> None:
        """Release what open() acquired."""

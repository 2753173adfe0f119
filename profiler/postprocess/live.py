"""A recording followed live: the raw store as it grows -> per-rank step figures and the advisor's
reading of the recent window. What `profview watch` and `profview DIR --live` show.

`LiveRecording(directory).update()` polls the store (`store.follow.Follower`: only the bytes
appended since the last poll), and returns a `Snapshot`: per rank the steps so far, recent step
times and rate (from the step samples, cheap), the slowest rank, counter trends (host RSS, GPU
memory), and, for one rank, the analysis of its last `window_steps` steps by the same code
`analyse()` runs (`analysis.window.window_analysis`). That analysis is the only costly part: it runs
when new steps arrived and at most so often that it takes `analysis_duty` of one core (its own
measured CPU time decides when the next one is due), so a fast recording is followed with a
bounded cost. `window_outputs` hands that analysis to the live report as its output files would
hold it (in memory). Nothing is written into the directory.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from profiler.analysis.results import Analysis, memory_limits
from profiler.analysis.steps import ensure_steps
from profiler.analysis.trend import MIN_SPAN_S, counter_trend
from profiler.analysis.window import LiveFigures, live_figures, rate_per_s, step_times, window_analysis
from profiler.errors import ProfviewError
from profiler.formats.text import plain_document
from profiler.store import kinds as K
from profiler.store.follow import Follower, RankState
from profiler.store.interpret import interpret

#: steps left out of the recent step times (the advisor's default warm-up: imports and set-up land in step 0)
WARMUP_STEPS = 1
#: counters whose trend the live view shows: metric -> label
MEMORY = {"rss_bytes": "host RSS", "mem_used_bytes": "GPU memory"}
#: warnings of a window's analysis that only say it was cut out of a recording still being written
WINDOW_WARNINGS = ("the recording did not stop cleanly", "span begin/end events had no partner")


@dataclass
class RankStatus:
    """One rank, from its step samples."""

    rank: int
    steps: int  # steps recorded so far
    last_step: int  # the number of the last one (-1: none yet)
    recent_ms: np.ndarray  # durations of the last steps (ms), oldest first
    mean_ms: float  # their mean
    steps_per_s: float
    ended: bool
    gone: bool  # its process exited without an end chunk
    since_last_step_s: Optional[float]  # seconds since the last step ended (same host only)
    elapsed_s: float = 0.0  # since the recording started (to its last step once it ended)
    pid: int = 0
    host: str = ""


@dataclass
class MemoryTrend:
    label: str
    device: str
    last_bytes: float
    bytes_per_s: Optional[float]  # None until there are enough samples for a trend (analysis.trend)
    limit_bytes: Optional[float] = None


@dataclass
class Snapshot:
    """What a live view shows at one refresh."""

    directory: Path
    ranks: list = field(default_factory=list)  # RankStatus, by rank
    world_size: int = 0
    shown_rank: Optional[int] = None  # the rank the analysis is of
    slowest_rank: Optional[int] = None
    figures: Optional[LiveFigures] = None
    analysed_steps: tuple = ()  # (first, last) step of the analysed window
    analysis_age_s: Optional[float] = None
    analysis_cpu_s: float = 0.0
    analysis_error: str = ""
    memory: list = field(default_factory=list)  # MemoryTrend
    finished: bool = False  # every rank wrote its end chunk
    gone: list = field(default_factory=list)  # ranks whose writer died without an end chunk
    torn_chunks: int = 0
    pending_bytes: int = 0  # chunks being written (retried next poll)
    dropped_events: int = 0
    events_read: int = 0
    bytes_read: int = 0
    warnings: list = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Nothing recorded here yet."""
        return not self.ranks

    @property
    def steps(self) -> int:
        """Steps of the shown rank (else of the first one)."""
        r = self.rank(self.shown_rank)
        return r.steps if r is not None else 0

    def rank(self, rank: Optional[int]) -> Optional[RankStatus]:
        for r in self.ranks:
            if r.rank == rank:
                return r
        return self.ranks[0] if self.ranks and rank is None else None


class LiveRecording:
    """Follows `directory`'s raw store; `update()` gives a Snapshot (see the module doc).

    Args:
        window_steps: the advisor reads the last this many steps.
        recent_steps: the step-time sparkline and rates cover the last this many steps.
        max_window_events: fewer steps are analysed when the window would hold more events.
        rank: the rank to analyse (default: the slowest rank, by its recent step time).
        analysis_duty: the share of one core the window analysis may take on average.
        min_analysis_interval_s: the analysis runs at most this often.
        since: leave out raw files last written before this Unix time (an earlier recording in the
            directory of one about to start).
    """

    def __init__(
        self,
        directory,
        *,
        window_steps: int = 100,
        recent_steps: int = 60,
        max_window_events: int = 300_000,
        rank: Optional[int] = None,
        thresholds: Optional[Mapping[str, Any]] = None,
        analysis_duty: float = 0.04,
        min_analysis_interval_s: float = 2.0,
        since: Optional[float] = None,
    ) -> None:
        self.directory = Path(directory)
        self.window_steps = max(int(window_steps), 1)
        self.recent_steps = max(int(recent_steps), 2)
        self.max_window_events = int(max_window_events)
        self.rank = rank
        self.thresholds = dict(thresholds or {})
        self.analysis_duty = analysis_duty
        self.min_analysis_interval_s = min_analysis_interval_s
        self.follower = Follower(
            self.directory,
            keep_steps=self.window_steps + 2,
            max_events=max(2 * self.max_window_events, 100_000),
            since=since,
        )
        self._analysis: dict[int, tuple[Analysis, LiveFigures, float, int]] = {}  # rank -> (.., at, steps seen)
        self._due = 0.0
        self._cpu = 0.0
        self._error = ""
        self.bytes_read = 0
        self.shown_rank: Optional[int] = None

    def close(self) -> None:
        self.follower.close()

    def analysis(self, rank: Optional[int] = None) -> Optional[Analysis]:
        """The last analysis of `rank`'s window (default: the rank shown at the last update)."""
        got = self._analysis.get(self.shown_rank if rank is None else rank)
        return got[0] if got else None

    def update(self, analyse: bool = True, force: bool = False) -> Snapshot:
        """Poll the store, and analyse the shown rank's window when it is due (`force`: now, when
        new steps arrived since the last analysis)."""
        result = self.follower.poll()
        self.bytes_read += result.bytes_read
        for rank in result.reset_ranks:
            self._analysis.pop(rank, None)
        now = time.monotonic()
        ranks = [self._status(s) for _, s in sorted(self.follower.ranks.items())]
        gone = self.follower.gone()
        for r in ranks:
            r.gone = r.rank in gone
        slowest = max((r for r in ranks if len(r.recent_ms)), key=lambda r: r.mean_ms, default=None)
        shown = self.shown_rank = self._shown(slowest.rank if slowest else None)
        state = self.follower.ranks.get(shown) if shown is not None else None
        if analyse and state is not None and (force or now >= self._due):
            seen = self._analysis.get(shown)
            if seen is None or seen[3] != state.step_count:
                self._analyse(shown, state, now)
        snap = Snapshot(
            directory=self.directory,
            ranks=ranks,
            world_size=self.follower.world_size,
            shown_rank=shown,
            slowest_rank=slowest.rank if slowest else None,
            finished=self.follower.finished,
            gone=gone,
            analysis_cpu_s=self._cpu,
            analysis_error=self._error,
            bytes_read=self.bytes_read,
        )
        for s in self.follower.ranks.values():
            snap.torn_chunks += s.torn_chunks
            snap.pending_bytes += sum(f.pending for f in s.files.values())
            snap.dropped_events += s.dropped
            snap.events_read += s.events_read + s.samples_read
            snap.warnings += s.warnings
        got = self._analysis.get(shown) if shown is not None else None
        if got is not None:
            snap.figures = got[1]
            snap.analysed_steps = (got[1].first_step, got[1].last_step)
            snap.analysis_age_s = now - got[2]
        if state is not None:
            first = state.steps.by_time()[:WARMUP_STEPS]
            after = int(first[-1, 0]) if state.steps.n > WARMUP_STEPS else None
            snap.memory = memory_trends(state, after)
        return snap

    def _shown(self, preferred: Optional[int]) -> Optional[int]:
        """The rank to analyse: the one asked for, else `preferred` (the slowest), else the lowest."""
        ranks = self.follower.ranks
        if self.rank is not None:
            return self.rank if self.rank in ranks else None
        if preferred in ranks:
            return preferred
        return min(ranks) if ranks else None

    def _status(self, s: RankState) -> RankStatus:
        recent = s.steps.by_time(self.recent_steps + 1)  # the first one only gives the next its start
        nums, _, dur = step_times(recent[:, 0], recent[:, 2], s.window_starts())
        if (nums >= WARMUP_STEPS).sum() >= 2:  # the first step (imports, set-up) is not a step time
            dur = dur[nums >= WARMUP_STEPS]
        dur = dur[-self.recent_steps :]
        since = None
        meta = s.meta or {}
        last_t = int(recent[-1, 0]) if len(recent) else s.origin_ns
        ends = [int(f.end["stop_ns"]) for f in s.files.values() if f.end and isinstance(f.end.get("stop_ns"), int)]
        elapsed = ((max(ends) if ends else last_t) - s.origin_ns) / 1e9 if s.meta else 0.0
        if meta.get("host") == self.follower.host and not s.ended:
            now = time.perf_counter_ns()  # CLOCK_MONOTONIC: the recording's clock on this host
            elapsed = (now - s.origin_ns) / 1e9
            if len(recent):
                since = max((now - last_t) / 1e9, 0.0)
        return RankStatus(
            rank=s.rank,
            steps=s.step_count,
            last_step=int(recent[-1, 2]) if len(recent) else -1,
            recent_ms=dur / 1e6,
            mean_ms=float(dur.mean() / 1e6) if len(dur) else 0.0,
            steps_per_s=rate_per_s(dur),
            ended=s.ended,
            gone=False,
            since_last_step_s=since,
            elapsed_s=max(elapsed, 0.0),
            pid=int(meta.get("pid", 0) or 0),
            host=str(meta.get("host", "")),
        )

    def _analyse(self, rank: int, state: RankState, now: float) -> None:
        cpu0 = time.thread_time()
        try:
            tables = self.follower.window(rank, self.window_steps, self.max_window_events)
            if tables is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run = ensure_steps(interpret(tables))
                    analysis = window_analysis(run, self.thresholds)
                figures = live_figures(analysis)
                if figures is not None:
                    self._analysis[rank] = (analysis, figures, now, state.step_count)
                self._error = ""
        except ProfviewError as exc:
            self._error = str(exc)
        finally:
            self._cpu = time.thread_time() - cpu0
            self._due = now + max(self.min_analysis_interval_s, self._cpu / self.analysis_duty)


def memory_trends(state: RankState, after_ns: Optional[int] = None) -> list[MemoryTrend]:
    """Host RSS and GPU memory of a rank over the follower's trend horizon (from `after_ns`, the end
    of the warm-up, when given): last value and slope (`counter_trend`: None until the samples span
    MIN_SPAN_S seconds, as the advisor's memory rule wants)."""
    rows = state.counters.rows
    if after_ns is not None and (rows[:, 0] > after_ns).sum() >= 2:
        rows = rows[rows[:, 0] > after_ns]
    if not len(rows):
        return []
    desc = rows[:, 1] >> 1
    out = []
    limits = _limits(state.sources)
    for d in np.unique(desc):
        kind, metric, extra = state.descriptors[int(d)]
        if kind != K.COUNTER or metric not in MEMORY:
            continue
        source, _, device = str(extra).partition("|")
        mine = rows[desc == d]
        t, values = mine[:, 0], mine[:, 3].copy().view(np.float64)
        slope = counter_trend(t, values, MIN_SPAN_S)
        last = float(values[np.argmax(t)])
        out.append(MemoryTrend(MEMORY[metric], device or source, last, slope, limits.get(f"{source}|{device}")))
    return sorted(out, key=lambda m: (m.label, m.device))


def _limits(sources: Mapping[str, Any]) -> dict[str, float]:
    return memory_limits({"sources": sources})


def window_outputs(analysis: Analysis) -> dict[str, Any]:
    """The analysis of a window as its output files would hold it, by kind (profiler.formats), without
    writing them, for the live report: profiler_info (without the warnings that only say the window
    was cut out of a recording still being written), every table its CSV writer would write (the same
    writers decide which the run has) and the JSON documents (queue_summary, report) with plain JSON values."""
    from profiler.export.writers import WRITERS
    from profiler.export.writers.base import CsvWriter

    info = plain_document(analysis.run.info)
    info["warnings"] = [w for w in info.get("warnings", []) if not any(text in str(w) for text in WINDOW_WARNINGS)]
    outputs: dict[str, Any] = {"profiler_info": info}
    for writer in WRITERS:
        table = writer.table(analysis) if isinstance(writer, CsvWriter) else None
        if table is not None:
            outputs[writer.kind] = table
    outputs.update({kind: plain_document(doc) for kind, doc in analysis.extra_json.items()})
    return outputs

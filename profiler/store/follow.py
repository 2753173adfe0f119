"""Following a raw store while it is being written: incremental, bounded, read-only.

`Follower(directory)` remembers, per raw file, the offset up to which it has read whole chunks.
Each `poll()` lists `directory/raw/*.pvraw`, reads only the bytes appended since the last poll
(`os.pread`), and walks them with the raw store's one chunk reader (`RawFile.walk`), whose chunks
go through the rank's `tables.TableReader`: the same reader, checks, de-duplication and damage
sentences as `load.read_raw_tables`. A chunk that is not whole yet is the writer's single `write()`
still landing (a torn tail): the walk stops before it and the next poll retries it; it is not
reported as corruption. Only when the file's writer is gone (its process has exited, or nothing
arrived for `stale_after_s` after an end) are the last bytes walked as the batch reader walks a
finished file, and what makes no chunk is reported as it would report it. A checksum mismatch at
the very end of a file is retried a few polls the same way before it is reported.

Per rank it keeps:

- the rank's `TableReader`: the metadata, the descriptors (each recording's ids mapped to one table
  for the rank), thread names, source status, the files' `end` chunks, and what damage cost;
- every step and window sample (a few bytes a step: step counts, rates and step times of the
  whole run);
- counter samples of the last `trend_s` seconds (host RSS, GPU memory trends);
- events and other samples of the recent past only: whole chunks, dropped from the oldest once
  they are older than the last `keep_steps` steps, or while at least `max_events` would remain
  without them (so at most `max_events` plus one chunk are held).

`window(rank, steps)` assembles the last `steps` whole steps as `RawTables`, the input of
`store.interpret.interpret()`, cut at a step boundary with a window start there, so the first step
of the window is whole. Nothing is ever written: the follower opens the files read-only.
"""

from __future__ import annotations

import collections
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from profiler.errors import ProfviewError
from profiler.store import kinds as K
from profiler.store.raw import CHECKSUM, MAGIC, RAW_SUFFIX, SHORT, RawFile
from profiler.store.tables import RawTables, Records, TableReader

#: most bytes one poll reads from one file (the rest is read by the next polls)
READ_LIMIT = 64 << 20
#: a file whose writer cannot be checked (another host, or no readable metadata naming it) is taken
#: as finished after this long without growth: its torn tail is given up, its rank counts as gone
UNKNOWN_WRITER_S = 30.0
#: how many polls a checksum mismatch at the end of a growing file is retried before it is reported
CRC_RETRIES = 3

#: sample kinds the follower keeps apart (int8 codes per descriptor)
_OTHER, _STEP, _WSTART, _WSTOP, _COUNTER = 0, 1, 2, 3, 4
_KIND_CODE = {K.STEP: _STEP, K.WINDOW_START: _WSTART, K.WINDOW_STOP: _WSTOP, K.COUNTER: _COUNTER}


class _Grow:
    """An append-only int64 table with amortised growth (rows of `width` words)."""

    def __init__(self, width: int) -> None:
        self._a = np.empty((64, width), np.int64)
        self.n = 0
        self.ordered = True  # rows in time order (column 0): the usual case, one stepping thread

    def add(self, rows: np.ndarray) -> None:
        if len(rows) and self.ordered:
            t = rows[:, 0]
            self.ordered = bool((self.n == 0 or t[0] >= self._a[self.n - 1, 0]) and np.all(t[1:] >= t[:-1]))
        need = self.n + len(rows)
        if need > len(self._a):
            grown = np.empty((max(need, 2 * len(self._a)), self._a.shape[1]), np.int64)
            grown[: self.n] = self._a[: self.n]
            self._a = grown
        self._a[self.n : need] = rows
        self.n = need

    @property
    def rows(self) -> np.ndarray:
        return self._a[: self.n]

    def by_time(self, last: Optional[int] = None) -> np.ndarray:
        """The rows in time order (the `last` ones only): no sort while they arrived in order."""
        rows = self.rows if self.ordered else self.rows[np.argsort(self.rows[:, 0], kind="stable")]
        return rows if last is None else rows[max(len(rows) - last, 0) :]

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where `mask`."""
        rest = self._a[: self.n][mask]
        self._a[: len(rest)] = rest
        self.n = len(rest)
        self.ordered = bool(np.all(rest[1:, 0] >= rest[:-1, 0]))


@dataclass
class FileState:
    """One raw file being followed: its open descriptor, and its `RawFile` (the walk's place in it,
    what its chunks said and what was wrong with them)."""

    path: Path
    rank: int
    inode: int
    raw: RawFile
    fd: int = -1
    grew_at: float = 0.0  # time.monotonic() when it last grew
    crc_retries: int = 0  # polls that ended on a checksum mismatch at the end of the file

    @property
    def pending(self) -> int:
        """Bytes after the last whole chunk: a chunk still being written (or a torn tail)."""
        return max(self.raw.size - self.raw.offset, 0)

    @property
    def meta(self) -> Optional[dict]:
        return self.raw.meta

    @property
    def end(self) -> Optional[dict]:
        return self.raw.end

    @property
    def pid(self) -> int:
        return int((self.meta or {}).get("pid", 0) or 0)


@dataclass
class RankState:
    """Everything the follower holds for one rank."""

    rank: int
    files: dict = field(default_factory=dict)  # path -> FileState
    reader: TableReader = field(default_factory=TableReader)
    kind_code: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    steps: _Grow = field(default_factory=lambda: _Grow(4))  # t, code, step, cost (every step sample)
    windows: _Grow = field(default_factory=lambda: _Grow(5))  # window start / stop samples, + thread
    counters: _Grow = field(default_factory=lambda: _Grow(4))  # recent counter samples
    events: collections.deque = field(default_factory=collections.deque)  # (t_last, t, records (n, 2), thread)
    samples: collections.deque = field(default_factory=collections.deque)  # (t_last, rows (n, 4), thread)
    held_events: int = 0
    held_samples: int = 0
    evicted_until: Optional[int] = None  # the newest time of a dropped chunk: the held data is whole after it
    events_read: int = 0  # every event ever ingested (the benchmark's rate)
    samples_read: int = 0

    @property
    def meta(self) -> Optional[dict]:
        return self.reader.meta

    @property
    def descriptors(self) -> list:
        return self.reader.descriptors

    @property
    def sources(self) -> dict:
        return self.reader.sources

    @property
    def dropped(self) -> int:
        return self.reader.dropped

    @property
    def torn_chunks(self) -> int:
        return self.reader.torn_chunks

    @property
    def warnings(self) -> list[str]:
        """What was said about the rank's files (damage, copies, bad entries), as the batch reader says it."""
        return self.reader.warnings()

    @property
    def ended(self) -> bool:
        """Every file of the rank has its end chunk."""
        return bool(self.files) and all(f.end is not None for f in self.files.values())

    @property
    def world_size(self) -> int:
        return int((self.meta or {}).get("world_size", 1) or 1)

    @property
    def origin_ns(self) -> int:
        return int(self.meta["clock"]["origin_monotonic_ns"]) if self.meta else 0

    @property
    def step_count(self) -> int:
        return self.steps.n

    def window_starts(self) -> np.ndarray:
        """The times of every recording window's start (the schedule's), in order."""
        w = self.windows.by_time()
        return w[self.kind_code[w[:, 1] >> 1] == _WSTART, 0] if len(w) else np.empty(0, np.int64)

    def code_of(self, kind: str, name: str, extra: str = "") -> Optional[int]:
        d = self.reader.ids.get((kind, name, extra))
        return None if d is None else 2 * d


@dataclass
class PollResult:
    """What one poll read."""

    bytes_read: int = 0
    events: int = 0
    samples: int = 0
    new_steps: int = 0
    reset_ranks: list = field(default_factory=list)  # ranks whose recording was replaced (files moved away)


class Follower:
    """Follows the raw store of `directory` (see the module doc). `since` (a Unix time): leave out
    raw files last written before it (an earlier recording in the directory of one about to start)."""

    def __init__(
        self,
        directory,
        keep_steps: int = 200,
        max_events: int = 2_000_000,
        trend_s: float = 600.0,
        stale_after_s: float = 3.0,
        since: Optional[float] = None,
    ) -> None:
        self.directory = Path(directory)
        self.keep_steps = int(keep_steps)
        self.max_events = int(max_events)
        self.trend_ns = int(trend_s * 1e9)
        self.stale_after_s = stale_after_s
        self.ranks: dict[int, RankState] = {}
        self.since = since
        self._ignored: set[tuple[str, int]] = set()
        self.host = socket.gethostname()

    # ---- polling ---------------------------------------------------------------------------

    def _listing(self) -> dict[tuple[str, int], Path]:
        """(name, inode) -> path of every raw file directly in raw/ (not raw/previous/)."""
        raw = self.directory / "raw"
        out = {}
        try:
            with os.scandir(raw) as it:
                for entry in it:
                    if entry.name.endswith(RAW_SUFFIX) and entry.is_file():
                        out[(entry.name, entry.inode())] = Path(entry.path)
        except (FileNotFoundError, NotADirectoryError):
            pass
        return out

    def poll(self) -> PollResult:
        """Read what was appended since the last poll."""
        result = PollResult()
        listing = self._listing()
        present = set(listing)
        listing = {k: p for k, p in listing.items() if k not in self._ignored}
        for rank, state in list(self.ranks.items()):  # a file moved away: a new recording of the rank
            if any((f.path.name, f.inode) not in present for f in state.files.values()):
                self._close_rank(state)
                del self.ranks[rank]
                result.reset_ranks.append(rank)
        known = {(f.path.name, f.inode) for s in self.ranks.values() for f in s.files.values()}
        for key, path in sorted(listing.items()):
            if key in known:
                continue
            rank = _rank_of(path.name)
            if rank is None or self._stale(key, path):
                continue
            state = self.ranks.setdefault(rank, RankState(rank))
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            f = state.files[path] = FileState(path, rank, key[1], RawFile(path), fd=fd, grew_at=time.monotonic())
            state.reader.add_file(f.raw)
        for state in self.ranks.values():
            before = state.steps.n
            for f in state.files.values():
                self._read_file(state, f, result)
            result.new_steps += state.steps.n - before
            self._evict(state)
        return result

    def _stale(self, key: tuple[str, int], path: Path) -> bool:
        """A file of an earlier recording (written before `since`): ignored from now on."""
        if self.since is None:
            return False
        try:
            old = path.stat().st_mtime < self.since
        except OSError:
            return True
        if old:
            self._ignored.add(key)
        return old

    def _read_file(self, state: RankState, f: FileState, result: PollResult) -> None:
        try:
            size = os.fstat(f.fd).st_size
        except OSError:
            return
        now = time.monotonic()
        if size > f.raw.size:
            f.grew_at = now
        f.raw.size = size
        start = f.raw.offset
        if size <= start:
            return
        final = self._tail_is_final(f, now)
        wanted = f.raw.wanted if f.raw.waiting == SHORT else 0  # a chunk longer than READ_LIMIT
        data = os.pread(f.fd, min(size, max(start + READ_LIMIT, wanted)) - start, start)
        result.bytes_read += len(data)
        if start == 0 and len(data) >= len(MAGIC) and not data.startswith(MAGIC):
            raise ProfviewError(f"{f.path} is not a profview raw file (it does not start with a chunk)")
        for chunk in f.raw.walk(data, start, final=final and start + len(data) >= size):
            self._ingest(state, f, chunk, result)
        f.crc_retries = f.crc_retries + 1 if f.raw.waiting == CHECKSUM else 0

    def _tail_is_final(self, f: FileState, now: float) -> bool:
        """Whether the bytes after the last whole chunk of `f` are all there will be: its writer is
        gone (exited, or unknown and quiet for UNKNOWN_WRITER_S) and it has not grown for
        `stale_after_s`; or a checksum failing at its end was retried CRC_RETRIES polls, or came
        after the end chunk."""
        if f.raw.waiting == CHECKSUM and (f.crc_retries >= CRC_RETRIES or f.end is not None):
            return True
        alive = self.writer_alive(f)
        quiet = now - f.grew_at
        return not alive and quiet >= self.stale_after_s and (alive is False or quiet >= UNKNOWN_WRITER_S)

    def writer_alive(self, f: FileState) -> Optional[bool]:
        """Whether the process writing `f` still runs (None: unknown, e.g. it runs on another host)."""
        if f.end is not None:
            return False
        meta = f.meta or {}
        if not f.pid or meta.get("host", self.host) != self.host:
            return None
        try:
            os.kill(f.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    # ---- chunks ----------------------------------------------------------------------------

    def _ingest(self, state: RankState, f: FileState, chunk, result: PollResult) -> None:
        """Take one whole chunk in through the rank's TableReader (its checks, its damage sentences);
        keep its records."""
        reader = state.reader
        if not reader.unique(f.raw, chunk):
            return
        records = reader.take(f.raw, chunk)
        if len(reader.descriptors) != len(state.kind_code):
            state.kind_code = np.array([_KIND_CODE.get(k, _OTHER) for k, _, _ in reader.descriptors], np.int8)
        if records is None:
            return
        n = len(records.words)
        if records.table == "events":
            state.events.append((records.t_max, records.words[:, 0], records.words, records.thread))
            state.held_events += n
            state.events_read += n
            result.events += n
        else:
            self._keep_samples(state, records)
            state.samples_read += n
            result.samples += n

    def _keep_samples(self, state: RankState, records: Records) -> None:
        rows, thread = records.words, records.thread
        kind = state.kind_code[rows[:, 1] >> 1]
        steps = kind == _STEP
        if steps.any():
            state.steps.add(rows[steps])
        win = (kind == _WSTART) | (kind == _WSTOP)
        if win.any():
            state.windows.add(np.column_stack([rows[win], np.full(int(win.sum()), thread, np.int64)]))
        counters = kind == _COUNTER
        if counters.any():
            state.counters.add(rows[counters])
        state.samples.append((records.t_max, rows, thread))
        state.held_samples += len(rows)

    def _evict(self, state: RankState) -> None:
        """Drop the chunks older than the last `keep_steps` steps, and the oldest beyond `max_events`
        events (and a quarter as many samples)."""
        horizon = None
        if state.steps.n > self.keep_steps:
            horizon = int(state.steps.by_time(self.keep_steps + 1)[0, 0])
        events, samples = state.events, state.samples
        while events and (
            (horizon is not None and events[0][0] < horizon) or state.held_events - len(events[0][1]) >= self.max_events
        ):
            t_last, t, _, _ = events.popleft()
            state.held_events -= len(t)
            state.evicted_until = max(t_last, state.evicted_until or t_last)
        while samples and (
            (horizon is not None and samples[0][0] < horizon)
            or state.held_samples - len(samples[0][1]) >= self.max_events // 4
        ):
            t_last, rows, _ = samples.popleft()
            state.held_samples -= len(rows)
            state.evicted_until = max(t_last, state.evicted_until or t_last)
        if state.counters.n:
            t = state.counters.rows[:, 0]
            old = t < int(t.max()) - self.trend_ns
            if old.any():
                state.counters.keep(~old)

    def _close_rank(self, state: RankState) -> None:
        for f in state.files.values():
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1

    def close(self) -> None:
        for state in self.ranks.values():
            self._close_rank(state)

    def __enter__(self) -> Follower:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- state -----------------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return max([s.world_size for s in self.ranks.values()] or [0])

    @property
    def finished(self) -> bool:
        """Every rank of the job has written its end chunk and nothing is left to read."""
        return (
            bool(self.ranks)
            and len(self.ranks) >= self.world_size
            and all(s.ended and not any(f.pending for f in s.files.values()) for s in self.ranks.values())
        )

    def gone(self) -> list[int]:
        """Ranks whose every writer has exited without an end chunk (killed): nothing more will come."""
        out = []
        for rank, s in self.ranks.items():
            stopped = [self._writer_stopped(f) for f in s.files.values() if f.end is None]
            if stopped and all(stopped):
                out.append(rank)
        return out

    def _writer_stopped(self, f: FileState) -> bool:
        """The writer of `f` has exited, or it cannot be checked and `f` has not grown for UNKNOWN_WRITER_S."""
        alive = self.writer_alive(f)
        return alive is False or (alive is None and time.monotonic() - f.grew_at >= UNKNOWN_WRITER_S)

    # ---- windows ---------------------------------------------------------------------------

    def window(self, rank: int, steps: int, max_events: Optional[int] = None) -> Optional[RawTables]:
        """The last `steps` whole steps of `rank` (fewer when the held events do not reach back that
        far, or when more than `max_events` events would be in them) as RawTables; None before the
        rank's metadata or first step arrived."""
        state = self.ranks.get(rank)
        if state is None or state.meta is None or not state.descriptors or state.steps.n == 0:
            return None
        st = state.steps.by_time()
        cut = self._cut(state, st, steps, max_events)
        parts = []
        for t_last, t, words, thread in state.events:
            if cut is not None and t_last < cut:
                continue
            i = int(np.searchsorted(t, cut, side="left")) if cut is not None else 0
            if i < len(t):
                parts.append((words[i:], thread))
        parts.sort(key=lambda part: int(part[0][0, 0]))  # recording order per reused thread ident (load.py)
        sm, sm_thread = [], []
        for t_last, rows, thread in state.samples:
            if cut is not None and t_last < cut:
                continue
            kind = state.kind_code[rows[:, 1] >> 1]
            keep = (kind != _WSTART) & (kind != _WSTOP)
            if cut is not None:
                keep &= rows[:, 0] > cut  # a step sample at the cut ends the step before
            if keep.any():
                sm.append(rows[keep])
                sm_thread.append(np.full(int(keep.sum()), thread, np.int64))
        wins, win_thread = self._window_samples(state, st, cut)
        sm.append(wins)
        sm_thread.append(win_thread)
        files = list(state.files.values())
        end = (
            files[0].end
            if len(files) == 1
            else (
                {"stopped_cleanly": all(bool((f.end or {}).get("stopped_cleanly")) for f in files)}
                if state.ended
                else None
            )
        )
        reader = state.reader
        torn, damaged, lost = reader.damage()
        return RawTables(
            meta=reader.meta,
            descriptors=list(reader.descriptors),
            thread_names=dict(reader.thread_names),
            events=[p[0] for p in parts],
            ev_chunk_thread=np.array([p[1] for p in parts], np.int64),
            sm=np.concatenate(sm),
            sm_thread=np.concatenate(sm_thread),
            sources=dict(reader.sources),
            end=end if state.ended else None,
            dropped=reader.dropped,
            torn_chunks=torn,
            damaged=damaged,
            lost_records=lost,
            duplicate_chunks=reader.duplicate_chunks,
            warnings=reader.warnings(),
            files=[str(f.path) for f in files],
        )

    def _cut(self, state: RankState, st: np.ndarray, steps: int, max_events: Optional[int]) -> Optional[int]:
        """The step end the window starts at (None: from the start of the recording): `steps` steps
        back, moved later to where the held data is whole and to at most `max_events` events."""
        ends = st[:, 0]
        cut = int(ends[-steps - 1]) if len(ends) > steps else None
        floor = state.evicted_until
        if max_events is not None and state.held_events > max_events:
            chunks, n, i = list(state.events), 0, 0
            for i in range(len(chunks) - 1, -1, -1):
                n += len(chunks[i][1])
                if n >= max_events:
                    break
            if i > 0:
                newest_left_out = max(c[0] for c in chunks[:i])
                floor = newest_left_out if floor is None else max(floor, newest_left_out)
        if floor is not None and (cut is None or cut < floor):
            i = int(np.searchsorted(ends, floor, side="left"))
            cut = int(ends[min(i, len(ends) - 1)])
        if cut is not None and cut >= int(ends[-1]):  # keep at least the last step
            cut = int(ends[-2]) if len(ends) > 1 else None
        return cut

    def _window_samples(self, state: RankState, st: np.ndarray, cut: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
        """The recording windows inside [cut, ...): real start / stop samples after the cut, and a start
        at the cut when it falls inside a recording window (the window the schedule had open then)."""
        w = state.windows.by_time()
        if cut is None:
            return w[:, :4].copy(), w[:, 4].copy()
        kind = state.kind_code[w[:, 1] >> 1]
        before = w[:, 0] <= cut
        starts, stops = w[before & (kind == _WSTART)], w[before & (kind == _WSTOP)]
        open_at_cut = len(starts) > 0 and (not len(stops) or stops[-1, 0] < starts[-1, 0])
        out = w[~before]
        if open_at_cut:
            first = st[st[:, 0] > cut][:1, 2]
            start = starts[-1].copy()
            start[0], start[2], start[3] = cut, int(first[0]) if len(first) else 0, 0
            out = np.concatenate([start[None, :], out])
        return out[:, :4].copy(), out[:, 4].copy()


def _rank_of(name: str) -> Optional[int]:
    head = name.split("-", 1)[0]
    return int(head[1:]) if head[:1] == "r" and head[1:].isdigit() else None

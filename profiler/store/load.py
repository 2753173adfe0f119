"""Turn one rank's raw store into a `Run` (vectorised: no Python loop per event).

Events arrive as per-thread (t, code) pairs; code // 2 is a descriptor id, code % 2 says begin
or end. This module finds a rank's raw files, reads them (`raw.read_raw_file`), has their chunks
checked and de-duplicated by the rank's `tables.TableReader` (the reader `follow.py` uses too), and
concatenates the records; `interpret.py` gives them meaning.

What a damaged store costs (docs/architecture.md, "The raw store"): a chunk that cannot be used
costs its own records and nothing else, and is reported (file, chunk index, byte offset, records
lost); a file that cannot be read (not a regular file, a broken symlink) is skipped with a
warning; the same recording stored twice (a copied file, a repeated chunk) is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from profiler.errors import ProfviewError
from profiler.kernels.intervals import place
from profiler.store import kinds
from profiler.store.raw import RawFile, _read_bytes, find_raw_files, rank_of_name, read_raw_file
from profiler.store.tables import TableReader, clean_meta, json_or_none

INT64_MAX = np.iinfo(np.int64).max
RECORD_TABLES = ("events", "samples")


@dataclass
class RawTables:
    """One rank's raw files as tables, before interpretation: its events chunks (views of the mapped
    files), its samples concatenated, the descriptor table, and what was read and lost."""

    meta: dict
    descriptors: list[tuple[str, str, str]]
    thread_names: dict[int, str]  # ident -> name
    events: list[np.ndarray]  # each events chunk's (time, code) records, (n, 2) int64
    ev_chunk_thread: np.ndarray  # thread ident of each events chunk (a chunk is one thread's)
    sm: np.ndarray  # samples, shape (n, 4): t, code, a, b
    sm_thread: np.ndarray
    sources: dict = field(default_factory=dict)
    end: Optional[dict] = None
    dropped: int = 0
    torn_chunks: int = 0  # damaged chunks (torn by a kill, or corrupt)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    damaged: list[dict] = field(default_factory=list)  # Damage.to_json() of each damaged chunk
    lost_records: int = 0  # records in damaged chunks or naming lost descriptors
    duplicate_chunks: int = 0  # chunks stored twice (copied files, repeated chunks)

    @property
    def n_events(self) -> int:
        return sum(len(c) for c in self.events)

    @property
    def records(self) -> int:
        """Events and samples."""
        return self.n_events + len(self.sm)


@dataclass(frozen=True)
class Recording:
    """One rank's recording as the analysis finds it: where it is, and its raw tables."""

    directory: Path
    rank: int
    tables: RawTables


# ---- finding a rank's files ------------------------------------------------------------------


@dataclass
class RawStore:
    """The raw files of a directory by rank, and what was wrong with the entries that were skipped."""

    directory: Path
    files: dict[int, list[Path]] = field(default_factory=dict)
    notes: dict[int, list[str]] = field(default_factory=dict)  # rank -> warnings about its entries
    orphans: list[str] = field(default_factory=list)  # warnings about entries of no rank

    @property
    def ranks(self) -> list[int]:
        return sorted(self.files)

    def warnings_for(self, rank: int) -> list[str]:
        return self.notes.get(rank, []) + self.orphans

    def skipped(self) -> list[str]:
        return [n for notes in self.notes.values() for n in notes] + self.orphans


def _peek_rank(path: Path) -> tuple[Optional[int], str]:
    """The rank a raw file's metadata chunk names (None when it has none), or why it cannot be read."""
    report = RawFile(path)
    data = _read_bytes(path, report, populate=False)  # only the first chunks are read
    if data is None:
        return None, report.unreadable
    try:
        for chunk in report.walk(data):
            if chunk.table == "meta":
                meta = clean_meta(json_or_none(chunk), [], "")
                if meta is not None and type(meta.get("rank")) is int and 0 <= meta["rank"] < 1 << 31:
                    return int(meta["rank"]), ""
                return None, ""
    except ProfviewError:  # a newer format: reading the file says so
        pass
    return None, ""


def scan_raw_store(directory: Path) -> RawStore:
    """Every *.pvraw entry of `directory/raw`, by the rank its metadata chunk names (the file name's
    rank when it has no readable metadata). Entries that cannot be read are noted and skipped."""
    store = RawStore(Path(directory))
    for path in find_raw_files(Path(directory)):
        name_rank = rank_of_name(path.name)
        meta_rank, why = _peek_rank(path)
        if why:
            note = f"{path} {why}: skipped"
            (store.notes.setdefault(name_rank, []) if name_rank is not None else store.orphans).append(note)
            continue
        rank = meta_rank if meta_rank is not None else name_rank
        if rank is None:
            store.orphans.append(
                f"{path} is not named r<rank>-p<pid>.pvraw and has no readable metadata chunk naming its rank: skipped"
            )
            continue
        if name_rank is not None and meta_rank is not None and name_rank != meta_rank:
            store.notes.setdefault(rank, []).append(
                f"{path} is named for rank {name_rank} but holds a recording of rank {meta_rank} (its metadata "
                f"chunk says so): analysed as rank {meta_rank}"
            )
        store.files.setdefault(rank, []).append(path)
    return store


def rank_raw_files(directory: Path, rank: int) -> list[Path]:
    return scan_raw_store(directory).files.get(rank, [])


def raw_ranks(directory: Path) -> list[int]:
    """Ranks that have readable raw files in `directory/raw`."""
    return scan_raw_store(directory).ranks


# ---- reading a rank ------------------------------------------------------------------------


def read_raw_tables(
    paths: list[Path],
    progress: Optional[Callable[[int, int], None]] = None,
    rank: Optional[int] = None,
    notes: Optional[list[str]] = None,
) -> RawTables:
    """The raw tables of one rank, from its raw files (several processes may share a rank).

    `notes` are warnings about this rank's entries that were skipped before reading (scan_raw_store).
    Raises ProfviewError (one sentence) only when nothing of the rank can be read."""
    files = []
    for i, p in enumerate(paths):
        files.append(read_raw_file(p))
        if progress:
            progress(i + 1, len(paths))
    reader = TableReader()
    for i, f in enumerate(files):  # files with the same metadata chunk hold one recording
        meta = next((c for c in f.chunks if c.table == "meta" and clean_meta(json_or_none(c), [], "")), None)
        reader.add_file(f, ("meta", meta.key) if meta is not None else ("file", i))
    chunks = [(f, c) for rec in reader.recordings for f in rec.files for c in f.chunks if reader.unique(f, c)]
    for f, c in chunks:  # the tables first: records may precede their descriptors
        if c.table not in RECORD_TABLES:
            reader.take(f, c)
    ev_parts, sm_parts = [], []
    for f, c in chunks:
        if c.table in RECORD_TABLES:
            records = reader.take(f, c)
            if records is not None:
                (ev_parts if records.table == "events" else sm_parts).append(records)
    # Chunks in order of their first event: a thread's own chunks already are, but Python reuses the
    # ident of a finished thread, and the finished thread's last chunk can reach the file after the
    # new thread's first one. Nesting pairs events in recording order per ident, so order them here.
    # The chunks stay views of the memory-mapped files: the events are never copied.
    ev_parts.sort(key=lambda part: int(part.words[0, 0]))
    tables = RawTables(
        meta={},
        descriptors=reader.descriptors,
        thread_names=reader.thread_names,
        events=[p.words for p in ev_parts],
        ev_chunk_thread=np.array([p.thread for p in ev_parts], dtype=np.int64),
        sm=np.empty((0, 4), np.int64),
        sm_thread=np.empty(0, np.int64),
        sources=reader.sources,
        end=reader.end,
        dropped=reader.dropped,
        duplicate_chunks=reader.duplicate_chunks,
    )
    tables.torn_chunks, tables.damaged, tables.lost_records = reader.damage()
    if sm_parts:
        tables.sm = np.concatenate([p.words for p in sm_parts])
        tables.sm_thread = np.concatenate([np.full(len(p.words), p.thread, np.int64) for p in sm_parts])
    tables.files = [str(p) for p in paths]
    tables.warnings = list(notes or []) + reader.warnings()
    if reader.meta is not None:
        tables.meta = reader.meta
    elif tables.records:
        first = min(p.t_min for p in ev_parts + sm_parts)
        tables.meta = {
            "rank": rank if rank is not None else 0,
            "clock": {"origin_monotonic_ns": first, "origin_unix_ns": 0},
        }
        tables.warnings.append(
            "the metadata chunk of this rank's recording is missing or damaged: times are "
            "counted from the first record, wall-clock times and the recording's settings "
            "are unknown"
        )
    else:
        raise ProfviewError(_nothing_readable(paths, files, tables.warnings))
    _drop_before_origin(tables, [p.t_min for p in ev_parts])
    _repair_windows(tables)
    return tables


def _drop_before_origin(t: RawTables, ev_t_min: list[int]) -> None:
    """Records timed before the recording's origin cannot be (every record is taken after it): a
    damaged time. They are left out and counted, so no output holds a time before the recording.
    `ev_t_min`: the earliest time of each events chunk."""
    origin = int(t.meta["clock"]["origin_monotonic_ns"])
    early_sm = t.sm[:, 0] < origin
    n = int(early_sm.sum())
    if any(t_min < origin for t_min in ev_t_min):
        kept = [c[c[:, 0] >= origin] if t_min < origin else c for c, t_min in zip(t.events, ev_t_min)]
        n += t.n_events - sum(len(c) for c in kept)
        t.ev_chunk_thread = t.ev_chunk_thread[[len(c) > 0 for c in kept]]
        t.events = [c for c in kept if len(c)]
    if not n:
        return
    if early_sm.any():
        t.sm, t.sm_thread = t.sm[~early_sm], t.sm_thread[~early_sm]
    t.lost_records += n
    t.warnings.append(f"{n:,} records are timed before the recording started (damaged times): they were left out")


def _nothing_readable(paths: list[Path], files: list[RawFile], warnings: list[str]) -> str:
    names = ", ".join(str(p) for p in paths)
    unreadable = [f"{f.path} {f.unreadable}" for f in files if f.unreadable]
    if unreadable and len(unreadable) == len(files):
        return f"no raw file of this rank can be read: {'; '.join(unreadable)}"
    damaged = sum(f.torn_chunks for f in files)
    why = f" ({damaged} damaged chunk(s) skipped)" if damaged else ""
    return (
        f"the raw store {names} has no metadata chunk and no readable record{why}: it is not a profview "
        "recording or was cut short at its start"
    )


def _repair_windows(t: RawTables) -> None:
    """Recording windows whose start was lost (its sample sat in a damaged chunk, or the memory
    budget dropped it) get one back, at the first record after the previous window's end, so the
    loss costs that sample and not the whole window. A window whose end was lost ends where the
    next one starts (windows_from_samples)."""
    if not t.records:
        return
    kind_of = descriptor_columns(t.descriptors)[0]
    k = kind_of[t.sm[:, 1] >> 1] if len(t.sm) else np.empty(0, dtype=object)
    starts = np.sort(t.sm[k == kinds.WINDOW_START, 0])
    stops = np.sort(t.sm[k == kinds.WINDOW_STOP, 0])
    other_sm = t.sm[(k != kinds.WINDOW_START) & (k != kinds.WINDOW_STOP), 0]

    def first_record(after: int, until: int) -> Optional[int]:
        best = None
        for times in [c[:, 0] for c in t.events] + [other_sm]:
            sel = times[(times > after) & (times <= until)]
            if len(sel):
                best = int(sel.min()) if best is None else min(best, int(sel.min()))
        return best

    added, lost_stops = [], 0
    prev_stop = -(1 << 63)
    for stop in stops:
        opened = starts[(starts > prev_stop) & (starts <= stop)]
        if not len(opened):
            at = first_record(prev_stop, int(stop))
            if at is not None:
                added.append(at)
        elif len(opened) > 1:
            lost_stops += len(opened) - 1
        prev_stop = int(stop)
    if not len(starts) and not len(stops):
        at = first_record(-(1 << 63), INT64_MAX)
        if at is not None:
            added.append(at)
    if added:
        code = 2 * _descriptor_id(t, (kinds.WINDOW_START, "window", ""))
        thread = int(t.sm_thread[0]) if len(t.sm_thread) else int(t.ev_chunk_thread[0])
        extra = np.array([[at, code, -1, 0] for at in added], dtype=np.int64)
        t.sm = np.concatenate([t.sm, extra])
        t.sm_thread = np.concatenate([t.sm_thread, np.full(len(added), thread, np.int64)])
        t.warnings.append(
            f"{len(added)} recording-window start(s) were lost (a damaged chunk or the memory budget "
            "took them): each such window is taken to start at its first record"
        )
    if lost_stops:
        t.warnings.append(
            f"{lost_stops} recording-window end(s) were lost: each such window is taken to end "
            "where the next one starts"
        )


def _descriptor_id(t: RawTables, key: tuple[str, str, str]) -> int:
    try:
        return t.descriptors.index(key)
    except ValueError:
        t.descriptors.append(key)
        return len(t.descriptors) - 1


# ---- interpretation ------------------------------------------------------------------------


def descriptor_columns(descriptors: list[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kind, name and extra of every descriptor id, as arrays indexable by id."""
    if not descriptors:
        e = np.empty(0, dtype=object)
        return e, e, e
    arr = np.array(descriptors, dtype=object).reshape(-1, 3)
    return arr[:, 0], arr[:, 1], arr[:, 2]


def windows_from_samples(sm: np.ndarray, kind_of: np.ndarray) -> pd.DataFrame:
    """Recording windows [start_ns, stop_ns) with their first step, from window_start / window_stop
    samples. A window ends at the first stop after its start, or where the next window starts when
    its stop was lost."""
    k = kind_of[sm[:, 1] >> 1] if len(sm) else np.empty(0, dtype=object)
    starts = sm[k == kinds.WINDOW_START]
    stops = sm[k == kinds.WINDOW_STOP]
    starts = starts[np.argsort(starts[:, 0], kind="stable")]
    stops = stops[np.argsort(stops[:, 0], kind="stable")]
    stop_t = np.full(len(starts), INT64_MAX, dtype=np.int64)
    if len(stops) and len(starts):
        idx = np.searchsorted(stops[:, 0], starts[:, 0], side="left")
        ok = idx < len(stops)
        stop_t[ok] = stops[idx[ok], 0]
    if len(starts) > 1:
        stop_t[:-1] = np.minimum(stop_t[:-1], starts[1:, 0])
    return pd.DataFrame({"start_ns": starts[:, 0], "stop_ns": stop_t, "first_step": starts[:, 2]})


def window_of(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Index of the window [start, stop] containing each time (int32), -1 when outside every window."""
    return place(
        t,
        windows["start_ns"].to_numpy(dtype=np.int64),
        windows["stop_ns"].to_numpy(dtype=np.int64),
        np.arange(len(windows), dtype=np.int32),
        end_inclusive=True,
    )

"""Turn one rank's raw store into a `Run` (vectorised: no Python loop per event).

Events arrive as per-thread (t, code) pairs; code // 2 is a descriptor id, code % 2 says begin
or end. This module finds a rank's raw files, reads them (`raw.read_raw_file`), has their chunks
checked and de-duplicated by the rank's `tables.TableReader` (the reader `follow.py` uses too),
concatenates the records into `tables.RawTables` and has lost window bounds repaired (`windows.py`);
`interpret.py` gives them meaning. One module per stage, for both readers: chunks `raw.py`, their
contents and damage `tables.py`, recording windows `windows.py`.

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

from profiler.errors import ProfviewError
from profiler.store.raw import RawFile, _read_bytes, find_raw_files, rank_of_name, read_raw_file
from profiler.store.tables import RawTables, TableReader, clean_meta, json_or_none
from profiler.store.windows import repair_windows

RECORD_TABLES = ("events", "samples")


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
    repair_windows(tables)
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

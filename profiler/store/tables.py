"""What the chunks of one rank's raw files say: the one reader of chunk contents, for the batch
reader (`load.py`) and the follower of a growing store (`follow.py`).

`TableReader.take(file, chunk)` checks one whole chunk's content and adds it to the rank's tables:
metadata, descriptors (each recording's file-local ids placed by the chunk's `first` and mapped to
one table for the rank), thread names, source status, the end chunk. An events or samples chunk
comes back as `Records`, its codes rewritten to the rank's descriptor ids. `unique(file, chunk)`
says whether a chunk is the first copy of itself in its recording (files with the same metadata
chunk hold the same recording). Whatever cannot be used is said through the file's `RawFile`
(docs/architecture.md, "What a damaged store costs"), so both readers say the same thing, in the
same words, for the same damage:

- content that is not what its table holds costs its chunk: a `Damage` with its records counted;
- a bad entry costs that entry (a descriptor, a thread name, a metadata field): a warning;
- records naming descriptors no readable descriptors chunk defines are left out and counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from profiler.kernels.columns import ranges
from profiler.store.raw import Chunk, RawFile

#: damaged chunks listed one by one in profiler_info (the count is always complete)
MAX_DAMAGE_LISTED = 50


@dataclass
class Records:
    """The records of one events (t, code) or samples (t, code, a, b) chunk, codes in the rank's ids."""

    table: str
    words: np.ndarray  # (n, 2) or (n, 4) int64
    thread: int
    t_min: int  # the earliest and latest time
    t_max: int


class TableReader:
    """The tables of one rank, built from whole chunks of its raw files (see the module doc)."""

    def __init__(self) -> None:
        self.files: list[RawFile] = []
        self.descriptors: list[tuple[str, str, str]] = []
        self.ids: dict[tuple[str, str, str], int] = {}
        self.metas: list[dict] = []
        self.thread_names: dict[int, str] = {}
        self.sources: dict = {}
        self.end: Optional[dict] = None  # the last end-of-recording chunk read
        self.dropped = 0  # records the recorder dropped (events chunks' counts)
        self.lost_records = 0  # records naming unknown descriptors
        self.recordings: list[_Recording] = []
        self._by_identity: dict[Any, _Recording] = {}
        self._of_file: dict[int, _Recording] = {}  # id(file) -> its recording

    # ---- files and copies ----------------------------------------------------------------------

    def add_file(self, f: RawFile, identity: Any = None) -> None:
        """A raw file of the rank. `identity`: the key of its metadata chunk, when known before its
        chunks are taken (files with the same one are copies of one recording); else the file's
        recording is decided by its first chunk (`unique` / `take`)."""
        self.files.append(f)
        if identity is not None:
            self._join(f, identity)

    def _join(self, f: RawFile, identity: Any) -> _Recording:
        rec = self._by_identity.get(identity)
        if rec is None:
            rec = self._by_identity[identity] = _Recording()
            self.recordings.append(rec)
        rec.files.append(f)
        self._of_file[id(f)] = rec
        return rec

    def recording_of(self, f: RawFile, first: Optional[Chunk] = None) -> _Recording:
        """The recording `f` holds: decided by its metadata chunk when `first` (its first whole
        chunk) is one, else the file is a recording of its own."""
        rec = self._of_file.get(id(f))
        if rec is None:
            meta = first is not None and first.table == "meta" and clean_meta(json_or_none(first), [], "")
            rec = self._join(f, ("meta", first.key) if meta else ("file", id(f)))
        return rec

    def unique(self, f: RawFile, chunk: Chunk) -> bool:
        """Whether `chunk` is the first copy of itself in its recording; a repeat is counted on `f`,
        which has then what the first copy said of its metadata and end (its writer, its end)."""
        rec = self.recording_of(f, chunk)
        first = rec.seen.get(chunk.key)
        if first is None:
            rec.seen[chunk.key] = f
            return True
        other = str(first.path)
        f.repeats[other] = f.repeats.get(other, 0) + 1
        f.duplicates += 1
        if chunk.table == "meta":
            f.meta = f.meta or first.meta
        elif chunk.table == "end":
            f.end = first.end
        return False

    # ---- chunks --------------------------------------------------------------------------------

    def take(self, f: RawFile, c: Chunk) -> Optional[Records]:
        """Check one whole chunk's content and add it to the tables; an events / samples chunk's
        records come back (None when it holds none that can be used)."""
        rec = self.recording_of(f, c)
        t = c.table
        if t in ("events", "samples"):
            return self._records(f, c, rec)
        if t not in ("meta", "descriptors", "threads", "sources", "end"):
            return None
        obj = json_or_none(c)
        where = c.where(str(f.path))
        if t == "meta":
            found: list[str] = []
            meta = clean_meta(obj, found, where)
            f.warn(c.index, *found)
            if meta is None:
                f.damage(c, "its metadata is not a JSON object with a clock origin")
            else:
                self.metas.append(meta)
                f.meta = meta
        elif t == "descriptors":
            self._descriptors(f, c, rec, obj, where)
        elif t == "threads":
            if not isinstance(obj, list):
                f.damage(c, "its thread table is not a JSON list", records_lost=0)
                return None
            names, problem = thread_names(obj, where)
            self.thread_names.update(names)
            if problem:
                f.warn(c.index, problem)
        elif t == "sources":
            if not isinstance(obj, dict):
                f.damage(c, "its source table is not a JSON object", records_lost=0)
                return None
            self.sources.update({str(k): v for k, v in obj.items() if isinstance(v, dict)})
        else:
            end = clean_end(obj)
            if end is None:
                f.damage(c, "its end-of-recording record is not a JSON object", records_lost=0)
            else:
                self.end = f.end = end
        return None

    def _descriptors(self, f: RawFile, c: Chunk, rec: _Recording, obj: Any, where: str) -> None:
        """Place a descriptors chunk's entries at file-local ids first, first + 1, ... (the chunk's
        `first`), each mapped to the rank's id of its (kind, name, extra); an unreadable entry, or
        one contradicting an earlier chunk, costs the records naming it."""
        first = c.header.get("first", rec.next_local)
        if not isinstance(obj, list):
            f.damage(c, "its descriptors are not a JSON list", records_lost=0)
            return
        if not _is_int(first) or first < 0 or first + len(obj) > max(f.size, 1):
            f.damage(c, f"its first descriptor id is invalid (first = {first!r:.40})", records_lost=0)
            return
        bad = 0
        for k, d in enumerate(obj):
            if not (isinstance(d, list) and len(d) == 3 and all(isinstance(x, str) for x in d)):
                bad += 1
                rec.lut.setdefault(first + k, -1)
                continue
            key = (d[0], d[1], d[2])
            gid = self.ids.get(key)
            if gid is None:
                gid = self.ids[key] = len(self.descriptors)
                self.descriptors.append(key)
            old = rec.lut.get(first + k)
            if old is not None and old >= 0 and old != gid:
                bad += 1
                continue
            rec.lut[first + k] = gid
        rec.lut_array = None
        if bad:
            f.warn(
                c.index,
                f"{where}: {bad} descriptor(s) unreadable or contradicting an earlier chunk; records "
                "naming them are left out",
            )
        rec.next_local = max(rec.next_local, first + len(obj))

    def _records(self, f: RawFile, c: Chunk, rec: _Recording) -> Optional[Records]:
        width = 2 if c.table == "events" else 4
        problem = records_problem(c)
        if problem:
            f.damage(c, problem)
            return None
        if c.table == "events":
            dropped = c.header.get("dropped", 0)
            if _is_int(dropped) and dropped >= 0:
                self.dropped += dropped
            else:
                f.warn(
                    c.index, f"{c.where(str(f.path))}: its dropped count is invalid ({dropped!r:.40}) and was ignored"
                )
        words = np.frombuffer(c.payload, dtype="<i8").reshape(-1, width)
        if not len(words):
            return None
        words, lost, t_range = rec.remap(words)
        if lost:
            if not f.unknown:
                f.unknown = [0, 0, c.where(str(f.path))]
            f.unknown[0] += lost
            f.unknown[1] += 1
            self.lost_records += lost
        return Records(c.table, words, c.header["thread"], *t_range) if len(words) else None

    # ---- what was read -------------------------------------------------------------------------

    @property
    def meta(self) -> Optional[dict]:
        """The rank's metadata: of its recordings, the one that started first."""
        return min(self.metas, key=lambda m: m["clock"]["origin_monotonic_ns"]) if self.metas else None

    @property
    def duplicate_chunks(self) -> int:
        return sum(f.duplicates for f in self.files)

    @property
    def torn_chunks(self) -> int:
        return sum(f.torn_chunks for f in self.files)

    def damage(self) -> tuple[int, list[dict], int]:
        """What damage cost, as RawTables holds it: the damaged chunks, the first MAX_DAMAGE_LISTED of
        them described, and the records lost (in damaged chunks, or naming unknown descriptors)."""
        damaged = [d for f in self.files for d in f.damaged]
        lost = self.lost_records + sum(d.records_lost or 0 for d in damaged)
        return len(damaged), [d.to_json() for d in damaged[:MAX_DAMAGE_LISTED]], lost

    def warnings(self) -> list[str]:
        """Everything said about the rank's files, file by file (RawFile.sentences)."""
        return [w for f in self.files for w in f.sentences()]


class _Recording:
    """One recording's chunks (one process's raw file, and any copies of it): its file-local
    descriptor ids, and the chunks seen (for de-duplication)."""

    def __init__(self) -> None:
        self.files: list[RawFile] = []
        self.lut: dict[int, int] = {}  # file-local descriptor id -> the rank's id (-1: unreadable)
        self.lut_array: Optional[tuple[np.ndarray, bool, bool]] = None  # (lut, identity, complete), built once
        self.next_local = 0  # a descriptors chunk without `first` starts here
        self.seen: dict[tuple, RawFile] = {}  # chunk key -> the file of its first copy

    def remap(self, words: np.ndarray) -> tuple[np.ndarray, int, tuple[int, int]]:
        """Records with their codes in the rank's descriptor ids, how many named an unknown one (left
        out), and the range of their times."""
        if self.lut_array is None:
            size = max(self.lut) + 1 if self.lut else 0
            lut = np.full(size, -1, dtype=np.int64)
            for local, gid in self.lut.items():
                lut[local] = gid
            self.lut_array = lut, bool(size) and np.array_equal(lut, np.arange(size)), bool((lut >= 0).all())
        lut, identity, complete = self.lut_array
        lo, hi = ranges(words)  # one pass over the chunk: its times' and codes' ranges
        known = complete and len(lut) and lo[1] >= 0 and hi[1] < 2 * len(lut)
        if known and identity:  # the usual case: no copy, no per-record array
            return words, 0, (lo[0], hi[0])
        desc = words[:, 1] >> 1
        bad = None
        if not known:
            bad = (desc < 0) | (desc >= len(lut))
            if not complete:
                if not bad.any():
                    bad = lut[desc] < 0
                else:
                    bad[~bad] = lut[desc[~bad]] < 0
        lost = 0
        if bad is not None and bad.any():
            lost = int(bad.sum())
            words, desc = words[~bad], desc[~bad]
            lo, hi = ranges(words) or ((0, 0), (0, 0))
        if not identity and len(words):
            out = words.copy()
            out[:, 1] = (lut[desc] << 1) | (out[:, 1] & 1)
            words = out
        return words, lost, (lo[0], hi[0])


# ---- checking what the chunks say ------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return type(v) is int


def _int64(v: Any) -> bool:
    return _is_int(v) and -(1 << 63) <= v < (1 << 63)


def json_or_none(chunk: Chunk) -> Any:
    try:
        return chunk.json()
    except (ValueError, RecursionError):
        return None


def thread_names(obj: list, where: str) -> tuple[dict[int, str], str]:
    """A threads chunk's {ident: name}; an entry without a valid ident is left out, one without a
    valid name keeps a generic name. Also the warning to give ("" when every entry was valid)."""
    names, bad = {}, 0
    for th in obj:
        ident = th.get("ident") if isinstance(th, dict) else None
        if not _int64(ident):
            bad += 1
            continue
        name = th.get("name")
        if not isinstance(name, str):
            bad += 1
            name = f"thread-{ident}"
        names[ident] = name
    problem = (
        (
            f"{where}: {bad} thread entr{'y' if bad == 1 else 'ies'} without a valid ident or name (such "
            "threads keep a generic name)"
        )
        if bad
        else ""
    )
    return names, problem


def records_problem(chunk: Chunk) -> str:
    """Why an events / samples chunk cannot be read ("" when it can): its thread ident, its size."""
    width = 2 if chunk.table == "events" else 4
    thread = chunk.header.get("thread")
    if not _int64(thread):
        return f"its thread ident is invalid (thread = {thread!r:.40})"
    if len(chunk.payload) % (8 * width):
        return f"its payload ({len(chunk.payload)} bytes) is not a whole number of {8 * width}-byte records"
    return ""


def clean_meta(obj: Any, warnings: list[str], where: str) -> Optional[dict]:
    """A metadata chunk's object with every field the analysis reads of the right type, or None when
    its clock origin (which every time is relative to) is unusable. Bad optional fields are dropped."""
    if not isinstance(obj, dict):
        return None
    clock = obj.get("clock")
    if not isinstance(clock, dict) or not _int64(clock.get("origin_monotonic_ns")):
        return None
    meta = dict(obj)
    clock = dict(clock)
    if not _int64(clock.get("origin_unix_ns", 0)):
        clock["origin_unix_ns"] = 0
        warnings.append(f"{where}: the metadata's wall-clock origin is unreadable: wall-clock times are unknown")
    meta["clock"] = clock
    expected = {
        "rank": _is_int,
        "world_size": _is_int,
        "pid": _is_int,
        "host": lambda v: isinstance(v, str),
        "tool_version": lambda v: isinstance(v, str),
        "framework_versions": lambda v: isinstance(v, dict),
        "config": lambda v: isinstance(v, dict),
        "per_event_cost_ns": lambda v: (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        ),
    }
    bad = [k for k, ok in expected.items() if k in meta and not ok(meta[k])]
    for k in bad:
        del meta[k]
    if bad:
        warnings.append(f"{where}: metadata field(s) {', '.join(bad)} unreadable and ignored")
    return meta


def clean_end(obj: Any) -> Optional[dict]:
    """The end-of-recording chunk's object with the fields the analysis reads checked (None: unusable)."""
    if not isinstance(obj, dict):
        return None
    end = dict(obj)
    for key in ("dropped_events", "events_recorded", "samples_recorded", "write_errors", "steps", "buffer_peak_bytes"):
        if key in end and not (_is_int(end[key]) and end[key] >= 0):
            del end[key]
    if "stopped_cleanly" in end and not isinstance(end["stopped_cleanly"], bool):
        del end["stopped_cleanly"]
    flush = end.get("flush_ms")
    if flush is not None and not (
        isinstance(flush, (int, float)) and not isinstance(flush, bool) and math.isfinite(flush) and flush >= 0
    ):
        del end["flush_ms"]
    return end


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


def descriptor_columns(descriptors: list[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kind, name and extra of every descriptor id, as arrays indexable by id."""
    if not descriptors:
        e = np.empty(0, dtype=object)
        return e, e, e
    arr = np.array(descriptors, dtype=object).reshape(-1, 3)
    return arr[:, 0], arr[:, 1], arr[:, 2]

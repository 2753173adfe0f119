"""Turn one rank's raw store into a `Run` (vectorised: no Python loop per event).

Events arrive as per-thread (t, code) pairs; code // 2 is a descriptor id, code % 2 says begin
or end. This module finds a rank's raw files, reads and checks their chunks, removes copies, and
concatenates them; `interpret.py` gives them meaning.

What a damaged store costs (docs/architecture.md, "The raw store"): a chunk that cannot be used
costs its own records and nothing else, and is reported (file, chunk index, byte offset, records
lost); a file that cannot be read (not a regular file, a broken symlink) is skipped with a
warning; the same recording stored twice (a copied file, a repeated chunk) is counted once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler.kernels.intervals import place
from profiler.errors import ProfviewError
from profiler.store import kinds
from profiler.store.raw import Chunk, RawFile, find_raw_files, rank_of_name, read_raw_file, _read_bytes, iter_chunks

INT64_MAX = np.iinfo(np.int64).max
#: damaged chunks listed one by one in profiler_info (the count is always complete)
MAX_DAMAGE_LISTED = 50


@dataclass
class RawTables:
    """The concatenated columns of one rank's raw files, before interpretation."""

    meta: dict
    descriptors: list[tuple[str, str, str]]
    thread_names: dict[int, str]                  # ident -> name
    ev_t: np.ndarray                              # event times (ns, recording clock)
    ev_code: np.ndarray
    ev_chunk_thread: np.ndarray                   # thread ident of each events chunk, in order
    ev_chunk_len: np.ndarray                      # events in each chunk (a chunk is one thread's)
    sm: np.ndarray                                # samples, shape (n, 4): t, code, a, b
    sm_thread: np.ndarray
    sources: dict = field(default_factory=dict)
    end: Optional[dict] = None
    dropped: int = 0
    torn_chunks: int = 0                          # damaged chunks (torn by a kill, or corrupt)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    damaged: list[dict] = field(default_factory=list)   # Damage.to_json() of each damaged chunk
    lost_records: int = 0                         # records in damaged chunks or naming lost descriptors
    duplicate_chunks: int = 0                     # chunks stored twice (copied files, repeated chunks)


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
    notes: dict[int, list[str]] = field(default_factory=dict)     # rank -> warnings about its entries
    orphans: list[str] = field(default_factory=list)              # warnings about entries of no rank

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
    data = _read_bytes(path, report, populate=False)     # only the first chunks are read
    if data is None:
        return None, report.unreadable
    try:
        for chunk in iter_chunks(data, str(path), report):
            if chunk.table == "meta":
                meta = clean_meta(json_or_none(chunk), [], "")
                if meta is not None and _is_int(meta.get("rank")) and 0 <= meta["rank"] < 1 << 31:
                    return int(meta["rank"]), ""
                return None, ""
    except ProfviewError:        # a newer format: reading the file says so
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
            store.orphans.append(f"{path} is not named r<rank>-p<pid>.pvraw and has no readable metadata chunk "
                                 "naming its rank: skipped")
            continue
        if name_rank is not None and meta_rank is not None and name_rank != meta_rank:
            store.notes.setdefault(rank, []).append(
                f"{path} is named for rank {name_rank} but holds a recording of rank {meta_rank} (its metadata "
                f"chunk says so): analysed as rank {meta_rank}")
        store.files.setdefault(rank, []).append(path)
    return store


def rank_raw_files(directory: Path, rank: int) -> list[Path]:
    return scan_raw_store(directory).files.get(rank, [])


def raw_ranks(directory: Path) -> list[int]:
    """Ranks that have readable raw files in `directory/raw`."""
    return scan_raw_store(directory).ranks


# ---- validating what the chunks say ----------------------------------------------------------

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
    problem = (f"{where}: {bad} thread entr{'y' if bad == 1 else 'ies'} without a valid ident or name (such "
               "threads keep a generic name)") if bad else ""
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
    expected = {"rank": _is_int, "world_size": _is_int, "pid": _is_int, "host": lambda v: isinstance(v, str),
                "tool_version": lambda v: isinstance(v, str),
                "framework_versions": lambda v: isinstance(v, dict), "config": lambda v: isinstance(v, dict),
                "per_event_cost_ns": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v) and v >= 0}
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
    for key in ("dropped_events", "events_recorded", "samples_recorded", "write_errors", "steps"):
        if key in end and not (_is_int(end[key]) and end[key] >= 0):
            del end[key]
    if "stopped_cleanly" in end and not isinstance(end["stopped_cleanly"], bool):
        del end["stopped_cleanly"]
    flush = end.get("flush_ms")
    if flush is not None and not (isinstance(flush, (int, float)) and not isinstance(flush, bool)
                                  and math.isfinite(flush) and flush >= 0):
        del end["flush_ms"]
    return end


# ---- reading a rank ------------------------------------------------------------------------

class _Group:
    """The chunks of one recording (one process's raw file, and any copies of it)."""

    def __init__(self, files: list[RawFile]) -> None:
        self.files = files
        self.chunks: list[tuple[RawFile, Chunk]] = []
        self.lut: dict[int, int] = {}            # file-local descriptor id -> global id (-1: unreadable)


def read_raw_tables(paths: list[Path], progress: Optional[Callable[[int, int], None]] = None,
                    rank: Optional[int] = None, notes: Optional[list[str]] = None) -> RawTables:
    """Read and concatenate the raw files of one rank (several processes may share a rank).

    `notes` are warnings about this rank's entries that were skipped before reading (scan_raw_store).
    Raises ProfviewError (one sentence) only when nothing of the rank can be read."""
    files = []
    for i, p in enumerate(paths):
        files.append(read_raw_file(p))
        if progress:
            progress(i + 1, len(paths))
    warnings: list[str] = list(notes or [])
    groups = _group_copies(files)
    tables = RawTables(meta={}, descriptors=[], thread_names={},
                       ev_t=np.empty(0, np.int64), ev_code=np.empty(0, np.int64),
                       ev_chunk_thread=np.empty(0, np.int64), ev_chunk_len=np.empty(0, np.int64),
                       sm=np.empty((0, 4), np.int64), sm_thread=np.empty(0, np.int64))
    metas: list[dict] = []
    global_ids: dict[tuple[str, str, str], int] = {}
    ev_parts, sm_parts = [], []
    for g in groups:
        _collect_tables(g, tables, metas, global_ids)
    for g in groups:
        _collect_records(g, tables, ev_parts, sm_parts)
    for f in files:                       # reading, de-duplication and _collect_* noted their findings per file
        warnings += f.damage_warnings() + f.warnings
    damaged = [d for f in files for d in f.damaged]
    tables.torn_chunks = len(damaged)
    tables.damaged = [d.to_json() for d in damaged[:MAX_DAMAGE_LISTED]]
    tables.lost_records += sum(d.records_lost or 0 for d in damaged)
    if ev_parts:
        # Chunks in order of their first event: a thread's own chunks already are, but Python reuses the
        # ident of a finished thread, and the finished thread's last chunk can reach the file after the
        # new thread's first one. Nesting pairs events in recording order per ident, so order them here.
        ev_parts.sort(key=lambda part: int(part[0][0, 0]))
        tables.ev_t = np.concatenate([p[0][:, 0] for p in ev_parts])
        tables.ev_code = np.concatenate([p[0][:, 1] for p in ev_parts])
        tables.ev_chunk_thread = np.array([p[1] for p in ev_parts], dtype=np.int64)
        tables.ev_chunk_len = np.array([len(p[0]) for p in ev_parts], dtype=np.int64)
    if sm_parts:
        tables.sm = np.concatenate([p[0] for p in sm_parts])
        tables.sm_thread = np.concatenate([np.full(len(p[0]), p[1], np.int64) for p in sm_parts])
    tables.files = [str(p) for p in paths]
    tables.warnings = warnings
    records = len(tables.ev_t) + len(tables.sm)
    if metas:
        tables.meta = min(metas, key=lambda m: m["clock"]["origin_monotonic_ns"])
    elif records:
        first = int(min(tables.ev_t.min() if len(tables.ev_t) else INT64_MAX,
                        tables.sm[:, 0].min() if len(tables.sm) else INT64_MAX))
        tables.meta = {"rank": rank if rank is not None else 0,
                       "clock": {"origin_monotonic_ns": first, "origin_unix_ns": 0}}
        tables.warnings.append("the metadata chunk of this rank's recording is missing or damaged: times are "
                               "counted from the first record, wall-clock times and the recording's settings "
                               "are unknown")
    else:
        raise ProfviewError(_nothing_readable(paths, files, warnings))
    _drop_before_origin(tables)
    _repair_windows(tables)
    return tables


def _drop_before_origin(t: RawTables) -> None:
    """Records timed before the recording's origin cannot be (every record is taken after it): a
    damaged time. They are left out and counted, so no output holds a time before the recording."""
    origin = int(t.meta["clock"]["origin_monotonic_ns"])
    early_ev = t.ev_t < origin
    early_sm = t.sm[:, 0] < origin
    n = int(early_ev.sum()) + int(early_sm.sum())
    if not n:
        return
    if early_ev.any():
        chunk = np.repeat(np.arange(len(t.ev_chunk_len)), t.ev_chunk_len)
        keep = ~early_ev
        t.ev_chunk_len = np.bincount(chunk[keep], minlength=len(t.ev_chunk_len)).astype(np.int64)
        t.ev_t, t.ev_code = t.ev_t[keep], t.ev_code[keep]
        nonempty = t.ev_chunk_len > 0
        t.ev_chunk_len, t.ev_chunk_thread = t.ev_chunk_len[nonempty], t.ev_chunk_thread[nonempty]
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
    return (f"the raw store {names} has no metadata chunk and no readable record{why}: it is not a profview "
            "recording or was cut short at its start")


def _group_copies(files: list[RawFile]) -> list[_Group]:
    """Files holding the same recording (the same metadata chunk, e.g. a raw file copied under another
    name) form one group whose chunks are de-duplicated; a chunk repeated within a file is counted once."""
    by_identity: dict[Any, _Group] = {}
    groups: list[_Group] = []
    for i, f in enumerate(files):
        meta = next((c for c in f.chunks if c.table == "meta" and clean_meta(json_or_none(c), [], "")), None)
        identity = ("meta", meta.key) if meta is not None else ("file", i)
        g = by_identity.get(identity)
        if g is None:
            g = by_identity[identity] = _Group([])
            groups.append(g)
        g.files.append(f)
    for g in groups:
        seen: dict[tuple, tuple[RawFile, Chunk]] = {}
        for f in g.files:
            repeats: dict[str, int] = {}
            for c in f.chunks:
                first = seen.get(c.key)
                if first is None:
                    seen[c.key] = (f, c)
                    g.chunks.append((f, c))
                else:
                    other = first[0].path
                    repeats[str(other)] = repeats.get(str(other), 0) + 1
            for other, n in repeats.items():
                if other == str(f.path):
                    f.warnings.append(f"{f.path}: {n} chunk(s) repeat earlier chunks of the same file word for "
                                      "word: each was counted once")
                else:
                    f.warnings.append(f"{f.path} repeats {n} chunk(s) of {other} (the same recording stored twice, "
                                      "e.g. a copied raw file): each was counted once")
                f.duplicates += n
    return groups


def _collect_tables(g: _Group, tables: RawTables, metas: list[dict], global_ids: dict) -> None:
    """Pass 1 over one recording's chunks: metadata, descriptors (file-local ids -> global ids),
    thread names, source status, the end chunk. Invalid content costs its chunk (a warning)."""
    next_local = 0
    for f, c in g.chunks:
        t = c.table
        if t not in ("meta", "descriptors", "threads", "sources", "end"):
            continue
        obj = json_or_none(c)
        where = c.where(str(f.path))
        if t == "meta":
            meta = clean_meta(obj, f.warnings, where)
            if meta is None:
                f.damage(c, "its metadata is not a JSON object with a clock origin")
            else:
                metas.append(meta)
        elif t == "descriptors":
            first = c.header.get("first", next_local)
            if not isinstance(obj, list):
                f.damage(c, "its descriptors are not a JSON list", records_lost=0)
                continue
            if not _is_int(first) or first < 0 or first + len(obj) > max(f.size, 1):
                f.damage(c, f"its first descriptor id is invalid (first = {first!r:.40})", records_lost=0)
                continue
            bad = 0
            for k, d in enumerate(obj):
                if not (isinstance(d, list) and len(d) == 3 and all(isinstance(x, str) for x in d)):
                    bad += 1
                    g.lut.setdefault(first + k, -1)
                    continue
                key = (d[0], d[1], d[2])
                gid = global_ids.get(key)
                if gid is None:
                    gid = global_ids[key] = len(tables.descriptors)
                    tables.descriptors.append(key)
                old = g.lut.get(first + k)
                if old is not None and old >= 0 and old != gid:
                    bad += 1
                    continue
                g.lut[first + k] = gid
            if bad:
                f.warnings.append(f"{where}: {bad} descriptor(s) unreadable or contradicting an earlier chunk; "
                                  "records naming them are left out")
            next_local = max(next_local, first + len(obj))
        elif t == "threads":
            if not isinstance(obj, list):
                f.damage(c, "its thread table is not a JSON list", records_lost=0)
                continue
            names, problem = thread_names(obj, where)
            tables.thread_names.update(names)
            if problem:
                f.warnings.append(problem)
        elif t == "sources":
            if not isinstance(obj, dict):
                f.damage(c, "its source table is not a JSON object", records_lost=0)
                continue
            tables.sources.update({str(k): v for k, v in obj.items() if isinstance(v, dict)})
        elif t == "end":
            end = clean_end(obj)
            if end is None:
                f.damage(c, "its end-of-recording record is not a JSON object", records_lost=0)
            else:
                tables.end = end


def _collect_records(g: _Group, tables: RawTables, ev_parts: list, sm_parts: list) -> None:
    """Pass 2: events and samples, their codes rewritten from the file's descriptor ids to global ids."""
    size = max(g.lut) + 1 if g.lut else 0
    lut = np.full(size, -1, dtype=np.int64)
    for local, gid in g.lut.items():
        lut[local] = gid
    identity = bool(size) and np.array_equal(lut, np.arange(size))
    complete = bool((lut >= 0).all())            # every id below `size` is known: only the range needs checking
    unknown: dict[str, list] = {}                # file -> [records, chunks, first chunk's place]
    for f, c in g.chunks:
        t = c.table
        if t not in ("events", "samples"):
            continue
        width = 2 if t == "events" else 4
        problem = records_problem(c)
        if problem:
            f.damage(c, problem)
            continue
        thread = c.header["thread"]
        if t == "events":
            dropped = c.header.get("dropped", 0)
            if _is_int(dropped) and dropped >= 0:
                tables.dropped += dropped
            else:
                f.warnings.append(f"{c.where(str(f.path))}: its dropped count is invalid ({dropped!r:.40}) and "
                                  "was ignored")
        words = np.frombuffer(c.payload, dtype="<i8").reshape(-1, width)
        if not len(words):
            continue
        desc = words[:, 1] >> 1
        bad = (desc < 0) | (desc >= size)
        if not complete:
            if not bad.any():
                bad = lut[desc] < 0
            else:
                bad[~bad] = lut[desc[~bad]] < 0
        if bad.any():
            n = int(bad.sum())
            u = unknown.setdefault(str(f.path), [0, 0, c.where(str(f.path))])
            u[0] += n
            u[1] += 1
            tables.lost_records += n
            words, desc = words[~bad], desc[~bad]
        if not identity and len(words):
            out = words.copy()
            out[:, 1] = (lut[desc] << 1) | (out[:, 1] & 1)
            words = out
        if len(words):
            (ev_parts if t == "events" else sm_parts).append((words, thread))
    for f in g.files:
        tables.duplicate_chunks += f.duplicates
    for path, (n, chunks, where) in unknown.items():
        f = next(x for x in g.files if str(x.path) == path)
        f.warnings.append(f"{path}: {n:,} recorded events in {chunks} chunk(s) name descriptors that no readable "
                          f"descriptors chunk defines (first: {where.split(': ', 1)[1]}); they were left out")


def _repair_windows(t: RawTables) -> None:
    """Recording windows whose start was lost (its sample sat in a damaged chunk, or the memory
    budget dropped it) get one back, at the first record after the previous window's end, so the
    loss costs that sample and not the whole window. A window whose end was lost ends where the
    next one starts (windows_from_samples)."""
    if not len(t.sm) and not len(t.ev_t):
        return
    kind_of = descriptor_columns(t.descriptors)[0]
    k = kind_of[t.sm[:, 1] >> 1] if len(t.sm) else np.empty(0, dtype=object)
    starts = np.sort(t.sm[k == kinds.WINDOW_START, 0])
    stops = np.sort(t.sm[k == kinds.WINDOW_STOP, 0])
    other_sm = t.sm[(k != kinds.WINDOW_START) & (k != kinds.WINDOW_STOP), 0]

    def first_record(after: int, until: int) -> Optional[int]:
        best = None
        for times in (t.ev_t, other_sm):
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
        t.warnings.append(f"{len(added)} recording-window start(s) were lost (a damaged chunk or the memory budget "
                          "took them): each such window is taken to start at its first record")
    if lost_stops:
        t.warnings.append(f"{lost_stops} recording-window end(s) were lost: each such window is taken to end "
                          "where the next one starts")


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
    return place(t, windows["start_ns"].to_numpy(dtype=np.int64), windows["stop_ns"].to_numpy(dtype=np.int64),
                 np.arange(len(windows), dtype=np.int32), end_inclusive=True)

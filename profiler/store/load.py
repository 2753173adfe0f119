"""Turn one rank's raw store into a `Run` (vectorised: no Python loop per event).

Events arrive as per-thread (t, code) pairs; code // 2 is a descriptor id, code % 2 says begin
or end. This module reads and concatenates them; `interpret.py` gives them meaning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from profiler.kernels.intervals import place
from profiler.errors import ProfviewError
from profiler.store import kinds
from profiler.store.raw import RawFile, find_raw_files, read_raw_file


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
    torn_chunks: int = 0
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recording:
    """One rank's recording as the analysis finds it: where it is, and its raw tables."""

    directory: Path
    rank: int
    tables: RawTables


def rank_raw_files(directory: Path, rank: int) -> list[Path]:
    return [p for p in find_raw_files(directory) if p.name.startswith(f"r{rank}-")]


def raw_ranks(directory: Path) -> list[int]:
    """Ranks that have raw files in `directory/raw`."""
    ranks = set()
    for p in find_raw_files(directory):
        head = p.name.split("-", 1)[0]
        if head[1:].isdigit():
            ranks.add(int(head[1:]))
    return sorted(ranks)


def read_raw_tables(paths: list[Path], progress: Optional[Callable[[int, int], None]] = None) -> RawTables:
    """Read and concatenate the raw files of one rank (several processes may share a rank)."""
    files = [read_raw_file(p) for p in paths]
    metas = [c.json() for f in files for c in f.chunks if c.table == "meta"]
    if not metas:
        names = ", ".join(str(p) for p in paths)
        raise ProfviewError(f"the raw store {names} has no metadata chunk: it is not a profview recording or was cut short at its start")
    meta = min(metas, key=lambda m: m["clock"]["origin_monotonic_ns"])
    tables = RawTables(meta=meta, descriptors=[], thread_names={},
                       ev_t=np.empty(0, np.int64), ev_code=np.empty(0, np.int64),
                       ev_chunk_thread=np.empty(0, np.int64), ev_chunk_len=np.empty(0, np.int64),
                       sm=np.empty((0, 4), np.int64), sm_thread=np.empty(0, np.int64))
    ev_parts, sm_parts = [], []
    for i, f in enumerate(files):
        _collect(f, tables, ev_parts, sm_parts, file_index=i)
        if progress:
            progress(i + 1, len(files))
    if ev_parts:
        tables.ev_t = np.concatenate([p[0][:, 0] for p in ev_parts])
        tables.ev_code = np.concatenate([p[0][:, 1] for p in ev_parts])
        tables.ev_chunk_thread = np.array([p[1] for p in ev_parts], dtype=np.int64)
        tables.ev_chunk_len = np.array([len(p[0]) for p in ev_parts], dtype=np.int64)
    if sm_parts:
        tables.sm = np.concatenate([p[0] for p in sm_parts])
        tables.sm_thread = np.concatenate([np.full(len(p[0]), p[1], np.int64) for p in sm_parts])
    tables.files = [str(p) for p in paths]
    return tables


def _collect(f: RawFile, tables: RawTables, ev_parts: list, sm_parts: list, file_index: int) -> None:
    """Sort one file's chunks into the tables. Descriptor ids are per file: remap them to global ids."""
    tables.torn_chunks += f.torn_chunks
    tables.warnings += f.warnings
    remap: list[int] = []
    global_ids = {d: i for i, d in enumerate(tables.descriptors)}
    for c in f.chunks:
        t = c.table
        if t == "descriptors":
            for d in c.json():
                key = tuple(d)
                if key not in global_ids:
                    global_ids[key] = len(tables.descriptors)
                    tables.descriptors.append(key)
                remap.append(global_ids[key])
        elif t == "threads":
            for th in c.json():
                tables.thread_names[int(th["ident"])] = th["name"]
        elif t == "events":
            tables.dropped += int(c.header.get("dropped", 0))
            words = np.frombuffer(c.payload, dtype="<i8").reshape(-1, 2)
            if len(words):
                ev_parts.append((_remap_codes(words, remap, f), int(c.header["thread"])))
        elif t == "samples":
            words = np.frombuffer(c.payload, dtype="<i8").reshape(-1, 4)
            if len(words):
                sm_parts.append((_remap_codes(words, remap, f), int(c.header["thread"])))
        elif t == "sources":
            tables.sources.update(c.json())
        elif t == "end":
            tables.end = c.json()


def _remap_codes(words: np.ndarray, remap: list[int], f: RawFile) -> np.ndarray:
    """Rewrite the code column (column 1) from file-local to global descriptor ids (codes = 2 * id + end flag)."""
    desc = words[:, 1] >> 1
    lut = np.asarray(remap, dtype=np.int64)
    bad = (desc < 0) | (desc >= len(lut))
    if bad.any():
        f.warnings.append(f"{f.path}: {int(bad.sum())} records name an unknown descriptor and were skipped")
        words, desc = words[~bad], desc[~bad]
    if np.array_equal(lut, np.arange(len(lut))):
        return words                        # ids already global (the usual single-process rank): no copy
    out = words.copy()
    out[:, 1] = (lut[desc] << 1) | (out[:, 1] & 1)
    return out


# ---- interpretation ------------------------------------------------------------------------

def descriptor_columns(descriptors: list[tuple[str, str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kind, name and extra of every descriptor id, as arrays indexable by id."""
    if not descriptors:
        e = np.empty(0, dtype=object)
        return e, e, e
    arr = np.array(descriptors, dtype=object).reshape(-1, 3)
    return arr[:, 0], arr[:, 1], arr[:, 2]


def windows_from_samples(sm: np.ndarray, kind_of: np.ndarray) -> pd.DataFrame:
    """Recording windows [start_ns, stop_ns) with their first step, from window_start / window_stop samples."""
    k = kind_of[sm[:, 1] >> 1] if len(sm) else np.empty(0, dtype=object)
    starts = sm[k == kinds.WINDOW_START]
    stops = sm[k == kinds.WINDOW_STOP]
    starts = starts[np.argsort(starts[:, 0], kind="stable")]
    stops = stops[np.argsort(stops[:, 0], kind="stable")]
    stop_t = np.full(len(starts), np.iinfo(np.int64).max, dtype=np.int64)
    if len(stops) and len(starts):
        idx = np.searchsorted(stops[:, 0], starts[:, 0], side="left")
        ok = idx < len(stops)
        stop_t[ok] = stops[idx[ok], 0]
    return pd.DataFrame({"start_ns": starts[:, 0], "stop_ns": stop_t, "first_step": starts[:, 2]})


def window_of(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Index of the window [start, stop] containing each time (int32), -1 when outside every window."""
    return place(t, windows["start_ns"].to_numpy(dtype=np.int64), windows["stop_ns"].to_numpy(dtype=np.int64),
                 np.arange(len(windows), dtype=np.int32), end_inclusive=True)

"""Big arrays kept in files instead of the process's memory: a big import's event columns and op table.

Inside `spilling(directory)`, `empty` and `concatenated` give arrays of `SPILL_MIN_BYTES` or more as
shared memory mappings of files in `directory`, unlinked at once (their disk space goes back when the last
array on one is freed, and a crash leaves nothing behind). Numpy and pandas read and write them as any
array; the pages a stage touches become resident (they count in its RSS) until `drop_resident` hands them
back to the operating system's page cache, which keeps them while memory is free, evicts them to the file
when it is not, and reads them back when they are touched again. So a table of the whole run stays whole
(every analysis reads it as before and the outputs are the same bytes) while the memory an import needs is
what one stage works on at a time (docs/kineto.md, "Reading in chunks").

With a `resident_limit`, a watcher thread also hands the pages back whenever the process's RSS passes
DROP_AT of the limit, wherever the import is: a stage that reads every spilled column of a big run then
holds, besides its own temporaries, only what it touched since the last look (docs/kineto.md, "The memory
limit"). Where _resident.c is built (Linux) the watcher is a native thread and the mappings are its own: it
looks every millisecond even while a long numpy call over a spilled column holds the GIL, which a Python
thread cannot. What is not spilled (object columns, a chunk's temporaries, Python itself) it cannot bound.

Outside `spilling` (a library user's process, the tests' small captures) the arrays are ordinary ones.
The directory must be on a disk, not a RAM file system (tmpfs): `profview import` spills next to its
output directory.
"""

from __future__ import annotations

import ctypes
import importlib
import mmap
import os
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Optional, TypeVar

import numpy as np

#: Arrays smaller than this stay in memory: a file and a mapping per small array would cost more than they save.
SPILL_MIN_BYTES = 1 << 20
#: Rows worked on at a time by `chunked` (its temporaries: a few MB per column).
CHUNK_ROWS = 1 << 20
#: `min_bytes` for arrays that are small but held by the dozen until the end of a stage (a trace's parts' sparse
#: args: ~200 KB each, 40 MB for the 64 parts of a 16 GB trace): spilled from a page up.
SMALL = 4096
#: Rows worked on between two drops (`_Pace`): every chunk of CHUNK_ROWS, several small ones (a chunk of a few rows
#: maps a few KB of each column, and a drop costs ~20 us and more per spilled array).
DROP_ROWS = 1 << 16
#: Widest stretch of a column, in rows, that one piece of sparse positions spans (`stretches`, `sampled`): a touched
#: page of a spilled column maps its whole large folio (2 MB on ext4), so a few hundred positions spread over a big
#: column map all of it between two drops (300 over 534 MB: 500 MB in one gather); a piece within a stretch maps at
#: most the stretch (32 MB of float64). Its own setting, not a multiple of CHUNK_ROWS: tests shrink the chunks to a
#: few rows, and a stretch of a few rows would cost a drop per few positions.
SPAN_ROWS = 4 << 20
#: Returns to an earlier stretch within a chunk of positions from which `stretches` no longer cuts the chunk (each
#: cut costs a drop).
MAX_RUNS = 64

T = TypeVar("T")

#: (directory, min bytes) while spilling, per thread and task (contextvars): imports in threads of one process
#: (a Dask worker's) each keep their own setting
_SETTING: ContextVar[Optional[tuple[Path, int]]] = ContextVar("profview_spill", default=None)
_mappings: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()  # the live spilled arrays' mappings
_mappings_lock = threading.Lock()  # the watcher thread lists them while the importing thread adds more


def _native_resident() -> Any:
    """The native mappings and watcher (_resident.c, built on Linux), or None: not built, or PROFVIEW_PURE_PYTHON=1
    (the same switch as the kernels', profiler/kernels/native.py, which sits in a layer above this one)."""
    if os.environ.get("PROFVIEW_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module("profiler._resident")
    except ImportError:
        return None


_NATIVE = _native_resident()


def glibc_function(name: str) -> Optional[Callable[..., int]]:
    """glibc's allocator function `name`, or None elsewhere (musl, macOS)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = glibc_function("malloc_trim")


@contextmanager
def spilling(
    directory: str | os.PathLike[str], min_bytes: Optional[int] = None, resident_limit: Optional[int] = None
) -> Iterator[None]:
    """Spill arrays of `min_bytes` (default SPILL_MIN_BYTES) or more into files in `directory` (which must
    exist) while inside; with `resident_limit` (bytes), keep the spilled pages resident in this process below
    it (the watcher: see the module's docstring)."""
    token = _SETTING.set((Path(directory), SPILL_MIN_BYTES if min_bytes is None else min_bytes))
    if resident_limit is not None:
        _WATCHER.add(resident_limit)
    try:
        yield
    finally:
        if resident_limit is not None:
            _WATCHER.remove(resident_limit)
        _SETTING.reset(token)


def empty(n: int, dtype: Any, min_bytes: Optional[int] = None) -> np.ndarray:
    """An uninitialised array of `n` values: in a spill file when spilling and it is big enough (the setting's
    minimum, or `min_bytes`: SMALL for arrays many of which are held at once)."""
    dtype, setting = np.dtype(dtype), _SETTING.get()
    if (
        setting is None
        or dtype.hasobject
        or n * dtype.itemsize < max(setting[1] if min_bytes is None else min_bytes, 1)
    ):
        return np.empty(n, dtype=dtype)
    nbytes = n * dtype.itemsize
    try:
        fd, path = tempfile.mkstemp(prefix=".profview-spill-", dir=setting[0])
    except OSError:  # a directory that cannot take the file: memory, as without spilling
        return np.empty(n, dtype=dtype)
    try:
        os.unlink(path)
        os.posix_fallocate(fd, 0, nbytes)  # the disk space now: a full disk is an error here, not a crash later
        mapping = _mapping(fd, nbytes, writable=True)  # shared: dropped pages are kept by the file, not lost
    except OSError:  # a full disk, a file system without shared mappings
        return np.empty(n, dtype=dtype)
    finally:
        os.close(fd)
    return np.frombuffer(mapping, dtype=dtype, count=n)


def concatenated(pieces: Sequence[np.ndarray], min_bytes: Optional[int] = None) -> np.ndarray:
    """np.concatenate of 1-d pieces of one dtype, into a spill file when spilling and big enough (`empty`)."""
    if not pieces or pieces[0].dtype.hasobject:
        return np.concatenate(pieces)
    out = empty(sum(len(p) for p in pieces), np.result_type(*pieces), min_bytes)
    at = 0
    for piece in pieces:
        out[at : at + len(piece)] = piece
        at += len(piece)
        if is_spilled(out):
            drop_resident()  # the piece's pages and those just written
    return out


def chunks(n: int, rows: Optional[int] = None) -> Iterator[slice]:
    """The positions 0..n-1 as slices of `rows` (default CHUNK_ROWS), in order."""
    rows = rows or CHUNK_ROWS
    for lo in range(0, n, rows):
        yield slice(lo, min(lo + rows, n))


def pieces(n: int) -> Iterator[slice]:
    """The positions 0..n-1 as slices of `piece_rows()`, in order: for work whose temporaries take ~40 bytes or more
    a position (a sort's, several gathers'), so that they stay ~10 MB."""
    return chunks(n, piece_rows())


def piece_rows() -> int:
    """Rows in a piece (`pieces`): a quarter of CHUNK_ROWS; also `chunked`'s `rows` for a fill that makes ~40 bytes
    or more a row (a list of Python objects per row: an event's args read)."""
    return max(CHUNK_ROWS // 4, 1)


def chunked(
    n: int,
    dtype: Any,
    fill: Callable[[slice], np.ndarray],
    rows: Optional[int] = None,
    along: Optional[np.ndarray] = None,
) -> np.ndarray:
    """An array of `n` values made `rows` (default CHUNK_ROWS) at a time (`fill(positions)` gives those positions'
    values), in a spill file when big: elementwise work over a big table whose temporaries stay a chunk's size. With
    `along` (the n positions into a big column that `fill` gathers from), a piece of those at a time (`stretches`)."""
    return _written(empty(n, dtype), fill, chunks(n, rows) if along is None else stretches(along, rows), along)


def _written(
    out: np.ndarray, fill: Callable[[slice], np.ndarray], pieces: Iterable[slice], along: Optional[np.ndarray] = None
) -> np.ndarray:
    """`out` with each of `pieces` of its positions set to `fill(positions)`, the pages handed back between pieces
    (`_Pace`: pieces of `along`'s positions, a stretch of the column at a time) and after the last: a whole column
    written at once maps all its pages in a few ms, faster than the watcher looks."""
    for at in paced(pieces, along):
        out[at] = fill(at)
    return out


def paced(pieces: Iterable[slice], along: Optional[np.ndarray] = None) -> Iterator[slice]:
    """Each of `pieces` (slices of rows; `along`: the positions into a big column they read or write, if sparse) in
    turn, the spilled pages handed back between two once due (`_Pace`) and after the last: for loops over chunks of a
    big table that read spilled columns."""
    pace = _Pace()
    try:
        for at in pieces:
            pace.next(at.stop - at.start, None if along is None else along[at])
            yield at
    finally:  # also when the loop stops early
        pace.done()


class _Pace:
    """When to hand the spilled pages back between pieces of work (drop_resident): before a piece once those since
    the last drop cover DROP_ROWS rows, or when its positions (of a sparse read or write) reach another stretch of
    the column than theirs, or several; and after the last. A drop per chunk of a few rows (tests') cost more than
    the work: ~20 us and more per spilled array."""

    def __init__(self) -> None:
        self.pending = 0  # rows worked on since the last drop
        self.held: Optional[tuple[int, int]] = None  # the first and last stretch their positions reach

    def next(self, rows: int, positions: Optional[np.ndarray] = None) -> None:
        """Before a piece of `rows` rows (`positions`: where it reads or writes a column sparsely): drop if due."""
        reach = None if positions is None else (int(positions.min()) // SPAN_ROWS, int(positions.max()) // SPAN_ROWS)
        moved = reach != self.held or (reach is not None and reach[0] != reach[1])
        if self.pending and (self.pending >= DROP_ROWS or moved):
            drop_resident()  # the pieces' pages of the spilled inputs and outputs
            self.pending = 0
        self.pending += rows
        self.held = reach

    def done(self) -> None:
        if self.pending:
            drop_resident()
            self.pending = 0


def dropping(pieces: Iterable[T]) -> Iterator[T]:
    """Each of `pieces` in turn, the spilled pages handed back (drop_resident) once the loop's body is done with it:
    for loops over pieces of rows (nesting.by_depth's) that gather from and scatter into big columns."""
    for piece in pieces:
        yield piece
        drop_resident()


def filled(n: int, dtype: Any, value: Any, rows: Optional[int] = None) -> np.ndarray:
    """An array of `n` times `value`, made `rows` (default CHUNK_ROWS) at a time into a spill file when big (`chunked`):
    a big table's per-row sums or links, before they are added into."""
    return chunked(n, dtype, lambda at: np.full(at.stop - at.start, value, dtype=dtype), rows)


def gathered(values: np.ndarray, rows: np.ndarray, dtype: Any = None) -> np.ndarray:
    """values[rows] (in `dtype`, values' own by default), gathered a piece of `rows` at a time (`stretches`) into a
    spill file when big, the pages handed back after each: temporaries a chunk's size, and a sparse gather from a big
    column maps at most a stretch of it at a time."""
    return chunked(len(rows), values.dtype if dtype is None else dtype, lambda at: values[rows[at]], along=rows)


def stretches(positions: np.ndarray, rows: Optional[int] = None) -> Iterator[slice]:
    """Slices of `positions` (into a column) of at most `rows` (default CHUNK_ROWS), in order, each within one
    stretch of SPAN_ROWS rows of the column (an order by lane and time: a piece per stretch each lane's run meets):
    work on a piece between two drops maps at most that stretch of the column. A chunk of positions in a more mixed
    order (going back to an earlier stretch MAX_RUNS times or more) is one piece: covered, not bounded."""
    for at in chunks(len(positions), rows):
        cuts = _stretch_cuts(positions[at])
        if cuts is None:
            yield at
            continue
        yield from (slice(at.start + lo, at.start + hi) for lo, hi in zip(cuts, cuts[1:]))


def _stretch_cuts(piece: np.ndarray) -> Optional[list[int]]:
    """Where a chunk of positions is cut: wherever the stretch (of SPAN_ROWS rows) its positions fall in changes (0
    first, len(piece) last), so positions in any order within one stretch stay one piece; None when the stretch goes
    back MAX_RUNS times or more (a mixed order over many stretches: a cut per position or two)."""
    stretch = piece // SPAN_ROWS
    changes = np.flatnonzero(stretch[1:] != stretch[:-1]) + 1
    if np.count_nonzero(stretch[changes] < stretch[changes - 1]) >= MAX_RUNS:
        return None
    return [0, *changes.tolist(), len(piece)]


def flatnonzero(n: int, test: Callable[[slice], np.ndarray], dtype: Any) -> np.ndarray:
    """np.flatnonzero of the mask of n positions that `test(positions)` gives a chunk at a time, in `dtype`: counted,
    then written a chunk at a time (into a spill file when big), the pages handed back between chunks: no
    whole-length temporary. `test` runs twice a chunk: for cheap ones (a mask's slice, an isin of small codes)."""
    out = empty(sum(int(np.count_nonzero(test(at))) for at in paced(chunks(n))), dtype)
    done = 0
    for at in paced(chunks(n)):
        rows = np.flatnonzero(test(at)) + at.start
        out[done : done + len(rows)] = rows
        done += len(rows)
    return out


def sampled(n: int, every: int) -> Iterator[slice]:
    """Every `every`th of the positions 0..n-1, as strided slices of a stretch (SPAN_ROWS rows) each, the pages
    handed back after each: a sample a folio apart from a big column would map all of it at once."""
    rows = max(1, SPAN_ROWS // every) * every
    for at in dropping(chunks(n, rows)):
        yield slice(at.start, at.stop, every)


def scattered(out: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """out[rows] = values, a chunk of `rows` at a time cut at the stretches (`stretches`), the pages handed back after
    each piece: a sparse scatter into a big column maps at most a stretch of it at a time. A chunk in a mixed order
    (going back to an earlier stretch MAX_RUNS times or more) is sorted by row first (stably:
    of two writes to one row the last still wins), which `stretches` alone would leave whole."""
    pace = _Pace()
    for at in chunks(len(rows)):
        piece, given = rows[at], values[at]
        cuts = _stretch_cuts(piece)
        if cuts is None:
            by_row = np.argsort(piece, kind="stable")
            piece, given = piece[by_row], given[by_row]
            cuts = _stretch_cuts(piece)
        for lo, hi in zip(cuts, cuts[1:]):
            pace.next(hi - lo, piece[lo:hi])
            out[piece[lo:hi]] = given[lo:hi]
    pace.done()


def sample(values: np.ndarray, every: int) -> np.ndarray:
    """values[::every], read a stretch at a time (`sampled`), each stretch's values copied before its pages are handed
    back: a sample a folio apart from a big column would map all of it in one call."""
    return np.concatenate([values[at].copy() for at in sampled(len(values), every)] or [values[:0]])


def taken(values: np.ndarray, rows: slice | np.ndarray) -> np.ndarray:
    """values[rows]: a slice's view, a boolean mask's selection, or the positions gathered a piece at a time
    (`gathered`: spilled when big)."""
    if isinstance(rows, slice) or np.asarray(rows).dtype == bool:
        return values[rows]
    return gathered(values, np.asarray(rows))


def spilled(values: np.ndarray) -> np.ndarray:
    """`values` copied into a spill file when spilling and big enough (else `values` itself)."""
    if values.ndim != 1 or values.dtype.hasobject:
        return values
    out = empty(len(values), values.dtype)
    if not is_spilled(out):  # kept in memory: the original will do
        return values
    return _written(out, lambda at: values[at], chunks(len(out)))


def mapped_file(path: str | os.PathLike[str]) -> Any:
    """A read-only shared mapping of the whole file at `path` (a buffer), whose pages `drop_resident` and the
    watcher hand back like the spilled arrays': they are the file's, so nothing is lost. ValueError for an
    empty file, OSError for one that cannot be mapped."""
    with open(path, "rb") as f:
        return _mapping(f.fileno(), os.fstat(f.fileno()).st_size, writable=False)


def _mapping(fd: int, nbytes: int, writable: bool) -> Any:
    """A shared mapping of the first `nbytes` of the file `fd`, listed for `drop_resident` and the watcher: the
    native one where it is built (its own thread watches it, see _resident.c), else Python's."""
    if _NATIVE is not None:
        if nbytes <= 0:
            raise ValueError("cannot map an empty file")
        return _NATIVE.Mapping(fd, nbytes, writable)
    mapping = mmap.mmap(fd, nbytes, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
    with _mappings_lock:
        _mappings.add(mapping)
    return mapping


def drop_resident() -> None:
    """Hand every spilled array's resident pages back to the page cache (their values stay: the next read
    maps them in again), and the C heap's free pages to the operating system (glibc's malloc_trim). Called where
    a stage has finished with the arrays it touched (after each chunk of `chunked` and the loops like it), and by
    the watcher at any moment: the mappings are shared ones of files, so a page dropped while another thread reads
    or writes it is read back from (or written to) the file's page, never lost.

    The heap: a chunk's temporaries below the mmap threshold (profiler/memory.py) come from it, and what they free
    stayed resident, the next chunk's coming partly on top, so a loop over a big table kept ~1 MB more per chunk
    (nesting.children_sums over 34 M nodes: +11 MB at 8.5 M, +34 MB at 34 M); ~0.25 ms a call."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    if _NATIVE is not None:
        _NATIVE.drop()
    for mapping in _live_mappings():
        try:
            mapping.madvise(mmap.MADV_DONTNEED)
        except ValueError:  # closed since listed: nothing resident left
            pass


def _live_mappings() -> list[mmap.mmap]:
    with _mappings_lock:
        return list(_mappings)


def is_spilled(values: np.ndarray) -> bool:
    """Whether `values` (or the array it views) is a spilled array."""
    base: Any = values
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    if _NATIVE is not None and isinstance(base, _NATIVE.Mapping):
        return True
    return isinstance(base, mmap.mmap) and base in _mappings


def spilled_bytes() -> int:
    """The size of the spilled arrays (and mapped files) alive now."""
    return sum(len(m) for m in _live_mappings()) + (_NATIVE.mapped_bytes() if _NATIVE is not None else 0)


# ----------------------------------------------------------------------------- the watcher

#: Share of the resident limit at which the watcher drops the spilled pages: headroom for what a stage
#: touches between two looks and for its own temporaries.
DROP_AT = 0.85
#: Share of the resident limit by which the file pages may grow since the last drop before the watcher drops
#: them anyway: a drop takes ~10-30 us per MB resident, and a stage reading spilled columns from the page cache
#: touches up to ~15 GB/s, so the spilled pages are kept few enough to drop in a few ms (see _resident.c).
FILE_BUDGET_AT = 0.1
#: How often the watcher reads the process's RSS (~5 us a read of /proc/self/statm): the Python thread, which
#: takes the GIL to look, and the native one, which does not.
WATCH_S = 0.002
NATIVE_WATCH_US = 1000


def resident_bytes() -> int:
    """The process's resident memory now (Linux's /proc/self/statm; psutil elsewhere)."""
    return _resident()[0]


def _resident() -> tuple[int, int]:
    """The process's resident memory now and, of it, its file pages (the spilled arrays', the libraries' code;
    Linux's /proc/self/statm; elsewhere psutil and 0)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
        return int(fields[1]) * mmap.PAGESIZE, int(fields[2]) * mmap.PAGESIZE
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss), 0


def peak_resident_bytes() -> int:
    """The highest RSS of this process (Linux: VmHWM, its own memory's; getrusage elsewhere) and of the largest of
    its finished children (import workers; getrusage: KiB on Linux, bytes on macOS); 0 where neither is known.
    Not getrusage for the process itself on Linux: it keeps the peak of the process it was forked from across
    exec (a `profview` started by a big process would report that process's peak)."""
    try:
        import resource
    except ImportError:
        return 0
    unit = 1 if sys.platform == "darwin" else 1024
    children = unit * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        with open("/proc/self/status", "rb") as status:
            own = next(int(line.split()[1]) * 1024 for line in status if line.startswith(b"VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        own = unit * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(own, children)


class _Watcher:
    """Watches while a `spilling` with a resident limit is open (the lowest limit wins: imports in threads of one
    process share its RSS), until the last one closes: the native thread where it is built (it runs whatever
    holds the GIL), else a Python thread of its own. `drops` counts the Python thread's drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limits: list[int] = []
        self._thread: Optional[threading.Thread] = None
        self.drops = 0

    def add(self, limit: int) -> None:
        with self._lock:
            self._limits.append(int(limit))
            self._changed()

    def remove(self, limit: int) -> None:
        with self._lock:
            self._limits.remove(int(limit))
            self._changed()

    def _threshold(self) -> int:
        return max(1, int(min(self._limits) * DROP_AT)) if self._limits else 0  # 0: not watching

    def _file_budget(self) -> int:
        return max(1, int(min(self._limits) * FILE_BUDGET_AT)) if self._limits else 0

    def _changed(self) -> None:
        if _NATIVE is not None:
            _NATIVE.watch(self._threshold(), self._file_budget(), NATIVE_WATCH_US)
        elif self._thread is None and self._limits:
            self._thread = threading.Thread(target=self._run, name="profview-spill-watcher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        """The Python watcher: the native one's rule (_resident.c), looking only when it holds the GIL."""
        file_floor = _resident()[1]  # the file pages resident after the last drop (or when watching began)
        while True:
            with self._lock:
                if not self._limits:
                    self._thread = None
                    return
                threshold, budget = self._threshold(), self._file_budget()
            rss, file = _resident()
            if rss > threshold or file > file_floor + budget:
                drop_resident()
                self.drops += 1
                file_floor = _resident()[1]
            time.sleep(WATCH_S)


_WATCHER = _Watcher()


def watcher_drops() -> int:
    """How many times the watcher has dropped the spilled pages in this process (for tests and benchmarks)."""
    return _WATCHER.drops + (_NATIVE.drop_count() if _NATIVE is not None else 0)

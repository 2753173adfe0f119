"""The raw store: append-only, versioned, self-describing chunk files under `profiler_data/raw/`.

A file holds one process's recording for one rank (`r{rank}-p{pid}.pvraw`) as a sequence of chunks:

    b"PVCK" | u32 header_len | u64 payload_len | u32 crc32(header + payload) | header | payload

The header is UTF-8 JSON naming the chunk's table and layout (`{"v": 1, "table": "events", ...}`);
the payload is the table's little-endian int64 words, or UTF-8 JSON for small metadata tables.
Each chunk is one `os.write` to a file opened with O_APPEND, so a process killed with SIGKILL
leaves whole chunks plus at most one torn one at the end; the reader detects that torn chunk
(short read or CRC mismatch), skips it and reports it.

`RawFile.walk` is the one reader of a file's chunks, for a finished file (`read_raw_file`, the batch
reader) and for one still being written (`store/follow.py`, which walks each new stretch as it
arrives): what it cannot use is recorded in the file's `RawFile`, the one channel through which
damage is said (`Damage` sentences and warnings).
"""

from __future__ import annotations

import bisect
import json
import mmap
import os
import re
import stat
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from profiler.errors import ProfviewError

MAGIC = b"PVCK"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sIQI")  # magic, header_len, payload_len, crc32
RAW_SUFFIX = ".pvraw"


def raw_file_name(rank: int, pid: int) -> str:
    return f"r{rank}-p{pid}{RAW_SUFFIX}"


def encode_chunk(header: dict[str, Any], payload: bytes) -> bytes:
    """One chunk's bytes: prefix, JSON header, payload."""
    head = json.dumps({"v": FORMAT_VERSION, **header}, separators=(",", ":"), sort_keys=True).encode()
    crc = zlib.crc32(payload, zlib.crc32(head))
    return _PREFIX.pack(MAGIC, len(head), len(payload), crc) + head + payload


class RawWriter:
    """Appends chunks to one raw file; every chunk is a single write() so a crash tears at most one."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.chunks_written = 0
        self.bytes_written = 0

    def append(self, table: str, payload: bytes, **header: Any) -> None:
        data = encode_chunk({"table": table, **header}, payload)
        view = memoryview(data)
        while view:  # os.write may write less than asked (e.g. on a pipe)
            n = os.write(self._fd, view)
            view = view[n:]
        self.chunks_written += 1
        self.bytes_written += len(data)

    def append_json(self, table: str, obj: Any, **header: Any) -> None:
        self.append(table, json.dumps(obj, separators=(",", ":"), sort_keys=True).encode(), fmt="json", **header)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class Chunk:
    header: dict[str, Any]
    payload: memoryview  # a view into the file's bytes (no copy)
    index: int = 0  # position among the file's chunks (damaged ones count too)
    offset: int = 0  # byte offset of the chunk in its file
    crc: int = 0  # the chunk's checksum: with its sizes, what de-duplication compares
    head_len: int = 0

    @property
    def table(self) -> str:
        table = self.header.get("table", "")
        return table if isinstance(table, str) else ""

    @property
    def nbytes(self) -> int:
        """The chunk's size in its file: prefix, header and payload."""
        return _PREFIX.size + self.head_len + len(self.payload)

    @property
    def key(self) -> tuple[int, int, int, int]:
        """What two copies of this chunk share: its checksum and sizes. Records, descriptors, the
        metadata and the end never repeat word for word within a recording; other chunks can (a
        dropped count alone, the source table written at start and at stop), so for them the place in
        the file is part of the key: they are de-duplicated only against a copy of the file."""
        unique = self.table in ("samples", "descriptors", "meta", "end") or (
            self.table == "events" and len(self.payload)
        )
        repeatable = not unique
        return self.crc, self.head_len, len(self.payload), self.offset if repeatable else -1

    def json(self) -> Any:
        """The payload as JSON; ValueError (or RecursionError) when it is not."""
        return json.loads(bytes(self.payload))

    def where(self, name: str) -> str:
        return f"{name}: chunk {self.index} (byte {self.offset}, {self.table or 'unknown'} table)"


@dataclass
class Damage:
    """A chunk (or a stretch of bytes) of a raw file that could not be used, and what it cost."""

    file: str
    chunk: int  # index of the chunk in its file
    offset: int  # byte offset
    nbytes: int
    why: str
    table: Optional[str] = None
    records_lost: Optional[int] = None  # events + samples the chunk held, when its header says

    def sentence(self) -> str:
        what = f" ({self.table} table)" if self.table else ""
        lost = (
            f"; {self.records_lost:,} recorded events lost with it"
            if self.records_lost
            else "; it held no events"
            if self.records_lost == 0
            else ""
        )
        return (
            f"{self.file}: skipped a torn chunk (chunk {self.chunk}{what}) at byte {self.offset} "
            f"({self.nbytes} bytes): {self.why}{lost}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "chunk": self.chunk,
            "offset": self.offset,
            "bytes": self.nbytes,
            "table": self.table,
            "events_lost": self.records_lost,
            "why": self.why,
        }


#: Why a chunk the file ends inside is skipped: the write a kill interrupted (the damage finding tells it from a
#: corrupt chunk)
CUT_SHORT = "cut short (the run was probably killed while writing)"
#: why a walk over a growing file stopped before its end (RawFile.waiting)
SHORT = "short"  # the next chunk is not whole yet: a write still landing, or a torn tail
CHECKSUM = "checksum"  # the last chunk fails its checksum: maybe a write still landing
MARKER = "marker"  # no chunk marker yet after bytes that are not a chunk


@dataclass
class RawFile:
    """One raw file as read: its chunks, and everything about it that a reader could not use.

    This is the one channel through which damage is said, for the batch reader and the follower
    alike: damaged chunks (`damaged`, one `Damage` sentence each), chunks repeating others
    (`duplicates`, one sentence per file they repeat), other warnings, and records naming unknown
    descriptors (one sentence), in that order (`sentences()`); damage and warnings in the order of
    their chunks in the file, however the chunks were taken in. It also keeps the state of the
    walk over the file's bytes (`walk`), so a growing file is read in stretches.
    """

    path: Path
    chunks: list[Chunk] = field(default_factory=list)
    damaged: list[Damage] = field(default_factory=list)  # in chunk order
    notes: list[tuple[int, str]] = field(default_factory=list)  # (chunk index, warning), in chunk order
    unreadable: str = ""  # why the file could not be read at all ("" when it could)
    size: int = 0
    duplicates: int = 0  # chunks repeating chunks already read (a copied file, a repeated chunk)
    repeats: dict[str, int] = field(default_factory=dict)  # file whose chunk was repeated -> how many
    unknown: list = field(default_factory=list)  # [records, chunks, where the first was] naming unknown descriptors
    meta: Optional[dict] = None  # what its metadata chunk says (checked)
    end: Optional[dict] = None  # what its end-of-recording chunk says (checked)
    offset: int = 0  # bytes walked: whole chunks and reported damage
    next_index: int = 0  # index of the next chunk (damaged stretches count)
    waiting: str = ""  # why the last walk stopped before the end of its bytes ("" when it did not)
    wanted: int = 0  # the offset the walk needs bytes up to, when it stopped for a SHORT chunk

    @property
    def torn_chunks(self) -> int:
        return len(self.damaged)

    @property
    def skipped_bytes(self) -> int:
        return sum(d.nbytes for d in self.damaged)

    def damage(self, chunk: Chunk, why: str, records_lost: Optional[int] = None) -> None:
        """Record that a whole chunk cannot be used (its content is invalid although its checksum holds)."""
        if records_lost is None:
            records_lost = records_in(chunk.table, len(chunk.payload))
        self._add(
            Damage(str(self.path), chunk.index, chunk.offset, chunk.nbytes, why, chunk.table or None, records_lost)
        )

    def _add(self, d: Damage) -> None:
        bisect.insort(self.damaged, d, key=lambda x: x.chunk)

    def warn(self, index: int, *texts: str) -> None:
        """Warnings about the chunk at `index` (-1: the file as a whole)."""
        for text in texts:
            bisect.insort(self.notes, (index, text), key=lambda note: note[0])

    def damage_warnings(self, limit: int = 10) -> list[str]:
        """One sentence per damaged chunk, the first `limit` of them, then one for the rest."""
        out = [d.sentence() for d in self.damaged[:limit]]
        rest = self.damaged[limit:]
        if rest:
            lost = sum(d.records_lost or 0 for d in rest)
            out.append(
                f"{self.path}: {len(rest)} more damaged chunk(s) skipped ({sum(d.nbytes for d in rest)} bytes, "
                f"{lost:,} recorded events known lost with them)"
            )
        return out

    def sentences(self) -> list[str]:
        """Everything said about this file: damaged chunks, repeated chunks, warnings, unknown descriptors."""
        out = self.damage_warnings()
        for other, n in self.repeats.items():
            if other == str(self.path):
                out.append(
                    f"{self.path}: {n} chunk(s) repeat earlier chunks of the same file word for word: each "
                    "was counted once"
                )
            else:
                out.append(
                    f"{self.path} repeats {n} chunk(s) of {other} (the same recording stored twice, e.g. a "
                    "copied raw file): each was counted once"
                )
        out += [text for _, text in self.notes]
        if self.unknown:
            n, chunks, where = self.unknown
            out.append(
                f"{self.path}: {n:,} recorded events in {chunks} chunk(s) name descriptors that no readable "
                f"descriptors chunk defines (first: {where.split(': ', 1)[1]}); they were left out"
            )
        return out

    def walk(self, data, base: int = 0, final: bool = True) -> Iterator[Chunk]:
        """Yield the whole chunks in `data` (the file's bytes from offset `base`, which is at most
        `self.offset`), from `self.offset` on; record torn or corrupt ones in `damaged`.

        A damaged stretch costs only itself: the walk resumes at the next chunk marker, so a corrupt
        chunk in the middle of a file does not hide the chunks after it. Every size is checked
        against the bytes there are before anything is sliced, so a lying length field never
        allocates more than the file holds. `final`: `data` runs to the end of a file that will
        not grow (a finished or killed recording). When it may still grow, the walk stops where a
        verdict would need bytes not written yet (`waiting` says why: a chunk not whole yet, a
        checksum failing at the very end, no next marker yet) and resumes there on the next call.
        """
        view = memoryview(data)
        pos, end = self.offset - base, len(data)
        self.waiting = ""
        try:
            while pos < end:
                if end - pos < _PREFIX.size:
                    if not final:
                        self.waiting, self.wanted = SHORT, base + pos + _PREFIX.size
                        return
                    self._damaged(
                        base + pos,
                        end - pos,
                        f"the chunk header is {CUT_SHORT}",
                    )
                    pos = end
                    return
                magic, head_len, payload_len, crc = _PREFIX.unpack_from(data, pos)
                if magic != MAGIC:
                    nxt = data.find(MAGIC, pos + 1)
                    if nxt < 0 and not final:
                        self.waiting = MARKER
                        return
                    stop = nxt if nxt >= 0 else end
                    self._damaged(base + pos, stop - pos, "no chunk marker (not a profview raw chunk)")
                    pos = stop
                    continue
                body = pos + _PREFIX.size
                stop = body + head_len + payload_len
                if stop > end:
                    if not final:
                        self.waiting, self.wanted = SHORT, base + stop
                        return
                    nxt = data.find(MAGIC, pos + 1)
                    head = data[body : body + head_len] if body + head_len <= end else None
                    if nxt < 0:
                        self._damaged(
                            base + pos,
                            end - pos,
                            f"the chunk is {CUT_SHORT}",
                            head,
                            payload_len,
                        )
                        pos = end
                        return
                    self._damaged(base + pos, nxt - pos, "its length field points past the end of the file", head, None)
                    pos = nxt
                    continue
                head = data[body : body + head_len]
                payload = view[body + head_len : stop]
                if zlib.crc32(payload, zlib.crc32(head)) != crc:
                    # The sizes are probably right when the next chunk starts where they say; else resynchronise.
                    if stop == end or data[stop : stop + 4] == MAGIC:
                        nxt = stop
                    elif not final and end - stop < 4 and MAGIC.startswith(bytes(data[stop:end])):
                        nxt = -1  # the next chunk's marker may be landing
                    else:
                        nxt = data.find(MAGIC, pos + 1)
                    if not final and (stop == end or nxt < 0):
                        self.waiting = CHECKSUM if stop == end else MARKER
                        return
                    nxt = nxt if nxt >= 0 else end
                    self._damaged(
                        base + pos,
                        nxt - pos,
                        "checksum mismatch (damaged bytes)",
                        head,
                        payload_len if nxt == stop else None,
                    )
                    pos = nxt
                    continue
                chunk = Chunk({}, payload, self.next_index, base + pos, crc, head_len)
                self.next_index += 1
                pos = stop
                header, why = checked_header(head, str(self.path))
                if header is None:
                    self.damage(chunk, why)
                    continue
                chunk.header = header
                if why:
                    self.damage(chunk, why)
                    continue
                yield chunk
        finally:
            self.offset = base + pos

    def _damaged(self, offset: int, nbytes: int, why: str, head=None, payload_len: Optional[int] = None) -> None:
        """A stretch of bytes that is no usable chunk (its header's table named when it can be parsed)."""
        table = None
        if head is not None:
            header = _parse_header(head)
            if isinstance(header, dict) and isinstance(header.get("table"), str):
                table = header["table"][:40]
        lost = records_in(table, payload_len) if table and payload_len is not None and table in RECORD_BYTES else None
        self._add(Damage(str(self.path), self.next_index, offset, nbytes, why, table, lost))
        self.next_index += 1


#: bytes per record of the binary tables
RECORD_BYTES = {"events": 16, "samples": 32}


def records_in(table: Optional[str], payload_len: int) -> Optional[int]:
    """How many records a binary table's payload of this size holds (None for other tables)."""
    size = RECORD_BYTES.get(table or "")
    return payload_len // size if size else (0 if table else None)


def _parse_header(head) -> Any:
    try:
        return json.loads(bytes(head))
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
        return None


def checked_header(head, name: str) -> tuple[Optional[dict], str]:
    """A chunk header parsed and checked: (header, "") when usable; (None, why) when it is not a JSON
    object; (header, why) when its version or table is invalid. A metadata chunk of a newer format
    is a ProfviewError (the whole file is of that format)."""
    header = _parse_header(head)
    if not isinstance(header, dict):
        return None, "its header is not a JSON object"
    v = header.get("v")
    if type(v) is not int or v < 1:
        return header, f"its header has no valid format version (v = {_show(v)})"
    if v > FORMAT_VERSION:
        if header.get("table") == "meta":
            raise ProfviewError(
                f"{name} was written by a newer profview (raw format v{v}); upgrade profview to read it."
            )
        return header, f"it says raw format v{v}, newer than this reader (v{FORMAT_VERSION})"
    if not isinstance(header.get("table"), str):
        return header, f"its header names no table (table = {_show(header.get('table'))})"
    return header, ""


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _kind_of(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def _read_bytes(path: Path, report: RawFile, populate: bool = True):
    """The file's bytes (memory-mapped when possible), or None with `report.unreadable` set.

    Never blocks and never reads past the size the file had when opened: it is opened with
    O_NONBLOCK (a FIFO does not wait for a writer), and anything but a regular file (a FIFO, a
    device such as /dev/zero, a directory) is refused before reading. A symlink loop or a dangling
    symlink fails at open. `populate`: fault every page in at once (the whole file will be read).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        report.unreadable = f"cannot be opened ({exc.strerror or exc})"
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.unreadable = f"is {_kind_of(st.st_mode)}, not a regular file"
            return None
        size = report.size = st.st_size
        if size == 0:
            return b""
        try:
            flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
            return mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
        except (ValueError, OSError, AttributeError):  # no mmap on this file system or platform
            parts, left = [], size
            while left > 0:
                part = os.read(fd, min(left, 1 << 24))
                if not part:
                    break
                parts.append(part)
                left -= len(part)
            return b"".join(parts)
    except OSError as exc:
        report.unreadable = f"cannot be read ({exc.strerror or exc})"
        return None
    finally:
        os.close(fd)


def read_raw_file(path: Path) -> RawFile:
    """The chunks of one raw file. The file is memory-mapped: the chunks are views of the pages the
    recording just wrote, not a copy (raw files only grow, so the mapping stays valid).

    A file that cannot be read (not a regular file, a broken symlink, an I/O error) gives a RawFile
    without chunks whose `unreadable` says why, and a warning; it never raises for that."""
    report = RawFile(path)
    data = _read_bytes(path, report)
    if data is None:
        report.warn(-1, f"{path} {report.unreadable}: skipped")
        return report
    report.chunks = list(report.walk(data))
    return report


#: r{rank}-p{pid}.pvraw, ASCII digits only
RAW_NAME = re.compile(r"r(\d{1,9})-p(\d{1,12})\.pvraw", re.ASCII)


def rank_of_name(name: str) -> Optional[int]:
    """The rank a raw file's name gives (r{rank}-p{pid}.pvraw), or None for any other name."""
    m = RAW_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


def find_raw_files(directory: Path) -> list[Path]:
    """Entries named *.pvraw in `directory/raw`, in a stable order (whatever they are: readers check)."""
    raw = directory / "raw"
    try:
        return sorted(raw.glob(f"*{RAW_SUFFIX}")) if raw.is_dir() else []
    except OSError:
        return []


def archive_previous_recording(directory: Path, rank: int) -> Path | None:
    """Move an earlier recording of `rank` (raw files and sidecars, `raw/r{rank}-*`) into
    `raw/previous/<time>/`, so a new recording into the same directory starts clean without
    losing the old one. Returns the archive folder, or None when there was nothing to move."""
    raw = directory / "raw"
    old = sorted(raw.glob(f"r{rank}-*")) if raw.is_dir() else []
    if not old:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = raw / "previous" / stamp
    n = 1
    while target.exists():
        n += 1
        target = raw / "previous" / f"{stamp}-{n}"
    target.mkdir(parents=True)
    for path in old:
        path.rename(target / path.name)
    return target

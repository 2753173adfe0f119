"""The raw store: append-only, versioned, self-describing chunk files under `profiler_data/raw/`.

A file holds one process's recording for one rank (`r{rank}-p{pid}.pvraw`) as a sequence of chunks:

    b"PVCK" | u32 header_len | u64 payload_len | u32 crc32(header + payload) | header | payload

The header is UTF-8 JSON naming the chunk's table and layout (`{"v": 1, "table": "events", ...}`);
the payload is the table's little-endian int64 words, or UTF-8 JSON for small metadata tables.
Each chunk is one `os.write` to a file opened with O_APPEND, so a process killed with SIGKILL
leaves whole chunks plus at most one torn one at the end; the reader detects that torn chunk
(short read or CRC mismatch), skips it and reports it.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from profiler.errors import ProfviewError

MAGIC = b"PVCK"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sIQI")       # magic, header_len, payload_len, crc32
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
        while view:                          # os.write may write less than asked (e.g. on a pipe)
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
    payload: memoryview          # a view into the file's bytes (no copy)

    @property
    def table(self) -> str:
        return self.header.get("table", "")

    def json(self) -> Any:
        return json.loads(bytes(self.payload))


@dataclass
class RawFile:
    """The chunks of one raw file, and what could not be read."""

    path: Path
    chunks: list[Chunk] = field(default_factory=list)
    torn_chunks: int = 0
    skipped_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def iter_chunks(data: bytes, name: str, report: RawFile) -> Iterator[Chunk]:
    """Yield the whole chunks of a raw file's bytes; record torn or corrupt ones in `report`."""
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < _PREFIX.size:
            _torn(report, name, pos, end - pos, "the chunk header is cut short")
            return
        magic, head_len, payload_len, crc = _PREFIX.unpack_from(data, pos)
        if magic != MAGIC:
            _torn(report, name, pos, end - pos, "no chunk marker (not a profview raw chunk)")
            return
        body = pos + _PREFIX.size
        stop = body + head_len + payload_len
        if stop > end:
            _torn(report, name, pos, end - pos, "the chunk is cut short (the run was probably killed while writing)")
            return
        head = data[body:body + head_len]
        payload = view[body + head_len:stop]
        if zlib.crc32(payload, zlib.crc32(head)) != crc:
            _torn(report, name, pos, stop - pos, "checksum mismatch")
            pos = stop
            continue
        header = json.loads(head)
        if int(header.get("v", 0)) > FORMAT_VERSION:
            raise ProfviewError(
                f"{name} was written by a newer profview (raw format v{header.get('v')}); "
                f"upgrade profview to analyse it."
            )
        yield Chunk(header, payload)
        pos = stop


def _torn(report: RawFile, name: str, offset: int, nbytes: int, why: str) -> None:
    report.torn_chunks += 1
    report.skipped_bytes += nbytes
    report.warnings.append(f"{name}: skipped a torn chunk at byte {offset} ({nbytes} bytes): {why}")


def read_raw_file(path: Path) -> RawFile:
    """The chunks of one raw file. The file is memory-mapped: the chunks are views of the pages the
    recording just wrote, not a copy (raw files only grow, so the mapping stays valid)."""
    report = RawFile(path)
    with open(path, "rb") as f:
        try:
            data = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                             prot=mmap.PROT_READ)
        except (ValueError, OSError, AttributeError):   # empty file, no mmap on this file system or platform
            data = f.read()
    report.chunks = list(iter_chunks(data, str(path), report))
    return report


def find_raw_files(directory: Path) -> list[Path]:
    """Raw files in `directory/raw`, in a stable order."""
    raw = directory / "raw"
    return sorted(raw.glob(f"*{RAW_SUFFIX}")) if raw.is_dir() else []


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


#: what `read_chunk_at` found at an offset
WHOLE = "whole"      # a whole chunk
SHORT = "short"      # fewer bytes than the chunk needs: a chunk still being written, or a torn tail
BAD = "bad"          # bytes that are no valid chunk (no marker, or a checksum mismatch)


def read_chunk_at(data, pos: int, name: str = "raw file") -> tuple[str, Chunk | None, int, str]:
    """The chunk that starts at byte `pos` of `data`: (WHOLE | SHORT | BAD, the chunk or None, the
    offset after it, why it is not whole). For an incremental reader (store/follow.py) of a file
    that is still growing: SHORT at the end may be a chunk whose write has not landed yet, so the
    reader keeps `pos` and retries; a checksum mismatch can be skipped (the offset after it is
    known), a missing marker cannot (the offset returned is `pos`)."""
    end = len(data)
    if end - pos < _PREFIX.size:
        return SHORT, None, pos, "the chunk header is cut short"
    magic, head_len, payload_len, crc = _PREFIX.unpack_from(data, pos)
    if magic != MAGIC:
        return BAD, None, pos, "no chunk marker (not a profview raw chunk)"
    body = pos + _PREFIX.size
    stop = body + head_len + payload_len
    if stop > end:
        return SHORT, None, pos, "the chunk is cut short (the run was probably killed while writing)"
    head = bytes(data[body:body + head_len])
    payload = memoryview(data)[body + head_len:stop]
    if zlib.crc32(payload, zlib.crc32(head)) != crc:
        return BAD, None, stop, "checksum mismatch"
    header = json.loads(head)
    if int(header.get("v", 0)) > FORMAT_VERSION:
        raise ProfviewError(f"{name} was written by a newer profview (raw format v{header.get('v')}); "
                            f"upgrade profview to read it.")
    return WHOLE, Chunk(header, payload), stop, ""

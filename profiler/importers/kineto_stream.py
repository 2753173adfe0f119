"""Reading a Kineto trace file a chunk of events at a time, so that the parsed JSON never exists whole.

Parsing the whole document held every event as a dict at once: several times the file (7.3 GB for a
0.94 GB trace). Here the file is read in blocks (gunzipped as they come), the event list is cut after
the last whole event of about `chunk_bytes` of text, that chunk is parsed (orjson when installed, else
json: the same parser as the whole-document reader) and turned into columns
(kineto_events.event_columns), and its dicts are dropped before the next chunk is read. The keys
before the event list (schemaVersion, deviceProperties, distributedInfo, ...) and after it are parsed
on their own.

Where a chunk ends: after a `}` followed by `,` or `]` from which the text parses as a list. A `}`
inside a string or inside an event leaves a string or a bracket open, so a chunk that parses ends on
an event of the list.

A file cut inside its event list (a job killed while torch.profiler wrote it) gives its complete
events and a `Cut`, as the whole-document reader does. Anything else the chunked reader does not
follow (damage, a cut before or after the event list, a later gzip member, a layout it does not
recognise) raises NotStreamable: the caller reads that file whole (kineto_events.load_trace), which
reports damage in its own words.
"""

from __future__ import annotations

import bisect
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Optional

from profiler.importers.kineto_events import (
    GZIP_MAGIC,
    Cut,
    EventColumns,
    complete_events,
    decoded_prefix,
    event_columns,
    loads_json,
)
from profiler.memory import give_back_freed_memory
from profiler.progress import current as current_progress

#: The text parsed at a time: the parsed events of one chunk take about 5-8x this in memory.
DEFAULT_CHUNK_BYTES = 16 << 20
#: Chunks whose columns are joined into one part as they come: a chunk's arrays (~350 KB at the default
#: size, below profiler/memory's mmap threshold) come from the C heap, which would otherwise grow by the
#: whole trace's columns and keep those pages after they are joined, under everything the import does next
#: (~300 MB for a 1 GB trace); a joined part's (~5 MB) get mappings of their own, given back when freed.
_JOINED_CHUNKS = 16
#: File bytes read at a time (gzip expands them 5-20x).
_BLOCK_BYTES = 1 << 20
#: The most the keys before or after the event list, or one event, may take: more is damage.
_MAX_SIDE_BYTES = _MAX_EVENT_BYTES = 64 << 20
_EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPACE = b" \t\r\n"
_COMMA, _CLOSE = ord(","), ord("]")


class NotStreamable(Exception):
    """The file is one the chunked reader does not follow: read it whole."""


@dataclass(frozen=True)
class StreamedTrace:
    """A trace file read in chunks: what run_from_kineto_trace needs of it."""

    header: dict[str, Any]  # the trace's top-level keys other than traceEvents
    columns: EventColumns
    items: int  # items of the event list, objects or not
    not_objects: int  # items that are not objects (skipped)
    cut: Optional[Cut]  # where the file is cut short, None when it is whole


def stream_trace(path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> StreamedTrace:
    """Read a Kineto trace (.json / .json.gz) chunk by chunk into event columns. Raises NotStreamable for
    a file to read whole instead."""
    try:
        with open(Path(path), "rb") as fh:
            gzipped = fh.read(2) == GZIP_MAGIC
            fh.seek(0)
            return _Reader(_Text(fh, gzipped), max(chunk_bytes, 1), Path(path).name).read()
    except OSError:
        raise NotStreamable from None


class _Text:
    """The file's JSON text, block by block, gunzipped when the file is gzip."""

    def __init__(self, fh: BinaryIO, gzipped: bool) -> None:
        self._fh = fh
        self._inflate = zlib.decompressobj(wbits=31) if gzipped else None
        self._members = 1
        self.size = 0  # bytes of text read so far
        self.gzip_ended = False  # the (first) gzip stream ends early
        self.file_bytes = os.fstat(fh.fileno()).st_size
        self.file_read = 0  # bytes of the file read so far (gzip: compressed)

    def read(self) -> bytes:
        """The next block of text; b"" at the end."""
        while True:
            raw = self._fh.read(_BLOCK_BYTES)
            self.file_read += len(raw)
            out = raw if self._inflate is None else self._gunzip(raw)
            if out or not raw:
                self.size += len(out)
                return out

    def _gunzip(self, raw: bytes) -> bytes:
        inflate = self._inflate
        if not raw:
            if not inflate.eof:
                if self._members > 1:  # a later member cut short: the whole-file reader refuses the file
                    raise NotStreamable
                self.gzip_ended = True
            return b""
        try:
            out = inflate.decompress(raw)
            while inflate.eof and inflate.unused_data:  # the next gzip member
                rest, self._members = inflate.unused_data, self._members + 1
                inflate = self._inflate = zlib.decompressobj(wbits=31)
                out += inflate.decompress(rest)
        except zlib.error:
            raise NotStreamable from None
        return out


class _Reader:
    """One pass over the text: the header, the event list in chunks, then the keys after it."""

    def __init__(self, text: _Text, chunk_bytes: int, name: str) -> None:
        self.text = text
        self.chunk_bytes = chunk_bytes
        self.name = name  # the file's, for the progress line
        self.reported = 0  # file bytes read when progress was last reported
        self.parts: list[EventColumns] = []  # joined parts of _JOINED_CHUNKS chunks each
        self.recent: list[EventColumns] = []  # the chunks since
        self.items = 0
        self.not_objects = 0

    def read(self) -> StreamedTrace:
        buf, at, header, bare = self._header()
        buf, at, closed = self._events(buf, at)
        if not closed:
            return self._result(header, self._cut(buf[at:]))
        header.update(self._tail(buf[at:], bare))
        return self._result(header, None)

    def _add(self, events: list[Any]) -> None:
        """The parsed items of one chunk, as columns (their dicts are dropped with `events`)."""
        columns, not_objects = event_columns(events)
        self.recent.append(columns)
        if len(self.recent) == _JOINED_CHUNKS:
            self.parts.append(EventColumns.concat(self.recent))
        self.items += len(events)
        self.not_objects += not_objects
        if self.text.file_read > self.reported:  # the file is read ahead of the chunks parsed: once per block
            self.reported = self.text.file_read
            current_progress().stage(f"reading {self.name}", self.reported, self.text.file_bytes)

    def _result(self, header: dict[str, Any], cut: Optional[Cut]) -> StreamedTrace:
        if self.recent:
            self.parts.append(EventColumns.concat(self.recent))
        columns = EventColumns.concat(self.parts) if self.parts else event_columns([])[0]
        give_back_freed_memory()  # the chunks' pieces: the run is built next, not on their pages
        return StreamedTrace(header, columns, self.items, self.not_objects, cut)

    def _more(self, buf: bytes, at: int, want: int) -> tuple[bytes, bool]:
        """buf[at:] with blocks appended until it holds `want` bytes; whether the text ended first."""
        blocks, size = [buf[at:]], len(buf) - at
        while size < want:
            block = self.text.read()
            if not block:
                return b"".join(blocks), True
            blocks.append(block)
            size += len(block)
        return b"".join(blocks), False

    def _header(self) -> tuple[bytes, int, dict[str, Any], bool]:
        """The text, where the event list's first item starts in it, the keys before the list, and
        whether the file is a bare event array (Chrome's "JSON array" format)."""
        buf, ended = b"", False
        while not buf.lstrip(_SPACE) and not ended:
            buf, ended = self._more(buf, 0, len(buf) + 1)
        first = len(buf) - len(buf.lstrip(_SPACE))
        if buf[first : first + 1] == b"[":
            return buf, first + 1, {}, True
        if buf[first : first + 1] != b"{":
            raise NotStreamable
        while (found := _EVENTS_START.search(buf)) is None:
            if ended or len(buf) > _MAX_SIDE_BYTES:
                raise NotStreamable
            buf, ended = self._more(buf, 0, len(buf) + 1)
        header = _parse(buf[: found.start()] + b'"traceEvents":[]}')
        if not isinstance(header, dict):
            raise NotStreamable
        header.pop("traceEvents")
        return buf, found.end(), header, False

    def _events(self, buf: bytes, at: int) -> tuple[bytes, int, bool]:
        """Read the event list in chunks from buf[at:] on: the text, where reading stopped in it, and
        whether the list closed there (past its `]`); else the text ended inside the list, and buf[at:] is
        what follows the last chunk."""
        ended = False
        while True:
            at = _after_separator(buf, at)
            if at < len(buf) and buf[at] == _CLOSE:
                return buf, at + 1, True
            if not ended and len(buf) - at < self.chunk_bytes:
                buf, ended = self._more(buf, at, self.chunk_bytes)
                at = 0
                continue
            chunk = _whole_events(buf, at)
            if chunk is None:
                if ended:
                    return buf, at, False
                if len(buf) - at > _MAX_EVENT_BYTES:  # no event ends in that much text: damage
                    raise NotStreamable
                buf, ended = self._more(buf, at, len(buf) - at + self.chunk_bytes)
                at = 0
                continue
            events, at = chunk
            del chunk  # it holds the events too: kept, the next chunk would be parsed beside this one's dicts
            self._add(events)
            del events  # the chunk's dicts go before the next chunk is read

    def _cut(self, remainder: bytes) -> Cut:
        """The complete events of the text after the last chunk, where the text ends inside the list."""
        text = decoded_prefix(remainder)
        if text is None:
            raise NotStreamable
        events, at, closed = complete_events(text, 0)
        if at is None or closed:  # damage, or a list that closes after an item that is not an object
            raise NotStreamable
        if events:
            self._add(events)
        return Cut(self.text.size, self.items, self.text.gzip_ended, events_complete=False)

    def _tail(self, rest: bytes, bare: bool) -> dict[str, Any]:
        """The keys after the event list (none for a bare array), the text there whole."""
        rest, ended = self._more(rest, 0, _MAX_SIDE_BYTES + 1)
        if not ended:
            raise NotStreamable
        rest = rest.strip(_SPACE)
        if bare:
            if rest:
                raise NotStreamable
            return {}
        if rest == b"}":
            return {}
        if rest[:1] != b",":
            raise NotStreamable
        keys = _parse(b"{" + rest[1:])
        if not isinstance(keys, dict) or "traceEvents" in keys:
            raise NotStreamable
        return keys


def _after_separator(buf: bytes, at: int) -> int:
    """Where the next item starts: past white space and one comma."""
    end = len(buf)
    while at < end and buf[at] in _SPACE:
        at += 1
    if at < end and buf[at] == _COMMA:
        at += 1
        while at < end and buf[at] in _SPACE:
            at += 1
    return at


#: Parses tried per chunk from its end, then from its start: a `}` followed by `,` or `]` rarely
#: ends anything but an event (a list of objects inside an event's args, text in a string).
_TRIES = 4


def _whole_events(buf: bytes, at: int) -> Optional[tuple[list[Any], int]]:
    """The items of buf[at:] up to its last whole event, parsed, and where they end; None when no event
    ends in it.

    Tried from the last place an event may end: where a parse fails, the parser read the text up to
    where it failed (JSONDecodeError.pos), so the next place tried is the last one before that (past the
    event list's `]` when the keys after it are in the text, before the half-read event at the end). When
    that does not find one, the first event that ends is taken.
    """
    ends = [m.start() + 1 for m in _ITEM_ENDS.finditer(buf, at)]
    limit = len(buf)
    for _ in range(_TRIES):
        last = bisect.bisect_left(ends, limit) - 1
        if last < 0:
            return None
        items, failed_at = _items(buf, at, ends[last])
        if items is not None:
            return items, ends[last]
        limit = min(ends[last], failed_at)
    for end in ends[:_TRIES]:
        items, _ = _items(buf, at, end)
        if items is not None:
            return items, end
    return None


def _items(buf: bytes, at: int, end: int) -> tuple[Optional[list[Any]], int]:
    """buf[at:end] parsed as the items of a list, or None and where in buf the parser stopped (`end` when
    it does not say)."""
    try:
        return loads_json(b"[" + buf[at:end] + b"]"), end
    except (ValueError, RecursionError) as err:
        failed_at = getattr(err, "pos", None)  # in "[" + buf[at:end]: buf[at + pos - 1]
        return None, at + failed_at - 1 if isinstance(failed_at, int) else end


#: Where an item may end: after a `}` followed (past white space) by `,` or `]`.
_ITEM_ENDS = re.compile(rb"\}(?=[ \t\r\n]*[,\]])")


def _parse(text: bytes) -> Any:
    try:
        return loads_json(text)
    except (ValueError, RecursionError):
        raise NotStreamable from None

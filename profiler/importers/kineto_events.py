"""Reading a Kineto (PyTorch profiler) Chrome trace file and turning its events into columns.

The per-event Python work is the JSON parse itself plus one pass that pulls the fields out of
every event; everything after that runs on whole numpy / pandas columns. Parsing uses orjson when it
is installed (an optional speed-up) and the standard json module otherwise, with the cyclic
garbage collector paused: a trace of a million events allocates millions of dicts, and letting
the collector re-scan them while they are built makes parsing about three times slower.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import re
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from profiler import spill
from profiler.errors import InputError, ProfviewError
from profiler.formats.documents import regular_file
from profiler.importers.base import CERTAIN, NOT_IT, SHAPED

try:
    import orjson
except ImportError:  # orjson is an optional speed-up
    orjson = None

#: The ops' and counters' source, and the runs' data origin.
SOURCE = "kineto"
GZIP_MAGIC = b"\x1f\x8b"
_NAN = float("nan")
#: How much of a file `trace_confidence` reads: the trace header and its first events.
_SNIFF_BYTES = 1 << 20
#: Kineto's header key (it comes before traceEvents) and the categories only Kineto writes.
_KINETO_HEADER = b'"schemaVersion"'
_KINETO_CATEGORY = re.compile(
    rb'"cat"\s*:\s*"(?:cpu_op|kernel|cuda_runtime|user_annotation|python_function|gpu_memcpy)"'
)


def loads_json(raw: bytes) -> Any:
    """Parse JSON text with orjson when available, else with the standard library."""
    if orjson is not None:
        return orjson.loads(raw)
    return json.loads(raw)


def dumps_compact(value: Any) -> str:
    """`value` as compact JSON text (no spaces), e.g. input shapes "[[4,3,32,32],[8]]"."""
    if orjson is not None:
        return orjson.dumps(value).decode()
    return json.dumps(value, separators=(",", ":"))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of containers are created."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_bytes(path: Path, limit: int = -1) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic (up to `limit` bytes)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic != GZIP_MAGIC:
            return fh.read(limit)
        with gzip.GzipFile(fileobj=fh) as gz:
            return gz.read(limit)


@dataclass(frozen=True)
class Cut:
    """Where a trace file cut short ends (a job killed while torch.profiler wrote it): what was read."""

    text_bytes: int  # the JSON text that was there (gunzipped), in bytes
    events: int  # the complete events read before the cut
    gzip_ended: bool  # the gzip stream itself ends early (else the JSON text does)
    events_complete: bool  # the cut came after the event list (only keys after it are lost)


def load_trace_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a .json / .json.gz Kineto trace into its top-level JSON object (a bare event array,
    Chrome's "JSON array" format, becomes {"traceEvents": [...]}); a trace cut short gives its
    complete events (`load_trace` says where it was cut).

    Raises ProfviewError (one sentence naming the file) when the file is missing or unreadable,
    is not a regular file (a FIFO would wait for a writer, /dev/zero never ends), is a corrupt
    gzip, is not JSON (or is nested too deeply to parse, or damaged before where it ends), does not
    fit in memory, or has no `traceEvents` list.
    """
    return load_trace(path)[0]


def check_trace_file(path: Path) -> None:
    """ProfviewError (one sentence) unless `path` is a regular file: reading a FIFO would wait for a
    writer, /dev/zero never ends."""
    try:
        regular_file(path, "Kineto trace", "trace file")
    except InputError as err:
        raise ProfviewError(f"{err}.") from None


def load_trace(path: str | os.PathLike[str]) -> tuple[dict[str, Any], Optional[Cut]]:
    """`load_trace_object`, and where the file was cut short (None when it is whole)."""
    path = Path(path)
    check_trace_file(path)
    gzip_ended = False
    try:
        try:
            raw = _read_bytes(path)
        except EOFError as err:  # the gzip stream ends early: what it holds up to there
            raw, gzip_ended = _gunzip_prefix(path, err), True
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ProfviewError(f"Kineto trace {path} is a corrupt or truncated gzip file ({err}).") from None
    except OSError as err:
        raise ProfviewError(f"Cannot read Kineto trace {path}: {err.strerror or err}.") from None
    except MemoryError:
        raise ProfviewError(f"Kineto trace {path} is too large to read into memory here.") from None
    cut: Optional[Cut] = None
    try:
        trace = loads_json(raw)
    except ValueError as err:  # json.JSONDecodeError and orjson.JSONDecodeError are ValueErrors
        salvaged = salvage_events(raw)
        if salvaged is None:
            what = "a corrupt or truncated gzip file" if gzip_ended else "not valid JSON"
            raise ProfviewError(f"Kineto trace {path} is {what} ({err}).") from None
        trace, events_complete = salvaged
        cut = Cut(len(raw), len(trace["traceEvents"]), gzip_ended, events_complete)
    except RecursionError:
        raise ProfviewError(f"Kineto trace {path} is not a trace: its JSON is nested too deeply to read.") from None
    except MemoryError:
        raise ProfviewError(f"Kineto trace {path} is too large to parse in the memory available here.") from None
    if isinstance(trace, list):  # Chrome's "JSON array" format: the events alone
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ProfviewError(f"{path} is not a Kineto trace: it has no traceEvents list.")
    return trace, cut


def _gunzip_prefix(path: Path, err: EOFError) -> bytes:
    """What a gzip file whose stream ends early decompresses to, up to where it ends; `err` again when
    its stream is whole and what ends early is something after it (a second member cut short)."""
    with open(path, "rb") as fh:
        stream = zlib.decompressobj(wbits=31)
        out = stream.decompress(fh.read())
    if stream.eof:
        raise err
    return out


_EVENTS_KEY = re.compile(r'"traceEvents"\s*:\s*\[')
_SPACE = re.compile(r"\s*")


def salvage_events(raw: bytes) -> Optional[tuple[dict[str, Any], bool]]:
    """The trace object of a JSON text cut short: its header keys and every complete event before the
    cut, and whether the event list itself was complete (the cut came after it). None when the text is
    damaged rather than cut: something other than its end fails to parse.

    Only the failed file takes this path (the whole file parses in one call otherwise): one C-scanner
    call per event, a brace count over the last, unfinished one.
    """
    text = decoded_prefix(raw)
    if text is None:
        return None
    start = _SPACE.match(text).end()
    if text.startswith("[", start):
        header: dict[str, Any] = {}
        at = start + 1
    else:
        found = _EVENTS_KEY.search(text)
        if not text.startswith("{", start) or found is None:
            return None
        try:
            header = json.loads(text[: found.start()] + '"traceEvents":[]}')
        except ValueError:
            return None
        if not isinstance(header, dict):
            return None
        at = found.end()
    events, at, closed = complete_events(text, at)
    if at is None:
        return None
    if closed and "}" in text[at:]:  # the list and the object after it are whole: damage, not a cut
        return None
    return {**header, "traceEvents": events}, closed


def decoded_prefix(raw: bytes) -> Optional[str]:
    """The text as UTF-8, a character cut at its very end left out; None when other bytes are not UTF-8."""
    for cut in range(4):
        try:
            return raw[: len(raw) - cut].decode("utf-8")
        except UnicodeDecodeError as err:
            if err.start < len(raw) - 4:
                return None
    return None


def complete_events(text: str, at: int) -> tuple[list[Any], Optional[int], bool]:
    """The events of a list starting at `at` up to where the text ends: (events, where reading stopped,
    whether the list was closed); where is None when an event before the end is damaged."""
    decoder = json.JSONDecoder()
    events: list[Any] = []
    end = len(text)
    while True:
        at = _SPACE.match(text, at).end()
        if at >= end:
            return events, at, False
        if text[at] == "]":
            return events, at + 1, True
        try:
            event, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            return (events, end, False) if _runs_to_the_end(text, at) else (events, None, False)
        events.append(event)
        at = _SPACE.match(text, at).end()
        if at < end and text[at] == ",":
            at += 1
        elif at < end and text[at] != "]":
            return events, None, False


def _runs_to_the_end(text: str, at: int) -> bool:
    """Whether the value starting at `at` is still open where the text ends (cut), rather than closed
    and invalid (damaged): its brackets counted outside strings."""
    depth, in_string, escaped = 0, False, False
    for i in range(at, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth <= 0:
                return False
        elif depth == 0 and c == ",":
            return False
    return True


def looks_like_kineto(path: str | os.PathLike[str]) -> bool:
    """True when the file (plain or gzip) starts like a Kineto trace (`trace_confidence` is CERTAIN)."""
    return trace_confidence(path) == CERTAIN


def trace_confidence(path: str | os.PathLike[str]) -> float:
    """How surely the file's content (plain or gzip) is a Kineto trace, from its first MiB only (cheap
    enough for a CLI to probe any file).

    CERTAIN: a JSON object with Kineto's `schemaVersion` header, or Chrome-trace JSON (an object with
    `traceEvents`, or the bare event array of Chrome's "JSON array" format) with a category only
    Kineto writes. SHAPED: Chrome-trace JSON without either. NOT_IT: anything else.
    """
    try:
        head = _read_bytes(Path(path), _SNIFF_BYTES).lstrip()
    except (OSError, EOFError, zlib.error):
        return NOT_IT
    if head[:1] == b"{":
        if _KINETO_HEADER in head:
            return CERTAIN
        shaped = b'"traceEvents"' in head
    else:
        shaped = head[:1] == b"[" and head[1:].lstrip()[:1] in (b"{", b"]")
    if not shaped:
        return NOT_IT
    return CERTAIN if _KINETO_CATEGORY.search(head) is not None else SHAPED


#: The dtype of a coded column's codes: a trace's columns have a few thousand distinct values, never 2**31.
CODES = np.int32


@dataclass(frozen=True)
class Coded:
    """A column as dense integer codes into its distinct values.

    Names, categories and stream ids repeat heavily in a trace (a million kernels have a few
    hundred distinct names), so a column is factorised once and any per-value Python work
    (`map`, also over `combine`d columns) is paid per distinct value, then spread back with one gather.
    """

    codes: np.ndarray  # CODES (int32) index into `values`
    values: list  # the distinct values

    @classmethod
    def of(cls, column: Sequence[Any] | np.ndarray) -> Coded:
        """Factorise a sequence of JSON values (unhashable ones count as None) or a numeric array."""
        if isinstance(column, np.ndarray) and column.dtype != object:
            codes, uniques = pd.factorize(column, use_na_sentinel=False)
            return cls(codes.astype(CODES), list(uniques))
        index: dict = {}
        add = index.setdefault
        try:  # a dict beats pd.factorize on Python strings (their hashes are cached)
            codes = [add(v, len(index)) for v in column]
        except TypeError:  # lists or dicts in malformed events
            index.clear()
            codes = [add(v if v.__hash__ is not None else None, len(index)) for v in column]
        return cls(np.asarray(codes, dtype=CODES), list(index))

    def __getitem__(self, rows: slice | np.ndarray) -> Coded:
        """These rows: a slice, a mask, or positions gathered a stretch of the column at a time (spill.taken)."""
        return Coded(spill.taken(self.codes, rows), self.values)

    def __len__(self) -> int:
        return len(self.codes)

    @classmethod
    def constant(cls, value: Any, n: int) -> Coded:
        return cls(np.zeros(n, dtype=CODES), [value])

    @classmethod
    def concat(cls, *parts: Coded) -> Coded:
        """The parts one after the other (values seen in several parts are merged, in first-seen order); the
        codes go straight into their place, in a spill file when big (profiler/spill.py)."""
        remap, uniques = pd.factorize(_object_array([v for p in parts for v in p.values]), use_na_sentinel=False)
        remap = remap.astype(CODES)
        codes = spill.empty(sum(len(p) for p in parts), CODES)
        at = offset = 0
        for part in parts:
            codes[at : at + len(part)] = remap[offset : offset + len(part.values)][part.codes]
            at, offset = at + len(part), offset + len(part.values)
            if spill.is_spilled(codes):
                spill.drop_resident()  # the part's pages and those just written
        return cls(codes, list(uniques))

    @classmethod
    def chunked(
        cls, n: int, make: Callable[[slice], Coded], rows: Optional[int] = None, along: Optional[np.ndarray] = None
    ) -> Coded:
        """The coded column of `n` rows made a chunk at a time (`make(positions)`), as one column: its temporaries
        stay a chunk's size (spill.chunked), each chunk's codes spilled until they are joined (they were the whole
        column's in memory: 240 MB for a 16 GB trace's host ops); values in first-seen order, as one column made
        whole has them. `rows`: a chunk's rows (default spill.CHUNK_ROWS); `along`: the n positions into big
        columns that `make` reads, a piece of them at a time within a stretch (spill.stretches), as spill.chunked."""
        pieces = list(spill.chunks(n, rows) if along is None else spill.stretches(along, rows))
        if len(pieces) <= 1:
            return make(slice(0, n))
        return cls.concat(*[make(at).spilled() for at in spill.paced(pieces, along)])

    def spilled(self) -> Coded:
        """The same column, its codes copied into a spill file when spilling and big enough (spill.spilled)."""
        return Coded(spill.spilled(self.codes), self.values)

    def _deduplicated(self) -> Coded:
        """The same column with each value once; the codes recoded a chunk at a time into a spill file when big (a
        big trace's host ops are millions of rows: their whole new codes stayed in memory while the ops were read)."""
        remap, uniques = pd.factorize(_object_array(self.values), use_na_sentinel=False)
        return Coded(spill.gathered(remap.astype(CODES), self.codes), list(uniques))

    def map(self, func: Callable[[Any], Any], dtype: Any = object) -> np.ndarray:
        """func(value) for every row, computed once per distinct value."""
        return _spread([func(v) for v in self.values], dtype)[self.codes]

    def mapped(self, func: Callable[[Any], Any]) -> Coded:
        """The coded column of func(value), computed once per distinct value."""
        return Coded(self.codes, [func(v) for v in self.values])._deduplicated()

    def decoded(self) -> np.ndarray:
        """The values themselves, as an object array."""
        return _spread(self.values, object)[self.codes]


def _spread(results: list, dtype: Any) -> np.ndarray:
    out = np.empty(len(results), dtype=dtype)
    for i, r in enumerate(results):  # per distinct value: tuples must not become array rows
        out[i] = r
    return out


def combine(*columns: Coded) -> Coded:
    """The rows' tuples of values of several equal-length coded columns, as one coded column."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        key = key * len(column.values) + column.codes
    codes, keys = pd.factorize(key)
    values: list = []
    for k in keys.tolist():
        parts = []
        for column in reversed(columns):
            k, code = divmod(k, len(column.values))
            parts.append(column.values[code])
        values.append(tuple(reversed(parts)))
    return Coded(codes.astype(CODES), values)


def dense_ids(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of the distinct rows of the integer columns, numbered in sorted order, and
    the index of one row per id (to read the distinct values back)."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        codes, uniques = pd.factorize(column, sort=True)
        key = key * max(len(uniques), 1) + codes
    ids, _ = pd.factorize(key, sort=True)
    first = np.zeros(ids.max(initial=-1) + 1, dtype=np.int64)
    first[ids[::-1]] = np.arange(len(ids) - 1, -1, -1)
    return ids.astype(np.int64), first


#: The args of complete ("X") events the importer reads, in the order `OpArgs.of` takes them.
_OP_ARG_KEYS = (
    "correlation",
    "device",
    "stream",
    "blocks per SM",
    "est. achieved occupancy %",
    "Input Dims",
    "Input type",
)
_NO_OP_ARGS = (None,) * len(_OP_ARG_KEYS)


def release_columns(columns: Any, *names: str) -> None:
    """Drop the named column fields of a reader's columns (EventColumns, OpArgs) once the run's tables no
    longer need them: the importer builds a big trace's op table next to its event columns, and each
    column it has used goes back at once. A released field is None: reading it again fails loudly."""
    for name in names:
        object.__setattr__(columns, name, None)  # frozen against edits, not against being spent
    spill.drop_resident()  # and the pages read of the columns kept, when spilled


@dataclass(frozen=True)
class OpArgs:
    """The args of complete events (ops, kernels, annotations) the importer reads, as columns.

    Turned into columns as the events are read, so that the args dicts (most of a parsed trace's
    memory) are dropped with their chunk. Each value is converted on its own row, so a trace read in
    chunks gives the same columns as one read whole.
    """

    correlation: np.ndarray  # int64 args["correlation"] (launch <-> kernel), -1 where absent
    device: np.ndarray  # int64 args["device"] of device events, -1 where absent or not a number
    stream: np.ndarray  # int64 args["stream"], -1 likewise
    blocks_per_sm: np.ndarray  # float32 kernel arg "blocks per SM", NaN where absent or not a number
    occupancy_pct: np.ndarray  # float32 kernel arg "est. achieved occupancy %"
    shapes: Coded  # "Input Dims" (record_shapes=True) as compact JSON text, "" where absent
    dtypes: Coded  # "Input type" (["double", "float", "Scalar"]) as compact JSON text, "" where absent

    @classmethod
    def of(cls, args: Sequence[Any]) -> OpArgs:
        """The columns of the events' args (an item that is not a dict has none of them)."""
        rows = [
            tuple(map(a.get, _OP_ARG_KEYS)) if a.__class__ is dict else _NO_OP_ARGS for a in args
        ]  # one pass, then a transpose (as `_fields`)
        correlation, device, stream, blocks, occupancy, dims, types = list(zip(*rows)) or [()] * len(_OP_ARG_KEYS)
        return cls(
            correlation=to_int(correlation, default=-1),
            device=to_int(device, default=-1),
            stream=to_int(stream, default=-1),
            blocks_per_sm=Coded.of(blocks).map(json_number, dtype=np.float32),
            occupancy_pct=Coded.of(occupancy).map(json_number, dtype=np.float32),
            shapes=Coded.of(["" if d is None else dumps_compact(d) for d in dims]),
            dtypes=Coded.of(_type_texts(types)),
        )

    @classmethod
    def concat(cls, parts: list[OpArgs]) -> OpArgs:
        """The parts' rows one after the other; `parts` is emptied (see `_concat_fields`)."""
        return cls(**_concat_fields(cls, parts))


@dataclass(frozen=True)
class SparseArgs:
    """The args of the events that have some (not None), by row: most events are complete ones, whose args are
    read into `OpArgs`, so a pointer per event (~140 MB for a 4 GB trace) would hold mostly None.

    An args object whose values are all plain numbers (a "[memory]" instant's, a "C" counter's) is kept as int64
    cells, its keys and value types once per distinct layout: ~70 B per event where its dict took ~420 B (a
    profile_memory trace has one per allocation, held to the end of the reading). `take` gives equal dicts back.
    Only the other args are objects (an object array never spills: a pointer per args row was 12 MB of Nones at
    16 GB), and a part's arrays spill whatever their size (`spill.SMALL`: 64 parts held 40 MB below the threshold)."""

    length: int  # the rows covered
    rows: np.ndarray  # int64, ascending: the rows with args
    values: np.ndarray  # object: the args not kept as cells, in row order
    layout: np.ndarray  # int32 per args row: its layout's index in `layouts`, -1 where its args are in `values`
    start: np.ndarray  # int64 per args row: where its cells begin, or (layout -1) its index in `values`
    cells: np.ndarray  # int64: the numbers, in their args' key order (a bool as 0 / 1, a float by its bits)
    layouts: tuple  # each distinct ((key, type), ...) of the args kept as cells

    @classmethod
    def of(cls, args: Sequence[Any]) -> SparseArgs:
        rows, values, layout, start, cells = [], [], [], [], []
        layouts: dict[tuple, int] = {}
        for i, a in enumerate(args):
            if a is None:
                continue
            plain = _plain_layout(a)
            rows.append(i)
            if plain:
                start.append(len(cells))
                layout.append(layouts.setdefault(plain, len(layouts)))
                cells.extend(_cell(v) for v in a.values())
            else:
                start.append(len(values))
                layout.append(-1)
                values.append(a)
        return cls(
            len(args),
            np.asarray(rows, dtype=np.int64),
            _object_array(values),
            np.asarray(layout, dtype=np.int32),
            np.asarray(start, dtype=np.int64),
            np.asarray(cells, dtype=np.int64),
            tuple(layouts),
        )

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The args of the given rows (None where they have none), as an object array."""
        out = np.full(len(rows), None, dtype=object)
        for at, positions, layout in self._groups(rows):
            if layout is None:
                out[positions] = self.values[self.start[at]]
            else:
                columns = [self._numbers(at, j, kind) for j, (_, kind) in enumerate(layout)]
                keys = [key for key, _ in layout]
                out[positions] = _object_array([dict(zip(keys, row)) for row in zip(*columns)])
        return out

    def arg(self, key: str, rows: np.ndarray, default: Any = None) -> list:
        """The value of `args[key]` for the given rows (`default` where absent), read from the cells without
        making the args' dicts."""
        out = np.empty(len(rows), dtype=object)
        out.fill(default)
        for at, positions, layout in self._groups(rows):
            if layout is None:
                out[positions] = _object_array(
                    [a.get(key, default) if a.__class__ is dict else default for a in self.values[self.start[at]]]
                )
            elif key in (keys := [k for k, _ in layout]):
                j = keys.index(key)
                out[positions] = _object_array(self._numbers(at, j, layout[j][1]))
        return out.tolist()

    def _groups(self, rows: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, Optional[tuple]]]:
        """The given rows that have args, by layout: (their args positions, their positions in `rows`, the layout,
        None for args kept as objects)."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(self.rows):
            return
        at = np.minimum(np.searchsorted(self.rows, rows), len(self.rows) - 1)
        found = np.flatnonzero(self.rows[at] == rows)
        layout = self.layout[at[found]]
        order = np.argsort(layout, kind="stable")
        numbers, first = np.unique(layout[order], return_index=True)
        for number, lo, hi in zip(numbers.tolist(), first.tolist(), [*first[1:].tolist(), len(order)]):
            positions = found[order[lo:hi]]
            yield at[positions], positions, None if number < 0 else self.layouts[number]

    def _numbers(self, at: np.ndarray, j: int, kind: type) -> list:
        """The `j`th value of the args at positions `at` (all of one layout), as `kind` values."""
        cells = self.cells[self.start[at] + j]
        return (cells.view(np.float64) if kind is float else cells.astype(bool) if kind is bool else cells).tolist()

    @classmethod
    def concat(cls, parts: list[SparseArgs]) -> SparseArgs:
        """The parts one after the other (the numbers in spilled arrays when spilling, whatever their size)."""
        offsets = np.cumsum([0, *[p.length for p in parts[:-1]]]).tolist()
        cell_offsets = np.cumsum([0, *[len(p.cells) for p in parts[:-1]]]).tolist()
        value_offsets = np.cumsum([0, *[len(p.values) for p in parts[:-1]]]).tolist()
        layouts: dict[tuple, int] = {}
        numbers = [np.array([*(layouts.setdefault(x, len(layouts)) for x in p.layouts), -1]) for p in parts]
        starts = [
            p.start + np.where(p.layout < 0, value_offset, cell_offset)
            for p, cell_offset, value_offset in zip(parts, cell_offsets, value_offsets)
        ]
        return cls(
            sum(p.length for p in parts),
            spill.concatenated([p.rows + offset for p, offset in zip(parts, offsets)], spill.SMALL),
            np.concatenate([p.values for p in parts]),
            spill.concatenated([number[p.layout].astype(np.int32) for p, number in zip(parts, numbers)], spill.SMALL),
            spill.concatenated(starts, spill.SMALL),
            spill.concatenated([p.cells for p in parts], spill.SMALL),
            tuple(layouts),
        )


#: The types of arg values `SparseArgs` keeps as int64 cells, and the int values that fit one.
_PLAIN_TYPES = frozenset((int, float, bool))
_INT64_RANGE = (-(2**63), 2**63 - 1)


def _plain_layout(args: Any) -> Optional[tuple]:
    """((key, type), ...) of an args dict whose values are all ints that fit int64, floats or bools; else None."""
    if args.__class__ is not dict or not args:
        return None
    kinds = tuple(v.__class__ for v in args.values())
    if not _PLAIN_TYPES.issuperset(kinds):
        return None
    low, high = _INT64_RANGE
    if any(v.__class__ is int and not low <= v <= high for v in args.values()):
        return None
    return tuple(zip(args, kinds))


def _cell(value: Any) -> int:
    """A plain number as an int64 cell: an int itself, a bool 0 / 1, a float its IEEE bits."""
    return struct.unpack("<q", struct.pack("<d", value))[0] if value.__class__ is float else int(value)


def _type_texts(types: Sequence[Any]) -> list[str]:
    """Input types as compact JSON text, "" when absent; each distinct list of names is written once."""
    texts: dict = {}

    def text(value: Any) -> str:
        if value is None:
            return ""
        key = tuple(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else None
        if key is None:
            return dumps_compact(value)
        if key not in texts:
            texts[key] = dumps_compact(value)
        return texts[key]

    return [text(t) for t in types]


def json_number(value: Any) -> float:
    """A JSON number as a float (an integer too large for one, text, true / false: NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return _NAN
    return _NAN


@dataclass(frozen=True)
class EventColumns:
    """The trace's events as parallel columns, one row per event object."""

    ph: Coded  # "X", "i", "C", "M", "s", "f", ...
    cat: Coded  # Kineto category ("cpu_op", "kernel", ...), None when absent
    name: Coded
    pid: np.ndarray  # float64: process id (host) or device id; NaN for Kineto's text lanes ("Spans")
    tid: np.ndarray  # float64: thread id (host) or stream id; NaN when not a number
    ts_us: np.ndarray  # float64 microseconds, NaN when absent or not a number
    dur_us: np.ndarray  # float64 microseconds, NaN when absent or not a number
    op_args: OpArgs  # the args complete events are read for
    other_args: SparseArgs  # the args of the other events (metadata, instants, counters)

    def __len__(self) -> int:
        return len(self.ts_us)

    def arg(self, key: str, rows: np.ndarray, default: Any = None) -> list:
        """The value of `args[key]` for the given rows of events that are not complete events
        (`default` where absent; complete events' args are in `op_args`)."""
        return self.other_args.arg(key, rows, default)

    @classmethod
    def concat(cls, parts: list[EventColumns]) -> EventColumns:
        """The parts' rows one after the other (the columns of a trace read in chunks); `parts` is emptied
        (see `_concat_fields`)."""
        return parts.pop() if len(parts) == 1 else cls(**_concat_fields(cls, parts))


def _concat_fields(cls: type, parts: list[Any]) -> dict[str, Any]:
    """Each column field of the dataclass `cls` over `parts`, the parts' rows one after the other.

    Takes the parts over (the list is emptied): each field's pieces are freed once joined, so a trace's
    columns are held about once while they are joined, not twice."""
    pieces = {f.name: [getattr(p, f.name) for p in parts] for f in fields(cls)}
    parts.clear()
    columns = {}
    for name in list(pieces):
        values = pieces.pop(name)
        if isinstance(values[0], Coded):
            columns[name] = Coded.concat(*values)
        elif isinstance(values[0], (OpArgs, SparseArgs)):
            columns[name] = type(values[0]).concat(values)
        else:
            columns[name] = spill.concatenated(values)
        del values
        spill.drop_resident()  # the pieces' and the column's pages, when spilled
    return columns


def _fields(events: Sequence[Any]) -> list[tuple]:
    """The fields every event may have, as one tuple per field (numbers NaN when absent).

    One pass building a tuple per event, then a transpose: about 40% faster than one list
    comprehension per field. Raises AttributeError on an item that is not an object.
    """
    nan = _NAN
    rows = [
        (
            e.get("ph"),
            e.get("cat"),
            e.get("name"),
            e.get("pid", nan),
            e.get("tid", nan),
            e.get("ts", nan),
            e.get("dur", nan),
            e.get("args"),
        )
        for e in events
    ]
    return list(zip(*rows)) or [()] * 8


def _object_array(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array (np.array would build 2-d arrays from equal-length lists)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _numbers(values: Sequence[Any]) -> np.ndarray:
    """Numbers as float64, as numpy converts a list of them (decimal text and true / false too); anything else
    (null, other text, lists, objects) as NaN."""
    try:
        numbers = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # Kineto's text pids ("Spans"): convert per distinct value
        numbers = None
    if numbers is None or numbers.ndim != 1:  # a value numpy cannot convert; or lists of one length (a 2-d array)
        return Coded.of(values).map(_number_or_nan, dtype=np.float64)
    return numbers


def _number_or_nan(value: Any) -> float:
    """One value as numpy converts it in a list it can convert whole, else NaN: the same number whatever the values
    beside it (a chunk of events with a text pid is converted a value at a time, its neighbour chunks whole)."""
    try:
        number = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return _NAN
    return float(number) if number.ndim == 0 else _NAN


#: torch 1.8's device lanes: `"tid": "stream 7"`.
_STREAM_TEXT = re.compile(r"^stream (\d{1,18})$")


def _lane_numbers(values: Sequence[Any]) -> np.ndarray:
    """Thread / stream ids as float64: numbers, decimal text, and torch 1.8's "stream N" device lanes
    (as N); anything else NaN."""
    numbers = _numbers(values)
    missing = np.flatnonzero(np.isnan(numbers))
    if len(missing):
        numbers[missing] = Coded.of([values[i] for i in missing.tolist()]).map(_lane_number, dtype=np.float64)
    return numbers


def _lane_number(value: Any) -> float:
    stream = _STREAM_TEXT.match(value) if value.__class__ is str else None
    return float(stream.group(1)) if stream else _number_or_nan(value)


def to_int(values: Sequence[Any], default: int) -> np.ndarray:
    """Integers as int64; anything that is not a number as `default`."""
    numbers = _numbers(values)
    return np.where(np.isfinite(numbers), numbers, default).astype(np.int64)


def event_columns(events: Sequence[Any]) -> tuple[EventColumns, int]:
    """Columns of the event objects, and how many list items were not objects (skipped)."""
    try:
        ph, cat, name, pid, tid, ts, dur, args = _fields(events)
    except AttributeError:  # an item that is not a JSON object
        objects = [e for e in events if isinstance(e, dict)]
        columns, _ = event_columns(objects)
        return columns, len(events) - len(objects)
    complete = [p == "X" for p in ph]
    columns = EventColumns(
        ph=Coded.of(ph),
        cat=Coded.of(cat),
        name=Coded.of(name),
        pid=_numbers(pid),
        tid=_lane_numbers(tid),
        ts_us=_numbers(ts),
        dur_us=_numbers(dur),
        op_args=OpArgs.of([a if c else None for a, c in zip(args, complete)]),
        other_args=SparseArgs.of([None if c else a for a, c in zip(args, complete)]),
    )
    return columns, 0


#: Unix time in microseconds of 2001-09-09: older traces without baseTimeNanoseconds write
#: Unix-epoch microseconds, which are all above this.
_UNIX_US_FLOOR = 1e15
#: Unix times at or beyond this (ns, year 2116) are not believed: absolute times stay int64 with room to spare.
_MAX_UNIX_NS = 2**62


@dataclass(frozen=True)
class Clock:
    """The run's origin, and the conversion of Kineto microseconds into int64 ns from it.

    The origin is a whole microsecond, so `ts - origin` is exact in float64 and the rounding
    to ns recovers the 3 decimals Kineto writes.
    """

    origin_us: int
    origin_unix_ns: int
    rule: str  # how origin_unix_ns was found

    @classmethod
    def of(cls, trace: Mapping[str, Any], origin_us: int) -> Clock:
        """Newer Kineto writes ts relative to `baseTimeNanoseconds` (Unix ns =
        base + ts_us * 1000); older traces write Unix-epoch microseconds directly."""
        base = trace.get("baseTimeNanoseconds")
        if isinstance(base, (int, float)) and not isinstance(base, bool) and 0 <= base < _MAX_UNIX_NS:
            unix = int(base) + origin_us * 1000
            if 0 <= unix < _MAX_UNIX_NS:
                return cls(origin_us, unix, "baseTimeNanoseconds + ts")
        if _UNIX_US_FLOOR <= origin_us and origin_us * 1000 < _MAX_UNIX_NS:
            return cls(origin_us, origin_us * 1000, "ts is Unix time in us")
        return cls(origin_us, 0, "unknown")

    def ns(self, ts_us: np.ndarray) -> np.ndarray:
        return np.rint((ts_us - self.origin_us) * 1000.0).astype(np.int64)

    @staticmethod
    def dur_ns(dur_us: np.ndarray) -> np.ndarray:
        return np.rint(dur_us * 1000.0).astype(np.int64)


def rows_where(values: np.ndarray, *wanted: int) -> np.ndarray:
    """np.flatnonzero(np.isin(values, wanted)) (int64), counted then written a chunk of rows at a time into a spilled
    array: no temporary of the trace's length (a byte per event for a mask, 8 per row found before its spill)."""
    return spill.flatnonzero(len(values), lambda at: np.isin(values[at], wanted), np.int64)

"""The event file's args table (docs/formats.md): the distinct args texts of the timeline's row heads, in
sorted order, which the heads index.

Every flow point has args of its own, `{"id": N}` (its correlation id): a big trace has millions. Held as
Python strings in a set, a sorted list and a dict from text to index, they took ~180 MB per GB of trace
while the event file was written. Here the flow texts are never held: their sorted order is computed from
the ids (a decimal text sorts digit by digit, and its closing brace after every digit), the few other
texts are placed among them by binary search, and the table's JSON is rendered from the ids a chunk at a
time. The result is the table `sorted(set(texts) | {flow texts})` gave, byte for byte.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator

import numpy as np

#: The args text of a flow point (`{"id": N}` as the event file writes JSON: no spaces).
FLOW_ARGS = '{{"id":{}}}'
#: Its JSON string, as json.dumps writes that text inside a list.
_FLOW_ARGS_JSON = '"{{\\"id\\":{}}}"'
#: Flow ids ordered arithmetically need at most this many decimal digits (11**18 < 2**63).
_MAX_DIGITS = 18
_CHUNK = 1 << 16


class ArgsTable:
    """The sorted distinct args texts of `texts` (the heads' own) and of one FLOW_ARGS per id of `flow_ids`
    (distinct, ascending), without a Python string per flow id."""

    def __init__(self, texts: Iterable[str], flow_ids: np.ndarray) -> None:
        self._ids = np.asarray(flow_ids, dtype=np.int64)
        self._by_text = _text_order(self._ids)  # flow ids' positions, their texts in sorted order
        flow_rank = np.empty(len(self._ids), dtype=np.int64)
        flow_rank[self._by_text] = np.arange(len(self._ids))
        self._own: list[str] = []  # the texts that are no flow text, sorted
        self._own_at: list[int] = []  # for each: how many flow texts sort before it
        self._codes: dict[str, int] = {}
        equal_flows = []  # (text, flow rank) of a text that is a flow's own
        for text in sorted(set(texts)):
            at = bisect.bisect_left(_FlowTexts(self), text)
            if at < len(self._ids) and self._flow_text(at) == text:
                equal_flows.append((text, at))
            else:
                self._own.append(text)
                self._own_at.append(at)
        own_at = np.asarray(self._own_at, dtype=np.int64)
        # a flow text's index: its rank among the flow texts plus the other texts before it
        self._flow_codes = flow_rank + np.searchsorted(own_at, flow_rank, side="right")
        for i, (text, at) in enumerate(zip(self._own, self._own_at)):
            self._codes[text] = i + at
        for text, at in equal_flows:
            self._codes[text] = int(at + np.searchsorted(own_at, at, side="right"))

    def __len__(self) -> int:
        return len(self._ids) + len(self._own)

    def code(self, text: str) -> int:
        """The index of one of the heads' own texts."""
        return self._codes[text]

    def flow_codes(self) -> np.ndarray:
        """The index of each flow id's text (int64, in the order of `flow_ids`)."""
        return self._flow_codes

    def __iter__(self) -> Iterator[str]:
        """The texts in order (for small tables and checks; the file is written by `json_text`)."""
        for kind, value in self._pieces():
            if kind == "own":
                yield value
            else:
                yield from (FLOW_ARGS.format(i) for i in value.tolist())

    def json_text(self) -> str:
        """The table as a JSON list, as json.dumps(list(self), ensure_ascii=False, separators=(",", ":"))
        writes it."""
        return "".join(self.json_pieces())

    def json_pieces(self) -> Iterator[str]:
        """`json_text` in pieces, rendered a chunk of flow ids at a time (the event file's metadata is written
        from them, without the whole text besides it)."""
        yield "["
        for i, (kind, value) in enumerate(self._pieces()):
            text = (
                json.dumps(value, ensure_ascii=False)
                if kind == "own"
                else ",".join(_FLOW_ARGS_JSON.format(flow_id) for flow_id in value.tolist())
            )
            yield ("," if i else "") + text
        yield "]"

    def _pieces(self) -> Iterator[tuple[str, object]]:
        """("own", text) and ("flows", ids in text order, at most _CHUNK) in table order."""
        done = 0
        for text, at in [*zip(self._own, self._own_at), (None, len(self._ids))]:
            for start in range(done, at, _CHUNK):
                yield "flows", self._ids[self._by_text[start : min(at, start + _CHUNK)]]
            done = at
            if text is not None:
                yield "own", text

    def _flow_text(self, rank: int) -> str:
        return FLOW_ARGS.format(int(self._ids[self._by_text[rank]]))


class _FlowTexts:
    """The flow texts in sorted order as a sequence bisect can search, each made when it is read."""

    def __init__(self, table: ArgsTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table._ids)

    def __getitem__(self, rank: int) -> str:
        return self._table._flow_text(rank)


def _text_order(ids: np.ndarray) -> np.ndarray:
    """The positions of `ids` in the sorted order of their FLOW_ARGS texts. The texts share `{"id":`, then
    compare digit by digit, and a shorter number's `}` sorts after every digit: each id is a base-11 number
    of its digits, left-aligned, padded with 10s. Negative or 19-digit ids are sorted by their texts."""
    if len(ids) == 0:
        return np.empty(0, dtype=np.int64)
    if ids.min() < 0 or ids.max() >= 10**_MAX_DIGITS:
        return np.asarray(sorted(range(len(ids)), key=lambda i: FLOW_ARGS.format(int(ids[i]))), dtype=np.int64)
    digits = np.searchsorted(10 ** np.arange(1, _MAX_DIGITS, dtype=np.int64), ids, side="right") + 1
    key = np.zeros(len(ids), dtype=np.int64)
    for place in range(int(digits.max())):
        below = digits - 1 - place  # the power of ten of this place's digit; < 0: past the last digit
        digit = (ids // 10 ** np.maximum(below, 0)) % 10
        key = key * 11 + np.where(below >= 0, digit, 10)
    return np.argsort(key, kind="stable")

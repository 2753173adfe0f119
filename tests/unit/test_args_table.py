"""The event file's args table built from the flow ids (profiler/export/args_table.py) against its definition:
the sorted distinct texts of the heads' args and of one {"id": N} per flow id, indexed by a dict."""

from __future__ import annotations

import json

import numpy as np
import pytest

from profiler.export.args_table import ArgsTable


def as_json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: Heads' own args texts: some sort among the flow texts, some equal one ({"id":7}), one is not JSON.
OWN_TEXTS = [
    '{"type":"aten::mm"}',
    '{"step":3}',
    '{"id":"x"}',
    '{"i":1}',
    '{"id":1',
    '{"id":15}',
    '{"id":7}',
    '{"é":1}',
]


@pytest.mark.parametrize("seed", range(12))
def test_the_table_is_the_sorted_distinct_texts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = np.concatenate(
        [
            rng.integers(0, 10 ** int(rng.integers(1, 13)), 300),
            [0, 1, 7, 9, 10, 11, 15, 99, 100, 101, 10**17, 10**18 - 1],
        ]
    )
    ids = np.unique(rng.choice(pool, int(rng.integers(0, len(pool))), replace=False))
    texts = {t for t in OWN_TEXTS if rng.random() < 0.6}
    want = sorted(texts | {as_json({"id": int(i)}) for i in ids})
    index = {text: i for i, text in enumerate(want)}

    table = ArgsTable(texts, ids)
    assert list(table) == want and len(table) == len(want)
    assert table.json_text() == as_json(want)  # the bytes the file's metadata holds
    assert {t: table.code(t) for t in texts} == {t: index[t] for t in texts}
    assert table.flow_codes().tolist() == [index[as_json({"id": int(i)})] for i in ids]


def test_ids_past_18_digits_and_no_flows() -> None:
    ids = np.array([5, 10**18, 10**18 + 7, 2**62], dtype=np.int64)
    want = sorted({as_json({"id": int(i)}) for i in ids})
    table = ArgsTable(['{"id":5}'], ids)
    assert list(table) == want and table.code('{"id":5}') == want.index('{"id":5}')
    assert table.flow_codes().tolist() == [want.index(as_json({"id": int(i)})) for i in ids]
    empty = ArgsTable(['{"b":1}', '{"a":2}'], np.empty(0, dtype=np.int64))
    assert list(empty) == ['{"a":2}', '{"b":1}'] and empty.json_text() == '["{\\"a\\":2}","{\\"b\\":1}"]'

"""The event file reader keeps the args table as its JSON text (event_file.JsonStrings, a string parsed when
read): the same strings as parsing the whole metadata, for texts with escaped quotes and backslashes across
the chunks its quotes are found in, and the same error for a damaged one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from profiler.export.event_file import JsonStrings, _json_strings, _parsed_meta

TEXTS = [
    '{"id":1}',
    'a "quoted" \\ text\\',
    "\\\\\\",
    '],"lanes":[{"x":"y"}]',
    "ünïcødé ✓",
    "",
    '{"id":22}',
] * 40


def _meta(args: list[str]) -> bytes:
    meta = {"format": "f", "names": ["a"], "categories": ["b"], "args": args, "lanes": [{"pid": 1, "t": '"x"'}]}
    text = json.dumps(meta, ensure_ascii=False, separators=(",", ":"))
    return (text[:-1] + ',"heads":{"ph":[88,115],"args":[-1,3]},"chrome":{"meta":[]}}').encode()


@pytest.mark.parametrize("args", [TEXTS, [], ["only one"]])
def test_the_args_text_reads_as_the_whole_metadata_parsed(args: list[str]) -> None:
    raw = _meta(args)
    whole = json.loads(raw)
    meta = _parsed_meta(raw)
    assert meta.pop("heads")["args"].tolist() == whole.pop("heads")["args"]
    assert isinstance(meta["args"], JsonStrings) and meta == whole
    assert [meta["args"][i] for i in range(len(args))] == args and meta["args"][1:3] == args[1:3]


def test_quotes_found_in_small_chunks_are_the_same_strings() -> None:
    raw = _meta(TEXTS)
    start = raw.index(b'"args":[') + len(b'"args":')
    for chunk in (1, 3, 1 << 16):  # 128 bytes and more: backslash runs across the chunks' edges
        end, texts = _json_strings(raw, start, raw.index(b',"heads"'), chunk)
        assert raw[end : end + len(b',"lanes"')] == b',"lanes"' and list(texts) == TEXTS


def test_a_damaged_args_string_is_refused_as_a_whole_parse_refuses_it() -> None:
    raw = _meta(TEXTS).replace(b"quoted", b"quo\\xted", 1)
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    with pytest.raises(json.JSONDecodeError):
        _parsed_meta(raw)


def test_args_that_are_not_strings_are_parsed_as_json() -> None:
    raw = _meta(TEXTS).replace(b'"args":["', b'"args":[1,"', 1)
    meta = _parsed_meta(raw)
    assert meta["args"][:2] == [1, TEXTS[0]] and isinstance(meta["args"], list)
    assert np.array_equal(meta["heads"]["ph"], [88, 115])

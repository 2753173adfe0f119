"""Text and values as an output file holds them: valid Unicode (`valid_text`), JSON values
(`plain_value`, `plain_document`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def valid_text(text: str) -> str:
    """`text` as valid Unicode: every lone surrogate escaped, the rest unchanged.

    Python strings may hold lone surrogates (`os.fsdecode(b"\\xff")` is "\\udcff"), which no UTF-8
    file can: an undecodable byte (U+DC80-U+DCFF) becomes the text `\\xNN` of that byte, any other
    lone surrogate `\\uXXXX`. Valid text (nearly always) is returned as it is, after one encode.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_escape_surrogate, text)
    return text


def valid_texts(values: Iterable[Any]) -> list[Any] | None:
    """The values with every str made `valid_text`, or None when none needed it (the usual case)."""
    values = list(values)
    try:
        "".join(values).encode("utf-8")
        return None
    except TypeError:  # not all text: check the strings one by one
        if all(not isinstance(v, str) or v == valid_text(v) for v in values):
            return None
    except UnicodeEncodeError:
        pass
    return [valid_text(v) if isinstance(v, str) else v for v in values]


# ---- JSON values --------------------------------------------------------------------------


def plain_value(value: Any, digits: Optional[int] = None) -> Any:
    """A value as an output JSON file holds it: numpy scalars as Python numbers, arrays as lists, a
    float that is not finite as None (JSON has no NaN), floats rounded to `digits` when given; text,
    whole numbers, booleans and None as they are; anything else as its str(). Also a json.dumps
    `default`."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if digits is not None else value
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def plain_document(doc: Any) -> Any:
    """A JSON document held in memory as a reader gets it back from its file, without the text:
    mappings with text keys, sequences as lists, every other value through plain_value."""
    if isinstance(doc, dict):
        return {_json_key(k): plain_document(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple, np.ndarray)):
        return [plain_document(v) for v in doc]
    return plain_value(doc)


def _json_key(key: Any) -> str:
    """A mapping key as a JSON object's key (json.dumps writes 1 as "1", True as "true", None as "null")."""
    key = plain_value(key)
    return key if isinstance(key, str) else json.dumps(key)

"""The JSON side of the output contract: `regular_file` (nothing but a regular file is opened), the
validated JSON readers (`read_json`, `read_profiler_info`), and the type of every key readers use
in the output documents (DOCUMENT_SCHEMAS, checked by `read_document`)."""

from __future__ import annotations

import functools
import itertools
import json
import os
import stat
from pathlib import Path
from typing import Annotated, Any, Optional, Union

import pydantic
from typing_extensions import TypedDict

from profiler.errors import InputError
from profiler.formats.columns import MAX_WHOLE, REPORT_DEVICE_COLUMNS
from profiler.formats.names import SCHEMA_VERSION


def regular_file(path: Path, what: str = "", noun: str = "file") -> os.stat_result:
    """os.stat of `path` (symlinks followed), or InputError when it cannot be read as a plain file:
    missing, a symlink loop, a directory, a FIFO, a device (/dev/zero), a socket. Opening a FIFO
    would wait for a writer and reading /dev/zero never ends, so nothing is opened before this."""
    label = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{label} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read {label}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a named pipe (FIFO)"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "not a regular file"
        )
        raise InputError(f"{label} is {kind}, not a {noun}")
    return st


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning every failure into one sentence naming the file.

    Strict RFC 8259: NaN / Infinity literals (which Python's json would accept), invalid UTF-8 and
    documents nested deeper than the parser's recursion limit are refused.
    """
    regular_file(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise InputError(f"{path} is empty (was the run interrupted while writing it?)")
    try:
        return json.loads(data, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}): it may be truncated "
            "or not a profview file"
        ) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: it is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # a NaN / Infinity literal (parse_constant), an over-long integer
        what = (
            f"a {exc} literal, which JSON does not allow"
            if str(exc) in ("NaN", "Infinity", "-Infinity")
            else "a number Python cannot read"
        )
        raise InputError(f"{path} is not valid JSON: it holds {what}") from None
    except RecursionError:
        raise InputError(f"{path} is not a profview file: its JSON is nested too deeply to read") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object (profiler_info, report, queue and cluster summaries)."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise InputError(f"{path} is malformed: expected a JSON object")
    return value


#: What readers rely on in profiler_info_{rank}.json: field -> (JSON types allowed, what to say).
#: Absent fields are fine (older files, imports); a present one of another type is refused.
INFO_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "schema_version": ((int,), "a whole number"),
    "rank": ((int,), "a whole number"),
    "world_size": ((int,), "a whole number"),
    "outputs": ((list,), "a list of file names"),
    "warnings": ((list,), "a list of sentences"),
    "source_path": ((str,), "a path (text)"),
    "host": ((str,), "text"),
    "data_origin": ((str,), "text"),
    "recording": ((dict,), "an object"),
    "sources": ((dict,), "an object"),
    "clock": ((dict,), "an object"),
    "steps": ((dict,), "an object"),
    "overhead": ((dict,), "an object"),
    "config": ((dict,), "an object"),
    "timeline": ((dict,), "an object"),
}


def read_profiler_info(path: Path) -> dict[str, Any]:
    """profiler_info_{rank}.json, with the fields readers use checked (INFO_FIELDS), a newer schema
    refused, and every listed output a file name (no directory part)."""
    info = read_json_object(path)
    for key, (types, meaning) in INFO_FIELDS.items():
        if key not in info:
            continue
        value = info[key]
        if not isinstance(value, types) or isinstance(value, bool):
            if key == "source_path" and value is None:
                continue
            raise InputError(f"{path} is malformed: {key} should be {meaning}, not {_shown(value)}")
    version = info.get("schema_version", SCHEMA_VERSION)
    if version > SCHEMA_VERSION or version < 1:
        raise InputError(
            f"{path} has schema version {version}, "
            + (
                f"newer than this profview reads ({SCHEMA_VERSION}); upgrade profview"
                if version > SCHEMA_VERSION
                else "which no profview writes"
            )
        )
    outputs = info.get("outputs", [])
    bad = [
        name
        for name in outputs
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", "..")
    ]
    if bad:
        raise InputError(f"{path} is malformed: outputs lists {_shown(bad[0])}, which is not a file name")
    if not all(isinstance(w, str) for w in info.get("warnings", [])):
        raise InputError(f"{path} is malformed: warnings should be a list of sentences")
    return info


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- JSON documents: the type of every key readers use --------------------------------------

#: Leaf types of a document schema. Numbers may be null: the writer writes a float that is not
#: finite as null (plain_value), and readers treat it as "no value".
NUMBER: tuple[type, ...] = (int, float, type(None))
#: A number the writer always has (a threshold in force): never null.
FIGURE: tuple[type, ...] = (int, float)
WHOLE: tuple[type, ...] = (int, type(None))
TEXT: tuple[type, ...] = (str,)
TEXT_OR_NULL: tuple[type, ...] = (str, type(None))
FLAG: tuple[type, ...] = (bool,)
#: An object whose keys are not fixed (a queue name, a rank): "*" gives the type of every value.
ANY_KEY = "*"


class Nullable(tuple):
    """A document schema node that may also be null (`Nullable((spec,))`): an object or list the
    writer leaves null when it has nothing (`straggler`, a `verdict` without queues)."""


def nullable(spec: Any) -> Nullable:
    return Nullable((spec,))


_FINDING = {
    "kind": TEXT,
    "key": TEXT,
    "severity": TEXT,
    "title": TEXT,
    "at_stake_ms": NUMBER,
    "at_stake_pct": NUMBER,
    "evidence": TEXT,
    "threshold": TEXT,
    "suggestion": TEXT,
    "files": [TEXT],
    "metrics": {ANY_KEY: NUMBER},
    "rank": WHOLE,
}

#: The type of every key of the output JSON documents (report, queue_summary, cluster_summary) that
#: some reader uses: a dict is an object (its keys checked when present, others ignored; ANY_KEY for
#: every key), a one-item list a list of that item, a tuple of types a value. `read_document` checks
#: a document against its schema once, at the edge, so the viewer, `compare` and `--summary` can use
#: the values without re-checking; an absent key is fine (older files, imports).
DOCUMENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "report": {
        "schema_version": WHOLE,
        "verdict": TEXT,
        "headline": TEXT,
        "framework": TEXT,
        "steps": {
            "analysed": WHOLE,
            "warmup_skipped": WHOLE,
            "outliers": WHOLE,
            "steady": WHOLE,
            "rule": TEXT,
            "mean_ms": NUMBER,
            "median_ms": NUMBER,
            "wall_ms": NUMBER,
            "mean_phase_ms": {ANY_KEY: NUMBER},
            "share_pct": {ANY_KEY: NUMBER},
            "op_captured_steps": WHOLE,
            "data_wait_measured": FLAG,
            "source": TEXT,
            "source_note": TEXT,
        },
        "thresholds": {ANY_KEY: FIGURE},
        "findings": [_FINDING],
        "devices": [{**dict.fromkeys(REPORT_DEVICE_COLUMNS, NUMBER), "device": TEXT}],
        "profiler_cost": {"overhead_ms_per_step": NUMBER, "overhead_pct": NUMBER, "memory_mb": {ANY_KEY: NUMBER}},
    },
    "queue_summary": {
        "schema_version": WHOLE,
        "thresholds": {"empty_ratio_warning": FIGURE, "full_ratio_line": FIGURE, "meaning": TEXT},
        "verdict": {
            "kind": TEXT,
            "reason": TEXT,
            "feed_queue": TEXT_OR_NULL,
            "host_queue": TEXT_OR_NULL,
            "device_queue": TEXT_OR_NULL,
            "bottleneck_stage": TEXT_OR_NULL,
        },
        "queues": [
            {
                "queue": TEXT,
                "role": TEXT,
                "producer": TEXT,
                "consumer": TEXT,
                "capacity": NUMBER,
                "samples": NUMBER,
                "puts": NUMBER,
                "gets": NUMBER,
                "empty_ratio": NUMBER,
                "full_ratio": NUMBER,
                "put_full_ratio": NUMBER,
                "time_empty_ratio": NUMBER,
                "time_full_ratio": NUMBER,
                "mean_size": NUMBER,
                "max_size": NUMBER,
                "span_ms": NUMBER,
                "get_wait_ms": NUMBER,
                "get_wait_mean_ms": NUMBER,
                "get_wait_per_step_ms": NUMBER,
                "put_wait_ms": NUMBER,
            }
        ],
        "pipeline": {
            "stages": [
                {
                    "stage": TEXT,
                    "depth": NUMBER,
                    "input_queue": TEXT_OR_NULL,
                    "output_queue": TEXT_OR_NULL,
                    "input_full_ratio": NUMBER,
                    "output_empty_ratio": NUMBER,
                    "slow": FLAG,
                }
            ],
            "bottleneck_stage": TEXT_OR_NULL,
        },
        "totals": {ANY_KEY: NUMBER},
        "steps": [
            {
                "step": NUMBER,
                "iteration_gap_ms": NUMBER,
                "data_wait_ms": NUMBER,
                "gap_wait_ms": NUMBER,
                "gap_wait_pct": NUMBER,
                "get_wait_ms": {ANY_KEY: NUMBER},
            }
        ],
    },
    "cluster_summary": {
        "schema_version": WHOLE,
        "ranks": {
            "world_size": WHOLE,
            "profiled": [WHOLE],
            "present": [WHOLE],
            "missing": [WHOLE],
            "not_profiled": [WHOLE],
            "stopped_early": {ANY_KEY: {}},
            "last_step": WHOLE,
        },
        "clock": {
            "method": TEXT,
            "reference_rank": WHOLE,
            "origin_unix_ns": WHOLE,
            "max_uncertainty_ns": NUMBER,
            "per_rank": {ANY_KEY: {}},
        },
        "steps": {ANY_KEY: WHOLE},
        "per_rank": [{ANY_KEY: NUMBER}],
        "straggler": nullable(
            {
                "rank": WHOLE,
                "slowest_share_pct": NUMBER,
                "excess_ms": NUMBER,
                "phase": TEXT,
                "phase_excess_ms": {ANY_KEY: NUMBER},
                "others_wait_ms": NUMBER,
            }
        ),
        "communication": {ANY_KEY: NUMBER},
        "findings": [_FINDING],
        "warnings": [TEXT],
        "devices": [{ANY_KEY: (int, float, str, type(None))}],
        "device_time": [{**dict.fromkeys(REPORT_DEVICE_COLUMNS, NUMBER), "device": TEXT, "rank": WHOLE}],
        "timeline_ranks": [WHOLE],
        "timeline": {
            "file": TEXT,
            "content": TEXT,
            "events": WHOLE,
            "events_written": WHOLE,
            "max_events": WHOLE,
            "steps": [WHOLE],
            "median_step": WHOLE,
            "slowest_step": WHOLE,
            "outlier_steps": [WHOLE],
            "outlier_steps_left_out": [WHOLE],
            "rest": TEXT,
        },
        "outputs": [TEXT],
    },
}


def _meaning(spec: Any) -> str:
    """What a schema node asks for, in words."""
    if isinstance(spec, Nullable):
        return _meaning(spec[0]) + " or null"
    if isinstance(spec, dict):
        return "an object"
    if isinstance(spec, list):
        return "a list"
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
    words = [names[t] for t in spec if t is not type(None) and not (t is int and float in spec)]
    return " or ".join(words) + (" or null" if type(None) in spec else "")


def document_problem(doc: Any, kind: str) -> Optional[str]:
    """Where `doc` breaks the schema of `kind` (DOCUMENT_SCHEMAS), in words ("verdict should be an object,
    not \"x\""), or None. Checked by pydantic in strict mode (booleans are not numbers, no text is read as
    a number) against types made from the schema (`document_type`); the first error makes the sentence."""
    try:
        _adapter(kind).validate_python(doc, strict=True)
        return None
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
    path = _in_document(doc, error["loc"])
    where = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")
    if error["type"] in ("less_than", "greater_than"):
        return f"{where} is {_shown(error['input'])}, beyond what a 64-bit number can hold"
    wanted = _meaning(_spec_at(DOCUMENT_SCHEMAS[kind], path))
    return f"{where or 'the document'} should be {wanted}, not {_shown(error['input'])}"


@functools.cache
def _adapter(kind: str) -> pydantic.TypeAdapter:
    """The pydantic validator of one kind of document, made once (on first use: pydantic's import and the
    validator's build stay off the paths that read no document)."""
    return pydantic.TypeAdapter(document_type(DOCUMENT_SCHEMAS[kind]))


#: A JSON number within what a 64-bit count or clock holds.
_NUMBER = Annotated[Union[int, float], pydantic.Field(gt=-MAX_WHOLE, lt=MAX_WHOLE)]
_WHOLE = Annotated[int, pydantic.Field(gt=-int(MAX_WHOLE), lt=int(MAX_WHOLE))]
_kinds = itertools.count()


def document_type(spec: Any) -> Any:
    """The Python type a schema node stands for (typed dicts with optional keys for objects with known
    keys, dicts for ANY_KEY, lists, unions of the allowed JSON types), for pydantic to check."""
    if isinstance(spec, Nullable):
        return Optional[document_type(spec[0])]
    if isinstance(spec, dict):
        known = {key: document_type(item) for key, item in spec.items() if key != ANY_KEY}
        if not known:
            return dict[str, document_type(spec[ANY_KEY]) if ANY_KEY in spec else Any]
        return TypedDict(f"Document{next(_kinds)}", known, total=False)
    if isinstance(spec, list):
        return list[document_type(spec[0])]
    types = [
        _NUMBER if t is float else _WHOLE if t is int else t
        for t in spec
        if t is not type(None) and not (t is int and float in spec)
    ]
    single = types[0] if len(types) == 1 else Union[tuple(types)]
    return Optional[single] if type(None) in spec else single


def _in_document(doc: Any, loc: tuple) -> list[Any]:
    """The part of a pydantic error location that is a path in the document (the rest names union members)."""
    path, node = [], doc
    for step in loc:
        if (
            isinstance(node, dict)
            and step in node
            or isinstance(node, list)
            and isinstance(step, int)
            and step < len(node)
        ):
            path.append(step)
            node = node[step]
        else:
            break
    return path


def _spec_at(spec: Any, path: list[Any]) -> Any:
    """The schema node of the document's value at `path`."""
    for step in path:
        if isinstance(spec, Nullable):
            spec = spec[0]
        spec = spec[0] if isinstance(spec, list) else spec.get(step, spec.get(ANY_KEY, {}))
    return spec


def read_document(path: Path, kind: str) -> dict[str, Any]:
    """An output JSON document of `kind` (a DOCUMENT_SCHEMAS key), its types checked: one sentence
    naming the file and the key when a value has the wrong JSON type."""
    doc = read_json_object(path)
    problem = document_problem(doc, kind)
    if problem:
        raise InputError(f"{path} is malformed: {problem}")
    return doc

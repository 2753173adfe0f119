"""The event file's metadata written a piece at a time (event_file._metadata: the args table and the heads, one
per flow point, rendered in chunks into one buffer) is the compact JSON of the whole metadata, byte for byte."""

from __future__ import annotations

import json

import pytest

from profiler.analysis.steps import ensure_steps
from profiler.export.event_file import _header, _metadata
from profiler.export.timeline_model import timeline_events
from profiler.importers.kineto import read_kineto_trace


@pytest.mark.parametrize("capture", ["alexnet", "nccl_data"])
def test_the_metadata_in_pieces_is_the_json_of_the_whole(captures, capture: str) -> None:
    run = ensure_steps(read_kineto_trace(captures / "kineto" / f"{capture}.json.gz"))
    header = _header(timeline_events(run))
    meta = {"format": "f", "version": 2, "names": header["names"], "categories": header["categories"]}
    heads = header["heads"]
    whole = {
        **meta,
        "args": list(header["args"]),
        "lanes": header["lanes"],
        "heads": {name: values.tolist() for name, values in heads.items()},
        "chrome": header["chrome"],
    }
    expected = json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()
    assert _metadata(meta, header["args"], header["lanes"], heads, header["chrome"]) == expected
    assert len(heads["ph"]) > 100 and len(header["args"]) > 50  # not vacuous: flow points, their ids as args

"""events_{rank}.arrow (docs/formats.md): a row holds its start, duration (a flow point: its id), step and head
(24 bytes), the heads table holds each distinct phase, lane, name, category and args once, and every
field reads as version 1 stored it. The committed example profile's files are version 1 and a committed
import of a GPU capture is version 2 (a head per flow point, its id in the args): they still open, export
their Chrome trace and build their timeline page, and the same events written again in the current version
give the same fields, row index, Chrome trace and page."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pytest

from profiler import spill
from profiler.errors import InputError
from profiler.export import event_file
from profiler.export.chrome_from_events import write_trace_from_events
from profiler.export.event_file import EventFile, EventStreamWriter, read_event_file
from profiler.formats.columns import (
    EVENT_COLUMNS,
    EVENT_FIELD_DTYPES,
    EVENT_FILE_COLUMNS,
    EVENT_FILE_VERSION,
    EVENT_HEAD_FIELDS,
)
from viewer.context import Context
from viewer.inputs import load_input
from viewer.pages import timeline

from support.viewer_fixtures import Spec, write_run

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_runs" / "example_profile").iterdir())
FIELDS = [name for name in EVENT_FIELD_DTYPES if name != "head"]
#: What the row index of the last batch says, but for its batch sizes (the rewrite cuts smaller batches).
INDEX_KEYS = ("rows", "complete_rows", "phase_rows", "lane_complete", "lane_index_step", "lane_index")


def head_codes(f: EventFile) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A version-1 file's distinct row heads (a table per head field) and each row's head code."""
    stacked = np.stack([f.column(name).astype(np.int64) for name, _ in EVENT_HEAD_FIELDS], axis=1)
    table, codes = np.unique(stacked, axis=0, return_inverse=True)
    return {name: table[:, i] for i, (name, _) in enumerate(EVENT_HEAD_FIELDS)}, codes.reshape(-1)


def rewrite_as_current(v1: Path, path: Path) -> Path:
    """The version-1 file's events (no flow points) written again by EventStreamWriter: the same rows, tables and
    `chrome`."""
    f = read_event_file(v1)
    heads, codes = head_codes(f)
    rows = {"start_ns": f.column("start_ns"), "dur_ns": f.column("dur_ns"), "step": f.column("step"), "head": codes}
    with EventStreamWriter(
        path,
        rank=f.meta["rank"],
        names=f.names,
        categories=f.categories,
        args=f.args,
        heads=heads,
        lanes=f.lanes,
        data_origin=f.meta["data_origin"],
        origin_unix_ns=f.meta["origin_unix_ns"],
        chrome=f.meta["chrome"],
    ) as w:
        w.write({k: v[: f.complete_rows] for k, v in rows.items()})
        w.write({k: v[f.complete_rows :] for k, v in rows.items()}, complete=False)
    return path


def batches(path: Path) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The file's Arrow schema and record batches, as any Arrow reader sees them."""
    reader = pa.ipc.open_file(pa.OSFile(str(path)))
    return reader.schema, [reader.get_batch(i) for i in range(reader.num_record_batches)]


def assert_head_coded_layout(path: Path) -> None:
    """The four columns of EVENT_COLUMNS and nothing else in the rows: 24 bytes a row."""
    schema, found = batches(path)
    assert [(field.name, field.type.to_pandas_dtype().__name__) for field in schema] == list(EVENT_COLUMNS)
    assert schema.names == ["start_ns", "dur_ns", "step", "head"]
    assert sum(b.nbytes for b in found) == 24 * sum(b.num_rows for b in found) > 0


def chrome_trace(f: EventFile) -> bytes:
    out = io.BytesIO()
    write_trace_from_events(f, out)
    return out.getvalue()


@pytest.fixture(params=EXAMPLES, ids=[d.name for d in EXAMPLES])
def example(request, tmp_path, monkeypatch) -> tuple[Path, Path]:
    """An example run (version 1) and a copy whose event file is written again in the current version, in batches of
    1,000 rows (so ranges cross batches)."""
    copy = shutil.copytree(request.param, tmp_path / request.param.name)
    monkeypatch.setattr(event_file, "BATCH_ROWS", 1000)
    rewrite_as_current(request.param / "events_0.arrow", copy / "events_0.arrow")
    return request.param, copy


def test_the_current_version_stores_start_duration_step_and_head(example):
    v1, current = (read_event_file(d / "events_0.arrow") for d in example)
    assert (v1.meta["version"], current.meta["version"]) == (1, EVENT_FILE_VERSION) == (1, 3)
    assert batches(v1.path)[0].names == list(EVENT_FILE_COLUMNS[1])
    assert_head_coded_layout(current.path)
    assert len(batches(current.path)[1]) > 3
    assert len(current.head_table["ph"]) < current.rows / 10  # what rows share is stored once


def flow_rows(f: EventFile) -> range:
    """The file's flow points: its last rows."""
    return range(f.rows - f.meta["phase_rows"].get("s", 0) - f.meta["phase_rows"].get("f", 0), f.rows)


def test_an_imported_gpu_capture_has_a_head_per_flow_phase_and_lane(tmp_path, captures):
    """The event file every analysis and import writes (write_run_events): a flow point's id is its dur_ns and its
    head is shared by the points of its phase and lane, so the metadata does not grow with the flows."""
    from profiler.postprocess.imported import import_capture

    import_capture(captures / "kineto" / "sampled_rank-0.json.gz", tmp_path)
    f = read_event_file(tmp_path / "events_0.arrow")
    flows = flow_rows(f)
    assert f.meta["version"] == 3 and f.meta["phase_rows"]["s"] == f.meta["phase_rows"]["f"] > 1000
    assert_head_coded_layout(f.path)
    ph, lane, head = (f.column(name, flows.start, flows.stop) for name in ("ph", "lane", "head"))
    assert (ph[0::2] == ord("s")).all() and (ph[1::2] == ord("f")).all()
    assert len(np.unique(head)) == len({(p, k) for p, k in zip(ph.tolist(), lane.tolist())}) < 10
    assert (f.column("args", flows.start, flows.stop) == -1).all() and not any('"id"' in a for a in f.args)
    ids = f.flow_ids(flows.start, flows.stop)
    assert np.array_equal(ids, f.column("dur_ns", flows.start, flows.stop)) and np.array_equal(ids[0::2], ids[1::2])
    assert len(np.unique(ids)) == len(ids) // 2  # a launch's two points share its correlation id


def field_values(f: EventFile, name: str, stop: Optional[int]) -> list:
    """A field of rows [0, stop) as a list; the args as their texts (their codes depend on the table's other texts)."""
    values = f.column(name, 0, stop).tolist()
    return [None if code < 0 else f.args[code] for code in values] if name == "args" else values


V2_IMPORT = Path(__file__).resolve().parents[1] / "data" / "recorded" / "event_file_v2"


def test_a_version_2_file_reads_and_exports_as_the_same_import_now(tmp_path, captures):
    """The committed version-2 import of alexnet (a head per flow point, its id in the args) and the same capture
    imported now: every field but the flow points' args and dur_ns alike, the same flow ids, and the same Chrome
    trace, which is the one the version-2 import wrote."""
    from profiler.postprocess.imported import import_capture

    import_capture(captures / "kineto" / "alexnet.json.gz", tmp_path)
    v2, v3 = read_event_file(V2_IMPORT / "events_0.arrow"), read_event_file(tmp_path / "events_0.arrow")
    assert (v2.meta["version"], v3.meta["version"]) == (2, 3) and v2.rows == v3.rows
    flows = flow_rows(v2)
    assert flow_rows(v3) == flows and len(flows) == 278
    assert len(v2.head_table["ph"]) > len(flows) > len(v3.head_table["ph"])
    for name in FIELDS:
        stop = flows.start if name in ("args", "dur_ns") else None
        assert field_values(v2, name, stop) == field_values(v3, name, stop), name
    ids = v2.flow_ids(flows.start, flows.stop)
    assert np.array_equal(ids, v3.flow_ids(flows.start, flows.stop)) and len(np.unique(ids)) == 139
    trace = gzip.decompress((V2_IMPORT / "timeline_0.json.gz").read_bytes())
    assert chrome_trace(v2) == chrome_trace(v3) == trace == (tmp_path / "timeline_0.json").read_bytes()
    assert v3.path.stat().st_size < 0.85 * v2.path.stat().st_size  # 54 against 66 kB


def test_every_field_reads_as_version_1_stored_it(example):
    v1, v2 = (read_event_file(d / "events_0.arrow") for d in example)
    assert v2.rows == v1.rows > 9000
    ranges = [
        (0, None),
        (0, 1),
        (999, 1001),
        (1500, 4321),
        (v1.complete_rows - 5, v1.complete_rows + 5),
        (v1.rows - 3, v1.rows + 10),
        (7, 7),
        (-5, 3),
    ]
    for name in FIELDS:
        for start, stop in ranges:
            a, b = v1.column(name, start, stop), v2.column(name, start, stop)
            assert a.dtype == b.dtype == np.dtype(EVENT_FIELD_DTYPES[name]) and np.array_equal(a, b), (name, start)
    assert {k: v1.meta[k] for k in INDEX_KEYS} == {k: v2.meta[k] for k in INDEX_KEYS}


def test_both_versions_export_the_committed_chrome_trace(example):
    trace = gzip.decompress((example[0] / "timeline_0.json.gz").read_bytes())
    for directory in example:
        assert chrome_trace(read_event_file(directory / "events_0.arrow")) == trace


def test_both_versions_build_the_same_timeline_page(example):
    v1_page, v2_page = (timeline.build(Context(load_input(directory))) for directory in example)
    assert "events in events_0.arrow" in v1_page and "Step windows in detail" in v1_page
    assert v1_page == v2_page


def test_a_generated_file_takes_about_24_bytes_an_event(tmp_path):
    """The rows dominate a large file: 24 bytes each (version 1: 33), the tables next to nothing."""
    run = write_run(tmp_path / "run", Spec(steps=20, ops_per_step=2500, queues=False, counters=False))
    path = run / "events_0.arrow"
    rows = read_event_file(path).rows
    assert rows > 100_000 and 24 <= path.stat().st_size / rows < 25


def test_a_newer_version_is_refused_in_one_sentence(tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr("profiler.export.event_file.EVENT_FILE_VERSION", 4)
        path = rewrite_as_current(EXAMPLES[0] / "events_0.arrow", tmp_path / "events_0.arrow")
    with pytest.raises(InputError, match=r"has event-file version 4, newer than this viewer reads \(3\); upgrade"):
        read_event_file(path)


@pytest.mark.parametrize(
    "heads",
    [
        None,
        {"ph": [88]},
        {name: [0, 1] for name, _ in EVENT_HEAD_FIELDS} | {"lane": [0]},
        {name: [-1] for name, _ in EVENT_HEAD_FIELDS},
        {name: ["x"] for name, _ in EVENT_HEAD_FIELDS},
    ],
)
@pytest.mark.parametrize("compact", [False, True])  # compact: the writer's layout, whose heads read as arrays
def test_a_damaged_heads_table_is_refused_in_one_sentence(tmp_path, heads, compact):
    """Rewritten metadata: a heads table missing, short of a field, of unequal lengths or not the fields' integers."""
    path = rewrite_as_current(EXAMPLES[0] / "events_0.arrow", tmp_path / "good.arrow")
    reader = pa.ipc.open_file(pa.OSFile(str(path)))
    meta = json.loads(reader.schema.metadata[b"profview"]) | {"heads": heads}
    meta["chrome"] = meta.pop("chrome", None)  # after the heads, as the writer puts it
    text = json.dumps(meta, separators=(",", ":") if compact else None)
    schema = reader.schema.with_metadata({b"profview": text})
    damaged = tmp_path / "events_0.arrow"
    with pa.ipc.new_file(str(damaged), schema) as w:
        for i in range(reader.num_record_batches):
            batch = reader.get_batch_with_custom_metadata(i)
            w.write_batch(pa.record_batch(batch.batch.columns, schema=schema), custom_metadata=batch.custom_metadata)
    with pytest.raises(InputError, match="is malformed: its metadata's heads table is not the event file's"):
        read_event_file(damaged)


def test_batches_are_read_from_a_mapping_as_arrows_reader_reads_them(example):
    """Both versions' files (batches of 1,000 rows in v2) are read by MappedBatches, not Arrow's file reader (which
    keeps the metadata twice), batch for batch the same; the mapping's pages go back with drop_resident."""
    for path in (d / "events_0.arrow" for d in example):
        f = read_event_file(path)
        assert isinstance(f._reader, event_file.MappedBatches)
        arrow = pa.ipc.open_file(pa.OSFile(str(path)))
        assert f._reader.num_record_batches == arrow.num_record_batches
        for i in range(arrow.num_record_batches):
            assert f._reader.get_batch(i).equals(arrow.get_batch(i))
        spill.drop_resident()
        assert (
            f.column("start_ns").tolist()
            == np.concatenate(
                [arrow.get_batch(i).column("start_ns").to_numpy() for i in range(arrow.num_record_batches)]
            ).tolist()
        )

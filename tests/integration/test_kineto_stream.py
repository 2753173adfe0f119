"""The chunked Kineto reader (profiler/importers/kineto_stream.py) on the real traces of tests/data/kineto:
whatever the chunk size, the run is the one the whole-document reader gives, cut traces included; what it
does not follow is handed to the whole-document reader."""

from __future__ import annotations

import gzip
import json
import weakref
from pathlib import Path

import pandas as pd
import pytest

from profiler.importers import kineto_events, kineto_stream
from profiler.importers.kineto import read_kineto_trace, run_from_kineto_trace
from profiler.importers.kineto_stream import NotStreamable, stream_trace

TRACES = sorted(p.name for p in (Path(__file__).parents[1] / "data" / "kineto").glob("*.json.gz"))
TABLES = ("ops", "spans", "instants", "steps", "counters", "threads", "allocations")


@pytest.fixture(scope="module")
def kineto_dir() -> Path:
    return Path(__file__).parents[1] / "data" / "kineto"


def whole_run(path: Path):
    """The run of the whole-document reader (the reference)."""
    trace, cut = kineto_events.load_trace(path)
    return run_from_kineto_trace(trace, label=str(path), cut=cut)


def assert_same_run(ours, reference) -> None:
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(ours, table), getattr(reference, table), obj=table)
    info = {k: v for k, v in ours.info.items() if k != "source_path"}
    assert info == reference.info


SMALL = ("alexnet.json.gz", "cpu_only.json.gz", "sampled_rank-0.json.gz")


@pytest.mark.parametrize(
    "trace, chunk_bytes",
    [(t, c) for t in TRACES for c in (4096, 1 << 20)] + [(t, 1) for t in SMALL],
)
def test_chunks_give_the_whole_documents_run(kineto_dir: Path, trace: str, chunk_bytes: int) -> None:
    """Chunks of one event (a chunk ends after its first whole event), of 4 KiB and of 1 MiB: the same run."""
    path = kineto_dir / trace
    streamed = stream_trace(path, chunk_bytes)  # the chunked reader follows every real trace (no fallback)
    assert streamed.cut is None and streamed.items == len(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    assert_same_run(read_kineto_trace(path, chunk_bytes=chunk_bytes), whole_run(path))


def test_a_chunks_events_are_freed_before_the_next_chunk_is_parsed(
    tmp_path: Path, kineto_dir: Path, monkeypatch
) -> None:
    """At most one chunk's parsed events exist at a time: held while the next chunk was parsed, they doubled the
    reading's peak (a 2 GB trace's reading stage: 389 -> 325 MB anonymous)."""

    class Events(list):  # a list that a weak reference can follow
        pass

    parsed, alive_when_parsing = [], []
    whole_events = kineto_stream._whole_events

    def tracked(buf: bytes, at: int):
        alive_when_parsing.append(sum(ref() is not None for ref in parsed))
        chunk = whole_events(buf, at)
        if chunk is None:
            return None
        events = Events(chunk[0])
        parsed.append(weakref.ref(events))
        return events, chunk[1]

    monkeypatch.setattr(kineto_stream, "_whole_events", tracked)
    path = tmp_path / "nccl_data.json"  # a chunk is the text of at least one block read: 1 MiB when not gzipped
    path.write_bytes(gzip.decompress((kineto_dir / "nccl_data.json.gz").read_bytes()))
    streamed = stream_trace(path, 1 << 16)
    assert streamed.items > 10_000 and len(parsed) >= 9
    assert max(alive_when_parsing) == 0


def test_the_keys_around_the_event_list_are_read(kineto_dir: Path) -> None:
    path = kineto_dir / "nccl_data.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    streamed = stream_trace(path, 4096)
    assert streamed.header == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert "distributedInfo" in streamed.header and "deviceProperties" in streamed.header


def write_variant(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


def test_events_that_look_like_chunk_ends_inside(tmp_path: Path, kineto_dir: Path) -> None:
    """A `}` followed by `,` or `]` inside an event (a list of objects in its args, a string) does not end a
    chunk there; keys after the event list and a bare event array are read too."""
    doc = json.loads(gzip.decompress((kineto_dir / "sampled_rank-0.json.gz").read_bytes()))
    for i, event in enumerate(doc["traceEvents"][:200]):
        event.setdefault("args", {})["tricky"] = [{"a": "}, {"}, {"b": "}]"}] if i % 3 else "}, ]"
    doc["traceName"] = "after the events"
    tricky = write_variant(tmp_path / "tricky.json", doc)
    for chunk_bytes in (1, 700, 1 << 16):
        assert stream_trace(tricky, chunk_bytes).header["traceName"] == "after the events"
        assert_same_run(read_kineto_trace(tricky, chunk_bytes=chunk_bytes), whole_run(tricky))
    # the keys after the event list hold lists of objects (`}]` and `},` past the list's end)
    after = write_variant(tmp_path / "after.json", {"traceEvents": doc.pop("traceEvents"), **doc, "devices": [{}] * 9})
    assert stream_trace(after, 1 << 20).header["devices"] == [{}] * 9
    assert_same_run(read_kineto_trace(after, chunk_bytes=1 << 20), whole_run(after))
    doc["traceEvents"] = json.loads(after.read_text())["traceEvents"]
    bare = write_variant(tmp_path / "bare.json", doc["traceEvents"])
    assert stream_trace(bare, 700).header == {}
    assert_same_run(read_kineto_trace(bare, chunk_bytes=700), whole_run(bare))


def test_gzip_of_several_members(tmp_path: Path, kineto_dir: Path) -> None:
    text = gzip.decompress((kineto_dir / "sampled_rank-1.json.gz").read_bytes())
    path = tmp_path / "members.json.gz"
    path.write_bytes(b"".join(gzip.compress(text[i : i + 100_000]) for i in range(0, len(text), 100_000)))
    assert_same_run(read_kineto_trace(path, chunk_bytes=50_000), whole_run(path))


@pytest.mark.parametrize("share", [0.3, 0.6, 0.95])
@pytest.mark.parametrize("gzipped", [False, True])
def test_a_cut_inside_the_event_list_is_read_in_chunks(tmp_path: Path, kineto_dir: Path, share, gzipped) -> None:
    """A file cut short in its event list: the chunked reader gives the whole-document reader's complete
    events, the same Cut and the same run (whose warning says where)."""
    text = gzip.decompress((kineto_dir / "nccl_data.json.gz").read_bytes())
    cut = text[: int(len(text) * share)]
    path = tmp_path / ("cut.json.gz" if gzipped else "cut.json")
    path.write_bytes(gzip.compress(text)[: int(len(gzip.compress(text)) * share)] if gzipped else cut)
    streamed = stream_trace(path, 1 << 16)
    reference_trace, reference_cut = kineto_events.load_trace(path)
    assert streamed.cut == reference_cut and streamed.cut.gzip_ended == gzipped
    assert streamed.items == len(reference_trace["traceEvents"]) > 0
    with pytest.warns(UserWarning, match="cut short"):
        ours = read_kineto_trace(path, chunk_bytes=1 << 16)
    assert_same_run(ours, run_from_kineto_trace(reference_trace, label=str(path), cut=reference_cut))


def test_what_it_does_not_follow_is_read_whole(tmp_path: Path, kineto_dir: Path) -> None:
    """Damage inside the list, a cut after it, a later gzip member cut short: NotStreamable, and the import
    says what the whole-document reader says."""
    text = gzip.decompress((kineto_dir / "sampled_rank-0.json.gz").read_bytes())
    damaged = tmp_path / "damaged.json"
    middle = len(text) // 2
    damaged.write_bytes(text[:middle] + b"\x00" + text[middle + 1 :])  # invalid in a string and out of one
    after_list = tmp_path / "after.json"
    after_list.write_bytes(text[: text.rindex(b"]") + 1])  # the list whole, the object around it not closed
    members = tmp_path / "members.json.gz"
    members.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:])[:-200])
    for path in (damaged, after_list, members):
        with pytest.raises(NotStreamable):
            stream_trace(path, 4096)
    with pytest.raises(Exception, match="not valid JSON") as err:
        read_kineto_trace(damaged, chunk_bytes=4096)
    assert str(err.value) == _whole_error(damaged)
    with pytest.warns(UserWarning, match="its events are complete"):
        read_kineto_trace(after_list, chunk_bytes=4096)
    with pytest.raises(Exception, match="corrupt or truncated gzip"):
        read_kineto_trace(members, chunk_bytes=4096)


def _whole_error(path: Path) -> str:
    try:
        kineto_events.load_trace(path)
    except Exception as err:  # the message is what is compared
        return str(err)
    raise AssertionError(f"{path} was read whole")


def test_an_import_reports_its_reading_and_stages_to_the_current_progress(tmp_path: Path, kineto_dir: Path) -> None:
    """Under `Progress.reporting()` (what `profview import` sets on a terminal) the chunked reader reports the
    share of the file read, up to 100 %, then the import its stages in order; without it, nothing."""
    import io
    import re

    from profiler.postprocess.imported import import_capture
    from profiler.progress import Progress
    from profiler.progress import current as current_progress

    path = kineto_dir / "sampled_rank-0.json.gz"
    stream = io.StringIO()
    with Progress("import", stream=stream).reporting():
        import_capture(path, tmp_path / "out")
    lines = stream.getvalue().splitlines()
    reading = [float(m[1]) for m in (re.search(r"reading sampled_rank-0\.json\.gz +([\d.]+)%", x) for x in lines) if m]
    assert len(reading) >= 1 and reading == sorted(reading) and reading[-1] == 100.0
    stages = [x.split(": ", 2)[2].split(" (")[0] for x in lines if "reading" not in x]
    assert stages == ["writing the timeline of rank 0", "analysing rank 0", "writing the outputs of rank 0"]
    assert not current_progress().enabled  # outside reporting(), as in library use: reports print nothing


@pytest.mark.parametrize("command", ["import", "view"])
def test_the_commands_report_an_imports_progress(tmp_path: Path, kineto_dir: Path, monkeypatch, command) -> None:
    """`profview import TRACE` and `profview TRACE` (which imports it first) make their progress line the one
    the import reports to (shown on a terminal after a second: here, into a stream at once)."""
    import io

    import viewer.cli as cli
    from profiler.progress import Progress

    stream = io.StringIO()

    class Shown(Progress):
        def __init__(self, title: str = "", **_: object) -> None:
            super().__init__(title, enabled=True, stream=stream)

    monkeypatch.setattr(cli, "Progress", Shown)
    path = str(kineto_dir / "sampled_rank-0.json.gz")
    args = ["import", path, "-o", str(tmp_path / "out")] if command == "import" else [path, "--summary"]
    assert cli.main(args) == 0
    said = stream.getvalue()
    assert "reading sampled_rank-0.json.gz 100.0%" in said and "analysing rank 0" in said

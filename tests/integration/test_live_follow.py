"""The incremental reader of a growing raw store (profiler/store/follow.py) and the live analysis of
its recent window (analysis/window.py, postprocess/live.py), on finished real recordings and copies of
their raw files written as a live writer leaves them (torn, damaged, replaced). Following a recording
while it runs is tests/e2e/test_live_follow_growing.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from profiler.analysis.window import step_times, window_thresholds
from profiler.errors import ProfviewError
from profiler.postprocess.live import LiveRecording
from profiler.postprocess.recording import load_rank
from profiler.store.follow import Follower
from profiler.store.interpret import interpret
from profiler.store.load import read_raw_tables, scan_raw_store
from profiler.store.raw import RawFile, encode_chunk

from support.live_helpers import record

#: The TensorBoard plugin's views, written only for runs with PyTorch profiler ops.
TORCH_VIEWS = ("kernels", "step_activity", "modules", "memory", "memory_events", "op_memory", "comm_split", "comm_ops")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished, analysed recording of 300 steps (about 1.2 s: several flushes)."""
    out = tmp_path_factory.mktemp("finished")
    record(out, 300, data_s=0.003)
    return out


def chunks_in(data: bytes) -> list[tuple[int, int, dict, bytes]]:
    """(start, stop, header, payload) of every chunk of a raw file's bytes (all whole)."""
    raw = RawFile(Path("raw"))
    out = [(c.offset, c.offset + c.nbytes, c.header, bytes(c.payload)) for c in raw.walk(data)]
    assert not raw.damaged
    return out


def chunks_of(path: Path) -> list[tuple[int, int, dict, bytes]]:
    return chunks_in(path.read_bytes())


def raw_file(directory: Path) -> Path:
    (path,) = sorted((directory / "raw").glob("*.pvraw"))
    return path


def test_the_live_analysis_of_a_whole_recording_is_the_analysis_written_by_analyse(finished):
    live = LiveRecording(finished, window_steps=10_000)
    snap = live.update()
    written = json.loads((finished / "report_0.json").read_text())
    got = json.loads(json.dumps(live.analysis(0).extra_json["report"]))
    assert got == written  # the same advisor on the same steps
    assert snap.figures.verdict == written["verdict"] == "input_bound"
    assert snap.finished and snap.ranks[0].steps == 300
    live.close()


def test_the_live_rundata_of_a_whole_recording_is_what_its_files_give_the_pages(finished):
    """The live report's RunData comes from memory (no CSV / JSON text); for the whole recording it holds
    what the viewer reads from the files analyse() wrote, so every page shows the same."""
    from viewer.live_report import window_rundata
    from viewer.rundata import RANK_DOCUMENTS, RANK_TABLES, load_profview_dir
    from viewer.stats import phase_table

    live = LiveRecording(finished, window_steps=10_000)
    live.update()
    try:
        memory, files = window_rundata(live, finished, 0), load_profview_dir(finished)[0]
    finally:
        live.close()
    for kind in RANK_TABLES:
        got, read = getattr(memory, kind), getattr(files, kind)
        if kind in (*TORCH_VIEWS, "op_shapes", "op_stacks"):  # no torch ops here, no op shapes or frames
            assert got is None and read is None, kind
            continue
        assert list(got.columns) == list(read.columns) and len(got) == len(read) > 0, kind
        for column in got.columns:
            assert got[column].dtype == read[column].dtype, (kind, column)
            if got[column].dtype.kind in "iuf":  # the CSV writer keeps 6 decimals
                assert np.allclose(got[column], read[column], rtol=0, atol=5e-7, equal_nan=True), (kind, column)
            else:
                assert got[column].tolist() == read[column].tolist(), (kind, column)
    for kind in RANK_DOCUMENTS:
        assert getattr(memory, kind) == getattr(files, kind) and getattr(memory, kind), kind
    written_by_export = {"steps", "overhead", "outputs", "timeline"}  # timeline: what the writer wrote
    assert {k: v for k, v in memory.info.items() if k not in written_by_export} == {
        k: v for k, v in files.info.items() if k not in written_by_export
    }
    assert np.allclose(
        phase_table(memory.step_trace).drop(columns="phase"),
        phase_table(files.step_trace).drop(columns="phase"),
        rtol=0,
        atol=1e-5,
    )


def test_a_window_is_cut_at_a_step_boundary_and_its_first_step_is_whole(finished):
    follower = Follower(finished, keep_steps=10_000)
    follower.poll()
    full = load_rank(finished, 0).steps.reset_index(drop=True)
    run = interpret(follower.window(0, 50))
    steps = run.steps.reset_index(drop=True)
    assert len(steps) == 50
    expect = full.iloc[-50:].reset_index(drop=True)
    assert steps["step"].tolist() == expect["step"].tolist()
    assert (steps["start_ns"] == expect["start_ns"]).all() and (steps["end_ns"] == expect["end_ns"]).all()
    assert run.info["recording"]["events_outside_windows"] == 0
    # a window after the warm-up has no warm-up step in it; one from the start keeps the advisor's
    assert window_thresholds(run)["warmup_steps"] == 0
    assert "warmup_steps" not in window_thresholds(interpret(follower.window(0, 10_000)))
    follower.close()


def test_held_events_stay_bounded_and_the_window_starts_where_the_data_is_whole(finished):
    follower = Follower(finished, keep_steps=10_000, max_events=2_000)
    follower.poll()
    state = follower.ranks[0]
    assert state.events_read > 2_000 * 2  # the recording holds more than the cap
    biggest_chunk = max(len(t) for _, t, _, _ in state.events)
    assert 2_000 <= state.held_events <= 2_000 + biggest_chunk
    assert state.step_count == 300  # step samples are all kept: a few bytes each
    run = interpret(follower.window(0, 200))
    full = load_rank(finished, 0).steps.set_index("step")
    steps = run.steps.set_index("step")
    assert 0 < len(steps) < 200  # fewer steps: only those whose events are all held
    assert (steps["start_ns"] == full.loc[steps.index, "start_ns"]).all()
    assert run.info["recording"]["unmatched_span_events"] <= 4  # at most the spans open at the cut
    follower.close()


def gone_pid() -> int:
    """A process id no process can have (above the kernel's pid_max): the writer of a killed run. A
    process that exited is not enough: its pid goes to a new process once the ids wrap (32768 here),
    and a suite starts thousands of processes."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except (OSError, ValueError):
        return 2**22 + 1  # the largest pid_max Linux allows, plus one


def with_writer(source: Path, pid: int, end: bool = True) -> bytes:
    """The raw file's bytes as if process `pid` wrote it (its meta chunk), without the end chunk unless `end`."""
    out = b""
    for _, _, header, payload in chunks_of(source):
        header = {k: v for k, v in header.items() if k != "v"}
        if header["table"] == "meta":
            meta = json.loads(payload)
            meta["pid"] = pid
            payload = json.dumps(meta).encode()
        if header["table"] == "end" and not end:
            continue
        out += encode_chunk(header, payload)
    return out


def chunk_bounds(data: bytes, table: str) -> list[tuple[int, int]]:
    return [(start, stop) for start, stop, header, _ in chunks_in(data) if header["table"] == table]


def _write(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_a_torn_tail_is_retried_not_reported(finished, tmp_path):
    """A chunk whose write has not landed whole is read on a later poll; nothing is reported as torn."""
    data = with_writer(raw_file(finished), os.getpid())  # a writer that is alive: this process
    events = chunk_bounds(data, "events")
    start, stop = events[len(events) // 2]
    cut = start + (stop - start) // 2  # in the middle of an events chunk's payload
    target = tmp_path / "run" / "raw" / f"r0-p{os.getpid()}.pvraw"
    target.parent.mkdir(parents=True)
    _write(target, data[:cut])
    follower = Follower(tmp_path / "run", stale_after_s=0.0)
    follower.poll()
    state = follower.ranks[0]
    first = state.step_count
    assert state.torn_chunks == 0 and not state.warnings
    assert next(iter(state.files.values())).pending == cut - start
    follower.poll()  # still torn: retried again, still not reported
    assert state.torn_chunks == 0
    _write(target, data[cut : cut + 7])  # a few more bytes: still not whole
    follower.poll()
    assert state.torn_chunks == 0 and state.step_count == first
    _write(target, data[cut + 7 :])
    follower.poll()
    assert state.torn_chunks == 0 and state.step_count == 300 > first
    assert next(iter(state.files.values())).pending == 0 and follower.finished
    follower.close()


def test_the_torn_tail_of_a_writer_that_died_is_reported_once(finished, tmp_path):
    dead = gone_pid()
    rebuilt = with_writer(raw_file(finished), dead, end=False)  # killed: gone, no end chunk
    target = tmp_path / "run" / "raw" / f"r0-p{dead}.pvraw"
    target.parent.mkdir(parents=True)
    target.write_bytes(rebuilt[:-10])  # the last chunk torn
    follower = Follower(tmp_path / "run", stale_after_s=0.0)
    follower.poll()
    follower.poll()
    state = follower.ranks[0]
    assert state.torn_chunks == 1
    assert "torn chunk" in state.warnings[0] and "cut short" in state.warnings[0]
    assert follower.gone() == [0] and not follower.finished
    follower.close()


def test_a_damaged_chunk_inside_the_file_is_skipped_and_reported(finished, tmp_path):
    source = raw_file(finished)
    data = bytearray(source.read_bytes())
    events = [c for c in chunks_of(source) if c[2]["table"] == "events"]
    start, stop = events[1][:2]
    data[stop - 3] ^= 0xFF  # a flipped bit in a payload: checksum mismatch
    target = tmp_path / "run" / "raw" / source.name
    target.parent.mkdir(parents=True)
    target.write_bytes(bytes(data))
    follower = Follower(tmp_path / "run")
    follower.poll()
    state = follower.ranks[0]
    assert state.torn_chunks == 1 and "checksum mismatch" in state.warnings[0]
    assert state.step_count > 0 and follower.finished  # everything after it was read
    follower.close()


def test_not_a_raw_file_is_one_sentence(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "r0-p1.pvraw").write_bytes(b"this is not a profview raw store at all")
    follower = Follower(tmp_path)
    with pytest.raises(ProfviewError, match="is not a profview raw file"):
        follower.poll()
    follower.close()


def test_a_new_recording_of_the_rank_replaces_the_one_followed(finished, tmp_path):
    out = tmp_path / "run"
    (out / "raw").mkdir(parents=True)
    old = out / "raw" / "r0-p11.pvraw"
    data = raw_file(finished).read_bytes()
    old.write_bytes(data)
    follower = Follower(out)
    assert follower.poll().new_steps == 300
    (out / "raw" / "previous").mkdir()
    old.rename(out / "raw" / "previous" / old.name)  # what a new Profiler does to the earlier recording
    new = out / "raw" / "r0-p12.pvraw"
    new.write_bytes(data[: chunks_of(old.parent / "previous" / old.name)[3][1]])
    result = follower.poll()
    assert result.reset_ranks == [0]
    assert follower.ranks[0].step_count < 300
    follower.close()


def test_step_times_from_step_samples():
    t = np.array([100, 150, 230, 900, 960], np.int64)
    step = np.array([0, 1, 2, 7, 8], np.int64)
    nums, ends, dur = step_times(t, step, window_starts=np.array([10, 800], np.int64))
    assert nums.tolist() == [0, 1, 2, 7, 8]
    assert dur.tolist() == [90, 50, 80, 100, 60]  # step 7 starts with its window at 800


def test_the_follower_says_what_analyse_says_for_the_same_damage(finished, tmp_path):
    """One reader, one channel: a damaged store followed live and read by `profview analyse` gives
    the same damage records, counts and sentences, in the same order."""
    dead = gone_pid()
    chunks = [(h, p) for _, _, h, p in chunks_in(with_writer(raw_file(finished), dead, end=False))]
    events = [i for i, (h, p) in enumerate(chunks) if h["table"] == "events" and p]
    data = b""
    first_sources = next(i for i, (h, _) in enumerate(chunks) if h["table"] == "sources")
    for i, (header, payload) in enumerate(chunks):
        header = {k: v for k, v in header.items() if k != "v"}
        if header["table"] == "threads":
            payload = json.dumps([{"ident": t["ident"]} for t in json.loads(payload)]).encode()  # names lost
        if i == first_sources:
            payload = b"42"  # not what a source table holds
        if i == events[0]:
            words = np.frombuffer(payload, "<i8").copy()
            words[1::4] = 2 * 10**6  # every other event: an unknown descriptor
            payload = words.tobytes()
        if i == events[2]:
            data += b"garbage between two chunks " * 3  # no chunk marker
        chunk = bytearray(encode_chunk(header, payload))
        if i == events[1]:
            chunk[-5] ^= 0xFF  # a checksum mismatch
        data += bytes(chunk)
    data += encode_chunk({"table": "events", "thread": 1}, b"\0" * 160)[:-70]  # a torn tail (killed writer)
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    (raw / f"r0-p{dead}.pvraw").write_bytes(data)
    (raw / "r0-p1.pvraw").write_bytes(data)  # a copy of the same recording
    store = scan_raw_store(tmp_path / "run")
    batch = read_raw_tables(store.files[0], rank=0, notes=store.warnings_for(0))
    follower = Follower(tmp_path / "run", stale_after_s=0.0, keep_steps=10**6, max_events=10**9)
    follower.poll()
    follower.poll()
    live = follower.window(0, 10**6)
    assert live.warnings == batch.warnings == follower.ranks[0].warnings
    assert live.damaged == batch.damaged and len(batch.damaged) == 2 * 4 - 1  # per file; the source chunk once
    assert (live.torn_chunks, live.lost_records, live.duplicate_chunks) == (
        batch.torn_chunks,
        batch.lost_records,
        batch.duplicate_chunks,
    )
    assert batch.duplicate_chunks == len(chunks) - 1  # the copy's whole chunks (the flipped one is damage)
    assert any("name descriptors that no readable descriptors chunk defines" in w for w in batch.warnings)
    assert any("without a valid ident or name" in w for w in batch.warnings)
    assert [d["why"] for d in batch.damaged[:4]] == [
        "its source table is not a JSON object",
        "checksum mismatch (damaged bytes)",
        "no chunk marker (not a profview raw chunk)",
        "the chunk is cut short (the run was probably killed while writing)",
    ]
    follower.close()

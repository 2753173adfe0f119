"""A big import's arrays spilled to files (profiler/spill.py) give the same outputs as arrays in memory, on
real Kineto captures; spilled pages leave the process's RSS when dropped and their values stay; the files
leave nothing behind; the watcher keeps them under a memory limit, dropping them at any moment without
losing a value."""

from __future__ import annotations

import ctypes
import filecmp
import os
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.importers import kineto, kineto_ops
from profiler.importers.kineto import read_kineto_trace
from profiler.importers.kineto_events import rows_where
from profiler.postprocess.imported import SpillSetting, import_capture, spilling_beside

from support.trace_variants import load_trace, write_trace


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_test", "nccl_data"])
def test_an_import_with_every_array_spilled_writes_the_same_files(captures, tmp_path, monkeypatch, capture) -> None:
    trace = captures / "kineto" / f"{capture}.json.gz"
    import_capture(trace, tmp_path / "memory")
    monkeypatch.setattr(spill, "SPILL_MIN_BYTES", 1)  # every array with a byte in it
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 2000)  # and the op table joined from several windows
    drops = spill.watcher_drops()
    import_capture(trace, tmp_path / "spilled", spill=SpillSetting(memory_limit=1))  # pages dropped all along
    assert spill.watcher_drops() > drops + 10
    names = sorted(p.name for p in (tmp_path / "memory").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "spilled").iterdir()) and len(names) >= 10
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "memory", tmp_path / "spilled", names, shallow=False)
    assert (mismatch, errors) == ([], [])
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".profview-spill-")]  # unlinked at once


def test_the_run_read_while_spilling_has_its_columns_in_files(captures, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 2000)
    trace = captures / "kineto" / "sampled_rank-0.json.gz"
    with spill.spilling(tmp_path, min_bytes=1):
        run = read_kineto_trace(trace, chunk_bytes=50_000)  # chunks' columns joined into spilled parts too
    plain = read_kineto_trace(trace)
    pd.testing.assert_frame_equal(run.ops, plain.ops, check_exact=True)
    pd.testing.assert_frame_equal(run.spans, plain.spans, check_exact=True)
    pd.testing.assert_frame_equal(run.steps, plain.steps, check_exact=True)
    for column in ("start_ns", "dur_ns", "self_ns", "step", "correlation", "blocks_per_sm"):
        values = run.ops[column].to_numpy()
        assert spill.is_spilled(values), column  # a file's mapping, not the heap
        np.testing.assert_array_equal(values, plain.ops[column].to_numpy())
    for column in ("device", "stream", "name", "op_type", "category"):  # categoricals: their codes
        assert spill.is_spilled(run.ops[column].array.codes), column
    assert spill.spilled_bytes() >= run.ops["start_ns"].nbytes * 5
    assert not spill.is_spilled(plain.ops["start_ns"].to_numpy())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("capture", ["sampled_rank-0", "diff_test", "nccl_data", "alexnet", "diff_control"])
def test_a_run_built_a_few_rows_at_a_time_is_the_whole_ones(captures, monkeypatch, capture) -> None:
    trace = captures / "kineto" / f"{capture}.json.gz"
    whole = read_kineto_trace(trace)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 100)  # spill.chunked's pieces and the loops that follow them
    monkeypatch.setattr(kineto_ops, "OP_BUILD_ROWS", 500)  # and op windows cut from chunked edge figures
    run = read_kineto_trace(trace)
    assert len(run.ops) > 3 * 100
    for table in ("ops", "spans", "steps", "threads", "counters", "instants"):
        pd.testing.assert_frame_equal(getattr(run, table), getattr(whole, table), check_exact=True, obj=table)
    assert run.info == whole.info


def test_events_at_impossible_times_are_left_out_in_any_chunk(captures, tmp_path, monkeypatch) -> None:
    doc = load_trace(captures / "kineto" / "sampled_rank-0.json.gz")
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    ops[1200]["ts"], ops[1800]["dur"], ops[2200]["ts"] = 1e300, 1e15, -1.0  # in later chunks than the first
    trace = write_trace(doc, tmp_path / "damaged.json", compress=False)
    whole = read_kineto_trace(trace)
    assert len(whole.ops) == len(read_kineto_trace(captures / "kineto" / "sampled_rank-0.json.gz").ops) - 3
    monkeypatch.setattr(spill, "CHUNK_ROWS", 100)
    pd.testing.assert_frame_equal(read_kineto_trace(trace).ops, whole.ops, check_exact=True)


def test_dropped_pages_leave_the_rss_and_keep_their_values(tmp_path) -> None:
    n = 16 << 20  # 128 MiB of int64
    with spill.spilling(tmp_path):
        values = spill.empty(n, np.int64)
    values[:] = np.arange(n)  # every page touched: resident
    touched = spill.resident_bytes()
    spill.drop_resident()
    dropped = spill.resident_bytes()
    assert touched - dropped > 0.9 * values.nbytes
    assert int(values[::4096].sum()) == int(np.arange(0, n, 4096).sum())  # read back from the page cache
    assert values[n - 1] == n - 1


def test_outside_spilling_and_below_the_threshold_arrays_stay_in_memory(tmp_path) -> None:
    assert not spill.is_spilled(spill.empty(1 << 20, np.int64))
    with spill.spilling(tmp_path):
        assert not spill.is_spilled(spill.empty(10, np.int64))  # below SPILL_MIN_BYTES
        assert not spill.is_spilled(spill.empty(4, object))  # objects never
        kept = np.arange(10)
        assert spill.spilled(kept) is kept
        joined = spill.concatenated([np.arange(1 << 17), np.arange(1 << 17)])
        assert spill.is_spilled(joined)
        np.testing.assert_array_equal(joined, np.tile(np.arange(1 << 17), 2))
    assert Path(tmp_path).is_dir() and os.listdir(tmp_path) == []


def test_each_thread_keeps_its_own_spill_setting(tmp_path) -> None:
    """Imports in threads of one process (a Dask worker's) do not see each other's setting."""
    import threading

    seen, inside, leave = {}, threading.Event(), threading.Event()

    def other() -> None:
        with spill.spilling(tmp_path, min_bytes=1):
            inside.set()
            leave.wait(10)
            seen["other"] = spill.is_spilled(spill.empty(16, np.int64))

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    seen["main"] = spill.is_spilled(spill.empty(16, np.int64))  # this thread never entered spilling
    leave.set()
    thread.join()
    assert seen == {"main": False, "other": True}


def _wait_for(condition, seconds: float = 20.0) -> bool:
    """Whether `condition()` holds within `seconds` (the watcher is a thread: it looks every few ms)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(params=["native", "python"])
def watcher(request, monkeypatch) -> str:
    """Each watcher test runs with the native watcher (_resident.c) and with the Python one, its fallback."""
    if request.param == "native" and spill._NATIVE is None:
        pytest.skip("profiler._resident is not built")
    if request.param == "python":
        monkeypatch.setattr(spill, "_NATIVE", None)
    return request.param


def test_the_watcher_drops_spilled_pages_once_the_rss_passes_the_limit(tmp_path, watcher) -> None:
    n = 32 << 20  # 256 MiB of int64
    limit = int((spill.resident_bytes() + (64 << 20)) / spill.DROP_AT)  # drops once 64 MiB more are resident
    drops = spill.watcher_drops()
    with spill.spilling(tmp_path, resident_limit=limit):
        values = spill.empty(n, np.int64)
        for at in spill.chunks(n, 1 << 20):
            values[at] = np.arange(at.start, at.stop)  # every page written: resident until dropped
        assert _wait_for(lambda: spill.resident_bytes() < limit * spill.DROP_AT)
        assert spill.watcher_drops() > drops
        assert int(values[::512].sum()) == int(np.arange(0, n, 512).sum())  # every value kept
    assert int(values[:: 1 << 20].sum()) == int(np.arange(0, n, 1 << 20).sum())


def test_below_the_limit_and_without_one_the_watcher_drops_nothing(tmp_path, watcher) -> None:
    """Counted by the watcher itself: the RSS is no witness here (another test's thread in the same worker may
    hand pages back with give_back_freed_memory)."""
    n = 16 << 20  # 128 MiB of int64
    drops = spill.watcher_drops()
    for limit in (None, spill.resident_bytes() * 10 + (4 << 30)):  # the RSS and the file-page budget far off
        with spill.spilling(tmp_path, resident_limit=limit):
            values = spill.empty(n, np.int64)
            values[:] = 7
            time.sleep(0.1)  # fifty looks of the watcher, were it dropping
        del values
    assert spill.watcher_drops() == drops


def test_values_written_while_the_watcher_drops_are_kept(tmp_path, watcher) -> None:
    """Pages dropped under a thread that writes them: the mapping is shared, so every write reaches the file."""
    n = 8 << 20
    with spill.spilling(tmp_path, resident_limit=1):  # the watcher drops every few ms
        values = spill.empty(n, np.int64)
        writers = [
            threading.Thread(target=lambda k=k: [values.__setitem__(at, at.start + k) for at in spill.chunks(n, 4096)])
            for k in range(2)
        ]
        for w in writers:
            w.start()
            w.join()
        drops = spill.watcher_drops()
        assert _wait_for(lambda: spill.watcher_drops() > drops)
        starts = np.arange(n) // 4096 * 4096 + 1  # the second writer's values
        np.testing.assert_array_equal(values, starts)


def _peak_reset() -> bool:
    """Reset this process's VmHWM (Linux's clear_refs 5); whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def _fill_holding_the_gil(values: np.ndarray, byte: int) -> None:
    """memset over `values` in one C call that keeps the GIL (a PYFUNCTYPE function), as a long numpy call over
    a spilled column does: no Python thread runs until it returns."""
    memset = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)(
        ctypes.cast(ctypes.memset, ctypes.c_void_p).value
    )
    memset(values.ctypes.data, byte, values.nbytes)


def test_the_native_watcher_bounds_the_pages_a_call_holding_the_gil_touches(tmp_path) -> None:
    """512 MiB of a spilled array written by one C call that holds the GIL: the native thread drops the pages
    while it runs, so the peak RSS stays near the limit (the Python watcher could look only after the call:
    the whole 512 MiB resident)."""
    if spill._NATIVE is None or not _peak_reset():
        pytest.skip("needs profiler._resident and Linux's clear_refs")
    n = 64 << 20  # 512 MiB of int64
    with spill.spilling(tmp_path, resident_limit=spill.resident_bytes() + (1 << 30)):
        values = spill.empty(n, np.int64)  # mapped, nothing resident yet
        spill.drop_resident()
        limit = int((spill.resident_bytes() + (64 << 20)) / spill.DROP_AT)  # drops once 64 MiB more are resident
        with spill.spilling(tmp_path, resident_limit=limit):  # the lowest limit wins
            drops = spill.watcher_drops()
            assert _peak_reset()
            _fill_holding_the_gil(values, 1)
            peak = _peak_bytes()
            assert spill.watcher_drops() > drops
        assert peak < limit + (128 << 20), (peak >> 20, limit >> 20)  # not the 512 MiB written
        assert (values[:: 1 << 9] == 0x0101010101010101).all()  # every value kept (one per page)


def test_far_below_the_limit_the_watcher_keeps_the_spilled_pages_to_a_budget(tmp_path, watcher, monkeypatch) -> None:
    """512 MiB of a spilled array written 8 MiB at a time, the RSS far below an 8 GiB limit: the watcher drops
    the pages each time they grow by FILE_BUDGET_AT of the limit (here 64 MiB), so they never pile up into one
    long drop (what let a 15 GB trace's import pass its limit)."""
    if not _peak_reset():
        pytest.skip("needs Linux's clear_refs")
    limit = 8 << 30
    monkeypatch.setattr(spill, "FILE_BUDGET_AT", (64 << 20) / limit)
    n = 64 << 20
    with spill.spilling(tmp_path, resident_limit=limit):
        values = spill.empty(n, np.int64)
        spill.drop_resident()
        start, drops = spill.resident_bytes(), spill.watcher_drops()
        assert _peak_reset()
        for at in spill.chunks(n, 1 << 20):
            values[at] = at.start
        peak = _peak_bytes()
        assert spill.watcher_drops() > drops
    # not the 512 MiB written: the budget, and 192 MiB of writes the thread may miss while the machine is loaded (a
    # load average of ~6 let it lag by 135 MiB past the budget)
    assert peak < start + (64 << 20) + (192 << 20), (peak - start) >> 20
    np.testing.assert_array_equal(values[:: 1 << 20], np.arange(0, n, 1 << 20))


def test_memory_of_freed_mappings_is_never_dropped_by_the_native_watcher(tmp_path) -> None:
    """Spilled arrays made and freed while the native thread drops every millisecond: a mapping leaves its
    list before it is unmapped, so the address ranges the heap reuses for other arrays are never advised
    (MADV_DONTNEED on a private page would zero it)."""
    if spill._NATIVE is None:
        pytest.skip("profiler._resident is not built")
    kept = []
    with spill.spilling(tmp_path, min_bytes=1 << 16, resident_limit=1):  # the thread drops at every look
        drops = spill.watcher_drops()
        for k in range(300):
            spilled = spill.empty(1 << 14, np.int64)  # 128 KiB, a mapping of its own
            spilled[:] = k
            del spilled  # unmapped: the next allocations may take its addresses
            kept.append(np.full(1 << 14, k, dtype=np.int64))  # private memory, maybe at a freed mapping's place
        assert _wait_for(lambda: spill.watcher_drops() > drops)
        time.sleep(0.05)  # fifty more drops
    for k, values in enumerate(kept):
        assert (values == k).all(), k


def test_a_forked_child_watches_its_own_pages(tmp_path) -> None:
    """A child forked while the native thread runs (an import worker of a fork start method) has no thread of
    its own until it opens a `spilling` with a limit; then it drops its pages."""
    if spill._NATIVE is None:
        pytest.skip("profiler._resident is not built")
    import multiprocessing

    with spill.spilling(tmp_path, resident_limit=1):
        context = multiprocessing.get_context("fork")
        child = context.Process(target=_drop_in_child, args=(str(tmp_path),))
        child.start()
        child.join(60)
    assert child.exitcode == 0


def _drop_in_child(directory: str) -> None:
    drops = spill.watcher_drops()
    with spill.spilling(directory, resident_limit=1):
        values = spill.empty(1 << 20, np.int64)
        values[:] = 3
        if not _wait_for(lambda: spill.watcher_drops() > drops, 10) or int(values.sum()) != 3 << 20:
            os._exit(1)
    os._exit(0)


def test_an_event_file_read_back_is_a_read_only_mapping_the_watcher_drops(tmp_path) -> None:
    path = tmp_path / "file"
    path.write_bytes(bytes(range(256)) * 4096)
    mapped = spill.mapped_file(path)
    values = np.frombuffer(mapped, dtype=np.uint8)
    assert spill.is_spilled(values) and int(values[:256].sum()) == sum(range(256))
    with pytest.raises(ValueError):
        values[0] = 1  # read only
    spill.drop_resident()
    assert int(values[-256:].sum()) == sum(range(256))  # read back from the file
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ValueError):
        spill.mapped_file(tmp_path / "empty")


def test_a_spill_directory_takes_the_files(tmp_path) -> None:
    elsewhere = tmp_path / "spill"
    elsewhere.mkdir()
    with spilling_beside(tmp_path / "out", SpillSetting(directory=elsewhere)):
        values = spill.empty(1 << 20, np.int64)
    mapped = Path("/proc/self/maps").read_text()
    assert f"{elsewhere}/.profview-spill-" in mapped and spill.is_spilled(values)
    del values


def test_rows_of_some_kinds_and_the_host_pid_found_chunk_by_chunk_are_the_whole_ones(monkeypatch) -> None:
    """The reader's per-kind rows, kind counts and host pid (the most frequent, smallest of equals), read a chunk of
    events at a time (no mask of the trace's length), equal the whole-array answers, ties across chunks too."""
    rng = np.random.default_rng(7)
    kind = rng.integers(0, 12, 5000).astype(np.int8)
    kind[kind == kineto.HOST_OP] = kineto.SPAN
    kind[:1000] = kineto.HOST_OP  # host ops' pids: 9 in the first chunks, as many of 3 in the later ones, then 5
    pid = rng.choice([9.0, 3.0, 5.0, np.nan], 5000)
    pid[:1000] = np.repeat([9.0, 3.0, 5.0], [450, 450, 100])
    host = np.flatnonzero(kind == kineto.HOST_OP)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 64)
    for wanted in [(kineto.HOST_OP,), (kineto.SPAN, kineto.STEP, 11)]:
        np.testing.assert_array_equal(rows_where(kind, *wanted), np.flatnonzero(np.isin(kind, wanted)))
    assert dict(kineto._kind_counts(kind)) == dict(zip(*(v.tolist() for v in np.unique(kind, return_counts=True))))
    cols = SimpleNamespace(pid=pid)
    assert kineto._host_pid(cols, kind) == int(pd.Series(pid[host]).mode().iloc[0]) == 3
    assert kineto._host_pid(cols, np.full(5000, kineto.SPAN, dtype=np.int8)) == -1


def test_filled_arrays_are_made_in_chunks_into_spill_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(spill, "CHUNK_ROWS", 1000)
    with spill.spilling(tmp_path, min_bytes=1):
        links = spill.filled(2500, np.int64, -1)
        assert spill.is_spilled(links)
    assert links.dtype == np.int64 and links.tolist() == [-1] * 2500
    assert spill.filled(3, bool, False).tolist() == [False] * 3

"""memory.memory_events, made a piece of allocations at a time (pairs found with the blocks held carried from piece to
piece, rows put in order within runs of one ms), gives the table the whole-table sort gave and the same CSV bytes:
on random allocation tables with reused addresses, twin times, several devices, zero-size events, frees of blocks
allocated before the trace and blocks never freed, in pieces of one and two rows and in one piece, spilled."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler import spill
from profiler.analysis.memory import memory_events
from profiler.export.csv_json import write_csv
from profiler.formats.columns import MEMORY_EVENT_COLUMNS
from profiler.kernels.grouping import codes_and_labels

#: spill.CHUNK_ROWS values: pieces (a quarter chunk) of one row, of two, and one piece for every table here.
CHUNK_ROWS = (4, 8, 1 << 20)
NAMES = np.array(["aten::empty", "aten::mm", "a, b", 'q"x', "aten::add"], dtype=object)


def whole_sort_memory_events(ops: pd.DataFrame, allocations: pd.DataFrame, owner: np.ndarray) -> pd.DataFrame:
    """memory_events as it was (up to 580b957): a lexsort of every allocation by device, address and time, and the
    table sorted by (alloc_ms, free_ms), empty first, stably; device and op as objects."""
    device_code, devices = _texts(allocations["device"])
    device = devices[device_code]
    addr = allocations["addr"].to_numpy(np.int64)
    when = allocations["time_ns"].to_numpy(np.int64)
    size = allocations["bytes"].to_numpy(np.int64)
    order = np.lexsort((np.arange(len(when)), when, addr, device_code))
    alloc, free = size[order] > 0, size[order] < 0
    same_block = (device_code[order][1:] == device_code[order][:-1]) & (addr[order][1:] == addr[order][:-1])
    paired = np.zeros(len(order), dtype=bool)
    paired[:-1] = alloc[:-1] & free[1:] & same_block
    freed_later = np.zeros(len(order), dtype=bool)
    freed_later[1:] = paired[:-1]
    alone_free = free & ~freed_later
    first = order[alloc | alone_free]
    free_at = np.full(len(order), -1, dtype=np.int64)
    free_at[np.flatnonzero(paired)] = order[np.flatnonzero(paired) + 1]
    free_at = free_at[alloc | alone_free]
    is_alloc = size[first] > 0
    name_code, names = _texts(ops["name"])
    op = np.where(is_alloc & (owner[first] >= 0), names[name_code[np.maximum(owner[first], 0)]], "").astype(object)
    alloc_ms = np.where(is_alloc, when[first] / 1e6, np.nan)
    free_ms = np.where(~is_alloc, when[first] / 1e6, np.where(free_at >= 0, when[np.maximum(free_at, 0)] / 1e6, np.nan))
    table = pd.DataFrame(
        {
            "device": device[first],
            "op": op,
            "bytes": np.abs(size[first]),
            "alloc_ms": alloc_ms,
            "free_ms": free_ms,
            "lifetime_ms": free_ms - alloc_ms,
        },
        columns=MEMORY_EVENT_COLUMNS,
    )
    return table.sort_values(["alloc_ms", "free_ms"], kind="stable", na_position="first", ignore_index=True)


def _texts(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    code, labels = codes_and_labels(column)
    return code, np.array([str(label) for label in labels], dtype=object)


def random_allocations(
    rng: np.random.Generator, n: int, categorical: bool, base_ns: int = 0, step_ns: int = 0
) -> pd.DataFrame:
    """n allocations and frees in time order: a few addresses on three devices (an address reused on one device and
    also used on another), times with many twins and runs of one time longer than a piece, zero-size events, frees
    with no allocation before them and allocations with no free after them; times `step_ns` apart (0: 1 ns, 1 us or
    1 ms, at random) from `base_ns`."""
    device = rng.choice(np.array(["host", "cuda:1", "cuda:0"], dtype=object), n, p=[0.5, 0.3, 0.2])
    step_ns = step_ns or int(rng.choice([1, 1000, 1_000_000]))
    when = base_ns + np.sort(rng.integers(0, max(n // 3, 1), n)) * step_ns
    when[n // 4 : n // 4 + 9] = when[n // 4]  # a run of one time over several pieces
    size = rng.choice([256, 512, 4096, -256, -512, -4096, 0], n, p=[0.2, 0.15, 0.1, 0.2, 0.15, 0.1, 0.1])
    return pd.DataFrame(
        {
            "device": pd.Categorical(device, categories=["cuda:0", "cuda:1", "host"]) if categorical else device,
            "tid": 0,
            "time_ns": when,
            "bytes": size,
            "addr": rng.choice([0x10, 0x20, 0x30, 0x40, -1], n),
            "allocated_bytes": np.nan,
            "reserved_bytes": np.nan,
        }
    )


def random_ops(rng: np.random.Generator, categorical: bool) -> pd.DataFrame:
    names = rng.choice(NAMES, 12)
    return pd.DataFrame({"name": pd.Categorical(names) if categorical else names})


def assert_same_events(got: pd.DataFrame, want: pd.DataFrame, tmp_path) -> None:
    """The same rows, values and CSV bytes (device and op compared as text: they are categoricals now)."""
    assert list(got.columns) == MEMORY_EVENT_COLUMNS
    pd.testing.assert_frame_equal(
        got.astype({"device": object, "op": object}), want.astype({"device": object, "op": object}), check_exact=True
    )
    assert write_csv(got, tmp_path / "got.csv").read_bytes() == write_csv(want, tmp_path / "want.csv").read_bytes()


@pytest.mark.parametrize("chunk_rows", CHUNK_ROWS)
@pytest.mark.parametrize("seed", range(8))
def test_memory_events_in_pieces_are_the_whole_sorts(seed, chunk_rows, monkeypatch, tmp_path) -> None:
    rng = np.random.default_rng(seed)
    categorical = bool(seed % 2)
    allocations = random_allocations(rng, int(rng.integers(40, 300)), categorical)
    ops = random_ops(rng, categorical)
    owner = rng.integers(-1, len(ops), len(allocations))
    want = whole_sort_memory_events(ops, allocations, owner)
    alone = want["alloc_ms"].isna().sum()
    assert alone > 2 and want["free_ms"].isna().sum() > 2 and (want["lifetime_ms"] >= 0).sum() > 2  # not vacuous
    assert want["alloc_ms"].duplicated().sum() > 2 and want["free_ms"].iloc[:alone].duplicated().any()  # twins
    monkeypatch.setattr(spill, "CHUNK_ROWS", chunk_rows)
    with spill.spilling(tmp_path, min_bytes=1):
        got = memory_events(ops, allocations, owner)
        assert all(spill.is_spilled(got[c].to_numpy()) for c in ("bytes", "alloc_ms", "free_ms", "lifetime_ms"))
        assert all(spill.is_spilled(got[c].array.codes) for c in ("device", "op"))
    assert_same_events(got, want, tmp_path)


@pytest.mark.parametrize("chunk_rows", CHUNK_ROWS[:2])
def test_times_equal_in_ms_but_not_in_ns_keep_the_whole_sorts_order(chunk_rows, monkeypatch, tmp_path) -> None:
    """Times of ~10^17 ns (a clock since the epoch): neighbouring ns give the same ms, so a run of one ms holds
    several times, put in order by free_ms, device and address before their time."""
    rng = np.random.default_rng(11)
    allocations = random_allocations(rng, 200, True, base_ns=1_700_000_000_000_000_000, step_ns=50)
    when = allocations["time_ns"].to_numpy()
    assert (np.diff(when / 1e6) == 0).sum() > (np.diff(when) == 0).sum()  # runs of one ms wider than of one ns
    ops = random_ops(rng, True)
    owner = rng.integers(-1, len(ops), len(allocations))
    monkeypatch.setattr(spill, "CHUNK_ROWS", chunk_rows)
    assert_same_events(
        memory_events(ops, allocations, owner), whole_sort_memory_events(ops, allocations, owner), tmp_path
    )


def test_a_table_out_of_time_order_is_put_in_it(monkeypatch, tmp_path) -> None:
    """A table given out of time order (the model does not require it) gives the whole sort's table."""
    rng = np.random.default_rng(5)
    allocations = random_allocations(rng, 150, False)
    shuffled = rng.permutation(len(allocations))
    allocations = allocations.iloc[shuffled].reset_index(drop=True)
    ops = random_ops(rng, False)
    owner = rng.integers(-1, len(ops), len(allocations))
    monkeypatch.setattr(spill, "CHUNK_ROWS", 8)
    assert_same_events(
        memory_events(ops, allocations, owner), whole_sort_memory_events(ops, allocations, owner), tmp_path
    )


def test_an_op_name_with_a_carriage_return_is_written_as_before(tmp_path) -> None:
    """Only the names written are the op column's categories: a name with a carriage return that owns no block
    leaves the file quoted as before (minimally), one that owns a block quotes every field, as before."""
    rng = np.random.default_rng(2)
    allocations = random_allocations(rng, 60, True)
    ops = pd.DataFrame({"name": pd.Categorical(["aten::mm", "bad\rname", "aten::add"])})
    for owner in (np.where(rng.random(60) < 0.5, 0, 2), np.where(rng.random(60) < 0.5, 0, 1)):
        got = memory_events(ops, allocations, owner)
        assert_same_events(got, whole_sort_memory_events(ops, allocations, owner), tmp_path)
    assert "bad\rname" in set(got["op"]) and got["op"].cat.categories.tolist() == sorted(set(got["op"]))


def test_a_missing_device_or_op_name_is_written_as_before(monkeypatch, tmp_path) -> None:
    """A missing device or op name (code -1) pairs and sorts as its own code and is written as the whole sort wrote it
    (the last text: it indexed the texts by the code)."""
    rng = np.random.default_rng(3)
    allocations = random_allocations(rng, 120, True)
    allocations.loc[rng.random(120) < 0.2, "device"] = np.nan
    ops = pd.DataFrame({"name": pd.Categorical(["aten::mm", None, "aten::add", None])})
    owner = rng.integers(-1, len(ops), len(allocations))
    monkeypatch.setattr(spill, "CHUNK_ROWS", 8)
    want = whole_sort_memory_events(ops, allocations, owner)
    assert allocations["device"].isna().sum() > 5 and (want["op"] == "aten::mm").sum() > 5  # not vacuous
    assert_same_events(memory_events(ops, allocations, owner), want, tmp_path)

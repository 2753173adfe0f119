"""The TensorBoard plugin's memory and module views on a real recording: a small training loop recorded
by profview with `profile_memory=True, with_stack=True` (tests/support/torch_views_loop.py, fixture
tests/data/recorded/views/torch_memory_modules). Its torch capture is a Kineto trace as torch 2.13 writes
it: imported on its own, profview's figures are compared with what the plugin itself (torch-tb-profiler
0.4.3) computed for it (tests/data/recorded/tb_plugin/torch_memory_modules.json, scripts/tb_plugin_figures.py);
analysed as profview's own capture, the loop's own facts are checked (a module called twice, a block
held across steps)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from profiler.analysis.memory import memory_curve
from profiler.analysis.results import analyse_run
from profiler.analysis.steps import ensure_steps
from profiler.formats.tables import read_csv
from profiler.importers.kineto import read_kineto_trace

from support.recorded import RECORDED, analysed_copy, truth

FIXTURE = RECORDED / "views" / "torch_memory_modules"
PEER = json.loads((RECORDED / "tb_plugin" / "torch_memory_modules.json").read_text(encoding="utf-8"))


def _trace() -> Path:
    (path,) = (FIXTURE / "raw").glob("*-torch-0.json.gz")
    return path


@pytest.fixture(scope="module")
def imported():
    run = ensure_steps(read_kineto_trace(_trace()))
    return analyse_run(run)


def test_module_view_is_the_plugins(imported) -> None:
    """Every module path, its calls and its host times equal the plugin's to the µs (no device here)."""
    mine = imported.modules.set_index("path")
    peer = {row["path"]: row for row in PEER["modules"]}
    assert sorted(mine.index) == sorted(peer)
    for path, theirs in peer.items():
        row = mine.loc[path]
        assert row["occurrences"] == theirs["occurrences"], path
        assert row["host_total_ms"] == pytest.approx(theirs["host_total_us"] / 1e3, abs=1e-3), path
        assert row["host_self_ms"] == pytest.approx(theirs["host_self_us"] / 1e3, abs=1e-3), path


def test_module_times_nest(imported) -> None:
    """A parent's total is at least the sum of its children's; self never exceeds total."""
    table = imported.modules
    for path, row in table.set_index("path").iterrows():
        children = table[table["parent"] == path]
        assert row["host_total_ms"] >= children["host_total_ms"].sum() - 1e-9, path
        assert 0 <= row["host_self_ms"] <= row["host_total_ms"], path


def test_memory_peak_is_the_largest_total_allocated(imported) -> None:
    """The curve's peak equals the trace's largest "Total Allocated" and the plugin's peak."""
    events = json.loads(gzip.decompress(_trace().read_bytes()))["traceEvents"]
    largest = max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")
    curve = memory_curve(imported.run.allocations)
    assert curve["allocated_bytes"].max() == largest
    assert PEER["memory_peaks"]["CPU"] == f"Peak Memory Usage: {float(largest)}B"
    assert set(curve["device"]) == {"host"}


def test_op_memory_is_the_plugins(imported) -> None:
    """Per op: calls, and every size and count, self and with children, equal the plugin's (KB there)."""
    mine = imported.op_memory.set_index("op")
    peer = {row["op"]: row for row in PEER["memory_stats"]["CPU"]}
    assert sorted(mine.index) == sorted(peer)
    for op, theirs in peer.items():
        row = mine.loc[op]
        assert row["calls"] == theirs["calls"], op
        for column, key in [
            ("self_increase_bytes", "self_increase_kb"),
            ("increase_bytes", "increase_kb"),
            ("self_alloc_bytes", "self_alloc_kb"),
            ("alloc_bytes", "alloc_kb"),
        ]:
            assert row[column] / 1024 == pytest.approx(theirs[key], abs=0.05), (op, column)
        assert (row["self_alloc_count"], row["alloc_count"]) == (theirs["self_alloc_count"], theirs["alloc_count"])


def test_memory_events_are_the_plugins(imported) -> None:
    """The same blocks with the same sizes, times and lifetimes. The plugin names a block by the
    outermost op and, in parentheses, the innermost when they differ; profview's `op` is the innermost."""
    first_ms = imported.run.allocations["time_ns"].min() / 1e6  # both sides: times from their own origin
    mine = imported.memory_events.dropna(subset=["alloc_ms", "free_ms"])
    theirs = [e for e in PEER["memory_events"]["CPU"] if e["alloc_us"] is not None and e["free_us"] is not None]
    assert len(mine) == len(theirs)
    ours = sorted(zip(mine["alloc_ms"] - first_ms, mine["bytes"], mine["lifetime_ms"], mine["op"]))
    peer = sorted((e["alloc_us"] / 1e3, e["bytes"], e["lifetime_us"], e["op"]) for e in theirs)  # by allocation
    offset = peer[0][0] - ours[0][0]
    for (alloc, size, life, op), (p_alloc, p_size, p_life, p_op) in zip(ours, peer):
        assert alloc + offset == pytest.approx(p_alloc, abs=0.011)
        assert size == p_size and life == pytest.approx(p_life / 1e3, abs=1e-4)
        assert op == (p_op.split(" (")[1].rstrip(")") if " (" in p_op else p_op)


def test_profviews_own_capture_shows_the_loop(tmp_path) -> None:
    """Analysed as profview's own capture: the block module is one path called twice a step, and the
    1 MiB tensor the loop held is one block allocated in the step it was made and freed two steps later."""
    facts = truth("views", "torch_memory_modules")
    out = analysed_copy("views", "torch_memory_modules", tmp_path / "run")
    modules = read_csv(out / "modules_0.csv", "modules").set_index("path")
    assert (
        modules.loc["Net_0/Block_0", "occurrences"]
        == facts["block_calls_per_step"] * modules.loc["Net_0", "occurrences"]
    )
    events = read_csv(out / "memory_events_0.csv", "memory_events")
    (held,) = events[events["bytes"] == facts["held_bytes"]].itertuples()
    steps = read_csv(out / "step_trace_0.csv", "step_trace")
    end = steps["start_ms"] + steps["total_ms"]
    step_of = lambda ms: int(steps["step"][(steps["start_ms"] <= ms) & (ms < end)].iloc[0])
    assert step_of(held.alloc_ms) == facts["held_from_step"]
    assert step_of(held.free_ms) == facts["held_from_step"] + 2
    curve = read_csv(out / "memory_0.csv", "memory")
    assert curve["allocated_bytes"].max() >= facts["held_bytes"]
    stats = read_csv(out / "op_memory_0.csv", "op_memory").set_index("op")
    assert stats.loc["aten::empty", "self_alloc_bytes"] >= facts["held_bytes"]


def test_ops_by_call_stack_add_up_to_each_op(imported) -> None:
    """With with_stack=True every framework op has its Python frames; per name, the stack rows' calls and
    times add up to op_detail's, and the block's linear layer is reached through Net_0 > Block_0."""
    stacks, detail = imported.op_stacks, imported.op_detail
    assert len(stacks) and (stacks["stack"] != "").any()
    summed = stacks.groupby(["device", "name"])[["count", "total_ms", "self_ms"]].sum()
    mine = detail[detail["category"].isin(["host", "user"])].set_index(["device", "name"])[
        ["count", "total_ms", "self_ms"]
    ]
    pd.testing.assert_frame_equal(
        summed.sort_index(), mine.sort_index(), check_exact=False, atol=1e-6, check_dtype=False
    )
    addmm = stacks[stacks["name"] == "aten::addmm"]["stack"]  # torch's own frames lie between the modules
    assert addmm.str.contains(r"nn\.Module: Net_0 > .*nn\.Module: Block_0 > .*nn\.Module: Linear_0").any()

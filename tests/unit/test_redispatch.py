"""redispatch_copies (profiler/importers/kineto_ops.py) on hand-made op tables: a chain of copies collapses over
several rounds into its outermost op, which gets their self time; an op with two children, a different name,
a runtime call or another thread is not a copy."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.importers.kineto_ops import redispatch_copies


def ops_table(rows: list[tuple[str, str, str, int, int, int]]) -> pd.DataFrame:
    """(name, category, thread, start, dur, self) rows in start order, host ops."""
    table = pd.DataFrame(rows, columns=["name", "category", "stream", "start_ns", "dur_ns", "self_ns"])
    table.insert(0, "device", "cpu")
    table["step"] = 0
    for col in ("device", "category", "stream", "name"):
        table[col] = table[col].astype("category")
    return table


def collapse_redispatch(ops: pd.DataFrame) -> pd.DataFrame:
    """The table without its redispatch copies, their self time given to the ops they copy."""
    self_ns = ops["self_ns"].to_numpy().copy()
    copies = redispatch_copies(
        np.where((ops["device"] == "cpu").to_numpy(), pd.factorize(ops["stream"])[0], -1),
        (ops["category"] == "host").to_numpy(),
        pd.factorize(ops["name"])[0],
        ops["start_ns"].to_numpy(),
        (ops["start_ns"] + ops["dur_ns"]).to_numpy(),
        self_ns,
    )
    return ops.assign(self_ns=self_ns)[~copies].reset_index(drop=True)


def test_a_chain_of_copies_collapses_into_its_outer_op_over_rounds():
    table = ops_table(
        [
            ("aten::add", "host", "t1", 0, 100, 10),  # add > add > add > kernel launch: one op
            ("aten::add", "host", "t1", 1, 98, 20),
            ("aten::add", "host", "t1", 2, 96, 50),
            ("cudaLaunchKernel", "runtime", "t1", 3, 20, 20),
            ("aten::mul", "host", "t1", 200, 50, 10),  # two children named like it: not a copy
            ("aten::mul", "host", "t1", 201, 10, 10),
            ("aten::mul", "host", "t1", 220, 10, 10),
            ("aten::div", "host", "t2", 300, 50, 25),  # its child is a runtime call of its name: kept
            ("aten::div", "runtime", "t2", 301, 25, 25),
            ("aten::sum", "host", "t1", 400, 10, 5),  # on another thread than the op it overlaps: kept
            ("aten::sum", "host", "t2", 401, 5, 5),
        ]
    )
    out = collapse_redispatch(table)
    assert out["name"].astype(str).tolist() == [
        "aten::add",
        "cudaLaunchKernel",
        "aten::mul",
        "aten::mul",
        "aten::mul",
        "aten::div",
        "aten::div",
        "aten::sum",
        "aten::sum",
    ]
    assert out["self_ns"].tolist() == [80, 20, 10, 10, 10, 25, 25, 5, 5]
    assert out["self_ns"].sum() == table["self_ns"].sum()
    assert out.index.tolist() == list(range(len(out)))


def test_a_table_without_copies_has_none():
    table = ops_table([("aten::mm", "host", "t1", 0, 10, 10), ("aten::mm", "host", "t1", 20, 10, 10)])
    out = collapse_redispatch(table)
    assert out["self_ns"].tolist() == [10, 10] and out["name"].astype(str).tolist() == ["aten::mm"] * 2


def test_rows_in_any_order_give_the_same_copies():
    """The importer finds the copies before it sorts the ops by start: the file's order gives the same ones."""
    table = ops_table(
        [
            ("aten::add", "host", "t1", 0, 100, 10),
            ("aten::add", "host", "t1", 1, 98, 20),
            ("cudaLaunchKernel", "runtime", "t1", 3, 20, 20),
            ("aten::mul", "host", "t2", 5, 50, 30),
            ("aten::mul", "host", "t2", 5, 50, 40),  # identical intervals: the first listed is the outer one
        ]
    )
    shuffled = table.iloc[[3, 2, 4, 1, 0]].reset_index(drop=True)
    out = collapse_redispatch(shuffled).sort_values(["start_ns", "self_ns"]).reset_index(drop=True)
    assert out["self_ns"].tolist() == collapse_redispatch(table)["self_ns"].tolist() == [30, 20, 70]

"""HWTS decoding and Start/End pairing: the vectorised rules against a literal sequential walk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler.importers.ascend import framework_desc, hwts
from profiler.importers.ascend.slices import join_slices

JOB3_HWTS = "ascend/JOB3/hwts.log.data.45.dev.profiler_default_tag.1.slice_0"
JOB3_TASK_DESC = "ascend/JOB3/Framework.host.vm.task_desc_info.1.slice_0"


def _sequential_pairs(log_type: list[int], name: list[str]) -> list[int]:
    """RAW_FORMATS.md 6.2 as written: walk the mapped records, pairing Start + End of the same name."""
    pairs, i = [], 0
    while i + 1 < len(log_type):
        if log_type[i] == 0 and log_type[i + 1] == 1 and name[i] == name[i + 1]:
            pairs.append(i)
            i += 2
        else:
            i += 1
    return pairs


def test_job3_pairing_equals_the_sequential_walk(captures: Path):
    records, problems = hwts.decode_hwts(join_slices([captures / JOB3_HWTS]))
    tasks, _ = framework_desc.parse_task_desc(join_slices([captures / JOB3_TASK_DESC]))
    names = framework_desc.op_names(tasks)
    by_task_id = dict(zip(tasks["task_id"], tasks["full_name"]))
    mapped = [
        (t, by_task_id[k], s)
        for t, k, s in zip(records["log_type"].tolist(), records["task_id"].tolist(), records["syscnt"].tolist())
        if k in by_task_id and t <= 1
    ]
    walk = _sequential_pairs([m[0] for m in mapped], [m[1] for m in mapped])
    ex = hwts.executions(records, *framework_desc.task_key_map(tasks, names))
    assert problems == [] and len(walk) == len(ex) == 2817
    assert ex["start"].tolist() == [mapped[i][2] for i in walk]
    assert ex["dur"].tolist() == [mapped[i + 1][2] - mapped[i][2] for i in walk]
    assert [names[o] for o in ex["op"].tolist()] == [mapped[i][1] for i in walk]


def _records(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """Decoded-record columns from (log_type, task_id, stream_id, syscnt) rows."""
    log_type, task_id, stream_id, syscnt = (np.array(c) for c in zip(*rows))
    return pd.DataFrame(
        {
            "log_type": log_type.astype(np.uint8),
            "task_id": task_id.astype(np.uint16),
            "stream_id": stream_id.astype(np.uint32),
            "syscnt": syscnt.astype(np.int64),
        }
    )


def test_small_task_ids_are_keyed_per_stream_and_pairing_needs_adjacency():
    tasks = pd.DataFrame(
        {"full_name": ["A", "B", "C"], "block_dim": [1, 1, 1], "task_id": [7, 7, 30000], "stream_id": [3, 5, 3]}
    )
    names = framework_desc.op_names(tasks)
    records = _records(
        [
            (0, 7, 3, 100),
            (1, 7, 3, 110),  # A: task 7 on stream 3
            (0, 7, 5, 120),
            (1, 7, 5, 150),  # B: the same task id on stream 5
            (0, 7, 9, 160),
            (1, 7, 9, 170),  # task 7 on stream 9: not described
            (0, 30000, 11, 200),
            (0, 7, 3, 210),  # C opens, then A opens: C's Start is not followed by its End
            (1, 7, 3, 215),
            (1, 30000, 11, 230),  # A closes (paired); C's End has no adjacent Start
            (4, 30000, 11, 240),  # a PMU record is not a task record
        ]
    )
    ex = hwts.executions(records, *framework_desc.task_key_map(tasks, names))
    assert [names[o] for o in ex["op"]] == ["A", "B", "A"]
    assert ex["start"].tolist() == [100, 120, 210] and ex["dur"].tolist() == [10, 30, 5]
    assert ex["stream_id"].tolist() == [3, 5, 3]
    assert ex["key"].tolist() == hwts.task_keys(np.array([7, 7, 7]), np.array([3, 5, 3])).tolist()


def test_decode_reads_every_field_and_skips_whitespace_records(tmp_path: Path):
    records = np.zeros(4, dtype=hwts.HWTS_DTYPE)
    records["head"] = [0 | 8 | 3 << 4, 1, 4, 4 | 8]  # Start with flag + cnt 3, End, PMU, PMU without syscnt
    records["core_id"], records["block_id"], records["task_id"] = [2, 0, 0, 0], [5, 0, 0, 0], [25001, 25001, 9, 9]
    records["stream_id"], records["syscnt"], records["pmu_syscnt"] = [519, 519, 4, 4], [10, 20, 0, 0], [0, 0, 77, 88]
    blank = np.frombuffer(b" \t" * 32, dtype=np.uint8)
    path = tmp_path / "hwts"
    np.concatenate([records.view(np.uint8), blank]).tofile(path)
    decoded, problems = hwts.decode_hwts(join_slices([path]))
    assert problems == [] and len(decoded) == 4
    assert decoded[hwts.HWTS_COLUMNS].values.tolist() == [
        [0, 3, 1, 2, 5, 25001, 519, 10],
        [1, 0, 0, 0, 0, 25001, 519, 20],
        [4, 0, 0, 0, 0, 9, 4, 77],
        [4, 0, 1, 0, 0, 9, 4, -1],
    ]

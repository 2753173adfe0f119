"""Which steps measured the loop's data wait (analysis/step_trace.py `data_wait_measured_steps`): profview's own
measures are recorded all along, torch.profiler's DataLoader ranges only where op capture recorded."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.analysis.step_trace import data_wait_measured_steps

OPS = np.array([0, 12, 9, 0])  # ops captured in steps 1 and 2 only
STEP_TID = 7


def spans(*rows: tuple[str, str, int]) -> pd.DataFrame:
    return pd.DataFrame(
        {"kind": [r[0] for r in rows], "name": [r[1] for r in rows], "tid": [r[2] for r in rows]},
        columns=["kind", "name", "tid"],
    ).astype({"tid": np.int64})


def queues(*rows: tuple[str, int]) -> pd.DataFrame:
    return pd.DataFrame({"event": [r[0] for r in rows], "tid": [r[1] for r in rows]}, columns=["event", "tid"]).astype(
        {"tid": np.int64}
    )


TORCH_RANGE = ("span", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", STEP_TID)


def test_torch_ranges_alone_measure_the_captured_steps() -> None:
    measured = data_wait_measured_steps(spans(TORCH_RANGE, ("phase", "forward", STEP_TID)), queues(), STEP_TID, OPS)
    assert measured.tolist() == [False, True, True, False]


def test_profviews_own_measures_cover_every_step_with_ops_in_some() -> None:
    """The case the rule must still catch: a ProfiledDataLoader (data phases) or a probed queue's gets measure
    every step, also when op capture (and its DataLoader ranges) covers a few."""
    own = spans(TORCH_RANGE, ("phase", "data", STEP_TID))
    assert data_wait_measured_steps(own, queues(), STEP_TID, OPS).all()
    assert data_wait_measured_steps(spans(TORCH_RANGE), queues(("put", 3), ("get", STEP_TID)), STEP_TID, OPS).all()
    assert data_wait_measured_steps(spans(("phase", "data", 5)), queues(), -1, OPS).all()  # no stepping thread


def test_nothing_on_the_stepping_thread_measures_no_step() -> None:
    other = spans(("phase", "data", 3), ("span", TORCH_RANGE[1], 3))
    assert not data_wait_measured_steps(other, queues(("get", 3)), STEP_TID, OPS).any()
    assert not data_wait_measured_steps(spans(), queues(), STEP_TID, OPS).any()

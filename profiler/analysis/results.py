"""Run every analysis on a Run: the tables the exporters write and the viewer shows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..model import Run
from .ops import op_detail_table, op_type_table
from .queues import with_queue_summary
from .step_trace import step_trace


@dataclass
class Analysis:
    """The analysed tables of one rank."""

    run: Run
    step_trace: pd.DataFrame
    op_type: pd.DataFrame
    op_detail: pd.DataFrame
    extra_json: dict[str, Any] = field(default_factory=dict)   # file stem -> JSON document (queue summary, report)


def step_lane(run: Run) -> str:
    """Name of the thread that called step(), which the ops table uses as its stream."""
    tid = int(run.info.get("step_tid", -1))
    names = run.threads.loc[run.threads["tid"] == tid, "name"]
    return str(names.iloc[0]) if len(names) else ""


def analyse_run(run: Run) -> Analysis:
    """The step trace and op tables of a run (pure: the run in, tables out)."""
    trace = step_trace(run.steps, run.spans, run.instants, run.ops, run.queues,
                       step_tid=int(run.info.get("step_tid", -1)), step_lane=step_lane(run),
                       origin_unix_ns=int(run.info.get("clock", {}).get("origin_unix_ns", 0)))
    return with_queue_summary(Analysis(run=run, step_trace=trace, op_type=op_type_table(run.ops), op_detail=op_detail_table(run.ops)))

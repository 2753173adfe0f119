"""The findings: one module per question the advisor asks, and the one registry of them.

Each module declares a `QUESTION` (base.py): the data its rules read, its thresholds, its texts,
the page its findings belong to. Adding a finding is one new module and one line in `QUESTIONS`;
the advisor (`analysis/advisor.py`) runs them and keeps the verdict, the viewer reads their pages
from here. The order of `QUESTIONS` is the order of their thresholds in report_{rank}.json.
"""

from __future__ import annotations

from typing import Optional

from profiler.analysis.findings import (
    communication,
    device_compute,
    device_data,
    device_dependency,
    device_launch,
    device_memory,
    device_occupancy,
    device_precision,
    device_sync,
    input_pipeline,
    launch,
    memcpy,
    memory,
    operators,
    outliers,
    precision,
    recording,
    straggler,
    tail,
)
from profiler.analysis.findings.base import Question

QUESTIONS: tuple[Question, ...] = (
    input_pipeline.QUESTION,
    operators.QUESTION,
    precision.QUESTION,
    launch.QUESTION,
    tail.QUESTION,
    communication.QUESTION,
    outliers.QUESTION,
    straggler.QUESTION,
    recording.QUESTION,
    memory.QUESTION,
    device_sync.QUESTION,
    device_launch.QUESTION,
    device_data.QUESTION,
    device_dependency.QUESTION,
    memcpy.QUESTION,
    device_precision.QUESTION,
    device_compute.QUESTION,
    device_occupancy.QUESTION,
    device_memory.QUESTION,
)


def question_of(key: str, questions: tuple[Question, ...] = QUESTIONS) -> Optional[Question]:
    """The question whose findings carry `key` (a finding's key, or its kind when it has none):
    the one declaring the key itself, else the one declaring its kind (`op_hotspot:cast:GPU0` -> op_hotspot)."""
    for candidate in (key, key.split(":", 1)[0]):
        for question in questions:
            if candidate in question.keys:
                return question
    return None

"""The writers of a rank's output files, one module per file (docs/formats.md has their contents).

`WRITERS` is the one list: adding an output is one module with a `Writer` subclass (base.py) and
one line here. Files are written in this order, those read from the analysis first, then the
timeline's (written meanwhile on their own thread); profiler_info_{rank}.json lists them last.
"""

from __future__ import annotations

from profiler.export.writers.base import (
    AnalysisDocument,
    AnalysisWriter,
    SavedTimeline,
    TimelineWriter,
    WriteOptions,
    Writer,
)
from profiler.export.writers.data_queue import DataQueue
from profiler.export.writers.device_counters import DeviceCounters
from profiler.export.writers.events import EventFile
from profiler.export.writers.op_tables import OpDetail, OpShapes, OpStacks, OpType
from profiler.export.writers.step_trace import StepTrace
from profiler.export.writers.tensorboard_views import (
    CommOps,
    CommPieces,
    CommSplit,
    Kernels,
    MemoryCurve,
    MemoryEvents,
    Modules,
    OpMemory,
    StepActivity,
)
from profiler.export.writers.timeline import ChromeTrace

EVENT_FILE = EventFile()  # the timeline's saved form, written before the files rendered from it
WRITERS: list[Writer] = [
    StepTrace(),
    OpType(),
    OpDetail(),
    OpShapes(),
    OpStacks(),
    Kernels(),
    StepActivity(),
    Modules(),
    MemoryCurve(),
    MemoryEvents(),
    OpMemory(),
    CommSplit(),
    CommOps(),
    CommPieces(),
    DataQueue(),
    DeviceCounters(),
    AnalysisDocument("queue_summary"),
    AnalysisDocument("report"),
    ChromeTrace(),
    EVENT_FILE,
]

__all__ = ["EVENT_FILE", "WRITERS", "AnalysisWriter", "SavedTimeline", "TimelineWriter", "Writer", "WriteOptions"]

"""profview: a step-aware performance profiler for deep-learning training and inference loops.

from profiler import Profiler
profiler = Profiler()          # starts recording into ./profiler_data
...                            # the loop, with profiler.step() at the end of each iteration
profiler.analyse()             # stops, analyses, writes CSV / JSON / Chrome trace
"""

from profiler._version import __version__
from profiler.capture import Collectives, GpuCounters, HostCounters, Source, TorchHooks, TorchOps
from profiler.capture.queues import QueueProbe
from profiler.config import Settings
from profiler.data.pipeline import Pipeline, device_prefetch, prefetch
from profiler.data.queues import ProfiledQueue
from profiler.data.torch_data import ProfiledDataLoader, TorchDeviceCopy
from profiler.errors import IncompleteInputWarning, ProfilerUsageWarning, ProfviewError
from profiler.profiler import Profiler
from profiler.schedule import ProfilerAction, schedule

__all__ = [
    "Collectives",
    "GpuCounters",
    "HostCounters",
    "Pipeline",
    "ProfiledDataLoader",
    "ProfiledQueue",
    "Profiler",
    "ProfilerAction",
    "ProfilerUsageWarning",
    "IncompleteInputWarning",
    "ProfviewError",
    "QueueProbe",
    "Settings",
    "Source",
    "TorchDeviceCopy",
    "TorchHooks",
    "TorchOps",
    "device_prefetch",
    "prefetch",
    "schedule",
    "__version__",
]

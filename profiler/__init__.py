"""profview: a step-aware performance profiler for deep-learning training and inference loops.

    from profiler import Profiler
    profiler = Profiler()          # starts recording into ./profiler_data
    ...                            # the loop, with profiler.step() at the end of each iteration
    profiler.analyse()             # stops, analyses, writes CSV / JSON / Chrome trace
"""
from ._version import __version__
from .errors import ProfilerUsageWarning, ProfviewError
from .profiler import Profiler
from .schedule import ProfilerAction, schedule
from .sources.pipeline import Pipeline, device_prefetch, prefetch
from .sources.queues import ProfiledQueue, QueueProbe
from .sources.torch_data import ProfiledDataLoader, TorchDeviceCopy

__all__ = ["Pipeline", "ProfiledDataLoader", "ProfiledQueue", "Profiler", "ProfilerAction", "ProfilerUsageWarning",
           "ProfviewError", "QueueProbe", "TorchDeviceCopy", "device_prefetch", "prefetch", "schedule", "__version__"]

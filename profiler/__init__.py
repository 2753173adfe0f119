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

__all__ = ["Profiler", "ProfilerAction", "ProfilerUsageWarning", "ProfviewError", "schedule", "__version__"]

"""The one place source classes are found: a recording lists its sources by name (the raw store's
`sources` table, `profiler_info.sources`), and the analysis asks here which classes merge their data.

* Built-in sources: `BUILT_IN`.
* A source from outside the production path (a plug-in package; the reference device is one, see
  setup.cfg) is declared in its distribution's `profview.sources` entry-point group:

      [options.entry_points]
      profview.sources =
          my_device = my_package.device:MyDevice

  so that `profview analyse DIR`, run later in a fresh process, finds its `merge`. Entry points are
  loaded only for names no built-in source claims. A raw store is data: no module path read from it
  is ever imported, only the classes installed packages declare.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from profiler.capture.base import MARKERS, Source
from profiler.capture.distributed import Collectives
from profiler.capture.host import HostCounters
from profiler.capture.mindspore import MindSporeCapture
from profiler.capture.nvml import GpuCounters
from profiler.capture.torch_capture import TorchOps
from profiler.capture.torch_hooks import TorchHooks
from profiler.errors import ProfilerUsageWarning
from profiler.plugins import load_plugins

#: the sources this package holds
BUILT_IN: tuple[type[Source], ...] = (HostCounters, GpuCounters, TorchHooks, TorchOps, Collectives, MindSporeCapture)
#: the entry-point group through which other distributions declare their Source classes
PLUGIN_GROUP = "profview.sources"


@functools.cache
def plugin_sources() -> tuple[type[Source], ...]:
    """The Source classes installed distributions declare in PLUGIN_GROUP (loaded once per process).
    One that cannot be loaded, or is not a Source, is left out with a warning."""
    return tuple(
        load_plugins(
            PLUGIN_GROUP,
            "source",
            lambda cls, _: None if isinstance(cls, type) and issubclass(cls, Source) else "not a profiler Source class",
            consequence="recordings naming it are analysed without its data",
            category=ProfilerUsageWarning,
        )
    )


def merging_sources(recorded: Iterable[str]) -> list[type[Source]]:
    """The classes whose `merge` applies to a recording listing these source names, in merge order
    (stage, then name): each class once, however many of its sources recorded."""
    names = [str(n) for n in recorded if n != MARKERS]
    found = _claiming(names, BUILT_IN)
    unclaimed = [n for n in names if not any(cls.recorded_as(n) for cls in found)]
    if unclaimed:
        found |= _claiming(unclaimed, plugin_sources())
    return sorted(found, key=lambda cls: (cls.merge_stage, cls.name, cls.__module__, cls.__qualname__))


def _claiming(names: list[str], classes: Iterable[type[Source]]) -> set[type[Source]]:
    return {cls for cls in classes for name in names if cls.recorded_as(name)}

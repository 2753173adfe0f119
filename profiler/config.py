"""How a Profiler is configured: what it records (its sources), how (`Settings`), and the keyword
shortcuts that build both.

Every source, built-in or not, is a `Source` object configured by its own arguments:

    Profiler(sources=[HostCounters(interval_s=0.5), TorchOps(schedule(wait=5, warmup=1, active=3))])

A Profiler records with default sources: host counters, GPU counters, and collectives when
torch.distributed is initialised. A source given in `sources=` replaces the default of its kind
(so its own options hold); other sources are added to the defaults. The keywords of `Shortcuts`
(`host_counters=False`, `framework="torch"`, `memory_budget_mb=128`, ...) configure the defaults
and the settings; a shortcut that configures only sources given in `sources=` is an error, as it
would be ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict

from profiler.capture import Collectives, GpuCounters, HostCounters, Source, TorchOps
from profiler.capture.distributed import initialised_dist
from profiler.formats.columns import TIMELINE_MAX_EVENTS
from profiler.schedule import Schedule


@dataclass(frozen=True)
class Settings:
    """How a Profiler records and analyses (what it records are its sources).

    Args:
        memory_budget_mb: cap on the memory the recording buffers may hold between flushes;
            records beyond it are counted as dropped (profiler_info says how many).
        flush_interval_s: how often the background flusher moves records to the raw store
            (a SIGKILLed run loses at most about this much).
        clock_sync: with torch.distributed initialised, measure this rank's clock offset to
            rank 0 at start (a few all_gather rounds: a collective call, every rank must construct
            its Profiler at the same point; pass False when only some ranks create one).
        gzip_timeline: write timeline_{rank}.json.gz instead of .json.
        timeline_max_events: the most events timeline_{rank}.json holds; a run with more gets the
            trace of its key steps (median, slowest, outliers) and `profview export --chrome`
            writes any other from the event file (docs/formats.md).
        advisor_thresholds: overrides of the advisor's thresholds (name -> value, see
            docs/formats.md "report"), checked now, stored in the config and used by every
            analysis of the run.
    """

    memory_budget_mb: float = 64
    flush_interval_s: float = 0.2
    clock_sync: bool = True
    gzip_timeline: bool = False
    timeline_max_events: int = TIMELINE_MAX_EVENTS
    advisor_thresholds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (
            isinstance(self.timeline_max_events, bool)
            or not isinstance(self.timeline_max_events, int)
            or self.timeline_max_events < 0
        ):
            raise ValueError(
                f"timeline_max_events wants a whole number of events >= 0, not {self.timeline_max_events!r}"
            )
        object.__setattr__(self, "advisor_thresholds", _checked_thresholds(self.advisor_thresholds))


class Shortcuts(TypedDict, total=False):
    """The keywords `Profiler(...)` accepts besides its own parameters: each configures a default
    source or a field of `Settings` (the same name there)."""

    host_counters: bool  # HostCounters (psutil) as a default source
    gpu_counters: bool  # GpuCounters (NVML) as a default source
    counter_interval_s: float  # the default counters' interval_s
    collectives: bool  # Collectives as a default source (when torch.distributed is initialised)
    framework: Optional[str]  # "torch": TorchOps as a default source
    ops_schedule: Optional[Schedule]  # the op capture's schedule (framework="torch", attach())
    record_shapes: bool  # the op capture's torch.profiler options
    profile_memory: bool
    with_stack: bool
    with_modules: bool
    memory_budget_mb: float  # Settings
    flush_interval_s: float
    clock_sync: bool
    gzip_timeline: bool
    timeline_max_events: int
    advisor_thresholds: Optional[Mapping[str, float]]


#: The shortcuts that set a source option, and the kinds of source whose defaults they configure.
OPTION_SHORTCUTS: dict[str, tuple[type[Source], ...]] = {
    "counter_interval_s": (HostCounters, GpuCounters),
    "ops_schedule": (TorchOps,),
    "record_shapes": (TorchOps,),
    "profile_memory": (TorchOps,),
    "with_stack": (TorchOps,),
    "with_modules": (TorchOps,),
}
_SETTINGS = tuple(f.name for f in dataclasses.fields(Settings))


@dataclass
class Configuration:
    """A Profiler's sources and settings, once the shortcuts are applied."""

    sources: list[Source]
    settings: Settings
    op_capture: TorchOps  # the sources' TorchOps, else the one attach(ops=True) adds
    framework: Optional[str]  # "torch" when ops are captured from the start


def configure(
    sources: Iterable[Source] = (), settings: Optional[Settings] = None, shortcuts: Optional[Mapping[str, Any]] = None
) -> Configuration:
    """The sources and settings of `Profiler(sources=..., settings=..., **shortcuts)` (see the module doc)."""
    given = list(sources)
    short = dict(shortcuts or {})
    _check_names(short)
    framework = short.get("framework")
    if framework not in (None, "torch"):
        raise ValueError(f"framework={framework!r}: the supported framework is 'torch' (or None)")
    for name, kinds in OPTION_SHORTCUTS.items():
        if name in short and all(_has(given, kind) for kind in kinds):
            kind = " and ".join(k.__name__ for k in kinds)
            raise ValueError(
                f"{name}= configures default sources, but the {kind} given in sources= has its own "
                "options: set them there"
            )
    interval = short.get("counter_interval_s", 0.1)
    op_capture = next((s for s in given if isinstance(s, TorchOps)), None)
    if op_capture is None:
        op_capture = TorchOps(
            short.get("ops_schedule"),
            record_shapes=short.get("record_shapes", False),
            profile_memory=short.get("profile_memory", False),
            with_stack=short.get("with_stack", False),
            with_modules=short.get("with_modules", False),
        )
    built: list[Source] = []
    if short.get("host_counters", True) and not _has(given, HostCounters):
        built.append(HostCounters(interval))
    if short.get("gpu_counters", True) and not _has(given, GpuCounters):
        built.append(GpuCounters(interval))
    built += given
    if short.get("collectives", True) and not _has(given, Collectives) and initialised_dist() is not None:
        built.append(Collectives())
    if framework == "torch" and not _has(given, TorchOps):
        built.append(op_capture)
    chosen = dataclasses.replace(settings or Settings(), **{k: v for k, v in short.items() if k in _SETTINGS})
    return Configuration(built, chosen, op_capture, "torch" if _has(built, TorchOps) else None)


def _has(sources: list[Source], kind: type[Source]) -> bool:
    return any(isinstance(s, kind) for s in sources)


def _check_names(shortcuts: Mapping[str, Any]) -> None:
    """An unknown keyword is a TypeError, as Python's own, with the closest known name."""
    known = tuple(Shortcuts.__annotations__)
    for name in shortcuts:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"Profiler() got an unexpected keyword argument {name!r}{hint}")


def _checked_thresholds(thresholds: Optional[Mapping[str, float]]) -> dict[str, float]:
    """The advisor overrides as given, after checking their names and values (a typo fails now, not at analyse())."""
    if not thresholds:
        return {}
    from profiler.analysis.advisor import resolve_thresholds

    resolved = resolve_thresholds(thresholds)
    return {name: resolved[name] for name in thresholds}

"""Which steps are recorded: `schedule(wait=, warmup=, active=, repeat=, skip_first=)`, as in torch.profiler."""

from __future__ import annotations

from enum import Enum
from typing import Callable


class ProfilerAction(Enum):
    """What the profiler does during a step."""

    NONE = 0  # not recorded
    WARMUP = 1  # sources warm up (e.g. torch's Kineto); the step trace is not recorded
    RECORD = 2  # recorded
    RECORD_AND_SAVE = 3  # recorded, and the last step of an active window: on_trace_ready fires after it

    @property
    def records(self) -> bool:
        return self in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


Schedule = Callable[[int], ProfilerAction]

#: What a step boundary does to the recording window: `CLOSE` (the window ends: its stop sample, recording
#: off), then the sources are told the new action, then `SAVE` (on_trace_ready), then `OPEN` (a new window:
#: recording on, its start sample). By (the ended step's action, the new step's action), every pair
#: listed, as torch.profiler's own action map lists its transitions.
CLOSE, SAVE, OPEN = "close", "save", "open"
_N, _W, _R, _S = ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE
WINDOW_TRANSITIONS: dict[tuple[ProfilerAction, ProfilerAction], tuple[str, ...]] = {
    (_N, _N): (),
    (_N, _W): (),
    (_N, _R): (OPEN,),
    (_N, _S): (OPEN,),
    (_W, _N): (),
    (_W, _W): (),
    (_W, _R): (OPEN,),
    (_W, _S): (OPEN,),
    (_R, _N): (CLOSE, SAVE),
    (_R, _W): (CLOSE, SAVE),
    (_R, _R): (),
    (_R, _S): (),
    (_S, _N): (CLOSE, SAVE),
    (_S, _W): (CLOSE, SAVE),
    (_S, _R): (CLOSE, SAVE, OPEN),  # a window saved at its last step, the next one begins at once
    (_S, _S): (CLOSE, SAVE, OPEN),  # a one-step window after another
}


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0) -> Schedule:
    """Skip `skip_first` steps, then cycle: `wait` idle steps, `warmup` steps, `active` recorded steps.

    `repeat` bounds the number of cycles (0 = until the loop ends). Step numbers are 0-based and
    count every `step()` call, as in torch.profiler.schedule.
    """
    if min(wait, warmup, skip_first, repeat) < 0 or active < 1:
        raise ValueError("schedule: wait, warmup, repeat and skip_first must be >= 0 and active >= 1")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        k = step - skip_first
        if repeat and k // cycle >= repeat:
            return ProfilerAction.NONE
        pos = k % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def always_record(step: int) -> ProfilerAction:
    """The default: every step from start() to stop() is recorded as one window."""
    return ProfilerAction.RECORD


def as_action(value: object) -> ProfilerAction:
    """Accept our ProfilerAction or torch.profiler's (matched by name) from a user schedule."""
    if isinstance(value, ProfilerAction):
        return value
    name = getattr(value, "name", None)
    if name in ProfilerAction.__members__:
        return ProfilerAction[name]
    raise TypeError(f"schedule returned {value!r}; expected a ProfilerAction")


#: How far ahead next_change() reads a schedule (its cost is paid once per run of equal steps).
LOOKAHEAD = 1024
#: A step number no run reaches: "never changes".
NEVER = 1 << 62


def next_change(schedule: Schedule, step: int, lookahead: int = LOOKAHEAD) -> int:
    """The first step after `step` whose start must consult the schedule: its action differs from
    step's, or step's ends a window (RECORD_AND_SAVE). At most step + lookahead; NEVER for
    always_record. The steps in between can be entered without reading the schedule."""
    if schedule is always_record:
        return NEVER
    action = as_action(schedule(step))
    if action is ProfilerAction.RECORD_AND_SAVE:
        return step + 1
    for k in range(step + 1, step + lookahead):
        if as_action(schedule(k)) is not action:
            return k
    return step + lookahead

"""The recording window's transition table (profiler/schedule.py WINDOW_TRANSITIONS): every pair of
actions is listed, and the table is the rule docs/user-guide.md states for schedules."""

from __future__ import annotations

import itertools

from profiler.schedule import CLOSE, OPEN, SAVE, WINDOW_TRANSITIONS, ProfilerAction


def test_every_pair_of_actions_is_listed_and_follows_the_rule():
    """A window ends after a step that recorded when the next one does not, or after the last step of
    an active window (RECORD_AND_SAVE); it is saved when it ends; one opens at a recording step that
    follows a step outside a window or a window's end."""
    assert set(WINDOW_TRANSITIONS) == set(itertools.product(ProfilerAction, repeat=2))
    for (ended, new), change in WINDOW_TRANSITIONS.items():
        closes = ended.records and (not new.records or ended is ProfilerAction.RECORD_AND_SAVE)
        assert (CLOSE in change) == closes and (SAVE in change) == closes, (ended, new)
        assert (OPEN in change) == (new.records and (not ended.records or closes)), (ended, new)
        assert list(change) == sorted(change, key=[CLOSE, SAVE, OPEN].index)  # close, save, then open

"""What a report page declares about itself (`Page`): its tab, its builder, when it is shown, and
what the live report (`profview DIR --live`) does with it.

Every module of viewer/pages/ ends with its `PAGE`; viewer/report.py lists them in tab order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from viewer.context import Context


class Live(Enum):
    """How the live report of a recording in progress shows a page."""

    HIDDEN = "hidden"  # not in the live report: its data only exists once a run is analysed
    AT_LOAD = "at load"  # the recent window as it was when the live page was loaded
    REFRESHED = "refreshed"  # re-built every time the live analysis reads a newer window


def always(ctx: Context) -> bool:
    return True


@dataclass(frozen=True)
class Page:
    """One tab: a key for the URL fragment and the page's element id, a title, the builder of its
    body HTML (from the Context's RunData only), whether `ctx` has something for it, and its `live` mode."""

    key: str
    title: str
    build: Callable[[Context], str]
    live: Live = Live.HIDDEN
    shown: Callable[[Context], bool] = always

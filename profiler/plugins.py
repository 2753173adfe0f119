"""Loading what other distributions declare in an entry-point group: the one loader of every registry
(importers: `profview.importers`, sources: `profview.sources`). A plug-in that cannot be loaded, or that
its registry refuses, is left out with one warning sentence; the others load as if it were not there."""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points
from typing import Any, Callable, Optional


def load_plugins(
    group: str,
    what: str,
    refuse: Callable[[Any, list[Any]], Optional[str]],
    consequence: str = "it is left out",
    category: type[Warning] = UserWarning,
) -> list[Any]:
    """The objects the installed distributions declare in `group`, in a stable order (by name, then value).

    `what` names a plug-in in the warnings ("the importer plug-in toy (pkg:IMPORTER) ..."); `refuse(obj,
    loaded)` says why an object cannot join (given the ones loaded before it), or None; `consequence` ends
    the warning of one that cannot be loaded.
    """
    loaded: list[Any] = []
    for point in sorted(entry_points(group=group), key=lambda p: (p.name, p.value)):
        label = f"the {what} plug-in {point.name} ({point.value})"
        try:
            obj = point.load()
        except Exception as exc:  # a broken plug-in must not stop everything else
            warnings.warn(
                f"{label} cannot be loaded ({type(exc).__name__}: {exc}); {consequence}", category, stacklevel=3
            )
            continue
        problem = refuse(obj, loaded)
        if problem:
            warnings.warn(f"{label} is left out: {problem}", category, stacklevel=3)
            continue
        loaded.append(obj)
    return loaded
